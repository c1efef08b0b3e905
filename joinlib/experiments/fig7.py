"""Fig. 7: the six one-way join algorithms on a 2-way join S1@n1 ⋈ S2@n2.

Every run executes the plan where *both* join sequences use the algorithm
(:func:`joinlib.plan.logical.uniform`): S1 → S2 and S2 → S1.  The measured execution time is
the whole 2-way join's (:func:`~.measure.measure`); ``one_way`` is the share of the
S1 sequence (the one-way join S1 → S2) in bytes and transmission time, by link and
message kind, with the models' estimate of that sequence.  Processing time is
measured per site and cannot be split between the two sequences.

Parameters are the paper's defaults (Sect. 5.3.1) for both streams; sweeps (a)–(d)
change S2 only (the paper fixes S1 and varies S2), (e)–(g) the system.  The paper does
not list its sweep points; ours are in :data:`SWEEPS`.
"""
from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Callable, Optional

from joinlib.algorithms import ALGORITHMS
from joinlib.data.synthetic import SyntheticStats, build_query
from joinlib.experiments.common import DataCache, Record, warmup_for, with_stream_stats
from joinlib.experiments.estimates import accuracy, accuracy_pairs, cost_models, estimate_all, format_accuracy, spearman
from joinlib.experiments.measure import measure
from joinlib.experiments.output import fit, new_figure, progress_bar, save_png, write_json
from joinlib.model import Execution, Network, Query
from joinlib.plan.logical import uniform

DEFAULTS: dict[str, float] = {"attributes": 250, "selectivity": 0.1, "rate": 300, "window_ms": 3000,
            "latency_ms": 25.0, "bandwidth_kbps": 1024.0, "interval_ms": 100, "max_delay_ms": 80}

# key: (parameter, label, axis label, values, log base of the x axis or 0)
SWEEPS: dict[str, tuple[str, str, str, list[float], int]] = {
    "a": ("attributes", "tuple size of S2", "S2 tuple size (attributes; 5 B each in the paper)",
          [50, 150, 250, 350, 450], 0),
    "b": ("rate", "rate of S2", "S2 rate (tuples/s)", [100, 200, 300, 400, 500], 0),
    "c": ("selectivity", "selectivity of S2", "S2 selectivity factor f2 (f1 = 0.1)",
          [0.025, 0.05, 0.1, 0.2, 0.4], 10),
    "d": ("window_ms", "window of S2", "S2 window (ms)", [1000, 2000, 3000, 4000, 5000], 0),
    "e": ("latency_ms", "network latency", "latency (ms)", [5, 15, 25, 35, 45], 0),
    "f": ("bandwidth_kbps", "network bandwidth", "bandwidth (kbps)", [256, 512, 1024, 2048, 4096], 2),
    "g": ("interval_ms", "execution interval", "execution interval τ (ms)", [50, 100, 200, 300, 400], 0),
}
STREAM_PARAMS = ("attributes", "rate", "selectivity", "window_ms")
TIE = 1.005  # measured times within 0.5 % are a tie (processing-time noise)
COLORS = {"SP-S": "tab:blue", "SM-S1": "tab:cyan", "SM-S2": "tab:purple",
          "SP-D": "tab:red", "SM-D1": "tab:orange", "SM-D2": "tab:brown"}


def base_query() -> Query:
    d = DEFAULTS
    stats: SyntheticStats = {"attributes": int(d["attributes"]), "selectivity": d["selectivity"], "rate": d["rate"],
                         "window_ms": int(d["window_ms"])}
    return build_query("fig7", [stats.copy(), stats.copy()], [(0, 1)], sites=["n1", "n2"],
                       network=Network(d["latency_ms"], d["bandwidth_kbps"]),
                       execution=Execution(int(d["interval_ms"]), int(d["max_delay_ms"])))


def query_for(sweep: str, value: float) -> Query:
    """The default query with the swept parameter of ``sweep`` set to ``value``."""
    param = SWEEPS[sweep][0]
    q = base_query()
    if param in STREAM_PARAMS:
        return with_stream_stats(q, "S2", **{param: value})
    if param == "latency_ms":
        return replace(q, network=replace(q.network, latency_ms=float(value)))
    if param == "bandwidth_kbps":
        return replace(q, network=replace(q.network, bandwidth_kbps=float(value)))
    return replace(q, execution=replace(q.execution, interval_ms=int(value)))


def run(duration_ms: int = 5000, seed: int = 1, *, quick: bool = False, repeat: int = 3,
        warmup: str = "auto", sweeps: Optional[list[str]] = None, calibration: Optional[Path] = None,
        progress: bool = False) -> Record:
    """Measure and estimate every (sweep point, algorithm); return the fig7.json document."""
    sweeps = sweeps or list(SWEEPS)
    models = cost_models(calibration)
    points = {s: (SWEEPS[s][3][:1] + SWEEPS[s][3][-1:]) if quick else SWEEPS[s][3] for s in sweeps}
    cap = 1000 if quick else None
    doc: Record = {"experiment": "fig7",
                 "meta": {"duration_ms": duration_ms, "seed": seed, "quick": quick, "repeat": repeat,
                          "warmup": warmup, "warmup_cap_ms": cap, "defaults": DEFAULTS,
                          "models": list(models), "date": time.strftime("%Y-%m-%d %H:%M:%S"),
                          "calibration": str(calibration) if calibration else None},
                 "algorithms": list(ALGORITHMS), "sweeps": {}, "runs": []}
    total_runs = sum(len(v) for v in points.values()) * len(ALGORITHMS)
    with DataCache() as data, progress_bar(total_runs, "fig7", progress) as bar:
        for s in sweeps:
            param, label, axis, _, logx = SWEEPS[s]
            queries = [(v, query_for(s, v)) for v in points[s]]
            warm = {v: warmup_for(q, warmup, cap) for v, q in queries}
            total = max(warm.values()) + duration_ms  # one data length per sweep: shared data
            runs: list[Record] = []
            for v, q in queries:
                streams = data.streams(q, total, seed)
                for alg in ALGORITHMS:
                    bar.set_postfix_str(f"({s}) {param}={v} {alg}")
                    plan = uniform(q, alg)
                    m = measure(q, streams, plan, warmup_ms=warm[v], repeat=repeat)
                    est = estimate_all(q, plan, models)
                    runs.append({"sweep": s, "value": v, "algorithm": alg,
                                 "label": f"fig7{s} {param}={v} {alg}",
                                 "measured": m.to_dict(detail=False), "estimated": est["plan"],
                                 "one_way": {"measured": m.by_head["S1"], "estimated": est["by_head"]["S1"]}})
                    bar.update(1)
            data.clear()
            doc["sweeps"][s] = {"param": param, "label": label, "axis": axis, "log_x": logx,
                                "default": DEFAULTS[param], "values": points[s],
                                "warmup_ms": {str(v): w for v, w in warm.items()}}
            doc["runs"] += runs
    doc["accuracy"] = {m: accuracy(p) for m, p in accuracy_pairs(all_runs(doc)).items()}
    doc["accuracy"]["choice"] = choice_agreement(doc)
    return doc


def all_runs(doc: Record) -> list[Record]:
    runs: list[Record] = doc["runs"]
    return runs


def _by_point(doc: Record, key: str) -> dict[float, dict[str, Record]]:
    """{value: {algorithm: run}} of sweep ``key``, in sweep order."""
    out: dict[float, dict[str, Record]] = {}
    for r in doc["runs"]:
        if r["sweep"] == key:
            out.setdefault(r["value"], {})[r["algorithm"]] = r
    return out


def choice_agreement(doc: Record) -> Record:
    """Per sweep point: does each model rank the six algorithms like the measurements?

    ``best_agrees``: points where the model's cheapest algorithm is the measured
    fastest, up to measurement ties (within 0.5 %: in the 2-way join, uniform SP-S and
    SP-D ship exactly the same tuples and differ only by processing noise);
    ``within_5pct``: points where the model's choice is within 5 % of the measured
    fastest; ``mean_spearman``: mean rank correlation over points.
    """
    out: Record = {}
    for model in doc["meta"]["models"]:
        if model == "bytes":
            continue
        agree = near = n = 0
        rhos: list[float] = []
        for key in doc["sweeps"]:
            for runs in _by_point(doc, key).values():
                algs = [a for a in ALGORITHMS if a in runs]
                meas = [runs[a]["measured"]["execution_s_per_s"] for a in algs]
                est = [runs[a]["estimated"][model] for a in algs]
                pick = algs[est.index(min(est))]
                n += 1
                agree += runs[pick]["measured"]["execution_s_per_s"] <= TIE * min(meas)
                near += runs[pick]["measured"]["execution_s_per_s"] <= 1.05 * min(meas)
                rho = spearman(est, meas)
                if rho is not None:
                    rhos.append(rho)
        out[model] = {"points": n, "best_agrees": agree, "within_5pct": near,
                      "mean_spearman": round(sum(rhos) / len(rhos), 4) if rhos else None}
    return out


def _table(doc: Record, key: str, measured: Callable[[Record], float],
           estimated: Callable[[Record], float]) -> list[str]:
    lines = [f"{'value':>8} " + " ".join(f"{a:>15}" for a in ALGORITHMS) + "   fastest / model's pick"]
    for v, runs in _by_point(doc, key).items():
        cells: list[str] = []
        meas: dict[str, float] = {}
        est: dict[str, float] = {}
        for a in ALGORITHMS:
            r = runs.get(a)
            if r is None:
                cells.append(f"{'-':>15}")
                continue
            meas[a], est[a] = measured(r), estimated(r)
            cells.append(f"{meas[a]:>7.3f} ({est[a]:>5.2f})")
        best, pick = min(meas, key=meas.__getitem__), min(est, key=est.__getitem__)
        lines.append(f"{v:>8} " + " ".join(cells) + f"   {best} / {pick}")
    return lines


def format_summary(doc: Record) -> str:
    lines = ["Fig. 7: six one-way algorithms, S1@n1 ⋈ S2@n2; seconds per second of stream time, "
             "measured steady state (paper-model estimate in parentheses)"]
    for key, sw in doc["sweeps"].items():
        lines += ["", f"({key}) {sw['label']}: {sw['axis']}",
                  "  2-way join (both sequences use the algorithm): execution time"]
        lines += _table(doc, key, lambda r: r["measured"]["execution_s_per_s"], lambda r: r["estimated"]["paper"])
        lines.append("  one-way join S1 -> S2 (the S1 sequence's share): transmission time")
        lines += _table(doc, key, lambda r: r["one_way"]["measured"]["transmission_s_per_s"],
                        lambda r: r["one_way"]["estimated"]["paper"])
    lines.append("")
    first = next(iter(doc["sweeps"]))
    sw = doc["sweeps"][first]
    point = _by_point(doc, first)
    default = sw["default"] if sw["default"] in point else next(iter(point))
    lines.append(f"one-way S1 -> S2 by link and kind ({sw['param']} = {default}): bytes per second")
    for a, r in point[default].items():
        ow = r["one_way"]["measured"]
        lines.append(f"  {a:<6} " + ", ".join(f"{ln['src']}->{ln['dst']} {ln['kind']} {ln['bytes_per_s']:,.0f}"
                                             for ln in ow["links"]))
    for model, c in doc["accuracy"].get("choice", {}).items():
        lines.append(f"{model} model: picks the measured fastest algorithm (2-way; ties within 0.5 %) at "
                     f"{c['best_agrees']}/"
                     f"{c['points']} points, one within 5 % of it at {c['within_5pct']}/{c['points']}; "
                     f"mean rank correlation {c['mean_spearman']}")
    lines.append(format_accuracy({k: v for k, v in doc["accuracy"].items() if k != "choice"},
                                 "Fig. 7 model accuracy"))
    return "\n".join(lines)


def plot(doc: Record, out_dir: Path) -> list[Path]:
    """One PNG per sweep, four panels: the 2-way join measured and estimated (paper model),
    the one-way join S1 -> S2 (the S1 sequence's share), bytes measured and estimated."""
    paths = []
    for key, sw in doc["sweeps"].items():
        fig = new_figure(11, 7.2)
        axes = fig.subplots(2, 2).ravel()
        by = _by_point(doc, key)
        xs = list(by)
        for a in ALGORITHMS:
            c = COLORS[a]
            axes[0].plot(xs, [by[x][a]["measured"]["execution_s_per_s"] for x in xs], "o-", color=c, label=a)
            axes[1].plot(xs, [by[x][a]["estimated"]["paper"] for x in xs], "s--", color=c, label=a)
            axes[2].plot(xs, [by[x][a]["one_way"]["measured"]["transmission_s_per_s"] for x in xs], "o-",
                         color=c, label=a)
            axes[2].plot(xs, [by[x][a]["one_way"]["estimated"]["paper"] for x in xs], ":", color=c)
            axes[3].plot(xs, [by[x][a]["measured"]["bytes_per_s"] / 1000 for x in xs], "o-", color=c, label=a)
            axes[3].plot(xs, [by[x][a]["estimated"]["bytes"] / 1000 for x in xs], ":", color=c)
        axes[0].set_title("2-way join (both sequences): measured execution time")
        axes[1].set_title("2-way join: estimated, paper model")
        axes[2].set_title("one-way S1 → S2: measured transmission (—), paper model (···)")
        axes[3].set_title("2-way join: bytes measured (—), bytes model (···)")
        for ax, unit in zip(axes, ("s per s of stream time",) * 3 + ("kB per s",), strict=True):
            ax.set_ylabel(unit)
            ax.set_xlabel(sw["axis"])
            if sw["log_x"]:
                ax.set_xscale("log", base=sw["log_x"])
                ax.minorticks_off()
            ax.set_xticks(xs, [f"{x:g}" for x in xs])
            ax.grid(alpha=0.3)
        axes[0].legend(fontsize=8, ncol=2)
        fig.suptitle(f"Fig. 7({key}): varying the {sw['label']}")
        fit(fig, top=0.92, hspace=0.35, wspace=0.22)
        path = Path(out_dir) / f"fig7{key}.png"
        save_png(fig, path)
        paths.append(path)
    return paths


def main(out: Path, duration_ms: int, seed: int, quick: bool, repeat: int, warmup: str, sweeps: list[str],
         calibration: Optional[Path], progress: bool) -> Record:
    doc = run(duration_ms, seed, quick=quick, repeat=repeat, warmup=warmup, sweeps=sweeps,
              calibration=calibration, progress=progress)
    write_json(out / "fig7.json", doc, records=("runs",))
    pngs = plot(doc, out)
    print(format_summary(doc))
    print(f"\nwrote {out / 'fig7.json'} and {', '.join(p.name for p in pngs)}")
    return doc
