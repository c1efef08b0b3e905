"""Smoke tests of the integration infrastructure: a real Kafka broker and a real Redis server.

They prove the fixtures in tests/cluster_fixtures.py hand out working services (whatever their source) and
exercise exactly the client features joinlib relies on: topic admin, keyed produce with
headers and timestamps, group and manual-assignment consumption, Redis pipelines and Lua
scripts via EVALSHA.
"""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import ConfigResource, ResourceType  # type: ignore[attr-defined]  # re-exported, not in __all__


def _consume(consumer: Consumer, n: int, timeout: float = 30.0) -> list:
    out: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        for m in consumer.consume(num_messages=n - len(out), timeout=0.5):
            if err := m.error():
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                raise AssertionError(f"consumer error: {err}")
            out.append(m)
    return out


def _deliveries():
    reports: list = []

    def cb(err, msg):
        reports.append((err, msg))

    return reports, cb


# --------------------------------------------------------------------------- Kafka


def test_kafka_broker_metadata(kafka_admin, kafka_bootstrap):
    md = kafka_admin.list_topics(timeout=10)
    assert md.brokers, "no broker in the cluster metadata"
    host, _, port = kafka_bootstrap.rpartition(":")
    assert int(port) > 0 and host
    assert md.cluster_id, "KRaft cluster id missing"


def test_create_topics_with_partitions_and_config(kafka_admin, make_topic):
    t3 = make_topic("smoke-p3", partitions=3)
    tl = make_topic("smoke-lat", config={"message.timestamp.type": "LogAppendTime", "retention.ms": "60000"})
    assert t3 != tl

    md = kafka_admin.list_topics(timeout=10)
    assert len(md.topics[t3].partitions) == 3
    assert len(md.topics[tl].partitions) == 1
    for t in (t3, tl):
        assert all(p.leader >= 0 for p in md.topics[t].partitions.values())

    res = ConfigResource(ResourceType.TOPIC, tl)
    configs = kafka_admin.describe_configs([res])[res].result(timeout=10)
    assert configs["message.timestamp.type"].value == "LogAppendTime"
    assert configs["retention.ms"].value == "60000"


def test_produce_consume_roundtrip(kafka_bootstrap, make_topic, unique_name):
    topic = make_topic("smoke-rt")
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "acks": "all", "linger.ms": 5})
    reports, cb = _deliveries()
    sent = [(f"k{i % 2}".encode(), f"value-{i}".encode(), 1_700_000_000_000 + i) for i in range(10)]
    for key, value, ts in sent:
        producer.produce(topic, key=key, value=value, timestamp=ts,
                         headers=[("sent_ns", str(time.time_ns()).encode())], on_delivery=cb)
        producer.poll(0)
    assert producer.flush(30) == 0, "messages left in the producer queue"
    assert len(reports) == len(sent)
    assert all(err is None for err, _ in reports), [err for err, _ in reports if err]
    assert [m.offset() for _, m in reports] == list(range(len(sent)))

    consumer = Consumer({
        "bootstrap.servers": kafka_bootstrap,
        "group.id": unique_name,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    })
    try:
        consumer.subscribe([topic])
        got = _consume(consumer, len(sent))
    finally:
        consumer.close()

    assert [(m.key(), m.value()) for m in got] == [(k, v) for k, v, _ in sent]
    assert [m.offset() for m in got] == list(range(len(sent)))
    assert all(m.topic() == topic and m.partition() == 0 for m in got)
    # producer-set CreateTime timestamps survive the round trip
    assert [m.timestamp()[1] for m in got] == [ts for _, _, ts in sent]
    for m in got:
        headers = dict(m.headers() or [])
        assert int(headers["sent_ns"]) > 0


def test_a_push_sends_what_lingers_and_only_what_was_produced_since(kafka_bootstrap, make_topic):
    """A node's producer lingers (joinlib.adapters.kafka.NODE_LINGER_MS) and pushes when it has nothing to read:
    the push sends the batch the producer holds, whatever its linger (here 10 minutes), and delivers it in order; a
    push with nothing produced since the last one does not flush at all."""
    from joinlib.adapters.kafka import Producing, make_producer
    topic = make_topic("smoke-push")
    out = Producing(make_producer(kafka_bootstrap, **{"linger.ms": 600_000, "message.timeout.ms": 900_000,
                                                     "enable.idempotence": True, "acks": "all"}))
    for i in range(20):
        out.produce(topic, f"v{i}".encode())
    assert len(out.producer) == 20 and out.unpushed
    out.push(wait_s=30.0)
    assert len(out.producer) == 0 and not out.unpushed, "the lingering batch was not delivered by the push"
    out.push()   # nothing since: no flush
    out.check()
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": f"g-{topic}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.subscribe([topic])
        got = _consume(consumer, 20)
    finally:
        consumer.close()
    assert [m.value() for m in got] == [f"v{i}".encode() for i in range(20)]


def test_partitioned_produce_and_assign(kafka_bootstrap, make_topic):
    topic = make_topic("smoke-assign", partitions=3)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    per_partition = {p: [f"p{p}-m{i}".encode() for i in range(4)] for p in range(3)}
    for p, values in per_partition.items():
        for v in values:
            producer.produce(topic, value=v, partition=p)
    assert producer.flush(30) == 0

    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": "unused-manual-assign",
                         "enable.auto.commit": False, "enable.partition.eof": False})
    try:
        for p, values in per_partition.items():
            lo, hi = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            assert (lo, hi) == (0, len(values))
            consumer.assign([TopicPartition(topic, p, 0)])
            got = _consume(consumer, len(values))
            assert [m.value() for m in got] == values
            assert {m.partition() for m in got} == {p}
    finally:
        consumer.close()


def test_log_append_time_topic(kafka_bootstrap, make_topic):
    topic = make_topic("smoke-lat", config={"message.timestamp.type": "LogAppendTime"})
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    before_ms = int(time.time() * 1000)
    producer.produce(topic, value=b"x", timestamp=1)  # broker must overwrite it
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": topic, "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        (m,) = _consume(consumer, 1)
    finally:
        consumer.close()
    from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME

    ts_type, ts = m.timestamp()
    assert ts_type == TIMESTAMP_LOG_APPEND_TIME
    assert before_ms - 5_000 <= ts <= int(time.time() * 1000) + 5_000


# --------------------------------------------------------------------------- Redis


def test_redis_set_get(redis_client, unique_name):
    key = f"{unique_name}:greeting"
    assert redis_client.ping() is True
    assert redis_client.set(key, "hello", ex=60) is True
    assert redis_client.get(key) == b"hello"
    assert 0 < redis_client.ttl(key) <= 60
    assert redis_client.delete(key) == 1
    assert redis_client.get(key) is None


def test_redis_pipeline_sorted_set_window(redis_client, unique_name):
    key = f"{{{unique_name}}}:win:S1"
    members = {f"t{i}": float(i) for i in range(1000)}
    pipe = redis_client.pipeline(transaction=True)
    for m, score in members.items():
        pipe.zadd(key, {m: score})
    pipe.zremrangebyscore(key, "-inf", "(100")
    pipe.zcard(key)
    pipe.zrangebyscore(key, 100, 104)
    pipe.expire(key, 60)
    results = pipe.execute()

    assert results[:1000] == [1] * 1000
    assert results[1000] == 100  # removed t0..t99
    assert results[1001] == 900
    assert results[1002] == [b"t100", b"t101", b"t102", b"t103", b"t104"]
    assert results[1003] is True
    redis_client.delete(key)


# Insert a batch into a time-ordered window, evict what fell out of it, return the size:
# KEYS[1] window zset; ARGV[1] horizon (exclusive lower bound); ARGV[2..] score, member pairs.
WINDOW_LUA = """
local added = 0
for i = 2, #ARGV, 2 do
  added = added + redis.call('ZADD', KEYS[1], ARGV[i], ARGV[i + 1])
end
local evicted = redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[1])
return {added, evicted, redis.call('ZCARD', KEYS[1])}
"""


def test_redis_lua_script_roundtrip(redis_client, unique_name):
    key = f"{{{unique_name}}}:lua"
    script = redis_client.register_script(WINDOW_LUA)

    def args(horizon, items):
        flat = [horizon]
        for score, member in items:
            flat += [score, member]
        return flat

    assert script(keys=[key], args=args(0, [(1, "a"), (2, "b"), (3, "c")])) == [3, 0, 3]
    assert script(keys=[key], args=args(3, [(4, "d"), (5, "e")])) == [2, 2, 3]
    assert redis_client.zrange(key, 0, -1) == [b"c", b"d", b"e"]
    assert redis_client.script_exists(script.sha) == [True]

    # EVALSHA inside a pipeline, surviving a SCRIPT FLUSH (redis-py reloads on NOSCRIPT)
    redis_client.script_flush()
    assert redis_client.script_exists(script.sha) == [False]
    pipe = redis_client.pipeline()
    for i in range(6, 9):
        script(keys=[key], args=args(i - 1, [(i, f"m{i}")]), client=pipe)
    assert pipe.execute() == [[1, 2, 2], [1, 1, 2], [1, 1, 2]]
    assert redis_client.zrange(key, 0, -1, withscores=True) == [(b"m7", 7.0), (b"m8", 8.0)]
    redis_client.delete(key)


def test_redis_and_kafka_together(kafka_bootstrap, redis_client, make_topic, unique_name):
    """Both services in one test: consume from Kafka, store in Redis, read back."""
    n = 3
    topic = make_topic("smoke-both")
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(n):
        producer.produce(topic, key=b"S", value=str(i).encode())
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": unique_name,
                         "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        got = _consume(consumer, n)
    finally:
        consumer.close()
    key = f"{unique_name}:seen"
    redis_client.rpush(key, *[m.value() for m in got])
    assert redis_client.lrange(key, 0, -1) == [str(i).encode() for i in range(n)]
    redis_client.delete(key)
