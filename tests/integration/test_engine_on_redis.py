"""The embedded engine with every window in Redis gives exactly the reference output.

Each of the six algorithms (a uniform plan) and the central plan runs over generated data
with :func:`joinlib.adapters.redis_store.redis_store_factory` as the nodes' store factory;
the results must equal :func:`joinlib.reference.reference_join` as multisets.  ``routers``
has time windows on one attribute; ``star4`` has tuple windows (purge by seq, count limits),
streams with three join attributes (single-position indexes of a 3-attribute key) and
per-edge attributes.
"""
from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path

import pytest

from joinlib.adapters.redis_client import clear_namespace
from joinlib.adapters.redis_store import (
    MirroredRedisWindowStore,
    RedisBlockStore,
    RedisWindowStore,
    redis_store_factory,
)
from joinlib.algorithms import ALGORITHMS
from joinlib.data.files import load_streams
from joinlib.data.gen import generate
from joinlib.plan import logical as plans
from joinlib.query import load_query
from joinlib.reference import reference_join
from joinlib.runtime.sink import CollectingSink
from joinlib.sim.engine import run_embedded

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CASES = {"routers": ("routers.yaml", 2500, 11), "star4": ("star4.yaml", 1000, 5)}


@pytest.fixture(scope="module", params=sorted(CASES))
def workload(request, tmp_path_factory):
    file, duration_ms, seed = CASES[request.param]
    query = load_query(EXAMPLES / file)
    out = tmp_path_factory.mktemp(request.param)
    generate(query, out, duration_ms, seed)
    streams = load_streams(query, out)
    return query, streams, reference_join(query, streams)


def _plans(query):
    return [(a, plans.uniform(query, a)) for a in ALGORITHMS] + [("central", plans.central(query))]


KIND_CLS = {"redis": RedisWindowStore, "mirror": MirroredRedisWindowStore, "blocks": RedisBlockStore}


@pytest.mark.parametrize("kind", sorted(KIND_CLS))
@pytest.mark.parametrize("which", list(ALGORITHMS) + ["central"])
def test_engine_on_redis_is_exact(workload, which, kind, redis_url):
    """Every read from Redis (``redis``), or from the memory copy of MirroredRedisWindowStore (``mirror``)
    or RedisBlockStore (``blocks``, what node services use): exact either way, and the copy in Redis
    equals the one in memory -- for block stores, the window a new handle replays from the log after a
    flush, on workloads that purge by time, by seq and remove single oldest tuples."""
    query, streams, want = workload
    assert sum(want.values()) > 0, "the workload must produce results"
    plan = dict(_plans(query))[which]
    namespace = f"it-engine-{query.name}-{which}-{uuid.uuid4().hex[:8]}"
    factory = redis_store_factory(redis_url, namespace, kind=kind)
    made: list = []

    def store_factory(name: str):
        s = factory(name)
        made.append(s)
        return s

    try:
        sink = CollectingSink(query)
        run_embedded(query, streams, plan, sink, store_factory=store_factory)
        got = Counter((ids, ts) for ids, ts, _ in sink.results)
        missing, extra = want - got, got - want
        assert not missing and not extra, (
            f"{which}: missing {list(missing.items())[:5]}, extra {list(extra.items())[:5]}")
        assert made and all(isinstance(s, KIND_CLS[kind]) for s in made)
        for s in made if kind == "mirror" else ():
            assert [(t.seq, t.id) for t in s.redis.tuples()] == [(t.seq, t.id) for t in s.tuples()], s
        if kind == "blocks":
            factory.flush()
            for s in made:
                again = RedisBlockStore(factory.client, s.prefix)
                assert [(t.seq, t.id, t.key) for t in again.tuples()] == [(t.seq, t.id, t.key) for t in s.tuples()], s
                assert again.indexes() == s.indexes() and again.records() == s.records(), s
        # the windows really were in Redis: every home window still holds its last tuples
        homes = [s for s in made if "/home/" in s.prefix]
        assert homes and all(len(s) > 0 for s in homes)
    finally:
        clear_namespace(factory.client, namespace)
        factory.close()
