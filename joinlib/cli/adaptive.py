"""``joinlib run QUERY --data DIR --plan adaptive[:cnu|:dnu]`` and ``joinlib experiment adaptive``.

Registered by :mod:`joinlib.cli.main` (``add_run_options`` on the ``run`` parser, ``adaptive_runner``
when ``--plan`` names ``adaptive``) and :mod:`joinlib.cli.experiments` (``add_experiment``); the
run's report is the usual table followed by the triggers, plan changes and message counts
(:meth:`~.embedded.AdaptiveReport.describe`).
"""
from __future__ import annotations

import argparse
import shlex
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Optional

from joinlib.adaptive.config import AdaptiveConfig, LogSensor, parse_plan
from joinlib.adaptive.embedded import AdaptiveReport, run_adaptive
from joinlib.adaptive.planner import algorithm1
from joinlib.adaptive.stats import MonitorConfig, with_stats
from joinlib.errors import JoinlibError
from joinlib.experiments import adaptive as experiment
from joinlib.model import Query, Tup
from joinlib.plan.logical import Plan
from joinlib.runtime.sink import Sink
from joinlib.units import parse_duration

RUN_HELP = """adaptive re-planning (--plan adaptive, adaptive:cnu, adaptive:dnu; docs/adaptive.md):
  every node measures its streams each --adaptive-interval; a change of rate, tuple size or
  selectivity past --adaptive-threshold (relative, both ways) for --adaptive-persistence
  intervals in a row re-plans (seed 003's Algorithm 1: per head the cheapest next join, at the
  source or the destination).  cnu: one node re-plans; dnu: the nodes re-plan by relaying
  messages.  The new plan takes over at a head epoch all nodes agree on; windows it needs
  elsewhere are copied there first; the output stays exact.  With --cluster the node services do
  the same on Kafka (the replay is paced at event time unless --rate-scale says otherwise; --kill
  works with Redis windows); 'joinlib submit --plan adaptive' runs a live query adaptively."""


def add_run_options(r: argparse.ArgumentParser) -> None:
    """The ``run`` options of adaptive re-planning."""
    g = r.add_argument_group("adaptive re-planning (--plan adaptive[:cnu|:dnu])")
    g.add_argument("--adaptive-interval", default="200ms", metavar="DURATION",
                   help="measurement interval (default 200ms, rounded to whole batch intervals)")
    g.add_argument("--adaptive-threshold", type=float, default=0.5, metavar="X",
                   help="relative change that counts: new/old or old/new above 1 + X (default 0.5)")
    g.add_argument("--adaptive-persistence", type=int, default=2, metavar="N",
                   help="intervals in a row past the threshold before re-planning (default 2)")
    g.add_argument("--adaptive-planner", metavar="SITE",
                   help="the node that re-plans with cnu (default: the first site)")
    g.add_argument("--adaptive-margin", type=int, default=1, metavar="EPOCHS",
                   help="epochs between a node's GLOBAL_READY and the epoch it waits at until the switch (default 1; "
                        "raise it where a message takes longer than an epoch)")


def config_from_args(args: argparse.Namespace, query: Query) -> AdaptiveConfig:
    """The configuration from ``run``'s options; user mistakes as :class:`JoinlibError`."""
    interval = parse_duration(getattr(args, "adaptive_interval", "200ms"))
    planner: Optional[str] = getattr(args, "adaptive_planner", None)
    if planner is not None and planner not in query.sites:
        raise JoinlibError(f"--adaptive-planner {planner}: not a site of {query.name} "
                           f"(sites: {', '.join(query.sites)})")
    monitor = MonitorConfig(interval, getattr(args, "adaptive_threshold", 0.5),
                            getattr(args, "adaptive_persistence", 2), max(2000, interval))
    base = AdaptiveConfig("cnu", monitor, getattr(args, "adaptive_margin", 1), planner)
    return parse_plan(args.plan, base)


@dataclass(frozen=True)
class AdaptiveRunner:
    """A :class:`joinlib.cli.main.Runner` for adaptive runs: ``initial`` is the plan the run starts with
    (Algorithm 1 on the query file's statistics); the plan passed in is ignored."""

    config: AdaptiveConfig
    initial: Plan
    log: Optional[Callable[[str], None]] = None   # triggers and plan switches as they happen

    def __call__(self, query: Query, streams: dict[str, list[Tup]], plan: Any, sink: Sink, *,
                 progress: bool = False) -> AdaptiveReport:
        sensor = LogSensor(self.log) if self.log is not None else None
        return run_adaptive(query, streams, self.config, sink, sensor=sensor)


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def adaptive_runner(args: argparse.Namespace, query: Query) -> AdaptiveRunner:
    """The runner of ``run --plan adaptive...`` (checked against the other options)."""
    if getattr(args, "switch", None):
        raise JoinlibError("--switch and --plan adaptive exclude each other: an adaptive run chooses its switches")
    if getattr(args, "cluster", None) is not None and getattr(args, "rate_scale", 0) is None:
        # an unpaced replay reaches the last epoch before a migration's messages cross Kafka: every switch
        # would come after the data (exact, but no plan would ever serve a tuple)
        args.rate_scale = 1.0
        _stderr("--plan adaptive --cluster: replaying at event-time pace (--rate-scale 1; pass --rate-scale X "
                "to replay X times faster)")
    cfg = config_from_args(args, query)
    initial = algorithm1(with_stats(query, {}), cfg.model).to_plan(query)
    return AdaptiveRunner(cfg, initial, None if getattr(args, "quiet", False) else _stderr)


# --------------------------------------------------------------------------- joinlib experiment adaptive

def add_experiment(subparsers: Any) -> None:
    """Register ``joinlib experiment adaptive`` on the ``experiment`` command's subparsers."""
    e = subparsers.add_parser(
        "adaptive", help="adaptive re-planning: static vs CNU vs DNU under a toggling stream rate (seed 003)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Seed 003's Experiments 1 and 2: fully connected 4-way and 8-way joins with the paper's "
                    "defaults (150-byte tuples, 100 tuples/s, f = 0.01, 500 ms windows, 5 ms, 1024 kbps); the last "
                    "stream toggles 50 <-> 200 tuples/s every 2 s from 1.5 s.  Each repetition runs the first plan "
                    "throughout (static), CNU and DNU on the same data, each checked exactly against the reference "
                    "join.  Cost = transmission time (latency + bytes / bandwidth) of every message sent per 200 ms.\n"
                    "Writes DIR/adaptive.json (cost series, high-phase ratios, Table 3 beside the paper's, DNU/CNU "
                    "overhead, checks), DIR/adaptive_runs.json (every run) and DIR/adaptive.png (Fig. 4's layout).  "
                    "DIR/data/4way keeps the last repetition's data: joinlib run examples/toggle4.yaml --data "
                    "DIR/data/4way --plan adaptive:dnu --check")
    e.add_argument("--out", type=Path, required=True, metavar="DIR", help="output directory (created)")
    e.add_argument("--quick", action="store_true", help="2 repetitions of 5.5 s (under a minute; for tests)")
    e.add_argument("--repeats", type=int, help="repetitions (default 10; 2 with --quick)")
    e.add_argument("--ways", help="join sizes, comma-separated (default 4,8)")
    e.add_argument("--seed", type=int, default=1, help="first data seed (default 1)")
    e.add_argument("--no-progress", action="store_true", help="print nothing per repetition")
    e.set_defaults(func=_cmd_experiment)


def _cmd_experiment(args: argparse.Namespace) -> int:
    scale = experiment.QUICK if args.quick else experiment.Scale()
    if args.repeats is not None:
        if args.repeats < 1:
            raise JoinlibError(f"--repeats {args.repeats}: at least 1")
        scale = replace(scale, repeats=args.repeats)
    if args.ways:
        try:
            ways = tuple(int(w) for w in args.ways.split(","))
        except ValueError:
            raise JoinlibError(f"--ways {args.ways!r}: join sizes such as 4,8") from None
        if any(w < 2 or w > 16 for w in ways):
            raise JoinlibError(f"--ways {args.ways!r}: between 2 and 16 streams")
        scale = replace(scale, ways=ways)
    scale = replace(scale, seed=args.seed)
    if args.out.exists() and not args.out.is_dir():
        raise JoinlibError(f"--out {args.out} exists and is not a directory")
    command = " ".join(["joinlib experiment adaptive"] + (["--quick"] if args.quick else [])
                       + [f"--{k} {shlex.quote(str(v))}" for k, v in (("repeats", args.repeats), ("ways", args.ways),
                                                                   ("seed", args.seed), ("out", args.out))
                          if v is not None and not (k == "seed" and v == 1)])
    result = experiment.main(args.out, scale, progress=not args.no_progress and sys.stderr.isatty(), command=command)
    print(experiment.format_summary(result))
    print(f"wrote {args.out / 'adaptive.json'}, {args.out / 'adaptive_runs.json'}, {args.out / 'adaptive.png'}")
    return 0
