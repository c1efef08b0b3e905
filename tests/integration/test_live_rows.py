"""Results as rows on a live query's sink topic, on the real broker (docs/sql.md "Results as rows"):

* an SQL query with a projection and a WHERE writes JSON rows to its sink topic, equal (as a multiset) to the
  reference rows of the on-time records as written, and ``joinlib results`` and the Python API's
  ``QueryHandle.results()`` give them;
* an Avro sink's records are in the Confluent wire format, their schema registered at the query's registry, and
  decode with it to the reference rows;
* a filtered stream ships fewer bytes than the same query without the filter, over the same records.
"""
from __future__ import annotations

import io
import json
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import fastavro
import orjson

from joinlib.api import QueryHandle, connect
from joinlib.cli.main import main as cli
from joinlib.ingest.contract import expected_output
from joinlib.model import Query
from joinlib.rows import reference_rows
from joinlib.sql import load_query_file
from tests.integration.registry import Registry
from tests.integration.test_live import (
    WAIT_S,
    Recorder,
    Services,
    _node_process,
    _sites,
    advances,
    generator,
    kill_and_restart,
    make_topics,
    read_topic,
    results_via_cli,
    services,  # noqa: F401  (a module fixture)
    stop_processes,
    submit,
)

WHERE = "S1.dest < '10.0.0.2'"   # 12 of the 40 destinations the generator writes ("10.0.0.1", "10.0.0.10", ...)


def sql_query(tmp_path: Path, name: str, sites: list[str], topics: list[str], select: str, where: str = "",
              sink: str = "", start: str = "latest") -> Query:
    """A chain on ``dest`` over json sources, one stream per site, written in SQL."""
    decls = "".join(
        f"CREATE STREAM S{i + 1} (id BIGINT, ts BIGINT, dest VARCHAR, payload VARCHAR) WITH (site = '{site}', "
        f"topic = '{topic}', timestamp = 'ts', id = 'id', start = '{start}');\n"
        for i, (site, topic) in enumerate(zip(sites, topics, strict=True)))
    joins = "".join(f"  JOIN S{i} WITHIN 1 SECOND ON S{i - 1}.dest = S{i}.dest\n" for i in range(2, len(sites) + 1))
    text = (decls + f"CREATE STREAM {name} WITH ({sink}interval = '100ms', max_delay = '80ms', "
            "idle_timeout = '1s') AS\n"
            f"  SELECT {select}\n  FROM S1\n{joins}" + (f"  WHERE {where}\n" if where else "") + "  EMIT CHANGES;\n")
    path = tmp_path / f"{name}.sql"
    path.write_text(text)
    return load_query_file(path)


def expected_rows(q: Query, rec: Recorder, run: str, bootstrap: str) -> Counter:
    """The reference rows of the on-time records as written (origin 0: event times are the records' ts)."""
    want = expected_output(q, rec.written, 0, advances(bootstrap, q, run))
    rows = {s: [orjson.loads(w.value) for w in ws if w.value is not None] for s, ws in rec.written.items()}
    results = [r for r, n in want.results.items() for _ in range(n)]
    return Counter(map(_key, reference_rows(q, rows, results)))  # type: ignore[arg-type]


def _key(row: dict[str, Any]) -> bytes:
    return orjson.dumps(row, option=orjson.OPT_SORT_KEYS)


def rows_via_cli(svc: Services, q: Query, tmp_path: Path) -> Counter:
    out = tmp_path / f"{q.name}-{uuid.uuid4().hex[:4]}.jsonl"
    assert cli(["results", q.name, "--out", str(out), "--url", svc.url]) == 0
    return Counter(_key(json.loads(line)) for line in out.read_text().splitlines())


def wait_rows(svc: Services, q: Query, run: str, rec: Recorder, tmp_path: Path) -> Counter:
    """Poll ``joinlib results`` until it prints exactly the reference rows; returns them."""
    deadline = time.monotonic() + WAIT_S
    while True:
        want, got = expected_rows(q, rec, run, svc.bootstrap), rows_via_cli(svc, q, tmp_path)
        if got == want:
            return want
        if time.monotonic() > deadline:
            raise AssertionError(f"{q.name}: {sum((want - got).values())} rows missing, {sum((got - want).values())} "
                                 f"extra or duplicated (of {sum(want.values())}); e.g. missing {list(want - got)[:2]} "
                                 f"extra {list(got - want)[:2]}")
        time.sleep(1.0)


def test_json_rows_of_a_projection_and_a_where(services, make_topic, tmp_path):  # noqa: F811
    sites = _sites()
    services.start_nodes(sites)
    sink = make_topic("rows")
    q = sql_query(tmp_path, f"lvrows{sites[0]}", sites, make_topics(make_topic, 3),
                  "S1.dest, S1.id AS id1, S2.id AS id2, S3.payload AS p3, S3.ts AS t3", WHERE, f"topic = '{sink}', ")
    assert q.output.sink_topic == sink and q.streams[2].source is not None
    assert q.streams[2].source.attributes == ("payload",)   # carried: what the SELECT list names of S3
    out = submit(services, q, "SM-S1")
    rec = Recorder()
    generator(services.bootstrap, q, rec, time_base_ms=0, disorder_ms=40).burst(300)
    want = wait_rows(services, q, out["run"], rec, tmp_path)
    assert sum(want.values()) >= 20, "the test data is too thin"
    assert all(json.loads(k)["dest"] < "10.0.0.2" for k in want)
    msgs = read_topic(services.bootstrap, sink, out["run"])
    assert len(msgs) == sum(want.values()) and all(m.key() is None for m in msgs)
    assert len({dict(m.headers())["joinlib.seq"] for m in msgs}) == len(msgs)
    written = [s for n in services.nodes for fam in n.registry.collect() for s in fam.samples
               if s.name == "joinlib_rows_written_total" and s.labels["query"] == q.name]
    assert {s.labels["topic"] for s in written} == {sink}   # the dashboards' rows/s
    assert sum(s.value for s in written) == len(msgs)
    first = json.loads(msgs[0].value())
    assert list(first) == ["dest", "id1", "id2", "p3", "t3", "ids", "ts"] and first["p3"] == "x" * 20
    handle = QueryHandle(connect(services.url), q, q.name, out["run"], out["plan"])   # the Python API: the same rows
    assert Counter(map(_key, handle.results())) == want
    services.planner.stop(q.name)


def test_avro_rows_decode_with_their_registered_schema(services, make_topic, tmp_path):  # noqa: F811
    reg = Registry({})
    try:
        sites = _sites(2)
        services.start_nodes(sites)
        sink = make_topic("avro-rows")
        q = sql_query(tmp_path, f"lvavrows{sites[0]}", sites, make_topics(make_topic, 2, partitions=2),
                      "S1.dest, S1.id AS id1, S2.id AS id2, S2.payload AS p2", "",
                      f"topic = '{sink}', format = 'avro', registry = '{reg.url}', ")
        out = submit(services, q)
        rec = Recorder()
        generator(services.bootstrap, q, rec, time_base_ms=0, disorder_ms=40).burst(200)
        want = wait_rows(services, q, out["run"], rec, tmp_path)   # joinlib results decodes them
        assert sum(want.values()) >= 20
        (schema_id,) = set(reg.subjects[f"{sink}-value"])
        schema = fastavro.parse_schema(json.loads(reg.schemas[schema_id]))
        msgs = read_topic(services.bootstrap, sink, out["run"])
        assert all(m.value()[:5] == b"\x00" + schema_id.to_bytes(4, "big") for m in msgs)
        rows = [fastavro.schemaless_reader(io.BytesIO(m.value()[5:]), schema, None) for m in msgs]
        assert Counter(map(_key, rows)) == want   # type: ignore[arg-type]
        services.planner.stop(q.name)
    finally:
        reg.close()


def test_a_filtered_stream_ships_fewer_bytes(services, make_topic, tmp_path):  # noqa: F811
    """Two queries over the same records (from the topics' start), one with a WHERE on S1 and S2: both give the
    reference results of what they keep, and the filtered one ships fewer bytes between sites."""
    sites = _sites()
    services.start_nodes(sites)
    topics = make_topics(make_topic, 3)
    rec = Recorder()
    plain = sql_query(tmp_path, f"lvnof{sites[0]}", sites, topics, "*", start="earliest", sink="results = 'ids', ")
    filtered = sql_query(tmp_path, f"lvf{sites[0]}", sites, topics, "*", f"{WHERE} AND S2.dest < '10.0.0.2'",
                         start="earliest", sink="results = 'ids', ")
    generator(services.bootstrap, plain, rec, time_base_ms=0, disorder_ms=40).burst(300)
    shipped = {}
    for q in (plain, filtered):
        out = submit(services, q, "SM-S1")
        deadline = time.monotonic() + WAIT_S
        while True:   # the results of what each keeps (wait_exact would count the filtered records as lost)
            want = expected_output(q, rec.written, 0, advances(services.bootstrap, q, out["run"]))
            if results_via_cli(services, q, 0, tmp_path) == want.results:
                break
            assert time.monotonic() < deadline, f"{q.name}: the results are not the reference's"
            time.sleep(1.0)
        assert want.count >= 5
        while services.planner.status(q.name)["stats"]["results"] != want.count:   # the nodes' status messages
            assert time.monotonic() < deadline + WAIT_S, f"{q.name}: the planner's figures lag"
            time.sleep(0.5)
        time.sleep(3.0)   # a status round more: every node's final bytes
        shipped[q.name] = services.planner.status(q.name)["stats"]["bytes"]
        services.planner.stop(q.name)
    assert 0 < shipped[filtered.name] < 0.8 * shipped[plain.name], shipped


def test_killing_a_result_site_keeps_the_rows_exact(services, make_topic, kafka_bootstrap, redis_url,  # noqa: F811
                                                    tmp_path):
    """Node services as processes with Redis checkpoints; SIGKILL one that writes rows mid-stream and start it
    again: the sink topic still has each reference row once (rows a checkpoint had not counted are skipped)."""
    sites = _sites()
    logs = {s: tmp_path / f"node-{s}.log" for s in sites}
    procs = {s: _node_process(s, kafka_bootstrap, redis_url, logs[s]) for s in sites}
    try:
        sink = make_topic("rows-kill")
        q = sql_query(tmp_path, f"lvrk{sites[0]}", sites, make_topics(make_topic, 3, partitions=2),
                      "S1.dest, S2.id AS id2, S3.payload AS p3", "", f"topic = '{sink}', ")
        out = submit(services, q, "SM-S1")
        rec = Recorder()
        gen = generator(kafka_bootstrap, q, rec, rate=150.0, time_base_ms=0, disorder_ms=40)
        t = threading.Thread(target=gen.run, args=(6.0,))
        t.start()
        victim = sites[2]
        kill_and_restart(procs, victim, logs[victim], f"running query {q.name}", 2.0, kafka_bootstrap, redis_url)
        t.join()
        want = wait_rows(services, q, out["run"], rec, tmp_path)
        assert sum(want.values()) >= 300
        assert "resumed from the checkpoint" in logs[victim].read_text(), logs[victim].read_text()[-2000:]
        writers = Counter(dict(m.headers())["joinlib.site"].decode() for m in read_topic(kafka_bootstrap, sink,
                                                                                          out["run"]))
        assert writers[victim] > 0, f"{victim} wrote no rows: {writers}"
        assert cli(["stop", q.name, "--url", services.url]) == 0
    finally:
        stop_processes(procs.values())
