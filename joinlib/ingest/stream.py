"""Event time, watermarks, lateness and tuple ranks of one live stream (all partitions of its topic).

The rule (docs/live.md, "Which records take part"), per partition p of the stream's topic, in offset
order:

* p's watermark ``wm_p`` starts at 0 (the query's origin);
* a well-formed record with event time ``t < wm_p`` is **late**; with ``t >= wm_p`` it is on time,
  unless an earlier on-time record of p has the same id and an event time ``>= wm_p - horizon`` (the
  horizon is the stream's time window; 10 s for tuple windows): then it is a **duplicate**;
* a record more than :data:`MAX_AHEAD_MS` (a day) above ``wm_p`` is **too far ahead** (a wrong time unit
  or ``--since``: epochs are processed one by one from the origin, and a jump of years would stall the
  node);
* an on-time record raises ``wm_p`` to ``max(wm_p, max event time seen in p - delta)``;
* an *idle advance* raises ``wm_p`` to a given value at a given position of p (the adapter decides
  them from processing time and logs them, so a replay applies them at the same positions).

So whether a record is late depends only on the records before it in its partition and on the
logged advances: a replay classifies every record the same way.  The stream's watermark is
``W = min_p wm_p``.  No on-time record can arrive below ``W`` any more, so the on-time records
with ``t < W`` are final: :meth:`StreamIngest.release` hands them out in (ts, id) order (ties on
both: partition, offset) with ``seq`` = their rank among the stream's on-time records -- the
order and ranks the reference join sees over the on-time records.

Idle advances (:meth:`StreamIngest.idle_advances`): a partition whose watermark has not moved for
``idle_timeout`` ms of processing time, and which has nothing left to read, advances with
processing time: ``idle_timeout + x`` after its last move its watermark is its last value + x
(rounded down to a multiple of tau, so at most one advance per epoch).  The clock is an argument:
this module never reads it.
"""
from __future__ import annotations

import heapq
from array import array
from bisect import bisect_left
from collections import deque
from operator import itemgetter
from typing import Any, Callable, NamedTuple, Optional

from joinlib.ingest.records import DUPLICATE_ID, LATE, TOO_FAR_AHEAD, Bad, Event
from joinlib.model import Stream, Tup

TUPLE_WINDOW_HORIZON_MS = 10_000
MAX_AHEAD_MS = 86_400_000


class Advance(NamedTuple):
    """An idle advance: partition ``part``'s watermark becomes ``wm`` once ``at`` records of it
    (its next offset) were read."""

    part: int
    at: int
    wm: int


class _Partition:
    __slots__ = ("next", "wm", "max_ts", "ids", "order", "anchor_wm", "anchor_wall", "marks")

    def __init__(self, start: int, now: float) -> None:
        self.next = start                        # next offset to read
        self.wm = 0
        self.max_ts: Optional[int] = None
        self.ids: dict[int, int] = {}            # id -> ts of recent on-time records
        self.order: deque[tuple[int, int]] = deque()
        self.anchor_wm, self.anchor_wall = 0, now
        self.marks: deque[tuple[int, int]] = deque()  # logged advances still to replay: (at, wm)


class StreamIngest:
    """Watermarks, lateness and ranks of one stream (see the module docstring).

    ``partitions``: partition -> first offset read; ``delta``: the maximum delay δ (ms);
    ``now``: processing time in ms (only idle advances use it)."""

    def __init__(self, stream: Stream, partitions: dict[int, int], *, tau: int, delta: int,
                 idle_timeout: int, now: float = 0.0) -> None:
        if not partitions:
            raise ValueError(f"stream {stream.name}: a source needs at least one partition")
        self.stream, self.tau, self.delta, self.idle_timeout = stream, tau, delta, idle_timeout
        self.horizon = stream.window.size if stream.window.is_time else TUPLE_WINDOW_HORIZON_MS
        self.parts = {p: _Partition(off, now) for p, off in sorted(partitions.items())}
        # the on-time records not released yet, (ts, id, part, offset, key, rest), in buckets of event time
        # (ts // tau -> records in the order offered; a heap of the bucket numbers): a release sorts only the
        # buckets it hands out (and the one the watermark is in), and an offer is an append
        self._buckets: dict[int, list[tuple[int, int, int, int, tuple[Any, ...], bytes]]] = {}
        self._bucket_heap: list[int] = []
        self._width = max(1, tau)
        # pending records a checkpoint named by position only, to be read again: (part, offset) -> (ts, id)
        self.missing: dict[tuple[int, int], tuple[int, int]] = {}
        self._missing_at: dict[int, deque[int]] = {}   # per partition, the named offsets left, increasing
        self.seq = 0

    # ------------------------------------------------------------------ records
    def offer(self, part: int, offset: int, ev: Event, now: float) -> Optional[Bad]:
        """Record ``offset`` of ``part`` (offsets in increasing order); None if it is on time (it is
        kept until :meth:`release`), else why not."""
        p = self.parts[part]
        if p.marks:   # logged advances to apply at their positions (a restart's): before and after the record
            self._replay(p, offset)
        p.next = offset + 1
        bad = self._classify(p, ev, now)
        if bad is None:
            self._keep(ev.ts, ev.id, part, offset, ev.key, ev.rest)
        if p.marks:
            self._replay(p, p.next)
        return bad

    def offer_run(self, part: int, offsets: list[int], events: list[Any],  # noqa: C901 - the hot loop: no call per record
                  now: float) -> list[tuple[int, Bad]]:
        """:meth:`offer` of each event of ``events`` (records of ``part`` at ``offsets``, increasing), or
        :meth:`skip` where it is not an :class:`Event` (a malformed record's :class:`Bad`, a filtered record's
        ``Filtered``); returns the index and the :class:`Bad` of each record that does not take part but is not
        filtered (malformed, late, a duplicate, too far ahead), in order.  The same as those calls one by one, in
        one Python call: the on-time records without logged advances to replay (almost all) take the loop below."""
        p = self.parts[part]
        bad: list[tuple[int, Bad]] = []
        horizon, delta, width = self.horizon, self.delta, self._width
        buckets = self._buckets
        ids, order = p.ids, p.order
        order_add, popleft = order.append, order.popleft
        cur_b, cur = None, None
        for i, (offset, ev) in enumerate(zip(offsets, events, strict=True)):
            if p.marks or type(ev) is not Event:   # advances to replay at their positions; a skip: the general path
                if type(ev) is Event:
                    why = self.offer(part, offset, ev, now)
                    if why is not None:
                        bad.append((i, why))
                else:
                    self.skip(part, offset)
                    if isinstance(ev, Bad):
                        bad.append((i, ev))
                cur_b = None
                continue
            p.next = offset + 1
            ts, id_, key, rest = ev
            wm = p.wm
            if ts < wm or ts > wm + MAX_AHEAD_MS:
                bad.append((i, self._classify(p, ev, now)))   # type: ignore[arg-type]
                continue
            seen = ids.get(id_)
            if seen is not None and seen >= wm - horizon:
                bad.append((i, self._classify(p, ev, now)))   # type: ignore[arg-type]
                continue
            ids[id_] = ts
            order_add((ts, id_))
            mx = p.max_ts
            if mx is None or ts > mx:
                p.max_ts = mx = ts
            if mx - delta > wm:   # _classify's watermark move, _move inline
                p.wm = p.anchor_wm = wm = mx - delta
                p.anchor_wall = now
                low = wm - horizon
                while order and order[0][0] < low:
                    old_ts, old_id = popleft()
                    if ids.get(old_id) == old_ts:
                        del ids[old_id]
            b = ts // width
            if b != cur_b:
                cur = buckets.get(b)
                if cur is None:
                    cur = buckets[b] = []
                    heapq.heappush(self._bucket_heap, b)
                cur_b = b
            cur.append((ts, id_, part, offset, key, rest))   # type: ignore[union-attr]
        return bad

    def _keep(self, ts: int, id_: int, part: int, offset: int, key: tuple[Any, ...], rest: bytes) -> None:
        """An on-time record, pending until released."""
        b = ts // self._width
        bucket = self._buckets.get(b)
        if bucket is None:
            bucket = self._buckets[b] = []
            heapq.heappush(self._bucket_heap, b)
        bucket.append((ts, id_, part, offset, key, rest))

    @property
    def pending(self) -> list[tuple[int, int, int, int, tuple[Any, ...], bytes]]:
        """The on-time records not released yet, (ts, id, partition, offset, key, rest), by bucket (a copy)."""
        out: list[tuple[int, int, int, int, tuple[Any, ...], bytes]] = []
        for b in sorted(self._buckets):
            out += self._buckets[b]
        return out

    def skip(self, part: int, offset: int) -> None:
        """A malformed record at ``offset``: it moves the read position only."""
        p = self.parts[part]
        self._replay(p, offset)
        p.next = offset + 1
        self._replay(p, p.next)

    def _classify(self, p: _Partition, ev: Event, now: float) -> Optional[Bad]:
        if ev.ts < p.wm:
            return Bad(LATE, f"event time {ev.ts} ms (from the origin) is below the partition's watermark "
                             f"{p.wm} ms by {p.wm - ev.ts} ms")
        if ev.ts > p.wm + MAX_AHEAD_MS:
            return Bad(TOO_FAR_AHEAD, f"event time {ev.ts} ms (from the origin) is {(ev.ts - p.wm) / 86_400_000:.1f} "
                                      "days ahead of the partition's watermark: check the time unit and --since")
        seen = p.ids.get(ev.id)
        if seen is not None and seen >= p.wm - self.horizon:
            return Bad(DUPLICATE_ID, f"id {ev.id} repeats an on-time record of this partition "
                                     f"(event time {seen} ms)")
        p.ids[ev.id] = ev.ts
        p.order.append((ev.ts, ev.id))
        if p.max_ts is None or ev.ts > p.max_ts:
            p.max_ts = ev.ts
        wm = p.max_ts - self.delta
        if wm > p.wm:
            self._move(p, wm, now, anchor=True)
        return None

    def _move(self, p: _Partition, wm: int, now: float, anchor: bool) -> None:
        p.wm = wm
        if anchor:
            p.anchor_wm, p.anchor_wall = wm, now
        low = wm - self.horizon  # ids below it can no longer make a duplicate: forget them (memory only)
        ids, order = p.ids, p.order
        while order and order[0][0] < low:
            ts, id_ = order.popleft()
            if ids.get(id_) == ts:
                del ids[id_]

    # ------------------------------------------------------------------ idle advances
    def idle_advances(self, now: float, caught_up: Callable[[int], bool]) -> list[Advance]:
        """Advances due at processing time ``now`` for partitions that have nothing left to read
        (``caught_up(part)``) and no logged advance still to replay.  Not applied: the caller logs
        them first, then calls :meth:`advance`."""
        out = []
        for part, p in self.parts.items():
            idle_for = now - p.anchor_wall - self.idle_timeout
            if idle_for <= 0 or p.marks:
                continue
            target = (p.anchor_wm + int(idle_for)) // self.tau * self.tau
            if target > p.wm and caught_up(part):
                out.append(Advance(part, p.next, target))
        return out

    def advance(self, adv: Advance, now: float = 0.0) -> None:
        """Apply an idle advance (at the partition's current position)."""
        p = self.parts[adv.part]
        if adv.wm > p.wm:
            self._move(p, adv.wm, now, anchor=False)

    def replay(self, advances: list[Advance]) -> None:
        """Advances logged before a restart, each applied when its partition reaches its position."""
        for adv in advances:
            p = self.parts.get(adv.part)
            if p is not None:
                p.marks.append((adv.at, adv.wm))
        for p in self.parts.values():
            self._replay(p, p.next)

    def _replay(self, p: _Partition, position: int) -> None:
        marks = p.marks
        while marks and marks[0][0] <= position:
            _, wm = marks.popleft()
            if wm > p.wm:
                self._move(p, wm, p.anchor_wall, anchor=False)

    def replaying(self) -> bool:
        return any(p.marks for p in self.parts.values())

    # ------------------------------------------------------------------ output
    @property
    def watermark(self) -> int:
        """W = min over partitions: no on-time record of the stream can still come below it."""
        return min(p.wm for p in self.parts.values())

    def release(self, below: Optional[int] = None) -> list[Tup]:
        """The on-time records below the watermark (and ``below``) not handed out yet, in (ts, id) order, ranked
        (none while records of a checkpoint are still to be read again: they may come first)."""
        if self.missing:
            return []
        w = self.watermark
        if below is not None and below < w:
            w = below
        heap, buckets, width = self._bucket_heap, self._buckets, self._width
        rows: list[tuple[int, int, int, int, tuple[Any, ...], bytes]] = []
        while heap and heap[0] * width < w:   # a bucket with records below w
            b = heap[0]
            bucket = buckets[b]
            bucket.sort()   # (ts, id, part, offset): no two records tie on all four
            if (b + 1) * width <= w:   # all of it
                heapq.heappop(heap)
                del buckets[b]
                rows += bucket
                continue
            cut = bisect_left(bucket, w, key=itemgetter(0))   # the bucket the watermark is in: its part below w
            rows += bucket[:cut]
            del bucket[:cut]
            break
        if not rows:
            return []
        pos, seq = self.stream.pos, self.seq
        self.seq = seq + len(rows)
        return [Tup(pos, id_, ts, s, key, rest) for s, (ts, id_, _, _, key, rest) in enumerate(rows, seq)]

    # ------------------------------------------------------------------ checkpoints
    def snapshot(self) -> dict[str, Any]:
        """Plain data: ranks, per partition its position, watermark, max event time and recent ids, and the
        on-time records not released yet *by position* (ts, id, partition, offset): they are in the topic,
        so a checkpoint need not copy their payloads (during a backlog's drain the consumer runs ahead of
        the watermark by whole fetches: thousands of records).  A restored stream reads them again
        (:meth:`rewind`, :meth:`readmit`).  Logged advances are re-read from their log."""
        return {
            "seq": self.seq,
            "parts": [[part, p.next, p.wm, p.max_ts, _columns(p.order, 2)] for part, p in self.parts.items()],
            "pending_cols": _columns([*self.pending, *((ts, id_, part, off) for (part, off), (ts, id_)
                                                        in self.missing.items())], 4),
        }

    def rewind(self, part: int) -> Optional[int]:
        """The first offset of ``part`` to read again after a restore (None: nothing to read again)."""
        offs = [off for p, off in self.missing if p == part]
        return min(offs) if offs else None

    def readmit(self, part: int, offset: int, ev: Optional[Event]) -> bool:
        """Record ``offset`` of ``part`` (None: it no longer decodes), read again after a restore (offsets of
        a partition in increasing order): back among the pending records if the checkpoint named it (True),
        else nothing (it was released or judged before the checkpoint).  A named record that comes back
        different, or that the topic no longer has, is an error: the records the checkpoint relied on are
        gone."""
        self.check_lost(part, offset)
        at = self._missing_at.get(part)
        if not at or at[0] != offset:
            return False
        at.popleft()
        want = self.missing.pop((part, offset))
        if ev is None or want != (ev.ts, ev.id):
            raise ValueError(f"stream {self.stream.name}: the record at partition {part} offset {offset} is "
                             f"not the one the checkpoint left pending (ts, id {want}, now "
                             f"{(ev.ts, ev.id) if ev is not None else 'malformed'})")
        self._keep(ev.ts, ev.id, part, offset, ev.key, ev.rest)
        return True

    def check_lost(self, part: int, offset: int) -> None:
        """Offset ``offset`` of ``part`` was read: a named record of that partition below it that never came
        back is gone from the topic (retention, a deleted topic): an error, not a stall."""
        at = self._missing_at.get(part)
        if at and at[0] < offset:
            lost = [x for x in at if x < offset]
            raise ValueError(f"stream {self.stream.name}: partition {part} no longer holds offsets {lost[:5]} "
                             f"that the checkpoint left pending (retention?)")

    def restore(self, data: dict[str, Any], now: float) -> None:
        self.seq = data["seq"]
        for part, nxt, wm, max_ts, order in data["parts"]:
            p = self.parts.get(part)
            if p is None:
                raise ValueError(f"stream {self.stream.name}: the checkpoint has partition {part}, "
                                 f"the source {sorted(self.parts)}")
            p.next, p.wm, p.max_ts = nxt, wm, max_ts
            p.order = deque(zip(*_uncolumns(order), strict=True) if isinstance(order, dict)   # columns, or
                            else ((ts, id_) for ts, id_ in order))                       # [ts, id] pairs
            p.ids = {id_: ts for ts, id_ in p.order}
            p.anchor_wm, p.anchor_wall = wm, now
        self._buckets, self._bucket_heap = {}, []
        if "pending" in data:   # a checkpoint of before pending_refs: the records themselves
            for ts, id_, part, off, key, rest in data["pending"]:
                self._keep(ts, id_, part, off, tuple(key), rest)
            self.missing = {}
        else:
            self.missing = {(part, off): (ts, id_) for ts, id_, part, off in pending_refs(data)}
        self._missing_at = {}
        for part, off in sorted(self.missing):
            self._missing_at.setdefault(part, deque()).append(off)


def pending_refs(snap: dict[str, Any]) -> list[tuple[int, int, int, int]]:
    """The (ts, id, partition, offset) of the records a :meth:`StreamIngest.snapshot` names as pending (or an
    older snapshot's list of them)."""
    if "pending_refs" in snap:
        return [(ts, id_, part, off) for ts, id_, part, off in snap["pending_refs"]]
    return list(zip(*_uncolumns(snap["pending_cols"]), strict=True))


def _columns(rows: Any, n: int) -> dict[str, Any]:
    """The first ``n`` fields of ``rows`` (64-bit ints) as columns of bytes: a checkpoint names every record read
    ahead of the watermark (tens of thousands while a backlog drains), and a list per record cost more than a
    tenth of a node's CPU to build and pickle each second; columns are built and pickled in C."""
    return {"n": len(rows), "cols": [array("q", map(itemgetter(i), rows)).tobytes() for i in range(n)]}


def _uncolumns(cols: dict[str, Any]) -> list[list[int]]:
    """The columns of :func:`_columns`, as lists of ints."""
    out = []
    for b in cols["cols"]:
        a = array("q")
        a.frombytes(b)
        if len(a) != cols["n"]:
            raise ValueError(f"a checkpoint column holds {len(a)} values, not {cols['n']}")
        out.append(a.tolist())
    return out
