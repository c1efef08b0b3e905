"""The Spark jobs (services/spark/) on a real Kafka broker.

A small data set of examples/routers.yaml (renamed to a unique query) is generated and produced to
``src.<query>.<stream>`` as ``SourceBatch`` messages (one per stream and 100 ms interval, header
``run=r1``, plus one batch of another run that ``--run r1`` must ignore).  The reference join's
results are produced to ``out.<query>`` as ``Result`` messages with a known latency each
(``emit_ms = head_ts + latency``), in two parts.

* ``results_job --once`` runs after each part (same checkpoint): the final Parquet statistics per
  head and window equal the reference join's counts and the latencies' mean/max/percentiles; the
  second run continues from the checkpoint without counting anything twice.
* ``audit_job`` finds no difference on ``out.<query>`` and exactly the injected missing,
  duplicated, extra, relabelled and malformed results on a damaged copy.

Spark itself is required: when pyspark, Java or the connector jars are missing these tests fail
with what to run (``make spark-deps``); they are never skipped.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from bisect import bisect_left, bisect_right
from collections import Counter, defaultdict
from pathlib import Path
from typing import Sequence

import pytest

from joinlib.adapters.kafka import ensure_topics, out_topic, src_topic
from joinlib.data.files import load_streams
from joinlib.data.gen import generate
from joinlib.protocol import records
from joinlib.query import dump_query, load_query, parse_query, query_to_dict
from joinlib.reference import reference_join

REPO = Path(__file__).resolve().parents[2]
DURATION_MS = 1200          # ~120 tuples per stream, ~15k results
WINDOW_MS = 400
SEED = 3
RUN = "r1"
JOB_TIMEOUT_S = 600


# --------------------------------------------------------------------------- helpers


def _run_job(module: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", f"services.spark.{module}", *args]
    try:
        p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=JOB_TIMEOUT_S,
                           env={**os.environ, **(env or {})})
    except subprocess.TimeoutExpired as e:
        stderr = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        pytest.fail(f"{' '.join(cmd)} did not finish in {JOB_TIMEOUT_S}s; stderr:\n{stderr[-3000:]}")
    if p.returncode == 2 and "make spark-deps" in p.stderr:
        pytest.fail(f"Spark cannot start:\n{p.stderr[-3000:]}", pytrace=False)
    return p


def _head_of(names: list[str], by_id: list[dict], ids: tuple) -> str:
    k = max(range(len(ids)), key=lambda k: (by_id[k][ids[k]].ts, k, ids[k]))
    return names[k]


def _latency(ids: tuple, ts: int) -> int:
    return 5 + (sum(ids) * 7 + ts) % 120


def _produce(bootstrap: str, topic: str, messages: Sequence[tuple[bytes, bytes, list | None]]) -> None:
    from confluent_kafka import Producer

    errors: list = []
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "enable.idempotence": True})
    for i, (key, value, headers) in enumerate(messages):
        while True:
            try:
                p.produce(topic, value, key, headers=headers,
                          on_delivery=lambda err, _m: errors.append(err) if err else None)
                break
            except BufferError:
                p.poll(0.1)
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(60) == 0, f"{topic}: messages still queued after 60 s"
    assert not errors, f"{topic}: delivery failed: {errors[:3]}"


def _end_offset(bootstrap: str, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "it-spark"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        c.close()


def _result_messages(query, results: list[tuple[tuple, int, str]]) -> list[tuple[bytes, bytes, None]]:
    """One ResultBatch message per result (each result has its own emit time), the last stream
    that is not the head in last_ids, as a node's sink writes it."""
    names = list(query.names)
    out = []
    for n, (ids, ts, head) in enumerate(results):
        last = names[-1] if names[-1] != head else names[0]
        by_name = dict(zip(names, ids, strict=True))
        group = records.ResultGroup(head, ts, {k: v for k, v in by_name.items() if k != last}, last, [by_name[last]])
        batch = records.ResultBatch(query.name, "n1", 0, 0, n, ts + _latency(ids, ts), [group])
        out.append((b"n1", records.encode_result_batch(batch), None))
    return out


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def spark_ready():
    """Fail fast (no JVM) with the setup hint when pyspark, Java or the connector jars are missing."""
    from services.spark.common import SparkSetupError, check_spark_setup

    try:
        check_spark_setup()
    except SparkSetupError as e:
        pytest.fail(f"Spark is not set up: {e}", pytrace=False)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    d = query_to_dict(load_query(REPO / "examples" / "routers.yaml"))
    d["name"] = f"itspark_{uuid.uuid4().hex[:10]}"
    query = parse_query(d, "routers.yaml (renamed)")
    data = tmp_path_factory.mktemp("spark-data")
    generate(query, data, DURATION_MS, SEED)
    streams = load_streams(query, data)
    want = reference_join(query, streams)
    assert 0 < max(want.values()) == 1  # every result once: (ids, ts) identifies it
    names = list(query.names)
    by_id = [{t.id: t for t in streams[n]} for n in names]
    # (ids, head_ts, head) in head_ts order, as nodes emit them
    results = sorted(((ids, ts, _head_of(names, by_id, ids)) for ids, ts in want), key=lambda r: (r[1], r[0]))
    qfile = data / f"{query.name}.yaml"
    dump_query(query, qfile)
    return query, qfile, streams, results


@pytest.fixture(scope="module")
def topics(kafka_bootstrap, kafka_admin, dataset):
    """src.<query>.<stream> holding the data set (run r1, plus a stray batch of another run) and
    out.<query> (created empty: the results go in per test)."""
    query, _, streams, _ = dataset
    tau = query.execution.interval_ms
    names = [src_topic(query.name, s.name) for s in query.streams] + [out_topic(query.name)]
    ensure_topics(kafka_admin, names)
    last = max(t.ts for tups in streams.values() for t in tups) // tau
    for s in query.streams:
        tups = sorted(streams[s.name], key=lambda t: (t.ts, t.id))
        msgs = []
        for e in range(last + 1):
            batch = [t for t in tups if e * tau <= t.ts < (e + 1) * tau]
            msgs.append((s.name.encode(),
                         records.encode_source_batch(records.SourceBatch(s.name, batch, (e + 1) * tau)),
                         [("run", RUN.encode())]))
        if s.pos == 0:  # another run's tuple: would add results unless --run filters it out
            stray = tups[len(tups) // 2]
            fake = type(stray)(stray.pos, 10**6, stray.ts, stray.seq, stray.key, stray.rest)
            msgs.append((s.name.encode(),
                         records.encode_source_batch(records.SourceBatch(s.name, [fake], stray.ts + 1)),
                         [("run", b"other")]))
        _produce(kafka_bootstrap, src_topic(query.name, s.name), msgs)
    yield names
    kafka_admin.delete_topics(names, operation_timeout=30)


# --------------------------------------------------------------------------- tests


def test_results_job_counts_and_latency_per_window(spark_ready, dataset, topics, kafka_bootstrap, tmp_path):
    from services.spark.results_job import read_window_stats

    query, _, _, results = dataset
    out = tmp_path / "spark-out"
    # results arrive in two parts, interleaved over every window: the second run must add to the
    # first run's windows (checkpointed state), not restart or double count them
    first, second = results[0::3] + results[1::3], results[2::3]
    args = ("--query", query.name, "--bootstrap", kafka_bootstrap, "--out", str(out),
            "--window", f"{WINDOW_MS}ms", "--once")
    for part in (first, second):
        _produce(kafka_bootstrap, out_topic(query.name), _result_messages(query, part))
        p = _run_job("results_job", *args)
        assert p.returncode == 0, f"results_job failed ({p.returncode}):\n{p.stderr[-4000:]}"
    assert (out / "_checkpoints" / query.name).is_dir()

    lat: dict = defaultdict(list)
    for ids, ts, head in results:
        lat[(head, ts // WINDOW_MS * WINDOW_MS)].append(_latency(ids, ts))
    stats = read_window_stats(out, query.name)
    got = {(r.head, int(r.window_start_ms)): r for r in stats.itertuples()}
    assert set(got) == set(lat), f"windows: got {sorted(got)}, want {sorted(lat)}"
    assert stats["batch_id"].max() >= 1  # the second run added a batch
    for key, xs in lat.items():
        r, xs = got[key], sorted(xs)
        n = len(xs)
        assert r.results == n, f"{key}: {r.results} results, reference join has {n}"
        assert int(r.window_end_ms) - int(r.window_start_ms) == WINDOW_MS
        assert r.latency_mean_ms == pytest.approx(sum(xs) / n)
        assert r.latency_max_ms == xs[-1]
        for q, v in ((0.5, r.latency_p50_ms), (0.95, r.latency_p95_ms)):
            lo, hi = bisect_left(xs, v), bisect_right(xs, v)
            assert hi > lo and lo / n <= q + 0.01 and hi / n >= q - 0.01, f"{key}: p{int(q * 100)} = {v}"
    assert int(stats["results"].sum()) == len(results)


def test_audit_agrees_with_the_reference_join(spark_ready, dataset, topics, kafka_bootstrap, tmp_path):
    query, qfile, _, results = dataset
    # out.<query> holds every result once if the results test ran first; else put them there now
    held = _end_offset(kafka_bootstrap, out_topic(query.name))
    if held == 0:
        _produce(kafka_bootstrap, out_topic(query.name), _result_messages(query, results))
    else:
        assert held == len(results)

    report_file = tmp_path / "audit.json"
    p = _run_job("audit_job", "--query", str(qfile), "--bootstrap", kafka_bootstrap, "--window", f"{WINDOW_MS}ms",
                 "--run", RUN, "--out", str(report_file))
    assert p.returncode == 0, f"audit_job exit {p.returncode}:\n{p.stderr[-4000:]}"
    report = json.loads(report_file.read_text())
    assert report["ok"] is True
    assert report["expected"] == report["delivered"] == len(results)
    for k in ("missing", "extra", "duplicated", "wrong_head", "malformed", "foreign"):
        assert report[k] == 0, (k, report["examples"])
    assert report["sources"]["other_runs"] == 1 and report["sources"]["malformed"] == 0
    want = Counter(ts // WINDOW_MS * WINDOW_MS for _, ts, _ in results)
    assert {w["window_start_ms"]: w["expected"] for w in report["windows"]} == dict(want)
    assert all(w["ok"] and w["delivered"] == w["expected"] for w in report["windows"])


def test_audit_detects_missing_duplicated_extra_and_malformed(spark_ready, dataset, topics, kafka_bootstrap,
                                                              make_topic, tmp_path):
    query, qfile, streams, results = dataset
    names = list(query.names)
    n = len(results)
    dropped = [results[5], results[n // 2], results[-2]]
    twice, thrice = results[10], results[n // 3]
    ids, ts, head = results[n // 4]
    extra = (ids, ts + 1, head)  # right tuples, wrong head_ts: not a result of the join
    relabel = results[n // 5]
    relabeled = (relabel[0], relabel[1], next(s for s in names if s != relabel[2]))  # delivered, wrong head
    keep = [r for r in results if r not in dropped and r != relabel] + [relabeled, twice, thrice, thrice, extra]
    damaged = make_topic("out-damaged")
    msgs = _result_messages(query, keep) + [(b"S1", b"\x01", None)]  # negative string length: undecodable
    _produce(kafka_bootstrap, damaged, msgs)

    report_file = tmp_path / "audit.json"
    p = _run_job("audit_job", "--query", str(qfile), "--bootstrap", kafka_bootstrap, "--window", f"{WINDOW_MS}ms",
                 "--run", RUN, "--out-topic", damaged, "--out", str(report_file))
    assert p.returncode == 1, f"audit_job exit {p.returncode} (want 1: differs):\n{p.stderr[-4000:]}"
    report = json.loads(report_file.read_text())
    assert report["ok"] is False
    assert (report["expected"], report["delivered"]) == (n, n - 3 + 4)
    assert (report["missing"], report["duplicated"], report["extra"]) == (3, 3, 1)
    assert (report["wrong_head"], report["malformed"], report["foreign"]) == (1, 1, 0)
    [w] = report["examples"]["wrong_head"]
    assert (w["head_ts"], w["expected_head"], w["heads"]) == (relabel[1], relabel[2], {relabeled[2]: 1})
    missing = {(tuple(e["ids"][s] for s in names), e["head_ts"]) for e in report["examples"]["missing"]}
    assert missing == {(i, t) for i, t, _ in dropped}
    assert {(tuple(e["ids"][s] for s in names), e["head_ts"]) for e in report["examples"]["extra"]} == {extra[:2]}
    per_window: Counter[int] = Counter()
    for _, t, _ in dropped:
        per_window[t // WINDOW_MS * WINDOW_MS] += 1
    assert {w["window_start_ms"]: w["missing"] for w in report["windows"] if w["missing"]} == dict(per_window)
    bad = {w["window_start_ms"] for w in report["windows"] if not w["ok"]}
    assert bad == set(per_window) | {t // WINDOW_MS * WINDOW_MS for _, t, _ in (twice, thrice, extra, relabeled)}


def test_missing_connectors_fail_with_the_setup_command(tmp_path):
    """Without the connector jars the jobs exit 2 with `make spark-deps` (no JVM, no Kafka needed)."""
    from services.spark.common import CONNECTOR_JARS, _find, check_spark_setup, spark_home_jars

    ivy = [Path("org.apache.spark_spark-sql-kafka-0-10_2.13-4.0.1.jar"),  # Ivy's names (the Dockerfile's)
           Path("org.apache.kafka_kafka-clients-3.9.1.jar")]
    assert _find("spark-sql-kafka-0-10_2.13-", ivy) == ivy[0] and _find("kafka-clients-", ivy) == ivy[1]
    assert _find("spark-sql-kafka-0-10_2.13-", [Path("spark-sql-kafka-0-10_2.13-4.0.1.jar")]) is not None
    assert _find("spark-sql_2.13-", ivy) is None
    own = spark_home_jars()
    if own is not None and all(_find(p, list(own.glob("*.jar"))) for p in CONNECTOR_JARS):
        # a Spark whose own jars/ has the connectors (the services/spark/Dockerfile image)
        assert check_spark_setup() == []
        return
    empty = tmp_path / "no-jars"
    empty.mkdir()
    for job in (["results_job", "--query", "q", "--out", str(tmp_path / "o"), "--once"],
                ["audit_job", "--query", str(REPO / "examples" / "routers.yaml"), "--out", str(tmp_path / "a.json")]):
        p = subprocess.run([sys.executable, "-m", f"services.spark.{job[0]}", *job[1:], "--bootstrap", "127.0.0.1:9"],
                           cwd=REPO, capture_output=True, text=True, timeout=120,
                           env={**os.environ, "JOINLIB_SPARK_JARS": str(empty)})
        assert p.returncode == 2, p.stderr
        assert "make spark-deps" in p.stderr and str(empty) in p.stderr, p.stderr


def test_spark_jobs_on_the_output_of_a_real_cluster_run(spark_ready, kafka_bootstrap, tmp_path):
    """The deployed pipeline: node services on Kafka produce out.<query>; the Spark streaming
    job's per-window counts equal the reference join, and the audit job agrees."""
    from joinlib.data.files import load_streams
    from joinlib.data.gen import generate
    from joinlib.node.cluster import run_cluster
    from joinlib.plan.logical import uniform
    from joinlib.query import load_query
    from joinlib.reference import reference_join
    from services.spark.results_job import read_window_stats

    text = (REPO / "examples" / "routers.yaml").read_text()
    name = f"sparkreal{uuid.uuid4().hex[:6]}"
    qfile = tmp_path / "q.yaml"
    qfile.write_text(text.replace("name: routers", f"name: {name}"))
    query = load_query(qfile)
    generate(query, tmp_path / "data", 1500, seed=11)
    streams = load_streams(query, tmp_path / "data")
    report = run_cluster(query, streams, uniform(query, "SM-D1"), None, bootstrap=kafka_bootstrap, mode="thread")
    expected = reference_join(query, streams)
    assert report["results"] == sum(expected.values()) > 0

    out = tmp_path / "spark-out"
    p = _run_job("results_job", "--query", name, "--bootstrap", kafka_bootstrap, "--out", str(out),
                 "--window", f"{WINDOW_MS}ms", "--once")
    assert p.returncode == 0, f"results_job failed ({p.returncode}):\n{p.stderr[-4000:]}"
    stats = read_window_stats(out, name)
    want = Counter(ts // WINDOW_MS * WINDOW_MS for (_, ts), n in expected.items() for _ in range(n))
    got: Counter[int] = Counter()
    for r in stats.itertuples():
        got[int(r.window_start_ms)] += int(r.results)
    assert got == want

    audit = tmp_path / "audit.json"
    p = _run_job("audit_job", "--query", str(qfile), "--bootstrap", kafka_bootstrap, "--window", f"{WINDOW_MS}ms",
                 "--run", report["run"], "--out", str(audit))
    assert p.returncode == 0, f"audit_job exit {p.returncode}:\n{p.stderr[-4000:]}"
    result = json.loads(audit.read_text())
    assert result["ok"] is True and result["expected"] == result["delivered"] == sum(expected.values())


@pytest.mark.parametrize("fmt", ["json", "avro"])
def test_results_job_counts_a_query_s_rows_on_its_sink_topic(spark_ready, dataset, kafka_bootstrap, kafka_admin,
                                                             tmp_path, fmt):
    """``results_job --rows``: a query's result rows (docs/sql.md, as a result site writes them: JSON, or Avro in
    the Confluent wire format) give the same per-window counts as the results, with the record's Kafka timestamp
    as the emit time; a record that does not decode is not counted."""
    import orjson
    from confluent_kafka import Producer

    from joinlib.rows_avro import AvroRows, row_schema
    from services.spark.results_job import read_window_stats

    query, _, _, results = dataset
    d = query_to_dict(query)
    d["name"] = f"{query.name}_rows_{fmt}"
    topic = f"rows.{d['name']}"
    d["output"] = {"select": ["S1.dest", "S1.id AS id1"], "topic": topic, "format": fmt,
                   **({"registry": "http://127.0.0.1:9"} if fmt == "avro" else {})}
    q = parse_query(d, "rows query")
    qfile = tmp_path / "rows.yaml"
    dump_query(q, qfile)
    ensure_topics(kafka_admin, [topic])
    names = list(q.names)
    avro = AvroRows(row_schema(q), 7) if fmt == "avro" else None
    p = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 20})
    # emitted "now": records stamped in 1970 are past the broker's retention and may be deleted before Spark reads
    base = int(time.time() * 1000) - 60_000
    for ids, ts, _ in results:
        row = {"dest": f"10.0.0.{ids[0] % 7}", "id1": ids[0], "ids": dict(zip(names, ids, strict=True)), "ts": ts}
        value = orjson.dumps(row) if avro is None else avro.encode(row)
        p.produce(topic, value, None, timestamp=base + ts + _latency(ids, ts))
        p.poll(0)
    p.produce(topic, b"\x00\x00\x00\x00\x07garbage" if avro else b"{not json", None, timestamp=base)
    assert p.flush(60) == 0
    out = tmp_path / "spark-rows"
    r = _run_job("results_job", "--query", str(qfile), "--rows", "--bootstrap", kafka_bootstrap, "--out", str(out),
                 "--window", f"{WINDOW_MS}ms", "--once", "--t0-ms", str(base))
    assert r.returncode == 0, f"results_job --rows failed ({r.returncode}):\n{r.stderr[-4000:]}"
    lat: dict = defaultdict(list)
    for ids, ts, _ in results:
        lat[ts // WINDOW_MS * WINDOW_MS].append(_latency(ids, ts))
    stats = read_window_stats(out, q.name)
    assert set(stats["head"]) == {"rows"}, r.stderr[-3000:]
    got = {int(r.window_start_ms): r for r in stats.itertuples()}
    assert set(got) == set(lat)
    for w, xs in lat.items():
        assert got[w].results == len(xs)
        assert got[w].latency_mean_ms == pytest.approx(sum(xs) / len(xs))
        assert got[w].latency_max_ms == max(xs)
