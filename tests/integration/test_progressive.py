"""``joinlib progressive`` on the real broker and the real Redis: two bounded topics joined
with runs spilled to Redis, results both in the OUT file and in ``out.<name>`` as the
ResultBatch messages the Spark jobs read - each exactly the hash join."""
from __future__ import annotations

import json
import random
import time
from collections import Counter
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from joinlib.cli.main import main
from joinlib.protocol.records import decode_result_batch


def produce_rows(bootstrap: str, topic: str, rows: list[dict]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for r in rows:
        p.produce(topic, json.dumps(r).encode())
    assert p.flush(30) == 0


def read_topic(bootstrap: str, topic: str, timeout_s: float = 30.0) -> list:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"it-{topic}", "enable.auto.commit": False})
    try:
        lo, hi = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        c.assign([TopicPartition(topic, 0, lo)])
        out: list[Any] = []
        deadline = time.monotonic() + timeout_s
        while len(out) < hi - lo and time.monotonic() < deadline:
            out += [m for m in c.consume(500, timeout=0.5) if m.error() is None]
        return out
    finally:
        c.close()


@pytest.mark.parametrize("algorithm,network", [("rpj", "unreliable"), ("hmj", "reliable")])
def test_two_bounded_topics_with_redis_spill(kafka_bootstrap, redis_url, redis_client, make_topic, unique_name,
                                             tmp_path, algorithm, network, capsys):
    rng = random.Random(11)
    left_rows = [{"id": i, "k": rng.randint(0, 25)} for i in range(600)]
    right_rows = [{"id": 10_000 + i, "k": rng.randint(0, 25)} for i in range(450)]
    left, right = make_topic("orders", partitions=2), make_topic("payments")
    produce_rows(kafka_bootstrap, left, left_rows)
    produce_rows(kafka_bootstrap, right, right_rows)
    # rows produced after the join starts would not belong to the relation; none here
    want = Counter((a["id"], b["id"]) for a in left_rows for b in right_rows if a["k"] == b["k"])

    out = tmp_path / "out.jsonl"
    name = unique_name[:60]
    assert main(["progressive", f"kafka:{left}", f"kafka:{right}", "--on", "k", "--memory", "60",
                 "--algorithm", algorithm, "--network", network, "--spill", redis_url,
                 "--cluster", kafka_bootstrap, "--name", name, "--out", str(out), "--no-progress"]) == 0
    assert "results" in capsys.readouterr().err

    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert Counter((r["ids"][left], r["ids"][right]) for r in rows) == want  # exact: none missing, no duplicate

    msgs = read_topic(kafka_bootstrap, f"out.{name}")
    got: Counter = Counter()
    phases: Counter = Counter()
    for m in msgs:
        batch = decode_result_batch(m.value())
        assert batch.query == name and batch.site == "progressive"
        phase = dict(m.headers())["phase"].decode()
        for g in batch.groups:
            assert g.head == left and g.last == right
            for rid in g.last_ids:
                got[(g.ids[left], rid)] += 1
                phases[phase] += 1
    assert got == want
    assert phases == Counter(r["phase"] for r in rows)
    assert [decode_result_batch(m.value()).batch for m in msgs] == list(range(len(msgs)))

    assert not list(redis_client.scan_iter(match=f"joinlib:progressive:{name}*"))  # spilled runs removed
