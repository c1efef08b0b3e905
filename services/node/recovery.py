"""Restart recovery of a node service: checkpoints in Redis, delivered results from Kafka.

Every ``CHECKPOINT_EVERY_S`` (and when stopped) the service flushes its producer -- a message
the checkpoint counts as sent must be in Kafka, since a replay from the checkpoint will not send
it again -- and saves, in one atomic Redis
script (``joinlib.adapters.redis_checkpoint``), a copy of its window stores and

* the node's state (``joinlib.runtime.checkpoint``),
* the consumer positions of its source topics and inbound topic: every message before them
  was handed to the node, none after,
* its counters (results and result batches per head, bytes per link, received, naive, totals),
* the end offset of ``out.<query>`` at that instant.

A restarted node of the same run rolls its stores back to the copy, restores the state and
counters, and reads its inputs again from the saved positions.  It redoes the same phases
(the node is deterministic): messages it sends again are dropped by their receivers
(``Node.taken``), and result batches it had delivered before it stopped are skipped -- the
service reads ``out.<query>`` from the saved end offset and skips, per head stream, every
batch number already there (batches of one head are numbered in epoch order and Kafka keeps
a producer's order within the partition).  So the output has each result once.
"""
from __future__ import annotations

import pickle
import time
from typing import Callable, Optional

from confluent_kafka import TopicPartition

from joinlib import wire
from joinlib.adapters.kafka import consume, make_consumer, out_topic
from joinlib.adapters.redis_checkpoint import RedisCheckpoints
from joinlib.errors import ClusterError
from joinlib.runtime import checkpoint
from joinlib.runtime.checkpoint import CheckpointError


class NodeCheckpoints:
    def __init__(self, client, namespace: str, site: str, log: Callable[[str], None]) -> None:
        self.store = RedisCheckpoints(client, namespace, site)
        self.site = site
        self.log = log
        self.out_offset: Optional[int] = None
        self.saved = 0

    def save(self, node, sink, transport, totals, received, naive, consumer, tps) -> None:
        positions = {}
        for tp in consumer.position([TopicPartition(tp.topic, 0) for tp in tps]):
            # nothing consumed yet from a topic: its assigned start
            positions[tp.topic] = tp.offset if tp.offset >= 0 else next(x.offset for x in tps if x.topic == tp.topic)
        out = out_topic(node.q.name)
        try:
            out_end = consumer.get_watermark_offsets(TopicPartition(out, 0), timeout=5)[1]
        except Exception:  # keep the previous bound: the scan after a restart only reads more
            out_end = self.out_offset
        self.out_offset = out_end
        data = pickle.dumps({
            "node": checkpoint.snapshot(node), "positions": positions, "out_offset": out_end,
            "sink": {"count": sink.count, "batches": list(sink.batches)},
            "links": dict(transport.stats), "received": dict(received), "naive": dict(naive),
            "totals": vars(totals), "saved_ms": time.time() * 1000.0,
        }, protocol=pickle.HIGHEST_PROTOCOL)
        self.store.save(data)
        self.saved += 1

    def load(self) -> Optional[bytes]:
        """Roll the Redis stores back to the last checkpoint and return it; with none, empty
        the stores (a predecessor may have filled them before its first checkpoint)."""
        data = self.store.load()
        if data is None:
            self.store.reset()
        return data

    def resume(self, data: bytes, node, sink, transport, totals, received, naive) -> dict:
        """Put a checkpoint (:meth:`load`) into the fresh node and counters; returns the input
        positions to read from."""
        try:
            c = pickle.loads(data)
            checkpoint.restore(node, c["node"])
        except (CheckpointError, pickle.UnpicklingError, KeyError, TypeError) as e:
            raise ClusterError(f"node {self.site}: the checkpoint at {self.store.tag}#meta does not fit this "
                               f"plan ({e}); delete the keys {self.store.tag}* to start the run over") from None
        sink.count, sink.batches = c["sink"]["count"], list(c["sink"]["batches"])
        transport.stats.update(c["links"])
        received.update(c["received"])
        naive.update(c["naive"])
        vars(totals).update(c["totals"])
        self.out_offset = c["out_offset"]
        return c["positions"]

    def delivered(self, bootstrap: str, query, run: Optional[str], timeout_s: float = 30.0) -> list[int]:
        """Per head stream position: 1 + the highest batch number this site delivered to
        ``out.<query>`` after the checkpoint's end offset (0: none)."""
        topic = out_topic(query.name)
        pos = {n: i for i, n in enumerate(query.names)}
        skip = [0] * len(pos)
        c = make_consumer(bootstrap, f"joinlib-recover-{self.site}")
        try:
            end = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=timeout_s)[1]
            start = self.out_offset if self.out_offset is not None and self.out_offset >= 0 else 0
            if start >= end:
                return skip
            c.assign([TopicPartition(topic, 0, start)])
            key, run_b = self.site.encode(), run.encode() if run else None
            deadline = time.monotonic() + timeout_s
            last = start - 1
            while last < end - 1:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"reading {topic} from {start} to {end} took over {timeout_s:.0f}s")
                for m in consume(c, 5000, 0.5):
                    last = m.offset()
                    if m.key() != key or (run_b is not None and dict(m.headers() or ()).get("run") != run_b):
                        continue
                    b = wire.decode_result_batch(m.value())
                    if b.groups:
                        h = pos[b.groups[0].head]
                        skip[h] = max(skip[h], b.batch + 1)
            return skip
        finally:
            c.close()

    def clear(self) -> None:
        try:
            self.store.clear()
        except Exception as e:  # the run's result stands; stale keys are only a leak
            self.log(f"could not clear the checkpoint: {e}")
