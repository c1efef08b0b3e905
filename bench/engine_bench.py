"""Throughput and peak memory of the embedded engine (issue: >= 200k input tuples/s per core).

Workloads: the paper's Fig. 7 default 2-way join (examples/fig7.yaml: 250 attributes,
f = 0.1, 300 tuples/s, 3 s windows) under each of the six algorithms and `central`,
and a 3-way chain (examples/chain3.yaml) under greedy and central.  Each run is a
fresh subprocess (peak RSS is per run); data is generated once and loaded outside the
timed part; results are counted, not materialized (CountingSink).  The engine is
single-threaded, so tuples/s is per core.

    python bench/engine_bench.py [--duration 60s] [--out bench/out]
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RUNS = [("fig7", p) for p in ("SP-S", "SP-D", "SM-S1", "SM-S2", "SM-D1", "SM-D2", "central")] + \
       [("chain3", p) for p in ("greedy", "central")]


def one(query_file: str, data: str, plan: str) -> dict:
    """Run in this process and return measurements (called in a subprocess)."""
    from joinlib.data.files import load_streams
    from joinlib.planner.registry import resolve_plan
    from joinlib.query import load_query
    from joinlib.runtime.sink import CountingSink
    from joinlib.sim.engine import run_embedded
    q = load_query(query_file)
    t0 = time.perf_counter()
    streams = load_streams(q, data)
    load_s = time.perf_counter() - t0
    n = sum(map(len, streams.values()))
    sink = CountingSink()
    cpu0, t0 = time.process_time(), time.perf_counter()
    rep = run_embedded(q, streams, resolve_plan(q, plan), sink)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    return {"query": q.name, "plan": plan, "input_tuples": n, "results": sink.count,
            "engine_wall_s": round(wall, 3), "engine_cpu_s": round(cpu, 3),
            "tuples_per_s": round(n / wall), "tuples_per_cpu_s": round(n / cpu),
            "load_s": round(load_s, 3), "bytes": rep.bytes, "messages": rep.messages,
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", default="60s", help="event time of generated data (default 60s)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    ap.add_argument("--one", nargs=3, metavar=("QUERY", "DATA", "PLAN"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(*args.one)))
        return
    from tqdm import tqdm

    from joinlib.data.gen import generate
    from joinlib.query import load_query
    from joinlib.units import parse_duration
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in sorted({q for q, _ in RUNS}):
        d = args.out / "data" / name
        if not (d / "S1.jsonl").exists():
            generate(load_query(ROOT / "examples" / f"{name}.yaml"), d, parse_duration(args.duration), seed=1)
    for name, plan in tqdm(RUNS, desc="engine bench", unit="run"):
        cmd = [sys.executable, __file__, "--one", str(ROOT / "examples" / f"{name}.yaml"),
               str(args.out / "data" / name), plan]
        rows.append(json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout))
    (args.out / "engine.json").write_text(json.dumps({"duration": args.duration, "runs": rows}, indent=2) + "\n")
    plot(rows, args.out / "engine.png")
    for r in rows:
        print(f"{r['query']:>7} {r['plan']:>8}: {r['tuples_per_s']:>8,} tuples/s  {r['peak_rss_mb']:>7} MB peak  "
              f"{r['bytes']:>12,} bytes  {r['results']:>10,} results")


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
    labels = [f"{r['query']}\n{r['plan']}" for r in rows]
    a.bar(labels, [r["tuples_per_s"] / 1000 for r in rows], color="tab:blue")
    a.axhline(200, color="tab:red", ls="--", label="target 200k/s")
    a.set_ylabel("input tuples/s (thousands), one core")
    a.set_title("Embedded engine throughput")
    a.legend()
    b.bar(labels, [r["peak_rss_mb"] for r in rows], color="tab:orange")
    b.set_ylabel("peak RSS (MB)")
    b.set_title("Peak memory (data + engine)")
    for ax in (a, b):
        ax.tick_params(axis="x", labelsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
