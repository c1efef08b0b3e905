"""Steady-state measurement of a plan on the embedded engine (:func:`measure`): what every experiment
compares the cost models with.

The paper's metric is the execution time per unit time of tuple arrival: processing
time plus transmission time Σ S(x) (latency + bytes / bandwidth of every message),
per second of stream time.  :meth:`joinlib.runtime.report.Report.execution_s_per_s` is that
metric over a whole run.  The cost models, however, describe the *steady state*: full
windows (w_i = r_i·T_i) and intermediate streams at their full rates.  A run from
empty windows spends its first T_max milliseconds below that, so every measurement
here runs ``warmup + duration`` ms of data and counts only the ``duration`` part:

* bytes, messages and transmission time: every message is sized by a wrapper of
  :func:`joinlib.protocol.wire.envelope_size` (the engine's ``size_of`` hook), which also
  records it by flow and epoch; messages of epochs ``< warmup / τ`` are not counted.
  This is exact and deterministic;
* processing time: the node sensor does not record epochs, so the warm-up part is
  measured separately, by running the same plan on the data with ``ts < warmup``,
  and subtracted: ``processing(full run) − processing(warm-up run)``.  Processing
  time is wall clock (``time.perf_counter`` per node phase) and noisy, so the pair
  of runs is repeated ``repeat`` times and the median is taken.  Each run starts with
  empty per-tuple encoding caches (``Tup.wire``), so every plan pays its own encoding.

With ``warmup = 0`` the totals are those of the engine's own report.

The span of the measured part is (number of epochs after the warm-up) × τ.

Per-sequence share
------------------
Flows of the lowered plan (:func:`joinlib.plan.ir.lower`, deterministic, so
the ids equal the engine's) belong to the steps that use them: a step's own flows to
its head, a window replica's update flow to every head whose steps probe the replica
(split evenly when shared).  :attr:`Measurement.by_head` gives, per head stream, the
bytes and transmission time of its sequence by link and kind: for a 2-way join, the
head ``S1`` share is the one-way join S1 → S2.
"""
from __future__ import annotations

import gc
import statistics
from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional, ParamSpec, TypedDict, TypeVar

from joinlib.errors import JoinlibError
from joinlib.experiments.common import Record, round_sig
from joinlib.model import Query, Tup
from joinlib.plan.ir import lower
from joinlib.plan.logical import Plan
from joinlib.protocol.messages import Envelope
from joinlib.protocol.wire import envelope_size
from joinlib.runtime.report import Report
from joinlib.runtime.sink import CountingSink
from joinlib.sim.engine import run_embedded

P = ParamSpec("P")
R = TypeVar("R")


class LinkRow(TypedDict):
    """Traffic of one (src, dst, kind), per second of measured stream time."""

    src: str
    dst: str
    kind: str
    messages_per_s: float
    bytes_per_s: float
    transmission_s_per_s: float


class HeadShare(TypedDict):
    """The traffic of one head stream's join sequence (see the module docstring)."""

    bytes_per_s: float
    transmission_s_per_s: float
    messages_per_s: float
    links: list[LinkRow]


@dataclass
class Measurement:
    """Steady-state cost of one plan on one data set (all rates per second of stream time)."""

    execution_s_per_s: float          # processing + transmission: the paper's metric
    processing_s_per_s: float
    transmission_s_per_s: float       # Σ S(x) = Σ (latency + bytes / bandwidth)
    bytes_per_s: float
    messages_per_s: float
    results: int                      # whole run (warm-up included)
    span_s: float                     # stream time measured (after the warm-up)
    warmup_ms: int
    repeat: int
    report_execution_s_per_s: float   # Report.execution_s_per_s of the whole run
    processing_runs: list[float] = field(default_factory=list)
    links: list[LinkRow] = field(default_factory=list)
    by_head: dict[str, HeadShare] = field(default_factory=dict)
    wall_s: float = 0.0

    def to_dict(self, detail: bool = True) -> Record:
        """Everything (``detail``), or only the totals (compact experiment records)."""
        r = round_sig
        out: Record = {
            "execution_s_per_s": r(self.execution_s_per_s), "processing_s_per_s": r(self.processing_s_per_s),
            "transmission_s_per_s": r(self.transmission_s_per_s), "bytes_per_s": r(self.bytes_per_s),
            "messages_per_s": r(self.messages_per_s), "results": self.results,
            "report_execution_s_per_s": r(self.report_execution_s_per_s),
            "processing_runs": [r(x, 3) for x in self.processing_runs],
        }
        if detail:
            out.update({"span_s": r(self.span_s), "warmup_ms": self.warmup_ms, "repeat": self.repeat,
                        "links": self.links, "by_head": self.by_head, "wall_s": r(self.wall_s, 4)})
        return out


@dataclass
class _FlowTraffic:
    """What one flow carried after the warm-up."""

    src: str
    dst: str
    kind: str
    messages: int = 0
    bytes: int = 0
    transfer_ms: float = 0.0


class _Meter:
    """The engine's ``size_of`` hook: sizes every envelope and records it by flow."""

    def __init__(self, query: Query, warm_epochs: int) -> None:
        self.size = envelope_size
        self.net = query.network
        self.warm = warm_epochs
        self.flows: dict[int, _FlowTraffic] = {}
        self.all_transfer_ms = 0.0
        self.all_bytes = 0

    def __call__(self, env: Envelope) -> int:
        n = self.size(env)
        t = self.net.transfer_ms(env.src, env.dst, n)
        self.all_transfer_ms += t
        self.all_bytes += n
        if env.epoch >= self.warm:
            rec = self.flows.get(env.flow)
            if rec is None:
                rec = self.flows[env.flow] = _FlowTraffic(env.src, env.dst, env.kind)
            rec.messages += 1
            rec.bytes += n
            rec.transfer_ms += t
        return n


def flow_owners(query: Query, plan: Plan) -> dict[int, list[str]]:
    """Flow id -> head streams whose sequences use it (see the module docstring)."""
    ir = lower(query, plan)
    ids = ir.flow_ids
    owners: dict[int, list[str]] = {ids[f.sig]: [] for f in ir.flows}
    for st in ir.steps:
        used = [sig for _, sig in st.flows]
        if st.replica is not None:
            used.append(ir.update_flow(ir.replica(st.replica)).sig)
        for sig in used:
            if st.head not in owners[ids[sig]]:
                owners[ids[sig]].append(st.head)
    for r in ir.replicas:  # a sequence started away from its head's site
        fid = ids[ir.update_flow(r).sig]
        if not owners[fid] and ir.start_of(r.stream) == r.loc:
            owners[fid].append(r.stream)
    return owners


def _quiet_run(fn: Callable[P, R], *args: P.args, **kw: P.kwargs) -> R:
    """Run with the cyclic garbage collector paused: a full collection over the loaded
    tuples takes tens of ms and would land in some node phase's wall-clock time."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return fn(*args, **kw)
    finally:
        if enabled:
            gc.enable()


def _reset_wire(streams: dict[str, list[Tup]]) -> None:
    for tups in streams.values():
        for t in tups:
            t.wire = None


def _link_rows(recs: Iterable[tuple[_FlowTraffic, float]], span: float) -> list[LinkRow]:
    acc: dict[tuple[str, str, str], list[float]] = {}
    for rec, share in recs:
        key = (rec.src, rec.dst, rec.kind)
        a = acc.setdefault(key, [0.0, 0.0, 0.0])
        a[0] += rec.messages * share
        a[1] += rec.bytes * share
        a[2] += rec.transfer_ms * share
    return [{"src": s, "dst": d, "kind": k, "messages_per_s": round_sig(m / span),
             "bytes_per_s": round_sig(b / span), "transmission_s_per_s": round_sig(t / 1000.0 / span)}
            for (s, d, k), (m, b, t) in sorted(acc.items())]


def measure(query: Query, streams: dict[str, list[Tup]], plan: Plan, *, warmup_ms: int = 0,
            repeat: int = 1) -> Measurement:
    """Run ``plan`` on ``streams`` (embedded engine) and measure its steady-state cost.

    ``streams`` must cover ``warmup_ms`` plus the measured duration; ``warmup_ms`` must
    be a multiple of τ (see :func:`warmup_for`).
    """
    tau = query.execution.interval_ms
    if warmup_ms % tau:
        raise ValueError("warmup_ms must be a multiple of the interval")
    if repeat < 1:
        raise JoinlibError("--repeat must be at least 1")
    warm_epochs = warmup_ms // tau
    last_ts = max((t.ts for tups in streams.values() for t in tups), default=-1)
    epochs = last_ts // tau + 1 - warm_epochs if last_ts >= 0 else 0
    if epochs <= 0:
        raise JoinlibError(f"no data after the warm-up of {warmup_ms} ms: generate a longer duration")
    span = epochs * tau / 1000.0
    prefix = {n: [t for t in tups if t.ts < warmup_ms] for n, tups in streams.items()} if warm_epochs else None
    procs: list[float] = []
    meter: Optional[_Meter] = None
    report: Optional[Report] = None
    wall = 0.0
    for _ in range(repeat):
        _reset_wire(streams)
        meter = _Meter(query, warm_epochs)
        report = _quiet_run(run_embedded, query, streams, plan, CountingSink(), size_of=meter)
        wall += report.wall_s
        proc = report.processing_total_s
        if prefix is not None and any(prefix.values()):
            _reset_wire(prefix)
            pre = _quiet_run(run_embedded, query, prefix, plan, CountingSink())
            wall += pre.wall_s
            proc -= pre.processing_total_s
        procs.append(max(0.0, proc) / span)
    assert meter is not None and report is not None
    owners = flow_owners(query, plan)
    recs = list(meter.flows.items())
    total_bytes = sum(r.bytes for _, r in recs)
    total_msgs = sum(r.messages for _, r in recs)
    total_tx = sum(r.transfer_ms for _, r in recs) / 1000.0
    by_head: dict[str, HeadShare] = {}
    for head in query.names:
        mine = [(r, 1.0 / len(owners.get(fid) or [head])) for fid, r in recs if head in owners.get(fid, ())]
        links = _link_rows(mine, span)
        by_head[head] = {"bytes_per_s": round_sig(sum(ln["bytes_per_s"] for ln in links)),
                         "transmission_s_per_s": round_sig(sum(ln["transmission_s_per_s"] for ln in links)),
                         "messages_per_s": round_sig(sum(ln["messages_per_s"] for ln in links)),
                         "links": links}
    processing = statistics.median(procs)
    return Measurement(
        execution_s_per_s=processing + total_tx / span, processing_s_per_s=processing,
        transmission_s_per_s=total_tx / span, bytes_per_s=total_bytes / span,
        messages_per_s=total_msgs / span, results=report.results, span_s=span,
        warmup_ms=warmup_ms, repeat=repeat, report_execution_s_per_s=report.execution_s_per_s,
        processing_runs=procs, links=_link_rows(((r, 1.0) for _, r in recs), span), by_head=by_head,
        wall_s=wall)
