"""The centralised NOS update (CNU, Algorithm 2 of seed 003): one node, the query node N_q, keeps
every stream's reported statistics and re-plans.

1. A node whose stream changed past the threshold sends a ``StatsReport`` to N_q (one message).
2. N_q runs Algorithm 1 on the reported statistics.  If the plan is the same, nothing else
   happens.  Otherwise N_q lowers it, compares every node's operator set with the old one and
   sends the new plan to the *affected* nodes (``PlanUpdate``: n − 1 messages when all n nodes
   are affected and N_q is one of them).  The runtime switches every node of the query to the new
   plan generation, so a node whose operator set does not change gets a notification
   (``PlanUpdate`` with ``notify``, counted with the migration).
3. For every window a node newly keeps, N_q asks the stream's home to copy it there
   (``WindowRequest``: the paper's "move W_j to N_k"); windows kept in both plans stay put.
4. The switch itself is the migration's (:mod:`.migration`).  Reports that come in meanwhile
   wait; N_q re-plans with all of them once its own node has switched (one plan at a time).
"""
from __future__ import annotations

from typing import Any, Optional

from joinlib.adaptive.jep import JEP, nos_changes
from joinlib.adaptive.migration import generation_cap
from joinlib.adaptive.planner import Eq12, algorithm1
from joinlib.adaptive.protocol import Message, PlanUpdate, StatsReport, WindowRequest
from joinlib.adaptive.stats import StreamStatistics, declared, stats_data, stats_of, with_stats
from joinlib.model import Query
from joinlib.plan.ir import lower


class CnuPlanner:
    """The planner at N_q (``site``): reported statistics, the current plan and generation."""

    def __init__(self, site: str, query: Query, jep: JEP, model: Optional[Eq12] = None, gen: int = 0) -> None:
        """``gen``: the generation of ``jep`` (0, or a replanned run's first, docs/live.md "Replan"); the rounds
        are numbered from 1 all the same (a plan change's round is its generation less ``base``)."""
        self.site, self.q, self.model = site, query, model or Eq12()
        self.jep, self.gen, self.base = jep, gen, gen
        self.reported = {s.name: declared(s) for s in query.streams}
        self.last_epoch: dict[str, int] = {}
        self.pending: list[int] = []      # reports not yet planned with
        self.busy = False                 # a switch is under way

    def plan_query(self) -> Query:
        """The query with the reported statistics (what Algorithm 1 plans with)."""
        return with_stats(self.q, self.reported)

    def on_report(self, mid: int, report: StatsReport) -> list[Message]:
        if report.epoch <= self.last_epoch.get(report.stream, -1):
            return []   # a copy, or older than what we have
        self.last_epoch[report.stream] = report.epoch
        self.reported[report.stream] = report.stats
        self.pending.append(mid)
        return self.replan()

    def switched(self) -> list[Message]:
        """N_q's node finished the switch: plan again with what came in meanwhile."""
        self.busy = False
        return self.replan()

    def replan(self) -> list[Message]:
        """Algorithm 2, when no switch is under way and a report is waiting."""
        if self.busy or not self.pending:
            return []
        triggers, self.pending = tuple(self.pending), []
        new = algorithm1(self.plan_query(), self.model)
        if new == self.jep or self.gen >= generation_cap(self.gen):
            return []   # the same plan, or no generation number left in the run's block (never, in practice)
        old_ir, new_ir = lower(self.q, self.jep.to_plan(self.q)), lower(self.q, new.to_plan(self.q))
        self.jep, self.gen, self.busy = new, self.gen + 1, True
        out, mid = [], self.gen - self.base
        changes = nos_changes(old_ir, new_ir)
        sites = {s.name: s.site for s in self.q.streams}
        for node in self.q.sites:
            ch = changes.get(node)
            notify = ch is None or not ch.affected
            out.append(Message(self.site, node, self.q.name, mid, PlanUpdate(self.gen, notify, new, triggers)))
        for node in self.q.sites:
            for stream in changes[node].windows if node in changes else ():
                out.append(Message(self.site, sites[stream], self.q.name, mid, WindowRequest(stream, node)))
        return out

    # ------------------------------------------------------------------ checkpoints
    def snapshot(self) -> dict[str, Any]:
        return {"jep": self.jep.to_json(), "gen": self.gen, "base": self.base, "busy": self.busy,
                "pending": list(self.pending), "reported": {n: stats_data(s) for n, s in self.reported.items()},
                "last": dict(self.last_epoch)}

    def restore(self, data: dict[str, Any]) -> None:
        self.jep, self.gen, self.busy = JEP.from_json(data["jep"]), data["gen"], data["busy"]
        self.base = data.get("base", 0)
        self.pending = list(data["pending"])
        self.reported = {n: stats_of(s) for n, s in data["reported"].items()}
        self.last_epoch = dict(data["last"])

    def reported_stats(self) -> dict[str, StreamStatistics]:
        return dict(self.reported)
