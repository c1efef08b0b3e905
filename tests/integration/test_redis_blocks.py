"""RedisBlockStore's log on a real Redis: whole blocks expire, partially expired ones are cut by their
purge bound on reload, nothing is lost and nothing comes back, the log stays small, and it is written
behind (Redis holds the state of the last flush, never something in between).

The conformance suite (``tests/conformance/test_window_store.py``, kind ``redis-blocks``) checks the store
behaves like the memory store, re-opening it after a flush; these tests check the log itself.
"""
from __future__ import annotations

import time
import uuid

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from joinlib.adapters.redis_blocks import RedisBlockStore
from joinlib.adapters.redis_client import clear_namespace
from joinlib.adapters.redis_store import RedisWindowStore, redis_store_factory
from joinlib.model import Tup
from joinlib.protocol.avro import encode_tuple
from tests.conformance.test_window_store import Model, obs, universes


@pytest.fixture
def rc(redis_url):
    import redis
    c = redis.Redis.from_url(redis_url)
    ns = f"blocks-{uuid.uuid4().hex[:8]}"
    yield c, ns
    clear_namespace(c, ns)
    c.close()


def stream(n: int, per_ms: int = 1) -> list[Tup]:
    """``n`` tuples, ``per_ms`` per ms of event time, keys cycling over 7 values."""
    return [Tup(0, 1000 + i, i // per_ms, i, (i % 7,), b"r%d" % i) for i in range(n)]


def state(s) -> list[tuple]:
    return [obs(t) for t in s.tuples()]


def test_a_sliding_window_keeps_only_its_live_blocks(rc):
    """Window of 300 tuples, blocks of 30, purged by ts every epoch (bounds aligned with blocks and not):
    after 200 epochs the log holds about window / batch blocks, and a reload sees exactly the window."""
    c, ns = rc
    u = stream(300 + 30 * 200)
    s = RedisBlockStore(c, f"{ns}/slide")
    s.add_index((0,))
    for e in range(200):
        s.insert(u[e * 30:(e + 1) * 30])
        s.purge_below(ts=(e + 1) * 30 - 300 + (e % 3) * 7)   # some bounds cut a block in two
        if e % 25 == 0:
            s.flush()
    s.flush()
    assert 10 <= s.records() <= 11 + 1 and c.hlen(s.base + ":d") == s.records()
    again = RedisBlockStore(c, s.prefix)
    assert state(again) == state(s) and len(again) in (300 - 14, 300 - 7, 300)
    got, want = again.lookup((0,), (3,)), s.lookup((0,), (3,))
    assert got is not None and want is not None and [t.seq for t in got.live()] == [t.seq for t in want.live()]


def test_a_partially_expired_block_is_cut_by_its_purge_bound_on_reload(rc):
    c, ns = rc
    u = stream(40)
    s = RedisBlockStore(c, f"{ns}/part")
    s.insert(u[:20])
    s.insert(u[20:])
    assert [t.seq for t in s.purge_below(ts=13)] == list(range(13))
    s.flush()
    assert s.records() == 3                  # two blocks and the bound that cuts the first
    again = RedisBlockStore(c, s.prefix)
    assert [t.seq for t in again.tuples()] == list(range(13, 40))
    s.purge_below(seq=21)                    # the first block is dead now: it goes
    s.flush()
    assert s.records() == 3 and sorted(c.hkeys(s.base + ":d")) == [b"1", b"2", b"3"]  # block 2, both bounds
    assert [t.seq for t in RedisBlockStore(c, s.prefix).tuples()] == list(range(21, 40))


def test_purged_tuples_inserted_again_come_back_and_stay_after_reload(rc):
    """A purge bound applies to the blocks before it only: a re-insert below it is kept."""
    c, ns = rc
    u = stream(30)
    s = RedisBlockStore(c, f"{ns}/again")
    s.insert(u[:20])
    s.purge_below(ts=10)
    s.insert(u[5:8])
    s.flush()
    want = [t.seq for t in s.tuples()]
    assert want == [5, 6, 7] + list(range(10, 20))
    assert [t.seq for t in RedisBlockStore(c, s.prefix).tuples()] == want


def test_nothing_is_written_until_a_flush_and_a_reload_sees_the_last_flush(rc):
    c, ns = rc
    u = stream(100)
    s = RedisBlockStore(c, f"{ns}/behind")
    s.add_index((0,))
    s.insert(u[:10])
    s.purge_below(ts=3)
    assert not c.exists(s.base + ":d", s.base + ":x") and s.dirty()
    s.flush()
    assert not s.dirty()
    flushed = state(s)
    s.insert(u[10:20])
    s.remove_oldest([u[3]])
    assert state(RedisBlockStore(c, s.prefix)) == flushed
    s.flush()
    assert state(RedisBlockStore(c, s.prefix)) == state(s)


def test_a_change_waiting_a_flush_interval_is_flushed_by_the_next_insert(rc):
    """A node that takes no checkpoints (a live adaptive run) still has its windows in Redis, a second behind."""
    c, ns = rc
    u = stream(30)
    s = RedisBlockStore(c, f"{ns}/clock", flush_after_s=0.2)
    s.insert(u[:10])
    assert s.dirty() and not c.exists(s.base + ":d")
    time.sleep(0.25)
    s.insert(u[10:20])
    assert not s.dirty() and [t.seq for t in RedisBlockStore(c, s.prefix).tuples()] == list(range(20))


def test_blocks_dying_before_a_flush_are_never_sent(rc):
    """Between two checkpoints a window slides past blocks made since the first: they cost no write."""
    c, ns = rc
    u = stream(3000)
    s = RedisBlockStore(c, f"{ns}/unsent", flush_after_s=float("inf"))   # no flush by the clock either
    s.flush()
    hset0 = _calls(c, "hset")
    for e in range(100):
        s.insert(u[e * 30:(e + 1) * 30])
        s.purge_below(ts=(e + 1) * 30 - 60)
    s.flush()
    assert _calls(c, "hset") - hset0 == 1 and c.hlen(s.base + ":d") == 2


def _calls(c, cmd: str) -> int:
    return int(c.info("commandstats").get(f"cmdstat_{cmd}", {}).get("calls", 0))


def test_a_long_lived_tuple_does_not_make_the_log_grow(rc):
    """The oldest tuple lives on (a rare key) while the others are removed one by one (the per-key lists of
    SM-S2): no block is a dead prefix, so blocks and remove records pile up until the log carries as many
    dead tuples as live ones (at least 4096); then it is compacted into one block, and so on."""
    c, ns = rc
    s = RedisBlockStore(c, f"{ns}/long")
    s.add_index((0,))
    rare = Tup(0, 1, 0, 0, ("rare",), b"")
    s.insert([rare])
    u = [Tup(0, 1000 + i, i, i, (i % 5,), b"") for i in range(1, 10_001)]
    most = 0
    for e in range(1000):
        s.insert(u[e * 10:(e + 1) * 10])
        gone = [t for kl in s.lookup_many((0,), [(k,) for k in range(5)]).values() for t in kl.live()[:-4]]
        s.remove_oldest(gone)
        assert s._stored <= 2 * len(s) + 4096
        most = max(most, s.records())
        if e % 100 == 0:
            s.flush()
    assert most < 1000 and s.records() < most   # compacted on the way
    s.flush()
    assert state(RedisBlockStore(c, s.prefix)) == state(s)
    assert s.tuples()[0] is rare and len(s) == 21


def test_blocks_of_tuples_with_their_wire_bytes_are_written_as_is(rc):
    """Tuples decoded from Kafka keep their Avro bytes: such a block is those bytes joined (tag A); a block
    with any tuple never encoded is marshalled (tag M); both read back the same tuples."""
    c, ns = rc
    u = stream(20)
    for t in u[:10] + u[15:]:
        encode_tuple(t)
    s = RedisBlockStore(c, f"{ns}/wire")
    s.add_index((0,))
    s.insert(u[:10])
    s.insert(u[10:])
    s.flush()
    tags = sorted(v[:1] for v in c.hvals(s.base + ":d"))
    assert tags == [b"A", b"M"]
    again = RedisBlockStore(c, s.prefix)
    assert state(again) == state(s) and again.tuples()[0].wire == u[0].wire


def test_a_prefix_written_by_the_old_store_is_refused(rc):
    c, ns = rc
    old = RedisWindowStore(c, f"{ns}/old")
    old.insert(stream(3))
    with pytest.raises(ValueError, match="RedisWindowStore"):
        RedisBlockStore(c, old.prefix)


def test_the_factory_flushes_every_block_store_in_one_round_trip(rc, redis_url):
    c, ns = rc
    f = redis_store_factory(redis_url, ns)
    try:
        stores = [f(f"r1/home/S{i}") for i in range(5)]
        for s in stores:
            s.add_index((0,))
            s.insert(stream(10))
        assert f.flush() == 5 and f.flush() == 0 and not any(s.dirty() for s in stores)
        assert all(len(RedisBlockStore(c, s.prefix)) == 10 for s in stores)
    finally:
        f.close()


# --------------------------------------------------------------------------- random operations

def machine(client, ns: str):
    class LogMachine(RuleBasedStateMachine):
        """Random operations, flushes at random points, and reloads: a fresh handle always sees the model as
        of the last flush; a reload replaces the store only right after a flush (single writer)."""

        @initialize(universe=universes(), flush_records=st.sampled_from([2, 5, 1000]), data=st.data())
        def setup(self, universe, flush_records, data):
            for t in universe:   # some tuples carry their Avro bytes (decoded from Kafka): blocks of A or M
                if data.draw(st.booleans()):
                    encode_tuple(t)
            self.u = universe
            self.prefix = f"{ns}/{uuid.uuid4().hex[:8]}"
            self.store = RedisBlockStore(client, self.prefix, flush_records=flush_records)
            self.store.add_index((0,))
            self.model = Model()
            self.model.indexes.add((0,))
            self.flushed: list = []

        @rule(data=st.data())
        def insert(self, data):
            batch = data.draw(st.lists(st.sampled_from(self.u), max_size=8))
            if data.draw(st.booleans()):   # in order after everything stored, as streams do
                top = max(self.model.tups, default=-1)
                batch = self.u[top + 1:top + 1 + len(batch)]
            self.store.insert(batch)
            self.model.insert(batch)

        @rule(data=st.data())
        def purge(self, data):
            if data.draw(st.booleans()):
                ts = data.draw(st.sampled_from([t.ts for t in self.u] + [self.u[-1].ts + 1]))
                got, want = self.store.purge_below(ts=ts), self.model.purge(ts=ts)
            else:
                seq = data.draw(st.integers(-1, len(self.u)))
                got, want = self.store.purge_below(seq=seq), self.model.purge(seq=seq)
            assert [obs(t) for t in got] == [obs(t) for t in want]

        @precondition(lambda self: bool(self.model.tups))
        @rule(data=st.data())
        def remove_oldest(self, data):
            cands = self.model.removable()
            gone = data.draw(st.lists(st.sampled_from(cands), max_size=3, unique_by=lambda t: t.seq))
            for t in gone:
                del self.model.tups[t.seq]
            self.store.remove_oldest(gone)

        @rule()
        def flush(self):
            self.store.flush()
            self.flushed = [obs(t) for t in self.model.sorted()]

        @rule(data=st.data())
        def reload(self, data):
            if self.store.dirty():   # what a crash would find: the last flush's state
                assert state(RedisBlockStore(client, self.prefix)) == self.flushed
                if not data.draw(st.booleans()):
                    return
                self.flush()
            self.store = RedisBlockStore(client, self.prefix, flush_records=self.store._flush_records)

        @invariant()
        def same(self):
            if hasattr(self, "store"):
                assert state(self.store) == [obs(t) for t in self.model.sorted()]
                if not self.store.dirty():   # flushed by itself (``flush_records`` waiting) or nothing changed
                    self.flushed = [obs(t) for t in self.model.sorted()]
                s = self.store
                assert s._stored <= s._limit and len(s._others) <= max(64, 2 * len(s._sizes))

    return LogMachine


def test_the_log_replays_to_the_last_flushed_state(rc):
    c, ns = rc
    run_state_machine_as_test(
        machine(c, ns),
        settings=settings(max_examples=150, stateful_step_count=40, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]))
