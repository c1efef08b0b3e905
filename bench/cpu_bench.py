"""The CPU price of each plan kind (issue 27): input tuples per CPU-second of the operators, per plan and
workload, in embedded mode; with ``--live``, node services on the local broker draining a backlog too.

Why this bench: the plans that save bytes must not cost more CPU than shipping everything.  Each embedded
run is a fresh ``joinlib run`` process over data generated once; its report's ``processing_s`` is the time
the operators spent (what the sensor measures around every phase: decoding the data files and planning are
not in it), so ``input_tuples / processing_s`` is the rate one core sustains for that plan.  The whole
process's CPU is recorded beside it.  Workloads:

* ``routers``: the demo's query (examples/routers_selective.yaml, 3 routers, 1,250-byte packets, selective);
* ``fig7``: the paper's Fig. 7 two-way defaults (examples/fig7.yaml, f = 0.1, 1,250-byte tuples);
* ``chain3``: a 3-way chain with Fig. 7's parameters (examples/chain3.yaml, 1,250-byte tuples);
* ``chain3-50B``: the same chain with 50-byte tuples (10 attributes).

Plans: the six algorithms, ``central`` (at the site where it ships least), reductions with and without
crossing edges (``reduce``, ``reduce:cross`` where the graph has a cycle), ``auto``, ``pmjoin`` and
``mjoin``.  A plan a workload cannot run (an error from ``joinlib run``) is recorded with its message.

The slowest plan is run once more under cProfile; its top functions by self time go to ``profile.txt``.

    python bench/cpu_bench.py [--duration 60s] [--workloads routers,fig7] [--plans SM-S1,auto]
                              [--out results/cpu] [--live [--backlog 300] [--redis]]

Writes OUT/cpu.json, OUT/cpu.png and OUT/profile.txt; ``make bench-cpu``.
"""
from __future__ import annotations

import argparse
import io
import json
import pstats
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from joinlib.query import load_query, query_to_dict  # noqa: E402

WORKLOADS = {
    "routers": ("routers_selective.yaml", {}),
    "fig7": ("fig7.yaml", {}),
    "chain3": ("chain3.yaml", {}),
    "chain3-50B": ("chain3.yaml", {"attributes": 10, "tuple_bytes": 50}),
}
PLANS = ["SP-S", "SP-D", "SM-S1", "SM-S2", "SM-D1", "SM-D2", "central", "reduce", "reduce:cross", "auto",
         "pmjoin", "mjoin"]


def prepare(name: str, work: Path, duration: str, seed: int) -> tuple[Path, Path]:
    """The workload's query file and data directory (generated once, reused by every plan)."""
    file, overrides = WORKLOADS[name]
    doc = query_to_dict(load_query(ROOT / "examples" / file))
    for spec in doc["streams"].values():
        spec.update(overrides)
    doc["name"] = name.replace("-", "_")
    qfile, data = work / f"{name}.yaml", work / name
    qfile.write_text(yaml.safe_dump(doc, sort_keys=False))
    if not (data / ".done").exists():
        subprocess.run([sys.executable, "-m", "joinlib", "gen", str(qfile), "--out", str(data), "--duration", duration,
                        "--seed", str(seed)], check=True, capture_output=True, cwd=ROOT)
        (data / ".done").write_text("")
    return qfile, data


def best_central(qfile: Path) -> str:
    """``central`` at the site where the plan ships least is what a user would pick; the sites all cost
    about the same CPU, so the first site stands for them (the report says which)."""
    return f"central:{load_query(qfile).sites[0]}"


def run_plan(qfile: Path, data: Path, plan: str, work: Path) -> dict[str, Any]:
    """One ``joinlib run`` in a fresh process: its report's figures and the process's CPU seconds."""
    report = work / f"report-{qfile.stem}-{plan.replace(':', '_')}.json"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "joinlib", "run", str(qfile), "--data", str(data), "--plan", plan,
                           "--quiet", "--no-progress", "--report", str(report)], capture_output=True, text=True,
                          cwd=ROOT)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    row: dict[str, Any] = {"plan": plan, "process_cpu_s": round(after.ru_utime + after.ru_stime
                                                                - before.ru_utime - before.ru_stime, 3),
                           "process_wall_s": round(time.perf_counter() - wall0, 3)}
    if proc.returncode != 0:
        row["error"] = (proc.stderr.strip().splitlines() or ["exit %d" % proc.returncode])[-1]
        return row
    rep = json.loads(report.read_text())
    n, secs = rep["input_tuples"], rep["processing_s"]
    row.update(results=rep["results"], bytes=rep["bytes"], input_tuples=n, processing_s=round(secs, 4),
               tuples_per_cpu_s=round(n / secs) if secs > 0 else None,
               processing_by_site=rep.get("processing_by_site"))
    return row


def profile_summary(qfile: Path, data: Path, plan: str, work: Path, top: int = 25) -> str:
    """The top functions by self time of one ``joinlib run`` of ``plan`` under cProfile (every plan kind
    runs through the CLI; loading the data files is in the profile too, under ``load_stream``)."""
    prof = work / "slowest.prof"
    subprocess.run([sys.executable, "-m", "cProfile", "-o", str(prof), "-m", "joinlib", "run", str(qfile),
                    "--data", str(data), "--plan", plan, "--quiet", "--no-progress"], check=True,
                   capture_output=True, cwd=ROOT)
    out = io.StringIO()
    pstats.Stats(str(prof), stream=out).sort_stats("tottime").print_stats(top)
    return f"# {qfile.stem}, plan {plan}: top {top} functions by self time\n" + out.getvalue()


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib  # heavy optional dependency: only for the figure
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    workloads = sorted({r["workload"] for r in rows})
    fig, axes = plt.subplots(len(workloads), 1, figsize=(10, 2.8 * len(workloads)), squeeze=False)
    for ax, w in zip(axes[:, 0], workloads, strict=True):
        ok = [r for r in rows if r["workload"] == w and r.get("tuples_per_cpu_s")]
        ax.barh([r["plan"] for r in ok], [r["tuples_per_cpu_s"] / 1000 for r in ok], color="tab:blue")
        ax.axvline(150, color="tab:red", linestyle="--", linewidth=1, label="target 150k")
        ax.set_title(w, fontsize=10)
        ax.set_xlabel("input tuples per CPU-second (thousands)")
        ax.invert_yaxis()
        ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def live_rows(args: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    """Node services on the local broker draining ``--backlog`` seconds of live_common's workloads."""
    from bench.live_common import kafka
    from infra.local_cluster import start_redis
    bs, cluster = kafka(args.bootstrap)
    redis = start_redis(work / "redis") if args.redis else None
    redis_url = redis.url if redis is not None else None
    rows: list[dict[str, Any]] = []
    try:
        _live_runs(args, bs, work, redis_url, rows)
    finally:
        if redis is not None:
            redis.stop()
        if cluster is not None:
            cluster.stop()
    return rows


def _live_runs(args: argparse.Namespace, bs: str, work: Path, redis_url: Optional[str],
               rows: list[dict[str, Any]]) -> None:
    from bench.live_bench import backlog_run, prepare_backlog, warm_up
    from bench.spark_compare import ROUTERS
    plans = args.live_plans.split(",")
    if args.warmup > 0:   # a broker's first drains run its JIT (live_bench.warm_up)
        w = warm_up(bs, args.warmup, ROUTERS["f"], plans[0], work, ROUTERS["rate"], ROUTERS["payload"], redis_url)
        print(f"warm-up: {w['events']:,} events at {w['events_per_s']:,.0f} events/s (not measured)", flush=True)
    for name, kw in (("routers-live", ROUTERS), ("fig7-live", {"f": 0.01, "rate": 300.0, "payload": 1000})):
        data = prepare_backlog(bs, args.backlog, kw["f"], kw["rate"], kw["payload"], exact=False)
        for plan in plans:
            r = backlog_run(bs, args.backlog, kw["f"], plan, work, False, kw["rate"], kw["payload"], data=data,
                            redis_url=redis_url)
            cpu = sum(r["node_cpu_s"].values())
            r.update(workload=name, plan_asked=plan, windows="redis" if redis_url else "memory",
                     events_per_node_cpu_s=round(r["events"] / cpu) if cpu else None)
            print(json.dumps(r), flush=True)
            rows.append(r)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", default="60s", help="event time of the generated data (default 60s)")
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated, of: " + ", ".join(WORKLOADS))
    ap.add_argument("--plans", default=",".join(PLANS), help="comma-separated plan names (default: every kind)")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "cpu")
    ap.add_argument("--no-profile", action="store_true", help="skip the profile of the slowest plan")
    ap.add_argument("--live", action="store_true", help="also node services on the local broker (a backlog)")
    ap.add_argument("--backlog", type=float, default=300.0, help="seconds of events per site for --live")
    ap.add_argument("--live-plans", default="auto,central", help="plans for --live (default auto,central)")
    ap.add_argument("--redis", action="store_true", help="--live with windows in Redis")
    ap.add_argument("--warmup", type=float, default=60.0,
                    help="--live: seconds of backlog drained once, unmeasured, first (default 60; 0: none): a "
                         "broker's first drains run its JIT")
    ap.add_argument("--bootstrap", default=None, help="Kafka for --live (default: a throw-away local broker)")
    args = ap.parse_args(argv)
    work = ROOT / "results" / "tmp" / f"{args.out.name}-work"   # generated data and reports (git-ignored)
    work.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    unknown = [w for w in args.workloads.split(",") if w not in WORKLOADS]
    if unknown:
        ap.error(f"unknown workload {', '.join(unknown)} (known: {', '.join(WORKLOADS)})")
    rows: list[dict[str, Any]] = []
    for w in args.workloads.split(","):
        qfile, data = prepare(w, work, args.duration, args.seed)
        for plan in args.plans.split(","):
            asked = best_central(qfile) if plan == "central" else plan
            row = {"workload": w, **run_plan(qfile, data, asked, work)}
            print(json.dumps({k: v for k, v in row.items() if k != "processing_by_site"}), flush=True)
            rows.append(row)
    result: dict[str, Any] = {"duration": args.duration, "seed": args.seed, "embedded": rows}
    timed = [r for r in rows if r.get("tuples_per_cpu_s")]
    if timed and not args.no_profile:
        slow = min(timed, key=lambda r: r["tuples_per_cpu_s"])
        qfile, data = prepare(slow["workload"], work, args.duration, args.seed)
        (args.out / "profile.txt").write_text(profile_summary(qfile, data, slow["plan"], work))
        result["profiled"] = {"workload": slow["workload"], "plan": slow["plan"]}
    if args.live:
        result["live"] = live_rows(args, work)
    (args.out / "cpu.json").write_text(json.dumps(result, indent=1))
    if timed:
        plot(rows, args.out / "cpu.png")
    print(f"wrote {args.out / 'cpu.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
