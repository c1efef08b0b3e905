"""Validation of ``control`` messages: any process that reaches the broker can write that topic, so a
node or the planner acts on a control message only when it has the shape docs/contracts.md gives it.

:func:`check_control` returns None for a well-formed message and otherwise a sentence saying what is
wrong; readers reject such a message (a logged error and ``joinlib_rejected_messages_total``) and it
changes nothing: it never enters a node's or the planner's control log.  Extra keys are allowed (a
newer writer may add some); the keys the readers use must have the documented types.  A ``plan`` must
carry a query that parses and plans that compile against it, so a node never installs, and the planner
never shows, a plan that cannot run.  A ``version`` other than those this code knows
(:data:`~joinlib.control.messages.CONTROL_VERSION`) is rejected too.

:func:`accept_control` is the same check returning the typed message (:mod:`joinlib.control.messages`), a
plan's compiled (:mod:`joinlib.control.compile`): readers parse and compile a message once, here.
:func:`plan_payload` and :func:`tree_payload` compile a plan payload given as JSON.

Pure: no I/O, no client libraries.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Union

from joinlib.control.compile import Compiled, compile_plan, compile_trees, compiled_of, short, tree_scope
from joinlib.control.messages import CONTROL_VERSION, ControlMessage, PlanMessage, parse
from joinlib.control.run_plan import AdaptiveRun, PartitionedRun, TreesRun
from joinlib.errors import JoinlibError
from joinlib.model import Query
from joinlib.pmjoin.value_monitor import is_report
from joinlib.protocol.messages import (
    DjaUpdate,
    ExpiryUpdate,
    KeyBatch,
    KeyFilter,
    ShippedBatch,
    TupleBatch,
    WindowSnapshot,
)
from joinlib.query import parse_query

__all__ = ["UNDECODABLE", "INVALID", "BAD_HEADER", "REJECT_REASONS", "CONTROL_KINDS", "Accepted", "accept_control",
           "check_control", "plan_payload", "tree_payload", "tree_scope", "InboundFlows"]

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
        "values": (False, is_report), "part": (False, is_count), "instance": (False, is_str),
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
        "repartition": (False, lambda v: type(v) is dict and is_num(v.get("threshold")) and v["threshold"] > 0
                        and is_str(v.get("plan"))),
        "replan": (False, lambda v: type(v) is dict and is_str(v.get("replaces")) and is_int(v.get("switch_ms"))
                   and is_int(v.get("gen", 1)) and _dict_of(_dict_of(is_count))(v.get("handover") or {})
                   and all(k.isdigit() for parts in (v.get("handover") or {}).values() for k in parts)),
    },
}


@dataclass(frozen=True)
class Accepted:
    """A control message that validates, typed; a plan's also compiled (:func:`_check_plan`), so that a node
    parses and compiles a plan message once."""

    message: ControlMessage
    compiled: Optional[Compiled] = None


def check_control(query: Any, kind: Any, payload: Any) -> Optional[str]:
    """None if ``(query, kind, payload)`` is a well-formed control message, else what is wrong."""
    got = accept_control(query, kind, payload)
    return got if isinstance(got, str) else None


def accept_control(query: Any, kind: Any, payload: Any) -> Union[Accepted, str]:
    """The typed message of a well-formed ``(query, kind, payload)``, else what is wrong (see
    :func:`check_control`)."""
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
            return f"{kind}.{key} has the wrong type or value: {short(payload[key])}"
    version = payload.get("version", CONTROL_VERSION)
    if not is_int(version) or not 1 <= version <= CONTROL_VERSION:
        return f"{kind}.version {short(version)}: this reader knows versions 1 to {CONTROL_VERSION}"
    if kind != "plan":
        return Accepted(parse(kind, payload))
    compiled = _check_plan(query, payload)
    return compiled if isinstance(compiled, str) else Accepted(parse(kind, payload), compiled)


def _check_plan(query: str, p: dict[str, Any]) -> Union[Compiled, str]:
    for sw in p.get("switches") or []:
        if type(sw) is not dict or not is_int(sw.get("from_epoch")) or sw["from_epoch"] < 1 \
                or type(sw.get("plan")) is not dict:
            return f"plan.switches: each is {{'from_epoch': E >= 1, 'plan': ...}}, not {short(sw)}"
    live = p.get("live")
    if live is not None:
        if not is_int(live.get("origin_ms")) or not _dict_of(_dict_of(is_count))(live.get("sources") or {}):
            return "plan.live needs an integer 'origin_ms' and 'sources' {stream: {partition: offset}}"
        if not all(k.isdigit() for parts in (live.get("sources") or {}).values() for k in parts):
            return "plan.live.sources: partitions must be numbers"
    # the query must parse and every plan compile against it (what a node does before installing it)
    try:
        msg = PlanMessage.from_json(p)
        q = parse_query(msg.query, "control")
        if q.name != query:
            return f"plan: the query in the payload is {q.name!r}, the message is for {query!r}"
        return compiled_of(q, msg)
    except JoinlibError as e:
        return f"plan does not compile: {short(str(e), 200)}"
    except Exception as e:  # a hostile payload may trip any of the parsers
        return f"plan does not compile: {type(e).__name__}: {short(str(e), 200)}"


def plan_payload(q: Query, p: Mapping[str, Any]) -> Any:
    """The plans of a plan payload (JSON, as on the wire) against its parsed query ``q``: the MJoin tree(s), the
    :class:`~joinlib.plan.partitioned.Partitioned` plan, or the generations ``[(first epoch, Plan)]``;
    :class:`~joinlib.errors.PlanError` for what cannot run (:func:`joinlib.control.compile.compile_plan`)."""
    plan = compile_plan(q, PlanMessage.from_json(p))
    if isinstance(plan, (TreesRun, PartitionedRun)):
        return plan.plan
    return [(0, plan.initial)] if isinstance(plan, AdaptiveRun) else list(plan.gens)


def tree_payload(q: Query, p: Mapping[str, Any]) -> Any:
    """The trees of a plan payload whose plan is an MJoin tree (:func:`joinlib.control.compile.compile_trees`)."""
    return compile_trees(q, PlanMessage.from_json(p)).plan


# ----------------------------------------------------------------------------- inbound envelopes

def _flow_bodies(ir: Any, flow: Any) -> tuple[type, ...]:
    """The body classes a flow of a plan IR carries (every message of a flow has one class; the
    update flows of replicas also carry the snapshots that jump-start them after a plan switch)."""
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
    classes each carries: what a node accepts on ``node.<query>.<site>.from.<peer>``."""

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
