"""``joinlib explain``: a plan as a tree of sites, with the byte model's estimate of every link and kind, next to
``central``'s and the floor's.

Why one record for the text and the JSON: the command line, the planner service (``POST /explain``) and the Python
API show the same figures, and the tests compare them with the numbers they come from -- :class:`WireModel`'s
estimate of the plan (what ``joinlib plan --explain`` prints), the same model's estimate of ``central`` at every
node (the best one is ``central``'s figure, as ``make demo`` compares), and the floor: measured on the data when
there is data (:func:`joinlib.costs.floor.floor`, exact), else the byte model's estimate of the tuples a full
reducer ships (:func:`floor_estimate`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from joinlib.costs.flows import reduction_flows
from joinlib.costs.inputs import Inputs, inputs_for
from joinlib.costs.model import FlowCost, PlanEstimate, WireModel
from joinlib.costs.unit_time import full_bytes, interval_s
from joinlib.model import Query, Tup
from joinlib.plan.ir import PlanIR, lower
from joinlib.plan.logical import Plan, central, reduction, validate

#: what each flow kind carries, for people
KIND_LABELS = {"full": "full tuples", "partial": "join values, key sets and filters",
               "update": "window updates (expiry counts, DJA vectors)", "snapshot": "window snapshots"}


@dataclass(frozen=True)
class LinkBytes:
    """Estimated bytes per second of stream time on one directed link, of one kind."""

    src: str
    dst: str
    kind: str
    bytes_per_s: float


@dataclass(frozen=True)
class SiteView:
    """One node of the plan: the streams born there, what runs there, and the flows it sends."""

    site: str
    born: tuple[str, ...]
    operators: tuple[str, ...]
    sends: tuple[FlowCost, ...]
    results: bool


@dataclass(frozen=True)
class Reference:
    """A comparison figure: ``central``'s best site or the floor's, its bytes per second and, with data, per run."""

    site: str
    bytes_per_s: float
    source: str                       # "model" (the byte model's estimate) or "data" (measured on --data)
    by_site: tuple[tuple[str, float], ...] = ()
    bytes: Optional[float] = None     # over the data's span (with data)


@dataclass(frozen=True)
class Explanation:
    """A plan with its estimated bytes (see the module docstring); per second of stream time, and per run of
    ``duration_s`` (the data's span) when there is data."""

    query: str
    plan: str
    description: str
    plan_json: dict[str, Any]
    measured: bool
    duration_s: Optional[float]
    sites: tuple[SiteView, ...]
    links: tuple[LinkBytes, ...]
    kinds: tuple[tuple[str, float], ...]
    bytes_per_s: float
    central: Reference
    floor: Reference

    def __str__(self) -> str:
        """The text ``joinlib explain`` prints (handy in a notebook: ``print(joinlib.explain(...))``)."""
        return format_explanation(self)

    def per_run(self, bytes_per_s: float) -> Optional[float]:
        return None if self.duration_s is None else bytes_per_s * self.duration_s

    @property
    def vs_central(self) -> Optional[float]:
        """The plan's bytes over the best ``central``'s (None when ``central`` ships nothing)."""
        return self.bytes_per_s / self.central.bytes_per_s if self.central.bytes_per_s > 0 else None

    @property
    def vs_floor(self) -> Optional[float]:
        """The plan's bytes over the floor's (None for a floor of 0: every exact plan is infinitely above it)."""
        return self.bytes_per_s / self.floor.bytes_per_s if self.floor.bytes_per_s > 0 else None

    def to_json(self) -> dict[str, Any]:
        """The JSON of ``joinlib explain --json`` and of the planner's ``POST /explain``."""
        def ref(r: Reference) -> dict[str, Any]:
            out: dict[str, Any] = {"site": r.site, "bytes_per_s": r.bytes_per_s, "source": r.source}
            if r.by_site:
                out["by_site"] = dict(r.by_site)
            if r.bytes is not None:
                out["bytes"] = r.bytes
            return out
        return {
            "query": self.query, "plan": self.plan, "description": self.description, "plan_json": self.plan_json,
            "statistics": "measured" if self.measured else "declared", "duration_s": self.duration_s,
            "sites": [{"site": s.site, "born": list(s.born), "operators": list(s.operators), "results": s.results,
                       "sends": [{"dst": f.dst, "kind": f.kind, "flow": f.sig, "items_per_message": f.items,
                                  "bytes_per_s": f.bytes_per_s} for f in s.sends]} for s in self.sites],
            "links": [{"src": x.src, "dst": x.dst, "kind": x.kind, "bytes_per_s": x.bytes_per_s,
                       "bytes": self.per_run(x.bytes_per_s)} for x in self.links],
            "kinds": {k: v for k, v in self.kinds},
            "bytes_per_s": self.bytes_per_s, "bytes": self.per_run(self.bytes_per_s),
            "central": ref(self.central), "floor": ref(self.floor),
            "vs_central": self.vs_central, "vs_floor": self.vs_floor,
        }


def explain_plan(query: Query, plan: Plan, spec: str, streams: Optional[dict[str, list[Tup]]] = None) -> Explanation:
    """The explanation of ``plan`` (chosen as ``spec``) over the query's declared statistics, or those measured on
    ``streams`` (which also give the exact floor and the per-run figures)."""
    inputs = inputs_for(query, streams)
    model = WireModel(inputs)
    est = model.estimate(query, plan)
    ir = lower(inputs.query, validate(inputs.query, plan))
    duration = _span_s(streams)
    central_by = tuple((n, model.estimate(query, central(query, n)).bytes_per_s) for n in query.nodes)
    best = min(central_by, key=lambda kv: (kv[1], kv[0]))
    cref = Reference(best[0], best[1], "model", central_by, None if duration is None else best[1] * duration)
    kinds: dict[str, float] = {}
    for f in est.flows:
        kinds[f.kind] = kinds.get(f.kind, 0.0) + f.bytes_per_s
    return Explanation(query.name, spec, plan.describe(), plan.to_json(), inputs.measured, duration,
                       _sites(query, ir, est), tuple(LinkBytes(s, d, k, v) for (s, d, k), v in est.by_link().items()),
                       tuple(sorted(kinds.items())), est.bytes_per_s, cref,
                       _floor(query, inputs, streams, duration))


def _span_s(streams: Optional[dict[str, list[Tup]]]) -> Optional[float]:
    """The data's span in seconds of stream time, as ``joinlib plan --explain`` takes it."""
    ts = [t.ts for tups in (streams or {}).values() for t in tups]
    return (max(ts) - min(ts) + 1) / 1000.0 if ts else None


def _floor(query: Query, inputs: Inputs, streams: Optional[dict[str, list[Tup]]],
           duration: Optional[float]) -> Reference:
    if streams and duration:
        from joinlib.costs.floor import floor  # reads the data: only with data
        f = floor(query, streams)
        return Reference(f.site, f.bytes / duration, "data",
                         tuple((s, b / duration) for s, b in f.by_site.items()), float(f.bytes))
    by_site = floor_estimate(query, inputs)
    site = min(by_site, key=lambda s: (by_site[s], s))
    return Reference(site, by_site[site], "model", tuple(by_site.items()))


def floor_estimate(query: Query, inputs: Optional[Inputs] = None) -> dict[str, float]:
    """The byte model's floor per result node, in bytes per second: the tuples a full reducer lets through (a
    match along every edge of its spanning tree, no false positives), at their full size, for every stream not
    born at that node.  An estimate: the exact floor needs the data (:func:`joinlib.costs.floor.floor`)."""
    inputs = inputs or inputs_for(query)
    q = inputs.query
    tau = interval_s(q)
    out: dict[str, float] = {}
    for node in q.nodes:
        ir = lower(q, validate(q, reduction(q, node)))
        _, shipped = reduction_flows(q, ir.reducers, None)
        out[node] = sum(n * full_bytes(q.stream(s)) for s, n in shipped.items() if q.stream(s).site != node) / tau
    return out


def _sites(query: Query, ir: PlanIR, est: PlanEstimate) -> tuple[SiteView, ...]:
    """Per node (stream sites first, then processing-only nodes that the plan uses), what runs and what it sends."""
    ops: dict[str, list[str]] = {n: [] for n in query.nodes}
    results: set[str] = set()
    for head, site in ir.starts:
        if site != query.stream(head).site:
            ops.setdefault(site, []).append(f"starts {head}'s join sequence (its batches shipped here)")
    for rep in ir.replicas:
        ops.setdefault(rep.loc, []).append(f"{rep.kind} replica of {rep.stream} (fed from {rep.home})")
    for st in ir.steps:
        probe = " on its replica here" if st.replica is not None and st.local is False else ""
        where = "" if st.proc == st.loc else f", output at {st.proc}"
        last = "; writes results" if st.last else ""
        ops.setdefault(st.loc, []).append(f"{st.head}'s sequence step {st.j + 1}: joins {st.stream} with "
                                          f"{st.algorithm}{probe}{where}{last}")
        if st.last:
            results.add(st.proc)
    for red in ir.reducers:
        to = ", ".join(e.stream for e in red.sends if e.out_flow is not None) or "no stream"
        ship = f"ships what passes to {red.site}" if red.home != red.site else "keeps what passes"
        ops.setdefault(red.home, []).append(f"reducer of {red.stream}: key sets to {to}; {ship}")
        results.add(red.site)
    sends: dict[str, list[FlowCost]] = {}
    for f in est.flows:
        sends.setdefault(f.src, []).append(f)
    nodes = [n for n in query.nodes if n in query.sites or ops.get(n) or n in sends]
    return tuple(SiteView(n, tuple(s.name for s in query.streams if s.site == n), tuple(ops.get(n, [])),
                          tuple(sorted(sends.get(n, []), key=lambda f: (f.dst, f.kind, f.sig))), n in results)
                 for n in nodes)


def format_explanation(e: Explanation) -> str:
    """The text of ``joinlib explain``: the tree, then bytes per link and kind, then the comparison."""
    per_run = e.duration_s is not None
    stats = "measured on the data" if e.measured else "declared in the query"
    lines = [f"query {e.query}, plan {e.plan}: {e.description.splitlines()[0] if e.description else ''}"]
    lines += [f"  {x}" for x in e.description.splitlines()[1:]]
    lines.append(f"estimated by the byte model, statistics {stats}; bytes per second of stream time"
                 + (f" and per run of {e.duration_s:.1f} s" if per_run else ""))
    for s in e.sites:
        born = f"born here: {', '.join(s.born)}" if s.born else "processing-only node"
        lines.append(f"site {s.site} ({born}{'; results' if s.results else ''})")
        lines += [f"  runs  {op}" for op in s.operators] or ["  runs  nothing of this plan"]
        for f in s.sends:
            lines.append(f"  sends -> {f.dst:<8} {f.kind:<8} {f.bytes_per_s:>12,.0f} B/s  {f.sig} "
                         f"({f.items:,.2f} per message)")
    run = f"{'per run':>14}" if per_run else ""
    lines.append(f"{'link':<24}{'kind':<9}{'bytes/s':>12}{run}")
    for x in e.links:
        lines.append(f"{x.src + ' -> ' + x.dst:<24}{x.kind:<9}{x.bytes_per_s:>12,.0f}" + _run(e, x.bytes_per_s))
    for k, v in e.kinds:
        lines.append(f"{'kind ' + k:<33}{v:>12,.0f}{_run(e, v)}  {KIND_LABELS.get(k, '')}")
    lines.append(f"{'total':<33}{e.bytes_per_s:>12,.0f}{_run(e, e.bytes_per_s)}")
    lines.append(_compare("central", f"all to {e.central.site}, the best site; estimated", e.central,
                          e.vs_central, e))
    what = "measured on the data" if e.floor.source == "data" else "estimated: tuples a full reducer lets through"
    lines.append(_compare("floor", f"results at {e.floor.site}; {what}", e.floor, e.vs_floor, e))
    return "\n".join(lines)


def _run(e: Explanation, bytes_per_s: float) -> str:
    v = e.per_run(bytes_per_s)
    return "" if v is None else f"{v:>14,.0f}"


def _compare(name: str, what: str, r: Reference, ratio: Optional[float], e: Explanation) -> str:
    amount = f"{r.bytes:,.0f} bytes per run" if r.bytes is not None else f"{r.bytes_per_s:,.0f} B/s"
    if ratio is None:
        tail = f"{name} ships nothing"
    else:
        tail = f"the plan ships {ratio:.1%} of it ({1 / ratio:,.1f}x less)" if 0 < ratio < 1 else \
            f"the plan ships {ratio:,.2f}x the {name}'s"
    return f"{name}: {amount} ({what}); {tail}"
