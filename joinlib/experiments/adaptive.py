"""``joinlib experiment adaptive``: seed 003's Experiments 1 and 2 on the embedded engine.

A fully connected 4-way and 8-way join with the paper's defaults (150-byte tuples, 100 tuples/s,
f = 0.01, 500 ms windows, 5 ms latency, 1024 kbps, 200 ms measurement interval; τ = 100 ms).
The last stream toggles 50 ↔ 200 tuples/s every 2 s from 1.5 s.  Each repetition (a data seed)
runs three times on the same data: *static* (the first plan throughout), *CNU* and *DNU*, all
with the default pricing (Algorithm 1 with the plan-level cost, :class:`~.planner.PlanLevel`) and
monitor (a sliding 200 ms interval); CNU and DNU with a fence margin of 0 (a node holds its next
epoch until the switch is agreed: one epoch less of the old plan).  Every run's output is checked
against the reference join.

Measured per 200 ms of (virtual) time: the *cost*, Σ over every message sent of latency + bytes /
bandwidth (the paper's transmission time S(x); processing time is wall-clock noise here and left
out), and the bytes.  Per re-planning round: the messages by Table 3's categories, their
transmission time, and the time from the trigger to the switch.  ``checks`` in the JSON:

* ``equal_before_first_change``: the three cost series agree before the first toggle;
* ``high_phase_ratio``: static / adaptive cost over the high-rate phases (whole phases,
  detection and migration included, and from the switch on);
* ``reverts``: after each high → low change the plan is the initial one again;
* ``cnu_and_dnu_same_plans``: both went through the same sequence of plans;
* ``cnu_modification_is_n`` and ``cnu_sync_is_2n(n-1)``;
* ``dnu_cnu_overhead``: DNU / CNU per round, in messages, transmission time and trigger-to-switch
  time, beside the paper's 1.4-2.5 (4-way) and 2.1-2.7 (8-way).
"""
from __future__ import annotations

import json
import statistics
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from joinlib.adaptive.config import AdaptiveConfig
from joinlib.adaptive.embedded import AdaptiveReport, run_adaptive
from joinlib.adaptive.stats import MonitorConfig
from joinlib.adaptive.workload import Toggle, write_toggle
from joinlib.data.files import load_streams
from joinlib.data.synthetic import build_query, topology_edges
from joinlib.experiments.adaptive_figures import write_figure
from joinlib.model import Execution, Network, Query
from joinlib.reference import reference_join
from joinlib.runtime.sink import CollectingSink

#: the paper's Table 3 (messages per trigger) and Fig. 5 ratios, to print beside ours
PAPER_TABLE3 = {
    4: {"cnu": {"inc": (4, 34, 24), "dec": (4, 27, 24)}, "dnu": {"inc": (65, 61, 44), "dec": (59, 55, 32)}},
    8: {"cnu": {"inc": (8, 131, 112), "dec": (8, 115, 112)}, "dnu": {"inc": (561, 181, 152), "dec": (283, 83, 48)}},
}
PAPER_OVERHEAD = {4: (1.4, 2.5), 8: (2.1, 2.7)}
VARIANTS = ("static", "cnu", "dnu")


@dataclass(frozen=True)
class Scale:
    """How much to run: ways, repetitions, stream time."""

    ways: tuple[int, ...] = (4, 8)
    repeats: int = 10
    duration_ms: int = 9500
    seed: int = 1


QUICK = Scale(ways=(4, 8), repeats=2, duration_ms=5500)


def toggle_query(m: int) -> Query:
    """The paper's defaults, fully connected; the last stream declared at its low rate."""
    stats: list[Any] = [dict(rate=100, attributes=22, tuple_bytes=150, selectivity=0.01, window_ms=500)
                        for _ in range(m)]
    stats[-1]["rate"] = 50
    return build_query(f"toggle{m}", stats, topology_edges(m, "complete"), network=Network(5, 1024),
                       execution=Execution(100, 80))


def config(variant: str) -> AdaptiveConfig:
    if variant == "static":   # the monitor never triggers: the first plan throughout
        return AdaptiveConfig("cnu", MonitorConfig(threshold=1e12))
    return AdaptiveConfig(variant, fence_margin=0)


def run_one(m: int, seed: int, duration_ms: int, data_dir: Path) -> dict[str, Any]:
    """One repetition: the three variants on one data set, each checked against the reference."""
    q = toggle_query(m)
    toggle = Toggle(q.names[-1])
    write_toggle(q, toggle, data_dir, duration_ms, seed)
    streams = load_streams(q, data_dir)
    want = reference_join(q, streams)
    out: dict[str, Any] = {"ways": m, "seed": seed}
    for v in VARIANTS:
        sink = CollectingSink(q)
        rep = run_adaptive(q, streams, config(v), sink)
        got = Counter((ids, ts) for ids, ts, _ in sink.results)
        out[v] = summary(rep, exact=(got == want), results=sum(got.values()))
    return out


def summary(rep: AdaptiveReport, exact: bool, results: int) -> dict[str, Any]:
    tau = 100
    rates = {(t["epoch"] + 1) * 1024 // 1024: t["rate"] for t in rep.triggers}   # trigger time (epochs) -> rate
    by_triggers = {tuple(r["triggers"]): r for r in rep.rounds if r["round"] is not None}
    rounds = []
    for change in rep.changes:
        r = by_triggers.get(tuple(change["triggers"]))
        if r is None:
            continue
        first = min(change["triggers"], default=None)     # trigger_id = (epoch + 1) * 1024 + position
        t_ms = None if first is None else (first // 1024) * tau
        rate = None if first is None else rates.get(first // 1024)
        rounds.append({**{k: r[k] for k in ("modification", "migration", "synchronisation", "transfer_ms", "bytes")},
                       "trigger_ms": t_ms, "switch_ms": change["from_epoch"] * tau,
                       "to_switch_ms": None if t_ms is None else change["from_epoch"] * tau - t_ms,
                       "direction": None if rate is None else ("inc" if rate > 100 else "dec"),
                       "plan": change["plan"]})
    return {"exact": exact, "results": results, "bytes": rep.bytes, "transmission_ms": rep.transmission_ms,
            "timeline": [(p["t_ms"], p["transfer_ms"], p["bytes"]) for p in rep.timeline],
            "initial": None if rep.initial is None else rep.initial.to_json(), "rounds": rounds,
            "triggers": len(rep.triggers)}


# ----------------------------------------------------------------------------- analysis

def _mean_series(runs: list[dict[str, Any]], v: str, col: int) -> list[float]:
    n = max(len(r[v]["timeline"]) for r in runs)
    return [statistics.fmean(r[v]["timeline"][i][col] if i < len(r[v]["timeline"]) else 0.0 for r in runs)
            for i in range(n)]


def _phases(duration_ms: int) -> list[tuple[int, int, bool]]:
    return [(a, b, rate > 100) for a, b, rate in Toggle("x").phases(duration_ms)]


def analyse(m: int, runs: list[dict[str, Any]], duration_ms: int, interval_ms: int = 200) -> dict[str, Any]:
    series = {v: _mean_series(runs, v, 1) for v in VARIANTS}
    first = Toggle("x").first_ms // interval_ms
    before = max(abs(series[v][i] - series["static"][i]) for v in ("cnu", "dnu") for i in range(first))
    out: dict[str, Any] = {"ways": m, "repetitions": len(runs), "interval_ms": interval_ms,
                           "cost_ms_per_interval": {v: [round(x, 3) for x in s] for v, s in series.items()},
                           "bytes_per_interval": {v: [round(x) for x in _mean_series(runs, v, 2)] for v in VARIANTS}}
    ratios: dict[str, Any] = {}
    for v in ("cnu", "dnu"):
        whole, settled = [], []
        for r in runs:
            switches = [x["switch_ms"] for x in r[v]["rounds"]]
            for a, b, high in _phases(duration_ms):
                if not high:
                    continue
                whole.append(_ratio(r, v, a, b, interval_ms))
                sw = next((s for s in switches if a <= s < b), None)
                if sw is not None:
                    settled.append(_ratio(r, v, -(-sw // interval_ms) * interval_ms, b, interval_ms))
        ratios[v] = {"whole_phase": _stats(whole), "from_the_switch": _stats(settled)}
    out["high_phase_ratio"] = ratios
    out["checks"] = {
        "exact": all(r[v]["exact"] for r in runs for v in VARIANTS),
        "equal_before_first_change": before < 1e-6,
        "max_difference_before_first_change_ms": round(before, 6),
        "reverts": all(x["plan"] == r[v]["initial"] for r in runs for v in ("cnu", "dnu")
                       for x in r[v]["rounds"] if x["direction"] == "dec"),
        "cnu_modification_is_n": all(x["modification"] == m for r in runs for x in r["cnu"]["rounds"]),
        "cnu_sync_is_2n(n-1)": all(x["synchronisation"] == 2 * m * (m - 1) for r in runs for x in r["cnu"]["rounds"]),
        "cnu_and_dnu_same_plans": all([x["plan"] for x in r["cnu"]["rounds"]] == [x["plan"] for x in r["dnu"]["rounds"]]
                                      for r in runs),
        "high_phase_ratio_at_least_1.5": min(ratios[v]["whole_phase"]["mean"] or 0 for v in ratios) >= 1.5,
    }
    out["table3"] = _table3(m, runs)
    out["dnu_cnu_overhead"] = _overhead(m, runs)
    out["plan_changes"] = {v: statistics.fmean(len(r[v]["rounds"]) for r in runs) for v in ("cnu", "dnu")}
    return out


def _ratio(run: dict[str, Any], v: str, a: int, b: int, interval_ms: int) -> float:
    def cost(x: str) -> float:
        return float(sum(c for t, c, _ in run[x]["timeline"] if a <= t < b))
    return cost("static") / max(cost(v), 1e-9)


def _stats(xs: list[float]) -> dict[str, Optional[float]]:
    if not xs:
        return {"mean": None, "min": None, "max": None, "n": 0}
    return {"mean": round(statistics.fmean(xs), 3), "min": round(min(xs), 3), "max": round(max(xs), 3), "n": len(xs)}


def _table3(m: int, runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for v in ("cnu", "dnu"):
        for d in ("inc", "dec"):
            rows = [x for r in runs for x in r[v]["rounds"] if x["direction"] == d]
            ours = [round(statistics.fmean(x[k] for x in rows), 1) if rows else None
                    for k in ("modification", "migration", "synchronisation")]
            out[f"{v}/{d}"] = {"ours": ours, "paper": list(PAPER_TABLE3[m][v][d]), "rounds": len(rows),
                               "columns": ["modification", "migration (incl. sync)", "synchronisation"]}
    return out


def _overhead(m: int, runs: list[dict[str, Any]]) -> dict[str, Any]:
    per: dict[str, list[float]] = {"messages": [], "transmission": [], "trigger_to_switch": []}
    for r in runs:
        for c, d in zip(r["cnu"]["rounds"], r["dnu"]["rounds"], strict=False):
            per["messages"].append((d["modification"] + d["migration"]) / max(1, c["modification"] + c["migration"]))
            per["transmission"].append(d["transfer_ms"] / max(1e-9, c["transfer_ms"]))
            if c["to_switch_ms"] and d["to_switch_ms"]:
                per["trigger_to_switch"].append(d["to_switch_ms"] / c["to_switch_ms"])
    return {k: _stats(v) for k, v in per.items()} | {"paper_range": list(PAPER_OVERHEAD[m])}


# ----------------------------------------------------------------------------- driver

def main(out: Path, scale: Scale = Scale(), progress: bool = False,
         command: Optional[str] = None) -> dict[str, Any]:
    """Run every repetition, write ``adaptive.json`` and ``adaptive.png`` to ``out``; ``command``
    (the command line that ran it) is recorded in the JSON."""
    out.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"command": command, "scale": {"ways": list(scale.ways), "repeats": scale.repeats,
                                        "duration_ms": scale.duration_ms, "seed": scale.seed},
                              "toggle": {"low": 50, "high": 200, "first_ms": 1500, "period_ms": 2000}, "ways": {}}
    runs_all: dict[int, list[dict[str, Any]]] = {}
    for m in scale.ways:
        runs = []
        for i in range(scale.repeats):
            runs.append(run_one(m, scale.seed + i, scale.duration_ms, out / "data" / f"{m}way"))
            if progress:
                print(f"  {m}-way repetition {i + 1}/{scale.repeats} done", flush=True)
        runs_all[m] = runs
        result["ways"][str(m)] = analyse(m, runs, scale.duration_ms)
    (out / "adaptive.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "adaptive_runs.json").write_text(json.dumps({str(m): r for m, r in runs_all.items()}) + "\n")
    write_figure(result, out / "adaptive.png")
    return result


def format_summary(result: dict[str, Any]) -> str:
    """What the command prints: the ratios and Table 3 beside the paper's."""
    lines = []
    for m, a in result["ways"].items():
        hp = a["high_phase_ratio"]
        cnu, dnu = hp["cnu"], hp["dnu"]
        lines.append(f"{m}-way ({a['repetitions']} repetitions): static / adaptive cost in high-rate phases: "
                     f"CNU {cnu['whole_phase']['mean']} (from the switch {cnu['from_the_switch']['mean']}), "
                     f"DNU {dnu['whole_phase']['mean']} (from the switch {dnu['from_the_switch']['mean']})")
        for k, row in a["table3"].items():
            lines.append(f"  Table 3 {k:8} ours {row['ours']}  paper {row['paper']}  "
                         f"(modification, migration incl. sync, sync; {row['rounds']} rounds)")
        o = a["dnu_cnu_overhead"]
        lines.append(f"  DNU/CNU overhead: messages {o['messages']['mean']} [{o['messages']['min']}-"
                     f"{o['messages']['max']}], transmission {o['transmission']['mean']}, trigger-to-switch "
                     f"{o['trigger_to_switch']['mean']}; paper {o['paper_range'][0]}-{o['paper_range'][1]}")
        lines.append(f"  checks: {a['checks']}")
    return "\n".join(lines)
