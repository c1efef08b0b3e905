"""Validation of ``control`` messages: any process that reaches the broker can write that topic, so a
node or the planner acts on a control message only when it has the shape docs/contracts.md gives it.

:func:`check_control` returns None for a well-formed message and otherwise a sentence saying what is
wrong; readers reject such a message (a logged error and ``joinlib_rejected_messages_total``) and it
changes nothing: it never enters a node's or the planner's control log.  Extra keys are allowed (a
newer writer may add some); the keys the readers use must have the documented types.  A ``plan`` must
carry a query that parses and plans that compile against it, so a node never installs, and the planner
never shows, a plan that cannot run.

Pure: no I/O, no client libraries.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Optional

from joinlib.errors import JoinlibError

#: reasons of a rejected message (the ``reason`` label of ``joinlib_rejected_messages_total``)
UNDECODABLE = "undecodable"     # the bytes are not a message of the topic's schema
INVALID = "invalid"             # decodes, but the content does not validate
BAD_HEADER = "bad_header"       # a header joinlib reads (sent_ms, run) is malformed or missing
REJECT_REASONS = (UNDECODABLE, INVALID, BAD_HEADER)

CONTROL_KINDS = ("plan", "end", "status", "done", "stop")

_Check = Callable[[Any], bool]


def is_int(v: Any) -> bool:
    return type(v) is int


def is_count(v: Any) -> bool:
    return type(v) is int and v >= 0


def is_num(v: Any) -> bool:
    return type(v) in (int, float) and math.isfinite(v)


def is_str(v: Any) -> bool:
    return type(v) is str


def _opt(check: _Check) -> _Check:
    return lambda v: v is None or check(v)


def _dict_of(value: _Check) -> _Check:
    return lambda v: type(v) is dict and all(is_str(k) and value(x) for k, x in v.items())


def _list_of(item: _Check) -> _Check:
    return lambda v: type(v) is list and all(item(x) for x in v)


def _naive_row(v: Any) -> bool:
    if type(v) is dict:
        return is_str(v.get("src")) and is_str(v.get("dst")) and is_count(v.get("bytes"))
    return type(v) is list and len(v) == 3 and is_str(v[0]) and is_str(v[1]) and is_count(v[2])


def _link(v: Any) -> bool:
    return (type(v) is dict and all(is_str(v.get(k)) for k in ("src", "dst", "kind"))
            and is_count(v.get("messages")) and is_count(v.get("bytes")) and _opt(is_num)(v.get("transfer_ms")))


def _latency(v: Any) -> bool:
    return type(v) is dict and is_num(v.get("p50")) and is_num(v.get("p99"))


def _values(v: Any) -> bool:
    from joinlib.pmjoin.value_monitor import is_report
    return is_report(v)


_RUN = _opt(is_str)
_COUNTS = _dict_of(is_count)


def _adaptive_done(v: Any) -> bool:
    """An adaptive node's ``done`` (joinlib.adaptive.service.quiescent reads these keys)."""
    return (type(v) is dict and type(v.get("idle")) is bool and _COUNTS(v.get("sent"))
            and _COUNTS(v.get("received")) and _opt(lambda x: type(x) is list)(v.get("changes")))

# key -> (required, check) per kind, for the keys the readers use
_FIELDS: dict[str, dict[str, tuple[bool, _Check]]] = {
    "end": {"last_epoch": (True, is_int), "run": (False, _RUN)},
    "stop": {"run": (True, is_str)},
    "status": {
        "site": (True, is_str), "run": (True, _RUN), "epoch": (False, is_int),
        "epochs": (False, _dict_of(is_int)), "last_epoch": (False, _opt(is_int)), "t_ms": (False, is_num),
        "results": (False, is_count), "sent_bytes": (False, is_count), "inputs": (False, _COUNTS),
        "naive": (False, _list_of(_naive_row)), "live": (False, lambda v: type(v) is bool),
        "dead_letters": (False, _dict_of(_COUNTS)), "watermarks_ms": (False, _dict_of(is_num)),
        "latency_ms": (False, _opt(_latency)), "adaptive": (False, lambda v: type(v) is dict),
        "values": (False, _values), "part": (False, is_count), "instance": (False, is_str),
    },
    "done": {
        "site": (True, is_str), "run": (True, _RUN), "results": (True, is_count),
        "links": (False, _list_of(_link)), "received": (False, _list_of(_link)),
        "naive": (False, _list_of(_naive_row)), "input_tuples": (False, is_count),
        "late_messages": (False, is_count), "last_epoch": (False, _opt(is_int)),
        "stopped": (False, lambda v: type(v) is bool), "inputs": (False, _COUNTS),
        "dead_letters": (False, _dict_of(_COUNTS)), "adaptive": (False, _adaptive_done),
        "part": (False, is_count), "instance": (False, is_str),
    },
    "plan": {
        "query": (True, lambda v: type(v) is dict), "plan": (True, lambda v: type(v) is dict),
        "run": (False, _RUN), "offsets": (False, _dict_of(_opt(is_count))),
        "nodes": (False, _list_of(is_str)), "switches": (False, lambda v: type(v) is list),
        "last_epoch": (False, _opt(is_int)), "live": (False, lambda v: type(v) is dict),
        "adaptive": (False, _opt(lambda v: type(v) is dict)),
        "scale_out": (False, lambda v: type(v) is bool), "part_offsets": (False, _dict_of(_list_of(is_count))),
    },
}


def check_control(query: Any, kind: Any, payload: Any) -> Optional[str]:
    """None if ``(query, kind, payload)`` is a well-formed control message, else what is wrong."""
    if not is_str(query) or not query:
        return "the query name (the message's 'query') is empty"
    if kind not in CONTROL_KINDS:
        return f"unknown kind {str(kind)[:40]!r} (expected one of {', '.join(CONTROL_KINDS)})"
    if type(payload) is not dict:
        return f"a {kind} payload must be a JSON object, not {type(payload).__name__}"
    for key, (required, check) in _FIELDS[kind].items():
        if key not in payload:
            if required:
                return f"a {kind} message needs '{key}'"
            continue
        if not check(payload[key]):
            return f"{kind}.{key} has the wrong type or value: {_short(payload[key])}"
    if kind == "plan":
        return _check_plan(query, payload)
    return None


def _check_plan(query: str, p: dict[str, Any]) -> Optional[str]:
    for sw in p.get("switches") or []:
        if type(sw) is not dict or not is_int(sw.get("from_epoch")) or sw["from_epoch"] < 1 \
                or type(sw.get("plan")) is not dict:
            return f"plan.switches: each is {{'from_epoch': E >= 1, 'plan': ...}}, not {_short(sw)}"
    live = p.get("live")
    if live is not None:
        if not is_int(live.get("origin_ms")) or not _dict_of(_dict_of(is_count))(live.get("sources") or {}):
            return "plan.live needs an integer 'origin_ms' and 'sources' {stream: {partition: offset}}"
        if not all(k.isdigit() for parts in (live.get("sources") or {}).values() for k in parts):
            return "plan.live.sources: partitions must be numbers"
    # the query must parse and every plan compile against it (what a node does before installing it)
    from joinlib.query import parse_query
    try:
        q = parse_query(p["query"], "control")
        if q.name != query:
            return f"plan: the query in the payload is {q.name!r}, the message is for {query!r}"
        plan_payload(q, p)
    except JoinlibError as e:
        return f"plan does not compile: {_short(str(e), 200)}"
    except Exception as e:  # a hostile payload may trip any of the parsers
        return f"plan does not compile: {type(e).__name__}: {_short(str(e), 200)}"
    return None


def plan_payload(q: Any, p: dict[str, Any]) -> Any:
    """A ``plan`` message's plans against its parsed query ``q``: a
    :class:`~joinlib.plan.partitioned.Partitioned` plan (PMJoin), or the generations ``[(first epoch, Plan)]``
    for :func:`joinlib.runtime.deploy.generations`; :class:`~joinlib.errors.PlanError` for what cannot run.  The one
    place the rules of a plan message live: :func:`check_control` and the node service both use it."""
    from joinlib.errors import PlanError
    from joinlib.plan.logical import from_json
    from joinlib.plan.partitioned import Partitioned, is_partitioned_json
    if is_tree_json(p["plan"]):  # an MJoin tree: an operator query per MJoin (joinlib.node.tree_service)
        return tree_payload(q, p)
    if is_partitioned_json(p["plan"]):  # PMJoin: a plan per partition, no switches, not adaptive
        if p.get("switches") or p.get("adaptive") is not None:
            raise PlanError("a partitioned plan has no 'switches' and is not adaptive")
        if p.get("scale_out") and p.get("live") is not None:
            raise PlanError("a scaled-out plan reads replayed sources (src.<query>.<stream>, a partition per "
                            "plan partition); live sources are not split by the partition function")
        return Partitioned.from_json(q, p["plan"])
    if p.get("scale_out"):
        raise PlanError("scale_out needs a partitioned plan (pmjoin): its partitions are what the instances share")
    gens = [(0, from_json(q, p["plan"]))]
    for sw in p.get("switches") or []:
        if type(sw) is not dict or not is_int(sw.get("from_epoch")) or sw["from_epoch"] < 1:
            raise PlanError(f"a switch is {{'from_epoch': E >= 1, 'plan': ...}}, not {_short(sw)}")
        gens.append((sw["from_epoch"], from_json(q, sw["plan"])))
    if p.get("adaptive") is not None:  # re-planned while running: its configuration and seed 003's plan
        if len(gens) > 1:
            raise PlanError("an adaptive plan chooses its own switches: no 'switches'")
        from joinlib.adaptive.service import config_of, initial_jep
        config_of(p["adaptive"], q)
        initial_jep(q, p["plan"])
    return gens


def is_tree_json(plan: Any) -> bool:
    return type(plan) is dict and any(k in plan for k in ("mjoin_tree", "mjoin_trees", "mjoin_trees_of"))


def tree_payload(q: Any, p: dict[str, Any]) -> Any:
    """The :class:`~joinlib.mjoin.derived.TreeProgram` of a plan message whose plan is ``{"mjoin_tree": ...}``, the
    :class:`~joinlib.mjoin.tree_plans.PartitionedTrees` of ``{"mjoin_trees": [...], "by": ..., "function":
    ...}``, or the
    :class:`~joinlib.mjoin.tree_plans.SharedTrees` of ``{"mjoin_trees_of": [{"query": ..., "mjoin_tree": ...}, ...]}``:
    no switches, not adaptive.  A single tree may have live sources (each base stream is read by one operator,
    so one ingest decides its records) and may run one operator only (:func:`tree_scope`)."""
    from joinlib.errors import PlanError
    from joinlib.mjoin.derived import lower_tree
    from joinlib.mjoin.tree_plans import PartitionedTrees, SharedTrees
    from joinlib.pmjoin.tree import from_json
    if p.get("switches") or p.get("adaptive") is not None:
        raise PlanError("an MJoin tree plan has no 'switches' and is not adaptive")
    live = [s.name for s in q.streams if s.source is not None and s.source.live]
    several = "mjoin_trees" in p["plan"] or "mjoin_trees_of" in p["plan"]
    if several and (live or p.get("live") is not None):
        raise PlanError(f"partitioned or shared-at-once MJoin trees run on replayed streams; {', '.join(live)} "
                        "have live sources (a stream read by several operators would need one ingest for all; "
                        "submit the trees one by one to share operators: docs/multiquery.md)")
    if live and p.get("live") is None:
        raise PlanError(f"{', '.join(live)} have live sources: the plan message needs 'live' (origin and start "
                        "offsets), as 'joinlib submit' writes it")
    if "mjoin_trees" in p["plan"]:
        return PartitionedTrees.from_json(q, p["plan"])
    if "mjoin_trees_of" in p["plan"]:
        return SharedTrees.from_json(q, p["plan"])
    prog = lower_tree(q, from_json(p["plan"]["mjoin_tree"]))
    tree_scope(prog, p["plan"])
    return prog


def tree_scope(prog: Any, plan: dict[str, Any]) -> tuple[Optional[int], dict[str, dict[str, Any]]]:
    """Which operator of ``prog`` a plan message with ``only`` runs, and where its derived inputs come from.

    ``{"mjoin_tree": T, "only": "S1+S2", "external": {"S1+S2": {"op": P, "run": R, "origin_ms": O}}}``: with
    ``only`` (a derived stream's name) the message runs that operator alone and publishes its results as the
    derived stream, for any later reader (docs/multiquery.md "Shared operators"); without it, with
    ``external``, the root alone.  ``external`` names, per derived input, the operator query ``P`` (run
    ``R``, origin ``O``) already publishing it on ``src.P.out``.  Returns (index of the operator run alone,
    or None for the whole tree; the external inputs)."""
    from joinlib.errors import PlanError
    only, ext = plan.get("only"), plan.get("external")
    if only is None and ext is None:
        return None, {}
    ext = {} if ext is None else ext
    if type(ext) is not dict or not all(type(v) is dict and type(v.get("op")) is str and type(v.get("run")) is str
                                        and is_int(v.get("origin_ms")) for v in ext.values()):
        raise PlanError("plan.external is {derived stream: {'op': operator query, 'run': its run, "
                        "'origin_ms': its origin}}")
    names = {op.output: i for i, op in enumerate(prog.ops)}
    if only is not None and (type(only) is not str or only not in names or names[only] == len(prog.ops) - 1):
        raise PlanError(f"plan.only: {_short(only)} is not an inner operator's derived stream "
                        f"(one of {sorted(n for n, i in names.items() if i < len(prog.ops) - 1)})")
    i = names[only] if only is not None else len(prog.ops) - 1
    op = prog.ops[i]
    derived = {s.name for s in op.query.streams if op.is_derived(s.name)}
    if set(ext) != derived:
        raise PlanError(f"plan.external must name the producer of each derived input of {op.name} "
                        f"({sorted(derived)}), not {sorted(ext)}")
    return i, ext


def _short(value: Any, n: int = 80) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= n else text[: n - 3] + "..."


# ----------------------------------------------------------------------------- inbound envelopes

def _flow_bodies(ir: Any, flow: Any) -> tuple[type, ...]:
    """The body classes a flow of a plan IR carries (every message of a flow has one class; the
    update flows of replicas also carry the snapshots that jump-start them after a plan switch)."""
    from joinlib.protocol.messages import (
        DjaUpdate,
        ExpiryUpdate,
        KeyBatch,
        KeyFilter,
        ShippedBatch,
        TupleBatch,
        WindowSnapshot,
    )
    if flow.name == "update":
        kind = ir.replica(flow.owner).kind
        by_kind: dict[str, tuple[type, ...]] = {"SP-S": (TupleBatch,), "SM-S1": (ExpiryUpdate,),
                                                "SM-S2": (DjaUpdate,), "SM-D1": (DjaUpdate,), "RF": (ShippedBatch,)}
        return by_kind.get(kind, (TupleBatch, ShippedBatch, ExpiryUpdate, DjaUpdate)) + (WindowSnapshot,)
    if flow.name.startswith("to:"):
        return (KeyFilter,)
    return (KeyBatch, KeyFilter) if flow.kind == "partial" else (TupleBatch,)   # key sets may go as Bloom filters


def _parts(body: Any) -> tuple[list[Any], list[Any]]:
    """(tuples, keys) of a message body."""
    from joinlib.protocol.messages import DjaUpdate, KeyBatch, KeyFilter, ShippedBatch, TupleBatch, WindowSnapshot
    if isinstance(body, TupleBatch):
        return [t for row in body.rows for t in row], []
    if isinstance(body, ShippedBatch):
        return list(body.tuples), []
    if isinstance(body, WindowSnapshot):
        return list(body.tuples), list(body.keys)
    if isinstance(body, DjaUpdate):
        return list(body.sf), list(body.vj)
    if isinstance(body, (KeyBatch, KeyFilter)):
        return [], list(body.keys)
    return [], []


class InboundFlows:
    """The flows of a plan IR that end at ``site``, by rank (the envelope's ``flow``), with the body
    classes each carries: what a node accepts on ``node.<query>.<site>``."""

    def __init__(self, ir: Any, site: str) -> None:
        self.site = site
        self.flows: dict[int, tuple[Any, tuple[type, ...]]] = {}
        self.replica_pos: dict[int, int] = {}      # update flows: the position of the replica's stream
        for sig, rank in ir.flow_ids.items():
            f = ir.flow(sig)
            self.flows[rank] = (f, _flow_bodies(ir, f))
            if f.name == "update":
                self.replica_pos[rank] = ir.replica(f.owner).pos
        self.arity = [len(s.join_attrs) for s in ir.query.streams]

    def check(self, src: str, flow: int, epoch: int, body: Any) -> Optional[str]:
        """None if an envelope from ``src`` on flow rank ``flow`` may be taken here, else why not."""
        got = self.flows.get(flow)
        if got is None:
            return f"no flow {flow} in this plan generation"
        f, bodies = got
        if f.dst != self.site or f.src != src:
            return f"flow {flow} goes {f.src} -> {f.dst}, not {src or '?'} -> {self.site}"
        if not isinstance(body, bodies):
            return f"a {type(body).__name__} on flow {flow}, which carries {'/'.join(b.__name__ for b in bodies)}"
        if epoch < 0:
            return f"negative epoch {epoch}"
        return self._content(body, self.replica_pos.get(flow))

    def _content(self, body: Any, pos: Optional[int]) -> Optional[str]:
        """Structure a node relies on: every tuple of a stream position of the query with that stream's
        number of join values (of the replica's stream on an update flow); the rows of a batch of one shape;
        the keys of a body of one length.  (Counts and keys that do not fit the receiver's state cannot be
        checked here: only authenticated writers keep those out.)"""
        from joinlib.protocol.messages import TupleBatch
        n, arity = len(self.arity), self.arity
        if isinstance(body, TupleBatch):
            shapes = {tuple(t.pos for t in row) for row in body.rows}
            if len(shapes) > 1 or any(not ps or len(set(ps)) != len(ps) for ps in shapes):
                return f"a TupleBatch with rows of different or repeated streams: {sorted(shapes)[:3]}"
        tups, keys = _parts(body)
        for t in tups:
            if not 0 <= t.pos < n or len(t.key) != arity[t.pos]:
                return f"a tuple of stream position {t.pos} with {len(t.key)} join values"
            if pos is not None and t.pos != pos:
                return f"a tuple of stream position {t.pos} on the update flow of position {pos}"
        if keys and (len({len(k) for k in keys}) != 1 or not 1 <= len(keys[0]) <= max(arity)):
            return f"keys of lengths {sorted({len(k) for k in keys})[:5]}"
        return None
