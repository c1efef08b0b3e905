"""The adaptive node's input order log (:class:`joinlib.node.adaptive_service.OrderLog`) in the real Redis server:
what a restarted node reads back is what its predecessor took, iteration by iteration -- messages by (topic,
partition, offset) in the order taken, the live sources' watermarks where they moved, nothing of ``control``, and
only what follows the checkpoint it resumes from."""
from __future__ import annotations

import uuid
from dataclasses import dataclass

from joinlib.node.adaptive_service import OrderLog


@dataclass(frozen=True)
class Msg:
    """A consumed message as the log reads it (confluent_kafka's Message has the same three methods)."""

    t: str
    p: int
    o: int

    def topic(self) -> str:
        return self.t

    def partition(self) -> int:
        return self.p

    def offset(self) -> int:
        return self.o


def _log(redis_client) -> OrderLog:
    return OrderLog(redis_client, "{joinlib:test-order:%s/n1}" % uuid.uuid4().hex[:8])


def test_iterations_come_back_in_order_with_partitions_and_watermarks(redis_client):
    log = _log(redis_client)
    src = [Msg("orders", p, o) for o in range(100, 104) for p in (0, 2)]   # two partitions, interleaved
    flow = [Msg("node.q.n1.from.n2", 0, 7), Msg("node.q.n1.from.n2", 0, 8)]
    log.append(src + flow + [Msg("control", 0, 55)])   # iteration 1: control is not logged
    log.append_marks({"S1": 300})
    log.append([])                                     # iteration 2: nothing taken, nothing moved
    log.append([])                                     # iteration 3: an idle advance moved S1 only
    log.append_marks({"S1": 400})
    log.append([Msg("orders", 2, 104)])                # iteration 4: a record, the watermark unchanged
    got = log.resume("start")
    assert got == [([(m.t, m.p, m.o) for m in src + flow], {"S1": 300}),
                   ([], {"S1": 400}),
                   ([("orders", 2, 104)], None)]
    # runs of consecutive offsets are one entry each: the interleaved partitions are not consecutive
    assert redis_client.llen(log.key) == 4


def test_a_restarted_node_logs_on_after_the_iterations_it_replays(redis_client):
    log = _log(redis_client)
    log.append([Msg("orders", 0, o) for o in range(10)])
    log.append([Msg("orders", 0, 10)])
    again = OrderLog(redis_client, log.key.removesuffix("#order"))
    assert [len(m) for m, _ in again.resume("start")] == [10, 1]
    again.append([Msg("orders", 0, 11)])               # numbered after the two it replays
    assert [m for m, _ in OrderLog(redis_client, log.key.removesuffix("#order")).resume("start")] == [
        [("orders", 0, o) for o in range(10)], [("orders", 0, 10)], [("orders", 0, 11)]]


def test_only_the_entries_after_the_checkpoint_count(redis_client):
    log = _log(redis_client)
    log.append([Msg("orders", 0, 1)])
    log.checkpointed("c1")
    assert redis_client.llen(log.key) == 0
    log.append([Msg("orders", 0, 2)])
    log.append_marks({"S1": 100})
    stale = OrderLog(redis_client, log.key.removesuffix("#order"))
    stale.tag = "c0"                                   # a predecessor that crashed before trimming the list
    stale.append([Msg("orders", 0, 1)])
    assert OrderLog(redis_client, log.key.removesuffix("#order")).resume("c1") == [([("orders", 0, 2)], {"S1": 100})]
    log.clear()
    assert not redis_client.exists(log.key)
