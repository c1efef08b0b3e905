"""What a node service needs to run an adaptive plan on Kafka, without any I/O (docs/adaptive.md,
"Cluster mode").

* The ``adaptive`` object of a ``plan`` control message (:func:`config_json`, :func:`config_of`):
  the configuration every node of the run uses, so that CNU and DNU compute the same plans.
* :class:`Tally`: what a node's protocol messages cost, per round (the embedded report's
  :class:`~.embedded.Meter`, whose raw counts go into the node's ``done``), and how many it sent to
  and received from each peer -- the counts of the termination check.
* :func:`quiescent`: may the nodes of an adaptive run stop?  A node whose host has finished its last
  epoch must still answer the protocol (a round started near the end needs every node's
  LOCAL_READY / GLOBAL_READY and the windows it copies), so it publishes ``done`` and serves on
  until every node's latest ``done`` says it is idle and, per link, the messages the sender counted
  are the messages the receiver counted.  Each link is one Kafka partition written by one producer
  (FIFO), and an idle node sends only in answer to a message: equal counts mean no message is in
  flight and none will be sent (a node that gets one after its ``done`` becomes busy and publishes
  a new ``done`` when idle again).
* :func:`merge`: the ``adaptive`` section of the cluster report from the nodes' ``done``.
"""
from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import Any, Iterable, Mapping, Optional

from joinlib.adaptive import planner as planner_module
from joinlib.adaptive.config import AdaptiveConfig
from joinlib.adaptive.embedded import Meter
from joinlib.adaptive.jep import JEP, from_plan
from joinlib.adaptive.planner import Eq12
from joinlib.adaptive.protocol import Message
from joinlib.adaptive.stats import MonitorConfig
from joinlib.errors import PlanError
from joinlib.model import Query
from joinlib.plan.logical import from_json

KEYS = ("mode", "monitor", "margin", "planner", "model")


def config_json(cfg: AdaptiveConfig) -> dict[str, Any]:
    """The ``adaptive`` object of a plan message: every field of the configuration, the cost model by
    its class name (a model of :mod:`.planner` with its default parameters: every node has the code)."""
    model = type(cfg.model)
    if getattr(planner_module, model.__name__, None) is not model or model() != cfg.model:
        raise PlanError(f"adaptive: the cost model {cfg.model!r} cannot go into a plan message (only "
                        "joinlib.adaptive.planner's models with their default parameters can)")
    return {"mode": cfg.mode, "monitor": dataclasses.asdict(cfg.monitor), "margin": cfg.fence_margin,
            "planner": cfg.planner, "model": model.__name__}


def _typed(d: Mapping[str, Any], key: str, kinds: tuple[type, ...], where: str = "plan.adaptive") -> Any:
    v = d.get(key)
    if type(v) not in kinds:
        raise PlanError(f"{where}.{key} has the wrong type: {str(v)[:40]!r}")
    return v


def _monitor(d: Any) -> MonitorConfig:
    if type(d) is not dict:
        raise PlanError("plan.adaptive.monitor must be an object")
    fields = {f.name: f for f in dataclasses.fields(MonitorConfig)}
    unknown = sorted(set(d) - set(fields))
    if unknown:
        raise PlanError(f"plan.adaptive.monitor: unknown key {unknown[0]!r} (known: {', '.join(fields)})")
    values: dict[str, Any] = {}
    for k in d:
        kinds: tuple[type, ...] = (int, float) if fields[k].type in (float, "float") else (int,)
        v = _typed(d, k, kinds, "plan.adaptive.monitor")
        values[k] = float(v) if float in kinds else v
    return MonitorConfig(**values)


def config_of(d: Any, query: Query) -> AdaptiveConfig:
    """The configuration of a plan message's ``adaptive`` object; :class:`PlanError` (or the
    configuration's own :class:`~joinlib.errors.JoinlibError`) if it is malformed."""
    if type(d) is not dict:
        raise PlanError("plan.adaptive must be an object (docs/adaptive.md)")
    unknown = sorted(set(d) - set(KEYS))
    if unknown:
        raise PlanError(f"plan.adaptive: unknown key {unknown[0]!r} (known: {', '.join(KEYS)})")
    planner = d.get("planner")
    if planner is not None and planner not in query.sites:
        raise PlanError(f"plan.adaptive.planner {str(planner)[:40]!r} is not a site of {query.name}")
    name = _typed(d, "model", (str,))
    model = getattr(planner_module, name, None)
    if not (isinstance(model, type) and issubclass(model, Eq12)):
        raise PlanError(f"plan.adaptive.model {name[:40]!r} is not a cost model of joinlib.adaptive.planner")
    return AdaptiveConfig(_typed(d, "mode", (str,)), _monitor(d.get("monitor")), _typed(d, "margin", (int,)),
                          planner, model())


def initial_jep(query: Query, plan: Any) -> JEP:
    """The JEP of a plan message's ``plan`` (seed 003's: SP-S / SP-D at the heads' sites)."""
    return from_plan(from_json(query, plan))


class Tally:
    """A node's protocol messages: their costs per round (a :class:`~.embedded.Meter` on the
    query's modelled links) and the counts per peer of the termination check."""

    def __init__(self, query: Query, interval_ms: int) -> None:
        self.meter = Meter(query, interval_ms)
        self.sent: dict[str, int] = defaultdict(int)
        self.received: dict[str, int] = defaultdict(int)

    def on_send(self, msg: Message, size: int) -> None:
        self.meter.record(msg, size, 0.0)
        self.sent[msg.dst] += 1

    def on_receive(self, src: str) -> None:
        self.received[src] += 1

    def counts(self) -> tuple[dict[str, int], dict[str, int]]:
        return dict(self.sent), dict(self.received)

    def state(self) -> dict[str, Any]:
        """Plain data for a checkpoint."""
        return {"sent": dict(self.sent), "received": dict(self.received), "meter": self.data()}

    @classmethod
    def restored(cls, query: Query, interval_ms: int, data: Mapping[str, Any]) -> "Tally":
        t = cls(query, interval_ms)
        t.meter = _merged_meter(query, interval_ms, [data["meter"]])
        t.sent.update(data["sent"])
        t.received.update(data["received"])
        return t

    def data(self) -> dict[str, Any]:
        """Plain data for ``done``: the meter's raw counts (keys as strings: JSON objects)."""
        m = self.meter
        return {"rounds": {str(k): v for k, v in m.rounds.items()},
                "relays": {str(k): dict(v) for k, v in m.relays.items()},
                "round_triggers": {str(k): sorted(v) for k, v in m.round_triggers.items()},
                "relay_cost": {str(k): v for k, v in m.relay_cost.items()}}


def quiescent(dones: Mapping[str, Mapping[str, Any]], participants: Iterable[str]) -> bool:
    """Every participant's latest ``done`` is in, says idle, and every link's counts agree
    (see the module docstring)."""
    parts = list(participants)
    proto: dict[str, Mapping[str, Any]] = {}
    for p in parts:
        d = dones.get(p)
        a = d.get("adaptive") if d is not None else None
        if not isinstance(a, dict) or not a.get("idle"):
            return False
        proto[p] = a
    for src in parts:
        for dst in parts:
            if src != dst and proto[src].get("sent", {}).get(dst, 0) != proto[dst].get("received", {}).get(src, 0):
                return False
    return True


def _merged_meter(query: Query, interval_ms: int, datas: Iterable[Mapping[str, Any]]) -> Meter:
    m = Meter(query, interval_ms)
    for d in datas:
        for k, r in (d.get("rounds") or {}).items():
            into = m.rounds.setdefault(int(k), {"modification": 0, "migration": 0, "sync": 0, "bytes": 0,
                                                "by_kind": {}, "transfer_ms": 0.0})
            for key in ("modification", "migration", "sync", "bytes", "transfer_ms"):
                into[key] += r.get(key, 0)
            for kind, n in (r.get("by_kind") or {}).items():
                into["by_kind"][kind] = into["by_kind"].get(kind, 0) + n
        for k, ops in (d.get("relays") or {}).items():
            for op, n in ops.items():
                m.relays[int(k)][op] += n
        for k, trig in (d.get("round_triggers") or {}).items():
            m.round_triggers[int(k)].update(trig)
        for k, c in (d.get("relay_cost") or {}).items():
            m.relay_cost[int(k)] += c
    return m


def merge(query: Query, dones: Mapping[str, Mapping[str, Any]], initial: Optional[Any]) -> dict[str, Any]:
    """The report's ``adaptive`` section from the nodes' ``done`` (the embedded report's keys, less
    the timeline: wall-clock runs have no common virtual time)."""
    ads = [d["adaptive"] for _, d in sorted(dones.items()) if isinstance(d.get("adaptive"), dict)]
    changes: dict[int, dict[str, Any]] = {}
    triggers: dict[tuple[Any, ...], dict[str, Any]] = {}
    for a in ads:
        for c in a.get("changes") or []:
            changes.setdefault(int(c["generation"]), c)
        for t in a.get("triggers") or []:
            triggers.setdefault((t.get("site"), t.get("epoch"), t.get("stream")), t)
    mode = ads[0].get("mode", "cnu") if ads else "cnu"
    interval = int(ads[0].get("interval_ms", 200)) if ads else 200
    meter = _merged_meter(query, interval, (a.get("tally") or {} for a in ads))
    return {"mode": mode, "initial_plan": initial, "changes": [changes[g] for g in sorted(changes)],
            "triggers": sorted(triggers.values(), key=lambda t: (t.get("epoch", 0), t.get("site", ""))),
            "rounds": meter.by_round(), "timeline": [], "restarts": [],
            "plan_changes_per_node": {s: len(d["adaptive"].get("changes") or []) for s, d in sorted(dones.items())
                                      if isinstance(d.get("adaptive"), dict)}}
