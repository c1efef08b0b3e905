"""Live queries on the real broker (and Redis for the restart): users' per-site JSON topics in, results
out, until stopped.

Every test compares the run with the contract (joinlib.ingest.contract.expected_output): the records
as written (stream, partition, offset, bytes) and the idle advances the nodes logged decide which
records are on time; the results must be the reference join of those, each once, and every other
record must be in dlq.<query> with its reason.  Sites get unique names per test so that the node
services here take only these tests' plans from the shared control topic.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any, Optional, Protocol

import pytest

from joinlib.cli.main import main as cli
from joinlib.ingest.contract import Expected, Written, expected_output
from joinlib.ingest.events import EventProfile
from joinlib.ingest.records import SchemaLookup
from joinlib.model import Query, Stream
from joinlib.query import parse_query, query_to_dict
from joinlib.source_spec import SourceSpec
from tests.integration.registry import Registry

REPO = Path(__file__).resolve().parents[2]
WAIT_S = 45


# ----------------------------------------------------------------------------- services


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Services:
    """A planner service (HTTP) and node services in threads, serving every query of their sites."""

    def __init__(self, bootstrap: str) -> None:
        from services.planner.service import PlannerService, serve
        self.bootstrap = bootstrap
        self.planner = PlannerService(bootstrap)
        port = _free_port()
        self.server = serve(self.planner, port)
        self.url = f"http://127.0.0.1:{port}"
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.nodes: list[Any] = []

    def start_nodes(self, sites: list[str], redis_url: Optional[str] = None, quiet: bool = True) -> None:
        """Node services (threads) serving ``sites``; with ``redis_url`` their windows live in Redis; not
        ``quiet``: they log to stderr."""
        from prometheus_client import CollectorRegistry

        from joinlib.node.node_service import NodeService
        for site in sites:
            n = NodeService(site, self.bootstrap, registry=CollectorRegistry(), stop=self.stop, serve=True, quiet=quiet,
                            redis_url=redis_url)
            t = threading.Thread(target=n.run, daemon=True, name=f"node-{site}")
            t.start()
            self.nodes.append(n)
            self.threads.append(t)

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(20)
        self.server.shutdown()
        self.planner.close()


@pytest.fixture(scope="module")
def services(kafka_bootstrap):
    svc = Services(kafka_bootstrap)
    yield svc
    svc.close()


def _sites(n: int = 3) -> list[str]:
    tag = uuid.uuid4().hex[:6]
    return [f"{c}{tag}" for c in "xyz"[:n]]


def live_query(name: str, sites: list[str], topics: list[str], *, window: str = "1s", idle: str = "1s",
               formats: Optional[list[dict]] = None) -> Query:
    """A 3-way (or 2-way) chain on ``dest`` over json sources, one stream per site."""
    streams = {}
    for i, (site, topic) in enumerate(zip(sites, topics, strict=True)):
        src = {"topic": topic, "format": "json", "time": {"field": "ts", "unit": "ms"}, "id": "id"}
        if formats and formats[i]:
            src = {**src, **formats[i]}
        streams[f"S{i + 1}"] = {"site": site, "window": window, "source": src}
    join = [f"S{i}.dest = S{i + 1}.dest" for i in range(1, len(sites))]
    doc = {"name": name, "streams": streams, "join": join,
           "execution": {"interval": "100ms", "max_delay": "80ms", "idle_timeout": idle}}
    return parse_query(doc, name)


def make_topics(make_topic, n: int, partitions: int = 3) -> list[str]:
    return [make_topic(f"events-{i}", partitions=partitions) for i in range(n)]


def submit(services: Services, query: Query, plan: str = "SP-S", since: str = "0") -> dict:
    import yaml
    return services.planner.submit(yaml.safe_dump(query_to_dict(query)), plan, None, since)


# ----------------------------------------------------------------------------- records and checks


class Recorder:
    """The records as written (on delivery), per stream."""

    def __init__(self) -> None:
        self.written: dict[str, list[Written]] = {}
        self.lock = threading.Lock()

    def __call__(self, stream: str, rec: Any, part: int, offset: int) -> None:
        with self.lock:
            self.written.setdefault(stream, []).append(Written(part, offset, rec.value))

    def add(self, stream: str, part: int, offset: int, value: Optional[bytes]) -> None:
        with self.lock:
            self.written.setdefault(stream, []).append(Written(part, offset, value))

    def count(self) -> int:
        return sum(len(v) for v in self.written.values())


def generator(bootstrap: str, query: Query, rec: Recorder, **kw: Any) -> Any:
    from joinlib.adapters.live_gen import LiveGenerator
    prof = {k: kw.pop(k) for k in list(kw) if k in EventProfile.__dataclass_fields__}
    base = dict(rate=100.0, distinct=40, payload_bytes=20, disorder_ms=60, late_every=0, malformed_every=0)
    return LiveGenerator(bootstrap, query, EventProfile(**{**base, **prof}), on_delivered=rec, **kw)


def read_topic(bootstrap: str, topic: str, run: str) -> list[Any]:
    """Every message of partition 0 of ``topic`` with header run = ``run``."""
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition

    from joinlib.adapters.kafka import consume, end_offsets, make_consumer
    c = make_consumer(bootstrap, f"check-{uuid.uuid4().hex[:6]}")
    try:
        end = end_offsets(c, [topic])[topic]
        out: list[Any] = []
        seen = 0
        if end == 0:
            return out
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + 30
        while seen < end and time.monotonic() < deadline:
            for m in consume(c, 5000, 0.3):
                offset = m.offset()
                assert offset is not None   # a consumed message has an offset
                seen = offset + 1
                if dict(m.headers() or ()).get("run") == run.encode():
                    out.append(m)
        return out
    finally:
        c.close()


def advances(bootstrap: str, query: Any, run: str) -> dict[tuple[str, int], list[tuple[int, int]]]:
    """The idle advances logged for a query (or a deployment, by name) in ``wm.<name>``."""
    out: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for m in read_topic(bootstrap, f"wm.{getattr(query, 'name', query)}", run):
        d = json.loads(m.value())
        out.setdefault((d["stream"], d["part"]), []).append((d["at"], d["wm"]))
    return out


def dead_letters(bootstrap: str, query: Query, run: str) -> list[tuple[tuple[str, int, int], str, Optional[bytes]]]:
    out = []
    for m in read_topic(bootstrap, f"dlq.{query.name}", run):
        h = dict(m.headers())
        out.append(((h["dlq.topic"].decode(), int(h["dlq.partition"]), int(h["dlq.offset"])),
                    h["dlq.reason"].decode(), m.value()))
    return out


class HasPlanner(Protocol):
    """A planner service's URL: :class:`Services` here, the process stack of test_hostile_input."""

    url: str


def source_of(stream: Stream) -> SourceSpec:
    """The source of a live query's stream (every stream of a live query has one)."""
    assert stream.source is not None, f"stream {stream.name} has no source"
    return stream.source


def results_via_cli(services: HasPlanner, query: Query, origin: int, tmp_path: Path) -> Counter:
    out = tmp_path / f"{query.name}-{uuid.uuid4().hex[:4]}.jsonl"
    assert cli(["results", query.name, "--out", str(out), "--url", services.url]) == 0
    pos = {s.name: s.pos for s in query.streams}
    got: Counter = Counter()
    for line in out.read_text().splitlines():
        r = json.loads(line)
        ids = [None] * len(pos)
        for name, i in r["ids"].items():
            ids[pos[name]] = i
        got[(tuple(ids), r["ts"] - origin)] += 1
    return got


def wait_exact(services: Services, query: Query, run: str, origin: int, rec: Recorder, tmp_path: Path,
               timeout_s: float = WAIT_S, min_results: int = 1, zombie: bool = False,
               replaced: tuple[str, ...] = ()) -> Expected:
    """Poll until the results equal the contract's; then check the dead letters too.  ``zombie``: an instance
    was paused past its session and resumed: what its producer still held when it was paused may reach the
    dead-letter topic after the new owner wrote the same records (docs/reliability.md, "Fenced instances"), so
    a record may be there twice -- as byte-identical copies, which a reader drops by their place.  ``replaced``:
    the runs a replan switched from (docs/live.md "Replan"), whose dead letters count too."""
    bs = services.bootstrap
    deadline = time.monotonic() + timeout_s
    while True:
        want = expected_output(query, rec.written, origin, advances(bs, query, run))
        got = results_via_cli(services, query, origin, tmp_path)
        if got == want.results:
            break
        if time.monotonic() > deadline:
            missing, extra = want.results - got, got - want.results
            raise AssertionError(f"{query.name}: {sum(missing.values())} results missing, {sum(extra.values())} "
                                 f"extra or duplicated (of {want.count}); e.g. missing {list(missing)[:3]} "
                                 f"extra {list(extra)[:3]}")
        time.sleep(1.0)
    assert want.count >= min_results, f"only {want.count} results: the test data is too thin"
    dead = [d for r in (*replaced, run) for d in dead_letters(bs, query, r)]
    if zombie:
        firsts: dict = {}
        for d in dead:
            assert firsts.setdefault(d[0], d) == d, f"two different dead letters of one record: {d[0]}"
        dead = list(firsts.values())
    places = [d[0] for d in dead]
    assert len(places) == len(set(places)), "a record is in the dead-letter topic twice"
    assert {d[0]: d[1] for d in dead} == want.dead
    values = {(source_of(s).topic, w.part, w.offset): w.value for s in query.streams
              for w in rec.written.get(s.name, [])}
    assert all(values[where] == value for where, _, value in dead), "a dead letter does not carry the original bytes"
    on_time = sum(len(v) for v in want.on_time.values())
    assert on_time + len(want.dead) == rec.count(), "a record is neither on time nor a dead letter"
    return want


# ----------------------------------------------------------------------------- tests


def test_three_sites_disorder_late_and_malformed_equal_the_reference(services, make_topic, tmp_path):
    """JSON events with bounded disorder on 3-partition topics at three sites, a few late and malformed
    records, a 3-way query: the reference join of the on-time records, the rest in dlq.<query>."""
    sites = _sites()
    services.start_nodes(sites)
    q = live_query(f"lv3{sites[0]}", sites, make_topics(make_topic, 3))
    out = submit(services, q, "SM-S1")
    rec = Recorder()
    gen = generator(services.bootstrap, q, rec, late_every=40, late_by_ms=600, malformed_every=45, time_base_ms=0)
    gen.burst(300)
    want = wait_exact(services, q, out["run"], out["origin_ms"], rec, tmp_path, min_results=200)
    reasons = Counter(want.dead.values())
    assert reasons["late"] >= 5 and {"bad_json", "missing_field", "wrong_type"} <= set(reasons), reasons
    st = services.planner.status(q.name)
    assert st["state"] == "running" and st["live"]
    assert cli(["queries", q.name, "--url", services.url]) == 0
    services.planner.stop(q.name)


def test_two_queries_at_once_and_stopping_one(services, make_topic, tmp_path, capsys):
    """Two queries over the same topics on the same node services (other windows, other plans): each
    gets its own reference join; 'joinlib stop' ends one, the other goes on with new records."""
    sites = _sites()
    services.start_nodes(sites)
    topics = make_topics(make_topic, 3, partitions=2)
    qa = live_query(f"lva{sites[0]}", sites, topics, window="1s")
    qb = live_query(f"lvb{sites[0]}", sites, topics, window="2s")
    ra, rb = submit(services, qa, "SP-S"), submit(services, qb, f"central:{sites[1]}")
    rec = Recorder()
    generator(services.bootstrap, qa, rec, malformed_every=50, time_base_ms=0).burst(200)
    wait_exact(services, qa, ra["run"], 0, rec, tmp_path, min_results=50)
    wait_exact(services, qb, rb["run"], 0, rec, tmp_path, min_results=50)

    assert cli(["stop", qa.name, "--url", services.url]) == 0
    assert "stopped" in capsys.readouterr().out
    assert services.planner.status(qa.name)["state"] == "stopped"
    before = results_via_cli(services, qa, 0, tmp_path)
    # new records, 60 s later in event time (the idle advances moved the watermarks on meanwhile)
    generator(services.bootstrap, qa, rec, time_base_ms=60_000, id_base=10_000, seed=2).burst(200)
    wait_exact(services, qb, rb["run"], 0, rec, tmp_path, min_results=100)
    assert results_via_cli(services, qa, 0, tmp_path) == before, "a stopped query still produced results"
    assert services.planner.status(qb.name)["state"] == "running"
    assert cli(["stop", qb.name, "--url", services.url]) == 0


def test_a_silent_site_does_not_stall_the_others(services, make_topic, tmp_path):
    """Real-time events; the third site goes silent after 2 s and never writes again: the results of the
    other sites' events keep coming (idle advances of S3), and the output stays exact."""
    sites = _sites()
    services.start_nodes(sites)
    q = live_query(f"lvs{sites[0]}", sites, make_topics(make_topic, 3, partitions=2), window="3s", idle="1s")
    out = submit(services, q, "SP-S", since="now")
    origin, rec = out["origin_ms"], Recorder()
    t0 = int(time.time() * 1000)
    loud = generator(services.bootstrap, q, rec, streams=["S1", "S2"], rate=60.0, distinct=30, time_base_ms=t0)
    quiet = generator(services.bootstrap, q, rec, streams=["S3"], rate=60.0, distinct=30, time_base_ms=t0)
    threads = [threading.Thread(target=loud.run, args=(5.0,)), threading.Thread(target=quiet.run, args=(2.0,))]
    for t in threads:
        t.start()
    lat: list[tuple[int, float]] = []   # (head event time, latency ms) of results as they arrive
    nxt, deadline = "beginning", time.monotonic() + 9
    while time.monotonic() < deadline:
        page = services.planner.results(q.name, nxt, 100_000, 0.2)
        now = time.time() * 1000
        lat.extend((r["ts"], now - r["ts"]) for r in page["results"])
        nxt = str(page["next"])
    for t in threads:
        t.join()
    silent_from = t0 + 2000
    after = [ms for ts, ms in lat if silent_from + 300 <= ts <= t0 + 4700]
    # S3 never writes again and nothing ends the query: without idle advances these results would not exist.
    # Their latency is reported, not asserted (tests assert no timings).
    assert len(after) >= 5, f"only {len(after)} results with heads after the third site went silent"
    print(f"results after the silence: {len(after)}, latency max {max(after):.0f} ms (idle timeout 1 s)")
    wait_exact(services, q, out["run"], origin, rec, tmp_path, min_results=20)
    assert any(k[0] == "S3" for k in advances(services.bootstrap, q, out["run"])), "no idle advance was logged"
    services.planner.stop(q.name)


# ----------------------------------------------------------------------------- avro


AVRO_SCHEMA = {"type": "record", "name": "Packet", "fields": [
    {"name": "id", "type": "long"}, {"name": "ts", "type": "long"}, {"name": "dest", "type": "string"},
    {"name": "payload", "type": "string"}]}


def test_avro_with_a_schema_registry(services, make_topic, tmp_path):
    """One stream in Avro (Confluent wire format, schema from a registry), one in JSON."""
    import io
    from dataclasses import replace

    import fastavro
    import orjson

    from joinlib.adapters.kafka import make_producer
    from joinlib.ingest.events import EventGen
    from joinlib.source_spec import SourceSpec
    reg = Registry({7: AVRO_SCHEMA})
    sites = _sites(2)
    services.start_nodes(sites)
    topics = make_topics(make_topic, 2, partitions=2)
    q = live_query(f"lvav{sites[0]}", sites, topics, formats=[{"format": "avro", "registry": reg.url}, {}])
    out = submit(services, q)
    rec = Recorder()
    generator(services.bootstrap, q, rec, streams=["S2"], time_base_ms=0).burst(200)
    parsed = fastavro.parse_schema(AVRO_SCHEMA)
    as_json = replace(q.stream("S1"), source=SourceSpec(topics[0], "json", "ts", "ms", "id"))
    rows = EventGen(as_json, EventProfile(rate=100.0, distinct=40, payload_bytes=20)).take(200)
    p = make_producer(services.bootstrap)

    def delivered(value: bytes):
        def done(err, msg) -> None:
            if err is None:
                rec.add("S1", msg.partition(), msg.offset(), value)
        return done
    for i, r in enumerate(rows):
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, orjson.loads(r.value))
        value = b"\x00" + (7).to_bytes(4, "big") + buf.getvalue()
        if i % 50 == 13:
            value = b"\x00" + (8).to_bytes(4, "big") + buf.getvalue()   # unknown schema id
        elif i % 50 == 29:
            value = b"not avro"
        p.produce(topics[0], value, r.key, on_delivery=delivered(value))
    p.flush(30)
    from joinlib.node.sources import RegistrySchemas
    schemas: dict[str, SchemaLookup] = {"S1": RegistrySchemas(reg.url, None, print)}
    deadline = time.monotonic() + WAIT_S
    while True:
        want = expected_output(q, rec.written, 0, advances(services.bootstrap, q, out["run"]), schemas)
        if results_via_cli(services, q, 0, tmp_path) == want.results or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert results_via_cli(services, q, 0, tmp_path) == want.results and want.count > 20
    dead = {d[0]: d[1] for d in dead_letters(services.bootstrap, q, out["run"])}
    assert dead == want.dead and Counter(dead.values())["bad_avro"] == 8
    services.planner.stop(q.name)
    reg.close()


# ----------------------------------------------------------------------------- restart


def _node_process(site: str, bootstrap: str, redis_url: str, log: Path) -> subprocess.Popen:
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap, "REDIS_URL": redis_url, "METRICS_PORT": "0",
           "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1", "JOINLIB_CHECKPOINT_EVERY_S": "0.5"}
    with open(log, "ab") as fh:
        return subprocess.Popen([sys.executable, "-m", "services.node", "--site", site, "--serve"], cwd=REPO,
                                env=env, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def stop_processes(procs: Any) -> None:
    """Terminate node processes, then kill those that do not end within 15 s."""
    procs = list(procs)
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            p.kill()


def kill_and_restart(procs: dict[str, subprocess.Popen], site: str, log: Path, running: str, after_s: float,
                     bootstrap: str, redis_url: str) -> None:
    """SIGKILL ``site``'s node process once its log says ``running`` and ``after_s`` more have passed (long
    enough to checkpoint, every 0.5 s; a loaded machine may take seconds to start a node), then start it again."""
    _wait_for_text(log, running, timeout_s=60)
    time.sleep(after_s)
    procs[site].send_signal(signal.SIGKILL)
    procs[site].wait(10)
    procs[site] = _node_process(site, bootstrap, redis_url, log)


def _wait_for_text(path: Path, text: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text():
            return
        time.sleep(0.1)
    raise AssertionError(f"{path} has no {text!r} after {timeout_s} s: {path.read_text()[-2000:]}")


def test_killing_a_node_mid_stream_keeps_the_output_exact(services, make_topic, kafka_bootstrap, redis_url,
                                                          tmp_path):
    """Node services as processes with Redis checkpoints; SIGKILL one mid-stream and start it again:
    results and dead letters are still exactly the contract's, each once."""
    sites = _sites()
    logs = {s: tmp_path / f"node-{s}.log" for s in sites}
    procs = {s: _node_process(s, kafka_bootstrap, redis_url, logs[s]) for s in sites}
    try:
        q = live_query(f"lvk{sites[0]}", sites, make_topics(make_topic, 3, partitions=2), window="2s", idle="2s")
        out = submit(services, q, "SM-S1")
        rec = Recorder()
        gen = generator(kafka_bootstrap, q, rec, rate=150.0, late_every=60, malformed_every=70, time_base_ms=0)
        t = threading.Thread(target=gen.run, args=(6.0,))
        t.start()
        victim = sites[1]
        kill_and_restart(procs, victim, logs[victim], f"running query {q.name}", 2.0, kafka_bootstrap, redis_url)
        t.join()
        wait_exact(services, q, out["run"], 0, rec, tmp_path, timeout_s=60, min_results=300)
        assert "resumed from the checkpoint" in logs[victim].read_text(), logs[victim].read_text()[-2000:]
        assert cli(["stop", q.name, "--url", services.url]) == 0
    finally:
        stop_processes(procs.values())
