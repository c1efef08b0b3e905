"""A new reader of a running shared operator starts from the operator's checkpoint, not from its derived topic's
beginning (issue 29, docs/multiquery.md "Where a new reader starts"), on the real broker and Redis; and it keeps the
derived tuples the operator made within a window before its origin ("What a reusing query sees").

Q1 = S1 ⋈ S2 ⋈ S3 as ((S1 ⋈ S2)@y ⋈ S3)@z deploys the shared join; it runs over a first burst of records (event
time 0 s) and checkpoints, handing over an epoch a batch.  A second burst (at 300 s, 1.5 s long) goes through it
before Q2 = S1 ⋈ S2 ⋈ S4 arrives with its origin 0.5 s after that burst's end and reuses the join: Q2's reader must
start at the operator's last mark before its origin minus its window (older derived tuples meet none of its own),
skipping the first burst's batches, and still read the second burst's derived tuples, made before it started.
Those older than Q2's origin join Q2's own S4 records after it: Q2's output must equal the contract's join
exactly, those results included (they were missing while a reader's derived window started at its epoch 0).  The
second test is the same case read from offset 0 (no Redis: no marks).
"""
from __future__ import annotations

import re
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from typing import Optional

import pytest

from joinlib.adapters.redis_checkpoint import RedisCheckpoints
from joinlib.mjoin.marks import DerivedMarks
from joinlib.model import Query, Tup
from joinlib.node.derived_start import reader_mark
from joinlib.node.node_run import run_namespace
from joinlib.protocol import records
from tests.integration.test_live import Recorder, Services, generator, read_topic
from tests.integration.test_shared_operators import (
    _SITE,
    Ingest,
    _query,
    _starts,
    _submit,
    _tree,
    expected,
    wait_exact,
)

LATER = 300_000   # the second burst's event time: well ahead of the operator's idle advances meanwhile
AFTER = 2_000     # Q2's origin after a burst's start: 0.5 s after its end (150 records at 100/s)
S4_RATE = 400.0   # Q2's own S4 records: 150 in the 0.375 s after its origin, all within a window of the burst's


@pytest.fixture(scope="module")
def services(kafka_bootstrap):
    svc = Services(kafka_bootstrap)
    yield svc
    svc.close()


def _marks(redis_url: str, op: str, run: str, node: str) -> DerivedMarks:
    import redis

    from joinlib.adapters.redis_checkpoint import published
    data = published(redis.Redis.from_url(redis_url), run_namespace(op, run), node)
    return DerivedMarks.from_json(data) if data is not None else DerivedMarks(1)


def _wait_marks(redis_url: str, op: str, run: str, node: str, epoch: int, timeout_s: float = 60.0) -> DerivedMarks:
    """The operator's marks once one is at or past ``epoch`` (it has run and checkpointed that far)."""
    deadline = time.monotonic() + timeout_s
    while True:
        marks = _marks(redis_url, op, run, node)
        if marks.marks and marks.marks[-1].epoch >= epoch:
            return marks
        assert time.monotonic() < deadline, f"operator {op}: no checkpoint mark at epoch {epoch} yet: {marks}"
        time.sleep(0.5)


@dataclass(frozen=True)
class _Setup:
    """Q1 deployed over fresh sites and topics (its inner join the shared operator ``op``), Q2 not yet."""

    sites: dict[str, str]
    everything: Query
    q1: Query
    q2: Query
    rec: Recorder
    op: str
    op_st: dict
    shared: Ingest
    ing1: list[Ingest]


def _setup(services, make_topic, prefix: str, redis_url: Optional[str]) -> _Setup:
    tag = prefix + uuid.uuid4().hex[:6]
    sites = {"S1": f"x{tag}", "S2": f"y{tag}", "S3": f"z{tag}", "S4": f"w{tag}"}
    _SITE.update(sites)
    services.start_nodes(list(sites.values()), redis_url=redis_url, quiet=False)
    topics = {s: make_topic(f"events-{s}", partitions=2) for s in sites}
    q1 = _query(f"q1{tag}", {s: sites[s] for s in ("S1", "S2", "S3")}, topics)
    q2 = _query(f"q2{tag}", {s: sites[s] for s in ("S1", "S2", "S4")}, topics)
    r1 = _submit(services, q1, _tree("S3", sites["S3"], sites["S2"]), "0")
    op = r1["deployed"][0]
    op_st = services.planner.status(op)
    shared = Ingest(op, op_st["run"], op_st["origin_ms"], ["S1", "S2"])
    return _Setup(sites, _query(f"all{tag}", sites, topics), q1, q2, Recorder(), op, op_st, shared,
                  [shared, Ingest(q1.name, r1["run"], 0, ["S3"])])


def _reuse(services, su: _Setup, origin: int, tmp_path) -> None:
    """Q2 reusing the operator with ``origin``, its own S4 records just after it: exact, results that need derived
    tuples made before its origin included."""
    bs = services.bootstrap
    starts = _starts(bs, su.everything, ["S4"])
    r2 = _submit(services, su.q2, _tree("S4", su.sites["S4"], su.sites["S2"]), str(origin))
    assert r2["reused"] == [su.op]
    generator(bs, su.everything, su.rec, time_base_ms=origin, id_base=20_000, seed=3, streams=["S4"],
              rate=S4_RATE).burst(150)
    ing2 = [su.shared, Ingest(su.q2.name, r2["run"], origin, ["S4"], starts)]
    want = wait_exact(services, su.q2, origin, su.rec, ing2, tmp_path, min_results=20)
    _need_older_tuples(bs, su.q2, origin, su.rec, ing2, want)


def test_a_new_reader_starts_from_the_operators_checkpoint(services, make_topic, redis_url, tmp_path, capfd):
    su = _setup(services, make_topic, "r", redis_url)
    bs, y, q1, q2, op_st = services.bootstrap, su.sites["S2"], su.q1, su.q2, su.op_st
    producer = f"{su.op}.mj0"
    generator(bs, su.everything, su.rec, time_base_ms=0, streams=["S1", "S2", "S3"]).burst(150)
    wait_exact(services, q1, 0, su.rec, su.ing1, tmp_path, min_results=20)
    # the operator has handed the first burst's epochs over (1.5 s: epochs 0-14) and checkpointed past them
    _wait_marks(redis_url, producer, op_st["run"], y, 20)
    generator(bs, su.everything, su.rec, time_base_ms=LATER, id_base=10_000, seed=2,
              streams=["S1", "S2", "S3"]).burst(150)
    wait_exact(services, q1, 0, su.rec, su.ing1, tmp_path, min_results=40)   # the operator made the burst's tuples

    # (1) exact, as from offset 0, results that need derived tuples made before Q2's origin included
    origin = LATER + AFTER
    _reuse(services, su, origin, tmp_path)

    # (2) the reader started at the operator's mark, past the first burst's batches
    log = capfd.readouterr().err
    found = re.search(rf"{re.escape(q2.name)}\.mj\d+: reads derived\.{re.escape(producer)} from offset (\d+), "
                      r"operator \S+'s checkpoint at its epoch (\d+)", log)
    assert found, [ln for ln in log.splitlines() if "derived." in ln][-5:]
    offset, epoch = int(found.group(1)), int(found.group(2))
    horizon = origin - 1000 - op_st["origin_ms"]   # Q2's origin minus its window, in the operator's time
    assert offset > 0 and 20 <= epoch and epoch * 100 <= horizon, (offset, epoch)
    below = [records.decode_source_batch(m.value()) for m in read_topic(bs, f"derived.{producer}", op_st["run"])
             if m.offset() < offset]
    assert len(below) == offset and all(b.watermark <= horizon for b in below)
    assert sum(len(b.tuples) for b in below) > 0, "the first burst's derived tuples lie below the mark"

    services.planner.stop(q1.name)
    services.planner.stop(q2.name)


def _need_older_tuples(bs: str, q: Query, origin: int, rec: Recorder, ingests: list[Ingest], want: Counter) -> None:
    """Some of ``want`` (the contract's results) need a shared S1 or S2 record older than ``q``'s origin: the case
    the test is about (without them the reader's derived window would not need its tuples from before the origin)."""
    shared = [i for i in ingests if "S1" in i.streams]
    newer = [_Newer(i, origin) for i in shared] + [i for i in ingests if "S1" not in i.streams]
    older = sum((want - expected(bs, q, origin, rec, newer)).values())
    assert older >= 10, f"{q.name}: only {older} results need tuples from before its origin: the data is too thin"


class _Newer(Ingest):
    """An ingest's on-time records at or after ``origin`` (event time as written) only."""

    def __init__(self, ing: Ingest, origin: int) -> None:
        super().__init__(ing.name, ing.run, ing.origin, ing.streams, ing.starts)
        self.cut = origin - ing.origin   # the origin in the ingest's time

    def on_time(self, bs: str, q: Query, rec: Recorder) -> dict[str, list[Tup]]:
        return {s: [t for t in tups if t.ts >= self.cut] for s, tups in super().on_time(bs, q, rec).items()}


def test_a_reader_reading_from_offset_0_keeps_the_derived_tuples_before_its_origin(services, make_topic, tmp_path,
                                                                                    capfd):
    """No Redis: the reader reads the derived topic from the beginning; Q2's origin 0.5 s after the operator's
    only burst, its results that need that burst's derived tuples exact."""
    su = _setup(services, make_topic, "o", None)
    generator(services.bootstrap, su.everything, su.rec, time_base_ms=0, streams=["S1", "S2", "S3"]).burst(150)
    wait_exact(services, su.q1, 0, su.rec, su.ing1, tmp_path, min_results=20)
    _reuse(services, su, AFTER, tmp_path)
    assert re.search(rf"{re.escape(su.q2.name)}\.mj\d+: reads derived\.{re.escape(su.op)}\.mj0 from the beginning: "
                     "no Redis", capfd.readouterr().err)
    services.planner.stop(su.q1.name)
    services.planner.stop(su.q2.name)


class _Run:
    """What :func:`reader_mark` reads of a run: its query's name, its log, its store factory's Redis client."""

    def __init__(self, client) -> None:
        self.q = type("Q", (), {"name": "q.mj1"})()
        self.factory = type("F", (), {"client": client})() if client is not None else None
        self.lines: list[str] = []
        self.svc = type("Svc", (), {"log": self.lines.append})()


def test_a_reader_without_a_usable_checkpoint_reads_from_the_beginning_and_says_why(redis_url):
    import redis
    client = redis.Redis.from_url(redis_url)
    op, run, node = f"op-{uuid.uuid4().hex[:8]}.mj0", uuid.uuid4().hex[:12], "y"
    ext = {"op": op, "run": run, "origin_ms": 0}
    topic = f"derived.{op}"

    def start(r: _Run, horizon: int):
        return reader_mark(r, topic, ext, node, horizon), r.lines[-1]

    assert start(_Run(None), 5000) == (None, f"q.mj1: reads {topic} from the beginning: no Redis here to find "
                                             f"operator {op}'s checkpoints in")
    got, line = start(_Run(client), 5000)
    assert got is None and line.endswith(f"operator {op} (run {run}) has no checkpoint at {node} yet")
    store = RedisCheckpoints(client, run_namespace(op, run), node)
    try:
        store.save(b"checkpoint", b"{not json")
        got, line = start(_Run(client), 5000)
        assert got is None and "checkpoint marks do not decode" in line
        store.save(b"checkpoint", DerivedMarks(100).add(20, 17).add(45, 40).to_json())
        got, line = start(_Run(client), 1000)
        assert got is None and "checkpoints all come after 1000 ms of its time" in line
        assert start(_Run(client), 4499) == ((17, 2000), f"q.mj1: reads {topic} from offset 17, operator {op}'s "
                                                         "checkpoint at its epoch 20: the messages before it hold no "
                                                         "tuple this run keeps")
        assert start(_Run(client), 4500)[0] == (40, 4500)
    finally:
        store.clear()
    assert client.get(store.tag + "#published") is None   # cleared with the checkpoint
