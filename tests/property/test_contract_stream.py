"""The live contract chunk by chunk (joinlib.ingest.contract_stream, what bench/soak.py checks a long run with)
against the contract at once (joinlib.ingest.contract.expected_output).

Generated records of three streams joined in a chain (late and malformed ones among them, spread over up to
three partitions per stream; without disorder, on a 10 ms grid: members exactly a window
apart, heads on chunk bounds) are fed to :class:`IncrementalExpected` with the partitions interleaved at random
and chunks asked for at random points, then finished: the union of the chunks must equal the contract's
results -- each result in exactly one chunk, the one of its head's time -- and the dead letters its dead
letters.
"""
from __future__ import annotations

import os
import random
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from joinlib.ingest.contract import Written, expected_output
from joinlib.ingest.contract_stream import IncrementalExpected
from joinlib.ingest.events import EventGen, EventProfile
from joinlib.query import parse_query

EXAMPLES = int(os.environ.get("CONTRACT_STREAM_EXAMPLES", "60"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _query(windows: list[int]):
    streams = {f"S{i + 1}": {"site": f"r{i + 1}", "window": f"{w}ms",
                             "source": {"topic": f"t{i + 1}", "format": "json", "time": {"field": "ts", "unit": "ms"},
                                        "id": "id"}}
               for i, w in enumerate(windows)}
    return parse_query({"name": "q", "streams": streams, "join": ["S1.J = S2.J", "S2.J = S3.J"],
                        "execution": {"interval": "100ms", "max_delay": "80ms", "idle_timeout": "2s"}}, "q")


@SETTINGS
@given(windows=st.lists(st.sampled_from([200, 500, 1000]), min_size=3, max_size=3),
       n=st.integers(20, 150), parts=st.integers(1, 3), distinct=st.integers(1, 6),
       late_every=st.sampled_from([0, 7, 25]), malformed_every=st.sampled_from([0, 11]),
       chunk_ms=st.sampled_from([50, 300, 1000, 5000]), disorder=st.sampled_from([0, 60]),
       seed=st.integers(0, 10**6))
def test_chunks_add_up_to_the_contract(windows, n, parts, distinct, late_every, malformed_every, chunk_ms, disorder,
                                       seed):
    q = _query(windows)
    rnd = random.Random(seed)
    written: dict[str, list[Written]] = {}
    for s in q.streams:
        prof = EventProfile(rate=100, distinct=distinct, payload_bytes=2, disorder_ms=disorder,
                            late_every=late_every, malformed_every=malformed_every)
        offsets = [0] * parts
        rows = []
        for r in EventGen(s, prof, seed=seed).take(n):
            p = rnd.randrange(parts)
            rows.append(Written(p, offsets[p], r.value))
            offsets[p] += 1
        written[s.name] = rows
    want = expected_output(q, written, 0)

    inc = IncrementalExpected(q, 0, {s.name: list(range(parts)) for s in q.streams}, chunk_ms)
    queues = [[(name, w) for w in rows if w.part == p] for name, rows in written.items() for p in range(parts)]
    got: Counter = Counter()
    chunks: list[int] = []

    def take(pairs):
        for k, res in pairs:
            assert all(k * chunk_ms <= ts < (k + 1) * chunk_ms for _ids, ts in res), "a result in the wrong chunk"
            chunks.append(k)
            got.update(res)
    dead_seen: dict = {}
    while any(queues):
        qu = rnd.choice([x for x in queues if x])
        n = rnd.choice([1, 1, rnd.randint(1, 40)])   # a record alone (add) or a run of one partition (add_run)
        run, qu[:] = qu[:n], qu[n:]
        name = run[0][0]
        if n == 1:
            fate = inc.add(name, run[0][1])
            dead = [(run[0][1].offset, fate)] if fate is not None else []
        else:
            dead = inc.add_run(name, run[0][1].part, [w.offset for _, w in run], [w.value for _, w in run])
        topic = q.stream(name).source.topic
        dead_seen.update({(topic, run[0][1].part, off): reason for off, reason in dead})
        if rnd.random() < 0.05:
            take(inc.ready())
    take(inc.finish())
    assert chunks == sorted(set(chunks)), "a chunk handed out twice or out of order"
    assert got == want.results
    assert inc.dead == want.dead
    assert dead_seen == want.dead, "add and add_run return the dead letters among their records"
    assert inc.on_time == sum(len(v) for v in want.on_time.values())


def test_count_windows_are_refused():
    q = parse_query({"name": "q", "streams": {
        "S1": {"site": "a", "window": "10 tuples", "source": {"topic": "t1", "time": "ts"}},
        "S2": {"site": "b", "window": "1s", "source": {"topic": "t2", "time": "ts"}}},
        "join": ["S1.J = S2.J"]}, "q")
    with pytest.raises(ValueError, match="count windows"):
        IncrementalExpected(q, 0, {"S1": [0], "S2": [0]}, 1000)
