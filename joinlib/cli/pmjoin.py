"""``joinlib experiment pmjoin``: registered by :func:`add_experiment` on the ``experiment`` command
(``joinlib/cli/experiments.py``), like ``experiment rpj``."""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from joinlib.errors import JoinlibError
from joinlib.experiments import pmjoin as experiment

DESCRIPTION = """\
The model sweep of seed 002 (PMJoin, Zhou et al.), computed with the rate model: cost = tuples per
second shipped between nodes (the final result's delivery is not counted); nothing runs on the engine.

PMJoin (the paper's Fig. 8): 10 streams at 10 nodes, rates U[10, 1000]/s, time windows U[10, 100] s,
data range 1..1000, similar (SD: Zipf 0.1-0.3) or different (DD: Uniform, Normal, Zipf, Self-Similar)
distributions with a contiguous (CHS) or randomly spread (RHS) hot spot; D = 1 ... 1000 partitions
by hash, range and rate-based partitioning, each group planned by STREAMJOINOPT; Simple and the
exhaustive Optimal at D = 1 beside them.
Heuristic (Fig. 5): STREAMJOINOPT vs exhaustive Optimal vs Simple over data ranges 10 ... 100,000,
LASW / HASW x SD / DD.

Writes DIR/pmjoin.json (scale, the paper's claims, checks, summaries, every run),
DIR/fig8_pmjoin.png and DIR/fig5_heuristic.png; prints the shapes. docs/pmjoin.md explains them."""


def add_experiment(subparsers: Any) -> None:
    """Register ``joinlib experiment pmjoin`` on the ``experiment`` command's subparsers."""
    e = subparsers.add_parser(
        "pmjoin", help="PMJoin partitioning and STREAMJOINOPT under the rate model (seed 002, Figs. 5 and 8)",
        formatter_class=argparse.RawDescriptionHelpFormatter, description=DESCRIPTION)
    e.add_argument("--out", type=Path, required=True, metavar="DIR", help="output directory (created)")
    e.add_argument("--quick", action="store_true",
                   help="8 streams, data range 1..200, D in 1, 2, 10, 100, 2 seeds (seconds; for tests)")
    e.add_argument("--seeds", type=int, help="workloads per scenario (default 10; 2 with --quick)")
    e.add_argument("--seed", type=int, help="first seed (default 1)")
    e.add_argument("--jobs", type=int, help="parallel processes (default: 1)")
    e.add_argument("--no-progress", action="store_true", help="no progress bar")
    e.set_defaults(func=_cmd_experiment)


def _cmd_experiment(args: argparse.Namespace) -> int:
    scale = experiment.QUICK if args.quick else experiment.Scale()
    if args.seeds is not None:
        if args.seeds < 1:
            raise JoinlibError(f"--seeds {args.seeds}: must be >= 1")
        scale = replace(scale, seeds=args.seeds)
    if args.seed is not None:
        scale = replace(scale, first_seed=args.seed)
    if args.jobs is not None and args.jobs < 1:
        raise JoinlibError(f"--jobs {args.jobs}: must be >= 1")
    try:
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise JoinlibError(f"--out {args.out}: cannot create the directory ({e.strerror or e})") from None
    experiment.main(args.out, scale, jobs=args.jobs, progress=not args.no_progress and sys.stderr.isatty())
    return 0
