"""``joinlib experiment iflow``: registered by :func:`add_experiment` (``joinlib/cli/experiments.py``).

User mistakes raise :class:`~joinlib.errors.JoinlibError` subclasses: one ``error: ...`` line, status 2.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Optional

from joinlib.experiments import iflow as experiment
from joinlib.multiquery.errors import MultiQueryError


def add_experiment(subparsers: Any) -> None:
    """Register ``joinlib experiment iflow`` on the ``experiment`` command's subparsers."""
    e = subparsers.add_parser(
        "iflow", help="multi-query planning with operator reuse over hierarchical partitions (seed 001)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Seed 001 (Seshadri et al., IFLOW): 100 five-stream queries deployed one by one on a 64-node "
                    "transit-stub network (8 stubs x 8, seeded).  Each planner -- the integrated optimum with reuse, "
                    "without reuse, plan-then-deploy (rate order + optimal / relaxation placement), and Top-Down, "
                    "Bottom-Up and NPC (our reconstructions) for every maxcs -- runs the whole sequence with its own "
                    "deployments; each query is compared with the optimum under the same deployments.  Cost = "
                    "network usage, sum over links of rate x latency.\n"
                    "Writes DIR/iflow.json (summaries, savings, checks, the paper's figures), DIR/iflow_runs.json "
                    "(every query of every run) and DIR/iflow_{totals,maxcs,cumulative,overlap}.png; prints the "
                    "measured numbers beside the paper's.  docs/multiquery.md explains them.")
    e.add_argument("--out", type=Path, required=True, metavar="DIR", help="output directory (created)")
    e.add_argument("--quick", action="store_true", help="10 queries, sweep of 8 (about 6 s of CPU; same JSON keys)")
    e.add_argument("--seed", type=int, help="seed of the topology and the queries (default 1)")
    e.add_argument("--queries", type=int, help="queries in the sequence (default 100; 10 with --quick)")
    e.add_argument("--maxcs", help="cluster sizes, comma-separated (default 4,8,16,32)")
    e.add_argument("--topology", type=Path, metavar="FILE.yaml",
                   help="a real topology instead of the generator (nodes, links with latency and bandwidth)")
    e.add_argument("--no-progress", action="store_true", help="no progress bar")
    e.set_defaults(func=_cmd_experiment)


def _cmd_experiment(args: argparse.Namespace) -> int:
    if args.queries is not None and args.queries < 1:
        raise MultiQueryError(f"--queries {args.queries}: at least 1")
    base = experiment.QUICK if args.quick else experiment.Scale()
    scale = experiment.with_overrides(base, args.queries, _maxcs(args.maxcs), args.seed)
    try:
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise MultiQueryError(f"--out {args.out}: cannot create the directory ({e.strerror or e})") from None
    experiment.main(args.out, scale, args.topology, progress=not args.no_progress and sys.stderr.isatty())
    return 0


def _maxcs(text: Optional[str]) -> Optional[tuple[int, ...]]:
    if text is None:
        return None
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise MultiQueryError(f"--maxcs {text!r}: cluster sizes such as 4,8,16,32") from None
    if not values or min(values) < 2:
        raise MultiQueryError(f"--maxcs {text!r}: every cluster size must be at least 2")
    return tuple(dict.fromkeys(values))
