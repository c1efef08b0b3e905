"""Kafka edges of ``joinlib progressive``: bounded input topics and the result topic.

* :class:`TopicSource` reads a topic as a finite relation: every partition from its low to
  its high watermark *as of opening* (what was produced later is not part of the relation).
  Each message value is one JSON row ``{"id": ..., <attr>: ...}`` (the key is ignored); it
  yields the decoded objects, the join validates them (``joinlib.progressive.sources``).
* :class:`ResultTopicWriter` writes the results to ``out.<name>`` as ``joinlib.ResultBatch``
  Avro values (``joinlib.protocol.records.encode_result_batch``), what the Spark jobs in
  ``services/spark/`` read: ``query`` = the join's name, ``site`` = ``"progressive"``,
  ``part`` = ``gen`` = 0 (one plan instance), ``batch`` counting from 0, one
  group per run of consecutive results with the same left tuple and logical time
  (``head`` = left relation, ``head_ts`` = the logical time t, ``ids`` = {left: id},
  ``last`` = right relation, ``last_ids`` = the right ids).  A batch never mixes phases;
  its phase is in the ``phase`` header.
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any, Optional

import orjson
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic  # where it is defined (the admin module re-exports it untyped)

from joinlib.adapters.kafka import security_conf
from joinlib.errors import ClusterError, DataError
from joinlib.protocol.records import ResultBatch, ResultGroup, encode_result_batch

BATCH_RESULTS = 1000


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, **security_conf()})


def _metadata(client: Any, bootstrap: str, topic: Optional[str] = None, timeout_s: float = 10.0) -> Any:
    try:
        return client.list_topics(topic, timeout=timeout_s)
    except KafkaException as e:
        raise ClusterError(f"Kafka at {bootstrap} does not answer ({e}); check --cluster HOST:PORT or "
                           "KAFKA_BOOTSTRAP_SERVERS") from None


class TopicSource:
    """A bounded topic as a relation named after the topic."""

    def __init__(self, bootstrap: str, topic: str, timeout_s: float = 10.0) -> None:
        self.name = topic
        self.bootstrap = bootstrap
        self.timeout_s = timeout_s
        self._closed = False
        self._consumer = Consumer({"bootstrap.servers": bootstrap, **security_conf(),
                                   "group.id": f"joinlib-progressive-{topic}",
                                   "enable.auto.commit": False, "enable.partition.eof": False})
        md = _metadata(self._consumer, bootstrap, topic, timeout_s).topics.get(topic)
        if md is None or md.error is not None or not md.partitions:
            self._consumer.close()
            raise DataError(f"kafka:{topic}: no such topic at {bootstrap}")
        self.bounds: dict[int, tuple[int, int]] = {}
        for p in sorted(md.partitions):
            self.bounds[p] = self._consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)

    def count(self) -> int:
        return sum(hi - lo for lo, hi in self.bounds.values())

    def objects(self) -> Iterator[tuple[Any, str]]:
        """(decoded JSON value, where) of every message below the end offsets."""
        todo = {p: (lo, hi) for p, (lo, hi) in self.bounds.items() if hi > lo}
        self._consumer.assign([TopicPartition(self.name, p, lo) for p, (lo, _) in todo.items()])
        deadline = time.monotonic() + self.timeout_s
        try:
            while todo:
                msgs = self._consumer.consume(num_messages=1000, timeout=0.5)
                if not msgs and time.monotonic() > deadline:
                    raise ClusterError(f"kafka:{self.name}: no messages for {self.timeout_s:.0f}s before the end "
                                       f"offsets {dict((p, hi) for p, (_, hi) in todo.items())}")
                for m in msgs:
                    row = self._row(m, todo)
                    if row is not None:
                        deadline = time.monotonic() + self.timeout_s
                        yield row
        finally:
            self.close()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._consumer.close()

    def _row(self, m: Any, todo: dict[int, tuple[int, int]]) -> Optional[tuple[Any, str]]:
        err = m.error()
        if err is not None:
            if err.code() == KafkaError._PARTITION_EOF or err.retriable():
                return None
            raise ClusterError(f"kafka:{self.name}: {err.str()}")
        p, off = m.partition(), m.offset()
        if p not in todo or off >= todo[p][1]:
            return None
        if off + 1 >= todo[p][1]:
            del todo[p]
        where = f"kafka:{self.name}[{p}]@{off}"
        try:
            return orjson.loads(m.value() or b""), where
        except ValueError as e:
            raise DataError(f"{where}: not JSON ({e})") from None


class ResultTopicWriter:
    """Results -> ``out.<name>`` as ResultBatch messages (see the module docstring)."""

    def __init__(self, bootstrap: str, name: str, left: str, right: str, batch: int = BATCH_RESULTS) -> None:
        self.topic = f"out.{name}"
        self.name, self.left, self.right = name, left, right
        self.batch_results = batch
        self._batches = 0
        self._pending: list[tuple[int, int, int]] = []
        self._phase: Optional[str] = None
        self._errors: list[str] = []
        _ensure_topic(bootstrap, self.topic)
        self._producer = Producer({"bootstrap.servers": bootstrap, **security_conf(),
                                   "linger.ms": 20, "compression.type": "lz4"})

    def __call__(self, left: Any, right: Any, phase: str, t: int) -> None:
        if not isinstance(left, int) or not isinstance(right, int):
            raise DataError(f"--cluster: ids must be integers (ResultBatch carries longs), got {left!r}, {right!r}")
        if phase != self._phase:
            self._send()
            self._phase = phase
        self._pending.append((left, t, right))
        if len(self._pending) >= self.batch_results:
            self._send()

    def _send(self) -> None:
        if not self._pending or self._phase is None:
            return
        groups: list[ResultGroup] = []
        for left, t, right in self._pending:
            g = groups[-1] if groups else None
            if g is not None and g.ids[self.left] == left and g.head_ts == t:
                g.last_ids.append(right)
            else:
                groups.append(ResultGroup(self.left, t, {self.left: left}, self.right, [right]))
        value = encode_result_batch(ResultBatch(query=self.name, site="progressive", part=0, gen=0,
                                                batch=self._batches, emit_ms=int(time.time() * 1000),
                                                groups=groups))
        self._produce(value, [("phase", self._phase.encode())])
        self._batches += 1
        self._pending = []

    def _produce(self, value: bytes, headers: list[tuple[str, str | bytes | None]]) -> None:
        while True:
            try:
                self._producer.produce(self.topic, value, headers=headers, on_delivery=self._delivered)
                break
            except BufferError:
                self._producer.poll(0.1)
        self._producer.poll(0)

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self._errors.append(str(err))

    def close(self, timeout_s: float = 30.0) -> None:
        """Send what is pending and wait for every delivery; raise if any failed."""
        self._send()
        left = self._producer.flush(timeout_s)
        if left or self._errors:
            raise ClusterError(f"{self.topic}: {left} result message(s) undelivered"
                               + (f" ({self._errors[0]})" if self._errors else ""))


def _ensure_topic(bootstrap: str, topic: str, timeout_s: float = 30.0) -> None:
    admin = _admin(bootstrap)
    if topic in _metadata(admin, bootstrap, timeout_s=timeout_s).topics:
        return
    fut = admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic]
    try:
        fut.result(timeout=timeout_s)
    except KafkaException as e:
        err = e.args[0] if e.args else None
        if not (isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_ALREADY_EXISTS):
            raise ClusterError(f"cannot create {topic}: {e}") from None
