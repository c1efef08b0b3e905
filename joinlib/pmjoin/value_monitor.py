"""The live monitor of per-value rates: what a partitioned plan (PMJoin, seed 002) needs to choose its
partition function, measured on a running query instead of a data directory.

Each node counts, for every stream of the query's partition attribute class born at its site, the
tuples of each join value over the last ``horizon_ms`` of event time (in one-second buckets), and
reports the counts in its ``status`` messages (:meth:`ValueMonitor.report`, every
``VALUES_EVERY_S``).  The planner service merges the sites' latest reports (:func:`merge_reports`)
into the JSON of :func:`joinlib.pmjoin.partitioned.value_stats`: ``GET /queries/NAME/values``, ``joinlib
stats NAME --live --values FILE``, then ``joinlib submit QUERY --plan pmjoin:rate --values FILE``.

Why a horizon and not totals since the start: a re-partitioning should follow the values' *current*
spread, and a node restarted from a checkpoint needs nothing restored (its report fills again within
one horizon).  A report keeps the ``cap`` most frequent values of each stream, so that a status
message stays small; the others go to the partition function's default (hash) partition, as values
never seen do.
"""
from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from collections import Counter
from itertools import islice
from operator import le
from typing import Any, Iterable, Optional, cast

from joinlib.errors import PlanError
from joinlib.model import Query, Tup, Value
from joinlib.plan.partition import canonical, order_key
from joinlib.plan.partitioned import attribute_class, check_partitionable

BUCKET_MS = 1000
HORIZON_MS = 60_000
CAP = 200
VALUES_EVERY_S = 10.0
CANON_CACHE = 1 << 16   # values whose canonical form add remembers


class ValueMonitor:
    """Per-value tuple counts of the class's streams born at ``site`` over the last ``horizon_ms``."""

    def __init__(self, query: Query, site: str, horizon_ms: int = HORIZON_MS, cap: int = CAP) -> None:
        if horizon_ms < BUCKET_MS or cap < 1:
            raise ValueError(f"horizon_ms must be >= {BUCKET_MS} and cap >= 1")
        self.attrs = {s: query.stream(s).attr_index(a) for s, a in attribute_class(query)
                      if query.stream(s).site == site}
        self.horizon, self.cap = horizon_ms, cap
        self.buckets: dict[int, dict[str, Counter[bytes]]] = {}   # ts // BUCKET_MS -> stream -> counts
        self.seen: dict[bytes, Value] = {}
        self.first: Optional[int] = None   # the earliest ts counted, the latest
        self.last: Optional[int] = None
        self._prune_at = 4 * cap * max(1, len(self.attrs))   # len(seen) that triggers forgetting values
        self._canon: dict[Value, bytes] = {}                  # value -> canonical(value), for add

    @classmethod
    def of(cls, query: Query, site: str) -> Optional["ValueMonitor"]:
        """A monitor if the query can be partitioned and a stream of its class is born here, else None."""
        try:
            check_partitionable(query)
            mon = cls(query, site)
        except PlanError:
            return None
        return mon if mon.attrs else None

    def add(self, stream: str, tups: Iterable[Tup]) -> None:
        """Count released source tuples of ``stream`` (any order; tuples older than the horizon are not).

        This runs for every input tuple of a live run.  A node's sources release tuples in ts order, and then a
        batch is counted a bucket at a time with the loops in C (the keys' canonical forms by one ``map`` over a
        value-keyed cache -- equal values have equal canonical forms, so it is exact --, each bucket's counts by
        one ``Counter.update``): what :meth:`_add_each` counts tuple by tuple, which takes a batch in any order."""
        i = self.attrs.get(stream)
        if i is None:
            return
        batch = tups if isinstance(tups, list) else list(tups)
        ts = [t.ts for t in batch]
        if not all(map(le, ts, islice(ts, 1, None))):
            self._add_each(stream, i, batch)
            return
        if ts:
            self._add_sorted(stream, i, batch, ts)
        self._expire()

    def _add_sorted(self, stream: str, i: int, batch: list[Tup], ts: list[int]) -> None:
        """:meth:`_add_each` of a batch in ts order: the tuples at or below ``last - horizon`` (before the batch)
        are a prefix, and none after it is skipped (``last`` only grows past the prefix)."""
        last = self.last
        if self.first is None or ts[0] < self.first:
            self.first = ts[0]
        lo = 0 if last is None else bisect_right(ts, last - self.horizon)
        if lo == len(ts):
            return
        ks = self._seen_keys([t.key[i] for t in batch[lo:]])
        buckets, j, n = self.buckets, lo, len(ts)
        while j < n:
            b = ts[j] // BUCKET_MS
            end = bisect_left(ts, (b + 1) * BUCKET_MS, j, n)
            buckets.setdefault(b, {}).setdefault(stream, Counter()).update(ks[j - lo:end - lo])
            j = end
        if last is None or ts[-1] > last:
            self.last = ts[-1]

    def _seen_keys(self, vals: list[Value]) -> list[bytes]:
        """The canonical forms of ``vals``; the first value of each form not seen yet is kept (as
        :meth:`_add_each` keeps it)."""
        got = list(map(self._canon.get, vals))
        ks = cast(list[bytes], got) if None not in got else [
            self._canonical(v) if k is None else k for k, v in zip(got, vals, strict=True)]
        seen = self.seen
        new = set(ks).difference(seen)
        if new:
            for k, v in zip(ks, vals, strict=True):
                if k in new and k not in seen:
                    seen[k] = v
        return ks

    def _add_each(self, stream: str, i: int, tups: list[Tup]) -> None:
        """:meth:`add` tuple by tuple (a batch in any order), with the look-ups hoisted."""
        seen, canon, buckets, horizon = self.seen, self._canon, self.buckets, self.horizon
        first, last = self.first, self.last
        counts: Optional[Counter[bytes]] = None
        at = None
        for t in tups:
            ts = t.ts
            if first is None or ts < first:   # observed since then, even if too old to count
                first = ts
            if last is not None and ts <= last - horizon:
                continue
            v = t.key[i]
            k = canon.get(v)
            if k is None:
                k = self._canonical(v)
            if k not in seen:
                seen[k] = v
            b = ts // BUCKET_MS
            if b != at:
                counts, at = buckets.setdefault(b, {}).setdefault(stream, Counter()), b
            counts[k] += 1   # type: ignore[index]
            if last is None or ts > last:
                last = ts
        self.first, self.last = first, last
        self._expire()

    def _canonical(self, v: Value) -> bytes:
        k = canonical(v)
        if len(self._canon) >= CANON_CACHE:
            self._canon.clear()
        if v == v:   # NaN never finds itself in a dict
            self._canon[v] = k
        return k

    def _expire(self) -> None:
        if self.last is None:
            return
        lo = (self.last - self.horizon) // BUCKET_MS + 1   # the oldest bucket kept
        for b in [b for b in self.buckets if b < lo]:
            del self.buckets[b]
        if self.first is not None:
            self.first = max(self.first, lo * BUCKET_MS)
        if len(self.seen) > self._prune_at:   # forget values no bucket holds (amortised: at most per doubling)
            live = {k for per in self.buckets.values() for c in per.values() for k in c}
            self.seen = {k: v for k, v in self.seen.items() if k in live}
            self._prune_at = max(self._prune_at, 2 * len(self.seen))

    def report(self) -> Optional[dict[str, Any]]:
        """``{"span_ms", "streams": {stream: [[value, count], ...]}}`` (the ``cap`` most frequent values
        per stream), or None before the first tuple."""
        if self.first is None or self.last is None:
            return None
        totals: dict[str, Counter[bytes]] = {s: Counter() for s in self.attrs}
        for per in self.buckets.values():
            for s, c in per.items():
                totals[s].update(c)
        seen = self.seen
        streams = {}
        for s, c in totals.items():
            # the cap-th largest count first (ints only), then the full order over the few at or above it
            floor = heapq.nlargest(self.cap, c.values())[-1] if len(c) > self.cap else 0
            top = sorted(((k, n) for k, n in c.items() if n >= floor),
                         key=lambda kv: (-kv[1], order_key(seen[kv[0]])))[: self.cap]
            streams[s] = [[seen[k], n] for k, n in top]
        return {"span_ms": self.last - self.first + 1, "streams": streams}


def merge_reports(query: Query, reports: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The sites' :meth:`ValueMonitor.report` as :func:`joinlib.pmjoin.partitioned.value_stats` JSON (rates in
    tuples/s over each report's own span, given per stream as ``span_ms``); a stream without a report has
    rate 0 for every value."""
    by = attribute_class(query)
    names = list(dict.fromkeys(s for s, _ in by))
    rates: dict[str, Counter[bytes]] = {s: Counter() for s in names}
    seen: dict[bytes, Value] = {}
    spans: dict[str, int] = {}
    for rep in reports:
        span_s = max(1, int(rep["span_ms"])) / 1000.0
        for s, pairs in rep["streams"].items():
            if s not in rates:
                continue
            spans[s] = int(rep["span_ms"])
            for v, n in pairs:
                k = canonical(v)
                seen.setdefault(k, v)
                rates[s][k] += n / span_s
    keys = sorted(seen, key=lambda k: order_key(seen[k]))
    return {"by": [list(x) for x in by], "streams": names, "values": [seen[k] for k in keys],
            "rates": [[rates[s][k] for k in keys] for s in names], "span_ms": spans}


def is_report(v: Any) -> bool:
    """Is ``v`` a well-formed :meth:`ValueMonitor.report` (a status message's ``values``)?"""
    if type(v) is not dict or type(v.get("span_ms")) is not int or v["span_ms"] < 1:
        return False
    streams = v.get("streams")
    if type(streams) is not dict:
        return False
    for pairs in streams.values():
        if type(pairs) is not list:
            return False
        for p in pairs:
            if type(p) is not list or len(p) != 2 or type(p[1]) is not int or p[1] < 0:
                return False
            if p[0] is not None and type(p[0]) not in (str, int, float, bool):
                return False
    return True
