"""joinlib next to the engine users would pick instead: Spark Structured Streaming, same query, same topics,
same machine.

The workload is bench/live_common.py's (Fig. 7 defaults at three sites, JSON events on 3-partition topics,
out of order within delta, no late or malformed records).  Spark runs the 3-way chain as two stream-stream
inner joins (PySpark 4, Kafka source, ``withWatermark`` of delta on each stream's event time, time-range join
conditions |t_i - t_j| <= window for the three pairs, which is exactly joinlib's window semantics for equal
windows: a combination is a result iff max - min <= window).  Spark allows one event-time column per input
of a join, so after the first join the result keeps S1's (``et1``) and the S2-S3 range is on the plain ms.

For each engine:

* *result count* after a bounded run over ``--backlog`` seconds of events (both must equal the reference
  join of the records);
* *sustained input events/s*: the rate it drains that backlog (joinlib: submission to last result; Spark:
  query start to ``processAllAvailable``, its JVM already up, the whole backlog in its first micro-batch);
* *p50/p99 event-to-result latency* at the rates of ``--rates`` (events/s per site; the Fig. 7 rate is 300) on
  live topics for ``--wall`` seconds: result time (joinlib: the emitting node's clock; Spark: the end of the micro-batch
  that produced it) minus the event time of the result's latest event;
* *bytes that cross sites*: joinlib, what its plan ships (and what ``central`` would, its naive counters);
  Spark, every record of the two remote streams (it reads the other sites' topics, JSON as written).

    python bench/spark_compare.py [--backlog 60] [--wall 20] [--rates 100,300] [--f 0.01] [--plan NAME] [--exact]
                                  [--bootstrap HOST:PORT] [--out bench/out] [--name spark_compare]

Needs ``make spark-deps``.  Writes bench/out/<name>.json and .png.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))

from live_bench import backlog_run, paced_run, prepare_backlog, sites_for  # noqa: E402
from live_common import (  # noqa: E402
    RATE,
    ROOT,
    WINDOW_MS,
    F,
    fig7_query,
    kafka,
    machine,
    make_topics,
    percentiles,
    read_written,
    tag,
)

DELAY_MS = 80
# the live demo's workload (examples/routers_live.yaml): 200 events/s per site, 2,000 destinations
ROUTERS = {"f": 0.0005, "rate": 200.0, "payload": 1000}


# --------------------------------------------------------------------------- the Spark job


def spark_session(partitions: int, memory: str):
    from services.spark.common import build_session
    spark = build_session("joinlib-spark-compare", shuffle_partitions=partitions,
                          conf={"spark.driver.memory": memory})
    spark.sparkContext.setLogLevel("FATAL")  # the range conditions on plain ms make the planner log noise
    spark.range(10).count()                  # the JVM and the first job are up before anything is timed
    return spark


def spark_join(spark, bootstrap: str, topics: list[str], starting: str, max_offsets: Optional[int] = None):
    """The 3-way chain as two stream-stream joins with watermarks and time-range conditions;
    ``max_offsets``: records per topic and micro-batch (None: all available)."""
    from pyspark.sql import functions as Fn
    schema = "id LONG, ts LONG, J STRING, payload STRING"

    def read(topic: str, i: int):
        reader = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
                  .option("subscribe", topic).option("startingOffsets", starting).option("failOnDataLoss", "false"))
        if max_offsets:
            reader = reader.option("maxOffsetsPerTrigger", str(max_offsets))
        raw = reader.load()
        v = raw.select(Fn.from_json(Fn.col("value").cast("string"), schema).alias("v")).select("v.*")
        return (v.select(Fn.col("id").alias(f"id{i}"), Fn.col("ts").alias(f"ts{i}"), Fn.col("J").alias(f"J{i}"),
                         Fn.col("payload").alias(f"p{i}"), Fn.timestamp_millis("ts").alias(f"et{i}"))
                .withWatermark(f"et{i}", f"{DELAY_MS} milliseconds"))

    s1, s2, s3 = (read(t, i + 1) for i, t in enumerate(topics))
    w = WINDOW_MS
    j12 = s1.join(s2, Fn.expr(f"J1 = J2 AND et2 >= et1 - interval {w} milliseconds "
                              f"AND et2 <= et1 + interval {w} milliseconds")).drop("et2")
    return j12.join(s3, Fn.expr(f"J2 = J3 AND et3 >= et1 - interval {w} milliseconds AND et3 <= et1 + interval "
                                f"{w} milliseconds AND ts3 >= ts2 - {w} AND ts3 <= ts2 + {w}"))


class SparkRun:
    """Runs the join with foreachBatch: per micro-batch its results by head event time (10 ms buckets),
    and the wall-clock time the batch was done; optionally every result's ids."""

    def __init__(self, spark, df, checkpoint: Path, with_ids: bool = False) -> None:
        from pyspark.sql import functions as Fn
        self.count, self.batches, self.lat = 0, 0, []
        self.ids: Counter = Counter()
        self.done_ms = 0.0

        def batch(bdf, bid):
            head = Fn.greatest("ts1", "ts2", "ts3")
            if with_ids:
                rows = bdf.select("id1", "id2", "id3", head.alias("h")).collect()
                end = time.time() * 1000
                self.ids.update((r[0], r[1], r[2], r[3]) for r in rows)
                groups = Counter(r[3] // 10 for r in rows).items()
            else:
                groups = [(r[0], r[1]) for r in bdf.groupBy((head / 10).cast("long")).count().collect()]
                end = time.time() * 1000
            for b, n in groups:
                self.count += n
                self.lat.append((b * 10 + 5, end, n))
            self.batches += 1
            self.done_ms = end
        self.query = df.writeStream.foreachBatch(batch).option("checkpointLocation", str(checkpoint)).start()

    def stop(self) -> None:
        self.query.stop()


# --------------------------------------------------------------------------- the phases


def spark_backlog(spark, bs: str, data: dict, workdir: Path, exact: bool, chunk_s: float) -> dict:
    """Spark over the topics joinlib drained (``prepare_backlog``): every record is on time."""
    t, q, rec, want = data["tag"], data["query"], data["rec"], data["want"]
    topics = [s.source.topic for s in q.streams]
    rate = q.streams[0].stats.rate or RATE
    n = sum(len(v) for v in rec.written.values())
    t0 = time.time() * 1000
    per_batch = int(chunk_s * rate) if chunk_s else None   # records per topic and micro-batch
    run = SparkRun(spark, spark_join(spark, bs, topics, "earliest", per_batch), workdir / f"ck-{t}", with_ids=exact)
    run.query.processAllAvailable()
    elapsed = (time.time() * 1000 - t0) / 1000
    run.stop()
    ok = run.count == want.count
    if exact:
        got = Counter({(a, b, c): k for (a, b, c, _), k in run.ids.items()})
        ok = ok and got == Counter({ids: k for (ids, _), k in want.results.items()})
    remote = _remote_bytes(rec.bytes)
    return {"events": n, "results": run.count, "reference_results": want.count,
            ("same_results" if exact else "same_count"): ok,
            "drain_s": round(elapsed, 2), "events_per_s": round(n / elapsed, 1), "micro_batches": run.batches,
            "max_offsets_per_trigger": per_batch,
            "bytes_crossing_sites": remote["bytes"], "join_site_stream": remote["stream"],
            "json_bytes": sum(rec.bytes.values())}


def _remote_bytes(per_stream: dict[str, int]) -> dict:
    """Spark at the site of the biggest stream reads the other streams across the network."""
    home = max(per_stream, key=per_stream.get)
    return {"stream": home, "bytes": sum(v for k, v in per_stream.items() if k != home)}


def spark_paced(spark, bs: str, rate: float, wall: float, f: float, workdir: Path) -> dict:
    from joinlib.ingest.contract import expected_output
    from joinlib.query import dump_query
    t = tag()
    topics = [f"fig7sp.{t}.{i}" for i in (1, 2, 3)]
    make_topics(bs, topics, 3)
    q = fig7_query(f"fig7sparkp{t}", sites_for(t), topics, f=f, rate=rate, start="latest")
    qfile = workdir / f"{q.name}.yaml"
    dump_query(q, qfile)
    run = SparkRun(spark, spark_join(spark, bs, topics, "latest"), workdir / f"ck-{t}")
    while run.query.lastProgress is None:   # the first (empty) batch pins the starting offsets
        time.sleep(0.2)
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bs, "PYTHONPATH": str(ROOT)}
    t0 = time.time() * 1000
    subprocess.run([sys.executable, "-m", "services.generator", "--query", str(qfile), "--rate", str(rate),
                    "--distinct", str(round(1 / f)), "--payload-bytes", "1250", "--late-every", "0",
                    "--malformed-every", "0", "--duration", str(wall)], cwd=ROOT, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    t_end = time.time() * 1000
    run.query.processAllAvailable()
    run.stop()
    written = read_written(bs, q)
    origin = int(t0) // 100 * 100 - 60_000  # before every event: all of them on time, as Spark sees them
    want = expected_output(q, written, origin, count_only=True)
    heads = [h for h, _, _ in run.lat]
    first, last = (min(heads), max(heads)) if heads else (t0, t_end)
    steady = [(end - h, n) for h, end, n in run.lat if first + 2000 <= h <= last - 1000]
    n = sum(len(v) for v in written.values())
    return {"rate_per_site": rate, "events": n, "offered_events_per_s": round(n / ((t_end - t0) / 1000), 1),
            "results": run.count, "reference_results": want.count, "exact_count": run.count == want.count,
            "latency_ms": percentiles(steady), "micro_batches": run.batches}


# --------------------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backlog", type=float, default=60.0, help="seconds of events per site for the bounded run")
    ap.add_argument("--wall", type=float, default=20.0, help="seconds of live input for the latency runs")
    ap.add_argument("--rates", default="100,300", help="events/s per site of the latency runs (default 100,300)")
    ap.add_argument("--f", type=float, default=F)
    ap.add_argument("--plan", help="joinlib's plan (default: the planner's default)")
    ap.add_argument("--spark-partitions", type=int, default=4, help="spark.sql.shuffle.partitions (default 4)")
    ap.add_argument("--spark-memory", default="6g", help="spark.driver.memory (local mode: all of Spark; default 6g)")
    ap.add_argument("--spark-chunk", type=float, default=5.0,
                    help="Spark drains the backlog this many seconds of events per micro-batch "
                         "(maxOffsetsPerTrigger; 0: all in one batch, which ran out of memory at 60 s)")
    ap.add_argument("--exact", action="store_true", help="compare result ids with the reference, not only counts")
    ap.add_argument("--bootstrap")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    ap.add_argument("--name", default="spark_compare")
    args = ap.parse_args()
    bs, cluster = kafka(args.bootstrap)
    work = args.out / f"{args.name}-work"
    work.mkdir(parents=True, exist_ok=True)
    before = machine()
    try:
        fig7 = prepare_backlog(bs, args.backlog, args.f, exact=args.exact)
        jl_backlog = backlog_run(bs, args.backlog, args.f, args.plan, work, args.exact, data=fig7)
        _say("joinlib backlog", jl_backlog)
        # the routers workload of the live demo: few matches (f = 0.0005), where semijoins pay off
        routers = prepare_backlog(bs, args.backlog, ROUTERS["f"], ROUTERS["rate"], ROUTERS["payload"], args.exact)
        jl_routers = backlog_run(bs, args.backlog, ROUTERS["f"], args.plan, work, args.exact, data=routers)
        _say("joinlib backlog, routers workload", jl_routers)
        rates = [float(x) for x in args.rates.split(",")]
        jl_paced = []
        for rate in rates:   # the default's ~80 results per event at every rate, as in live_bench.py
            jl_paced.append(paced_run(bs, rate, args.wall, args.f * RATE / rate, args.plan, work))
            _say(f"joinlib live {rate:g}/s per site", jl_paced[-1])
        spark = spark_session(args.spark_partitions, args.spark_memory)
        try:
            sp_backlog = spark_backlog(spark, bs, fig7, work, args.exact, args.spark_chunk)
            _say("spark backlog", sp_backlog)
            sp_routers = spark_backlog(spark, bs, routers, work, args.exact, args.spark_chunk)
            _say("spark backlog, routers workload", sp_routers)
            sp_paced = []
            for rate in rates:
                sp_paced.append(spark_paced(spark, bs, rate, args.wall, args.f * RATE / rate, work))
                _say(f"spark live {rate:g}/s per site", sp_paced[-1])
        finally:
            spark.stop()
    finally:
        if cluster is not None:
            cluster.stop()
    out = {"workload": {"paper": "Fig. 7 defaults at three sites", "tuple_bytes": 1250, "window_ms": WINDOW_MS,
                        "selectivity": args.f, "tau_ms": 100, "delta_ms": DELAY_MS, "live_rates_per_site": rates,
                        "partitions": 3, "backlog_s": args.backlog, "live_s": args.wall},
           "routers_workload": {**ROUTERS, "joinlib": jl_routers, "spark": sp_routers},
           "joinlib": {"backlog": jl_backlog, "live": jl_paced},
           "spark": {"backlog": sp_backlog, "live": sp_paced, "version": _spark_version(),
                     "master": "local[2]", "shuffle_partitions": args.spark_partitions,
                     "driver_memory": args.spark_memory},
           "machine_before": before, "machine_after": machine()}
    (args.out / f"{args.name}.json").write_text(json.dumps(out, indent=2) + "\n")
    plot(out, args.out / f"{args.name}.png")
    print(f"wrote {args.out / (args.name + '.json')} and .png")
    return 0


def _say(what: str, r: dict) -> None:
    lat = r.get("latency_ms") or {}
    print(f"{what}: {r.get('events', 0):,} events, {r['results']:,} results (reference {r['reference_results']:,})"
          + (f", {r['events_per_s']:,.0f} events/s" if "drain_s" in r else "")
          + (f", latency p50 {lat.get('p50')} p99 {lat.get('p99')} ms" if lat else ""), flush=True)


def _spark_version() -> str:
    import pyspark
    return pyspark.__version__


def plot(out: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    jl, sp = out["joinlib"], out["spark"]
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.2))
    names, colors = ["joinlib", "Spark"], ["tab:blue", "tab:orange"]
    axes[0].bar(names, [jl["backlog"]["events_per_s"], sp["backlog"]["events_per_s"]], color=colors)
    axes[0].set_title("sustained input events/s (backlog drain)")
    for runs, name, color in ((jl["live"], "joinlib", "tab:blue"), (sp["live"], "Spark", "tab:orange")):
        x = [r["offered_events_per_s"] for r in runs]
        axes[1].plot(x, [r["latency_ms"].get("p50", float("nan")) for r in runs], "o-", color=color,
                     label=f"{name} p50")
        axes[1].plot(x, [r["latency_ms"].get("p99", float("nan")) for r in runs], "^--", color=color,
                     label=f"{name} p99")
    axes[1].set_yscale("log")
    axes[1].set_xlabel("input events/s (three sites)")
    axes[1].set_title("event-to-result latency (ms), live")
    axes[1].legend()
    rw = out["routers_workload"]
    labels = ["joinlib\n(its plan)", "central", "Spark\n(remote)"]
    for i, (name, jb, sb) in enumerate((("Fig. 7", jl["backlog"], sp["backlog"]),
                                       ("routers", rw["joinlib"], rw["spark"]))):
        vals = [jb["bytes"] or 0, jb["central_bytes"] or 0, sb["bytes_crossing_sites"]]
        axes[2].bar([x + (0.2 if i else -0.2) for x in range(3)], [v / 1e6 for v in vals], width=0.4, label=name)
    axes[2].set_xticks(range(3), labels)
    axes[2].set_title("MB crossing sites (bounded runs)")
    axes[2].legend()
    fig.suptitle("Fig. 7 workload at three sites on live JSON topics, same machine")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
