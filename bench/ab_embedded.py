"""A/B of embedded operator CPU between checkouts: ``joinlib run`` of one query and plan from each tree in turn,
with each phase timed by the thread's CPU clock, best of ``--runs``.

Why: on a shared two-core machine the wall-clock ``processing_s`` of a report moves by 15 % from one hour to the
next, more than most changes this measures; alternating the trees and timing phases by the thread's CPU clock
leaves mostly the difference between them.  Each tree needs its kernels built (``python setup.py build_ext
--inplace`` in a worktree: ``git worktree add --detach /tmp/base REV``).

    python bench/ab_embedded.py --query results/tmp/cpu-work/routers.yaml --data results/tmp/cpu-work/routers \\
        --plan auto --tree base=/tmp/base --tree new=. [--runs 5]

Prints per tree the best ``processing_s``, bytes, results and the time per operator; ``--json FILE`` writes them.
Beside it, ``run_cpu_s``: the thread CPU of the whole simulation (the last ``joinlib.sim.engine.drive``: the
phases that ran, the polls that found nothing to do, the simulated network), best of the runs -- ``processing_s``
times only the phases that ran, so a change to the scheduler shows in ``run_cpu_s`` alone.
(``bench/cpu_bench.py`` generates the routers data in ``results/tmp/cpu-work``.)
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

_RUN = """
import os, sys, time
sys.path.insert(0, '.')
import joinlib.runtime.lanes as lanes
if os.environ.get("AB_CLOCK") != "perf":
    lanes._perf = time.thread_time
import joinlib.sim.engine as engine
spent, drive = [0.0], engine.drive
def timed(*a, **k):
    t0 = time.thread_time()
    try:
        return drive(*a, **k)
    finally:
        spent[0] = time.thread_time() - t0   # the last one: the run (planning on a sample drives others before)
engine.drive = timed
from joinlib.cli.main import main
try:
    main(sys.argv[1:])
finally:
    with open(os.environ["AB_RUN_CPU"], "w") as f:
        f.write(repr(spent[0]))
"""


def one_run(tree: Path, query: Path, data: Path, plan: str, seed: int = 0, clock: str = "thread") -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        report, cpu = Path(tmp) / "report.json", Path(tmp) / "run_cpu"
        subprocess.run([sys.executable, "-c", _RUN, "run", str(query), "--data", str(data), "--plan", plan,
                        "--quiet", "--no-progress", "--report", str(report)], check=True, cwd=tree,
                       env={**os.environ, "AB_RUN_CPU": str(cpu), "PYTHONHASHSEED": str(seed),
                            "AB_CLOCK": clock})
        out: dict[str, Any] = json.loads(report.read_text())
        out["run_cpu_s"] = float(cpu.read_text()) or None   # 0: the run did not go through engine.drive
    return out


def best_runs(trees: dict[str, Path], query: Path, data: Path, plan: str, runs: int,
              clock: str = "thread") -> tuple[dict[str, dict[str, Any]], dict[str, float]]:
    """Per tree, the report of its run with the least ``processing_s`` and the least ``run_cpu_s`` of its runs (the
    trees alternating, ``runs`` rounds).  Every tree of a round runs with the same string hash seed, each round with
    another: the layout of the dictionaries keyed by strings moves a run's time by 15-30 % from seed to seed, more
    than most changes this measures."""
    best: dict[str, dict[str, Any]] = {}
    run_cpu: dict[str, float] = {}
    for round_ in range(runs):
        for name, tree in trees.items():
            r = one_run(tree, query, data, plan, seed=round_, clock=clock)
            if name not in best or r["processing_s"] < best[name]["processing_s"]:
                best[name] = r
            if r["run_cpu_s"] is not None:
                run_cpu[name] = min(run_cpu.get(name, r["run_cpu_s"]), r["run_cpu_s"])
    return best, run_cpu


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--query", type=Path, required=True)
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--plan", required=True, help="a plan name or a plan JSON file, as `joinlib run --plan` takes")
    ap.add_argument("--tree", action="append", required=True, metavar="NAME=DIR", help="a checkout to run from")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--clock", choices=("thread", "perf"), default="thread",
                    help="what times each phase: the thread's CPU clock (default: a busy machine's other work does "
                         "not count, but a reading costs about 0.4 us against 0.1, which a plan with many short "
                         "phases pays more often), or perf_counter, as `joinlib run --report` does (a quiet machine)")
    args = ap.parse_args(argv)
    trees = {}
    for t in args.tree:
        name, sep, path = t.partition("=")
        if not sep or not Path(path).is_dir():
            ap.error(f"--tree {t!r}: expected NAME=DIR with an existing directory")
        trees[name] = Path(path).resolve()
    query, data = args.query.resolve(), args.data.resolve()
    best, run_cpu = best_runs(trees, query, data, args.plan, args.runs, args.clock)
    rows = {}
    for name, r in best.items():
        ops: dict[str, float] = {}
        for per_site in r["processing_by_site"].values():
            for op, secs in per_site.items():
                ops[op] = round(ops.get(op, 0.0) + secs, 4)
        whole = round(run_cpu[name], 4) if name in run_cpu else None
        rows[name] = {"processing_s": round(r["processing_s"], 4), "run_cpu_s": whole, "bytes": r["bytes"],
                      "results": r["results"], "by_operator": ops}
        print(f"{args.plan} {name}: {rows[name]['processing_s']} s (whole run {whole} s), {r['bytes']:,} bytes, "
              f"{r['results']} results, {ops}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
