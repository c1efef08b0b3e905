"""A checkpointed (fenced) run's block stores never flush by themselves: its checkpoints flush them (issue 27)."""
from __future__ import annotations

import time
import uuid

from joinlib.adapters.redis_blocks import RedisBlockStore
from joinlib.adapters.redis_checkpoint import RedisCheckpoints
from joinlib.adapters.redis_client import clear_namespace
from joinlib.adapters.redis_store import redis_store_factory
from joinlib.model import Tup


def _tups(lo: int, hi: int) -> list[Tup]:
    return [Tup(0, i, i, i, (i % 5,), b"x%d" % i) for i in range(lo, hi)]


def test_fenced_stores_wait_for_the_checkpoints_flush(redis_url):
    ns = f"fencedflush-{uuid.uuid4().hex[:8]}"
    factory = redis_store_factory(redis_url, ns)
    ckpt = RedisCheckpoints(factory.client, ns, "r1")
    factory.fence = ckpt.fence   # as recovery.checkpoints_for wires them
    ckpt.fence.claim()
    try:
        store = factory("r1/home/S1")
        store.add_index((0,))
        for i in range(0, 3000, 2):   # more records than FLUSH_RECORDS, and older than FLUSH_AFTER_S
            store.insert(_tups(i, i + 2))
            if i == 1000:
                time.sleep(1.1)
        assert store.dirty() and not factory.client.exists(store.base + ":d")
        store.purge_below(ts=2500)
        assert factory.flush() == 1 and not store.dirty()
        again = RedisBlockStore(factory.client, store.prefix)   # what a restart would load
        assert again.tuples() == store.tuples() == _tups(2500, 3000)
        assert again.records() <= 250   # the expired blocks were never sent
        # an unfenced factory's stores keep flushing by themselves (a node without checkpoints)
        plain = redis_store_factory(redis_url, ns + "-plain")
        s2 = plain("r1/home/S1")
        for i in range(0, 2100, 2):
            s2.insert(_tups(i, i + 2))
        assert plain.client.exists(s2.base + ":d")
        clear_namespace(plain.client, ns + "-plain")
    finally:
        clear_namespace(factory.client, ns)
        ckpt.clear()
