"""A/B of embedded operator CPU between checkouts: ``joinlib run`` of one query and plan from each tree in turn,
with each phase timed by the thread's CPU clock, best of ``--runs``.

Why: on a shared two-core machine the wall-clock ``processing_s`` of a report moves by 15 % from one hour to the
next, more than most changes this measures; alternating the trees and timing phases by the thread's CPU clock
leaves mostly the difference between them.  Each tree needs its kernels built (``python setup.py build_ext
--inplace`` in a worktree: ``git worktree add --detach /tmp/base REV``).

    python bench/ab_embedded.py --query results/tmp/cpu-work/routers.yaml --data results/tmp/cpu-work/routers \\
        --plan auto --tree base=/tmp/base --tree new=. [--runs 5]

Prints per tree the best ``processing_s``, bytes, results and the time per operator; ``--json FILE`` writes them.
(``bench/cpu_bench.py`` generates the routers data in ``results/tmp/cpu-work``.)
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

_RUN = ("import sys, time; sys.path.insert(0, '.'); import joinlib.runtime.lanes as lanes; "
        "lanes._perf = time.thread_time; from joinlib.cli.main import main; main(sys.argv[1:])")


def one_run(tree: Path, query: Path, data: Path, plan: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        subprocess.run([sys.executable, "-c", _RUN, "run", str(query), "--data", str(data), "--plan", plan,
                        "--quiet", "--no-progress", "--report", str(report)], check=True, cwd=tree)
        out: dict[str, Any] = json.loads(report.read_text())
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--query", type=Path, required=True)
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--plan", required=True, help="a plan name or a plan JSON file, as `joinlib run --plan` takes")
    ap.add_argument("--tree", action="append", required=True, metavar="NAME=DIR", help="a checkout to run from")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    trees = {}
    for t in args.tree:
        name, sep, path = t.partition("=")
        if not sep or not Path(path).is_dir():
            ap.error(f"--tree {t!r}: expected NAME=DIR with an existing directory")
        trees[name] = Path(path).resolve()
    query, data = args.query.resolve(), args.data.resolve()
    best: dict[str, dict[str, Any]] = {}
    for _ in range(args.runs):
        for name, tree in trees.items():
            r = one_run(tree, query, data, args.plan)
            if name not in best or r["processing_s"] < best[name]["processing_s"]:
                best[name] = r
    rows = {}
    for name, r in best.items():
        ops: dict[str, float] = {}
        for per_site in r["processing_by_site"].values():
            for op, secs in per_site.items():
                ops[op] = round(ops.get(op, 0.0) + secs, 4)
        rows[name] = {"processing_s": round(r["processing_s"], 4), "bytes": r["bytes"], "results": r["results"],
                      "by_operator": ops}
        print(f"{args.plan} {name}: {rows[name]['processing_s']} s, {r['bytes']:,} bytes, {r['results']} results, "
              f"{ops}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
