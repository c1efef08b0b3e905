"""``python -m services.source --query Q.yaml --data DIR [--fast | --rate-scale X] [--run ID]``

Replays every stream of the query into ``src.<query>.<stream>`` (one SourceBatch per batch
interval, event time preserved; real time by default, X times faster with --rate-scale,
unpaced with --fast), then publishes ``end {"last_epoch": E, "run": R}`` on ``status``.  If that plan is
scaled out (``joinlib run ... --scale-out``), partition p of each source topic gets plan partition p's tuples.
Env: ``KAFKA_BOOTSTRAP_SERVERS``.  The run id R defaults to the latest plan of the query on ``control``
(read again when the replay is over if there was none at its start: an ``end`` applies only to the run
it names).
"""
from __future__ import annotations

import argparse
import sys
import uuid
from pathlib import Path
from typing import Optional

from joinlib.adapters.kafka import (
    Producing,
    check_reachable,
    ensure_partitions,
    ensure_topics,
    make_admin,
    make_consumer,
    make_producer,
    query_topics,
    source_topic,
)
from joinlib.control.messages import EndMessage
from joinlib.data.files import load_streams
from joinlib.errors import JoinlibError
from joinlib.node.control import ControlLog, ControlRecord, publish, read_control_to_end
from joinlib.node.replay import replay
from joinlib.plan.partitioned import Partitioned
from joinlib.settings import ServiceEnv
from joinlib.sql import load_query_file
from services.common import error_line, info_line


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m services.source",
                                 description="Replay stream files into Kafka (docs/contracts.md).")
    ap.add_argument("--query", type=Path, required=True, help="query file (.yaml or .sql)")
    ap.add_argument("--data", type=Path, required=True, help="directory with one <stream>.jsonl per stream")
    pace = ap.add_mutually_exclusive_group()
    pace.add_argument("--fast", action="store_true", help="send as fast as possible")
    pace.add_argument("--rate-scale", type=float, default=1.0,
                      help="replay X times faster than event time (default 1: real time)")
    ap.add_argument("--run", help="run id for the end message (default: that of the latest plan of the query)")
    ap.add_argument("--no-end", action="store_true", help="do not publish the end message")
    ap.add_argument("--bootstrap", default=ServiceEnv.from_env().kafka_bootstrap)
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    if not args.bootstrap:
        error_line("no Kafka: set KAFKA_BOOTSTRAP_SERVERS (host:port) or pass --bootstrap")
        return 2
    if not args.fast and args.rate_scale <= 0:
        error_line("--rate-scale must be positive")
        return 2
    try:
        return _run(args)
    except JoinlibError as e:
        error_line(f"source: {e}")
        return 2
    except KeyboardInterrupt:
        return 130


def _run(args) -> int:
    query = load_query_file(args.query)
    streams = load_streams(query, args.data)
    check_reachable(args.bootstrap)
    ensure_topics(make_admin(args.bootstrap), query_topics(query))
    rec = _latest_plan(args.bootstrap, query.name, args.run)
    plan = rec.plan if rec is not None else None
    run = args.run or (plan.run if plan is not None else None)
    if rec is None and args.run is None:
        info_line("source", f"no plan of query {query.name} on 'control' yet: nodes started later read "
                            f"the source topics from the beginning")
    split = None
    if plan is not None and plan.scale_out:  # a partition of each source topic per plan partition (scale_out)
        split = Partitioned.from_json(query, plan.plan)
        ensure_partitions(make_admin(args.bootstrap), [source_topic(query, s.name) for s in query.streams],
                          split.function.d)
        info_line("source", f"the plan of run {run} is scaled out: each stream split into "
                            f"{split.function.d} partitions")
    out = Producing(make_producer(args.bootstrap))
    info = replay(out, query, streams, rate_scale=None if args.fast else args.rate_scale, run=run,
                  progress=not args.no_progress and sys.stderr.isatty(), end=not args.no_end and run is not None,
                  split=split)
    if run is None and not args.no_end:   # the plan published meanwhile, if any, is the run this end is for
        run = _latest_run(args.bootstrap, query.name)
        publish(out, query.name, EndMessage(info.last_epoch, run))
        if run is None:
            info_line("source", f"still no plan of query {query.name} on 'control': the end names no run, "
                                "so it ends only plans without a run id")
    info_line("source", f"{query.name}: {info.tuples} tuples in {info.messages} batches ({info.bytes:,} bytes) "
                        f"in {info.wall_s:.2f}s; last epoch {info.last_epoch}"
                        + (f"; worst lag behind schedule {info.behind_ms:.0f} ms" if info.rate_scale else ""))
    return 0


def _latest_plan(bootstrap: str, query: str, run: Optional[str] = None) -> Optional[ControlRecord]:
    """The latest plan of ``query`` (of run ``run``, if given) on ``control``."""
    consumer = make_consumer(bootstrap, f"joinlib-source-{uuid.uuid4().hex[:8]}")
    try:
        ctl = read_control_to_end(consumer, ControlLog())
    finally:
        consumer.close()
    return ctl.latest_plan(lambda r: r.query == query and (run is None or r.run == run))


def _latest_run(bootstrap: str, query: str) -> Optional[str]:
    rec = _latest_plan(bootstrap, query)
    return None if rec is None else rec.run


if __name__ == "__main__":
    sys.exit(main())
