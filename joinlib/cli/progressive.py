"""``joinlib progressive LEFT RIGHT ...`` and ``joinlib experiment rpj``.

Registered by :func:`add_command` (``joinlib/cli/main.py``) and :func:`add_experiment`
(``joinlib/cli/experiments.py``).  Redis and Kafka adapters are imported only when a
``redis://`` spill, a ``kafka:TOPIC`` input or ``--cluster`` asks for them.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
import uuid
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import IO, Any, Callable, Optional

import orjson
from tqdm import tqdm

from joinlib.errors import ClusterError, JoinlibError
from joinlib.experiments import progressive as experiment
from joinlib.progressive.hmj import POLICIES
from joinlib.progressive.model import Id, JoinSpec, Phase, VirtualClock
from joinlib.progressive.registry import ALGORITHMS, make_join
from joinlib.progressive.runs import FileRunStore, MemoryRunStore, PagedRunStore, RunStore, SpillError
from joinlib.progressive.sim import ArrivalNetwork, Recorder, RunStats, schedule, simulate
from joinlib.progressive.sources import JsonlFile, ParsedSource, RawSource, RowParser, Source, interleave
from joinlib.settings import redact_url

DESCRIPTION = """\
Join two finite relations arriving from remote sites, progressively, within a memory
limit: results are written as they are produced, most of them long before the inputs
end (seed 004: RPJ, Tao et al. SIGMOD 2005; XJoin and HMJ for comparison).

LEFT and RIGHT are JSONL files (relation name = file stem) or kafka:TOPIC (read to the
end offsets it has when the join starts; relation name = topic).  Each row is a JSON
object with an "id" and the join attribute --on (integers or strings).  The inputs are
replayed interleaved on a simulated network (--network); the join keeps at most --memory
tuples in memory and spills sorted runs to --spill.

Output, one JSON object per line (--out FILE, default stdout):
  {"ids": {"<left>": id, "<right>": id}, "phase": "arrival|reactive|cleanup", "t": <logical time>}
phase: arrival = found when a tuple arrived (memory x memory), reactive = found while the
inputs were stalled, cleanup = found after both inputs ended.  Every result exactly once."""

EPILOG = """\
examples:
  joinlib progressive orders.jsonl payments.jsonl --on order_id --memory 100000 --spill file:/tmp/spill
  joinlib progressive kafka:orders kafka:payments --on order_id --memory 100000 \\
      --spill redis://localhost:6379/0 --cluster localhost:9092
docs/progressive.md explains the algorithms and their settings."""


def add_command(subparsers: Any) -> None:
    """Register ``joinlib progressive`` on the main CLI's subparsers."""
    p = subparsers.add_parser("progressive", help="progressively join two finite relations within a memory limit",
                              formatter_class=argparse.RawDescriptionHelpFormatter,
                              description=DESCRIPTION, epilog=EPILOG)
    p.add_argument("left", help="JSONL file or kafka:TOPIC (relation R1)")
    p.add_argument("right", help="JSONL file or kafka:TOPIC (relation R2)")
    p.add_argument("--on", required=True, metavar="ATTR", help="join attribute (equality)")
    p.add_argument("--memory", required=True, type=int, metavar="N", help="memory limit M in tuples (both relations)")
    p.add_argument("--spill", metavar="URL",
                   help="where flushed runs go: file:DIR | redis://HOST:PORT/DB | memory: (no spill; small inputs) "
                        "(default: a temporary directory); removed at the end")
    p.add_argument("--algorithm", default="rpj", choices=list(ALGORITHMS), help="default rpj")
    p.add_argument("--flush", type=int, metavar="N", help="tuples evicted per memory overflow (default memory/10)")
    p.add_argument("--partitions", type=int, default=20, metavar="N", help="hash partitions (default 20)")
    p.add_argument("--hmj-policy", default="adaptive", choices=POLICIES, help="HMJ's flush policy (default adaptive)")
    p.add_argument("--network", default="reliable", choices=("reliable", "unreliable"),
                   help="reliable: a row every 1 ms; unreliable: Zipf gaps of 1-30 ms, stalls after 25 ms "
                        "(virtual time)")
    p.add_argument("--seed", type=int, default=1, help="seed of the interleaving and the network (default 1)")
    p.add_argument("--out", type=Path, metavar="FILE", help="results here ('-': stdout; default stdout, "
                                                            "none with --cluster)")
    p.add_argument("--cluster", nargs="?", const="", metavar="HOST:PORT",
                   help="also write the results to Kafka topic out.<name> as ResultBatch messages (default broker: "
                        "$KAFKA_BOOTSTRAP_SERVERS); the broker kafka:TOPIC inputs are read from")
    p.add_argument("--name", help="the join's name: output topic out.<name> (default <left>-<right>)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_progressive)


def add_experiment(subparsers: Any) -> None:
    """Register ``joinlib experiment rpj`` on the ``experiment`` command's subparsers."""
    e = subparsers.add_parser(
        "rpj", help="progressive joins under a memory limit: RPJ vs XJoin and HMJ (seed 004, Figs. 8-12)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Simulate RPJ, XJoin and HMJ (and RPJ-md, RPJ-dd) on the paper's harmony and reverse data at "
                    "P(R1):P(R2) = 1 and 5, on a reliable and an unreliable network, at the digest's small scale "
                    "(N = 200,000 tuples, M = 10,000).  Every run is checked to output the exact hash join with "
                    "zero duplicates.\nWrites DIR/rpj.json (summary, timelines, checks) and DIR/fig8-12 PNGs; "
                    "prints the measured shares beside what the paper reports.")
    e.add_argument("--out", type=Path, required=True, metavar="DIR", help="output directory (created)")
    e.add_argument("--quick", action="store_true", help="N = 6,000, M = 300 (seconds; for tests)")
    e.add_argument("--sweep", action="store_true", help="also the sensitivity runs (c_ran, lambda, n_flush)")
    e.add_argument("--jobs", type=int, help="parallel processes (default: CPU count)")
    e.add_argument("--c-ran", type=float, help="ms per random page I/O (default 5; c_seq = c_ran/10)")
    e.add_argument("--seed", type=int, help="seed of the data and the network (default 1)")
    e.add_argument("--no-progress", action="store_true", help="no progress bar")
    e.set_defaults(func=_cmd_experiment)


# --------------------------------------------------------------------------- joinlib experiment rpj

def _cmd_experiment(args: argparse.Namespace) -> int:
    scale = experiment.QUICK if args.quick else experiment.Scale()
    if args.c_ran is not None:
        if args.c_ran < 0:
            raise JoinlibError(f"--c-ran {args.c_ran}: must be >= 0")
        scale = replace(scale, c_ran=args.c_ran)
    if args.seed is not None:
        scale = replace(scale, seed=args.seed)
    if args.jobs is not None and args.jobs < 1:
        raise JoinlibError(f"--jobs {args.jobs}: must be >= 1")
    _prepare_dir(args.out)
    experiment.main(args.out, sweep=args.sweep, jobs=args.jobs, progress=_tty(args), scale=scale)
    return 0


def _prepare_dir(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise JoinlibError(f"--out {path}: cannot create the directory ({e.strerror or e})") from None


def _tty(args: argparse.Namespace) -> bool:
    return not args.no_progress and sys.stderr.isatty()


# --------------------------------------------------------------------------- joinlib progressive

def _cmd_progressive(args: argparse.Namespace) -> int:
    spec = _spec(args)
    parser = RowParser(args.on)
    with ExitStack() as stack:
        sources = [_source(args, spec_arg, parser, stack) for spec_arg in (args.left, args.right)]
        left, right = sources[0].name, sources[1].name
        if left == right:
            raise JoinlibError(f"both relations are named {left!r}: the output needs distinct names "
                               "(rename a file, or use another topic)")
        name = args.name or f"{left}-{right}"
        store = _store(args.spill, name, spec, stack)
        sink = _sinks(args, name, left, right, stack)
        network = ArrivalNetwork(kind=args.network, seed=args.seed)
        timed = schedule(interleave(sources, args.seed), network.gaps())
        clock = VirtualClock(spec.costs)
        recorder = Recorder(clock, forward=sink)
        join = make_join(args.algorithm, spec, store, clock, recorder, hmj_policy=args.hmj_policy)
        progress = _progress_bar(args, sources, recorder, stack)
        stats = simulate(join, timed, network, recorder, progress)
    print(_summary(args, left, right, recorder, stats), file=sys.stderr)
    return 0


def _spec(args: argparse.Namespace) -> JoinSpec:
    if args.memory < 2:
        raise JoinlibError(f"--memory {args.memory}: too small, the join needs room for at least 2 tuples "
                           "(one per relation); give the number of tuples memory may hold")
    if args.flush is not None and not 1 <= args.flush <= args.memory:
        raise JoinlibError(f"--flush {args.flush}: must be between 1 and --memory ({args.memory})")
    if args.partitions < 1:
        raise JoinlibError(f"--partitions {args.partitions}: must be >= 1")
    return JoinSpec(memory=args.memory, n_flush=args.flush, partitions=args.partitions)


def _broker(args: argparse.Namespace, why: str) -> str:
    broker = args.cluster or os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "")
    if not broker:
        raise ClusterError(f"{why} needs a Kafka broker: pass --cluster HOST:PORT or set KAFKA_BOOTSTRAP_SERVERS")
    return str(broker)


def _source(args: argparse.Namespace, arg: str, parser: RowParser, stack: ExitStack) -> Source:
    raw: RawSource
    if arg.startswith("kafka:"):
        topic = arg[len("kafka:"):]
        if not topic:
            raise JoinlibError(f"{arg!r}: expected kafka:TOPIC")
        from joinlib.adapters.progressive_kafka import TopicSource  # optional dependency: confluent_kafka
        topic_source = TopicSource(_broker(args, arg), topic)
        stack.callback(topic_source.close)
        raw = topic_source
    else:
        raw = JsonlFile(Path(arg))
    return ParsedSource(raw, parser)


def _store(url: Optional[str], name: str, spec: JoinSpec, stack: ExitStack) -> RunStore:
    """The run store a ``--spill`` URL names; whatever the join spills is removed at the end."""
    run_id = f"{_safe(name)}-{uuid.uuid4().hex[:8]}"
    page = spec.costs.page_tuples
    if url is None or url.startswith("file:"):
        if url == "file:":
            raise SpillError("--spill file:DIR: give a directory, e.g. file:/tmp/spill")
        base = Path(url[len("file:"):]) if url else Path(tempfile.gettempdir())
        root = base / f"joinlib-progressive-{run_id}"
        store: RunStore = FileRunStore(root, page)
        stack.callback(shutil.rmtree, root, True)
        return store
    if url == "memory:":
        return MemoryRunStore()
    if re.match(r"^(redis|rediss|unix)://", url):
        from joinlib.adapters.progressive_redis import open_redis_pages  # optional dependency: redis (--spill)
        store = PagedRunStore(open_redis_pages(url, f"joinlib:progressive:{run_id}"), page)
        stack.callback(store.close)
        stack.callback(store.clear)
        return store
    raise SpillError(f"--spill {redact_url(url)}: expected file:DIR, redis[s]://HOST:PORT/DB or memory:")


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)[:80]


class JsonlWriter:
    """The OUT format, one line per result, in production order."""

    def __init__(self, fh: IO[bytes], left: str, right: str) -> None:
        self.fh, self.left, self.right = fh, left, right

    def __call__(self, left: Id, right: Id, phase: Phase, t: int) -> None:
        self.fh.write(orjson.dumps({"ids": {self.left: left, self.right: right}, "phase": phase, "t": t}) + b"\n")


def _sinks(args: argparse.Namespace, name: str, left: str, right: str,
           stack: ExitStack) -> Callable[[Id, Id, Phase, int], None]:
    sinks: list[Callable[[Id, Id, Phase, int], None]] = []
    if args.out is not None and str(args.out) != "-":
        try:
            fh: IO[bytes] = stack.enter_context(open(args.out, "wb"))
        except OSError as e:
            raise JoinlibError(f"--out {args.out}: cannot write ({e.strerror or e})") from None
        sinks.append(JsonlWriter(fh, left, right))
    elif args.cluster is None or str(args.out) == "-":
        sinks.append(JsonlWriter(sys.stdout.buffer, left, right))
        stack.callback(sys.stdout.buffer.flush)
    if args.cluster is not None:
        if not re.fullmatch(r"[A-Za-z0-9._-]{1,200}", name):
            raise JoinlibError(f"--cluster: {name!r} cannot name a Kafka topic (out.<name>); pass --name with "
                               "letters, digits, '.', '_' or '-'")
        from joinlib.adapters.progressive_kafka import ResultTopicWriter  # optional dependency: confluent_kafka
        writer = ResultTopicWriter(_broker(args, "--cluster"), name, left, right)
        stack.callback(writer.close)
        sinks.append(writer)
    if len(sinks) == 1:
        return sinks[0]

    def both(a: Id, b: Id, phase: Phase, t: int) -> None:
        for s in sinks:
            s(a, b, phase, t)
    return both


def _progress_bar(args: argparse.Namespace, sources: list[Source], recorder: Recorder,
                  stack: ExitStack) -> Optional[Callable[[int], None]]:
    if not _tty(args):
        return None
    bar = stack.enter_context(tqdm(total=sum(s.count() for s in sources), unit="row", file=sys.stderr,
                                   desc="arrival"))

    def update(arrivals: int) -> None:
        bar.update(arrivals - bar.n)
        bar.set_postfix(results=recorder.results, refresh=False)
    return update


def _summary(args: argparse.Namespace, left: str, right: str, rec: Recorder, st: RunStats) -> str:
    ph = rec.by_phase
    return (f"{left} ⋈ {right} on {args.on}: {rec.results:,} results ({ph['arrival']:,} arrival, "
            f"{ph['reactive']:,} reactive, {ph['cleanup']:,} clean-up) from {st.arrivals:,} rows; "
            f"{args.algorithm}, memory {args.memory:,}, {args.network} network: {st.stalls:,} stalls, "
            f"virtual time {st.end_ms / 1000:.1f} s")
