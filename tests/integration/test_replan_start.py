"""Where a replanned run starts reading a source partition (joinlib/node/live_queries.py ``_start_at``), on the real
broker: the offset whose Kafka timestamp maps to the warm-up's start, found with the lag of a record's timestamp
behind its event time.  A producer that fell behind stamps its newest records later after their event times than
the older ones, and a malformed record may sit just before the start; the start is still found (a replan test
failed on CI when only the newest record's lag was used)."""
from __future__ import annotations

import json

from confluent_kafka import Producer

from joinlib.adapters.kafka import TopicPartition, make_consumer
from joinlib.ingest.records import Decoder
from joinlib.node.live_queries import _event_at, _start_at
from joinlib.query import parse_query

BASE = 1_700_000_000_000   # ms: the first record's event time
N, STEP = 600, 100         # 600 records, 100 ms of event time apart: a minute


def _stream(topic: str):
    src = {"topic": topic, "format": "json", "time": {"field": "ts", "unit": "ms"}, "id": "id"}
    q = parse_query({"streams": {"S1": {"site": "a", "window": "3s", "source": src},
                                 "S2": {"site": "b", "window": "3s", "source": {**src, "topic": topic + "x"}}},
                     "join": ["S1.J = S2.J"]}, "q")
    return q.streams[0]


def test_a_producer_that_fell_behind_still_locates_the_window(kafka_bootstrap, make_topic):
    topic = make_topic("replan-start")
    p = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(N):   # 20 ms behind, then from record 500 on further behind, up to 8 s
        lag = 20 if i < 500 else 20 + (i - 500) * 80
        ts = BASE + STEP * i
        value = b"{not json" if i == 299 else json.dumps({"id": i, "ts": ts, "J": i % 3}).encode()
        p.produce(topic, value, partition=0, timestamp=ts + lag)   # 299: a dead letter says nothing of time
    assert p.flush(30) == 0
    s = _stream(topic)
    assert s.source is not None
    decoder = Decoder(s, s.source, 0)
    c = make_consumer(kafka_bootstrap, "replan-start")
    try:
        tp = TopicPartition(topic, 0)
        tail = _event_at(c, tp, N - 1, decoder, 10.0)
        assert tail is not None and tail[1] - tail[0] > 7_000, tail
        target = BASE + STEP * 300
        need = target + 5_000   # the warm-up's start; target is a slack before it
        at, located = _start_at(c, tp, (0, N), tail, (target, need), decoder, 10.0)
        # the newest record's lag alone maps target 8 s late, to record 380, whose predecessor is past need
        assert located and at == 300, at
        assert _start_at(c, tp, (0, N), tail, (BASE + STEP * 20, BASE + STEP * 70), decoder, 10.0) == (20, True)
    finally:
        c.close()
