"""Spark batch job: audit a run's output topic against the centralized join of its sources.

    python -m services.spark.audit_job --query Q.yaml [--bootstrap HOST:PORT] [--window 1s]
        --out FILE.json [--run ID] [--out-topic TOPIC]

Batch-reads ``src.<query>.<stream>`` (every ``joinlib.SourceBatch``; with ``--run`` only messages
whose ``run`` header names it) and ``out.<query>`` (every result of the ``joinlib.ResultBatch``
messages), from the earliest to the latest offset.  The source tuples are collected to the driver and joined by
:func:`joinlib.reference.reference_join` (the contract every plan must meet; quadratic, fine for
audit-sized data); the results are decoded in the JVM (spark-avro) and counted per
(ids, head_ts, head) in Spark.  A result is identified as the reference does: its tuple ids in
query stream order and its head tuple's ts.

Reported per tumbling window of head_ts (``--window``) and in total, in ``--out`` (JSON):

* ``expected`` / ``delivered``: results of the reference join / well-formed results on the topic;
* ``missing``: expected results not delivered (counted with multiplicity);
* ``extra``: delivered results the reference join does not have;
* ``duplicated``: deliveries beyond the first of an expected result;
* ``wrong_head``: deliveries of an expected result labelled with another head stream;
* ``malformed`` / ``foreign`` (totals only): undecodable values / results of another query or with
  ids for other streams;
* ``examples`` of each, with ids by stream name.

Exit status: 0 the output equals the reference join, 1 it differs, 2 bad arguments, missing topics
or Spark cannot start.  Topics must hold one run of the query (``out.<query>`` has no run
header; use fresh topics or ``--out-topic`` for a copy).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

from joinlib.model import Query, Tup
from joinlib.protocol import records

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

from services.spark.common import (
    SparkSetupError,
    bootstrap_servers,
    build_session,
    check_spark_setup,
    decode_results,
    error_line,
    info_line,
    kafka_source,
    missing_topics,
    parse_window_ms,
    spark_error_message,
)

PREFIX = "spark-audit"
EXAMPLES = 10
COUNTS = ("expected", "delivered", "missing", "extra", "duplicated", "wrong_head")


def src_topics(query: Query) -> dict[str, str]:
    from joinlib.adapters.kafka import src_topic

    return {src_topic(query.name, s.name): s.name for s in query.streams}


def load_sources(spark: SparkSession, bootstrap: str, query: Query,
                 run: Optional[str] = None) -> tuple[dict[str, list[Tup]], dict[str, Any]]:
    """Every tuple of the source topics, by stream name (each id once), and what was read."""
    topics = src_topics(query)
    rows = (kafka_source(spark, bootstrap, topics=list(topics), include_headers=run is not None)
            .select("topic", "value", *(["headers"] if run is not None else [])).collect())
    streams: dict[str, dict[int, Tup]] = {s.name: {} for s in query.streams}
    info = {"messages": 0, "other_runs": 0, "malformed": 0, "duplicate_ids": 0, "bad_tuples": 0}
    want = run.encode() if run is not None else None
    for row in rows:
        if want is not None:
            run_hdr = next((h["value"] for h in (row["headers"] or []) if h["key"] == "run"), None)
            if run_hdr is None or bytes(run_hdr) != want:
                info["other_runs"] += 1
                continue
        info["messages"] += 1
        name = topics[row["topic"]]
        try:
            batch = records.decode_source_batch(bytes(row["value"]))
        except ValueError:
            info["malformed"] += 1
            continue
        if batch.stream != name:
            info["malformed"] += 1
            continue
        nattrs = len(query.stream(name).join_attrs)
        seen = streams[name]
        for t in batch.tuples:
            if len(t.key) != nattrs:
                info["bad_tuples"] += 1
            elif t.id in seen:
                info["duplicate_ids"] += 1
            else:
                seen[t.id] = t
    read = {**info, "tuples": {n: len(d) for n, d in streams.items()}}
    return {n: list(d.values()) for n, d in streams.items()}, read


def load_delivered(spark: SparkSession, bootstrap: str, query: Query, topic: str) -> tuple[Delivered, dict[str, Any]]:
    """Well-formed results as Counter{(ids by stream position, head_ts, head): deliveries}, and
    the counts of malformed and foreign messages (with examples)."""
    from pyspark.sql import functions as F

    names = list(query.names)
    res = decode_results(kafka_source(spark, bootstrap, topics=[topic]))
    ids = F.array(*[F.col("ids").getItem(n) for n in names])
    fits = ((F.col("query") == F.lit(query.name)) & (F.size("ids") == F.lit(len(names)))
            & F.forall(ids, lambda x: x.isNotNull()) & F.col("head").isin(names))
    res = res.withColumn("kind", F.when(F.col("malformed"), F.lit("malformed"))
                         .when(fits, F.lit("ok")).otherwise(F.lit("foreign"))).cache()
    rows = (res.where(F.col("kind") == "ok").groupBy(ids.alias("key"), "head_ts", "head").count().collect())
    delivered: Delivered = Counter({(tuple(r["key"]), r["head_ts"], r["head"]): r["count"] for r in rows})
    kinds = {r["kind"]: r["count"] for r in res.groupBy("kind").count().collect()}
    foreign = [{"offset": r["offset"], "query": r["query"], "head": r["head"], "head_ts": r["head_ts"],
                "ids": dict(r["ids"] or {})}
               for r in res.where(F.col("kind") == "foreign").orderBy("offset").limit(EXAMPLES).collect()]
    res.unpersist()
    return delivered, {"malformed": kinds.get("malformed", 0), "foreign": kinds.get("foreign", 0),
                       "foreign_examples": foreign}


Expected = Counter[tuple[tuple[int, ...], int]]  # (ids by stream position, head ts) -> results
Delivered = Counter[tuple[tuple[int, ...], int, str]]  # (ids, head ts, head stream) -> deliveries


def _head_finder(names: list[str], streams: dict[str, list[Tup]]) -> Callable[[tuple[int, ...]], Optional[str]]:
    """The head stream of a result by its ids: the stream of its ≺-latest tuple (None: unknown ids)."""
    by_id = [{t.id: t for t in streams.get(n, [])} for n in names]

    def head_of(ids: tuple[int, ...]) -> Optional[str]:
        best: Optional[tuple[tuple[int, int, int], int]] = None
        for k, i in enumerate(ids):
            t = by_id[k].get(i)
            if t is None:
                return None
            if best is None or (t.ts, k, t.id) > best[0]:
                best = ((t.ts, k, t.id), k)
        return names[best[1]] if best else None
    return head_of


class _Tally:
    """Counts per tumbling window of head_ts, and the first :data:`EXAMPLES` examples of each kind."""

    def __init__(self, names: list[str], window_ms: int, head_of: Callable[[tuple[int, ...]], Optional[str]]) -> None:
        self.names, self.window_ms, self.head_of = names, window_ms, head_of
        self.windows: dict[int, Counter[str]] = defaultdict(Counter)
        self.examples: dict[str, list[dict[str, Any]]] = {"missing": [], "extra": [], "duplicated": [],
                                                          "wrong_head": []}

    def example(self, kind: str, ids: tuple[int, ...], ts: int, **more: Any) -> None:
        if len(self.examples[kind]) < EXAMPLES:
            self.examples[kind].append({"ids": dict(zip(self.names, ids, strict=True)), "head_ts": ts, **more})

    def add(self, ids: tuple[int, ...], ts: int, e: int, d: int, heads: Counter[str]) -> None:
        """A result expected ``e`` times and delivered ``d`` times, under the heads ``heads``."""
        c = self.windows[(ts // self.window_ms) * self.window_ms]
        c["expected"] += e
        c["delivered"] += d
        if d < e:
            c["missing"] += e - d
            self.example("missing", ids, ts, times=e - d)
        if e == 0 and d > 0:
            c["extra"] += d
            self.example("extra", ids, ts, times=d, heads=dict(heads))
        elif d > e:
            c["duplicated"] += d - e
            self.example("duplicated", ids, ts, times=d)
        if e and d:
            want = self.head_of(ids)
            wrong = sum(n for h, n in heads.items() if h != want)
            if wrong:
                c["wrong_head"] += wrong
                self.example("wrong_head", ids, ts, expected_head=want, heads=dict(heads))

    def report(self) -> dict[str, Any]:
        rows = []
        total: Counter[str] = Counter()
        for start in sorted(self.windows):
            c = self.windows[start]
            total.update(c)
            rows.append({"window_start_ms": start, "window_end_ms": start + self.window_ms,
                         **{k: c.get(k, 0) for k in COUNTS},
                         "ok": not any(c.get(k, 0) for k in ("missing", "extra", "duplicated", "wrong_head"))})
        return {"totals": {k: total.get(k, 0) for k in COUNTS}, "windows": rows, "examples": self.examples}


def compare(query: Query, streams: dict[str, list[Tup]], expected: Expected, delivered: Delivered,
            window_ms: int) -> dict[str, Any]:
    """Per-window and total counts of the differences between the reference join ``expected``
    (Counter{(ids, head_ts)}) and ``delivered`` (Counter{(ids, head_ts, head)})."""
    names = list(query.names)
    got: Expected = Counter()
    heads: dict[tuple[tuple[int, ...], int], Counter[str]] = defaultdict(Counter)
    for (ids, ts, head), n in delivered.items():
        got[(ids, ts)] += n
        heads[(ids, ts)][head] += n
    tally = _Tally(names, window_ms, _head_finder(names, streams))
    for key in sorted(set(expected) | set(got), key=lambda k: (k[1], k[0])):
        ids, ts = key
        tally.add(ids, ts, expected.get(key, 0), got.get(key, 0), heads.get(key, Counter()))
    return tally.report()


def audit(spark, bootstrap: str, query: Query, *, window_ms: int, out_topic: Optional[str] = None,
          run: Optional[str] = None) -> dict:
    from joinlib.adapters.kafka import out_topic as default_out_topic
    from joinlib.reference import reference_join

    t0 = time.monotonic()
    topic = out_topic or default_out_topic(query.name)
    streams, sources = load_sources(spark, bootstrap, query, run)
    expected = reference_join(query, streams)
    delivered, bad = load_delivered(spark, bootstrap, query, topic)
    cmp = compare(query, streams, expected, delivered, window_ms)
    totals = cmp["totals"]
    ok = (not any(totals[k] for k in ("missing", "extra", "duplicated", "wrong_head"))
          and not bad["malformed"] and not bad["foreign"])
    return {
        "query": query.name,
        "ok": ok,
        **totals,
        "malformed": bad["malformed"],
        "foreign": bad["foreign"],
        "window_ms": window_ms,
        "topics": {"sources": sorted(src_topics(query)), "output": topic},
        "run": run,
        "sources": sources,
        "windows": cmp["windows"],
        "examples": {**cmp["examples"], "foreign": bad["foreign_examples"]},
        "wall_s": round(time.monotonic() - t0, 3),
    }


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m services.spark.audit_job",
                                 description="Compare out.<query> with the centralized join of src.<query>.* "
                                             "per window of head_ts (Spark batch job).")
    ap.add_argument("--query", required=True, help="the query file (.yaml)")
    ap.add_argument("--bootstrap", help="Kafka bootstrap servers (default: $KAFKA_BOOTSTRAP_SERVERS)")
    ap.add_argument("--window", default="1s", help="window of head_ts for the report, e.g. 1s (default 1s)")
    ap.add_argument("--out", required=True, help="report file (JSON)")
    ap.add_argument("--run", help="only source messages whose `run` header is RUN")
    ap.add_argument("--out-topic", help="audit this topic instead of out.<query>")
    ap.add_argument("--master", help="Spark master (default: $SPARK_MASTER or local[2])")
    return ap.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    from joinlib.errors import JoinlibError
    from joinlib.sql import load_query_file

    try:
        bootstrap = bootstrap_servers(args.bootstrap)
        window_ms = parse_window_ms(args.window)
        query = load_query_file(args.query)
        out = Path(args.out)
        if not out.parent.is_dir():
            raise ValueError(f"cannot write {out}: directory {out.parent} does not exist")
        check_spark_setup()  # before Kafka: the installation hint beats a Kafka error
        topics = [*src_topics(query), args.out_topic or f"out.{query.name}"]
        absent = missing_topics(bootstrap, topics)
        if absent:
            raise ValueError(f"topics not on {bootstrap}: {', '.join(absent)}")
    except (ValueError, JoinlibError, SparkSetupError) as e:  # KafkaUnavailable is a JoinlibError
        error_line(str(e))
        return 2

    try:
        spark = build_session(f"joinlib-audit-{query.name}", master=args.master)
    except SparkSetupError as e:
        error_line(str(e))
        return 2
    try:
        report = audit(spark, bootstrap, query, window_ms=window_ms, out_topic=args.out_topic, run=args.run)
    except Exception as e:
        error_line(f"audit of {query.name} failed: {spark_error_message(e)}")
        return 2
    finally:
        spark.stop()

    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    verdict = "OK" if report["ok"] else "DIFFERS"
    info_line(PREFIX, f"{query.name}: {verdict}: expected {report['expected']}, delivered {report['delivered']}, "
                      f"missing {report['missing']}, extra {report['extra']}, duplicated {report['duplicated']}, "
                      f"wrong head {report['wrong_head']}, malformed {report['malformed']}, "
                      f"foreign {report['foreign']} ({len(report['windows'])} windows) -> {out}")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
