"""A ``plan`` message compiled against its query: the one place the rules of a plan message live.

:func:`compile_plan` turns a :class:`~joinlib.control.messages.PlanMessage` into the
:data:`~joinlib.control.run_plan.RunPlan` it asks for, or raises :class:`~joinlib.errors.PlanError` for what
cannot run.  :func:`joinlib.control.check.check_control` compiles every plan message before anyone acts on it,
and the node runs what that compiled (:class:`Compiled`): a plan message is parsed once.

Pure: no I/O, no client libraries.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping, Optional

from joinlib.adaptive.service import config_of, initial_jep
from joinlib.control.messages import PlanMessage
from joinlib.control.run_plan import AdaptiveRun, Generations, PartitionedRun, RunPlan, TreesRun
from joinlib.errors import PlanError
from joinlib.mjoin.derived import TreeProgram, lower_tree
from joinlib.mjoin.tree_plans import PartitionedTrees, SharedTrees
from joinlib.model import Query
from joinlib.plan.logical import from_json
from joinlib.plan.partitioned import Partitioned, is_partitioned_json
from joinlib.pmjoin.tree import from_json as tree_from_json
from joinlib.query import parse_query
from joinlib.runtime.deploy import generations
from joinlib.runtime.instance import InstanceSpec

_TREE_KEYS = ("mjoin_tree", "mjoin_trees", "mjoin_trees_of")


@dataclass(frozen=True)
class Compiled:
    """A plan message compiled: its query, what it runs and, once :meth:`lowered` (but for trees, which lower
    per operator), its instance specs."""

    query: Query
    plan: RunPlan
    specs: tuple[InstanceSpec, ...] = ()
    first_epoch: int = 0   # a replanned run's first head epoch (docs/live.md "Replan"): the epochs before are not its
    gen_base: int = 0      # ... and the number of its first plan generation (after the replaced run's)

    @property
    def partitioned(self) -> Optional[Partitioned]:
        return self.plan.plan if isinstance(self.plan, PartitionedRun) else None

    @property
    def adaptive(self) -> Optional[AdaptiveRun]:
        return self.plan if isinstance(self.plan, AdaptiveRun) else None

    def lowered(self) -> Compiled:
        """With the instance specs of its generations (or partitions); PlanError for plans that cannot be."""
        if self.specs or isinstance(self.plan, TreesRun):
            return self
        specs = generations(self.query, self.plan.plans)
        if self.first_epoch or self.gen_base:   # a replanned run: head epochs from first_epoch, generations renumbered
            specs = [replace(s, gen=s.gen + self.gen_base, start=max(s.start, self.first_epoch)) for s in specs
                     if s.stop is None or s.stop >= self.first_epoch]
        return replace(self, specs=tuple(specs))


def compile_message(msg: PlanMessage, where: str) -> Compiled:
    """The query of ``msg`` and what it runs, lowered; errors prefixed ``where`` (PlanError for what cannot run)."""
    q = parse_query(msg.query, where)
    try:
        return compiled_of(q, msg).lowered()
    except PlanError as e:
        raise PlanError(f"{where}: {e}") from None


def compiled_of(q: Query, msg: PlanMessage) -> Compiled:
    """``msg`` compiled against its parsed query ``q`` (not lowered yet); a replanned run (``msg.replan``) only
    as a static, partitioned or adaptive plan of a live query that starts at or after epoch 1."""
    plan = compile_plan(q, msg)
    rp = msg.replan
    if rp is None:
        return Compiled(q, plan)
    if msg.live is None:
        raise PlanError("a replanned run ('replan') is a live query's: the plan message needs 'live'")
    if not isinstance(plan, (Generations, PartitionedRun, AdaptiveRun)) or msg.scale_out:
        raise PlanError("a replanned run runs a static plan, a partitioned one (pmjoin) without scale-out or an "
                        "adaptive one")
    first = rp.switch_epoch(msg.live.origin_ms, q.execution.interval_ms)
    if first < 1 or rp.gen < 1:
        raise PlanError(f"replan: the switch ({rp.switch_ms} ms) must lie after the run's origin "
                        f"({msg.live.origin_ms} ms) and its first generation be 1 or more, not {rp.gen}")
    return Compiled(q, plan, first_epoch=first, gen_base=rp.gen)


def is_tree_json(plan: Any) -> bool:
    """Is a plan message's ``plan`` an MJoin tree (or a tree per partition, or several queries' trees)?"""
    return type(plan) is dict and any(k in plan for k in _TREE_KEYS)


def compile_plan(q: Query, msg: PlanMessage) -> RunPlan:
    """What a plan message runs against its parsed query ``q``: MJoin trees, a partitioned plan (PMJoin), an
    adaptive plan, or plan generations; :class:`~joinlib.errors.PlanError` for what cannot run."""
    if is_tree_json(msg.plan):  # an MJoin tree: an operator query per MJoin (joinlib.node.tree_service)
        return compile_trees(q, msg)
    if is_partitioned_json(msg.plan):  # PMJoin: a plan per partition, no switches, not adaptive
        if msg.switches or msg.adaptive is not None:
            raise PlanError("a partitioned plan has no 'switches' and is not adaptive")
        return PartitionedRun(Partitioned.from_json(q, dict(msg.plan)))
    if msg.scale_out:
        raise PlanError("scale_out needs a partitioned plan (pmjoin): its partitions are what the instances share")
    gens = [(0, from_json(q, dict(msg.plan)))] + [(sw.from_epoch, from_json(q, dict(sw.plan)))
                                                  for sw in msg.switches or ()]
    if msg.adaptive is None:
        return Generations(tuple(gens))
    # re-planned while running: its configuration and seed 003's plan
    if len(gens) > 1:
        raise PlanError("an adaptive plan chooses its own switches: no 'switches'")
    config = config_of(msg.adaptive, q)
    return AdaptiveRun(config, gens[0][1], initial_jep(q, msg.plan))


def compile_trees(q: Query, msg: PlanMessage) -> TreesRun:
    """The trees of a plan message whose plan is ``{"mjoin_tree": ...}`` (a
    :class:`~joinlib.mjoin.derived.TreeProgram`), ``{"mjoin_trees": [...], "by": ..., "function": ...}``
    (:class:`~joinlib.mjoin.tree_plans.PartitionedTrees`) or ``{"mjoin_trees_of": [{"query": ..., "mjoin_tree":
    ...}, ...]}`` (:class:`~joinlib.mjoin.tree_plans.SharedTrees`): no switches, not adaptive.  A single tree may
    have live sources (each base stream is read by one operator, so one ingest decides its records) and may run
    one operator only (:func:`tree_scope`)."""
    if msg.switches or msg.adaptive is not None:
        raise PlanError("an MJoin tree plan has no 'switches' and is not adaptive")
    if msg.scale_out:
        raise PlanError("MJoin tree plans do not scale out: only a partitioned plan (pmjoin) shares a site's "
                        "partitions between instances")
    live = [s.name for s in q.streams if s.source is not None and s.source.live]
    several = "mjoin_trees" in msg.plan or "mjoin_trees_of" in msg.plan
    if several and (live or msg.live is not None):
        raise PlanError(f"partitioned or shared-at-once MJoin trees run on replayed streams; {', '.join(live)} "
                        "have live sources (a stream read by several operators would need one ingest for all; "
                        "submit the trees one by one to share operators: docs/multiquery.md)")
    if live and msg.live is None:
        raise PlanError(f"{', '.join(live)} have live sources: the plan message needs 'live' (origin and start "
                        "offsets), as 'joinlib submit' writes it")
    if "mjoin_trees" in msg.plan:
        return TreesRun(PartitionedTrees.from_json(q, msg.plan))
    if "mjoin_trees_of" in msg.plan:
        return TreesRun(SharedTrees.from_json(q, msg.plan))
    prog = lower_tree(q, tree_from_json(msg.plan["mjoin_tree"]))
    only, external = tree_scope(prog, msg.plan)
    return TreesRun(prog, only, external)


def tree_scope(prog: TreeProgram, plan: Mapping[str, Any]) -> tuple[Optional[int], dict[str, dict[str, Any]]]:
    """Which operator of ``prog`` a plan message with ``only`` runs, and where its derived inputs come from.

    ``{"mjoin_tree": T, "only": "S1+S2", "external": {"S1+S2": {"op": P, "run": R, "origin_ms": O}}}``: with
    ``only`` (a derived stream's name) the message runs that operator alone and publishes its results as the
    derived stream, for any later reader (docs/multiquery.md "Shared operators"); without it, with
    ``external``, the root alone.  ``external`` names, per derived input, the operator query ``P`` (run
    ``R``, origin ``O``) already publishing it on ``src.P.out``.  Returns (index of the operator run alone,
    or None for the whole tree; the external inputs)."""
    only, ext = plan.get("only"), plan.get("external")
    if only is None and ext is None:
        return None, {}
    ext = {} if ext is None else ext
    if type(ext) is not dict or not all(type(v) is dict and type(v.get("op")) is str and type(v.get("run")) is str
                                        and type(v.get("origin_ms")) is int for v in ext.values()):
        raise PlanError("plan.external is {derived stream: {'op': operator query, 'run': its run, "
                        "'origin_ms': its origin}}")
    names = {op.output: i for i, op in enumerate(prog.ops)}
    if only is not None and (type(only) is not str or only not in names or names[only] == len(prog.ops) - 1):
        raise PlanError(f"plan.only: {short(only)} is not an inner operator's derived stream "
                        f"(one of {sorted(n for n, i in names.items() if i < len(prog.ops) - 1)})")
    i = names[only] if only is not None else len(prog.ops) - 1
    op = prog.ops[i]
    derived = {s.name for s in op.query.streams if op.is_derived(s.name)}
    if set(ext) != derived:
        raise PlanError(f"plan.external must name the producer of each derived input of {op.name} "
                        f"({sorted(derived)}), not {sorted(ext)}")
    return i, ext


def short(value: Any, n: int = 80) -> str:
    """``value`` as text for an error message, cut to ``n`` characters."""
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= n else text[: n - 3] + "..."
