"""Table 3 / Fig. 8: plans of greedy (and beam) vs the exhaustive optimum, measured.

Per join-graph topology (Fig. 6), ``queries`` random 4-way queries with per-stream
parameters drawn uniformly from Table 2 (one site per stream, network 1024 kbps /
25 ms, τ = 100 ms, δ = 80 ms).  For each query every planner plans with the same cost
model (``paper`` by default), the query's data is generated once, and each distinct
plan is measured on it (:func:`~.measure.measure`, median of ``repeat`` runs).  Planners
returning the same plan share one measurement, so their ratio is exactly 1.

Ratios, for every planner P, relative to exhaustive (E):

* ``measured``:  T_P / T_E, measured execution time (processing + transmission);
* ``estimated``: C_P / C_E under the planning model (≥ 1 for greedy: E is optimal);
* ``bytes``:     measured bytes per second, B_P / B_E (deterministic);
* ``bytes_estimated``: the bytes model's estimate of the same plans.

``table3.json`` holds the measured ratio's summary, shaped
``{topology: {planner: {mean, median, sd, max, n}}}``; ``table3_runs.json`` every query,
plan, measurement and estimate, and the summaries of the other ratios.
"""
from __future__ import annotations

import json
import random
import statistics
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

from joinlib.costs.unit_time import CostModel
from joinlib.data.synthetic import TABLE2, TOPOLOGIES, SyntheticStats, build_query, table2_stream, topology_edges
from joinlib.experiments.common import TOPOLOGY_LABELS, DataCache, Record, round_sig, warmup_for
from joinlib.experiments.estimates import (
    accuracy,
    accuracy_pairs,
    cost_models,
    estimate_all,
    format_accuracy,
    planning_model,
    spearman,
    summarize,
)
from joinlib.experiments.measure import measure
from joinlib.experiments.output import fit, new_figure, progress_bar, save_png, write_json
from joinlib.model import Execution, Network, Query, Tup
from joinlib.plan.ir import lower
from joinlib.plan.logical import Plan
from joinlib.planner import plan_for

PAPER_TABLE3 = {  # Tran & Lee 2010, Table 3: T_G / T_E
    "star": {"mean": 1.02, "median": 1.00, "sd": 0.11, "max": 1.39},
    "chain": {"mean": 1.06, "median": 1.01, "sd": 0.23, "max": 2.43},
    "cycle": {"mean": 1.08, "median": 1.01, "sd": 0.21, "max": 2.19},
    "complete": {"mean": 1.14, "median": 1.04, "sd": 0.29, "max": 2.33},
}
PLANNERS = ("greedy", "exhaustive", "beam")
RATIOS = ("measured", "estimated", "bytes", "bytes_estimated")
M = 4


def random_stats(rng: random.Random) -> list[SyntheticStats]:
    """Per-stream parameters drawn uniformly from Table 2."""
    return [table2_stream(rng) for _ in range(M)]


def table3_query(stats: Sequence[SyntheticStats], topology: str, name: str = "q",
                 per_edge_attrs: bool = False) -> Query:
    """The 4-way query of ``stats`` over the topology's join graph (sites N1..N4)."""
    return build_query(name, stats, topology_edges(len(stats), topology), per_edge_attrs=per_edge_attrs,
                       network=Network(25.0, 1024.0), execution=Execution(100, 80))


def random_table3_query(rng: random.Random, topology: str, name: str = "q", per_edge_attrs: bool = False) -> Query:
    """A random 4-way query with Table 2 parameters over the topology's join graph."""
    return table3_query(random_stats(rng), topology, name, per_edge_attrs)


def query_of(record: Record, per_edge_attrs: bool = False) -> Query:
    """Rebuild the query of a ``table3_runs.json`` record."""
    return table3_query(record["streams"], record["topology"], f"{record['topology']}{record['index']}",
                      per_edge_attrs)


def sharing(query: Query, plan: Plan) -> dict[str, int]:
    """Window replicas of the compiled plan: steps probing one (``replica_uses``), distinct
    ones (``replicas``) and flows; Eq. 1 charges every use, the engine ships each replica once."""
    ir = lower(query, plan)
    return {"replica_uses": sum(1 for st in ir.steps if st.replica is not None),
            "replicas": len(ir.replicas), "flows": len(ir.flows)}


def _ratio(a: float, b: float) -> float:
    if b > 0:
        return a / b
    return 1.0 if a <= 0 else float("inf")


def run(queries: int = 100, seed: int = 1, duration_ms: int = 5000, *, repeat: int = 3,
        model: str = "paper", calibration: Optional[Path] = None, warmup: str = "auto",
        topologies: Sequence[str] = TOPOLOGIES, planners: Sequence[str] = PLANNERS, per_edge_attrs: bool = False,
        progress: bool = False) -> tuple[Record, Record]:
    """Return (table3.json document, table3_runs.json document)."""
    planners = ["exhaustive", *(p for p in planners if p != "exhaustive")]
    pmodel = planning_model(model, calibration)
    models = {**cost_models(calibration), "planning": pmodel}
    records: list[Record] = []
    with progress_bar(len(topologies) * queries, "table3", progress) as bar, DataCache() as data:
        for topo in topologies:
            rng = random.Random(f"table3:{seed}:{topo}")
            for i in range(queries):
                stats = random_stats(rng)
                q = table3_query(stats, topo, f"{topo}{i}", per_edge_attrs)
                bar.set_postfix_str(f"{topo} query {i + 1}/{queries}")
                plans = {p: plan_for(p, q, pmodel) for p in planners}
                warm = warmup_for(q, warmup)
                streams = data.streams(q, warm + duration_ms, seed * 100_003 + i)
                measured, same = _measure_plans(q, streams, plans, warm, repeat)
                data.clear()
                records.append(_query_record(q, topo, i, stats, plans, measured, same, models))
                bar.update(1)
    table: Record = {topo: {p: _summary(records, topo, "measured", p) for p in planners} for topo in topologies}
    details: Record = {
        "experiment": "table3",
        "meta": {"queries": queries, "seed": seed, "duration_ms": duration_ms, "repeat": repeat,
                 "model": model, "warmup": warmup, "per_edge_attrs": per_edge_attrs,
                 "calibration": str(calibration) if calibration else None, **_SETUP,
                 "date": time.strftime("%Y-%m-%d %H:%M:%S")},
        "paper": PAPER_TABLE3,
        "summary": {r: {topo: {p: _summary(records, topo, r, p) for p in planners} for topo in topologies}
                    for r in RATIOS},
        "optimal_share": {topo: {p: _optimal_share(records, topo, p) for p in planners} for topo in topologies},
        "queries": records,
    }
    details["accuracy"] = {m: accuracy(pairs) for m, pairs in accuracy_pairs(run_records(details)).items()}
    details["sharing_vs_error"] = sharing_vs_error(details)
    return table, details


# The fixed part of every query's setup, as the runs document records it.
_SETUP: Record = {
    "table2": {"attributes": list(TABLE2["attributes"]), "selectivity": list(TABLE2["selectivity"]),
               "rate": list(TABLE2["rate"]), "window_ms": list(TABLE2["window_ms"])},
    "network": {"latency_ms": 25.0, "bandwidth_kbps": 1024.0}, "interval_ms": 100, "max_delay_ms": 80,
}


def _measure_plans(q: Query, streams: dict[str, list[Tup]], plans: Mapping[str, Plan], warm: int,
                   repeat: int) -> tuple[dict[str, Record], dict[str, str]]:
    """Each distinct plan measured once: planners returning the same plan share its measurement
    (``same``: planner -> the first planner that returned it)."""
    measured: dict[str, Record] = {}
    same: dict[str, str] = {}
    for p, plan in plans.items():
        key = json.dumps(plan.to_json(), sort_keys=True)
        twin = next((o for o in measured if json.dumps(plans[o].to_json(), sort_keys=True) == key), None)
        if twin is not None:
            measured[p] = measured[twin]
            same[p] = same.get(twin, twin)
        else:
            measured[p] = measure(q, streams, plan, warmup_ms=warm, repeat=repeat).to_dict(detail=False)
    return measured, same


def _query_record(q: Query, topo: str, i: int, stats: list[SyntheticStats], plans: Mapping[str, Plan],
                  measured: Mapping[str, Record], same: Mapping[str, str],
                  models: Mapping[str, CostModel]) -> Record:
    """One query's record of the runs document: its distinct plans, measurements, estimates, ratios."""
    est = {p: estimate_all(q, plan, models)["plan"] for p, plan in plans.items()}
    e_m, e_e = measured["exhaustive"], est["exhaustive"]
    ratios: dict[str, dict[str, float]] = {r: {} for r in RATIOS}
    for p in plans:
        ratios["measured"][p] = round_sig(_ratio(measured[p]["execution_s_per_s"], e_m["execution_s_per_s"]))
        ratios["estimated"][p] = round_sig(_ratio(est[p]["planning"], e_e["planning"]))
        ratios["bytes"][p] = round_sig(_ratio(measured[p]["bytes_per_s"], e_m["bytes_per_s"]))
        ratios["bytes_estimated"][p] = round_sig(_ratio(est[p]["bytes"], e_e["bytes"]))
    distinct = [p for p in plans if p not in same]
    return {"topology": topo, "index": i, "streams": stats,
            "plans": {p: plans[p].to_json() for p in distinct}, "same_plan_as": dict(same),
            "measured": {p: measured[p] for p in distinct},
            "estimated": {p: {k: v for k, v in est[p].items() if k != "planning"} for p in distinct},
            "estimated_planning": {p: e["planning"] for p, e in est.items()},
            "sharing": {p: sharing(q, plans[p]) for p in distinct},
            "ratios": ratios}


def sharing_vs_error(details: Record) -> Record:
    """Does the paper model overestimate plans whose sequences share window replicas?

    Spearman correlation, over every distinct plan, between the replica uses the
    engine saves (``replica_uses − replicas``) and measured / estimated; plus the
    median of that ratio and of the savings per planner."""
    xs: list[float] = []
    ys: list[float] = []
    per: dict[str, tuple[list[float], list[float]]] = {}
    for rec in details["queries"]:
        for p, sh in rec["sharing"].items():
            est, meas = rec["estimated"][p]["paper"], rec["measured"][p]["execution_s_per_s"]
            if est > 0 and meas > 0:
                xs.append(sh["replica_uses"] - sh["replicas"])
                ys.append(meas / est)
                per.setdefault(p, ([], []))
                per[p][0].append(xs[-1])
                per[p][1].append(ys[-1])
    rho = spearman(xs, ys) if len(xs) > 1 else None
    return {"n": len(xs), "spearman": None if rho is None else round(rho, 4),
            "by_planner": {p: {"saved_replica_uses_mean": round(sum(a) / len(a), 3),
                               "measured_over_estimated_median": round(statistics.median(b), 4)}
                           for p, (a, b) in per.items()}}


def _summary(records: list[Record], topo: str, ratio: str, planner: str) -> dict[str, Optional[float]]:
    s = summarize([r["ratios"][ratio][planner] for r in records if r["topology"] == topo])
    return {"mean": s["mean"], "median": s["median"], "sd": s["sd"], "max": s["max"], "n": s["n"]}


def _optimal_share(records: list[Record], topo: str, planner: str) -> float:
    rs = [r for r in records if r["topology"] == topo]
    return round(sum(1 for r in rs if r["ratios"]["estimated"][planner] <= 1 + 1e-9) / max(1, len(rs)), 4)


def run_records(details: Record) -> list[Record]:
    """(estimated, measured) pairs of every distinct measured plan, for the accuracy report."""
    out = []
    for rec in details["queries"]:
        for p, m in rec["measured"].items():
            if p in rec["same_plan_as"]:
                continue
            out.append({"label": f"table3 {rec['topology']} q{rec['index']} {p}", "measured": m,
                        "estimated": rec["estimated"][p]})
    return out


def _cells(s: Optional[Mapping[str, Any]]) -> str:
    if not s or not s.get("n", 1) or s.get("mean") is None:
        return f"{'-':>5} {'-':>5} {'-':>5} {'-':>5}"
    return f"{s['mean']:5.2f} {s['median']:5.2f} {s['sd']:5.2f} {s['max']:5.2f}"


def format_table(details: Record) -> str:
    """One table per ratio: rows = topologies, columns = the paper's greedy, then each planner."""
    meta = details["meta"]
    topologies = list(details["summary"]["measured"])
    planners = [p for p in next(iter(details["summary"]["measured"].values())) if p != "exhaustive"]
    n = meta["queries"]
    lines = [f"Table 3: ratio to the exhaustive plan over {n} random 4-way queries per topology "
             f"(Table 2 parameters; plans by the {meta['model']} model; measured = median of "
             f"{meta['repeat']} runs, {meta['duration_ms'] / 1000:g} s of steady state each)"]
    titles = {"measured": "T_P / T_E, measured execution time (processing + transmission)",
              "estimated": f"C_P / C_E, estimated cost under the {meta['model']} model (planning model)",
              "bytes": "B_P / B_E, measured bytes per second",
              "bytes_estimated": "bytes-model estimate of the same plans"}
    cols = ["paper greedy"] + planners
    head = f"{'':<16}" + "".join(f"| {c:<24}" for c in cols)
    sub = f"{'topology':<16}" + "".join(f"| {'mean':>5} {'med':>5} {'sd':>5} {'max':>5} " for _ in cols)
    for r in RATIOS:
        lines += ["", titles[r], head, sub]
        for topo in topologies:
            row = f"{TOPOLOGY_LABELS.get(topo, topo):<16}"
            row += f"| {_cells(details['paper'].get(topo) if r == 'measured' else None):<24}"
            for p in planners:
                row += f"| {_cells(details['summary'][r][topo][p]):<24}"
            lines.append(row)
    lines.append("")
    lines.append("plans optimal under the planning model: " + "; ".join(
        f"{TOPOLOGY_LABELS.get(t, t)} " + ", ".join(f"{p} {details['optimal_share'][t][p]:.0%}" for p in planners)
        for t in topologies))
    sv = details.get("sharing_vs_error")
    if sv and sv["spearman"] is not None:
        lines.append("window replicas shared between sequences (one shipment, several probing steps; "
                     "Eq. 1 charges each use): " + ", ".join(
                         f"{p} {v['saved_replica_uses_mean']:.2f} per plan, measured/estimated "
                         f"{v['measured_over_estimated_median']:.2f}" for p, v in sv["by_planner"].items())
                     + f"; Spearman(shared uses, measured/estimated) = {sv['spearman']:.2f} over {sv['n']} plans")
    lines.append("")
    lines.append(format_accuracy(details["accuracy"], "Table 3 model accuracy (every distinct plan)"))
    return "\n".join(lines)


def plot(details: Record, path: Path) -> Path:
    """Fig. 8: frequency of T_G / T_E rounded to 0.1, per topology (measured; estimated as steps)."""
    topologies = list(details["summary"]["measured"])
    n = len(topologies)
    cols = 2 if n > 1 else 1
    rows = (n + cols - 1) // cols
    fig = new_figure(5.2 * cols, 3.4 * rows)
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax, topo in zip(axes, topologies, strict=False):  # a grid of cells has some to spare
        recs = [r for r in details["queries"] if r["topology"] == topo]
        series = {"greedy measured": [r["ratios"]["measured"].get("greedy") for r in recs],
                  "beam measured": [r["ratios"]["measured"].get("beam") for r in recs],
                  "greedy estimated": [r["ratios"]["estimated"].get("greedy") for r in recs]}
        bins = sorted({round(x, 1) for xs in series.values() for x in xs if x is not None})
        if not bins:
            continue
        lo, hi = min(bins), max(bins)
        grid = [round(lo + 0.1 * k, 1) for k in range(int(round((hi - lo) / 0.1)) + 1)]
        width = 0.04
        bars: list[tuple[str, list[Optional[float]], dict[str, Any]]] = [
            ("greedy measured", series["greedy measured"], {"color": "tab:blue"}),
            ("beam measured", series["beam measured"], {"color": "tab:green", "alpha": 0.7})]
        for off, (name, values, style) in zip((-width / 2, width / 2), bars, strict=True):
            xs = [x for x in values if x is not None]
            if xs:
                counts = [sum(1 for x in xs if round(x, 1) == g) for g in grid]
                ax.bar([g + off for g in grid], counts, width=width, label=name, **style)
        est = [x for x in series["greedy estimated"] if x is not None]
        if est:
            counts = [sum(1 for x in est if round(x, 1) == g) for g in grid]
            ax.step(grid, counts, where="mid", color="k", linestyle="--", label="greedy estimated")
        ax.set_title(f"{TOPOLOGY_LABELS.get(topo, topo)} (n = {len(recs)})")
        ax.set_xlabel("T_planner / T_exhaustive (rounded to 0.1)")
        ax.set_ylabel("queries")
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=7)
    for ax in axes[n:]:
        ax.set_visible(False)
    fig.suptitle("Fig. 8: frequency distribution of the plan execution-time ratio")
    fit(fig, top=0.9, hspace=0.45, wspace=0.25)
    save_png(fig, path)
    return path


def main(out: Path, queries: int, seed: int, duration_ms: int, repeat: int, model: str,
         calibration: Optional[Path], warmup: str, topologies: list[str], planners: list[str], per_edge_attrs: bool,
         progress: bool) -> tuple[Record, Record]:
    table, details = run(queries, seed, duration_ms, repeat=repeat, model=model, calibration=calibration,
                         warmup=warmup, topologies=topologies, planners=planners,
                         per_edge_attrs=per_edge_attrs, progress=progress)
    write_json(out / "table3.json", table)
    write_json(out / "table3_runs.json", details, records=("queries",))
    png = plot(details, out / "table3.png")
    print(format_table(details))
    print(f"\nwrote {out / 'table3.json'}, {out / 'table3_runs.json'} and {png}")
    return table, details
