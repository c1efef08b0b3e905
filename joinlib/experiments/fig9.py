"""Fig. 9: greedy vs exhaustive when every node has identical parameters.

Four streams S1..S4 at sites N1..N4, one per node, all with the paper's Fig. 9
defaults (tuple 100 attributes ≈ 500 B, rate 100/s, f = 0.06, window 1200 ms; network
1024 kbps / 25 ms; τ = 100 ms, δ = 80 ms), joined on one attribute along each
topology of Fig. 6.  One parameter at a time is swept over its Table 2 values, for
every node at once (Fig. 10's caption says Fig. 9 varies rate, tuple size,
selectivity and window size).  Per point: the greedy and exhaustive plans (planning
model ``paper`` by default), their estimated costs, and their measured execution
times on the same data; identical plans are measured once.
"""
from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Optional

from joinlib.data.synthetic import TOPOLOGIES, SyntheticStats, build_query, topology_edges
from joinlib.experiments.common import TOPOLOGY_LABELS, DataCache, Record, round_sig, warmup_for
from joinlib.experiments.estimates import (
    accuracy,
    accuracy_pairs,
    cost_models,
    estimate_all,
    format_accuracy,
    planning_model,
    summarize,
)
from joinlib.experiments.measure import measure
from joinlib.experiments.output import fit, new_figure, progress_bar, save_png, write_json
from joinlib.model import Execution, Network, Query
from joinlib.planner import plan_for
from joinlib.query import query_to_dict

DEFAULTS: dict[str, float] = {"attributes": 100, "rate": 100, "selectivity": 0.06, "window_ms": 1200,
            "latency_ms": 25.0, "bandwidth_kbps": 1024.0, "interval_ms": 100, "max_delay_ms": 80}
# name: (statistic, axis label, values) — the values of Table 2
SWEEPS: dict[str, tuple[str, str, list[float]]] = {
    "window": ("window_ms", "window (ms)", [400, 800, 1200, 1600, 2000]),
    "rate": ("rate", "rate (tuples/s)", [10, 50, 100, 150, 200]),
    "tuple": ("attributes", "tuple size (attributes)", [10, 50, 100, 150, 200]),
    "selectivity": ("selectivity", "selectivity factor", [0.02, 0.04, 0.06, 0.08, 0.1]),
}
PLANNERS = ("greedy", "exhaustive")


def query_for(topology: str, stat: Optional[str] = None, value: float = 0.0) -> Query:
    """The identical-parameter 4-way query of ``topology`` with ``stat`` = ``value`` on every stream."""
    d = DEFAULTS
    v = {k: d[k] for k in ("attributes", "rate", "selectivity", "window_ms")}
    if stat is not None:
        v[stat] = value
    st: SyntheticStats = {"attributes": int(v["attributes"]), "rate": v["rate"], "selectivity": v["selectivity"],
                      "window_ms": int(v["window_ms"])}
    return build_query(f"fig9-{topology}", [st.copy() for _ in range(4)], topology_edges(4, topology),
                       network=Network(d["latency_ms"], d["bandwidth_kbps"]),
                       execution=Execution(int(d["interval_ms"]), int(d["max_delay_ms"])))


def run(duration_ms: int = 5000, seed: int = 1, *, quick: bool = False, repeat: int = 3,
        sweeps: Optional[list[str]] = None, topologies: Sequence[str] = TOPOLOGIES, model: str = "paper",
        calibration: Optional[Path] = None, warmup: str = "auto", progress: bool = False) -> Record:
    sweeps = sweeps or list(SWEEPS)
    pmodel = planning_model(model, calibration)
    models = cost_models(calibration)
    values = {s: (SWEEPS[s][2][:1] + SWEEPS[s][2][-1:]) if quick else SWEEPS[s][2] for s in sweeps}
    points: list[Record] = []
    total = sum(len(v) for v in values.values()) * len(topologies)
    with progress_bar(total, "fig9", progress) as bar, DataCache() as data:
        for s in sweeps:
            stat, axis, _ = SWEEPS[s]
            for v in values[s]:
                for topo in topologies:
                    bar.set_postfix_str(f"{s}={v} {topo}")
                    q = query_for(topo, stat, v)
                    plans = {p: plan_for(p, q, pmodel) for p in PLANNERS}
                    warm = warmup_for(q, warmup)
                    streams = data.streams(q, warm + duration_ms, seed)
                    same = json.dumps(plans["greedy"].to_json(), sort_keys=True) == \
                        json.dumps(plans["exhaustive"].to_json(), sort_keys=True)
                    measured: dict[str, Record] = {
                        "exhaustive": measure(q, streams, plans["exhaustive"], warmup_ms=warm,
                                              repeat=repeat).to_dict(detail=False)}
                    measured["greedy"] = measured["exhaustive"] if same else measure(
                        q, streams, plans["greedy"], warmup_ms=warm, repeat=repeat).to_dict(detail=False)
                    est = {p: estimate_all(q, pl, {**models, "planning": pmodel})["plan"] for p, pl in plans.items()}
                    g, e = measured["greedy"]["execution_s_per_s"], measured["exhaustive"]["execution_s_per_s"]
                    points.append({
                        "sweep": s, "value": v, "topology": topo, "query": query_to_dict(q),
                        "plans": {p: pl.to_json() for p, pl in plans.items()}, "same_plan": same,
                        "measured": measured,
                        "estimated": {p: {k: x for k, x in es.items() if k != "planning"} for p, es in est.items()},
                        "estimated_planning": {p: es["planning"] for p, es in est.items()},
                        "ratio_measured": round_sig(g / e) if e > 0 else 1.0,
                        "ratio_estimated": round_sig(est["greedy"]["planning"] / est["exhaustive"]["planning"])
                        if est["exhaustive"]["planning"] > 0 else 1.0,
                    })
                    bar.update(1)
                data.clear()
    doc: Record = {"experiment": "fig9",
           "meta": {"duration_ms": duration_ms, "seed": seed, "quick": quick, "repeat": repeat,
                    "model": model, "warmup": warmup, "defaults": DEFAULTS,
                    "calibration": str(calibration) if calibration else None,
                    "date": time.strftime("%Y-%m-%d %H:%M:%S")},
           "sweeps": {s: {"stat": SWEEPS[s][0], "axis": SWEEPS[s][1], "values": values[s]} for s in sweeps},
           "topologies": list(topologies), "points": points}
    doc["summary"] = {
        "same_plan": sum(p["same_plan"] for p in points), "points": len(points),
        "ratio_measured": summarize([p["ratio_measured"] for p in points]),
        "ratio_estimated": summarize([p["ratio_estimated"] for p in points]),
        "within_2pct": sum(abs(p["ratio_measured"] - 1) < 0.02 for p in points),
        "within_6pct": sum(abs(p["ratio_measured"] - 1) < 0.06 for p in points),
        "within_10pct": sum(abs(p["ratio_measured"] - 1) < 0.10 for p in points),
    }
    doc["accuracy"] = {m: accuracy(pairs) for m, pairs in accuracy_pairs(run_records(doc)).items()}
    return doc


def run_records(doc: Record) -> list[Record]:
    out = []
    for p in doc["points"]:
        for planner in ("exhaustive",) if p["same_plan"] else PLANNERS:
            out.append({"label": f"fig9 {p['topology']} {p['sweep']}={p['value']} {planner}",
                        "measured": p["measured"][planner], "estimated": p["estimated"][planner]})
    return out


def format_summary(doc: Record) -> str:
    topologies = doc["topologies"]
    lines = ["Fig. 9: identical parameters on every node; greedy vs exhaustive, execution time in s per s "
             f"(measured; {doc['meta']['model']}-model estimate in parentheses; '=' the planners chose the same plan)"]
    for s, sw in doc["sweeps"].items():
        lines += ["", f"{sw['axis']}:",
                  f"{'value':>8} " + "".join(f"| {TOPOLOGY_LABELS.get(t, t) + ' G / E':<32}" for t in topologies)]
        for v in sw["values"]:
            row = f"{v:>8} "
            for t in topologies:
                p = next(x for x in doc["points"] if x["sweep"] == s and x["value"] == v and x["topology"] == t)
                g, e = p["measured"]["greedy"]["execution_s_per_s"], p["measured"]["exhaustive"]["execution_s_per_s"]
                eg, ee = p["estimated_planning"]["greedy"], p["estimated_planning"]["exhaustive"]
                cell = f"= {e:.3f}" if p["same_plan"] else f"{g:.3f} / {e:.3f}"
                row += f"| {cell} ({eg:.2f} / {ee:.2f})".ljust(34)
            lines.append(row)
    sm = doc["summary"]
    rm, re_ = sm["ratio_measured"], sm["ratio_estimated"]
    lines += ["", f"same plan at {sm['same_plan']}/{sm['points']} points; T_G / T_E measured: mean {rm['mean']:.3f}, "
                  f"max {rm['max']:.3f}, within 2 % at {sm['within_2pct']}, 6 % at {sm['within_6pct']}, 10 % at "
                  f"{sm['within_10pct']} of {sm['points']} points; estimated C_G / C_E: mean {re_['mean']:.4f}, "
                  f"max {re_['max']:.4f}",
              format_accuracy(doc["accuracy"], "Fig. 9 model accuracy")]
    return "\n".join(lines)


def plot(doc: Record, path: Path) -> Path:
    """Rows: swept parameters; columns: topologies; greedy and exhaustive, measured and estimated."""
    sweeps, topologies = list(doc["sweeps"]), doc["topologies"]
    fig = new_figure(3.3 * len(topologies), 2.7 * len(sweeps))
    axes = fig.subplots(len(sweeps), len(topologies), squeeze=False)
    for i, s in enumerate(sweeps):
        sw = doc["sweeps"][s]
        for j, t in enumerate(topologies):
            ax = axes[i][j]
            pts = [p for p in doc["points"] if p["sweep"] == s and p["topology"] == t]
            xs = [p["value"] for p in pts]
            for planner, color, marker in (("exhaustive", "tab:green", "s"), ("greedy", "tab:blue", "o")):
                ax.plot(xs, [p["measured"][planner]["execution_s_per_s"] for p in pts], marker + "-",
                        color=color, label=f"{planner} measured", alpha=0.8)
                ax.plot(xs, [p["estimated_planning"][planner] for p in pts], ":", color=color,
                        label=f"{planner} estimated ({doc['meta']['model']})")
            ax.set_title(f"{TOPOLOGY_LABELS.get(t, t)}", fontsize=9)
            ax.set_xlabel(sw["axis"], fontsize=8)
            if j == 0:
                ax.set_ylabel("s per s", fontsize=8)
            ax.tick_params(labelsize=7)
            ax.grid(alpha=0.3)
            if i == 0 and j == 0:
                ax.legend(fontsize=6)
    fig.suptitle("Fig. 9: greedy vs exhaustive, identical parameters on all nodes")
    fit(fig, top=1 - 0.6 / fig.get_size_inches()[1], hspace=0.55, wspace=0.3)
    save_png(fig, path)
    return path


def main(out: Path, duration_ms: int, seed: int, quick: bool, repeat: int, sweeps: list[str],
         topologies: list[str], model: str, calibration: Optional[Path], warmup: str, progress: bool) -> Record:
    doc = run(duration_ms, seed, quick=quick, repeat=repeat, sweeps=sweeps, topologies=topologies,
              model=model, calibration=calibration, warmup=warmup, progress=progress)
    write_json(out / "fig9.json", doc, records=("points",))
    png = plot(doc, out / "fig9.png")
    print(format_summary(doc))
    print(f"\nwrote {out / 'fig9.json'} and {png}")
    return doc
