"""Restart recovery of a node service: checkpoints in Redis, delivered results from Kafka.

Every ``CHECKPOINT_EVERY_S`` (and when stopped) the service flushes its producer -- a message
the checkpoint counts as sent must be in Kafka, since a replay from the checkpoint will not send
it again -- and its window stores (``joinlib.adapters.redis_blocks``: they write to Redis behind, so
Redis holds their current state only after a flush), and saves, in one atomic Redis script
(``joinlib.adapters.redis_checkpoint``), a copy of its window stores and

* the host's state (``joinlib.runtime.checkpoint``, without the stores' contents: they are the
  copies),
* the consumer positions of its source topics (every partition of a user's topic) and inbound
  topic: every message before them was handed to the host (or the live sources), none after,
* its counters (results and result batches per plan instance and head, bytes per link,
  received, naive, totals),
* the state of its live sources (:class:`joinlib.node.sources.LiveInputs`: watermarks, recent
  ids, on-time records not yet handed to the host, ranks),
* the end offsets of ``out.<query>``, ``dlq.<query>`` and ``wm.<query>`` at that instant, and of the rows'
  sink topic when the query writes rows there (``joinlib.adapters.kafka_rows``), with the rows' numbers so far.

A restarted node of the same run rolls its stores back to the copy, restores the state and
counters, and reads its inputs again from the saved positions.  It redoes the same phases
(the host is deterministic): messages it sends again are dropped by their receivers
(``Host.taken``), and result batches it had delivered before it stopped are skipped -- the
service reads ``out.<query>`` from the saved end offset and skips, per plan instance and head
stream, every batch number already there (batches of one head are numbered in epoch order and
Kafka keeps a producer's order within the partition), and the rows' sink topic likewise for row numbers.  So
the output has each result once, and so has the sink topic each row.
Live sources replay the idle advances logged after the checkpoint at the positions they were
applied at, and skip the dead letters already written (docs/live.md).

The checkpoint blob is plain data (``joinlib.runtime.checkpoint.dumps``/``loads``: no objects).
"""
from __future__ import annotations

import time
from typing import Any, Callable, Optional, Protocol

from joinlib.adapters.kafka import KafkaTransport, TopicPartition, consume, end_offsets, make_consumer, out_topic
from joinlib.adapters.kafka_rows import SEQ_HEADER, SITE_HEADER
from joinlib.adapters.redis_checkpoint import RedisCheckpoints
from joinlib.errors import ClusterError
from joinlib.model import Query
from joinlib.node.adaptive_service import OrderLog
from joinlib.node.sources import dlq_topic, marks_topic, read_topic_from
from joinlib.protocol import records
from joinlib.runtime import checkpoint
from joinlib.runtime.checkpoint import CheckpointError
from joinlib.runtime.host import Host
from joinlib.settings import PAUSE_HOOK_ENV

#: a checkpoint takes at most this share of a node's CPU: when one used d CPU-seconds, the next waits at least
#: d / CHECKPOINT_SHARE (a node draining a backlog reads far ahead of its watermark, and its checkpoint names
#: every record read ahead; see docs/reliability.md "How often a node checkpoints")
CHECKPOINT_SHARE = 0.05
#: ... but never longer than this: a crash redoes at most this much input (a checkpoint that waited out a broker
#: outage used little CPU, so it does not push the next one out either)
CHECKPOINT_MAX_S = 30.0


def next_checkpoint(now: float, every: float, took_cpu: float) -> float:
    """When the checkpoint after one that ended at ``now`` and used ``took_cpu`` CPU-seconds (its thread's: the
    waits for Kafka or Redis are not counted) is due: ``every`` seconds later, or later still when checkpoints
    would take more than :data:`CHECKPOINT_SHARE` of the CPU, but at most :data:`CHECKPOINT_MAX_S` (or ``every``
    if that is longer)."""
    return now + min(max(every, took_cpu / CHECKPOINT_SHARE), max(every, CHECKPOINT_MAX_S))


class Run(Protocol):
    """What a checkpoint saves and restores of a node service's run (:class:`~.node_run.PlanRun`)."""

    q: Query
    site: str
    run_id: Optional[str]
    host: Host
    consumer: Any
    sink: Any          # a KafkaResultSink, or what stands for one (a tree operator's)
    transport: KafkaTransport
    counters: Any
    live: Any
    live_name: str   # whose dlq and wm topics the live ingest writes (a tree operator's: its deployment's)
    adaptive: Any   # an adaptive plan's node around the host (joinlib.node.adaptive_service), or None
    output: Any     # its results' destination, whose own state a checkpoint keeps (joinlib.node.run_parts)
    svc: Any
    report: Any     # its status reporter (the epochs of its generations, for the log)

    @property
    def out_query(self) -> Query:
        """Whose out topic the results go to (a tree operator's: its tree query's)."""

    @property
    def tps(self) -> list[TopicPartition]:
        """Every partition the run reads, as assigned."""

FORMAT = 2

def _links(stats: dict[tuple[str, str, str], Any]) -> list[Any]:
    return [(list(k), st.messages, st.bytes, st.transfer_ms) for k, st in stats.items()]


def _unlinks(rows: list[Any], into: dict[tuple[str, str, str], Any]) -> None:
    for k, msgs, nbytes, ms in rows:
        st = into[tuple(k)]
        st.messages, st.bytes, st.transfer_ms = msgs, nbytes, ms


def checkpoints_for(run: Any, factory: Any) -> Optional[NodeCheckpoints]:
    """Checkpoints of ``run``, when its windows are in Redis and its output allows them (else None: nothing
    to resume from).  An adaptive run's also log the order of its inputs, with its live sources' watermarks
    (docs/adaptive.md)."""
    if not run.output.keeps_checkpoints():   # a tree operator that is the root of several queries' trees
        return None
    client, namespace = getattr(factory, "client", None), getattr(factory, "namespace", None)
    ckpt = None
    if client is not None and namespace is not None:
        ckpt = NodeCheckpoints(client, namespace, run.site, run.svc.log, run.svc.settings.checkpoint_pause,
                               flush=getattr(factory, "flush", None))
        if run.svc.store_factory is None and hasattr(factory, "fence"):   # the run's own factory: fenced stores
            factory.fence = ckpt.fence
    if run.adaptive is not None:
        _adaptive_checkpoints(run, ckpt)
    return ckpt


def _adaptive_checkpoints(run: Any, ckpt: Optional[NodeCheckpoints]) -> None:
    if ckpt is not None:
        run.adaptive.order = OrderLog(ckpt.store.client, ckpt.store.tag)
    elif run.run_id is not None and (run.run_id, run.site) in run.ctl.started:
        # a predecessor ran it (its status is on control) and there is nothing to resume from
        raise ClusterError(f"node {run.site}: the adaptive run {run.run_id} of {run.q.name} already ran here "
                           "and did not finish; without checkpoints (Redis windows) an "
                           "adaptive run cannot be resumed after a crash (docs/adaptive.md): start the run "
                           "again")


class NodeCheckpoints:
    """A run's checkpoints in Redis (see the module docstring); ``pause``: the test hook of
    :attr:`joinlib.settings.NodeSettings.checkpoint_pause`; ``flush``: makes Redis hold the window stores'
    current state (the store factory's: block stores write behind), called before each save copies them."""

    def __init__(self, client: Any, namespace: str, site: str, log: Callable[[str], None],
                 pause: Optional[tuple[int, float]] = None, flush: Optional[Callable[[], Any]] = None) -> None:
        self.store = RedisCheckpoints(client, namespace, site)
        self.flush = flush
        self.site = site
        self.log = log
        self.out_offset: Optional[int] = None
        self.dlq_offset: Optional[int] = None
        self.marks_offset: Optional[int] = None
        self.rows_offset: Optional[int] = None
        self.saved = 0
        self.pause = pause

    def take(self, run: Run, out: Any, sensor: Any) -> None:
        """Flush ``out`` and save a checkpoint of ``run`` (timed, to ``sensor``)."""
        t0 = time.perf_counter()
        self.fence.check("checkpoint")   # a fenced run's queued messages are dropped, not delivered first
        # what the checkpoint says was sent must be in Kafka: a replay from it won't resend it; a broker outage
        # is waited out (up to message.timeout.ms), not a reason to fail the run
        out.drain(self.log)
        self.save(run)
        sensor.on_checkpoint(self.site, time.perf_counter() - t0)

    def prepare(self, run: Run, offsets: dict[tuple[str, int], int], resumed: bool) -> None:
        """Before a run reads its inputs: the end offsets a fresh run starts scanning from, the result batches
        already delivered (skipped), and the live sources' idle advances and dead letters already written."""
        if not resumed:  # from the start; a predecessor may still have delivered results
            self.out_offset = offsets.get((out_topic(run.out_query.name), 0))
            self.dlq_offset = offsets.get((dlq_topic(run.live_name), 0))
            self.marks_offset = offsets.get((marks_topic(run.live_name), 0))
            rows = _rows(run)
            self.rows_offset = None if rows is None else offsets.get((rows.topic, 0))
        run.sink.skip = self.delivered(run.svc.bootstrap, run.out_query, run.run_id)
        rows = _rows(run)
        if rows is not None:
            rows.skip = delivered_rows(run.svc.bootstrap, rows.topic, self.rows_offset, self.site, run.run_id)
        if run.live is not None:
            n_adv = run.live.replay_marks(self.marks_offset)
            n_dead = run.live.scan_dead(self.dlq_offset)
            if n_adv or n_dead:
                self.log(f"{run.q.name}: {n_adv} idle advance(s) to replay, {n_dead} dead letter(s) already written")
        if resumed or any(run.sink.skip.values()):
            self.log(f"resumed from {'the checkpoint at epochs %s' % run.report.epochs() if resumed else 'the start'}; "
                     f"result batches already delivered: {run.sink.skip}"
                     + (f", rows: {rows.skip}" if rows is not None else ""))

    def save(self, run: Run) -> None:
        consumer, tps = run.consumer, run.tps
        positions = []
        for tp in consumer.position([TopicPartition(tp.topic, tp.partition) for tp in tps]):
            # nothing consumed yet from a partition: its assigned start
            off = tp.offset if tp.offset >= 0 else next(
                x.offset for x in tps if (x.topic, x.partition) == (tp.topic, tp.partition))
            positions.append([tp.topic, tp.partition, off])
        self.out_offset = end_offset(consumer, out_topic(run.out_query.name), self.out_offset)
        rows = _rows(run)
        if rows is not None:
            self.rows_offset = end_offset(consumer, rows.topic, self.rows_offset)
        if run.live is not None:
            self.dlq_offset = end_offset(consumer, dlq_topic(run.live_name), self.dlq_offset)
            self.marks_offset = end_offset(consumer, marks_topic(run.live_name), self.marks_offset)
        publish = run.output.checkpointed(run)   # before its state: a shared operator's marks are in both
        c, totals = run.counters, run.counters.totals
        adaptive = getattr(run, "adaptive", None)
        tag = adaptive.new_tag() if adaptive is not None else None
        data = checkpoint.dumps({
            "adaptive": adaptive.snapshot(tag) if adaptive is not None else None,
            "format": checkpoint.FORMAT, "service": FORMAT,
            "host": checkpoint.snapshot(run.host), "positions": positions, "out_offset": self.out_offset,
            "dlq_offset": self.dlq_offset, "marks_offset": self.marks_offset,
            "live": run.live.snapshot() if run.live is not None else None,
            "sink": {"count": run.sink.count, "batches": [(list(k), n) for k, n in run.sink.batches.items()],
                     "rows": None if rows is None else [(list(k), n) for k, n in rows.seq.items()]},
            "rows_offset": self.rows_offset,
            "links": _links(run.transport.stats), "received": _links(c.received),
            "naive": [(list(k), n) for k, n in c.naive.items()],
            "totals": {"inputs": [(list(k), n) for k, n in totals.inputs.items()],
                       "processing": [(list(k), s) for k, s in totals.processing.items()],
                       "emitted": list(totals.emitted.items()),
                       "late": [(list(k), n) for k, n in totals.late.items()]},
            "saved_ms": time.time() * 1000.0, "extra": run.output.state(),
        })
        if self.pause is not None and self.saved + 1 == self.pause[0]:
            self.log(f"checkpoint hook: pausing {self.pause[1]:g} s in checkpoint {self.pause[0]} "
                     f"(producer flushed, Redis not saved; {PAUSE_HOOK_ENV})")
            time.sleep(self.pause[1])
        if self.flush is not None:   # the windows' changes since the last checkpoint, then their copies
            self.flush()
        self.store.save(data, publish)
        self.saved += 1
        if adaptive is not None and adaptive.order is not None:
            adaptive.order.checkpointed(tag)   # the input order is logged from this checkpoint on

    @property
    def fence(self) -> Any:
        """The run's claim of its work (:mod:`joinlib.adapters.redis_fence`)."""
        return self.store.fence

    def load(self) -> Optional[bytes]:
        """Claim the work (every earlier owner's writes are refused from now on), roll the Redis stores back to
        the last checkpoint and return it; with none, empty the stores (a predecessor may have filled them
        before its first checkpoint)."""
        epoch = self.fence.claim()
        if epoch > 1:
            self.log(f"owner epoch {epoch} of {self.store.tag}: earlier owners of this work are fenced")
        data = self.store.load()
        if data is None:
            self.store.reset()
        return data

    def resume(self, data: bytes, run: Run) -> dict[tuple[str, int], int]:
        """Put a checkpoint (:meth:`load`) into the fresh host, live sources and counters; returns
        the input positions to read from, per (topic, partition)."""
        try:
            c = checkpoint.loads(data)
            if c.get("service") != FORMAT:
                raise CheckpointError(f"node checkpoint format {c.get('service')} is not {FORMAT}")
            _restore_host(run, c)
            if (c["live"] is None) != (run.live is None):
                raise CheckpointError("the checkpoint and the plan disagree on live sources")
            if run.live is not None:
                run.live.restore(c["live"], time.time() * 1000.0)
            run.output.restore(c.get("extra"))
        except (CheckpointError, KeyError, TypeError, ValueError) as e:
            raise ClusterError(f"node {self.site}: the checkpoint at {self.store.tag}#meta does not fit this "
                               f"plan ({e}); delete the keys {self.store.tag}* to start the run over") from None
        self._restore_sink(run, c)
        _unlinks(c["links"], run.transport.stats)
        _unlinks(c["received"], run.counters.received)
        for k, n in c["naive"]:
            run.counters.naive[tuple(k)] = n
        t, saved = run.counters.totals, c["totals"]
        for k, n in saved["inputs"]:
            t.inputs[tuple(k)] = n
        for k, s in saved["processing"]:
            t.processing[tuple(k)] = s
        for site, n in saved["emitted"]:
            t.emitted[site] = n
        for k, n in saved["late"]:
            t.late[tuple(k)] = n
        self.out_offset, self.dlq_offset, self.marks_offset = c["out_offset"], c["dlq_offset"], c["marks_offset"]
        return {(t, p): off for t, p, off in c["positions"]}

    def _restore_sink(self, run: Run, c: dict[str, Any]) -> None:
        """The sink's counters: results, result batches and rows numbered so far, and the sink topic's offset."""
        run.sink.count = c["sink"]["count"]
        run.sink.batches = {tuple(k): n for k, n in c["sink"]["batches"]}
        rows = _rows(run)
        if rows is not None:
            rows.seq = {tuple(k): n for k, n in c["sink"].get("rows") or ()}
            self.rows_offset = c.get("rows_offset")

    def delivered(self, bootstrap: str, query: Query, run: Optional[str],
                  timeout_s: float = 30.0) -> dict[tuple[int, int, int], int]:
        """Per (partition, generation, head stream position): 1 + the highest batch number this site
        delivered to ``out.<query>`` after the checkpoint's end offset (absent: none)."""
        topic = out_topic(query.name)
        pos = {n: i for i, n in enumerate(query.names)}
        skip: dict[tuple[int, int, int], int] = {}
        c = make_consumer(bootstrap, f"joinlib-recover-{self.site}")
        try:
            # retried while the client's metadata lags (a topic just created, a broker just restarted)
            end = end_offsets(c, [topic], timeout_s)[topic]
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
                    last = m.offset() or 0
                    value = m.value()
                    if m.key() != key or value is None or (
                            run_b is not None and dict(m.headers() or ()).get("run") != run_b):
                        continue
                    b = records.decode_result_batch(value)
                    if b.groups:
                        h = (b.part, b.gen, pos[b.groups[0].head])
                        skip[h] = max(skip.get(h, 0), b.batch + 1)
            return skip
        finally:
            c.close()

    def clear(self) -> None:
        try:
            self.store.clear()
        except Exception as e:  # the run's result stands; stale keys are only a leak
            self.log(f"could not clear the checkpoint: {e}")


def clear_state(run: Any) -> None:
    """A finished run's state, gone: its checkpoint, its input order log (adaptive), its windows; its store
    factory closed."""
    if run.ckpt:
        run.ckpt.clear()
    if run.adaptive is not None and run.adaptive.order is not None:
        run.adaptive.order.clear()
    for store in run.made:
        try:
            store.clear()
        except Exception as e:  # the run's result stands; stale keys are only a leak
            run.svc.log(f"could not clear window store: {e}")
    if run.factory is not None and hasattr(run.factory, "close"):
        run.factory.close()


def _restore_host(run: Run, c: dict[str, Any]) -> None:
    """The checkpoint's host state into ``run.host`` -- for an adaptive plan, a fresh host and node from the
    node's state (``joinlib.node.adaptive_service``)."""
    adaptive = getattr(run, "adaptive", None)
    if (c.get("adaptive") is None) != (adaptive is None):
        raise CheckpointError("the checkpoint and the plan disagree on adaptive re-planning")
    if adaptive is not None:
        run.host = adaptive.restore(c["adaptive"])
    else:
        checkpoint.restore(run.host, c["host"])


def delivered_rows(bootstrap: str, topic: str, start: Optional[int], site: str,
                   run: Optional[str]) -> dict[tuple[int, int, int], int]:
    """Per (partition, generation, head stream position): 1 + the highest row number ``site`` wrote to partition 0
    of the sink ``topic`` in ``run`` from offset ``start`` on (None: the beginning) -- the rows a restarted node
    must not write again (``joinlib.adapters.kafka_rows``)."""
    skip: dict[tuple[int, int, int], int] = {}
    for headers, _ in read_topic_from(bootstrap, topic, start, site, run, site_header=SITE_HEADER):
        seq = headers.get(SEQ_HEADER)
        if isinstance(seq, bytes):
            part, gen, head, n = (int(x) for x in seq.decode().split("."))
            skip[(part, gen, head)] = max(skip.get((part, gen, head), 0), n + 1)
    return skip


def _rows(run: Any) -> Any:
    """The rows part of ``run``'s sink (:class:`~joinlib.adapters.kafka_rows.RowsOut`), or None: a query without
    rows on a sink topic, or a tree operator's sink (which writes ids only)."""
    return getattr(run.sink, "rows", None)


def end_offset(consumer: Any, topic: str, previous: Optional[int]) -> Optional[int]:
    """The end offset of partition 0 of ``topic`` now; the previous bound if it cannot be read (a
    scan after a restart from an earlier offset only reads more)."""
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=5)[1]
    except Exception:
        return previous
