"""Kafka transport for the node runtime, plus the producer, consumer and admin helpers the services share.

Topic names and layout: :mod:`joinlib.adapters.topics` (re-exported here).

:class:`KafkaTransport` is what a :class:`~joinlib.runtime.host.Host` sends through:
``send(env)`` encodes the envelope once with :func:`joinlib.protocol.wire.encode_envelope` and
counts ``len(value)`` per (src, dst, kind) -- exactly what the simulator charges, so the
byte counts of a cluster run and of an embedded run of the same plan are comparable
(Kafka's record framing is outside the value and not counted).
"""
from __future__ import annotations

import logging
import time
from collections import defaultdict
from itertools import repeat
from operator import is_, methodcaller
from typing import Any, Callable, Iterable, Optional, Sequence, cast

# re-exported with TopicPartition: joinlib.node takes the client's names from this module, not from confluent_kafka
# (the adapters layer owns the client; pyproject's node contract forbids the direct import)
from confluent_kafka import OFFSET_BEGINNING as OFFSET_BEGINNING
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported, not in __all__
    AdminClient,
    NewPartitions,
    NewTopic,
    OffsetSpec,
)

from joinlib.adapters.plan_signing import sign_headers
from joinlib.adapters.topics import (  # noqa: F401  (re-exported: the services and the CLI name topics from here)
    CONTROL_TOPIC,
    ENDS_TOPIC,
    NODE_KINDS,
    PLANNER_KINDS,
    REPORTS_PREFIX,
    control_topic_of,
    flow_topics,
    inbound_topics,
    is_control_topic,
    node_topic,
    out_topic,
    query_topics,
    report_topics,
    sink_topics,
    source_topic,
    src_topic,
    status_topic,
)
from joinlib.errors import ClusterError
from joinlib.protocol import records, wire
from joinlib.protocol.avro import encode_long as _avro_long  # the table-driven zig-zag varint of the wire encoder
from joinlib.protocol.avro import result_group_runs as _group_runs
from joinlib.protocol.messages import Envelope
from joinlib.runtime.report import LinkStats
from joinlib.settings import KafkaSecurity

# Producer settings: one Kafka message already carries a whole flow's epoch, so there is
# nothing to wait for (linger 0: a semijoin round trip per epoch is two hops; linger 5 ms
# capped SM-S1 plans near 2.4k tuples/s in bench/cluster_bench.py, and raised SP-S latency);
# no compression by default so that broker bytes track value bytes (lz4 measured slower).
PRODUCER_DEFAULTS: dict = {
    "linger.ms": 0,
    "acks": 1,
    "compression.type": "none",
    "batch.num.messages": 10000,
    "batch.size": 1_000_000,
    "queue.buffering.max.messages": 1_000_000,
    # 32 MB (the Java producer's buffer.memory): a producer that outruns the broker blocks in Producing.produce
    # instead of growing the process by up to 1 GB (librdkafka's default) while a node catches up
    "queue.buffering.max.kbytes": 32_768,
    "message.max.bytes": 16_000_000,
    # reconnect within a second of a broker's return (librdkafka backs off up to 10 s by default): a source's
    # records buffered during an outage must arrive within a node's idle timeout (docs/reliability.md)
    "reconnect.backoff.max.ms": 1000,
}
#: A node's producer holds messages up to NODE_LINGER_MS so that what one round of its work sends to a topic
#: goes in one produce request, and the node pushes them out whenever it has nothing to read (Producing.push).
#: Why: every message on its own request (linger 0) made the broker the busiest process of a backlog's drain --
#: a produce request, then a fetch response to the reader, per flow and epoch: the routers workload drained at
#: ~24k events/s with ~6 s of node CPU and as much again in the broker; with 50 ms and the push, ~37-39k with
#: ~4.7 s (docs/results.md).  The push keeps a quiet node's latency what linger 0 gave: it sends as soon as
#: the node would wait, so a message lingers only while its node is busy with more work.
NODE_LINGER_MS = 50
#: how long a push waits for what it sends to be delivered (it returns as soon as it is): librdkafka sends a
#: lingering batch early only while a flush is under way, so the flush must last until its thread has run
PUSH_WAIT_S = 0.005
CONSUMER_DEFAULTS: dict = {
    "enable.auto.commit": False,
    "auto.offset.reset": "earliest",
    "enable.partition.eof": False,
    # a fetch parks at the broker at most 50 ms when nothing is there; it returns as soon as a message arrives, so
    # this delays only partitions assigned or resumed (by the gates) while one is parked.  10 ms made each idle
    # consumer a fetch request per 10 ms: the broker's busiest work in a drain (docs/results.md)
    "fetch.wait.max.ms": 50,
    # prefetch at most 16 MB (librdkafka's default 64 MB): a node that lags would hold that much of its
    # backlog in memory besides the Python objects it is working on
    "queued.max.messages.kbytes": 16_384,
    "fetch.max.bytes": 64_000_000,
    "max.partition.fetch.bytes": 16_000_000,
}
TOPIC_CONFIG: dict = {"max.message.bytes": "16000000"}

_log = logging.getLogger("joinlib.kafka")
_rdlog = logging.getLogger("joinlib.kafka.librdkafka")
_rdlog.addHandler(logging.NullHandler())
_rdlog.propagate = False  # librdkafka's connection chatter; errors surface via KafkaUnavailable


class KafkaUnavailable(ClusterError):
    """The broker cannot be reached (message names the bootstrap servers and the cause)."""


class KafkaDeliveryError(ClusterError):
    """A message could not be delivered to Kafka."""


# --------------------------------------------------------------------------- clients

class _ErrorTrap:
    """error_cb that remembers the last client-level error (all brokers down, resolve failure)."""

    def __init__(self) -> None:
        self.last: Optional[KafkaError] = None

    def __call__(self, err: KafkaError) -> None:
        self.last = err


def security_conf() -> dict:
    """SASL/TLS settings every client gets, from the environment (:class:`joinlib.settings.KafkaSecurity`,
    docs/security.md); empty for a PLAINTEXT broker."""
    return KafkaSecurity.from_env().librdkafka()


def _base(bootstrap: str, trap: Optional[_ErrorTrap] = None) -> dict:
    return {"bootstrap.servers": bootstrap, **security_conf(), "logger": _rdlog,
            "error_cb": trap or _ErrorTrap()}


def make_producer(bootstrap: str, **overrides) -> Producer:
    conf = {**_base(bootstrap), **PRODUCER_DEFAULTS, **overrides}
    return Producer(conf)


def make_consumer(bootstrap: str, group: str, **overrides) -> Consumer:
    """A consumer for manual assignment (``assign``); ``group`` only names it (no commits)."""
    conf = {**_base(bootstrap), **CONSUMER_DEFAULTS, "group.id": group, **overrides}
    return Consumer(conf)


#: How long a *watcher* parks its fetch at the broker: a consumer waiting for messages that come now and then (the
#: control log, reports, a reader of results).  The broker answers a parked fetch as soon as a message arrives, so
#: this delays nothing but the first fetch of a partition assigned while one is parked.  Why not CONSUMER_DEFAULTS'
#: 50 ms (a run's consumer, whose gates pause and resume partitions, and which reads as soon as it can): every
#: idle consumer costs the broker a fetch per wait -- eight of them took 0.45 of a core of the local broker at
#: 10 ms, 0.09 at 100 ms, 0.04 at 500 ms (docs/results.md), where a drain's nodes and broker share two cores.
WATCH_FETCH_WAIT_MS = 250


def make_watcher(bootstrap: str, group: str, **overrides) -> Consumer:
    """A consumer for the control log, reports or results (:data:`WATCH_FETCH_WAIT_MS` says why it differs)."""
    return make_consumer(bootstrap, group, **{"fetch.wait.max.ms": WATCH_FETCH_WAIT_MS, **overrides})


def make_admin(bootstrap: str) -> AdminClient:
    return AdminClient(_base(bootstrap))


def check_reachable(bootstrap: str, timeout_s: float = 10.0) -> None:
    """Raise :class:`KafkaUnavailable` unless a broker at ``bootstrap`` answers a metadata request."""
    if not bootstrap:
        raise KafkaUnavailable("no Kafka bootstrap servers given; set KAFKA_BOOTSTRAP_SERVERS (host:port)")
    trap = _ErrorTrap()
    admin = AdminClient({**_base(bootstrap, trap), "socket.timeout.ms": max(1000, int(timeout_s * 1000))})
    deadline = time.monotonic() + timeout_s
    cause = ""
    while True:
        try:
            md = admin.list_topics(timeout=max(0.5, min(3.0, deadline - time.monotonic())))
            if md.brokers:
                return
        except KafkaException as e:
            cause = str(e.args[0].str() if e.args and isinstance(e.args[0], KafkaError) else e)
        if time.monotonic() >= deadline:
            if trap.last is not None:
                cause = trap.last.str()
            raise KafkaUnavailable(f"Kafka at {bootstrap} is unreachable after {timeout_s:.0f}s"
                                   + (f" ({cause})" if cause else "")
                                   + "; check KAFKA_BOOTSTRAP_SERVERS and that the broker is running (a secured "
                                   "broker also needs KAFKA_SECURITY_PROTOCOL and KAFKA_SASL_*, docs/security.md)")
        time.sleep(0.2)


def ensure_topics(admin: AdminClient, names: Iterable[str], *, partitions: int = 1,
                  timeout_s: float = 30.0, config: Optional[dict] = None) -> list[str]:
    """Create the topics that do not exist yet (one partition, replication 1); wait until every
    partition of every named topic has a leader.  Returns the names created."""
    names = list(dict.fromkeys(names))
    md = admin.list_topics(timeout=timeout_s)
    missing = [n for n in names if n not in md.topics or md.topics[n].error is not None]
    created = []
    if missing:
        cfg = {**TOPIC_CONFIG, **(config or {})}
        futures = admin.create_topics([NewTopic(n, num_partitions=partitions, replication_factor=1, config=cfg)
                                       for n in missing], operation_timeout=timeout_s, request_timeout=timeout_s)
        for name, fut in futures.items():
            try:
                fut.result(timeout=timeout_s)
                created.append(name)
            except KafkaException as e:
                err = e.args[0] if e.args else None
                if not (isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_ALREADY_EXISTS):
                    raise KafkaUnavailable(f"cannot create topic {name}: {err.str() if err else e}") from None
    deadline = time.monotonic() + timeout_s
    pending = set(names)
    while pending:
        md = admin.list_topics(timeout=timeout_s)
        for n in list(pending):
            t = md.topics.get(n)
            if t is not None and t.error is None and t.partitions and all(
                    p.leader >= 0 for p in t.partitions.values()):
                pending.discard(n)
        if pending:
            if time.monotonic() > deadline:
                raise KafkaUnavailable(f"topics without a leader after {timeout_s:.0f}s: {sorted(pending)}")
            time.sleep(0.05)
    return created


def ensure_partitions(admin: AdminClient, names: Iterable[str], partitions: int, timeout_s: float = 30.0) -> None:
    """Make each topic of ``names`` exist with at least ``partitions`` partitions (a scaled-out plan:
    partition p of a source or node topic carries plan partition p).  A topic with fewer is grown: the
    new partitions are empty, and what the old ones hold predates the plan's start offsets."""
    names = list(names)
    ensure_topics(admin, names, partitions=partitions, timeout_s=timeout_s)
    if partitions <= 1:   # every topic has one partition at least: nothing to grow
        return
    md = admin.list_topics(timeout=timeout_s)
    short = [n for n in names if len(md.topics[n].partitions) < partitions]
    if short:
        futures = admin.create_partitions([NewPartitions(n, partitions) for n in short],
                                          operation_timeout=timeout_s, request_timeout=timeout_s)
        for name, fut in futures.items():
            try:
                fut.result(timeout=timeout_s)
            except KafkaException as e:
                raise KafkaUnavailable(f"cannot grow topic {name} to {partitions} partitions: {e}") from None
        ensure_topics(admin, short, timeout_s=timeout_s)   # every partition has a leader


def warm_up(client, topics: Iterable[str], timeout_s: float = 10.0) -> None:
    """Fetch the metadata of ``topics`` now, so that the first message produced to (or
    fetched from) each does not wait for a metadata round trip."""
    for t in topics:
        try:
            client.list_topics(t, timeout=timeout_s)
        except KafkaException:
            pass  # produce/consume will retry and report


def end_offsets(consumer: Consumer, topics: Iterable[str], timeout_s: float = 10.0) -> dict[str, int]:
    """High watermark of partition 0 of each topic (the offset the next message will get).
    Retries while the client's metadata lags behind (e.g. right after creating the topics)."""
    deadline = time.monotonic() + timeout_s
    return {t: _high_watermark(consumer, TopicPartition(t, 0), deadline, timeout_s) for t in topics}


def partition_ends(consumer: Consumer, topic: str, partitions: int, timeout_s: float = 10.0) -> list[int]:
    """High watermark of partitions 0 .. ``partitions``-1 of ``topic`` (retried as :func:`end_offsets`)."""
    deadline = time.monotonic() + timeout_s
    return [_high_watermark(consumer, TopicPartition(topic, p), deadline, timeout_s) for p in range(partitions)]


def _high_watermark(consumer: Consumer, tp: TopicPartition, deadline: float, timeout_s: float) -> int:
    return _watermarks(consumer, tp, deadline, timeout_s)[1]


def watermarks(consumer: Consumer, tp: TopicPartition, timeout_s: float = 10.0) -> tuple[int, int]:
    """(low, high) offsets of a partition, retried while the broker still elects its leader (a topic
    created a moment ago answers NOT_LEADER_FOR_PARTITION for a while on a busy broker)."""
    return _watermarks(consumer, tp, time.monotonic() + timeout_s, timeout_s)


#: What a watermark request answers while a broker is away or coming back, retried until the caller's deadline:
#: a topic's leader still being elected; the client's metadata without the partition for a moment; the connection
#: refused or reset (_TRANSPORT), no broker up, the request timed out, the client dropping the bootstrap broker's
#: handle for the broker it learnt (_DESTROY_BROKER) -- bench/chaos.py's broker restarts failed a scaled-out
#: query's re-keyers at a checkpoint on each of the last ones (docs/reliability.md, chaos findings 1 and 6).
_PASSING = (KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.LEADER_NOT_AVAILABLE,
            KafkaError._UNKNOWN_PARTITION, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN,
            KafkaError._TIMED_OUT, KafkaError._DESTROY_BROKER, KafkaError._RESOLVE)


def _watermarks(consumer: Consumer, tp: TopicPartition, deadline: float, timeout_s: float) -> tuple[int, int]:
    while True:
        try:
            lo, hi = consumer.get_watermark_offsets(tp, timeout=max(0.1, min(timeout_s, deadline - time.monotonic())))
            return int(lo), int(hi)
        except KafkaException as e:
            err = e.args[0] if e.args else None
            retriable = isinstance(err, KafkaError) and (err.retriable() or err.code() in _PASSING)
            if not retriable or time.monotonic() > deadline:
                where = tp.topic if tp.partition == 0 else f"{tp.topic}[{tp.partition}]"
                raise KafkaUnavailable(f"cannot read the end offset of {where}: "
                                       f"{err.str() if isinstance(err, KafkaError) else e}") from None
            time.sleep(0.1)


def ask_end_offsets(admin: AdminClient, keys: Iterable[tuple[str, int]],
                    timeout_s: float = 1.0) -> dict[tuple[str, int], Any]:
    """Ask the broker for the end offsets of the (topic, partition)s ``keys`` without waiting: a future per
    key, whose ``result().offset`` is the partition's end (one request for them all)."""
    futures = admin.list_offsets({TopicPartition(t, p): OffsetSpec.latest() for t, p in keys},
                                 request_timeout=timeout_s)
    return {(tp.topic, tp.partition): f for tp, f in futures.items()}


def consume(consumer: Consumer, max_messages: int = 1000, timeout_s: float = 0.1) -> list[Message]:
    """What has arrived, up to ``max_messages``: waits at most ``timeout_s`` for the first
    message, then takes whatever else is already fetched without waiting (``consume(n, t)``
    alone would wait for n messages or the whole timeout: a hop of latency per call).
    Partition EOF events and transient errors (broker connection lost: librdkafka reconnects)
    are skipped, other errors raise :class:`KafkaUnavailable`."""
    first = consumer.poll(timeout_s)
    if first is None:
        return []
    msgs = [first]
    if max_messages > 1:
        msgs += consumer.consume(num_messages=max_messages - 1, timeout=0)
    if all(map(is_, map(_ERROR, msgs), repeat(None))):   # the usual case, checked in C: no error event among them
        return msgs
    out = []
    for m in msgs:
        err = m.error()
        if err is None:
            out.append(m)
        elif err.code() in _TRANSIENT or (err.retriable() and not err.fatal()):
            continue  # librdkafka reconnects / retries by itself
        else:
            raise KafkaUnavailable(f"consumer error on {m.topic()}: {err.str()}")
    return out


_ERROR = methodcaller("error")
_TRANSIENT = (KafkaError._PARTITION_EOF, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN)


def _headers(msg: Message) -> Sequence[tuple[str, bytes]]:
    """A consumed message's headers.  librdkafka gives them as a list of (key, value) pairs; the stub's
    type also admits the dict and str values ``produce`` accepts, and this project's producers only
    send bytes values."""
    return cast(Sequence[tuple[str, bytes]], msg.headers() or ())


def headers_of(msg: Message) -> dict[str, bytes]:
    return {k: v for k, v in _headers(msg)}


def sent_ms(msg: Message) -> float:
    """Wall-clock send time of a message in ms: the ``sent_ms`` header, else its CreateTime."""
    for k, v in _headers(msg):
        if k == "sent_ms":
            return float(v)
    return float(msg.timestamp()[1])


def now_ms() -> float:
    return time.time() * 1000.0


class Producing:
    """``produce`` with back-pressure (on a full local queue: poll, retry) and delivery errors
    collected instead of lost; shared by the transport, the result sink and the sources."""

    def __init__(self, producer: Producer) -> None:
        self.producer = producer
        self.errors: list[str] = []
        self.pending_since_poll = 0
        self.unpushed = False   # produced since the last push

    def _on_delivery(self, err, msg) -> None:
        if err is not None:
            self.errors.append(f"{msg.topic()}: {err.str()}")

    def produce(self, topic: str, value: bytes, key: Optional[bytes] = None, headers=None,
                partition: int = 0) -> None:
        """To ``partition`` of ``topic`` (not by key): joinlib reads its own topics at partition 0, except a
        scaled-out plan's source and node topics (:mod:`joinlib.node.scale_out`), whose partition p
        carries plan partition p -- so a topic grown for such a run still works for a plain run."""
        p = self.producer
        while True:
            try:
                p.produce(topic, value, key, partition, on_delivery=self._on_delivery, headers=headers)
                break
            except BufferError:
                p.poll(0.05)
        self.pending_since_poll += 1
        self.unpushed = True
        if self.pending_since_poll >= 1000:
            p.poll(0)
            self.pending_since_poll = 0

    def poll(self) -> None:
        self.producer.poll(0)
        self.pending_since_poll = 0
        self.check()

    def push(self, wait_s: float = PUSH_WAIT_S) -> None:
        """Send what the producer holds now, whatever its ``linger.ms``, waiting at most ``wait_s`` for it to be
        delivered (nothing to do when nothing was produced since the last push).  A node calls this when it has
        nothing to read (:data:`NODE_LINGER_MS`)."""
        if self.unpushed:
            self.unpushed = False
            self.producer.flush(wait_s)

    def purge(self) -> int:
        """Drop every message not yet sent (a fenced run's: :mod:`joinlib.adapters.redis_fence`); returns how
        many were waiting.  Their delivery reports (errors: purged) are served and forgotten."""
        left = len(self.producer)
        self.producer.purge(in_queue=True, in_flight=False)
        self.producer.poll(0)
        self.errors.clear()
        return left

    def flush(self, timeout_s: float = 30.0) -> None:
        left = self.producer.flush(timeout_s)
        if left:
            raise KafkaDeliveryError(f"{left} messages still undelivered after {timeout_s:.0f}s "
                                     "(is the broker reachable?)")
        self.check()

    def drain(self, log: Optional[Callable[[str], None]] = None, every_s: float = 5.0) -> None:
        """Wait until every queued message is delivered -- or failed: librdkafka gives up on a message after
        ``message.timeout.ms`` (default 5 min), and :meth:`check` raises then.  Unlike :meth:`flush`, a broker
        outage shorter than that is ridden out instead of failing the caller (issue 16, drill (a))."""
        warned = False
        while True:
            left = self.producer.flush(every_s)
            if not left:
                break
            if log is not None and not warned:
                log(f"waiting for Kafka: {left} message(s) not delivered yet (is the broker down?)")
                warned = True
        if warned and log is not None:
            log("Kafka reachable again: every message delivered")
        self.check()

    def check(self) -> None:
        if self.errors:
            raise KafkaDeliveryError(f"{len(self.errors)} messages could not be delivered; first: {self.errors[0]}")


# --------------------------------------------------------------------------- transport

def links_to_list(stats: dict) -> list[dict]:
    return [{"src": s, "dst": d, "kind": k, "messages": st.messages, "bytes": st.bytes,
             "transfer_ms": round(st.transfer_ms, 3)}
            for (s, d, k), st in sorted(stats.items())]


class KafkaTransport:
    """The node's transport on Kafka: ``send(env)`` -> topic ``node.<query>.<dst>.from.<src>``, key = src site.

    ``stats[(src, dst, kind)]`` counts messages and value bytes as the simulator does;
    ``sensor`` (optional) gets ``on_ship(src, dst, kind, nbytes)``; ``run`` (optional) goes in a
    ``run`` header so that a receiver can drop messages of another run of the same query.
    ``by_part``: a message of plan partition p goes to Kafka partition p (a scaled-out plan,
    :mod:`joinlib.node.scale_out`: the instance that owns p reads only that partition).
    """

    def __init__(self, producer, query: str, *, sensor=None, clock: Callable[[], float] = now_ms,
                 run: Optional[str] = None, by_part: bool = False) -> None:
        self.by_part = by_part
        self.out = producer if isinstance(producer, Producing) else Producing(producer)
        self.query = query
        self.sensor = sensor
        self.clock = clock
        self._run = [("run", run.encode())] if run else []
        self.stats: dict[tuple[str, str, str], LinkStats] = defaultdict(LinkStats)
        self._topics: dict[tuple[str, str], str] = {}
        self._keys: dict[str, bytes] = {}

    def topic(self, src: str, dst: str) -> str:
        t = self._topics.get((src, dst))
        if t is None:
            t = self._topics[(src, dst)] = node_topic(self.query, dst, src)
        return t

    def send(self, env: Envelope) -> None:
        value = wire.encode_envelope(env)
        kind = env.kind
        st = self.stats[(env.src, env.dst, kind)]
        st.messages += 1
        st.bytes += len(value)
        key = self._keys.get(env.src)
        if key is None:
            key = self._keys[env.src] = env.src.encode()
        headers = [("sent_ms", repr(self.clock()).encode()), ("kind", kind.encode()), *self._run]
        self.out.produce(self.topic(env.src, env.dst), value, key, headers, env.part if self.by_part else 0)
        if self.sensor is not None:
            self.sensor.on_ship(env.src, env.dst, kind, len(value))

    def flush(self, timeout_s: float = 30.0) -> None:
        self.out.flush(timeout_s)

    def links(self) -> list[dict]:
        return links_to_list(self.stats)


def _avro_string(s: str) -> bytes:
    b = s.encode()
    return _avro_long(len(b)) + b


class KafkaResultSink:
    """A :class:`~joinlib.runtime.sink.Sink` producing ``records.ResultBatch`` messages to
    ``out.<query>`` (key = site): one per ``emit`` call (a step's output of an epoch), split
    every ``max_results`` results; ``emit_ms`` is the node's clock (wall ms).

    Batches are numbered per plan instance (partition, generation) and head stream: the last step
    of a sequence emits in epoch order, so the numbers are deterministic.  ``skip[(part, gen,
    head_pos)]``: batches numbered below it are counted but not produced -- a restarted node
    replaying from a checkpoint delivered them before it stopped.

    ``rows``: a query with rows on a sink topic also writes each result there
    (:class:`joinlib.adapters.kafka_rows.RowsOut`, numbered and skipped the same way); None: ids only, and
    nothing of the rows' work is done."""

    def __init__(self, producer, query, site: str, *, max_results: int = 50_000, headers=None, rows=None) -> None:
        self.out = producer if isinstance(producer, Producing) else Producing(producer)
        self.query = query.name
        self.names = query.names
        self.topic = out_topic(query.name)
        self.count = 0
        self.batches: dict[tuple[int, int, int], int] = {}
        self.skip: dict[tuple[int, int, int], int] = {}
        self.max_results = max_results
        self.headers = headers
        self._key = site.encode()
        self._lead = _avro_string(self.query) + _avro_string(site)
        self._names = [_avro_string(n) for n in self.names]
        self.rows = rows

    def emit(self, inst, head_pos: int, pos: int, groups, now: float) -> None:
        if self.rows is not None:
            self.rows.emit((inst[1], inst[2], head_pos), head_pos, pos, groups)
        # The bytes records.encode_result_batch writes, assembled per group (avro.result_group_runs).
        key = (inst[1], inst[2], head_pos)
        for part, ngroups, nresults in _group_runs(groups, head_pos, self._names, self._names[pos], self.max_results):
            self._produce(key, now, ngroups, [part], nresults)

    def _produce(self, key: tuple[int, int, int], now: float, ngroups: int, parts: list, nresults: int) -> None:
        n = self.batches.get(key, 0)
        self.batches[key] = n + 1
        self.count += nresults
        if n < self.skip.get(key, 0):
            return
        value = b"".join([self._lead, _avro_long(key[0]), _avro_long(key[1]), _avro_long(n), _avro_long(int(now)),
                          _avro_long(ngroups), *parts, b"\x00"])
        self.out.produce(self.topic, value, self._key, self.headers)


# --------------------------------------------------------------------------- control

def publish_control(out: Producing, query: str, kind: str, payload, *, flush: bool = True) -> None:
    """Publish a control message on its topic (:func:`control_topic_of`)."""
    value = records.encode_control(records.Control(query, kind, payload))
    out.produce(control_topic_of(kind, _site(payload)), value, query.encode(), sign_headers(kind, value) or None)
    if flush:
        out.flush()


def _site(payload: Any) -> Any:
    """The site a node's control message names (its ``status`` topic's)."""
    return payload.get("site") if isinstance(payload, dict) else None


def produce_control_sync(producer: Producer, query: str, kind: str, payload, timeout_s: float = 30.0) -> int:
    """Publish a control message on its topic (:func:`control_topic_of`) and wait for it; returns its offset
    there."""
    box: dict = {}

    def cb(err, msg):
        box["err"], box["offset"] = err, (msg.offset() if err is None else None)

    value = records.encode_control(records.Control(query, kind, payload))
    producer.produce(control_topic_of(kind, _site(payload)), value, query.encode(), on_delivery=cb,
                     headers=sign_headers(kind, value) or None)
    left = producer.flush(timeout_s)
    if left or "err" not in box:
        raise KafkaDeliveryError(f"control message {kind!r} not delivered after {timeout_s:.0f}s")
    if box["err"] is not None:
        raise KafkaDeliveryError(f"control message {kind!r}: {box['err'].str()}")
    return box["offset"]
