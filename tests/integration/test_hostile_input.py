"""Hostile input on the real broker (and Redis): garbage on a live query's source topics, on the
nodes' inbound topics and on the control topic (issue 16, item 2).

A planner and three node services run as processes (``python -m services.planner``, ``python -m
services.node --serve`` with Redis checkpoints), exactly as deployed.  Garbage comes from a seeded
random generator (:class:`Garbage`): random bytes, truncated Avro (and JSON), valid Avro with fields of
the wrong types or content, tombstones, bad headers and records of ~900 kB (the most a producer with
the default ``message.max.bytes`` of 1 MB can write).  The tests show:

* source topics: every bad record is in ``dlq.<query>`` with its reason and the good ones give exactly
  the reference join (the live contract, ``joinlib.ingest.contract``);
* ``node.<query>.<site>`` and ``control``: every message that does not decode or validate is rejected
  with a logged error and ``joinlib_rejected_messages_total{site, topic, reason}``; a control message
  that fails validation changes nothing (the query keeps running under the same run, nothing starts);
* the processes stay up and serve a new query afterwards with exactly the reference output.

The tests of this module run in order on one set of processes (module fixture).
"""
from __future__ import annotations

import io
import json
import os
import random
import re
import subprocess
import sys
import time
import urllib.request
import uuid
from collections import Counter
from pathlib import Path
from typing import Any, Optional

import pytest

from joinlib.ingest.contract import expected_output
from joinlib.ingest.events import EventGen, EventProfile
from joinlib.model import Query, Tup
from joinlib.protocol import avro, records, wire
from joinlib.protocol.messages import (
    DjaUpdate,
    Envelope,
    ExpiryUpdate,
    KeyBatch,
    KeyFilter,
    ShippedBatch,
    TupleBatch,
    WindowSnapshot,
)
from joinlib.query import parse_query, query_to_dict
from tests.integration.registry import Registry
from tests.integration.test_live import (
    AVRO_SCHEMA,
    Recorder,
    _free_port,
    advances,
    dead_letters,
    results_via_cli,
    source_of,
)

REPO = Path(__file__).resolve().parents[2]
WAIT_S = 60
HUGE = 900_000       # below the producer's default message.max.bytes (1 MB)
SEED = int(os.environ.get("JOINLIB_FUZZ_SEED", "16"))

# valid Avro, wrong field types: what a producer with another schema writes under its schema id
WRONG_AVRO_SCHEMA = {"type": "record", "name": "Packet", "fields": [
    {"name": "id", "type": "string"}, {"name": "ts", "type": "string"}, {"name": "dest", "type": "long"},
    {"name": "payload", "type": "boolean"}]}
GOOD_ID, WRONG_ID, UNKNOWN_ID = 1, 2, 99


# ----------------------------------------------------------------------------- the processes

class Stack:
    """A planner and node services as processes; their logs and metrics ports."""

    def __init__(self, bootstrap: str, redis_url: str, tmp: Path) -> None:
        self.bootstrap, self.redis_url, self.tmp = bootstrap, redis_url, tmp
        self.env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap, "PYTHONPATH": str(REPO),
                    "PYTHONUNBUFFERED": "1"}
        self.procs: dict[str, subprocess.Popen] = {}
        self.cmds: dict[str, tuple[list[str], dict]] = {}
        self.logs: dict[str, Path] = {}
        self.metrics: dict[str, int] = {}
        tag = uuid.uuid4().hex[:6]
        self.sites = [f"h{c}{tag}" for c in "xyz"]
        port = _free_port()
        self.url = f"http://127.0.0.1:{port}"
        self._start("planner", [sys.executable, "-m", "services.planner", "--port", str(port),
                                "--metrics-port", str(self._metrics_port("planner"))], self.env)
        for s in self.sites:
            env = {**self.env, "REDIS_URL": redis_url, "METRICS_PORT": str(self._metrics_port(s)),
                   "JOINLIB_CHECKPOINT_EVERY_S": "0.5"}
            self._start(s, [sys.executable, "-m", "services.node", "--site", s, "--serve"], env)
        deadline = time.monotonic() + 60
        while True:
            try:
                if urllib.request.urlopen(f"{self.url}/healthz", timeout=2).read().strip() == b"ok":
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, f"the planner did not start: {self.log('planner')[-2000:]}"
            self.assert_alive()
            time.sleep(0.3)

    def _metrics_port(self, name: str) -> int:
        self.metrics[name] = _free_port()
        return self.metrics[name]

    def _start(self, name: str, cmd: list[str], env: dict) -> None:
        self.cmds[name] = (cmd, env)
        self.logs[name] = self.tmp / f"{name}.log"
        with open(self.logs[name], "ab") as fh:
            self.procs[name] = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=fh, stderr=subprocess.STDOUT,
                                                stdin=subprocess.DEVNULL)

    def kill(self, name: str) -> None:
        """SIGKILL a process (a crash)."""
        import signal
        self.procs[name].send_signal(signal.SIGKILL)
        self.procs[name].wait(10)

    def restart(self, name: str) -> None:
        """Start a killed process again, same command, environment and metrics port."""
        self._start(name, *self.cmds[name])

    def log(self, name: str) -> str:
        return self.logs[name].read_text(errors="replace")

    def assert_alive(self) -> None:
        for name, p in self.procs.items():
            assert p.poll() is None, f"{name} exited with {p.returncode}:\n{self.log(name)[-3000:]}"
        for name in self.procs:
            bad = [ln for ln in self.log(name).splitlines()
                   if "Traceback" in ln or re.search(r"query \S+ .*failed", ln)]
            assert not bad, f"{name} logged a failure:\n{self.log(name)[-4000:]}"

    def http(self, method: str, path: str, body: Optional[bytes] = None) -> Any:
        req = urllib.request.Request(f"{self.url}{path}", data=body, method=method)
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())

    def submit(self, query: Query, plan: str, since: str = "0") -> dict:
        import yaml
        return self.http("POST", f"/queries?plan={plan}&since={since}", yaml.safe_dump(query_to_dict(query)).encode())

    def rejected(self, name: str) -> Counter:
        """joinlib_rejected_messages_total of one process: (topic, reason) -> count."""
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics[name]}/metrics", timeout=10).read().decode()
        out: Counter = Counter()
        for m in re.finditer(r'^joinlib_rejected_messages_total\{([^}]*)\} (\S+)$', text, re.M):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
            out[(labels["topic"], labels["reason"])] += float(m.group(2))  # type: ignore[assignment]  # counts as Prometheus floats
        return out

    def close(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.terminate()
        for p in self.procs.values():
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)


@pytest.fixture(scope="module")
def stack(kafka_bootstrap, redis_url, tmp_path_factory):
    s = Stack(kafka_bootstrap, redis_url, tmp_path_factory.mktemp("hostile"))
    yield s
    s.close()


@pytest.fixture(scope="module")
def registry():
    reg = Registry({GOOD_ID: AVRO_SCHEMA, WRONG_ID: WRONG_AVRO_SCHEMA})
    yield reg
    reg.close()


@pytest.fixture(scope="module")
def state() -> dict:
    """What the tests of this module hand on to each other (they run in order)."""
    return {}


# ----------------------------------------------------------------------------- queries and records

def hostile_query(name: str, sites: list[str], topics: list[str], registry_url: str) -> Query:
    """S1 (json) - S2 (avro, schemas from a registry) - S3 (json), a chain on dest."""
    streams = {}
    for i, (site, topic) in enumerate(zip(sites, topics, strict=True)):
        src: dict = {"topic": topic, "format": "json", "time": {"field": "ts", "unit": "ms"}, "id": "id"}
        if i == 1:
            src = {**src, "format": "avro", "registry": registry_url}
        streams[f"S{i + 1}"] = {"site": site, "window": "1s", "source": src}
    doc = {"name": name, "streams": streams, "join": ["S1.dest = S2.dest", "S2.dest = S3.dest"],
           "execution": {"interval": "100ms", "max_delay": "80ms", "idle_timeout": "3s"}}
    return parse_query(doc, name)


def avro_value(schema_id: int, row: dict, schema: dict = AVRO_SCHEMA) -> bytes:
    import fastavro
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), row)
    return b"\x00" + schema_id.to_bytes(4, "big") + buf.getvalue()


class Writer:
    """Writes records to a query's source topics and records each as written (stream, partition,
    offset, value) for the contract."""

    def __init__(self, bootstrap: str, query: Query, rec: Recorder) -> None:
        from joinlib.adapters.kafka import make_producer
        self.q, self.rec = query, rec
        self.p = make_producer(bootstrap, **{"enable.idempotence": True, "acks": "all", "linger.ms": 5,
                                             "message.max.bytes": 1_000_000})
        self.failed: list[str] = []

    def write(self, stream: str, value: Optional[bytes], key: Optional[bytes] = None,
              partition: Optional[int] = None) -> None:
        def done(err, msg) -> None:
            if err is None:
                self.rec.add(stream, msg.partition(), msg.offset(), value)
            else:
                self.failed.append(str(err))
        topic = source_of(self.q.stream(stream)).topic
        kw: dict[str, Any] = {} if partition is None else {"partition": partition}
        while True:
            try:
                self.p.produce(topic, value, key, on_delivery=done, **kw)
                break
            except BufferError:
                self.p.poll(0.05)
        self.p.poll(0)

    def flush(self) -> None:
        assert self.p.flush(30) == 0
        assert not self.failed, self.failed[:3]


def good_records(query: Query, n: int, *, seed: int, time_base_ms: int, id_base: int) -> dict[str, list[Any]]:
    """n well-formed records per stream (JSON; the avro stream's are converted when written)."""
    from dataclasses import replace

    from joinlib.source_spec import SourceSpec
    prof = EventProfile(rate=100.0, distinct=30, payload_bytes=20, disorder_ms=60)
    out = {}
    for s in query.streams:
        as_json = replace(s, source=SourceSpec(source_of(s).topic, "json", "ts", "ms", "id"))
        out[s.name] = EventGen(as_json, prof, seed=seed + s.pos, time_base_ms=time_base_ms,
                               id_base=id_base).take(n)
    return out


def write_good(w: Writer, recs: dict[str, list[Any]], lo: int, hi: int) -> None:
    import orjson
    for i in range(lo, hi):
        for name, rows in recs.items():
            r = rows[i]
            avro = source_of(w.q.stream(name)).format == "avro"
            value = avro_value(GOOD_ID, orjson.loads(r.value)) if avro else r.value
            w.write(name, value, r.key)


# ----------------------------------------------------------------------------- garbage

class Garbage:
    """Seeded hostile values; ``kinds`` counts what was made."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.kinds: Counter = Counter()

    def random_bytes(self, lo: int = 0, hi: int = 200) -> bytes:
        return self.rng.randbytes(self.rng.randint(lo, hi))

    def truncated(self, value: bytes) -> bytes:
        return value[: self.rng.randrange(0, max(1, len(value) - 1))]

    def huge(self) -> bytes:
        return self.rng.randbytes(HUGE)

    # ---- records of a JSON source
    def json_record(self, good: bytes, next_id: int) -> tuple[str, Optional[bytes]]:
        rng = self.rng
        row = json.loads(good)
        choice = rng.choice(["bytes", "truncated", "wrong_type", "missing", "nested", "huge_bad", "huge_ok",
                             "tombstone", "not_object", "bigint"])
        self.kinds[choice] += 1
        if choice == "bytes":
            return choice, self.random_bytes()
        if choice == "truncated":
            return choice, self.truncated(good)
        if choice == "wrong_type":
            field = rng.choice(["id", "ts", "dest"])
            row[field] = rng.choice(["x", 1.5, [1, 2], {"a": 1}, True, None, "2024-13-45"])
            return choice, json.dumps(row).encode()
        if choice == "missing":
            row.pop(rng.choice(["id", "ts", "dest"]))
            return choice, json.dumps(row).encode()
        if choice == "nested":
            return choice, json.dumps({"id": next_id, "ts": {"ms": row["ts"]}, "dest": row["dest"]}).encode()
        if choice == "huge_bad":
            return choice, self.huge()
        if choice == "huge_ok":  # well formed, ~900 kB of payload (not carried: no attributes)
            row.update(id=next_id, payload="p" * HUGE)
            return choice, json.dumps(row).encode()
        if choice == "tombstone":
            return choice, None
        if choice == "not_object":
            return choice, rng.choice([b"[1,2,3]", b"42", b'"s"', b"null", b"{}"])
        row.update(id=2**70)
        return choice, json.dumps(row).encode()

    # ---- records of the Avro source
    def avro_record(self, good_row: dict, next_id: int) -> tuple[str, bytes]:
        rng = self.rng
        choice = rng.choice(["bytes", "header_bytes", "truncated", "wrong_types", "unknown_id", "huge_bad",
                             "huge_ok", "short"])
        self.kinds["avro_" + choice] += 1
        good = avro_value(GOOD_ID, good_row)
        if choice == "bytes":
            return choice, self.random_bytes()
        if choice == "header_bytes":
            return choice, b"\x00" + GOOD_ID.to_bytes(4, "big") + self.random_bytes(1, 60)
        if choice == "truncated":
            return choice, good[: rng.randrange(5, len(good) - 1)]
        if choice == "wrong_types":
            return choice, avro_value(WRONG_ID, {"id": "seven", "ts": "yesterday", "dest": 12, "payload": True},
                                      WRONG_AVRO_SCHEMA)
        if choice == "unknown_id":
            return choice, b"\x00" + UNKNOWN_ID.to_bytes(4, "big") + good[5:]
        if choice == "huge_bad":
            return choice, b"\x00" + GOOD_ID.to_bytes(4, "big") + self.huge()
        if choice == "huge_ok":
            return choice, avro_value(GOOD_ID, {**good_row, "id": next_id, "payload": "q" * HUGE})
        return choice, good[:3]

    # ---- envelopes for node.<query>.<site>
    def tup(self, pos: int) -> Tup:
        rng = self.rng
        key = tuple(rng.choice(["10.0.0.1", 7, 2.5, True, None]) for _ in range(rng.randint(0, 3)))
        return Tup(pos, rng.randrange(-5, 1 << 40), rng.randrange(-5, 1 << 30), rng.randrange(0, 1000), key,
                   self.random_bytes(0, 20))

    def body(self) -> Any:
        rng = self.rng
        pos = rng.randrange(0, 5)
        keys = [(rng.choice(["a", 1, 2.5]),) for _ in range(rng.randint(0, 4))]
        return rng.choice([
            lambda: TupleBatch([tuple(self.tup(rng.randrange(0, 4)) for _ in range(rng.randint(1, 3)))
                                for _ in range(rng.randint(0, 3))]),
            lambda: KeyBatch(keys),
            lambda: ExpiryUpdate(rng.randrange(0, 50), [rng.randrange(0, 9) for _ in range(rng.randint(0, 3))]),
            lambda: DjaUpdate(keys, [rng.randrange(-3, 9) for _ in keys], [self.tup(pos)], [1]),
            lambda: WindowSnapshot(rng.randrange(0, 100), [self.tup(pos)], keys, [1 for _ in keys]),
            lambda: KeyFilter(rng.randrange(0, 5), rng.randrange(0, 5), keys),
            lambda: ShippedBatch([self.tup(pos)], [1]),
        ])()

    def envelope(self, sites: list[str], dst: str) -> tuple[str, str, Optional[bytes], Optional[bytes], list]:
        """(kind, sender, key, value, extra headers) of one hostile message for the flow topic
        ``node.<query>.<dst>.from.<sender>``."""
        rng = self.rng
        src = rng.choice([s for s in sites if s != dst])
        key = src.encode()
        # far-future epochs: a forged envelope that happens to fit a real flow is only used at that epoch
        env = Envelope(key.decode(), dst, rng.randrange(0, 40), rng.randrange(10**6, 10**7), self.body(),
                       rng.choice([0, 0, 1, 7]), rng.choice([0, 0, 1, 3]))
        encoded = wire.encode_envelope(env)
        value: Optional[bytes] = encoded
        choice = rng.choice(["bytes", "truncated", "content", "content", "huge", "tombstone", "bad_key",
                             "bad_sent", "out_of_range"])
        self.kinds["env_" + choice] += 1
        headers: list = []
        if choice == "bytes":
            value = self.random_bytes(0, 300)
        elif choice == "truncated":
            value = self.truncated(encoded)
        elif choice == "huge":
            value = self.huge()
        elif choice == "tombstone":
            value = None
        elif choice == "bad_key":
            key = b"\xff\xfe" + self.random_bytes(1, 8)
        elif choice == "bad_sent":
            headers = [("sent_ms", rng.choice([b"soon", b"nan", b"inf", b"", b"\xff"]))]
        elif choice == "out_of_range":   # part beyond an Avro int, or a body branch that does not exist
            value = rng.choice([avro.encode_long(1 << 40) + encoded[1:], encoded[:4] + b"\x7e" + encoded[5:]])
        return choice, src, key, value, headers

    # ---- control messages
    def control(self, query: str, run: str, good_plan: dict) -> tuple[str, Optional[bytes], bytes]:
        """(kind, key, value) of one hostile control message aimed at ``query`` (run ``run``)."""
        rng = self.rng
        enc = records.encode_control

        def raw(kind: str, payload_text: str) -> bytes:  # a Control with any payload text
            import fastavro
            buf = io.BytesIO()
            fastavro.schemaless_writer(buf, records._CONTROL, {"query": query, "kind": kind, "payload": payload_text})
            return buf.getvalue()
        other = {**good_plan, "run": "forged"}
        choices = {
            "bytes": lambda: self.random_bytes(0, 300),
            "truncated": lambda: self.truncated(enc(records.Control(query, "stop", {"run": run}))),
            "huge": lambda: self.huge(),
            "not_json": lambda: raw("stop", "{run: " + run),
            "stop_wrong_type": lambda: enc(records.Control(query, "stop", {"run": [run]})),
            "stop_list": lambda: enc(records.Control(query, "stop", [run])),
            "end_wrong_type": lambda: enc(records.Control(query, "end", {"last_epoch": "3", "run": run})),
            "unknown_kind": lambda: enc(records.Control(query, "reboot", {"run": run})),
            "plan_bad_query": lambda: enc(records.Control(query, "plan", {**other, "query": {"streams": 5}})),
            "plan_bad_plan": lambda: enc(records.Control(query, "plan", {**other, "plan": {"S1": [["S9", "XX"]]}})),
            "plan_path": lambda: enc(records.Control(query, "plan", {**other, "plan": "/etc/passwd"})),
            "plan_other_name": lambda: enc(records.Control(query + "x", "plan", other)),
            "status_wrong_types": lambda: enc(records.Control(query, "status", {"site": "x", "run": run, "t_ms": "now",
                                                                             "inputs": {"S1": "many"}})),
            "done_wrong_types": lambda: enc(records.Control(query, "done",
                                                            {"site": ["x"], "run": run, "results": "3"})),
        }
        choice = rng.choice(sorted(choices))
        self.kinds["ctl_" + choice] += 1
        key = rng.choice([query.encode(), None, b"\xff"])
        return choice, key, choices[choice]()


# ----------------------------------------------------------------------------- checks

def wait_exact(stack: Stack, q: Query, run: str, rec: Recorder, schemas: dict, tmp_path: Path,
               min_results: int) -> Any:
    """Poll until the results equal the contract's; then the dead letters must equal it too."""
    deadline = time.monotonic() + WAIT_S
    while True:
        want = expected_output(q, rec.written, 0, advances(stack.bootstrap, q, run), schemas)
        got = results_via_cli(stack, q, 0, tmp_path)
        if got == want.results:
            break
        if time.monotonic() > deadline:
            missing, extra = want.results - got, got - want.results
            stack.assert_alive()
            raise AssertionError(f"{q.name}: {sum(missing.values())} results missing, {sum(extra.values())} "
                                 f"extra (of {want.count})")
        time.sleep(1.0)
    assert want.count >= min_results, f"only {want.count} results"
    dead = dead_letters(stack.bootstrap, q, run)
    places = [d[0] for d in dead]
    assert len(places) == len(set(places)), "a record is in the dead-letter topic twice"
    assert {d[0]: d[1] for d in dead} == want.dead
    values = {(source_of(s).topic, w.part, w.offset): w.value for s in q.streams for w in rec.written.get(s.name, [])}
    assert all(values[where] == value for where, _, value in dead), "a dead letter lost its bytes"
    assert sum(len(v) for v in want.on_time.values()) + len(want.dead) == rec.count()
    return want


def schemas_for(q: Query, registry_url: str) -> dict:
    from joinlib.node.sources import RegistrySchemas
    return {"S2": RegistrySchemas(registry_url, None, print)}


def run_clean_query(stack: Stack, make_topic, registry, tmp_path: Path, plan: str, seed: int) -> tuple:
    q = hostile_query(f"hq{uuid.uuid4().hex[:6]}", stack.sites,
                      [make_topic(f"hostile-src-{i}", partitions=2) for i in range(3)], registry.url)
    out = stack.submit(q, plan)
    rec = Recorder()
    w = Writer(stack.bootstrap, q, rec)
    recs = good_records(q, 200, seed=seed, time_base_ms=0, id_base=0)
    write_good(w, recs, 0, 200)
    w.flush()
    want = wait_exact(stack, q, out["run"], rec, schemas_for(q, registry.url), tmp_path, min_results=30)
    return q, out, rec, want


# ----------------------------------------------------------------------------- tests

def test_garbage_on_source_topics_goes_to_the_dead_letter_topic(stack, make_topic, registry, state, tmp_path):
    """Random bytes, truncated JSON and Avro, wrong field types (JSON, and valid Avro written with
    another schema), unknown schema ids, tombstones and ~900 kB records between the good records of a
    live 3-site query: the results are exactly the reference join of the good ones, every bad record
    is in dlq.<query> once with its reason and its original bytes."""
    t0 = time.monotonic()
    q = hostile_query(f"hs{uuid.uuid4().hex[:6]}", stack.sites,
                      [make_topic(f"hostile-src-{i}", partitions=2) for i in range(3)], registry.url)
    out = stack.submit(q, "SM-S1")
    rec, g = Recorder(), Garbage(SEED)
    w = Writer(stack.bootstrap, q, rec)
    n = 300
    recs = good_records(q, n, seed=SEED, time_base_ms=0, id_base=0)
    next_id = 10**9
    for lo in range(0, n, 30):
        write_good(w, recs, lo, lo + 30)
        for _ in range(6):
            next_id += 1
            stream = g.rng.choice(["S1", "S2", "S3"])
            good = recs[stream][g.rng.randrange(lo, lo + 30)]
            value: Optional[bytes]
            if stream == "S2":
                _, value = g.avro_record(json.loads(good.value), next_id)
            else:
                _, value = g.json_record(good.value, next_id)
            w.write(stream, value, g.rng.choice([good.key, None, b"\xff\x00"]), g.rng.randrange(2))
        w.flush()
    want = wait_exact(stack, q, out["run"], rec, schemas_for(q, registry.url), tmp_path, min_results=100)
    reasons = Counter(want.dead.values())
    assert {"bad_json", "bad_avro", "wrong_type", "missing_field", "no_value"} <= set(reasons), reasons
    assert sum(reasons.values()) >= 50
    stack.assert_alive()
    state.update(query=q, run=out["run"], rec=rec, want=want)
    print(f"\nsource garbage: {dict(g.kinds)}; dead letters {dict(reasons)}; {want.count} results; "
          f"{time.monotonic() - t0:.1f}s")


def test_garbage_on_node_topics_is_rejected_logged_and_counted(stack, kafka_bootstrap, state, tmp_path):
    """Random bytes, truncated envelopes, valid envelopes with wrong content (unknown instances and flows,
    bodies of the wrong class, out-of-range fields), bad keys and headers, tombstones and ~900 kB values
    on every flow topic node.<query>.<site>.from.<peer> of the running query (with its run header): each node
    rejects them with a logged error and a counter; nothing crashes and the query's output is unchanged."""
    from joinlib.adapters.kafka import inbound_topics, make_producer, node_topic
    q, run = state["query"], state["run"]
    g = Garbage(SEED + 1)

    def inbound(topic: str, site: str) -> bool:
        return topic in inbound_topics(q.name, site, q.nodes)
    p = make_producer(kafka_bootstrap, **{"message.max.bytes": 1_000_000})
    before = {s: stack.rejected(s) for s in stack.sites}
    sent: Counter = Counter()
    for _ in range(60):
        for site in stack.sites:
            choice, src, key, value, headers = g.envelope(stack.sites, site)
            p.produce(node_topic(q.name, site, src), value, key,
                      headers=[("run", run.encode()), ("sent_ms", str(int(time.time() * 1000)).encode()),
                               *headers] if choice != "bad_sent" else [("run", run.encode()), *headers])
            sent[(site, choice)] += 1
        p.poll(0)
    assert p.flush(30) == 0
    deadline = time.monotonic() + 60
    while True:
        after = {s: stack.rejected(s) for s in stack.sites}
        got = {s: Counter({k: v - before[s].get(k, 0) for k, v in after[s].items()}) for s in stack.sites}
        reasons = {s: {r for (t, r), v in got[s].items() if inbound(t, s) and v > 0} for s in stack.sites}
        # every message is rejected, but for forged envelopes that fit a flow of the plan (far-future epochs)
        counted = {s: sum(v for (t, _), v in got[s].items() if inbound(t, s)) for s in stack.sites}
        written = {s: sum(v for (site, _), v in sent.items() if site == s) for s in stack.sites}
        if all(reasons[s] >= {"undecodable", "invalid", "bad_header"} and counted[s] >= 0.8 * written[s]
               for s in stack.sites):
            break
        assert time.monotonic() < deadline, f"rejections per node: {got} of {written}"
        time.sleep(1)
    for s in stack.sites:
        assert f"rejected a message of node.{q.name}.{s}.from." in stack.log(s)
    stack.assert_alive()
    assert results_via_cli(stack, q, 0, tmp_path) == state["want"].results
    print(f"\nnode-topic garbage: {dict(g.kinds)}; rejected per node: "
          f"{ {s: dict(c) for s, c in got.items()} }")


def test_invalid_control_messages_are_rejected_and_change_nothing(stack, kafka_bootstrap, state, tmp_path):
    """Garbage and invalid control messages aimed at the running query (a stop with a wrong-typed run,
    plans that do not compile or name a file, an end with a string epoch, status and done of the wrong
    shapes, unknown kinds, ~900 kB of bytes): the nodes and the planner reject each with a logged error
    and a counter; the query keeps running under the same run and its output is unchanged; no query is
    started or listed."""
    from joinlib.adapters.kafka import CONTROL_TOPIC, make_producer
    q, run = state["query"], state["run"]
    g = Garbage(SEED + 2)
    status = stack.http("GET", f"/queries/{q.name}")
    good_plan = {"query": query_to_dict(q), "plan": status["plan"], "run": run, "nodes": stack.sites}
    before = {s: stack.rejected(s) for s in [*stack.sites, "planner"]}
    p = make_producer(kafka_bootstrap, **{"message.max.bytes": 1_000_000})
    made: Counter = Counter()
    for _ in range(60):
        choice, key, value = g.control(q.name, run, good_plan)
        p.produce(CONTROL_TOPIC, value, key)
        made[choice] += 1
    assert p.flush(30) == 0
    n = sum(made.values())
    deadline = time.monotonic() + 60
    while True:
        got = {s: sum(v - before[s].get(k, 0) for k, v in stack.rejected(s).items() if k[0] == CONTROL_TOPIC)
               for s in before}
        if all(v >= n for v in got.values()):
            break
        assert time.monotonic() < deadline, f"control rejections: {got} of {n} ({dict(made)})"
        time.sleep(1)
    assert all(v == n for v in got.values()), got     # each counted once per process
    for s in before:
        assert "rejected a message of control" in stack.log(s)
    # nothing changed: same run, still running, nodes still reporting; no query named by the garbage
    time.sleep(3)
    st = stack.http("GET", f"/queries/{q.name}")
    assert (st["run"], st["state"]) == (run, "running"), st
    epochs = {s: v.get("epoch") for s, v in st["sites"].items()}
    assert set(epochs) == set(stack.sites), st["sites"]
    names = {x["query"] for x in stack.http("GET", "/queries")}
    assert q.name + "x" not in names
    assert stack.http("GET", "/queries") is not None     # the planner's summaries still compute
    stack.assert_alive()
    assert results_via_cli(stack, q, 0, tmp_path) == state["want"].results
    print(f"\ncontrol garbage: {dict(made)}; rejected: {got}")


def broken_body(cls: type, q: Query, rng: random.Random) -> Optional[Any]:
    """A body of class ``cls`` whose structure no real sender produces: tuples with a join value too many
    or of a stream position the query does not have, keys of different lengths; None where the class has
    no structure to break (ExpiryUpdate: counts only)."""
    def tup() -> Tup:
        s = rng.choice(q.streams)
        pos, n = (s.pos, len(s.join_attrs) + 1) if rng.random() < 0.5 else (len(q.streams) + 2, 1)
        return Tup(pos, rng.randrange(1 << 30), rng.randrange(1 << 20), 0, tuple("k" for _ in range(n)), b"")
    keys = [("a",), ("a", "b")]
    if cls is TupleBatch:
        return TupleBatch([(tup(),)])
    if cls is ShippedBatch:
        return ShippedBatch([tup()], [1])
    if cls is WindowSnapshot:
        return WindowSnapshot(0, [tup()], [], [])
    if cls is DjaUpdate:
        return DjaUpdate(keys, [1, 1], [], [1])
    if cls in (KeyBatch, KeyFilter):
        return cls(keys=keys)
    return None


def test_forged_envelopes_on_real_flows_are_rejected_and_crash_nothing(stack, make_topic, registry,
                                                                        kafka_bootstrap):
    """The hardest garbage for a node: envelopes that fit a real flow of the running plan (instance,
    direction, body class) at the very epochs it is about to process, but whose content no sender produces
    (tuples of a stream position the query lacks or with a join value too many, keys of mixed lengths --
    before the check, such a message failed the query's run with an IndexError in a DJA replica): each is
    rejected as invalid, and the nodes and the query keep running."""
    from joinlib.adapters.kafka import inbound_topics, make_producer, node_topic
    from joinlib.control.check import InboundFlows
    from joinlib.plan import logical as plans
    from joinlib.runtime.deploy import generations
    q = hostile_query(f"hf{uuid.uuid4().hex[:6]}", stack.sites,
                      [make_topic(f"hostile-src-{i}", partitions=2) for i in range(3)], registry.url)
    out = stack.submit(q, "SM-S2")
    [spec] = generations(q, plans.uniform(q, "SM-S2"))
    rng = random.Random(SEED + 4)
    p = make_producer(kafka_bootstrap, **{"message.max.bytes": 1_000_000})
    before = {s: stack.rejected(s) for s in stack.sites}
    forged: Counter = Counter()
    for site in stack.sites:
        for rank, (f, bodies) in InboundFlows(spec.ir, site).flows.items():
            if f.dst != site:
                continue
            for epoch in range(0, 30, 2):
                body = broken_body(rng.choice(bodies), q, rng)
                if body is None:
                    continue
                env = Envelope(f.src, site, rank, epoch, body, 0, 0)
                p.produce(node_topic(q.name, site, f.src), wire.encode_envelope(env), f.src.encode(),
                          headers=[("run", out["run"].encode()), ("sent_ms", str(int(time.time() * 1000)).encode())])
                forged[site] += 1
    assert p.flush(30) == 0 and sum(forged.values()) > 20
    rec = Recorder()
    w = Writer(stack.bootstrap, q, rec)
    write_good(w, good_records(q, 150, seed=SEED + 4, time_base_ms=0, id_base=0), 0, 150)
    w.flush()
    want = wait_exact(stack, q, out["run"], rec, schemas_for(q, registry.url), tmp_path_for(stack), min_results=10)
    for s in stack.sites:
        got = sum(stack.rejected(s)[(t, "invalid")] - before[s][(t, "invalid")]
                  for t in inbound_topics(q.name, s, q.nodes))
        assert got == forged[s], (s, got, forged[s])
    stack.assert_alive()
    assert stack.http("GET", f"/queries/{q.name}")["state"] == "running"
    stack.http("POST", f"/queries/{q.name}/stop")
    print(f"\nforged {dict(forged)} envelopes on real flows at live epochs: all rejected; {want.count} results exact")


def tmp_path_for(stack: Stack) -> Path:
    d = stack.tmp / f"results-{uuid.uuid4().hex[:6]}"
    d.mkdir()
    return d


def test_the_services_still_serve_a_new_query_exactly(stack, make_topic, registry, state, tmp_path):
    """After all of it: the same processes run a new query with exactly the reference output, and the
    old one stops cleanly when asked."""
    q, out, rec, want = run_clean_query(stack, make_topic, registry, tmp_path, "SP-S", SEED + 3)
    assert set(want.dead.values()) <= {"late"}, Counter(want.dead.values())   # no garbage in this one
    for name in (q.name, state["query"].name):
        stack.http("POST", f"/queries/{name}/stop")
    deadline = time.monotonic() + 30
    while stack.http("GET", f"/queries/{state['query'].name}")["state"] != "stopped":
        assert time.monotonic() < deadline, stack.http("GET", f"/queries/{state['query'].name}")
        time.sleep(0.5)
    stack.assert_alive()
