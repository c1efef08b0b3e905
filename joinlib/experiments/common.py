"""What every experiment shares: queries, data, steady-state measurement, statistics.

Measurement (:func:`measure`)
-----------------------------
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
import math
import statistics
import sys
import tempfile
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, NoReturn, Optional, ParamSpec, Sequence, TypedDict, TypeVar

from joinlib import units
from joinlib.data.synthetic import TOPOLOGIES as TOPOLOGIES  # re-exported for the experiments
from joinlib.data.synthetic import build_query as build_query
from joinlib.data.synthetic import topology_edges as topology_edges
from joinlib.errors import JoinlibError
from joinlib.model import Query, Stream, Tup, Window
from joinlib.plan.logical import Plan

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from tqdm import tqdm

    from joinlib.costs.unit_time import CostModel
    from joinlib.protocol.messages import Envelope
    from joinlib.runtime.report import Report

P = ParamSpec("P")
R = TypeVar("R")
Record = dict[str, Any]  # one JSON object of an experiment's output


# --------------------------------------------------------------------------- queries


TOPOLOGY_LABELS = {"star": "Star", "chain": "Chain", "cycle": "Cycle", "complete": "Fully-connected"}


def with_stream_stats(query: Query, name: str, **changes: Any) -> Query:
    """``query`` with some statistics of stream ``name`` changed (``window_ms`` too)."""
    out = []
    for s in query.streams:
        if s.name == name:
            window = s.window
            if "window_ms" in changes:
                window = Window("time", int(changes.pop("window_ms")))
            if "selectivity" in changes:
                f = float(changes.pop("selectivity"))
                changes["selectivity"] = tuple((a, f) for a in s.join_attrs)
            s = replace(s, window=window, stats=replace(s.stats, **changes))
        out.append(s)
    return replace(query, streams=tuple(out))


def warmup_for(query: Query, spec: Any = "auto", cap_ms: Optional[int] = None) -> int:
    """Warm-up in ms: ``auto`` = the longest window (a tuple window counts size/rate),
    else a duration; rounded up to a multiple of τ (so epochs split cleanly)."""
    tau = query.execution.interval_ms
    if spec in (None, "auto"):
        longest = 0.0
        for s in query.streams:
            if s.window.is_time:
                longest = max(longest, s.window.size)
            else:
                rate = s.stats.rate or 100.0
                longest = max(longest, 1000.0 * s.window.size / max(rate, 1e-9))
        ms = int(math.ceil(longest))
        if cap_ms is not None:
            ms = min(ms, cap_ms)
    else:
        ms = parse_duration(spec, allow_zero=True) if isinstance(spec, str) else int(spec)
    return int(math.ceil(ms / tau)) * tau


def parse_duration(text: str, allow_zero: bool = False) -> int:
    """'5s', '500ms', a bare number of ms (``0`` only with ``allow_zero``)."""
    if allow_zero and str(text).strip() in ("0", "0ms", "0s"):
        return 0
    return units.parse_duration(text)


# --------------------------------------------------------------------------- data


def _gen_key(s: Stream, total_ms: int, seed: int) -> tuple[Hashable, ...]:
    st = s.stats
    return (s.name, s.pos, s.join_attrs, st.rate, st.attributes,
            st.tuple_bytes if st.attributes is None else None, st.selectivity, total_ms, seed)


class DataCache:
    """Generated streams, loaded as tuples, cached per (stream spec, duration, seed).

    A stream's data depends only on its own statistics and the seed
    (:func:`joinlib.data.gen.stream_rows`), so sweeps that change one stream, or only the
    network, reuse the others' data.  Files go to a temporary directory removed by
    :meth:`close`.
    """

    def __init__(self, directory: Optional[Path] = None) -> None:
        self._tmp: Optional[tempfile.TemporaryDirectory[str]] = None
        if directory is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="joinlib-exp-")
            directory = Path(self._tmp.name)
        self.dir = Path(directory)
        self._loaded: dict[tuple[Hashable, ...], list[Tup]] = {}
        self._n = 0

    def streams(self, query: Query, total_ms: int, seed: int) -> dict[str, list[Tup]]:
        from joinlib.data.files import load_stream, write_stream
        from joinlib.data.gen import stream_rows
        out = {}
        for s in query.streams:
            key = _gen_key(s, total_ms, seed)
            tups = self._loaded.get(key)
            if tups is None:
                self._n += 1
                path = self.dir / f"{self._n:05d}-{s.name}.jsonl"
                write_stream(path, stream_rows(s, total_ms, seed))
                tups = self._loaded[key] = load_stream(s, path)
                path.unlink()
            out[s.name] = tups
        return out

    def clear(self) -> None:
        self._loaded.clear()

    def close(self) -> None:
        self.clear()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> "DataCache":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --------------------------------------------------------------------------- measurement


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
        r = _round
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


def _round(x: float, digits: int = 6) -> float:
    if x == 0 or not math.isfinite(x):
        return x
    return float(f"{x:.{digits}g}")


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
        from joinlib.protocol import wire
        self.size = wire.envelope_size
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
    from joinlib.plan.ir import lower
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
    return [{"src": s, "dst": d, "kind": k, "messages_per_s": _round(m / span),
             "bytes_per_s": _round(b / span), "transmission_s_per_s": _round(t / 1000.0 / span)}
            for (s, d, k), (m, b, t) in sorted(acc.items())]


def measure(query: Query, streams: dict[str, list[Tup]], plan: Plan, *, warmup_ms: int = 0,
            repeat: int = 1) -> Measurement:
    """Run ``plan`` on ``streams`` (embedded engine) and measure its steady-state cost.

    ``streams`` must cover ``warmup_ms`` plus the measured duration; ``warmup_ms`` must
    be a multiple of τ (see :func:`warmup_for`).
    """
    from joinlib.runtime.sink import CountingSink
    from joinlib.sim.engine import run_embedded
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
        by_head[head] = {"bytes_per_s": _round(sum(ln["bytes_per_s"] for ln in links)),
                         "transmission_s_per_s": _round(sum(ln["transmission_s_per_s"] for ln in links)),
                         "messages_per_s": _round(sum(ln["messages_per_s"] for ln in links)),
                         "links": links}
    processing = statistics.median(procs)
    return Measurement(
        execution_s_per_s=processing + total_tx / span, processing_s_per_s=processing,
        transmission_s_per_s=total_tx / span, bytes_per_s=total_bytes / span,
        messages_per_s=total_msgs / span, results=report.results, span_s=span,
        warmup_ms=warmup_ms, repeat=repeat, report_execution_s_per_s=report.execution_s_per_s,
        processing_runs=procs, links=_link_rows(((r, 1.0) for _, r in recs), span), by_head=by_head,
        wall_s=wall)


# --------------------------------------------------------------------------- estimates


def cost_models(calibration: Optional[Path] = None) -> dict[str, CostModel]:
    """The models every experiment reports: paper, bytes, and calibrated if a file is given."""
    from joinlib.costs import get_model
    models = {"paper": get_model("paper"), "bytes": get_model("bytes")}
    if calibration is not None:
        models["calibrated"] = get_model("calibrated", path=calibration)
    return models


def planning_model(name: str, calibration: Optional[Path] = None) -> CostModel:
    from joinlib.costs import get_model
    if name == "calibrated":
        if calibration is None:
            raise JoinlibError("--model calibrated needs --calibration FILE.json (see 'joinlib calibrate')")
        return get_model("calibrated", path=calibration)
    return get_model(name)


class Estimate(TypedDict):
    plan: dict[str, float]  # model -> cost
    by_head: dict[str, dict[str, float]]  # head -> model -> cost


def estimate(query: Query, plan: Plan, models: Mapping[str, CostModel]) -> Estimate:
    """{"plan": {model: cost}, "by_head": {head: {model: cost}}} (s/s, bytes model in B/s)."""
    from joinlib.costs.unit_time import plan_cost, sequence_cost
    out: Estimate = {"plan": {}, "by_head": {}}
    for name, model in models.items():
        out["plan"][name] = _round(plan_cost(query, plan, model), 9)
        for seq in plan.sequences:
            out["by_head"].setdefault(seq.head, {})[name] = _round(sequence_cost(query, seq, model), 9)
    return out


# --------------------------------------------------------------------------- statistics


class Summary(TypedDict):
    mean: Optional[float]
    median: Optional[float]
    sd: Optional[float]
    max: Optional[float]
    min: Optional[float]
    n: int


def summarize(values: Iterable[float]) -> Summary:
    """mean, median, sd (sample, n−1), max, min and n of ``values``."""
    xs = [float(x) for x in values]
    if not xs:
        return {"mean": None, "median": None, "sd": None, "max": None, "min": None, "n": 0}
    return {"mean": _round(statistics.fmean(xs)), "median": _round(statistics.median(xs)),
            "sd": _round(statistics.stdev(xs)) if len(xs) > 1 else 0.0,
            "max": _round(max(xs)), "min": _round(min(xs)), "n": len(xs)}


def pearson(xs: Sequence[float], ys: Sequence[float]) -> Optional[float]:
    """Pearson's r, or None with fewer than 2 points or a constant variable."""
    n = len(xs)
    if n != len(ys):
        raise ValueError("pearson: sequences of different lengths")
    if n < 2:
        return None
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    sxx = sum((x - mx) ** 2 for x in xs)
    syy = sum((y - my) ** 2 for y in ys)
    if sxx <= 0 or syy <= 0:
        return None
    return max(-1.0, min(1.0, sxy / math.sqrt(sxx * syy)))


def _ranks(xs: Sequence[float]) -> list[float]:
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    ranks = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2.0 + 1.0  # ties share their average rank
        i = j + 1
    return ranks


def spearman(xs: Sequence[float], ys: Sequence[float]) -> Optional[float]:
    """Spearman's rho: Pearson's r of the ranks (ties averaged)."""
    if len(xs) != len(ys):
        raise ValueError("spearman: sequences of different lengths")
    return pearson(_ranks(xs), _ranks(ys))


class Pair(TypedDict):
    """One estimate and the measurement it predicts."""

    estimated: Optional[float]
    measured: float
    label: str


class Worst(TypedDict):
    label: str
    estimated: float
    measured: float
    ratio: float


class Accuracy(TypedDict):
    n: int
    pearson: Optional[float]
    spearman: Optional[float]
    ratio_measured_over_estimated: Summary
    worst: list[Worst]


def accuracy(pairs: Sequence[Pair], worst: int = 5) -> Accuracy:
    """Agreement of estimates with measurements.

    ``pairs``: dicts with ``estimated``, ``measured`` and ``label``.  Reports n, Pearson
    and Spearman correlation, the ratio measured / estimated (mean, median, min, max)
    and the ``worst`` pairs by |log(measured / estimated)|.
    """
    ok = [(est, p["measured"], p["label"]) for p in pairs
          if (est := p["estimated"]) and est > 0 and p["measured"] > 0]
    xs = [est for est, _, _ in ok]
    ys = [measured for _, measured, _ in ok]
    ratios = [y / x for x, y in zip(xs, ys, strict=True)]
    ranked = sorted(ok, key=lambda p: -abs(math.log(p[1] / p[0])))
    r, rho = pearson(xs, ys), spearman(xs, ys)
    return {
        "n": len(ok),
        "pearson": None if r is None else _round(r, 4),
        "spearman": None if rho is None else _round(rho, 4),
        "ratio_measured_over_estimated": summarize(ratios),
        "worst": [{"label": label, "estimated": _round(est), "measured": _round(measured),
                   "ratio": _round(measured / est, 4)} for est, measured, label in ranked[:worst]],
    }


# Which measurement each model predicts.
MODEL_TARGET = {"paper": "execution_s_per_s", "bytes": "bytes_per_s", "calibrated": "execution_s_per_s"}


def accuracy_pairs(records: Iterable[Record]) -> dict[str, list[Pair]]:
    """Pairs per model from run records with ``estimated`` (model -> value),
    ``measured`` (a :meth:`Measurement.to_dict`) and ``label``."""
    out: dict[str, list[Pair]] = {}
    for rec in records:
        for model, est in rec["estimated"].items():
            target = MODEL_TARGET.get(model, "execution_s_per_s")
            out.setdefault(model, []).append({"estimated": est, "measured": rec["measured"][target],
                                              "label": rec["label"]})
    return out


def _corr(v: Optional[float]) -> str:
    return "  n/a" if v is None else f"{v:5.3f}"


def format_accuracy(acc: Mapping[str, Accuracy], title: str = "model accuracy") -> str:
    lines = [f"{title} (estimated vs measured, steady state):"]
    for model, a in acc.items():
        target = "bytes/s" if MODEL_TARGET.get(model) == "bytes_per_s" else "execution s/s"
        rr = a["ratio_measured_over_estimated"]
        if not a["n"]:
            lines.append(f"  {model:<10} no pairs")
            continue
        lines.append(f"  {model:<10} vs {target:<13} n={a['n']:<4} Pearson {_corr(a['pearson'])}  "
                     f"Spearman {_corr(a['spearman'])}  measured/estimated median {rr['median']:.3g} "
                     f"(min {rr['min']:.3g}, max {rr['max']:.3g})")
        for w in a["worst"][:3]:
            lines.append(f"      worst: {w['label']}: estimated {w['estimated']:.4g}, measured "
                         f"{w['measured']:.4g} (x{w['ratio']:.3g})")
    return "\n".join(lines)


# --------------------------------------------------------------------------- output


def prepare_out(path: Path) -> Path:
    """Create the output directory (JoinlibError if impossible)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise JoinlibError(f"--out {path} exists and is not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise JoinlibError(f"cannot create {path}: {e.strerror or e}") from None
    return path


def write_json(path: Path, data: Any, records: Sequence[str] = ()) -> None:
    """Indented JSON, except that the lists under the top-level keys ``records`` get
    one compact line per element (run records: readable and small)."""
    import json
    if not records or not isinstance(data, dict):
        Path(path).write_text(json.dumps(data, indent=1, allow_nan=False) + "\n")
        return
    parts = []
    for k, v in data.items():
        key = json.dumps(k)
        if k in records and isinstance(v, list):
            body = ",\n  ".join(json.dumps(x, separators=(",", ":"), allow_nan=False) for x in v)
            parts.append(f" {key}: [\n  {body}\n ]" if v else f" {key}: []")
        else:
            text = json.dumps(v, indent=1, allow_nan=False).replace("\n", "\n ")
            parts.append(f" {key}: {text}")
    Path(path).write_text("{\n" + ",\n".join(parts) + "\n}\n")


def save_png(fig: Figure, path: Path, dpi: int = 80) -> Path:
    """Save ``fig`` as a 64-colour PNG (a third of the size of the RGBA file, same look)."""
    import io
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    try:
        from PIL import Image
    except ImportError:  # pragma: no cover - Pillow comes with matplotlib
        Path(path).write_bytes(buf.getvalue())
        return Path(path)
    buf.seek(0)
    img = Image.open(buf).convert("RGB").quantize(colors=64, method=Image.Quantize.MEDIANCUT,
                                                  dither=Image.Dither.NONE)
    img.save(path, format="PNG", optimize=True)
    return Path(path)


def progress_bar(total: int, desc: str, enabled: bool) -> tqdm[NoReturn]:
    """A tqdm bar on stderr (a no-op object when disabled)."""
    from tqdm import tqdm
    return tqdm(total=total, desc=desc, unit="run", disable=not enabled, file=sys.stderr,
                leave=False, dynamic_ncols=True)


def show_progress(args: object) -> bool:
    return not getattr(args, "no_progress", False) and sys.stderr.isatty()


def new_figure(width: float, height: float) -> Figure:
    """A matplotlib Figure without pyplot (no global state, no display backend).

    Margins are set by hand (:func:`fit`): the automatic layout engines double the
    drawing time."""
    from matplotlib.figure import Figure
    return Figure(figsize=(width, height), dpi=100)


def fit(fig: Figure, top: float = 0.9, hspace: float = 0.45, wspace: float = 0.3) -> None:
    """Fixed margins sized for the titles and labels these figures use."""
    w, h = fig.get_size_inches()
    fig.subplots_adjust(left=0.65 / w, right=1 - 0.2 / w, bottom=0.55 / h, top=top, hspace=hspace, wspace=wspace)


def check_positive(value: int, flag: str) -> int:
    if value < 1:
        raise JoinlibError(f"{flag} must be at least 1, not {value}")
    return value


def choose(values: str, allowed: Sequence[str], flag: str) -> list[str]:
    """A comma-separated list of names, each from ``allowed``."""
    out = [v.strip() for v in str(values).split(",") if v.strip()]
    bad = [v for v in out if v not in allowed]
    if bad or not out:
        raise JoinlibError(f"{flag}: unknown {', '.join(map(repr, bad)) or 'empty list'} "
                           f"(choose from {', '.join(allowed)})")
    return list(dict.fromkeys(out))


ProgressFn = Callable[[int], None]
