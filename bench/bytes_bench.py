#!/usr/bin/env python3
"""Bytes between sites, per workload: every planner's plan against the best ``central`` and the floor.

    python bench/bytes_bench.py [--quick] [--out bench/out/bytes] [--jobs 2] [--duration 15s]
                                [--only SUBSTRING] [--sampled] [--table docs/bytes.md]

The grid (issue 11): 2–4 streams; chain, star and clique join graphs; one shared key (``J``) or a
key per edge; selectivity f from 0.1 to 0.0001; tuples of 50 B and 1250 B; windows of 500 ms and
3 s; 100 tuples/s per stream, and skewed cases with the first stream at 1000/s; three Zipf workloads
(``zipf-*``, issue 30: keys ranked differently at each site while the query file declares uniform keys);
15 s of data so
every window fills.  Workloads whose expected result count exceeds ``--max-results`` are listed
as skipped (the engine enumerates every result).

Per workload it generates the data (``joinlib.data.gen``, seed 1), computes the floor and floor + keys
exactly (``joinlib.costs.floor``), runs ``central`` at every site, ``auto``, ``greedy`` /
``exhaustive`` / ``beam`` under the byte model, ``greedy`` under the paper model (the old default)
and, with ``--sampled``, ``sampled``; checks that every plan gives the same result count; and
records for every plan its measured bytes and the byte model's estimate (statistics measured on
the data).  It writes ``OUT/<workload>.json`` and ``OUT/<workload>.png``, ``OUT/summary.json``,
and (``--table``) the table of ``docs/bytes.md`` with the issue's three checks.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from joinlib.data.synthetic import build_query, topology_edges  # noqa: E402
from joinlib.model import Execution, Network  # noqa: E402

GRAPHS = (  # (name, streams, topology, one key per edge)
    ("2way", 2, "chain", False),
    ("chain3", 3, "chain", False), ("chain3-keys", 3, "chain", True),
    ("clique3", 3, "complete", False), ("clique3-keys", 3, "complete", True),
    ("chain4", 4, "chain", False), ("chain4-keys", 4, "chain", True),
    ("star4", 4, "star", False), ("star4-keys", 4, "star", True),
    ("clique4", 4, "complete", False),
)
SELECTIVITIES = (0.1, 0.01, 0.001, 0.0001)
ZIPF_THETA = 1.0   # the Zipf workloads' exponent (issue 30)
ZIPF = (("2way", 0.01), ("chain4", 0.01), ("clique3", 0.001))   # (graph, f): 1250 B tuples, 3 s windows
TUPLES = (50, 1250)
WINDOWS = (500, 3000)


@dataclass(frozen=True)
class Workload:
    graph: str
    m: int
    topology: str
    per_edge: bool
    f: float
    tuple_bytes: int
    window_ms: int
    skew: bool
    duration_ms: int
    zipf: float = 0.0   # > 0: join keys Zipf(θ = zipf), ranked differently at each site; the query says uniform

    @property
    def name(self) -> str:
        return (("zipf-" if self.zipf else "") + f"{self.graph}-f{self.f:g}-{self.tuple_bytes}B-w{self.window_ms}"
                + ("-skew" if self.skew else ""))

    def generate(self, out_dir: str, seed: int = 1) -> None:
        """The workload's data: the generator's, and for a Zipf workload its join values redrawn."""
        from joinlib.data.gen import generate
        q = self.query()
        generate(q, out_dir, self.duration_ms, seed=seed)
        if self.zipf:
            zipf_keys(q, Path(out_dir), self.zipf, seed)

    def query(self) -> Any:
        stats = []
        for i in range(self.m):
            stats.append({"rate": 1000.0 if (self.skew and i == 0) else 100.0,
                          "attributes": max(1, self.tuple_bytes // 5), "tuple_bytes": self.tuple_bytes,
                          "selectivity": self.f, "window_ms": self.window_ms})
        return build_query(self.name, stats, topology_edges(self.m, self.topology),
                           per_edge_attrs=self.per_edge, network=Network(25.0, 1024.0),
                           execution=Execution(100, 80))

    def expected_results(self) -> float:
        """Results over the run by the paper's rate arithmetic (r_new = r_old × w × ρ)."""
        from joinlib.costs.unit_time import SeqState
        from joinlib.plan.logical import bfs_order
        q = self.query()
        total = 0.0
        for s in q.streams:
            st = SeqState.start(q, s.name)
            for n in bfs_order(q, s.name):
                st = st.advance(q, n, "SP-S")
            total += st.rate
        return total * self.duration_ms / 1000.0


def zipf_keys(q: Any, out_dir: Path, theta: float, seed: int) -> None:
    """Redraw every join value of ``out_dir``'s streams from a Zipf(θ) distribution over the same
    d = 1/f values, ranked by a permutation of its own at each stream (seeded by the stream's name):
    a value frequent at one site is rare at another, while the query file still declares f, i.e.
    uniform keys.  Only measured statistics reveal the skew."""
    import random

    from joinlib.data.files import stream_path
    from joinlib.data.gen import distinct_values
    for s in q.streams:
        rng = random.Random(f"bytes_bench.zipf:{seed}:{s.name}")
        path = stream_path(out_dir, s.name)
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        for attr in s.join_attrs:
            d = distinct_values(s, attr)
            perm = list(range(d))
            rng.shuffle(perm)
            weights = [1.0 / (r + 1) ** theta for r in range(d)]
            for row, rank in zip(rows, rng.choices(range(d), weights=weights, k=len(rows)), strict=True):
                row[attr] = f"v{perm[rank]:04d}"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def grid(quick: bool, duration_ms: int) -> list[Workload]:
    if quick:
        return [Workload(g, m, t, k, f, 1250, 500, False, duration_ms)
                for g, m, t, k in GRAPHS[:3] for f in (0.01, 0.001)]
    out = []
    for g, m, t, k in GRAPHS:
        for f in SELECTIVITIES:
            for tb in TUPLES:
                for w in WINDOWS:
                    out.append(Workload(g, m, t, k, f, tb, w, False, duration_ms))
            for tb in TUPLES:  # skewed rates: one stream at 1000/s
                out.append(Workload(g, m, t, k, f, tb, 500, True, duration_ms))
    return out + zipf_grid(duration_ms)


def zipf_grid(duration_ms: int) -> list[Workload]:
    """Issue 30's held-out workloads: keys skewed differently per site, 1250 B tuples, 3 s windows."""
    shape = {g: (m, t, k) for g, m, t, k in GRAPHS}
    return [Workload(g, *shape[g], f, 1250, 3000, False, duration_ms, ZIPF_THETA) for g, f in ZIPF]


# ------------------------------------------------------------------ one workload
def run_workload(w: Workload, out_dir: Path, sampled: bool = False) -> dict[str, Any]:
    from joinlib.costs import WireModel, from_data
    from joinlib.costs.floor import floor
    from joinlib.data.files import load_streams
    from joinlib.plan.logical import Plan, central
    from joinlib.planner.auto import auto_ranked
    from joinlib.planner.measure import run_candidate
    from joinlib.planner.registry import resolve_plan
    q = w.query()
    with tempfile.TemporaryDirectory() as tmp:
        w.generate(tmp, seed=1)
        streams = load_streams(q, tmp)
    inputs = from_data(q, streams)
    model = WireModel(inputs)
    duration_s = w.duration_ms / 1000.0
    t0 = time.perf_counter()
    fl = floor(q, streams)
    floor_s = time.perf_counter() - t0
    plans: dict[str, Any] = {f"central:{site}": central(q, site) for site in q.sites}
    timing: dict[str, float] = {}
    t0 = time.perf_counter()
    ranked, measured = auto_ranked(q, streams, inputs, every_kind=True)
    timing["auto"] = time.perf_counter() - t0
    chosen = (measured or ranked)[0]
    plans["auto"] = chosen.plan
    # the choice among plans of sequences only (auto before issue 30), from the same measurements
    plans["auto/plans"] = next(r.plan for r in (measured or ranked) if isinstance(r.plan, Plan))
    for name in ("greedy", "exhaustive", "beam"):
        t0 = time.perf_counter()
        plans[name] = resolve_plan(q, name, "wire")
        timing[name] = time.perf_counter() - t0
    plans["greedy/paper"] = resolve_plan(q, "greedy", "paper")
    if sampled:
        t0 = time.perf_counter()
        plans["sampled"] = resolve_plan(q, "sampled", "wire", streams)
        timing["sampled"] = time.perf_counter() - t0
    runs: dict[str, dict[str, Any]] = {}
    done: dict[str, dict[str, Any]] = {}
    for name, plan in plans.items():
        key = json.dumps(plan.to_json(), sort_keys=True)
        if key in done:
            runs[name] = dict(done[key])
            continue
        rep = run_candidate(q, streams, plan)
        kinds: dict[str, int] = {}
        for ln in rep.links:
            kinds[ln["kind"]] = kinds.get(ln["kind"], 0) + ln["bytes"]
        ek: dict[str, float] = {}
        if isinstance(plan, Plan):
            est = model.estimate(q, plan)
            total = est.bytes(duration_s)
            for (_, _, k), v in est.by_link().items():
                ek[k] = ek.get(k, 0.0) + v * duration_s
        else:   # another run kind: auto's own estimate (joinlib.planner.kinds)
            total = chosen.estimate * duration_s
        runs[name] = done[key] = {"plan": plan.to_json(), "bytes": rep.bytes, "results": rep.results,
                                  "messages": rep.messages, "by_kind": kinds,
                                  "estimate": round(total), "estimate_by_kind": ek}
    counts = {r["results"] for r in runs.values()}
    if len(counts) != 1:
        raise RuntimeError(f"{w.name}: plans disagree on the result count: "
                           f"{ {n: r['results'] for n, r in runs.items()} }")
    centrals = {n: r["bytes"] for n, r in runs.items() if n.startswith("central:")}
    best_central = min(centrals.values())
    doc = {"workload": w.name, "spec": dict(w.__dict__), "results": counts.pop(), "duration_ms": w.duration_ms,
           "floor": {"site": fl.site, "bytes": fl.bytes, "with_keys": fl.with_keys, "by_site": fl.by_site,
                     "contributors": fl.contributors, "seconds": round(floor_s, 2)},
           "best_central": {"site": min(centrals, key=lambda n: centrals[n]), "bytes": best_central},
           "runs": runs, "planner_seconds": timing,
           "auto": {"chosen": (measured or ranked)[0].name,
                    "kind": chosen.kind,
                    "measured": [{"name": r.name, "estimate_per_s": r.estimate, "steady_per_s": r.measured,
                                  "sample_bytes": r.measured_bytes} for r in measured],
                    "model_top": [{"name": r.name, "estimate_per_s": r.estimate} for r in ranked[:5]]}}
    (out_dir / f"{w.name}.json").write_text(json.dumps(doc, indent=1) + "\n")
    plot(doc, out_dir / f"{w.name}.png")
    return summary_row(doc)


def summary_row(doc: dict[str, Any]) -> dict[str, Any]:
    c = doc["best_central"]["bytes"]
    row = {"workload": doc["workload"], "results": doc["results"], "central": c,
           "central_site": doc["best_central"]["site"], "floor": doc["floor"]["bytes"],
           "floor_keys": doc["floor"]["with_keys"], "auto_choice": doc["auto"]["chosen"],
           "auto_kind": doc["auto"].get("kind", "plan")}
    for name, r in doc["runs"].items():
        if not name.startswith("central:"):
            row[name] = r["bytes"]
            row[f"{name}:estimate"] = r["estimate"]
    for name, r in doc["runs"].items():
        if name.startswith("central:"):
            row[f"{name}:estimate"] = r["estimate"]
            row[name] = r["bytes"]
    return row


def plot(doc: dict[str, Any], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = list(doc["runs"])
    vals = [doc["runs"][n]["bytes"] for n in names]
    fig, ax = plt.subplots(figsize=(7, 0.35 * len(names) + 1.5))
    colors = ["tab:orange" if n == "auto" else "tab:gray" if n.startswith("central") else "tab:blue" for n in names]
    ax.barh(names, vals, color=colors)
    ax.axvline(doc["best_central"]["bytes"], color="k", ls="--", lw=1, label="best central")
    ax.axvline(doc["floor"]["bytes"], color="tab:green", lw=1.5, label="floor")
    ax.axvline(doc["floor"]["with_keys"], color="tab:green", ls=":", lw=1.5, label="floor + keys")
    ax.set_xscale("symlog", linthresh=max(1.0, doc["floor"]["bytes"] / 10 or 1.0))
    ax.set_xlabel("bytes between sites")
    ax.set_title(f"{doc['workload']} ({doc['results']:,} results)", fontsize=9)
    ax.invert_yaxis()
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


# ------------------------------------------------------------------ the checks and the table
def checks(rows: list[dict[str, Any]]) -> dict[str, Any]:
    worst = max(rows, key=lambda r: r["auto"] / r["central"])
    sel20 = [r for r in rows if r["floor"] * 20 <= r["central"]]
    sel5 = [r for r in rows if r["floor"] * 5 <= r["central"]]
    ok20 = [r for r in sel20 if r["auto"] * 10 <= r["central"]]
    ratios5 = [r["auto"] / max(1, r["floor"]) for r in sel5]
    keys = [r["auto"] / max(1, r["floor_keys"]) for r in rows]
    return {
        "workloads": len(rows),
        "auto_le_1.02_central": sum(1 for r in rows if r["auto"] <= 1.02 * r["central"]),
        "auto_over_central_max": round(worst["auto"] / worst["central"], 4), "worst": worst["workload"],
        "auto_over_central_median": round(_median([r["auto"] / r["central"] for r in rows]), 4),
        "floor_le_central/20": len(sel20), "auto_10x_below_central_there": len(ok20),
        "floor_le_central/5": len(sel5),
        "mean_auto_over_floor_there": round(sum(ratios5) / len(ratios5), 3) if ratios5 else None,
        "median_auto_over_floor_there": round(_median(ratios5), 3) if ratios5 else None,
        "auto_le_1.1_floor_keys": sum(1 for r in rows if r["auto"] <= 1.1 * max(1, r["floor_keys"])),
        "auto_over_floor_keys_max": round(max(keys), 4) if keys else None,
        "worst_floor_keys": rows[keys.index(max(keys))]["workload"] if keys else None,
    }


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return (s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2) if n else math.nan


def table(rows: list[dict[str, Any]], skipped: list[str], command: str) -> str:
    c = checks(rows)
    lines = [
        "# Bytes between sites: `auto` against `central` and the floor",
        "",
        f"Generated by `{command}` (`bench/bytes_bench.py`; per-workload JSON and plots under its `--out`).",
        "Bytes are measured on the simulator (what Kafka carries); every plan's result count equals",
        "`central`'s. **central** = the best `central:SITE`; **floor** = the bytes of the tuples that take",
        "part in a result and are not at the result site, minimised over the site; **+keys** adds the keys",
        "of the other tuples once per batch (definitions: `shared/notes/bytes.md`, `joinlib/costs/floor.py`).",
        "Ratios are against the best central; **est** is the byte model's estimate of auto's plan",
        "(statistics measured on the data) over its measured bytes.",
        "",
        "## The issue's checks",
        "",
        "| check | target | measured |",
        "|---|---|---|",
        f"| auto ≤ 1.02 × best central | every workload | {c['auto_le_1.02_central']} of {c['workloads']} "
        f"(max {c['auto_over_central_max']}×, {c['worst']}; median {c['auto_over_central_median']}×) |",
        f"| auto ≥ 10× below central where floor ≤ central / 20 | all {c['floor_le_central/20']} | "
        f"{c['auto_10x_below_central_there']} of {c['floor_le_central/20']} |",
        f"| mean auto / floor where floor ≤ central / 5 | ≤ 2 | {c['mean_auto_over_floor_there']} "
        f"(median {c['median_auto_over_floor_there']}, over {c['floor_le_central/5']} workloads) |",
        f"| auto ≤ 1.1 × (floor + keys) | every workload | {c['auto_le_1.1_floor_keys']} of {c['workloads']} "
        f"(max {c['auto_over_floor_keys_max']}×, {c['worst_floor_keys']}) |",
        "",
        "## Per workload",
        "",
        "| workload | results | central B | floor | +keys | auto | auto/floor | auto/(floor+keys) | auto's plan | "
        "est | auto/plans | greedy | exhaustive | beam | greedy/paper |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        cb = r["central"]

        def rel(name: str, r: dict[str, Any] = r, cb: int = cb) -> str:
            return f"{r[name] / cb:.3f}" if name in r else "–"
        lines.append(
            f"| {r['workload']} | {r['results']:,} | {cb:,} | {r['floor'] / cb:.3f} | {r['floor_keys'] / cb:.3f} | "
            f"**{r['auto'] / cb:.3f}** | {r['auto'] / max(1, r['floor']):.1f} | "
            f"{r['auto'] / max(1, r['floor_keys']):.2f} | {r['auto_choice']} | "
            f"{r['auto:estimate'] / max(1, r['auto']):.2f} | {rel('auto/plans')} | {rel('greedy')} | "
            f"{rel('exhaustive')} | {rel('beam')} | "
            f"{rel('greedy/paper')} |")
    if skipped:
        lines += ["", f"Not in this table ({len(skipped)}: expected result count above the bench's cap, or not run "
                  f"yet): {', '.join(skipped)}."]
    return "\n".join(lines) + "\n"


def accuracy(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Estimate / measurement of every plan run (auto's, the planners', every central)."""
    ratios: dict[str, list[float]] = {}
    for r in rows:
        for k, v in r.items():
            if k.endswith(":estimate") and r.get(k[:-9]):
                ratios.setdefault(k[:-9].split(":")[0], []).append(v / r[k[:-9]])
    out = {}
    for name, xs in ratios.items():
        logs = [abs(math.log(x)) for x in xs if x > 0]
        out[name] = {"n": len(xs), "median": round(_median(xs), 3), "min": round(min(xs), 3),
                     "max": round(max(xs), 3),
                     "within_25%": round(sum(1 for x in logs if x <= math.log(1.25)) / len(logs), 3)}
    return out


def main(argv: Optional[list[str]] = None) -> int:
    from joinlib.units import parse_duration
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="6 small workloads (a test)")
    ap.add_argument("--out", type=Path, default=Path("bench/out/bytes"))
    ap.add_argument("--duration", default="15s")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--only", default="", help="workloads whose name contains this")
    ap.add_argument("--sampled", action="store_true", help="also run the sampled planner (slow)")
    ap.add_argument("--max-results", type=float, default=3e6)
    ap.add_argument("--table", type=Path, help="write the markdown table here (e.g. docs/bytes.md)")
    ap.add_argument("--from-json", action="store_true", help="no runs: summarise the workload JSON under --out")
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    if a.from_json:
        docs = [json.loads(p.read_text()) for p in sorted(a.out.glob("*.json")) if p.name != "summary.json"]
        order = {w.name: i for i, w in enumerate(grid(False, parse_duration(a.duration)))}
        rows = sorted((summary_row(d) for d in docs), key=lambda r: order.get(r["workload"], 1 << 30))
        done = {r["workload"] for r in rows}
        pending = [w.name for w in grid(False, parse_duration(a.duration)) if w.name not in done]
        summary = {"command": "python bench/bytes_bench.py", "checks": checks(rows), "accuracy": accuracy(rows),
                   "rows": rows, "not_run": pending}
        (a.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
        print(json.dumps(summary["checks"], indent=1))
        print(json.dumps(summary["accuracy"], indent=1))
        if a.table:
            a.table.write_text(table(rows, pending, "python bench/bytes_bench.py"))
        return 0
    work = [w for w in grid(a.quick, parse_duration(a.duration)) if a.only in w.name]
    skipped = [w.name for w in work if w.expected_results() > a.max_results]
    work = [w for w in work if w.name not in skipped]
    print(f"{len(work)} workloads ({len(skipped)} skipped: too many results) -> {a.out}", flush=True)
    rows: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    with ProcessPoolExecutor(a.jobs) as ex:
        futs = [ex.submit(run_workload, w, a.out, a.sampled) for w in work]
        for fut in futs:
            r = fut.result()
            rows.append(r)
            print(f"[{time.perf_counter() - t0:7.0f}s] {r['workload']:<34} central {r['central']:>12,} "
                  f"floor {r['floor'] / r['central']:.3f} auto {r['auto'] / r['central']:.3f} ({r['auto_choice']})",
                  flush=True)
    command = "python bench/bytes_bench.py" + (" --quick" if a.quick else "") + \
        (f" --duration {a.duration}" if a.duration != "15s" else "") + (f" --only {a.only}" if a.only else "")
    summary = {"command": command, "checks": checks(rows), "accuracy": accuracy(rows), "rows": rows,
               "skipped": skipped}
    (a.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary["checks"], indent=1))
    print(json.dumps(summary["accuracy"], indent=1))
    if a.table:
        a.table.write_text(table(rows, skipped, command))
        print(f"wrote {a.table}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
