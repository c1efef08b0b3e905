"""Live sources of a node service: the users' topics in, tuples and watermarks to the host, bad
records to ``dlq.<query>``, idle advances to ``wm.<query>``.

One :class:`LiveInputs` per run at a node, for the streams born at its site whose ``source`` is
``json`` or ``avro`` (``sourcebatch`` sources are read like the replayer's topics).  Per record it
decodes (:class:`joinlib.ingest.Decoder`), classifies (:class:`joinlib.ingest.StreamIngest`) and
either keeps it or writes it to the dead-letter topic; per loop it logs and applies the idle advances
due, and hands the released tuples with the stream's watermark to ``Host.feed``.

Exactly once across restarts (docs/live.md):

* the checkpoint holds each stream's ingest state (positions, watermarks, recent ids, ranks, and
  the pending records -- on time, not released yet -- by position only: a restarted node reads them
  again from the topic, from the first of them, before it releases anything);
* idle advances are produced to ``wm.<query>`` and flushed *before* they are applied; a restarted
  node reads its advances after the checkpoint's offset of that topic and applies each at the
  position it was logged at, so every record is classified as before;
* dead letters already in ``dlq.<query>`` after the checkpoint's offset are not written again.

``dlq.<query>`` records: the original key and value (bytes as read), headers ``dlq.reason``
(:data:`joinlib.ingest.REASONS`), ``dlq.detail``, ``dlq.stream``, ``dlq.topic``, ``dlq.partition``,
``dlq.offset``, ``dlq.site`` and ``run``.  ``wm.<query>`` records: JSON ``{"site", "run", "stream",
"part", "at", "wm"}`` (``at``: the partition's next offset when applied; ``wm``: ms from the origin),
key = site.
"""
from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from bisect import bisect_left
from collections import defaultdict
from itertools import groupby, islice
from operator import attrgetter, lt, methodcaller
from typing import Any, Callable, Optional

import fastavro

from joinlib.adapters.kafka import (
    Producing,
    TopicPartition,
    ask_end_offsets,
    consume,
    make_admin,
    make_consumer,
    make_producer,
)
from joinlib.errors import ClusterError
from joinlib.ingest import Advance, Bad, Decoder, StreamIngest
from joinlib.ingest.records import LATE, Event, Filtered
from joinlib.model import Query, Stream, Tup
from joinlib.protocol import avro
from joinlib.rows import names_every_field

MARKS_FLUSH_TIMEOUT_S = 10.0
MARKS_WARN_S = 5.0       # an idle advance not logged after this long: say that Kafka is awaited
PROBE_EVERY_MS = 500.0   # how often an unreachable broker is asked again (LiveInputs.tick)
STALL_MS = 1000.0        # a node loop this long without a tick restarts the idle clock (LiveInputs.tick)
#: end offsets asked for an idle advance that have not answered after this long (their request is bounded at
#: 1 s; one lost in a broker's restart may never answer): the broker counts as unreachable, the advances are
#: dropped and the records held for them handled -- a node must not hold its partitions' records forever
ASK_LIMIT_S = 10.0
_PARTITION, _OFFSET, _VALUE = methodcaller("partition"), methodcaller("offset"), methodcaller("value")
_TS = attrgetter("ts")


def dlq_topic(query: str) -> str:
    return f"dlq.{query}"


def marks_topic(query: str) -> str:
    return f"wm.{query}"


def live_streams(query: Query, site: Optional[str] = None) -> list[Stream]:
    """The streams (of ``site``) whose source is a user's topic of json or avro records."""
    return [s for s in query.streams if s.source is not None and s.source.live and (site is None or s.site == site)]


# --------------------------------------------------------------------------- schema registry

class RegistrySchemas:
    """Writer schemas by id from a Confluent schema registry (``GET /schemas/ids/<id>``), cached;
    the query's schema file where the registry cannot be reached (None: unknown id)."""

    def __init__(self, url: Optional[str], fallback: Optional[str], log: Callable[[str], None],
                 timeout_s: float = 5.0, retry_s: float = 30.0) -> None:
        self.url = url.rstrip("/") if url else None
        self.fallback = None if fallback is None else fastavro.parse_schema(json.loads(fallback))
        self.log, self.timeout_s, self.retry_s = log, timeout_s, retry_s
        self.cache: dict[int, Any] = {}
        self._warned = False

    def __call__(self, schema_id: int) -> Any:
        if schema_id in self.cache:
            return self.cache[schema_id]
        if self.url is None:
            return self.fallback
        deadline = time.monotonic() + self.retry_s
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/schemas/ids/{schema_id}", timeout=self.timeout_s) as r:
                    schema = fastavro.parse_schema(json.loads(json.loads(r.read())["schema"]))
                self.cache[schema_id] = schema
                return schema
            except urllib.error.HTTPError as e:
                if e.code == 404:
                    return None  # not a schema of this registry: the record is malformed
                why = f"HTTP {e.code}"
            except (urllib.error.URLError, OSError, ValueError, KeyError) as e:
                why = str(getattr(e, "reason", e))
            if self.fallback is not None:
                if not self._warned:
                    self.log(f"schema registry {self.url} unreachable ({why}); using the query's schema file")
                    self._warned = True
                return self.fallback
            if time.monotonic() > deadline:
                raise ClusterError(f"schema registry {self.url}: cannot fetch schema {schema_id} ({why}); "
                                   "check the source's 'registry' URL or give a 'schema' file")
            time.sleep(1.0)


# --------------------------------------------------------------------------- one stream

class _Source:
    """One live stream at this node: its decoder, ingest state and counters."""

    def __init__(self, stream: Stream, decoder: Decoder, ingest: StreamIngest) -> None:
        self.stream, self.decoder, self.ingest = stream, decoder, ingest
        assert stream.source is not None
        self.topic = stream.source.topic
        self.open: list[Tup] = []          # released tuples of the epoch not yet closed (naive bytes)
        self.inputs = 0                    # released (on-time) tuples
        self.dead: dict[str, int] = defaultdict(int)

    def snapshot(self) -> dict[str, Any]:
        """What a checkpoint keeps of the stream (plain data)."""
        return {"ingest": self.ingest.snapshot(), "inputs": self.inputs, "dead": dict(self.dead),
                "open": [avro.encode_tuple(t) for t in self.open]}

    def restore(self, d: dict[str, Any], now: float) -> None:
        self.ingest.restore(d["ingest"], now)
        self.inputs = d["inputs"]
        self.dead = defaultdict(int, d["dead"])
        self.open = [avro.decode_tuple(b) for b in d["open"]]


class _PendingAdvances:
    """Idle advances decided, not applied yet: the end offsets asked for (``ends``), once they answered the
    advances they confirm, logged at ``logged`` (monotonic s; 0: not yet); the records of their partitions
    that arrived meanwhile (``held``), handled once the advances are applied or dropped."""

    def __init__(self, due: list[tuple[_Source, Advance]], ends: dict[tuple[str, int], Any]) -> None:
        self.due, self.ends = due, ends
        self.holding = set(ends)
        self.held: list[Any] = []
        self.asked = time.monotonic()
        self.logged = 0.0
        self.warned = False


class LiveInputs:
    """The live sources of one run at one node (see the module docstring).

    ``starts``: stream -> {partition: first offset} (the plan message's, or the checkpoint's);
    ``out``: the run's producer (dead letters); ``sensor``: the service's Prometheus sensor
    (``on_dead_letter``, ``on_source_watermark``); ``on_naive(dsts, epoch, tuples)``: an epoch of
    a home stream is complete (what shipping it naively to each of ``dsts``, the other sites, would cost)."""

    def __init__(self, query: Query, site: str, origin_ms: int, starts: dict[str, dict[int, int]], *,
                 bootstrap: str, out: Producing, run_id: Optional[str], sensor: Any,
                 log: Callable[[str], None], on_naive: Callable[[list[str], int, list[Tup]], None],
                 now: float, name: Optional[str] = None) -> None:
        self.q, self.site, self.origin, self.run_id = query, site, origin_ms, run_id
        name = name or query.name   # the query whose dlq and wm topics these are (an MJoin tree's, not an operator's)
        self.out, self.sensor, self.log, self.on_naive = out, sensor, log, on_naive
        self.bootstrap = bootstrap
        self.dlq, self.marks = dlq_topic(name), marks_topic(name)
        self.others = [x for x in query.sites if x != site]
        ex = query.execution
        self.sources: dict[str, _Source] = {}
        self.by_topic: dict[str, list[_Source]] = defaultdict(list)
        for s in live_streams(query, site):
            assert s.source is not None
            parts = starts.get(s.name)
            if not parts:
                raise ClusterError(f"query {query.name}: no start offsets for the partitions of {s.source.topic} "
                                   f"(stream {s.name}); submit the query again")
            schemas = None
            if s.source.format == "avro" and s.source.registry:
                schemas = RegistrySchemas(s.source.registry, s.source.schema, log)
            src = _Source(s, Decoder(s, s.source, origin_ms, schemas, named=names_every_field(query)),
                          StreamIngest(s, parts, tau=ex.interval_ms, delta=ex.max_delay_ms,
                                       idle_timeout=ex.idle_timeout_ms, now=now))
            self.sources[s.name] = src
            self.by_topic[s.source.topic].append(src)
        self._headers = [("run", run_id.encode())] if run_id else []
        self._marks_out: Optional[Producing] = None
        self._admin: Any = None
        self._pending: Optional[_PendingAdvances] = None   # idle advances being confirmed and logged
        self._contact_from = now   # see tick
        self._unreachable = False
        self._probed = 0.0
        self._last_tick = now
        self.skip_dead: set[tuple[str, int, int]] = set()   # (topic, partition, offset) already in the DLQ
        self.dead_total = 0
        # a replan (docs/live.md "Replan"): stream -> {partition: offset} from which (since) or before which (until)
        # this run writes dead letters; the other run of the switch writes the others
        self.dead_since: dict[str, dict[int, int]] = {}
        self.dead_until: dict[str, dict[int, int]] = {}

    def own_dead_letters(self, since: Optional[dict[str, dict[int, int]]] = None,
                         until: Optional[dict[str, dict[int, int]]] = None) -> None:
        """Write dead letters only for records at or after ``since`` and before ``until`` (per stream and
        partition): two runs of a replan read the same records for a while, and each bad record is written once."""
        self.dead_since.update(since or {})
        self.dead_until.update(until or {})

    def _owns(self, stream: str, part: int, offset: int) -> bool:
        lo, hi = self.dead_since.get(stream, {}).get(part), self.dead_until.get(stream, {}).get(part)
        return (lo is None or offset >= lo) and (hi is None or offset < hi)

    # ------------------------------------------------------------------ assignment
    def topic_partitions(self) -> list[TopicPartition]:
        """Every partition of the sources, at the position each stream reads next (a topic feeding
        two streams is read once, from the lower position)."""
        at: dict[tuple[str, int], int] = {}
        for src in self.sources.values():
            for part, p in src.ingest.parts.items():
                key = (src.topic, part)
                back = src.ingest.rewind(part)   # pending records a checkpoint named: read them again
                first = p.next if back is None else min(back, p.next)
                at[key] = min(at.get(key, first), first)
        return [TopicPartition(t, part, off) for (t, part), off in sorted(at.items())]

    # ------------------------------------------------------------------ records
    def handle(self, m: Any, now: float) -> None:
        topic, part, offset, value = m.topic(), m.partition(), m.offset(), m.value()
        if self._pending is not None and (topic, part) in self._pending.holding:
            self._pending.held.append(m)   # after an idle advance of its partition still being confirmed
            return
        for src in self.by_topic[topic]:
            p = src.ingest.parts.get(part)
            if p is None:
                continue  # a partition added after submission
            if offset < p.next:   # read before the checkpoint: pending then (read again), or done with
                if src.ingest.missing:
                    self._readmit(src, part, offset, value)
                continue
            if src.ingest.missing:
                self._check_lost(src, part, offset)
            self._take(src, m, part, offset, value, now)

    def handle_run(self, topic: str, msgs: list[Any], now: float) -> None:
        """:meth:`handle` of each of ``msgs`` (records of ``topic``, in the order read), the usual case in one loop:
        a topic feeding one stream, no idle advance being confirmed, no checkpoint's records being read again.
        Each run of records of one partition is decoded (:meth:`Decoder.decode_run`) and offered
        (:meth:`StreamIngest.offer_run`) at once, then its dead letters are written in the order read: the same
        calls and dead letters as record by record."""
        srcs = self.by_topic[topic]
        if self._pending is not None or len(srcs) != 1 or srcs[0].ingest.missing:
            for m in msgs:
                self.handle(m, now)
            return
        src = srcs[0]
        if src.decoder.may_raise:   # a raise must leave the records before it handled, as record by record
            self._take_each(src, msgs, now)
            return
        parts, decode_run, offer_run = src.ingest.parts, src.decoder.decode_run, src.ingest.offer_run
        for part, group in groupby(msgs, _PARTITION):
            p = parts.get(part)
            if p is None:
                continue   # a partition added after submission
            run = list(group)
            offsets = list(map(_OFFSET, run))
            if not all(map(lt, offsets, islice(offsets, 1, None))):   # not increasing (a seek?): one by one, as ever
                self._take_each(src, run, now)
                continue
            first = bisect_left(offsets, p.next)   # those below were read before the checkpoint
            if first:
                run, offsets = run[first:], offsets[first:]
            if not run:
                continue
            events = decode_run(part, offsets, list(map(_VALUE, run)))
            for i, bad in offer_run(part, offsets, events, now):
                self._dead(src, run[i], bad, events[i].ts if bad.reason == LATE else None)

    def _take_each(self, src: _Source, msgs: list[Any], now: float) -> None:
        """:meth:`handle_run`'s records one by one."""
        parts, take = src.ingest.parts, self._take
        for m in msgs:
            part, offset = m.partition(), m.offset()
            p = parts.get(part)
            if p is None or offset < p.next:
                continue   # a partition added after submission; read before the checkpoint (nothing missing)
            take(src, m, part, offset, m.value(), now)

    def _take(self, src: _Source, m: Any, part: int, offset: int, value: Optional[bytes], now: float) -> None:
        """Record ``offset`` of ``part``, read for the first time: on time (pending), late or malformed (a dead
        letter), or dropped by the stream's WHERE (it moves the read position only)."""
        ev = src.decoder.decode(value, part, offset)
        if type(ev) is Event:
            bad = src.ingest.offer(part, offset, ev, now)
            if bad is not None:
                self._dead(src, m, bad, ev.ts if bad.reason == LATE else None)
            return
        src.ingest.skip(part, offset)
        if isinstance(ev, Bad):
            self._dead(src, m, ev)

    def _readmit(self, src: _Source, part: int, offset: int, value: bytes) -> None:
        ev = src.decoder.decode(value, part, offset)
        # a malformed or filtered record was never pending: readmit raises if the checkpoint named it
        _restored(src.ingest.readmit, part, offset, None if isinstance(ev, (Bad, Filtered)) else ev)

    def _check_lost(self, src: _Source, part: int, offset: int) -> None:
        _restored(src.ingest.check_lost, part, offset)

    def _dead(self, src: _Source, m: Any, bad: Bad, event_ts: Optional[int] = None) -> None:
        if not self._owns(src.stream.name, m.partition(), m.offset()):
            return   # the other run of a replan writes it
        src.dead[bad.reason] += 1
        self.dead_total += 1
        self.sensor.on_dead_letter(self.site, self.q.name, src.stream.name, bad.reason)
        where = (m.topic(), m.partition(), m.offset())
        if where in self.skip_dead:
            return  # written before a restart
        headers = [("dlq.reason", bad.reason.encode()), ("dlq.detail", bad.detail.encode()),
                   ("dlq.stream", src.stream.name.encode()), ("dlq.topic", where[0].encode()),
                   ("dlq.partition", str(where[1]).encode()), ("dlq.offset", str(where[2]).encode()),
                   ("dlq.site", self.site.encode()), *self._headers]
        if event_ts is not None:
            headers.append(("dlq.event_time_ms", str(event_ts + self.origin).encode()))
        self.out.produce(self.dlq, m.value(), m.key(), headers)

    # ------------------------------------------------------------------ idle advances
    def tick(self, now: float, consumer: Any) -> int:
        """Log, then apply, the idle advances due; returns how many.

        An advance is decided on fresh end offsets from the broker, not on the consumer's cached ones (stale
        while the broker is down or this node was paused).  After a look at them failed (the broker down), the
        node probes the broker (every ``PROBE_EVERY_MS``) until it answers, and no partition advances before a
        whole idle timeout has passed *since it answered again* -- the sources' producers get that long to
        reconnect and deliver what they buffered meanwhile (issue 16, drill (a)).  The same after any stall
        of the node's loop longer than ``STALL_MS``: a node blocked in a checkpoint's flush for the whole
        outage never looked, and advanced right after the broker came back, before the generator had
        reconnected -- its buffered records turned late (drill (a), about one run in three)."""
        if now - self._last_tick > STALL_MS:
            # the node did not tick for a while (blocked waiting for the broker in a checkpoint's flush,
            # stopped, overloaded): it saw nothing meanwhile, so the idle clock starts again
            self._contact_from = now
        self._last_tick = now
        if self._unreachable:
            self._probe(now, consumer)
            return 0
        if self._pending is not None:
            return self._progress(now, block=False)
        if now - self._contact_from < self.q.execution.idle_timeout_ms:
            return 0
        due: list[tuple[_Source, Advance]] = []
        for src in self.sources.values():
            def caught_up(part: int, topic: str = src.topic, ingest: StreamIngest = src.ingest) -> bool:
                try:
                    _, hi = consumer.get_watermark_offsets(TopicPartition(topic, part), cached=True)
                except Exception:
                    return False
                return 0 <= hi <= ingest.parts[part].next
            due.extend((src, adv) for adv in src.ingest.idle_advances(now, caught_up))
        if due:
            self._confirm(due)
        return 0

    # An advance is confirmed by the broker (fresh end offsets), logged, then applied.  Those are two broker
    # round trips, which the node's loop used to wait for -- about a quarter of a backlog's drain, whose
    # partitions are read to their ends within a second and then advance every tau.  Now the loop goes on:
    # the records of the advancing partitions that arrive meanwhile are held and handled after the advance
    # (so it still applies at the position it names), and a checkpoint settles the advance first.
    def _confirm(self, due: list[tuple[_Source, Advance]]) -> None:
        """Ask the broker for the end offsets of the partitions of ``due``, without waiting for the answer."""
        try:
            ends = ask_end_offsets(self._admin_client(), sorted({(src.topic, adv.part) for src, adv in due}))
        except Exception:
            self._lost_contact()
            return
        self._pending = _PendingAdvances(due, ends)

    def _log_confirmed(self, pend: _PendingAdvances, now: float, block: bool) -> Optional[int]:
        """The advances the broker's end offsets confirm, logged (None: go on to apply them); else what
        :meth:`_progress` returns -- 0 while the answer is awaited, or the pending advances dropped."""
        if not block and not all(f.done() for f in pend.ends.values()):
            if time.monotonic() - pend.asked < ASK_LIMIT_S:
                return 0
            self.log(f"Kafka did not answer for the end offsets of {len(pend.due)} idle advance(s) in "
                     f"{ASK_LIMIT_S:.0f} s: dropped, decided again when it answers")
            self._lost_contact()
            return self._release(now, 0)
        try:
            fresh = {key: f.result(timeout=MARKS_FLUSH_TIMEOUT_S).offset for key, f in pend.ends.items()}
        except Exception:
            self._lost_contact()
            return self._release(now, 0)
        pend.due = [(src, adv) for src, adv in pend.due if 0 <= fresh[(src.topic, adv.part)] <= adv.at]
        if not pend.due:
            return self._release(now, 0)
        out = self._marks_producer()
        for src, adv in pend.due:
            doc = {"site": self.site, "run": self.run_id, "stream": src.stream.name, "part": adv.part,
                   "at": adv.at, "wm": adv.wm}
            out.produce(self.marks, json.dumps(doc, separators=(",", ":")).encode(), self.site.encode(),
                        self._headers)
        pend.logged = time.monotonic()
        return None

    def _progress(self, now: float, block: bool) -> int:
        """Move the pending advances on: confirmed by the broker, then logged, then applied (``block``: wait
        for each step); returns how many were applied."""
        pend = self._pending
        assert pend is not None
        if not pend.logged:
            over = self._log_confirmed(pend, now, block)
            if over is not None:
                return over
        out = self._marks_producer()
        if block:
            out.drain(self.log)   # logged before it has any effect (a broker outage is waited out)
        else:
            if out.producer.flush(0):
                if not pend.warned and time.monotonic() - pend.logged > MARKS_WARN_S:
                    self.log(f"waiting for Kafka: {len(pend.due)} idle advance(s) not logged yet (is the broker down?)")
                    pend.warned = True
                return 0
            out.check()
        for src, adv in pend.due:
            src.ingest.advance(adv, now)
        return self._release(now, len(pend.due))

    def _release(self, now: float, applied: int) -> int:
        """The pending advances are over: handle the records held meanwhile, in the order they came."""
        pend, self._pending = self._pending, None
        assert pend is not None
        for m in pend.held:
            self.handle(m, now)
        return applied

    def settle(self) -> None:
        """Finish the pending idle advances now (before a checkpoint reads the consumer's positions: the
        records held for them are consumed but not handled yet)."""
        if self._pending is not None:
            self._progress(time.time() * 1000.0, block=True)

    def _lost_contact(self) -> None:
        """The broker does not answer: not idle, unreachable (the idle clock starts again: see :meth:`tick`)."""
        self._contact_from = time.time() * 1000.0
        self._unreachable = True

    def _admin_client(self) -> Any:
        if self._admin is None:
            self._admin = make_admin(self.bootstrap)
        return self._admin

    def _probe(self, now: float, consumer: Any) -> None:
        """While the broker is unreachable: ask it for an end offset now and then; the idle clock starts
        again when it answers."""
        if now - self._probed < PROBE_EVERY_MS:
            return
        self._probed = now
        src = next(iter(self.sources.values()))
        part = next(iter(src.ingest.parts), 0)
        try:
            consumer.get_watermark_offsets(TopicPartition(src.topic, part), timeout=0.2, cached=False)
        except Exception:
            return
        self._unreachable = False
        self._contact_from = time.time() * 1000.0

    def _marks_producer(self) -> Producing:
        if self._marks_out is None:
            self._marks_out = Producing(make_producer(self.bootstrap, **{"enable.idempotence": True, "acks": "all"}))
        return self._marks_out

    def replay_marks(self, start: Optional[int], timeout_s: float = 30.0) -> int:
        """After a restart: read this node's advances logged from ``start`` (the checkpoint's offset
        of ``wm.<query>``) to the end, to be applied at their positions; returns how many."""
        entries = read_topic_from(self.bootstrap, self.marks, start, self.site, self.run_id, timeout_s)
        per: dict[str, list[Advance]] = defaultdict(list)
        for _, value in entries:
            try:
                d = json.loads(value)
                per[d["stream"]].append(Advance(int(d["part"]), int(d["at"]), int(d["wm"])))
            except (ValueError, KeyError, TypeError):
                continue
        for name, advs in per.items():
            if name in self.sources:
                self.sources[name].ingest.replay(advs)
        return sum(len(v) for v in per.values())

    def scan_dead(self, start: Optional[int], timeout_s: float = 30.0) -> int:
        """After a restart: the dead letters this node wrote from ``start`` on (not written again)."""
        for headers, _ in read_topic_from(self.bootstrap, self.dlq, start, self.site, self.run_id, timeout_s,
                                          site_header="dlq.site"):
            h = headers
            try:
                self.skip_dead.add((h["dlq.topic"].decode(), int(h["dlq.partition"]), int(h["dlq.offset"])))
            except (KeyError, ValueError):
                continue
        return len(self.skip_dead)

    # ------------------------------------------------------------------ to the host
    def drain(self, host: Any, observe: Optional[Callable[[str, list[Tup]], None]] = None,
              caps: Optional[dict[str, int]] = None) -> dict[str, int]:
        """Released tuples and watermarks of every live stream -> ``host.feed``; the tuples also to
        ``observe(stream, tuples)`` (the per-value monitor, :mod:`joinlib.pmjoin.value_monitor`).  ``caps``: no
        stream's watermark moves past its cap, and a stream without one is left as it is (an adaptive node
        handing its logged iterations over again, :meth:`~.adaptive_service.AdaptivePart.drain_caps`).  Returns
        the watermark handed over per stream."""
        tau = self.q.execution.interval_ms
        fed: dict[str, int] = {}
        for name, src in self.sources.items():
            if src.ingest.missing:
                # records a checkpoint named are still being read again: neither they nor the watermark may
                # move on before them (the host's window keeps the checkpoint's watermark meanwhile)
                continue
            cap = None if caps is None else caps.get(name)
            if caps is not None and cap is None:
                continue
            tups = src.ingest.release(cap)
            w = src.ingest.watermark if cap is None else min(cap, src.ingest.watermark)
            fed[name] = w
            host.feed(self.q.name, name, tups, w)
            if tups:
                if observe is not None:
                    observe(name, tups)
                src.inputs += len(tups)
                src.open.extend(tups)
            if src.open and src.open[0].ts < w // tau * tau:
                self._close_epochs(src, w // tau)
        return fed

    def missing_streams(self) -> set[str]:
        """The streams whose checkpoint's pending records are still being read again."""
        return {name for name, src in self.sources.items() if src.ingest.missing}

    def read_before(self, m: Any) -> bool:
        """``m`` is a record of a live source read before the checkpoint's positions (a pending record it named,
        read again, or one done with): not among the records logged after it."""
        srcs = self.by_topic.get(m.topic())
        if not srcs:
            return False
        for src in srcs:
            p = src.ingest.parts.get(m.partition())
            if p is None or m.offset() >= p.next:
                return False
        return True

    def _close_epochs(self, src: _Source, below: int) -> None:
        """Naive bytes of every complete epoch (< ``below``) of a stream's released tuples."""
        tau, tups, i = self.q.execution.interval_ms, src.open, 0
        n = len(tups)
        while i < n and tups[i].ts // tau < below:
            e = tups[i].ts // tau
            # the released tuples are in ts order (a release hands out every record below a watermark that only
            # rises): the epoch's last one found by bisection, not tuple by tuple
            j = bisect_left(tups, (e + 1) * tau, i, n, key=_TS)
            if self.others:   # one call for all: the batch, and so its size, is the same for every site
                self.on_naive(self.others, e, tups[i:j])
            i = j
        del tups[:i]

    def watermarks_ms(self) -> dict[str, int]:
        """Each live stream's watermark as an absolute event time (ms since the Unix epoch)."""
        return {name: src.ingest.watermark + self.origin for name, src in self.sources.items()}

    def stats(self) -> dict[str, Any]:
        return {"inputs": {n: s.inputs for n, s in self.sources.items()},
                "dead_letters": {n: dict(s.dead) for n, s in self.sources.items() if s.dead}}

    # ------------------------------------------------------------------ checkpoints
    def snapshot(self) -> dict[str, Any]:
        return {name: src.snapshot() for name, src in self.sources.items()}

    def restore(self, data: dict[str, Any], now: float) -> None:
        for name, d in data.items():
            src = self.sources.get(name)
            if src is None:
                raise ClusterError(f"the checkpoint has live stream {name}, this node {sorted(self.sources)}")
            src.restore(d, now)
        self.dead_total = sum(sum(s.dead.values()) for s in self.sources.values())

    def close(self) -> None:
        self._pending = None   # not applied: nothing read after this matters
        if self._marks_out is not None:
            self._marks_out.flush(MARKS_FLUSH_TIMEOUT_S)


def _restored(step: Callable[..., Any], *args: Any) -> None:
    """A step of reading a checkpoint's pending records again; records gone from the topic are a cluster
    error (the run cannot go on exactly), not a ValueError of the ingest."""
    try:
        step(*args)
    except ValueError as e:
        raise ClusterError(str(e)) from None


# --------------------------------------------------------------------------- reading our own logs

def read_topic_from(bootstrap: str, topic: str, start: Optional[int], site: str, run: Optional[str],
                    timeout_s: float = 30.0, site_header: Optional[str] = None) -> list[tuple[Any, Any]]:
    """(key, value) of the records of partition 0 of ``topic`` from ``start`` (None: the beginning)
    to its current end whose key is ``site`` and whose ``run`` header is ``run``; with ``site_header``,
    (headers, value) of those whose header of that name is ``site``."""
    c = make_consumer(bootstrap, f"joinlib-reread-{site}")
    out: list[tuple[Any, Any]] = []
    try:
        try:
            lo, end = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=timeout_s)
        except Exception:
            return out  # no such topic yet: nothing was written
        first = lo if start is None else max(start, lo)
        if first >= end:
            return out
        c.assign([TopicPartition(topic, 0, first)])
        key, run_b = site.encode(), run.encode() if run else None
        deadline, last = time.monotonic() + timeout_s, first - 1
        while last < end - 1:
            if time.monotonic() > deadline:
                raise ClusterError(f"reading {topic} from {first} to {end} took over {timeout_s:.0f}s")
            for m in consume(c, 5000, 0.5):
                last = m.offset() or 0
                hs = dict(m.headers() or [])
                mine = hs.get(site_header) == key if site_header else m.key() == key
                if not mine or (run_b is not None and hs.get("run") != run_b):
                    continue
                out.append((hs if site_header else m.key(), m.value()))
        return out
    finally:
        c.close()
