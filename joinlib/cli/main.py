"""Command-line interface: ``joinlib <command> ...`` (also ``python -m joinlib``).

User mistakes (bad query file, missing data, bad plan) print one line starting with
``error:`` and exit with status 2; a traceback means a bug in joinlib.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import IO, Any, Optional, Protocol, Sequence, Union
from urllib.parse import urlencode

import orjson
import yaml

from joinlib import command
from joinlib.cli.adaptive import RUN_HELP as ADAPTIVE_HELP
from joinlib.cli.adaptive import AdaptiveRunner, adaptive_runner
from joinlib.cli.adaptive import add_run_options as add_adaptive_options
from joinlib.cli.experiments import add_commands
from joinlib.cli.explain import add_command as add_explain
from joinlib.cli.live import add_commands as add_live_commands
from joinlib.cli.live import http_json as _http
from joinlib.cli.live import planner_url
from joinlib.cli.plan_auto import plan_auto
from joinlib.cli.progressive import add_command as add_progressive
from joinlib.cli.run_options import faults_of, parse_instances, parse_kills, parse_switches
from joinlib.cli.sql import add_command as add_sql
from joinlib.control.run_plan import AdaptiveRun, Deployable, Generations, PartitionedRun, TreesRun
from joinlib.costs import get_model
from joinlib.costs.explain import format_estimate
from joinlib.data.files import load_streams
from joinlib.data.gen import generate
from joinlib.errors import JoinlibError
from joinlib.mjoin.derived import check_windows, deploy
from joinlib.mjoin.tree_plans import RUN_HELP as TREE_HELP
from joinlib.mjoin.tree_plans import SharedTrees, plan_partitioned_trees, plan_tree
from joinlib.model import Query, Tup
from joinlib.plan.partitioned import RUN_HELP as PARTITION_HELP
from joinlib.plan.partitioned import check_partitionable, parse_spec
from joinlib.planner import explain
from joinlib.planner.kinds import parts_of
from joinlib.planner.registry import (
    PLAN_HELP,
    PlanKind,
    needs_data,
    plan_kind,
    resolve_plan,
    resolve_run_plan,
    tree_file,
)
from joinlib.pmjoin.repartition import DEFAULT_THRESHOLD
from joinlib.protocol.messages import InstanceKey
from joinlib.query import query_to_dict
from joinlib.reference import reference_join
from joinlib.rows import RowsSink
from joinlib.runtime.deploy import Plans
from joinlib.runtime.report import Report
from joinlib.runtime.sink import CountingSink, Group, Sink
from joinlib.settings import ServiceEnv, reveal
from joinlib.sim.engine import run_embedded
from joinlib.sim.tree_engine import run_deployment
from joinlib.sql import load_query_file
from joinlib.units import parse_duration

Streams = dict[str, list[Tup]]


class Runner(Protocol):
    """Runs a plan and reports: :func:`joinlib.sim.engine.run_embedded`, or the cluster runner."""

    def __call__(self, query: Query, streams: dict[str, list[Tup]], plan: Plans, sink: Sink, *,
                 progress: bool = False) -> Report: ...

def main(argv: Optional[Sequence[str]] = None) -> int:
    return command.run(_parser(), argv)


def _parser() -> argparse.ArgumentParser:
    env = ServiceEnv.from_env()   # the environment, read once: defaults of the options
    p = argparse.ArgumentParser(
        prog="joinlib",
        description="Distributed sliding-window joins over streams born at different sites, "
                    "shipping as few bytes between sites as the plan allows.",
        epilog="Run 'joinlib COMMAND --help' for the options of a command.")
    p.set_defaults(env=env)   # what the commands read of the environment (--cluster's broker and Redis)
    sub = p.add_subparsers(title="commands", metavar="COMMAND")

    r = sub.add_parser("run", help="run a query over data files (embedded simulated network)",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Run QUERY over DIR/<stream>.jsonl with the given plan on the "
                                   "deterministic simulated network, write every result to OUT "
                                   "and print the per-link cost report.\n\n" + PLAN_HELP + "\n\n" + ADAPTIVE_HELP
                                   + "\n\n" + PARTITION_HELP + "\n\n" + TREE_HELP)
    r.add_argument("query", type=Path, help="query file (.yaml or .sql)")
    r.add_argument("--data", type=Path, required=True, help="directory with one <stream>.jsonl per stream")
    r.add_argument("--plan", default="auto", help="plan name or JSON file (see below; default auto)")
    r.add_argument("--out", type=Path, help="results, one JSON object per line: a row of the SELECT list's columns "
                   "with the members' ids and the event time (docs/sql.md), or {\"ids\": ..., \"ts\": ...} for a "
                   "query without one (omit to only count)")
    r.add_argument("--report", type=Path, help="write the cost report as JSON here")
    r.add_argument("--model", default="wire", help="cost model for planner names: wire | paper | bytes (default wire)")
    r.add_argument("--check", action="store_true",
                   help="also compute the centralized reference join and fail if results differ")
    r.add_argument("--quiet", action="store_true", help="print no report table")
    r.add_argument("--no-progress", action="store_true", help="no progress bar")
    r.add_argument("--cluster", nargs="?", const="", metavar="HOST:PORT",
                   help="run on Kafka, one node service per site (default broker: $KAFKA_BOOTSTRAP_SERVERS; "
                        "windows in Redis when $REDIS_URL is set)")
    r.add_argument("--nodes", choices=("process", "thread", "serving"), default="process",
                   help="with --cluster: start one node service per site as a process (default) or a thread of "
                        "this one, or use the node services already serving the sites (python -m services.node "
                        "--serve, e.g. docker compose up)")
    r.add_argument("--rate-scale", type=float,
                   help="with --cluster: replay X times faster than event time (default: as fast as possible)")
    r.add_argument("--switch", action="append", default=[], metavar="AT:PLAN",
                   help="switch to PLAN (anything --plan accepts) at stream time AT, e.g. 4s:SM-S1 or "
                        "700ms:central:r2: head tuples of epochs before the boundary at or after AT are "
                        "joined by the old plan, the rest by the new one; the output stays exact (repeatable)")
    r.add_argument("--kill", action="append", default=[], metavar="SITE@SECONDS",
                   help="with --cluster and $REDIS_URL: SIGKILL the node of SITE that many seconds into the "
                        "replay and start a new one, which resumes from its last checkpoint (repeatable; "
                        "a recovery drill: the output must still be exact)")
    r.add_argument("--scale-out", nargs="?", const="", metavar="SITE=N,...",
                   help="with --cluster, $REDIS_URL and --plan pmjoin...: source and node topics get a Kafka "
                        "partition per plan partition, and the node instances of a site share the site's "
                        "partitions as a consumer group; run N instances of SITE (default 1 per site); a "
                        "partition moves between instances with its windows (docs/pmjoin.md 'Scale-out')")
    r.add_argument("--join", action="append", default=[], metavar="SITE@SECONDS",
                   help="with --scale-out: start one more instance of SITE that many seconds into the replay "
                        "(the group hands it some partitions; repeatable). With --scale-out, --kill kills one "
                        "instance and the others take its partitions")
    add_adaptive_options(r)  # --plan adaptive[:cnu|:dnu] (seed 003, joinlib.adaptive)
    r.set_defaults(func=_cmd_run)

    g = sub.add_parser("gen", help="generate synthetic streams for a query (the paper's generator)",
                       description="Write DIR/<stream>.jsonl for every stream of QUERY: Poisson arrivals "
                                   "at the stream's rate, join values uniform over 1/f distinct values, "
                                   "'attributes' payload attributes of ~5 bytes. Deterministic per seed.")
    g.add_argument("query", type=Path, help="query file (.yaml or .sql)")
    g.add_argument("--out", type=Path, required=True, help="output directory")
    g.add_argument("--duration", default="10s", help="event-time span, e.g. 10s, 500ms, 2min (default 10s)")
    g.add_argument("--seed", type=int, default=1)
    g.add_argument("--bursts", action="store_true", help="sometimes emit several tuples with one timestamp")
    g.add_argument("--no-progress", action="store_true")
    g.set_defaults(func=_cmd_gen)

    pl = sub.add_parser("plan", help="compute a join plan and print it as JSON",
                        description="Print the plan chosen by a planner in the 'run --plan' JSON format.")
    pl.add_argument("query", type=Path, help="query file (.yaml or .sql)")
    pl.add_argument("--planner", default="auto",
                    help="auto | greedy | exhaustive | beam | sampled[:time] | central[:NODE] | an algorithm "
                         "(default auto: the whole plan space under the byte model; with --data, statistics "
                         "measured and the best candidates run on a sample where every window fills); "
                         "'sampled' runs every candidate plan on such a sample; 'mjoin' prints STREAMJOINOPT's "
                         "MJoin tree, which 'run --plan mjoin:FILE' runs")
    pl.add_argument("--data", type=Path, help="data directory (used by auto, needed by sampled)")
    pl.add_argument("--model", default="wire", help="cost model: wire | paper | bytes (default wire)")
    pl.add_argument("--explain", action="store_true",
                    help="also print the estimated bytes per link and kind (byte model) and the cost of each step; "
                         "for auto, the candidates it weighed (kind, estimated and, where sampled, measured bytes "
                         "per second; the chosen one marked *)")
    pl.add_argument("--out", type=Path, help="write the plan JSON here instead of stdout")
    pl.set_defaults(func=_cmd_plan)

    sm = sub.add_parser("submit", help="submit a query to the planner service (cluster mode)",
                        description="Send QUERY to the planner service, which plans it and publishes the plan "
                                    "to every node service. A query whose streams name a json or avro 'source' "
                                    "runs on those topics until 'joinlib stop'; others wait for services.source "
                                    "to replay their data.")
    sm.add_argument("query", type=Path, help="query file (.yaml or .sql)")
    sm.add_argument("--plan", "--planner", dest="planner",
                    help="any plan name of the registry, e.g. auto | greedy | central[:SITE] | an algorithm, or "
                         "adaptive[:cnu|:dnu] (re-planned while running, docs/adaptive.md), or mjoin[:TREE.json] "
                         "(an MJoin tree whose inner operators other live queries can share, docs/multiquery.md) "
                         "(default: the registry's default planner; --planner is the old spelling)")
    sm.add_argument("--no-reuse", action="store_true",
                    help="--plan mjoin: deploy the whole tree for this query, neither reusing running operators "
                         "nor offering its own to later queries")
    sm.add_argument("--scale-out", action="store_true",
                    help="with --plan pmjoin[:hash|range|rate][:D]: the plan's partitions are shared by every node "
                         "instance of a site (several 'python -m services.node --site S --serve --shared'); a "
                         "live query's records are re-keyed by partition at each site (docs/pmjoin.md "
                         "'Scale-out within a site'). Needs Redis at the nodes")
    sm.add_argument("--model", help="cost model of the planner (default: the registry's)")
    sm.add_argument("--since", help="live queries: records with an earlier event time are late: now (default, "
                                    "less 2 s), now-5min, an ISO-8601 time, or ms since the Unix epoch (0 for "
                                    "synthetic times)")
    sm.add_argument("--values", type=Path, metavar="VALUES.json",
                    help="--plan pmjoin:rate|range: the per-value rates to partition by, as 'joinlib stats QUERY "
                         "--data DIR --values VALUES.json' writes them (pmjoin:hash needs none)")
    sm.add_argument("--repartition", type=float, nargs="?", const=DEFAULT_THRESHOLD, metavar="THRESHOLD",
                    help="with --plan pmjoin:rate|range|site[:D] on live sources: whenever the running partition "
                         "function costs more than (1 + THRESHOLD) times one fitted to the per-value rates the nodes "
                         "report, move the query to that one with a replan (default 0.25; docs/pmjoin.md)")
    sm.add_argument("--sample", action="store_true",
                    help="with --plan auto on live sources: plan on a sample of the topics' newest records (up to "
                         "20,000 per stream), weighing every plan kind but MJoin trees as --data does, instead of on "
                         "the query file's statistics")
    sm.add_argument("--url", default=planner_url(env),
                    help="planner service (default $JOINLIB_PLANNER_URL or http://localhost:8080)")
    sm.set_defaults(func=_cmd_submit)

    stt = sub.add_parser("status", help="show the state of submitted queries (cluster mode)")
    stt.add_argument("name", nargs="?", help="one query (default: all)")
    stt.add_argument("--url", default=planner_url(env))
    stt.set_defaults(func=_cmd_status)

    add_commands(sub)  # experiment fig7|table3|fig9|accuracy, stats, calibrate
    add_live_commands(sub, env)  # queries, stop, results (live queries, docs/live.md)
    add_progressive(sub)  # progressive LEFT RIGHT (seed 004: RPJ, XJoin, HMJ)
    add_sql(sub)  # sql FILE --to-yaml | --from-yaml (docs/sql.md)
    add_explain(sub)  # explain QUERY: the plan as a tree, its bytes, central's and the floor (docs/sql.md)

    v = sub.add_parser("reference", help="compute the centralized reference join (small data only)",
                       description="The naive centralized join that defines the correct output; "
                                   "quadratic, for checking small data sets.")
    v.add_argument("query", type=Path, help="query file (.yaml or .sql)")
    v.add_argument("--data", type=Path, required=True)
    v.add_argument("--out", type=Path, required=True)
    v.set_defaults(func=_cmd_reference)
    return p


# ---------------------------------------------------------------------------- commands

def _cmd_run(args: argparse.Namespace) -> int:
    kind = plan_kind(args.plan)
    if kind in (PlanKind.TREE, PlanKind.PARTITIONED_TREES):  # MJoin trees, windows on intermediate streams (seed 002)
        return _run_tree(args, kind)
    return _run_plans(args, kind)


def _run_plans(args: argparse.Namespace, kind: PlanKind) -> int:
    query = load_query_file(args.query)
    progress = not args.no_progress and sys.stderr.isatty()
    switches = parse_switches(args.switch, query)
    # adaptive: the nodes re-plan and switch while running (seed 003)
    adaptive = adaptive_runner(args, query) if kind is PlanKind.ADAPTIVE else None
    streams, plan = _plans(args, query, kind, switches, adaptive, progress)
    if isinstance(plan, TreesRun):   # auto chose MJoin trees
        return _run_tree(args, PlanKind.TREE, (streams, plan))
    runner: Runner = _cluster_runner(args, query, adaptive) or adaptive or run_embedded
    if args.out:
        _writable(args.out)
        with open(args.out, "wb") as f:
            report = runner(query, streams, plan.plans, _results_sink(args, query, f, streams), progress=progress)
    else:
        report = runner(query, streams, plan.plans, CountingSink(), progress=progress)
    if args.report:
        _writable(args.report)
        args.report.write_text(json.dumps(report.to_dict(), indent=2) + "\n")
    if not args.quiet:
        print(format_report(report))
        describe = getattr(report, "describe", None)  # an adaptive run's triggers, plan changes, messages
        if describe is not None:
            print(describe())
    if args.check:
        return _check(query, streams, args.out)
    return 0


def _plans(args: argparse.Namespace, query: Query, kind: PlanKind, switches: list[tuple[int, str]],
           adaptive: Optional[AdaptiveRunner], progress: bool) -> tuple[Streams, Union[Deployable, TreesRun]]:
    """The data and the plan to run: a partitioned plan (seed 002), the adaptive run's initial plan, or the plan
    and its ``--switch`` generations; plan mistakes are found before the data is loaded where they can be
    (planners that measure the data wait for it)."""
    if kind is PlanKind.PARTITIONED:  # a plan per partition of the join values
        return _partitioned(args, query, switches, progress)
    specs = [(0, args.plan)] + switches if adaptive is None else []
    early = {at: resolve_plan(query, spec, args.model) for at, spec in specs if not needs_data(spec)}
    streams = _load(args, query)
    if adaptive is not None:
        return streams, AdaptiveRun(adaptive.config, adaptive.initial)
    if args.plan == "auto" and not switches:   # every run kind: a plan, a plan per partition or MJoin trees
        chosen = resolve_run_plan(query, "auto", args.model, streams, progress=progress)
        assert isinstance(chosen, (Generations, PartitionedRun, TreesRun))
        return streams, chosen
    return streams, Generations(tuple(
        (at, early[at] if at in early else resolve_plan(query, spec, args.model, streams, progress=progress))
        for at, spec in specs))


def _cluster_runner(args: argparse.Namespace, query: Query, adaptive: Any) -> Optional[Runner]:
    """``--cluster``'s runner (None without it); an adaptive run's configuration goes to the nodes in the plan
    message."""
    if args.cluster is None:
        if args.kill:
            raise JoinlibError("--kill needs --cluster (it kills node services)")
        if args.scale_out is not None or args.join:
            raise JoinlibError("--scale-out and --join need --cluster (node instances on Kafka)")
        return None
    from joinlib.node.cluster import cluster_runner  # heavy optional dependency: confluent_kafka (and redis)
    runner: Runner = cluster_runner(args.cluster or args.env.kafka_bootstrap, reveal(args.env.redis_url),
                                    rate_scale=args.rate_scale, faults=faults_of(args, query), mode=args.nodes,
                                    instances=parse_instances(args.scale_out, query),
                                    adaptive=adaptive.config if adaptive is not None else None)
    return runner


def _run_tree(args: argparse.Namespace, kind: PlanKind, chosen: Optional[tuple[Streams, TreesRun]] = None) -> int:
    """``--plan mjoin[:FILE.json]`` or ``pmjoin[...]:mjoin`` (or the trees ``auto`` ``chosen`` on the data):
    every MJoin of a tree an operator query, embedded or (one tree) on Kafka."""
    query = load_query_file(args.query)
    for flag, given in (("--switch", args.switch), ("--scale-out", args.scale_out is not None), ("--join", args.join),
                        ("--kill", args.kill and args.cluster is None)):
        if given:
            raise JoinlibError(f"--plan {args.plan} runs without {flag} (an MJoin tree has no generations, its "
                               "partitions are not shared by node instances, and --kill needs --cluster)")
    parse_kills(args.kill, query)   # a mistake in --kill before the data are read
    if chosen is None:
        streams, whole, inputs = _tree_programs(args, query, kind)
    else:
        streams, whole = chosen[0], chosen[1].plan
        assert not isinstance(whole, SharedTrees)   # one query's trees
        inputs = parts_of(query, whole, streams)
    programs = list(getattr(whole, "programs", [whole]))
    if args.out:
        _writable(args.out)
    f = open(args.out, "wb") if args.out else None  # noqa: SIM115 (closed below, after the run)
    try:
        sink: Sink = _results_sink(args, query, f, streams) if f is not None else CountingSink()
        report = _tree_report(args, query, whole, streams, inputs, sink)
    finally:
        if f is not None:
            f.close()
    report.query = query.name
    report.plan = whole.to_json()
    if args.report:
        _writable(args.report)
        args.report.write_text(json.dumps(report.to_dict(), indent=2) + "\n")
    if not args.quiet:
        for p in programs:
            print(f"MJoin tree{' of ' + p.base.name if len(programs) > 1 else ''}: {p.describe()}")
        print(format_report(report))
    if args.check:
        return _check(query, streams, args.out)
    return 0


def _tree_report(args: argparse.Namespace, query: Query, whole: Any, streams: dict[str, list[Tup]],
                 inputs: list[Any], sink: Sink) -> Any:
    """Run the tree (or a tree per partition, each on its ``inputs``): on the simulated network, or
    (``--cluster``: the nodes route the tuples themselves) on Kafka."""
    progress = not args.no_progress and sys.stderr.isatty()
    if args.cluster is not None:
        from joinlib.node.cluster import cluster_runner  # heavy optional dependency: confluent_kafka (and redis)
        runner = cluster_runner(args.cluster or args.env.kafka_bootstrap, reveal(args.env.redis_url),
                                rate_scale=args.rate_scale, mode=args.nodes,
                                faults=[(site, t, "kill") for site, t in parse_kills(args.kill, query)])
        return runner(query, streams, whole, sink, progress=progress)
    programs = list(getattr(whole, "programs", [whole]))
    return run_deployment(deploy(programs, share=False),
                          {p.base.name: s for p, s in zip(programs, inputs, strict=True)},
                          {p.base.name: sink for p in programs}, progress=progress)


def _tree_programs(args: argparse.Namespace, query: Query,
                   kind: PlanKind) -> tuple[dict[str, list[Tup]], Any, list[Any]]:
    """The data, the tree to run (a TreeProgram, or PartitionedTrees) and each tree's input; plan mistakes
    are found before the data is loaded where they can be."""
    check_windows(query)
    if kind is PlanKind.PARTITIONED_TREES:
        parse_spec(args.plan.removesuffix(":mjoin"))
        check_partitionable(query)
        streams = _load(args, query)
        whole, inputs = plan_partitioned_trees(query, streams, args.plan)
        return streams, whole, list(inputs)
    early = None if needs_data(args.plan) else plan_tree(query, args.plan)
    streams = _load(args, query)
    return streams, early or plan_tree(query, args.plan, streams), [streams]


def _partitioned(args: argparse.Namespace, query: Query, switches: list[tuple[int, str]],
                 progress: bool) -> tuple[dict[str, list[Tup]], Deployable]:
    """``--plan pmjoin[:hash|range|rate][:D]``: partition the join values, ``auto`` per partition."""
    parse_spec(args.plan)
    check_partitionable(query)
    if switches:
        raise JoinlibError("--plan pmjoin runs without --switch (a partitioned plan has no generations)")
    streams = _load(args, query)
    plan = resolve_run_plan(query, args.plan, args.model, streams, progress=progress)
    assert isinstance(plan, PartitionedRun)
    return streams, plan


def _load(args: argparse.Namespace, query: Query) -> dict[str, list[Tup]]:
    """The data of ``joinlib run``; when the results are rows (a query with a SELECT list, ``--out`` given) the names
    of each tuple's attributes are kept too (``args.rest_names``), which the rows decode ``rest`` with."""
    if args.out is not None and query.output.rows:
        args.rest_names = {}
        return load_streams(query, args.data, args.rest_names)
    return load_streams(query, args.data)


def _results_sink(args: argparse.Namespace, query: Query, f: IO[bytes], streams: dict[str, list[Tup]]) -> Sink:
    """``--out``'s sink: rows of the SELECT list (:mod:`joinlib.rows`), or ``{"ids", "ts"}`` without one."""
    if query.output.rows:
        return RowsSink(query, f, getattr(args, "rest_names", {}), streams)
    return JsonlSink(query, f)


def _check(query: Query, streams: dict[str, list[Tup]], out: Optional[Path]) -> int:
    if out is None:
        raise JoinlibError("--check needs --out (the results to compare)")
    want: Counter[tuple[tuple[Optional[int], ...], int]] = Counter(reference_join(query, streams))
    ids = {s.name: s.pos for s in query.streams}
    got: Counter[tuple[tuple[Optional[int], ...], int]] = Counter()
    for line in out.read_text().splitlines():
        rec = json.loads(line)
        row: list[Optional[int]] = [None] * len(ids)
        for name, i in rec["ids"].items():
            row[ids[name]] = i
        got[(tuple(row), rec["ts"])] += 1
    missing, extra = sum((want - got).values()), sum((got - want).values())
    print(f"check: {sum(want.values())} reference results; missing {missing}, extra or duplicated {extra}")
    return 0 if missing == extra == 0 else 1


def _cmd_gen(args: argparse.Namespace) -> int:
    query = load_query_file(args.query, explain=True)   # data for an EXPLAIN query too ('joinlib explain --data')
    duration = parse_duration(args.duration)
    if args.out.exists() and not args.out.is_dir():
        raise JoinlibError(f"--out {args.out} exists and is not a directory")
    try:
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise JoinlibError(f"cannot create {args.out}: {e.strerror}") from None
    counts = generate(query, args.out, duration, args.seed,
                      progress=not args.no_progress and sys.stderr.isatty(), bursts=args.bursts)
    for name, n in counts.items():
        print(f"{args.out / (name + '.jsonl')}: {n} tuples")
    return 0


def _print_or_write(obj: Any, out: Optional[Path]) -> None:
    """A plan's JSON to ``out``, or to stdout."""
    text = json.dumps(obj, indent=2)
    if out:
        _writable(out)
        out.write_text(text + "\n")
    else:
        print(text)


def _cmd_plan(args: argparse.Namespace) -> int:
    query = load_query_file(args.query, explain=True)   # a plan is what EXPLAIN asks for
    streams = None
    if args.data is not None:
        streams = load_streams(query, args.data)
    if args.planner == "mjoin":  # an MJoin tree, not a plan of join sequences
        program = plan_tree(query, "mjoin", streams)
        _print_or_write(program.to_json(), args.out)
        if args.explain:
            print(f"MJoin tree: {program.describe()}")
            for op in program.ops:
                print(f"  {op.name} at {op.node}: joins {', '.join(op.query.names)}")
        return 0
    if args.planner == "auto":   # every run kind with --data; --explain lists the candidates weighed
        return plan_auto(query, streams, args.out, args.explain, _print_or_write)
    plan = resolve_plan(query, args.planner, args.model, streams, progress=sys.stderr.isatty())
    _print_or_write(plan.to_json(), args.out)
    if args.explain:
        print(format_estimate(query, plan, streams))
        if args.model == "wire":
            return 0
        model = get_model(args.model)
        total = 0.0
        for row in explain(query, plan, model):
            total += row["cost"]
            print(f"  {row['head']:>8} step {row['step']}: {row['stream']:<8} {row['algorithm']:<6} "
                  f"est. {row['cost']:.6f} s/s  (input rate {row['rate']:.1f}/s at {row['site']})")
        print(f"  estimated plan cost: {total:.6f} s per s of stream time ({args.model} model)")
    return 0


def _submit_params(args: argparse.Namespace) -> dict[str, str]:
    """The query string of ``joinlib submit``'s POST /queries."""
    params = {k: v for k, v in (("plan", args.planner), ("model", args.model), ("since", args.since)) if v}
    if args.no_reuse:
        params["reuse"] = "0"
    if args.scale_out:
        params["scale_out"] = "1"
    if args.repartition is not None:
        params["repartition"] = repr(args.repartition)
    if args.sample:
        params["sample"] = "1"
    return params


def _cmd_submit(args: argparse.Namespace) -> int:
    query = load_query_file(args.query)  # mistakes are reported here, with the file's name; schema files inlined
    params = _submit_params(args)
    doc = query_to_dict(query)
    tree = tree_file(args.planner) if args.planner else None
    if tree is not None:  # the tree goes with the query, the planner checks it
        params["plan"] = "mjoin"
        try:
            doc["mjoin_tree"] = json.loads(Path(tree).read_text())
        except (OSError, ValueError) as e:
            raise JoinlibError(f"--plan mjoin:{tree}: not a readable JSON file ({e})") from None
    url = f"{args.url.rstrip('/')}/queries?{urlencode(params)}"
    if args.values is not None:  # per-value rates for a partitioned plan, sent with the query
        try:
            doc["partition_values"] = json.loads(args.values.read_text())
        except (OSError, ValueError) as e:
            raise JoinlibError(f"--values {args.values}: not a readable JSON file ({e})") from None
    out = _http(url, yaml.safe_dump(doc, sort_keys=False).encode())
    print(f"query {out['query']} planned, run {out['run']}:")
    print(json.dumps(out["plan"], indent=2))
    for key, what in (("reused", "reuses the running operator"), ("deployed", "deployed the operator")):
        for op in out.get(key) or []:
            print(f"{what} {op}")
    if "origin_ms" in out:
        print(f"live: reading its sources until 'joinlib stop {out['query']}'; event times from "
              f"{out['origin_ms']} ms on; results: 'joinlib results {out['query']} --follow'")
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    url = f"{args.url.rstrip('/')}/queries" + (f"/{args.name}" if args.name else "")
    print(json.dumps(_http(url), indent=2))
    return 0


def _cmd_reference(args: argparse.Namespace) -> int:
    query = load_query_file(args.query)
    streams = load_streams(query, args.data)
    _writable(args.out)
    names = query.names
    with open(args.out, "w") as f:
        for (ids, ts), n in sorted(reference_join(query, streams).items()):
            for _ in range(n):
                f.write(json.dumps({"ids": dict(zip(names, ids, strict=True)), "ts": ts}) + "\n")
    return 0


# ---------------------------------------------------------------------------- helpers

def _writable(path: Path) -> None:
    if path.parent and not path.parent.exists():
        raise JoinlibError(f"cannot write {path}: directory {path.parent} does not exist")
    if path.is_dir():
        raise JoinlibError(f"cannot write {path}: it is a directory")


class JsonlSink(Sink):
    """Streams results to an open binary file, one JSON object per line."""

    def __init__(self, query: Query, f: IO[bytes]) -> None:
        self._dumps = orjson.dumps
        self.names = query.names
        self.f = f
        self.count = 0
        self.latency_sum = 0.0

    def emit(self, inst: InstanceKey, head_pos: int, pos: int, groups: list[Group], now: float) -> None:
        names, dumps = self.names, self._dumps
        lines: list[bytes] = []
        for row, tups in groups:
            head_ts = row[head_pos].ts
            ids = {names[i]: t.id for i, t in enumerate(row) if t is not None}
            key = names[pos]
            for t in tups:
                ids[key] = t.id
                lines.append(dumps({"ids": ids, "ts": head_ts}))
            self.count += len(tups)
            self.latency_sum += len(tups) * (now - head_ts)
        if lines:
            self.f.write(b"\n".join(lines) + b"\n")


def format_report(report: Report) -> str:
    """The per-link cost table a user reads after a run."""
    lines = [f"query {report.query}: {report.results} results from {report.input_tuples} input tuples "
             f"({report.duration_ms / 1000:.1f} s of stream time)",
             f"{'link':<24}{'kind':<9}{'messages':>10}{'bytes':>14}{'transfer s':>12}"]
    for link in report.links:
        lines.append(f"{link['src'] + ' -> ' + link['dst']:<24}{link['kind']:<9}{link['messages']:>10}"
                     f"{link['bytes']:>14,}{link['transfer_ms'] / 1000:>12.3f}")
    lines.append(f"{'total':<33}{report.messages:>10}{report.bytes:>14,}{report.transmission_ms / 1000:>12.3f}")
    lines.append(f"processing {report.processing_total_s:.3f} s; execution time (processing + transmission) "
                 f"{report.execution_s_per_s:.3f} s per s of stream time; late messages {report.late_messages}")
    if report.mean_latency_ms is not None:
        p = (f", p50 {report.p50_latency_ms:.1f} ms, p99 {report.p99_latency_ms:.1f} ms"
             if getattr(report, "p99_latency_ms", None) is not None else "")
        lines.append(f"result latency: mean {report.mean_latency_ms:.1f} ms{p} (simulated); wall {report.wall_s:.2f} s")
    for sw in getattr(report, "switches", None) or []:
        until = "the end" if sw["to_epoch"] is None else f"epoch {sw['to_epoch']}"
        lines.append(f"generation {sw['generation']}: head epochs {sw['from_epoch']} to {until}")
    return "\n".join(lines)
