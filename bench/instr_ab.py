"""A/B of embedded operator work between checkouts in instructions, not seconds: ``joinlib run`` of one query and
plan from each tree under valgrind's callgrind, counting only the instructions executed inside the lane scheduler
(``run_lanes``: every phase that runs or polls, none of the decoding, planning or simulated network around it).

Why: on this two-core machine, shared with other work, the CPU time of the same run moves by 15-30 % from one
minute to the next (load, string hash seeds), more than most changes measure; an instruction count is the same on
every run with the same hash seed, however loaded the machine.  It is not a time: a change that trades
instructions for cache misses (or the reverse) shows here as it does not on the clock, so the seconds still come
from ``bench/ab_embedded.py`` or ``bench/cpu_bench.py`` on a quiet machine.  Each tree needs its kernels built
(``python setup.py build_ext --inplace``); valgrind is a Debian package (``apt-get install valgrind``).  A run
takes about 100x its normal time (a few minutes for the demo's query).

    python bench/instr_ab.py --query results/tmp/cpu-work/routers.yaml --data results/tmp/cpu-work/routers \\
        --plan auto --tree base=/tmp/base --tree new=. [--seed 0] [--json FILE]

Prints per tree the instructions in the scheduler, bytes and results, and the change against the first tree.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

_TOTAL = re.compile(r"^summary:\s*(\d+)", re.M)


def count(tree: Path, query: Path, data: Path, plan: str, seed: int) -> dict[str, Any]:
    """Instructions inside run_lanes for one run of ``plan`` from ``tree``, with the run's report."""
    with tempfile.TemporaryDirectory() as tmp:
        out, report = Path(tmp) / "callgrind.out", Path(tmp) / "report.json"
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--toggle-collect=run_lanes",
               sys.executable, "-m", "joinlib", "run", str(query.resolve()), "--data", str(data.resolve()),
               "--plan", plan, "--quiet", "--no-progress", "--report", str(report)]
        subprocess.run(cmd, check=True, cwd=tree, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       env={**os.environ, "PYTHONHASHSEED": str(seed)})
        m = _TOTAL.search(out.read_text())
        if m is None:
            raise SystemExit(f"instr_ab: no summary line in callgrind's output for {tree}")
        rep = json.loads(report.read_text())
    return {"instructions": int(m.group(1)), "bytes": rep["bytes"], "results": rep["results"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--query", type=Path, required=True)
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--plan", default="auto")
    ap.add_argument("--tree", action="append", required=True, metavar="NAME=DIR",
                    help="a checkout with its kernels built (repeat; the first is the base)")
    ap.add_argument("--seed", type=int, default=0, help="PYTHONHASHSEED of every run (default 0)")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args(argv)
    if shutil.which("valgrind") is None:
        print("instr_ab: valgrind is not installed (apt-get install valgrind)", file=sys.stderr)
        return 2
    trees: dict[str, Path] = {}
    for spec in args.tree:
        name, sep, path = spec.partition("=")
        if not sep or not Path(path).is_dir():
            print(f"instr_ab: --tree wants NAME=DIR (a directory), got {spec!r}", file=sys.stderr)
            return 2
        trees[name] = Path(path).resolve()
    got = {name: count(tree, args.query, args.data, args.plan, args.seed) for name, tree in trees.items()}
    base = next(iter(got.values()))["instructions"]
    for name, r in got.items():
        r["change"] = r["instructions"] / base - 1
        print(f"{args.plan} {name}: {r['instructions']:,} instructions in the scheduler ({r['change']:+.1%}), "
              f"{r['bytes']:,} bytes, {r['results']} results")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"plan": args.plan, "seed": args.seed, "trees": got}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
