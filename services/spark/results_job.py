"""Spark Structured Streaming job on the output topics: result counts and latency per window.

    python -m services.spark.results_job [--query NAME|Q.yaml] [--bootstrap HOST:PORT]
        [--out DIR | --console] [--window 1s] [--once] [--t0-ms MS] [--rate-scale X]

Reads ``out.<query>`` (every ``out.*`` topic without ``--query``) from the earliest offset,
decodes the ``joinlib.ResultBatch`` values (Avro, in the JVM, one row per result) and keeps, per query, head stream and
event-time window of ``head_ts`` (tumbling, ``--window``):

With ``--rows --query Q.sql`` (a query file with a SELECT list and a sink ``topic``) it reads the query's result
rows from that topic instead (JSON, or Avro in the Confluent wire format, decoded with the rows' schema derived
from the query: docs/sql.md): ``head`` is ``rows``, ``head_ts`` a row's ``ts``, ``emit_ms`` its Kafka timestamp.

    results, latency_mean_ms, latency_p50_ms, latency_p95_ms, latency_max_ms

where latency = ``emit_ms - (t0 + head_ts / rate_scale)``: with the defaults (t0 = 0, scale 1)
``emit_ms - head_ts``, the end-to-end latency when tuple timestamps are wall-clock ms.  Replayed
data has event time starting at 0: pass the replay's start (``ReplayInfo.t0_ms``) and rate scale.
p50/p95 are ``percentile_approx`` (accuracy 10000: exact up to 10000 results per window).

Output (``outputMode=update``: each micro-batch emits the windows it changed, with their totals
so far):

* ``--out DIR`` (default ``$SPARK_OUTPUT_DIR``): appended to Parquet ``DIR/windows/query=<q>/``
  with ``batch_id`` and ``updated_ms``; the current value of a window is its row with the highest
  ``batch_id`` (:func:`read_window_stats`).  Checkpoint: ``DIR/_checkpoints/<query|topic|all>`` (a
  restart continues where it stopped; ``--checkpoint`` moves it).
* ``--console``: printed.

``--once`` processes what the topic holds and exits (trigger ``availableNow``); otherwise the job
runs until SIGTERM/SIGINT and serves Prometheus ``/metrics`` on ``$METRICS_PORT`` (default 9100,
0 = off; the process/Python collectors: the deployment's liveness signal).  No watermark by
default: every result counts, however late, and the state keeps every window (a few hundred bytes
each); ``--watermark 10min`` bounds the state for long runs but ignores results whose ``head_ts`` is
older than that behind the newest seen.

Exit status: 0 done, 1 the streaming query failed, 2 bad arguments or Spark cannot start.
"""
from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence

from joinlib.errors import JoinlibError
from services.spark.common import (
    SparkSetupError,
    bootstrap_servers,
    build_session,
    check_spark_setup,
    decode_results,
    decode_rows,
    env,
    error_line,
    info_line,
    kafka_source,
    missing_topics,
    parse_window_ms,
    spark_error_message,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming.query import StreamingQuery
    from pyspark.sql.streaming.readwriter import DataStreamWriter

PREFIX = "spark-results"
OUT_PATTERN = r"out\..+"
PERCENTILE_ACCURACY = 10000
STAT_COLUMNS = ("results", "latency_mean_ms", "latency_p50_ms", "latency_p95_ms", "latency_max_ms")
KEY_COLUMNS = ("query", "head", "window_start_ms")


def query_name(spec: Optional[str]) -> Optional[str]:
    """``--query``: a query name, or a query file whose name is taken."""
    if not spec:
        return None
    p = Path(spec)
    if p.suffix in (".yaml", ".yml", ".sql") or p.is_file():
        from joinlib.sql import load_query_file

        return load_query_file(p).name
    return spec


def window_stats(results, window_ms: int, *, t0_ms: float = 0.0, rate_scale: float = 1.0,
                 watermark_ms: Optional[int] = None):
    """Decoded results (:func:`~services.spark.common.decode_results`, streaming or batch) ->
    one row per (query, head, window of head_ts) with the count and latency statistics."""
    from pyspark.sql import functions as F

    df = results.where(~F.col("malformed"))
    df = df.withColumn("event_time", F.timestamp_millis(F.col("head_ts")))
    df = df.withColumn("latency_ms", F.col("emit_ms").cast("double")
                       - (F.lit(float(t0_ms)) + F.col("head_ts").cast("double") / F.lit(float(rate_scale))))
    if watermark_ms is not None:
        df = df.withWatermark("event_time", f"{watermark_ms} milliseconds")
    lat = F.col("latency_ms")
    agg = df.groupBy("query", "head", F.window("event_time", f"{window_ms} milliseconds").alias("w")).agg(
        F.count(F.lit(1)).alias("results"),
        F.mean(lat).alias("latency_mean_ms"),
        F.percentile_approx(lat, 0.5, PERCENTILE_ACCURACY).alias("latency_p50_ms"),
        F.percentile_approx(lat, 0.95, PERCENTILE_ACCURACY).alias("latency_p95_ms"),
        F.max(lat).alias("latency_max_ms"),
    )
    return agg.select(
        "query", "head",
        F.unix_millis(F.col("w.start")).alias("window_start_ms"),
        F.unix_millis(F.col("w.end")).alias("window_end_ms"),
        F.col("w.start").alias("window_start"),
        *STAT_COLUMNS,
    )


def read_window_stats(out_dir, query: Optional[str] = None):
    """The current statistics under ``out_dir`` (a ``--out`` directory) as a pandas DataFrame: the
    latest row of each (query, head, window), sorted; no Spark needed (pyarrow)."""
    import pandas as pd
    import pyarrow.dataset as ds

    path = Path(out_dir) / "windows"
    if not path.is_dir() or not any(path.rglob("*.parquet")):
        return pd.DataFrame(columns=[*KEY_COLUMNS, "window_end_ms", *STAT_COLUMNS, "batch_id"])
    df = ds.dataset(str(path), format="parquet", partitioning="hive").to_table().to_pandas()
    df["query"] = df["query"].astype(str)
    if query is not None:
        df = df[df["query"] == query]
    df = df.sort_values("batch_id").drop_duplicates(list(KEY_COLUMNS), keep="last")
    df = df[["query", *[c for c in df.columns if c != "query"]]]
    return df.sort_values(list(KEY_COLUMNS)).reset_index(drop=True)


def _parquet_writer(windows_dir: Path):
    def write(batch_df, batch_id: int) -> None:
        from pyspark.sql import functions as F

        (batch_df.withColumn("batch_id", F.lit(batch_id).cast("long"))
                 .withColumn("updated_ms", F.lit(int(time.time() * 1000)).cast("long"))
                 .write.mode("append").partitionBy("query").parquet(str(windows_dir)))
    return write


def _serve_metrics() -> None:
    raw = env("METRICS_PORT", "9100")
    try:
        port = int(raw)
    except ValueError:
        raise ValueError(f"METRICS_PORT={raw!r} is not a port number") from None
    if port:
        from joinlib.adapters.prometheus import serve_metrics
        from joinlib.settings import HttpSecurity

        http = HttpSecurity.from_env()   # HTTPS and a bearer token when set (docs/security.md)
        serve_metrics(port, http=http)
        info_line(PREFIX, f"metrics on {http.scheme}://:{port}/metrics")


def _wait_for_topic(bootstrap: str, topic: str, *, wait: bool, every_s: float = 5.0) -> bool:
    """True once ``topic`` exists; with ``wait`` poll until it does (a service started before the
    first run of its query), else report it and return False."""
    if not missing_topics(bootstrap, [topic]):
        return True
    if not wait:
        error_line(f"topic {topic} does not exist on {bootstrap} (has the query run yet?)")
        return False
    info_line(PREFIX, f"waiting for topic {topic} on {bootstrap}")
    while missing_topics(bootstrap, [topic]):
        time.sleep(every_s)
    return True


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m services.spark.results_job",
                                 description="Result counts and latency per head stream and window of the "
                                             "out.<query> topics (Spark Structured Streaming).")
    ap.add_argument("--query", help="query name or query .yaml (default: every out.* topic)")
    ap.add_argument("--topic", help="read this topic instead of out.<query>")
    ap.add_argument("--rows", action="store_true",
                    help="read the query's result rows from its sink topic (--query: a query file with a SELECT "
                         "list and a topic; docs/sql.md) instead of out.<query>")
    ap.add_argument("--bootstrap", help="Kafka bootstrap servers (default: $KAFKA_BOOTSTRAP_SERVERS)")
    sink = ap.add_mutually_exclusive_group()
    sink.add_argument("--out", help="Parquet output directory (default: $SPARK_OUTPUT_DIR; else --console)")
    sink.add_argument("--console", action="store_true", help="print the window statistics instead")
    ap.add_argument("--window", default="1s", help="event-time window of head_ts, e.g. 1s, 500ms (default 1s)")
    ap.add_argument("--once", action="store_true", help="process what the topic holds, then exit (availableNow)")
    ap.add_argument("--t0-ms", type=float, default=0.0,
                    help="wall-clock ms of event time 0 (replays; latency = emit_ms - (t0 + head_ts/scale))")
    ap.add_argument("--rate-scale", type=float, default=1.0, help="replay speed-up X (default 1)")
    ap.add_argument("--watermark", help="drop results this far behind the newest head_ts, bounding state "
                                        "(default: none, keep every window)")
    ap.add_argument("--checkpoint", help="checkpoint directory (default: OUT/_checkpoints/<query|all>)")
    ap.add_argument("--trigger", default="2s", help="micro-batch interval when not --once (default 2s)")
    ap.add_argument("--master", help="Spark master (default: $SPARK_MASTER or local[2])")
    return ap.parse_args(argv)


@dataclass(frozen=True)
class _Options:
    """The checked command line."""

    bootstrap: str
    window_ms: int
    trigger_ms: int
    watermark_ms: Optional[int]
    name: Optional[str]  # the query, or None: every out.<query> topic
    rows: Optional[tuple[str, str, Optional[str]]] = None   # --rows: (sink topic, format, Avro schema JSON)


def _options(args: argparse.Namespace) -> _Options:
    """ValueError or QueryError for a bad option."""
    bootstrap = bootstrap_servers(args.bootstrap)
    window_ms = parse_window_ms(args.window)
    trigger_ms = parse_window_ms(args.trigger)
    watermark_ms = parse_window_ms(args.watermark) if args.watermark else None
    if args.rate_scale <= 0:
        raise ValueError(f"--rate-scale must be positive, not {args.rate_scale}")
    rows = _rows_source(args.query) if args.rows else None
    return _Options(bootstrap, window_ms, trigger_ms, watermark_ms, query_name(args.query), rows)


def _rows_source(spec: Optional[str]) -> tuple[str, str, Optional[str]]:
    """``--rows``: the sink topic, format and (Avro) rows' schema of the query file ``spec``."""
    import json

    from joinlib.rows_avro import row_schema
    from joinlib.sql import load_query_file

    if not spec or not Path(spec).is_file():
        raise ValueError("--rows needs --query QUERY_FILE (.sql or .yaml): the rows' topic and format are the query's")
    q = load_query_file(Path(spec))
    topic = q.output.sink_topic
    if topic is None:
        raise ValueError(f"{spec}: the query writes no rows to a topic (it needs a SELECT list and WITH (topic = ...))")
    schema = json.dumps(row_schema(q)) if q.output.format == "avro" else None
    return topic, q.output.format, schema


def _writer(stats: DataFrame, args: argparse.Namespace, opts: _Options, out: Optional[str],
            topic: Optional[str]) -> DataStreamWriter:
    """The streaming write of the window statistics: console or Parquet, once or every --trigger."""
    name = opts.name
    w = stats.writeStream.outputMode("update").queryName(f"joinlib_results_{name or 'all'}".replace("-", "_"))
    if out is None:
        w = w.format("console").option("truncate", "false").option("numRows", 1000)
        if args.checkpoint:
            w = w.option("checkpointLocation", args.checkpoint)
    else:
        out_dir = Path(out)
        checkpoint = (Path(args.checkpoint) if args.checkpoint
                      else out_dir / "_checkpoints" / ((name or topic or "all") + (".rows" if opts.rows else "")))
        w = w.foreachBatch(_parquet_writer(out_dir / "windows")).option("checkpointLocation", str(checkpoint))
    return w.trigger(availableNow=True) if args.once else w.trigger(processingTime=f"{opts.trigger_ms} milliseconds")


def _run(q: StreamingQuery, once: bool) -> None:
    """Until the query has read everything (``once``), or until SIGTERM / SIGINT."""
    if once:
        q.awaitTermination()
        return
    # the handler only sets a flag: calling into the JVM from it would re-enter py4j
    stopping = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        info_line(PREFIX, f"signal {signum}: stopping")
        stopping.set()
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    while q.isActive and not stopping.is_set():
        q.awaitTermination(2)
    if q.isActive:
        q.stop()


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    try:
        opts = _options(args)
    except Exception as e:  # ValueError, QueryError
        error_line(str(e))
        return 2
    name, bootstrap = opts.name, opts.bootstrap
    out = None if args.console else (args.out or env("SPARK_OUTPUT_DIR"))
    topic = opts.rows[0] if opts.rows else args.topic or (f"out.{name}" if name else None)
    what = topic or f"every topic matching {OUT_PATTERN}"

    try:
        check_spark_setup()  # before anything else: the installation hint beats a Kafka error
        if not args.once:
            _serve_metrics()
        if topic is not None and not _wait_for_topic(bootstrap, topic, wait=not args.once):
            return 2
        spark = build_session(f"joinlib-results-{name or 'all'}", master=args.master)
    except (SparkSetupError, JoinlibError, ValueError, OSError) as e:  # KafkaUnavailable is a JoinlibError
        error_line(str(e))
        return 2

    try:
        raw = kafka_source(spark, bootstrap, topics=[topic] if topic else None,
                           pattern=None if topic else OUT_PATTERN, streaming=True)
        results = decode_rows(raw, name, opts.rows[1], opts.rows[2]) if opts.rows and name else decode_results(raw)
        stats = window_stats(results, opts.window_ms, t0_ms=args.t0_ms, rate_scale=args.rate_scale,
                             watermark_ms=opts.watermark_ms)
        w = _writer(stats, args, opts, out, topic)
        t0 = time.monotonic()
        q = w.start()
        info_line(PREFIX, f"reading {what} from {bootstrap}; {opts.window_ms} ms windows -> "
                          f"{out + '/windows' if out else 'console'}")
        _run(q, args.once)
        err = q.exception()
        if err is not None:
            error_line(f"streaming query failed: {spark_error_message(err)}")
            return 1
        rows = sum(p.get("numInputRows", 0) for p in q.recentProgress)
        info_line(PREFIX, f"stopped after {time.monotonic() - t0:.1f}s ({rows} results in the last batches)")
        return 0
    except Exception as e:
        error_line(f"results job failed: {spark_error_message(e)}")
        return 1
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
