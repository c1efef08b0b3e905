"""Commands ``joinlib experiment fig7|table3|fig9|accuracy``, ``joinlib stats`` and
``joinlib calibrate``.

Registered into the main CLI by :func:`add_commands` (``joinlib/cli/main.py``'s
``_parser()``); :func:`main` runs them stand-alone (``python -m joinlib.experiments``), with
the same error handling (:func:`joinlib.command.run`).
User mistakes raise :class:`~joinlib.errors.JoinlibError`, which the CLI prints as one
``error: ...`` line with exit status 2.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Optional, Sequence
from urllib.parse import quote

from joinlib import command
from joinlib.cli.adaptive import add_experiment as add_adaptive
from joinlib.cli.live import http_json, planner_url
from joinlib.cli.multiquery import add_experiment as add_iflow
from joinlib.cli.pmjoin import add_experiment as add_pmjoin
from joinlib.cli.progressive import add_experiment as add_rpj
from joinlib.costs import TERM_MODELS as MODELS
from joinlib.costs.calibrate import main as calibrate_main
from joinlib.data.files import load_streams
from joinlib.data.stats import main as stats_main
from joinlib.data.synthetic import TOPOLOGIES
from joinlib.errors import JoinlibError
from joinlib.experiments import fig7, fig9, table3
from joinlib.experiments.accuracy import report
from joinlib.experiments.common import parse_warmup
from joinlib.experiments.output import prepare_out
from joinlib.pmjoin.partitioned import value_stats
from joinlib.sql import load_query_file
from joinlib.units import parse_duration

_RAW = argparse.RawDescriptionHelpFormatter

MEASURE_HELP = """
Measurement: each plan runs on the embedded engine (simulated network) over
WARMUP + DURATION of generated data; only the part after the warm-up is counted
(windows full, as the cost model assumes).  Execution time = processing (wall clock,
median of --repeat runs) + transmission Σ (latency + bytes / bandwidth) of every
message, per second of stream time: the paper's metric.  Bytes and transmission are
deterministic; processing is not.
"""


def add_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``experiment``, ``stats`` and ``calibrate`` on the CLI's subparsers."""
    ex = subparsers.add_parser(
        "experiment", help="reproduce the paper's experiments (Fig. 7, Table 3 / Fig. 8, Fig. 9)",
        formatter_class=_RAW,
        description="Reproduce Sect. 5 of Tran & Lee 2010 on the embedded engine and compare the cost "
                    "models' estimates with measurements.\n" + MEASURE_HELP,
        epilog="Run 'joinlib experiment NAME --help' for the options; docs/experiments.md explains the output.")
    ex.set_defaults(func=lambda args: _help(ex))
    sub = ex.add_subparsers(title="experiments", metavar="NAME")
    add_rpj(sub)  # experiment rpj (seed 004: progressive joins)
    add_adaptive(sub)  # experiment adaptive (seed 003: adaptive re-planning and plan migration)
    add_pmjoin(sub)  # experiment pmjoin (seed 002: PMJoin partitioning, STREAMJOINOPT; rate model)
    add_iflow(sub)  # experiment iflow (seed 001: multi-query planning with reuse over hierarchical partitions)

    f7 = sub.add_parser(
        "fig7", help="the six one-way algorithms under the Fig. 7 parameter sweeps", formatter_class=_RAW,
        description="Fig. 7: a 2-way join S1@n1 ⋈ S2@n2 with the paper's defaults (tuple 250 attributes, "
                    "f = 0.1, rate 300/s, window 3000 ms, latency 25 ms, bandwidth 1024 kbps, τ = 100 ms, "
                    "δ = 80 ms), each of SP-S, SP-D, SM-S1, SM-S2, SM-D1, SM-D2 used by both join "
                    "sequences, under the sweeps (a) S2 tuple size (b) S2 rate (c) S2 selectivity "
                    "(d) S2 window (e) latency (f) bandwidth 256 kbps-4 Mbps (g) interval.  Reports the "
                    "measured execution time, the one-way S1 -> S2 share by link, and the paper- and "
                    "bytes-model estimates.\nWrites DIR/fig7.json and DIR/fig7a.png ... fig7g.png.\n"
                    + MEASURE_HELP)
    f7.add_argument("--out", type=Path, required=True, help="output directory (created)")
    f7.add_argument("--duration", help="measured stream time per run (default 5s; 1s with --quick)")
    f7.add_argument("--seed", type=int, default=1, help="data seed (default 1)")
    f7.add_argument("--repeat", type=int, help="runs per measurement, median taken (default 3; 1 with --quick)")
    f7.add_argument("--warmup", default="auto",
                    help="stream time before measuring: 'auto' = the longest window (default), or e.g. 2s, 0")
    f7.add_argument("--sweeps", default="abcdefg", help="which sweeps, e.g. 'abf' (default: all of a-g)")
    f7.add_argument("--calibration", type=Path, help="also estimate with this calibrated model (joinlib calibrate)")
    f7.add_argument("--quick", action="store_true",
                    help="two points per sweep, 1 s of data, warm-up capped at 1 s, one run (for tests)")
    f7.add_argument("--no-progress", action="store_true", help="no progress bar")
    f7.set_defaults(func=_cmd_fig7)

    t3 = sub.add_parser(
        "table3", help="greedy / beam vs exhaustive plans on random queries (Table 3, Fig. 8)",
        formatter_class=_RAW,
        description="Table 3 / Fig. 8: per join-graph topology (star, chain, cycle, fully connected), N "
                    "random 4-way queries with per-stream parameters from Table 2 (tuple size 10-200 "
                    "attributes, selectivity 0.02-0.1, rate 10-200/s, window 400-2000 ms; 1024 kbps, 25 ms, "
                    "τ = 100 ms, δ = 80 ms).  Each planner plans with --model; every distinct plan runs on "
                    "the same data.  Reports T_planner / T_exhaustive measured, the ratio of estimated "
                    "costs and of bytes, beside the paper's Table 3.\nWrites DIR/table3.json "
                    "({topology: {planner: {mean, median, sd, max, n}}} of the measured ratio), "
                    "DIR/table3_runs.json (every query, plan and measurement) and DIR/table3.png "
                    "(the Fig. 8 histogram).\n" + MEASURE_HELP)
    t3.add_argument("--out", type=Path, required=True, help="output directory (created)")
    t3.add_argument("--queries", type=int, help="random queries per topology (default 100; 2 with --quick)")
    t3.add_argument("--seed", type=int, default=1, help="seed of the queries and the data (default 1)")
    t3.add_argument("--duration", help="measured stream time per run (default 5s; 1s with --quick)")
    t3.add_argument("--repeat", type=int, help="runs per plan, median taken (default 3; 1 with --quick)")
    t3.add_argument("--model", default="paper", help="planning cost model: paper | bytes | calibrated (default paper)")
    t3.add_argument("--calibration", type=Path, help="calibration JSON (needed by --model calibrated; "
                                                      "otherwise adds calibrated estimates)")
    t3.add_argument("--warmup", default="auto", help="stream time before measuring (default: the longest window)")
    t3.add_argument("--topologies", default="star,chain,cycle,complete", help="comma-separated (default: all four)")
    t3.add_argument("--planners", default="greedy,exhaustive,beam",
                    help="comma-separated; exhaustive is always included (default greedy,exhaustive,beam)")
    t3.add_argument("--per-edge-attrs", action="store_true",
                    help="one join attribute per edge instead of one attribute J shared by all predicates")
    t3.add_argument("--quick", action="store_true", help="2 queries per topology, 1 s of data, one run (tests)")
    t3.add_argument("--no-progress", action="store_true", help="no progress bar")
    t3.set_defaults(func=_cmd_table3)

    f9 = sub.add_parser(
        "fig9", help="greedy vs exhaustive with identical parameters on every node (Fig. 9)",
        formatter_class=_RAW,
        description="Fig. 9: 4-way queries over each topology with identical parameters on all nodes (tuple "
                    "100 attributes ≈ 500 B, rate 100/s, f = 0.06, window 1200 ms, 1024 kbps, 25 ms, "
                    "τ = 100 ms, δ = 80 ms); one parameter at a time (window, rate, tuple size, "
                    "selectivity) is swept over its Table 2 values on every node.  Greedy and exhaustive "
                    "plans, estimated and measured.\nWrites DIR/fig9.json and DIR/fig9.png.\n" + MEASURE_HELP)
    f9.add_argument("--out", type=Path, required=True, help="output directory (created)")
    f9.add_argument("--sweep", default="window,rate,tuple,selectivity",
                    help="parameters to sweep, comma-separated (default: all four)")
    f9.add_argument("--topologies", default="star,chain,cycle,complete", help="comma-separated (default: all four)")
    f9.add_argument("--duration", help="measured stream time per run (default 5s; 1s with --quick)")
    f9.add_argument("--seed", type=int, default=1)
    f9.add_argument("--repeat", type=int, help="runs per plan, median taken (default 3; 1 with --quick)")
    f9.add_argument("--model", default="paper", help="planning cost model (default paper)")
    f9.add_argument("--calibration", type=Path, help="calibration JSON (see joinlib calibrate)")
    f9.add_argument("--warmup", default="auto", help="stream time before measuring (default: the longest window)")
    f9.add_argument("--quick", action="store_true", help="first and last value of each sweep, 1 s of data, one run")
    f9.add_argument("--no-progress", action="store_true", help="no progress bar")
    f9.set_defaults(func=_cmd_fig9)

    ac = sub.add_parser(
        "accuracy", help="how well the cost models predict the measurements",
        description="Collect the (estimated, measured) pairs of every experiment output under DIR "
                    "(fig7.json, table3_runs.json, fig9.json, searched recursively) and report Pearson and "
                    "Spearman correlation, the ratio measured / estimated and the worst cases, per "
                    "experiment and overall.  paper / calibrated estimates are compared with the measured "
                    "execution time, bytes estimates with the measured bytes per second.")
    ac.add_argument("--from", dest="source", type=Path, required=True, metavar="DIR",
                    help="directory (or one JSON file) with experiment outputs")
    ac.add_argument("--out", type=Path, help="also write the report as JSON here")
    ac.add_argument("--worst", type=int, default=5, help="worst cases to keep per model (default 5)")
    ac.set_defaults(func=_cmd_accuracy)

    st = subparsers.add_parser(
        "stats", help="measure stream statistics (rate, tuple bytes, selectivity, window sizes)",
        formatter_class=_RAW,
        description="Measure, from DIR/<stream>.jsonl, what the cost model needs per stream: rate, mean "
                    "full-tuple bytes on the wire (Avro, as shipped), payload attributes, distinct values "
                    "and selectivity f = 1/distinct per join attribute (and Σp², which exceeds 1/distinct "
                    "under skew), partial-tuple bytes, and window sizes in tuples.  --write produces the "
                    "query file with the measured values filled in, ready for 'joinlib plan'.\n\n"
                    "--live: instead of DIR, take the per-value rates (--values) of a running live query "
                    "from the planner service: its nodes measure them over the last minute of event time "
                    "(docs/pmjoin.md \"Live statistics\").  Re-partition with them:\n"
                    "  joinlib stats QUERY --live --values v.json; joinlib stop NAME\n"
                    "  joinlib submit QUERY --plan pmjoin:rate:4 --values v.json")
    st.add_argument("query", type=Path,
                    help="query file (.yaml or .sql); with --live also the name of a submitted query")
    st.add_argument("--data", type=Path, help="directory with one <stream>.jsonl per stream (needed unless --live)")
    st.add_argument("--live", action="store_true",
                    help="read the per-value rates of the running query QUERY from the planner service "
                         "(with --values; nothing else is measured)")
    st.add_argument("--url", default=None,
                    help="with --live: the planner service (default $JOINLIB_PLANNER_URL or http://localhost:8080)")
    st.add_argument("--write", type=Path, metavar="QUERY_OUT.yaml",
                    help="write the query with the measured rate, attributes, tuple_bytes and selectivity")
    st.add_argument("--json", type=Path, metavar="OUT.json", help="write every measured value as JSON")
    st.add_argument("--values", type=Path, metavar="VALUES.json",
                    help="write the per-value rates (tuples/s) of the attributes a partitioned plan splits by "
                         "(PMJoin; for 'joinlib submit --plan pmjoin:rate|range --values VALUES.json')")
    st.set_defaults(func=_cmd_stats)

    ca = subparsers.add_parser(
        "calibrate", help="measure the cost constants (c_p, c_u, c_i, c_h, c_byte) on this machine",
        formatter_class=_RAW,
        description="Time micro-runs of the engine's own code and write the seconds per operation: c_i "
                    "(window insert), c_u (window update: insert + expire), c_h (hashing a probing row), "
                    "c_p (one hash probe with window bisection), c_match (per produced match), c_byte "
                    "(Avro encode + decode per byte).  The JSON is what the calibrated cost model reads: "
                    "get_model('calibrated', path=FILE) or --model calibrated --calibration FILE.")
    ca.add_argument("--out", type=Path, required=True, metavar="FILE.json", help="calibration file to write")
    ca.add_argument("--repeat", type=int, default=5, help="runs per timing, median taken (default 5)")
    ca.add_argument("--quick", action="store_true", help="smaller micro-runs (less precise; for tests)")
    ca.add_argument("--no-progress", action="store_true", help="no progress bar")
    ca.set_defaults(func=_cmd_calibrate)


def check_positive(value: int, flag: str) -> int:
    """``value`` of option ``flag``, which must be at least 1."""
    if value < 1:
        raise JoinlibError(f"{flag} must be at least 1, not {value}")
    return value


def choose_names(values: str, allowed: Sequence[str], flag: str) -> list[str]:
    """A comma-separated list of names, each from ``allowed`` (option ``flag``), without repeats."""
    out = [v.strip() for v in str(values).split(",") if v.strip()]
    bad = [v for v in out if v not in allowed]
    if bad or not out:
        raise JoinlibError(f"{flag}: unknown {', '.join(map(repr, bad)) or 'empty list'} "
                           f"(choose from {', '.join(allowed)})")
    return list(dict.fromkeys(out))


def _help(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def _progress(args: argparse.Namespace) -> bool:
    return not args.no_progress and sys.stderr.isatty()


def _common(args: argparse.Namespace, quick_duration: str = "1s") -> tuple[Path, int, int, str]:
    duration = parse_duration(args.duration or (quick_duration if args.quick else "5s"))
    repeat = check_positive(args.repeat if args.repeat is not None else (1 if args.quick else 3), "--repeat")
    warmup: str = args.warmup
    if warmup != "auto":
        parse_warmup(warmup)  # validate early: one error line, not a traceback later
    if args.calibration is not None and not args.calibration.is_file():
        raise JoinlibError(f"--calibration {args.calibration}: file not found (create it with 'joinlib calibrate')")
    out = prepare_out(args.out)
    return out, duration, repeat, warmup


def _cmd_fig7(args: argparse.Namespace) -> int:
    sweeps = [c for c in args.sweeps.replace(",", "") if c.strip()]
    bad = [c for c in sweeps if c not in fig7.SWEEPS]
    if bad or not sweeps:
        raise JoinlibError(f"--sweeps {args.sweeps!r}: choose letters from {''.join(fig7.SWEEPS)}")
    out, duration, repeat, warmup = _common(args)
    fig7.main(out, duration, args.seed, args.quick, repeat, warmup, list(dict.fromkeys(sweeps)),
              args.calibration, _progress(args))
    return 0


def _cmd_table3(args: argparse.Namespace) -> int:
    queries = check_positive(args.queries if args.queries is not None else (2 if args.quick else 100), "--queries")
    topologies = choose_names(args.topologies, TOPOLOGIES, "--topologies")
    planners = choose_names(args.planners, table3.PLANNERS, "--planners")
    _check_model(args.model)
    out, duration, repeat, warmup = _common(args)
    table3.main(out, queries, args.seed, duration, repeat, args.model, args.calibration, warmup,
                topologies, planners, args.per_edge_attrs, _progress(args))
    return 0


def _cmd_fig9(args: argparse.Namespace) -> int:
    sweeps = choose_names(args.sweep, list(fig9.SWEEPS), "--sweep")
    topologies = choose_names(args.topologies, TOPOLOGIES, "--topologies")
    _check_model(args.model)
    out, duration, repeat, warmup = _common(args)
    fig9.main(out, duration, args.seed, args.quick, repeat, sweeps, topologies, args.model, args.calibration,
              warmup, _progress(args))
    return 0


def _check_model(name: str) -> None:
    if name not in MODELS:
        raise JoinlibError(f"--model {name!r}: unknown cost model (choose from {', '.join(MODELS)})")


def _cmd_accuracy(args: argparse.Namespace) -> int:
    check_positive(args.worst, "--worst")
    if args.out is not None and args.out.parent and not args.out.parent.exists():
        raise JoinlibError(f"cannot write {args.out}: directory {args.out.parent} does not exist")
    report(args.source, args.out, args.worst)
    return 0


def _cmd_stats(args: argparse.Namespace) -> int:
    if args.live:
        return _live_values(args)
    if args.data is None:
        raise JoinlibError("joinlib stats: --data DIR is required (or --live for a running query's per-value rates)")
    stats_main(args.query, args.data, args.write, args.json)
    if args.values is not None:
        _write_values(args.query, args.data, args.values)
    return 0


def _write_values(query_path: Path, data: Path, out: Path) -> None:
    query = load_query_file(query_path)
    stats = value_stats(query, load_streams(query, data))
    out.write_text(json.dumps(stats) + "\n")
    by = ", ".join(f"{s}.{a}" for s, a in stats["by"])
    print(f"wrote the rates of {len(stats['values'])} values of {by} to {out}")


def _live_values(args: argparse.Namespace) -> int:
    """``joinlib stats QUERY --live --values FILE``: the live monitor's per-value rates of a running query."""
    if args.values is None or args.data is not None or args.write is not None or args.json is not None:
        raise JoinlibError("joinlib stats --live takes --values FILE (and --url), not --data, --write or --json")
    name = load_query_file(args.query).name if args.query.suffix in (".yaml", ".yml", ".sql") else str(args.query)
    url = (args.url or planner_url()).rstrip("/")
    stats = http_json(f"{url}/queries/{quote(name)}/values")
    args.values.write_text(json.dumps(stats) + "\n")
    by = ", ".join(f"{s}.{a}" for s, a in stats["by"])
    print(f"wrote the live rates of {len(stats['values'])} values of {by} (query {name}) to {args.values}")
    return 0


def _cmd_calibrate(args: argparse.Namespace) -> int:
    check_positive(args.repeat, "--repeat")
    calibrate_main(args.out, args.quick, args.repeat, _progress(args))
    return 0


def parser() -> argparse.ArgumentParser:
    """A parser with only these commands (``python -m joinlib.experiments``, tests)."""
    p = argparse.ArgumentParser(prog="joinlib", description="joinlib experiments, stats and calibration")
    add_commands(p.add_subparsers(title="commands", metavar="COMMAND"))
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m joinlib.experiments ...``: these commands without the rest of the CLI, with its
    error handling (``joinlib/cli/main.py`` registers them with :func:`add_commands`)."""
    return command.run(parser(), argv)
