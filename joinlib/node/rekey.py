"""The re-keying stage of a scaled-out live query: a site's users' topics in, ``src.<query>.<stream>`` split by
the plan's partition function out (docs/pmjoin.md "Scale-out with live sources").

A scaled-out plan's node instances read plan partition p's source tuples from Kafka partition p of
``src.<query>.<stream>`` (:mod:`joinlib.node.scale_out`), as the replayer writes them.  A user's topic is not
partitioned that way.  So for a live query one :class:`Rekeyer` per site reads the site's live streams exactly
as a node does (:class:`~joinlib.node.sources.LiveInputs`: the same decoder, ``where`` filter, dead letters,
watermarks, lateness, idle advances and ranks) and, instead of handing the released tuples to a host, writes
them as SourceBatch messages -- one per plan partition each time the watermark completes an epoch, an empty one
for a partition without data (:class:`~joinlib.node.rekey_split.EpochSplit`).  The instances run unchanged.

**Where it runs.**  In the site's node service, as one more role of the site's consumer group: the topic
``parts.<query>.<site>`` has a partition D after the D plan partitions, and the instance the group gives it runs
the re-keyer (:mod:`joinlib.node.scale_out`).  So there is nothing more to deploy, and the re-keyer moves
between instances as the plan partitions do: on a hand-over the old owner checkpoints it, on a take-over (its
owner died) the new owner resumes from the last periodic checkpoint.  One re-keyer per site, not per user
partition: a stream's watermark is the minimum over its partitions and its ranks run over all of them, so one
ingest must see them all.  It costs a decode and a produce per record, a small part of what joining costs.

**Exactly once across restarts** (the pattern of :mod:`joinlib.node.recovery`): every second (and when
stopped) the re-keyer flushes its producer and saves in Redis its ingest state (positions, watermarks,
pending records by position), the released tuples of the epoch not complete yet, the last epoch written per
partition, and the end offsets of ``dlq``, ``wm`` and its ``src`` partitions.  A restarted one replays the
idle advances logged after the checkpoint, skips the dead letters already written, and reads its ``src``
partitions from the saved ends: every epoch up to the last one found there is not written again.  The re-done
epochs have the same content (the ingest is deterministic), so each epoch of each partition is in the topic
once.  Batches carry the headers ``run`` and ``epoch`` (the last epoch they cover).

**Reporting.**  The partitions' runs report their results, bytes and latency; the re-keyer, every 2 s, a
``status`` (``part`` D) with what only it knows: its streams' inputs, dead letters and watermarks, and the naive
baseline (every epoch of them shipped to every other site), so that ``joinlib queries`` shows bytes against
``central``.

**Fenced** (:mod:`joinlib.adapters.redis_fence`): a re-keyer claims its work when it starts; one that lost its
role but still runs (paused past its group session) has its checkpoint saves refused and stops at its next
round, its queued batches dropped.  Batches it wrote before it noticed are copies of epochs its successor writes
too: the partitions drop source tuples below what their window was fed already.
"""
from __future__ import annotations

import threading
import time
import uuid
from typing import Any, Optional

from joinlib.adapters.kafka import (
    KafkaUnavailable,
    Producing,
    TopicPartition,
    consume,
    ensure_partitions,
    ensure_topics,
    is_control_topic,
    make_consumer,
    make_producer,
    now_ms,
    partition_ends,
    source_topic,
)
from joinlib.adapters.redis_checkpoint import RedisCheckpoints
from joinlib.control.compile import Compiled
from joinlib.control.messages import Naive, StatusMessage, StopMessage
from joinlib.errors import ClusterError, FencedError
from joinlib.model import Tup
from joinlib.node.control import ControlLog, ControlRecord, decode_control_message, publish
from joinlib.node.recovery import next_checkpoint
from joinlib.node.rekey_split import EpochSplit
from joinlib.node.sources import LiveInputs, dlq_topic, live_streams, marks_topic
from joinlib.protocol import records, wire
from joinlib.runtime import checkpoint
from joinlib.runtime.checkpoint import CheckpointError

EPOCH_HEADER = "epoch"
FORMAT = 1
SCAN_TIMEOUT_S = 30.0
STATUS_EVERY_S = 2.0


def rekey_namespace(query: str, run: Optional[str]) -> str:
    """The Redis namespace of a run's re-keyer checkpoints (one per site under it)."""
    return f"joinlib:{query}:{run or 'norun'}:rekey"


class Rekeyer:
    """The re-keyer of one site for one scaled-out live run (see the module docstring); ``halt``: set, it
    checkpoints (if ``save_on_halt``) and returns; a ``stop`` of the run ends it and clears its checkpoint."""

    def __init__(self, svc: Any, rec: ControlRecord, compiled: Compiled, redis: Any, ctl: ControlLog,
                 halt: threading.Event) -> None:
        self.svc, self.rec, self.ctl, self.halt = svc, rec, ctl, halt
        self.q, self.site, self.msg = compiled.query, svc.site, rec.plan
        split = compiled.partitioned
        if split is None or self.msg.live is None:
            raise ClusterError("a re-keyer serves a scaled-out live query (a partitioned plan with live sources)")
        self.start = self.msg.live   # origin and where each source partition starts
        self.run_id, self.d = self.msg.run, split.function.d
        self.headers = [("run", self.run_id.encode())] if self.run_id else []
        self.streams = [s.name for s in live_streams(self.q, self.site)]
        routes = split.router(self.q)
        tau = self.q.execution.interval_ms
        self.splits = {n: EpochSplit(self.d, routes.get(n), tau) for n in self.streams}
        self.topics = {n: source_topic(self.q, n) for n in self.streams}
        self.store = RedisCheckpoints(redis, rekey_namespace(self.q.name, self.run_id), self.site)
        self.save_on_halt = True
        self.finished: Optional[str] = None   # why it ended ("stopped"), once it has
        self.batches = self.tuples = 0
        self.naive: dict[str, int] = {}
        self.offsets: dict[str, Any] = {}   # the end offsets a restart scans from (see _checkpoint)
        self.consumer: Any = None

    # ------------------------------------------------------------------ setup
    def execute(self, consumer: Any, admin: Any) -> None:
        """Run until stopped (``stop`` of the run) or halted; ``consumer``: a fresh one, assigned here."""
        svc = self.svc
        self.consumer = consumer
        ensure_topics(admin, [dlq_topic(self.q.name), marks_topic(self.q.name)])
        ensure_partitions(admin, list(self.topics.values()), self.d)
        self.out = Producing(make_producer(svc.bootstrap, **{"enable.idempotence": True, "acks": "all"}))
        self.live = LiveInputs(self.q, self.site, self.start.origin_ms, self.start.starts(),
                               bootstrap=svc.bootstrap, out=self.out, run_id=self.run_id, sensor=svc.sensor,
                               log=svc.log, on_naive=self._on_naive, now=now_ms())
        try:
            self._resume()
            consumer.assign(self.ctl.assignment(self.rec.offset) + self.live.topic_partitions())
            svc.log(f"{self.q.name}: re-keying {', '.join(self.streams)} of {self.site} into {self.d} partitions "
                    f"(run {self.run_id})")
            self._loop(consumer)
        except FencedError as e:   # another instance re-keys this site now: write nothing more
            left = self.out.purge()
            svc.log(f"{self.q.name}: re-keyer of {self.site} fenced, stopping without writing ({left} queued "
                    f"message(s) dropped): {e}")
        finally:
            self.live.close()

    def _resume(self) -> None:
        """Claim the work (an earlier owner still running is fenced), then resume from the checkpoint or from the
        plan's start offsets; then what a predecessor wrote since."""
        self.store.fence.claim()
        data = self.store.load()
        pos = self.msg.positions()
        if data is None:
            self.offsets = {"dlq": pos.get((dlq_topic(self.q.name), 0)), "wm": pos.get((marks_topic(self.q.name), 0)),
                            "src": {t: [pos.get((t, p)) for p in range(self.d)] for t in self.topics.values()}}
        else:
            try:
                c = checkpoint.loads(data)
                if c.get("rekey") != FORMAT:
                    raise CheckpointError(f"re-keyer checkpoint format {c.get('rekey')} is not {FORMAT}")
                self.live.restore(c["live"], now_ms())
                for name, st in c["splits"].items():
                    self.splits[name].restore(st)
                self.offsets = c["offsets"]
                self.batches, self.tuples, self.naive = c["batches"], c["tuples"], dict(c["naive"])
            except (CheckpointError, KeyError, TypeError, ValueError) as e:
                raise ClusterError(f"re-keyer {self.site}: the checkpoint at {self.store.tag}#meta does not fit "
                                   f"this plan ({e}); delete the keys {self.store.tag}* to start over") from None
        n_adv = self.live.replay_marks(self.offsets["wm"])
        n_dead = self.live.scan_dead(self.offsets["dlq"])
        found = {n: written_epochs(self.svc.bootstrap, t, self.offsets["src"][t], self.run_id)
                 for n, t in self.topics.items()}
        for name, per in found.items():
            for part, epoch in per.items():
                self.splits[name].skip_to(part, epoch)
        if data is not None or n_adv or n_dead or any(found.values()):
            self.svc.log(f"{self.q.name}: re-keyer resumed {'from its checkpoint' if data else 'from the start'}; "
                         f"{n_adv} idle advance(s) to replay, {n_dead} dead letter(s) and the epochs "
                         f"{ {n: dict(sorted(v.items())) for n, v in found.items() if v} } already written")

    # ------------------------------------------------------------------ the loop
    def _loop(self, consumer: Any) -> None:
        every = self.svc.checkpoint_every_s
        next_ckpt = time.monotonic() + every if every > 0 else float("inf")
        next_status = time.monotonic()
        while self.finished is None:
            if self.halt.is_set():
                if self.save_on_halt:
                    self._checkpoint()
                self.out.flush(5)
                return
            self.store.fence.check_often("producing")   # still the owner: before a round that produces
            now = now_ms()
            for m in consume(consumer, 2000, 0.05):
                if is_control_topic(m.topic()):
                    self._control(m)
                else:
                    self.live.handle(m, now)
            self.live.tick(now, consumer)
            self.live.drain(self)
            self.out.poll()
            if time.monotonic() >= next_ckpt:
                cpu = time.thread_time()
                self._checkpoint()
                next_ckpt = next_checkpoint(time.monotonic(), every, time.thread_time() - cpu)
            if time.monotonic() >= next_status:
                next_status = time.monotonic() + STATUS_EVERY_S
                publish(self.out, self.q.name, self.status(), flush=False)
        publish(self.out, self.q.name, self.status(), flush=False)
        self.out.flush()
        self.store.clear()
        self.svc.log(f"{self.q.name}: re-keyer of {self.site} {self.finished}: {self.tuples} tuples in "
                     f"{self.batches} batches, {self.live.dead_total} dead letters")

    def _control(self, m: Any) -> None:
        r = decode_control_message(m, self.svc.reject_control)
        if r is None:
            return
        self.ctl.add(r)
        if r.query == self.q.name and isinstance(r.message, StopMessage) and self.ctl.is_stopped(self.rec):
            self.finished = "stopped"

    def feed(self, query: str, stream: str, tups: list[Tup], watermark: int) -> None:
        """What :meth:`LiveInputs.drain` hands a host: released tuples and the stream's watermark -> batches."""
        split = self.splits[stream]
        split.add(tups)
        topic, key = self.topics[stream], stream.encode()
        for b in split.close(watermark):
            value = records.encode_source_batch(records.SourceBatch(stream, list(b.tuples), b.watermark))
            self.out.produce(topic, value, key, [*self.headers, (EPOCH_HEADER, str(b.last_epoch).encode())], b.part)
            self.batches += 1
            self.tuples += len(b.tuples)

    def status(self) -> StatusMessage:
        """What the site's live streams did: the inputs, dead letters, watermarks and naive baseline of the
        query's ``status`` (the partitions' runs report their results, bytes and latency; ``part``: the role's
        number, D; ``epoch``: the epochs every partition has been sent)."""
        stats = self.live.stats()
        return StatusMessage(
            self.site, self.run_id, round(now_ms()), inputs=stats["inputs"],
            epoch=min(min(s.written) for s in self.splits.values()) + 1, epochs={}, last_epoch=None,
            naive=tuple(Naive(self.site, dst, n) for dst, n in sorted(self.naive.items())), part=self.d,
            instance=getattr(self.svc, "instance", None), live=True, dead_letters=stats["dead_letters"],
            watermarks_ms=self.live.watermarks_ms())

    def _on_naive(self, dsts: list[str], epoch: int, tups: list[Tup]) -> None:
        n = wire.naive_batch_size(epoch, tups)   # the same batch for every site: sized once
        for dst in dsts:
            self.naive[dst] = self.naive.get(dst, 0) + n

    # ------------------------------------------------------------------ checkpoints
    def _checkpoint(self) -> None:
        """Everything written is in Kafka first (a restart from here will not write it again), then the ends of
        what it writes (a restart scans from them) and its state, in one Redis write.  A broker that does not
        answer for the ends puts the checkpoint off to the next interval: the one before stands."""
        self.live.settle()
        self.store.fence.check("checkpoint")   # a fenced re-keyer's queued batches are dropped, not delivered
        self.out.drain(self.svc.log)
        c = self.consumer
        try:
            ends = {"dlq": partition_ends(c, dlq_topic(self.q.name), 1)[0],
                    "wm": partition_ends(c, marks_topic(self.q.name), 1)[0],
                    "src": {t: partition_ends(c, t, self.d) for t in self.topics.values()}}
        except KafkaUnavailable as e:
            self.svc.log(f"{self.q.name}: re-keyer checkpoint put off ({e})")
            return
        self.offsets = ends
        self.store.save(checkpoint.dumps({
            "format": checkpoint.FORMAT, "rekey": FORMAT, "live": self.live.snapshot(), "offsets": ends,
            "splits": {n: s.snapshot() for n, s in self.splits.items()},
            "batches": self.batches, "tuples": self.tuples, "naive": dict(self.naive)}))


def written_epochs(bootstrap: str, topic: str, starts: list[Optional[int]], run: Optional[str],
                   timeout_s: float = SCAN_TIMEOUT_S) -> dict[int, int]:
    """Per partition of ``topic``, the last epoch (header ``epoch``) of run ``run``'s batches from ``starts[p]``
    (None: the beginning) to the current end; partitions without any are absent."""
    c = make_consumer(bootstrap, f"joinlib-rekey-scan-{uuid.uuid4().hex[:8]}")
    out: dict[int, int] = {}
    try:
        ends = partition_ends(c, topic, len(starts), timeout_s)
        todo = {}
        for p, (s, e) in enumerate(zip(starts, ends, strict=True)):
            lo = c.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)[0]
            first = max(lo, s or 0)
            if first < e:
                todo[p] = (first, e)
        if not todo:
            return out
        c.assign([TopicPartition(topic, p, first) for p, (first, _) in todo.items()])
        run_b = run.encode() if run else None
        deadline = time.monotonic() + timeout_s
        left = set(todo)
        while left:
            if time.monotonic() > deadline:
                raise ClusterError(f"reading {topic} to find the epochs already re-keyed took over {timeout_s:.0f}s")
            for m in consume(c, 5000, 0.5):
                p, off = m.partition() or 0, m.offset() or 0
                h = dict(m.headers() or ())
                epoch = h.get(EPOCH_HEADER)
                if (run_b is None or h.get("run") == run_b) and isinstance(epoch, bytes):
                    out[p] = max(out.get(p, -1), int(epoch))
                if off >= todo[p][1] - 1:
                    left.discard(p)
        return out
    finally:
        c.close()
