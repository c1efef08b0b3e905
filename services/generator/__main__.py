"""``python -m services.generator --query Q.yaml [--rate 100] [--partitions 3] [--duration S] ...``

Writes synthetic router events (joinlib.ingest.events) to the source topic of every stream of the
query with a json source, at a steady rate per stream: JSON objects with the source's id and
event-time fields (event time = the wall clock, minus a random delay below --disorder), the join
attributes and a payload; a few late (--late-every) and malformed (--malformed-every) records.
Creates missing source topics with --partitions partitions.  Runs until Ctrl-C / SIGTERM or
--duration.  Env: KAFKA_BOOTSTRAP_SERVERS.
"""
from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from joinlib.adapters.kafka import check_reachable
from joinlib.adapters.live_gen import LiveGenerator, ensure_source_topics
from joinlib.errors import JoinlibError
from joinlib.ingest.events import EventProfile
from joinlib.settings import ServiceEnv
from joinlib.sql import load_query_file
from services.common import error_line, info_line


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m services.generator",
                                 description="Write synthetic JSON events to a query's source topics.")
    ap.add_argument("--query", type=Path, required=True, help="query file (.yaml or .sql) with json sources")
    ap.add_argument("--rate", type=float, default=200.0, help="events per second per stream (default 200)")
    ap.add_argument("--partitions", type=int, default=3, help="partitions of a source topic it creates (default 3)")
    ap.add_argument("--distinct", type=int, default=2000, help="distinct join values (default 2000)")
    ap.add_argument("--payload-bytes", type=int, default=1000, help="size of each event's payload (default 1000)")
    ap.add_argument("--disorder", type=int, default=60, metavar="MS",
                    help="events arrive out of order by up to this much (default 60 ms, below max_delay)")
    ap.add_argument("--late-every", type=int, default=500, metavar="N",
                    help="every N-th event is 2 s old when written (late); 0: none (default 500)")
    ap.add_argument("--malformed-every", type=int, default=700, metavar="N",
                    help="every N-th record is malformed; 0: none (default 700)")
    ap.add_argument("--streams", help="comma-separated streams to write (default: every json source)")
    ap.add_argument("--duration", type=float, help="seconds to run (default: until stopped)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--bootstrap", default=ServiceEnv.from_env().kafka_bootstrap)
    args = ap.parse_args(argv)
    if not args.bootstrap:
        error_line("no Kafka: set KAFKA_BOOTSTRAP_SERVERS (host:port) or pass --bootstrap")
        return 2
    if args.rate <= 0 or args.partitions <= 0:
        error_line("--rate and --partitions must be positive")
        return 2
    try:
        return _run(args)
    except (JoinlibError, ValueError) as e:
        error_line(f"generator: {e}")
        return 2
    except KeyboardInterrupt:
        return 0


def _run(args) -> int:
    query = load_query_file(args.query)
    streams = args.streams.split(",") if args.streams else None
    check_reachable(args.bootstrap)
    ensure_source_topics(args.bootstrap, query, args.partitions, streams)
    profile = EventProfile(rate=args.rate, distinct=args.distinct, payload_bytes=args.payload_bytes,
                           disorder_ms=args.disorder, late_every=args.late_every,
                           malformed_every=args.malformed_every)
    gen = LiveGenerator(args.bootstrap, query, profile, seed=args.seed, streams=streams)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    topics = ", ".join(gen.topics.values())
    info_line("generator", f"{args.rate:g} events/s per stream to {topics}; Ctrl-C to stop")
    try:
        gen.run(args.duration, stop, report=lambda msg: info_line("generator", msg))
    except KeyboardInterrupt:
        gen.flush()
    info_line("generator", f"{sum(gen.sent.values()):,} events written ({gen.sent_bytes:,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
