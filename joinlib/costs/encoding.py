"""What a message costs on the wire, as the runtime encodes it.

Every size here comes from :func:`joinlib.protocol.wire.envelope_size` applied to a *representative*
message: an :class:`~joinlib.protocol.messages.Envelope` on the flow's own link whose body holds synthetic
tuples (their payload padded to the stream's tuple size), join keys shaped like the stream's and
counts of the expected magnitude.  No byte constant is written by hand, so when the runtime's
encodings change (a smaller envelope, Bloom-filter key batches, delta updates) the model follows
by construction: each message kind is one method of :class:`Encoding` to point at the new body.

Key sets (the key requests of SM-S1 / SM-S2 / SM-D2, SM-D2's match answer, a reduction's
:class:`~joinlib.protocol.messages.KeyFilter`) are built by the runtime's own rule: the keys, or a Bloom
filter when that plus the expected cost of its false positives is shorter
(:func:`joinlib.runtime.algorithms.base.key_message`, :meth:`joinlib.protocol.bloom.KeySet.of`), over
distinct keys shaped like the stream's, with the runtime's ``fp_cost`` (the receiver's *declared*
window bytes).  :meth:`Encoding.request_fp` and friends give the false-positive rate of the set
so built, which the flows turn into extra tuples.

Expected sizes of messages with a fractional expected number of items are interpolated between
the two neighbouring whole numbers (key sets: averaged over a Poisson count, see
:meth:`Encoding._poisson`); bodies of more than :data:`EXACT` items are built at two
significant digits and scaled (sizes are affine in the item count above a few items).
"""
from __future__ import annotations

import math
from typing import Callable, Optional

from joinlib.costs.unit_time import full_bytes
from joinlib.data.stats import DEFAULT_RATE
from joinlib.model import Query, Stream, Tup, Value
from joinlib.protocol.avro import encode_tuple
from joinlib.protocol.bloom import KeySet
from joinlib.protocol.bloom import rate as bloom_rate
from joinlib.protocol.messages import (
    Body,
    DjaUpdate,
    Envelope,
    ExpiryUpdate,
    Key,
    KeyBatch,
    KeyFilter,
    ShippedBatch,
    TupleBatch,
)
from joinlib.protocol.wire import envelope_size
from joinlib.runtime.algorithms.base import key_message, keys_bytes, row_bytes_of, window_bytes

#: item counts up to which bodies are built exactly
EXACT = 64
#: the most items a priced message is built with: an estimate of billions of rows (a cycle of tuple windows with an
#: unknown selectivity) built its batch until memory ran out (tests/property/test_exactness.py, hypothesis seed 4)
BUILT_UP_TO = 1 << 14
#: the bytes a tuple adds to a TupleBatch besides its own encoding (its one-element parts array)
ROW_PART_OVERHEAD = 2


def default_key_value(domain: int) -> Value:
    """A join value shaped like the generator's (``"v0042"``) for a domain of ``domain`` values."""
    return f"v{max(0, domain // 2):04d}"


class Encoding:
    """Sizes of the runtime's messages for one query (see the module docstring).

    ``tuple_bytes[stream]``: the bytes a tuple of the stream adds to a full-tuple message (the
    ``tuple_bytes`` statistic: its encoding plus its row overhead); ``key_values[stream]``: a
    representative value of each join attribute of the stream; ``horizon_s``: the length of a run
    (sets the magnitude of ids, timestamps and epoch numbers, a byte or two per message);
    ``declared``: the query as the runtime sees it (its declared statistics size the Bloom filters;
    default ``query``).
    """

    def __init__(self, query: Query, tuple_bytes: dict[str, float], key_values: dict[str, tuple[Value, ...]],
                 horizon_s: float = 15.0, declared: Optional[Query] = None) -> None:
        self.query = query
        self.declared = declared or query
        self.fpr = self.declared.execution.bloom_fpr
        self.horizon_s = horizon_s
        self.tau_ms = query.execution.interval_ms
        self._tuple_bytes = tuple_bytes
        self._key_values = key_values
        self._tups: dict[str, Tup] = {}
        self._cache: dict[tuple[object, ...], float] = {}
        self._poissons: dict[tuple[tuple[object, ...], float], float] = {}
        self._series: dict[tuple[object, ...], list[float]] = {}
        #: expected bytes per (src, dst, message): :func:`joinlib.costs.model.price`'s memo
        self.priced: dict[tuple[str, str, object], float] = {}
        self._bodies: dict[tuple[object, ...], Body] = {}
        self._fp_costs: dict[str, Optional[float]] = {}
        self._row_bytes: dict[tuple[str, ...], Optional[float]] = {}
        self._request_fps: dict[tuple[str, tuple[int, ...], float, Optional[float]], float] = {}
        self._flow = 1
        self._epoch = max(0, int(horizon_s * 1000 / self.tau_ms / 2))
        #: the wire format leaves the sites out of a message (Kafka's key and topic carry them:
        #: :func:`joinlib.protocol.wire.encode_envelope`), so every size is the same on every link;
        #: checked here rather than assumed, so a format that encodes them is priced per link again
        self.sites_free = self.size("", "", KeyBatch([])) == self.size("N" * 40, "M" * 40, KeyBatch([]))
        #: a full-tuple message's size and its filter's ``fp_cost`` (:meth:`rows`, :meth:`row_fp_cost`) do not depend
        #: on the order of a row's streams: a row is built in stream order, and the declared row bytes are a sum
        #: of whole numbers (exact in any order); :class:`~joinlib.costs.model.WireModel` then prices the steps
        #: that ask the same of a stream with rows of the same streams once
        self.rows_order_free = all(float(s.stats.tuple_bytes or 0).is_integer() for s in self.declared.streams)

    # ------------------------------------------------------------ representative values
    def tup(self, stream: str) -> Tup:
        """A tuple of ``stream`` whose encoding adds ``tuple_bytes`` to a TupleBatch."""
        t = self._tups.get(stream)
        if t is None:
            t = self._tups[stream] = self._make_tup(self.query.stream(stream))
        return t

    def _make_tup(self, s: Stream) -> Tup:
        rate = max(1.0, self._rate(s))
        n = int(rate * self.horizon_s / 2)
        ts = int(self.horizon_s * 500)
        key = self._key_values[s.name]
        target = max(0, round(self._tuple_bytes[s.name]) - ROW_PART_OVERHEAD)
        pad = target
        for _ in range(4):  # the payload's length prefix grows with the payload: converge
            t = Tup(s.pos, n, ts, n, key, b"\0" * max(0, pad))
            pad += target - len(encode_tuple(t))
            if len(encode_tuple(t)) == target or pad < 0:
                break
        return Tup(s.pos, n, ts, n, key, b"\0" * max(0, pad))

    def _window_epochs(self, stream: str) -> int:
        """Epochs a full window of ``stream`` spans (a reducer's ``live``)."""
        s = self.query.stream(stream)
        if s.window.is_time:
            return int(s.window.size // self.tau_ms)
        return int(s.window.size / max(1e-9, self._rate(s) * self.tau_ms / 1000.0))

    def _rate(self, s: Stream) -> float:
        r = s.stats.rate
        return DEFAULT_RATE if r is None else float(r)

    def key(self, stream: str, index: tuple[int, ...]) -> Key:
        """A representative key of ``stream`` on the join attributes at ``index``."""
        vals = self._key_values[stream]
        return tuple(vals[i] for i in index)

    def distinct_keys(self, stream: str, index: tuple[int, ...], k: int) -> list[Key]:
        """``k`` distinct keys shaped like :meth:`key` (same types, about the same encoded size)."""
        key = self.key(stream, index)
        if not key:
            return [()] * min(k, 1)
        return [(_variant(key[0], i, k),) + key[1:] for i in range(k)]

    # ------------------------------------------------------------ what the runtime sizes filters by
    def window_fp_cost(self, stream: str) -> Optional[float]:
        """``fp_cost`` of a key set answered with (or filtering) tuples of ``stream``: its declared
        window bytes, as the runtime computes it (None: no Bloom filter).  Memoised: every key set priced asks it."""
        if stream not in self._fp_costs:
            self._fp_costs[stream] = window_bytes(self.declared.stream(stream))
        return self._fp_costs[stream]

    def row_fp_cost(self, streams: tuple[str, ...], asked: float) -> Optional[float]:
        """SM-D2's match answer: the declared bytes of a row of ``streams`` × the keys asked."""
        if streams not in self._row_bytes:
            self._row_bytes[streams] = row_bytes_of(*(self.declared.stream(n) for n in streams))
        rb = self._row_bytes[streams]
        return rb * asked if rb is not None else None

    # ------------------------------------------------------------ the message kinds
    def link(self, src: str, dst: str) -> tuple[str, str]:
        """The link a size depends on: ``(src, dst)``, or one for every link when sizes do not depend
        on the sites (:attr:`sites_free`; the searches then price a message once for all links)."""
        return ("", "") if self.sites_free else (src, dst)

    def size(self, src: str, dst: str, body: Body) -> int:
        """The bytes of one envelope carrying ``body`` from ``src`` to ``dst``."""
        return envelope_size(Envelope(src, dst, self._flow, self._epoch, body))

    def rows(self, src: str, dst: str, streams: tuple[str, ...], n: float) -> float:
        """A full-tuple message of ``n`` rows, each with one tuple of every stream of ``streams``."""
        return self._expected(("rows", src, dst, streams), n,
                              lambda k: self.size(src, dst, TupleBatch([self._row(streams)] * k)))

    def _row(self, streams: tuple[str, ...]) -> tuple[Tup, ...]:
        """A row of one tuple of every stream of ``streams``, in stream order (built only for a size not
        yet known: most calls find theirs in the memo)."""
        return tuple(sorted((self.tup(s) for s in streams), key=lambda t: t.pos))

    def keys(self, src: str, dst: str, stream: str, index: tuple[int, ...], n: float) -> float:
        """A partial-tuple message of ``n`` distinct keys of ``stream`` on ``index``."""
        key = self.key(stream, index)
        return self._expected(("keys", src, dst, stream, index), n,
                              lambda k: self.size(src, dst, KeyBatch([key] * k)))

    def request(self, src: str, dst: str, stream: str, index: tuple[int, ...], n: float,
                fp_cost: Optional[float]) -> float:
        """A key request (SM-S1, SM-S2, SM-D2) or SM-D2's match answer of ``n`` distinct keys, as
        :func:`~joinlib.runtime.algorithms.base.key_message` sends it: a KeyBatch, or a KeyFilter
        with bits when that is cheaper (``fp_cost``: see :meth:`window_fp_cost`)."""
        return self._poisson(("request", src, dst, stream, index, fp_cost), n,
                              lambda k: self.size(src, dst, self._request(stream, index, k, fp_cost)))

    def request_fp(self, stream: str, index: tuple[int, ...], n: float, fp_cost: Optional[float]) -> float:
        """The expected false-positive rate of that request (0 when the keys are written out); memoised
        on its arguments (a search asks it for several steps of every probe)."""
        key = (stream, index, n, fp_cost)
        hit = self._request_fps.get(key)
        if hit is None:
            if len(self._request_fps) > 500_000:
                self._request_fps.clear()
            hit = self._request_fps[key] = self._poisson(("request-fp", stream, index, fp_cost), n,
                                                         lambda k: _fp_rate(self._request(stream, index, k, fp_cost)))
        return hit

    def _request(self, stream: str, index: tuple[int, ...], k: int, fp_cost: Optional[float]) -> Body:
        hit = self._bodies.get(("request", stream, index, fp_cost, k))
        if hit is None:
            hit = key_message(self.distinct_keys(stream, index, k), self.fpr, fp_cost)
            self._bodies[("request", stream, index, fp_cost, k)] = hit
        return hit

    def key_filter(self, src: str, dst: str, stream: str, index: tuple[int, ...], n: float,
                   fp_cost: Optional[float]) -> float:
        """A reduction's key set of ``n`` distinct keys of ``stream`` on ``index`` (the edge's
        attributes), as the reducer builds it (:meth:`joinlib.protocol.bloom.KeySet.of`)."""
        return self._poisson(("filter", src, dst, stream, index, fp_cost), n,
                              lambda k: self.size(src, dst, self._filter(stream, index, k, fp_cost)))

    def key_filter_fp(self, stream: str, index: tuple[int, ...], n: float, fp_cost: Optional[float]) -> float:
        """The expected false-positive rate of that key set (0 for exact keys)."""
        return self._poisson(("filter-fp", stream, index, fp_cost), n,
                              lambda k: _fp_rate(self._filter(stream, index, k, fp_cost)))

    def _filter(self, stream: str, index: tuple[int, ...], k: int, fp_cost: Optional[float]) -> KeyFilter:
        hit = self._bodies.get(("filter", stream, index, fp_cost, k))
        if hit is None:
            ks = KeySet.of(self.distinct_keys(stream, index, k), self.fpr or None, keys_bytes, fp_cost)
            back, live = 0, self._window_epochs(stream)  # epochs back: the latest keys', the window's oldest
            hit = KeyFilter(back, live, [], ks.bloom.bits, ks.bloom.k, ks.bloom.n) if ks.bloom is not None \
                else KeyFilter(back, live, list(ks.keys or ()))
            self._bodies[("filter", stream, index, fp_cost, k)] = hit
        assert isinstance(hit, KeyFilter)
        return hit

    def shipped(self, src: str, dst: str, stream: str, n: float, arrivals: float) -> float:
        """A reduction's ShippedBatch: ``n`` tuples of ``stream`` and ``arrivals`` timestamps
        (tuple windows only)."""
        tup, ts = self.tup(stream), int(self.horizon_s * 500)
        total = self._expected(("shipped", src, dst, stream), n,
                               lambda k: self.size(src, dst, ShippedBatch([tup] * k, [])))
        if arrivals > 0:
            empty = self.size(src, dst, ShippedBatch([], []))
            total += self._expected(("shipped-arr", src, dst), arrivals,
                                    lambda a: self.size(src, dst, ShippedBatch([], [ts] * a))) - empty
        return total

    def expiry(self, src: str, dst: str, expired: float, arrivals: float) -> float:
        """SM-S1's update: the count k of expired shipped tuples, and ``arrivals`` timestamps
        (tuple windows only)."""
        ts = int(self.horizon_s * 500)
        k = max(0, round(expired))
        return self._expected(("expiry", src, dst, k), arrivals,
                              lambda a: self.size(src, dst, ExpiryUpdate(k, [ts] * a)))

    def dja(self, src: str, dst: str, stream: str, index: tuple[int, ...], new_keys: float, touched: float,
            gap: float, count: float, full: float, arrivals: float) -> float:
        """A DJA update (SM-S2, SM-D1): ``new_keys`` values v_J, the count changes v_C of
        ``touched`` entries (a (gap, count) pair each, of about ``gap`` and ``count``), ``full``
        tuples s_F (SM-S2) and ``arrivals`` timestamps."""
        key, tup, ts = self.key(stream, index), self.tup(stream), int(self.horizon_s * 500)
        g, c = max(0, round(gap)), max(0, round(count))
        total = self._expected(("dja-c", src, dst, g, c), touched,
                               lambda k: self.size(src, dst, DjaUpdate([], [g, c] * k, [], [])))
        parts: list[tuple[str, float, Callable[[int], DjaUpdate]]] = [
            ("vj", new_keys, lambda k: DjaUpdate([key] * k, [], [], [])),
            ("sf", full, lambda k: DjaUpdate([], [], [tup] * k, [])),
            ("arr", arrivals, lambda k: DjaUpdate([], [], [], [ts] * k))]
        for tag, n, make in parts:
            if n > 0:
                empty = self.size(src, dst, make(0))
                total += self._expected((tag, src, dst, stream, index), n, _sized(self, src, dst, make)) - empty
        return total

    # ------------------------------------------------------------ expected sizes
    def _expected(self, tag: tuple[object, ...], n: float, build: Callable[[int], float]) -> float:
        """E[size] for an expected ``n`` items: interpolated between whole counts."""
        n = max(0.0, n)
        lo = math.floor(n)
        a = self._at(tag, lo, build)
        if n == lo:
            return float(a)
        b = self._at(tag, lo + 1, build)
        return a + (b - a) * (n - lo)

    def _poisson(self, tag: tuple[object, ...], n: float, build: Callable[[int], float]) -> float:
        """E[size] when the item count is Poisson with mean ``n`` (arrivals are; a filtered subset
        of them too): for key sets, whose size is not affine in the count (a Bloom filter replaces
        the keys above a few), E[size(K)] is not size(E[K]).  Above :data:`EXACT` the count is
        concentrated enough to interpolate."""
        n = max(0.0, n)
        if n == 0.0 or n > EXACT:
            return self._expected(tag, n, build)
        hit = self._poissons.get((tag, n))   # the searches price one probe at many locations and in many plans
        if hit is None:
            hit = self._poissons[(tag, n)] = self._poisson_sum(tag, n, build)
        return hit

    def _poisson_sum(self, tag: tuple[object, ...], n: float, build: Callable[[int], float]) -> float:
        hi = int(n + 6.0 * math.sqrt(n) + 6.0)
        sizes = self._sizes(tag, hi, build)
        pk, total, mass = math.exp(-n), 0.0, 0.0
        for k in range(hi + 1):
            total += pk * sizes[k]
            mass += pk
            pk *= n / (k + 1)
        return total / mass

    def _sizes(self, tag: tuple[object, ...], hi: int, build: Callable[[int], float]) -> list[float]:
        """``_at(tag, k)`` for k = 0..hi (at least), kept per tag: each key set is priced at hundreds of
        expected counts, every Poisson sum over the same first hundred-odd sizes."""
        sizes = self._series.setdefault(tag, [])
        for k in range(len(sizes), hi + 1):
            sizes.append(self._at(tag, k, build))
        return sizes

    def _at(self, tag: tuple[object, ...], k: int, build: Callable[[int], float]) -> float:
        if k > BUILT_UP_TO:   # a message of more items is not built: its size goes on at the last built ones' rate
            lo, hi = self._at_exact(tag, BUILT_UP_TO // 2, build), self._at_exact(tag, BUILT_UP_TO, build)
            return hi + (hi - lo) * (k - BUILT_UP_TO) / (BUILT_UP_TO // 2)
        if k > EXACT:
            r = _round2(k)
            if r != k:
                base = self._at_exact(tag, 0, build)
                return base + (self._at_exact(tag, r, build) - base) * k / r
        return self._at_exact(tag, k, build)

    def _at_exact(self, tag: tuple[object, ...], k: int, build: Callable[[int], float]) -> float:
        key = tag + (k,)
        hit = self._cache.get(key)
        if hit is None:
            hit = self._cache[key] = build(k)
        return hit


def _sized(enc: Encoding, src: str, dst: str, make: Callable[[int], DjaUpdate]) -> Callable[[int], int]:
    return lambda k: enc.size(src, dst, make(k))


def _fp_rate(body: Body) -> float:
    """The false-positive rate of a key set as sent (0: exact keys)."""
    if isinstance(body, KeyFilter) and body.bits:
        return bloom_rate(len(body.bits) * 8, body.hashes, body.n)
    return 0.0


def _variant(v: Value, i: int, k: int) -> Value:
    """The ``i``-th of ``k`` distinct values shaped like ``v``."""
    if isinstance(v, bool) or v is None:
        return i
    if isinstance(v, (int, float)):
        return v + i
    s = str(v)
    width = len(s) - 1
    if width > 0 and 10 ** width >= k:
        return s[0] + f"{i:0{width}d}"
    return s + str(i)


def _round2(k: int) -> int:
    """``k`` rounded to two significant digits."""
    p: int = 10 ** max(0, len(str(k)) - 2)
    return max(1, int(round(k / p)) * p)


def tuple_bytes_of(query: Query, measured: Optional[dict[str, float]] = None) -> dict[str, float]:
    """F per stream: measured, else the query's ``tuple_bytes``, else the cost model's default."""
    out = {}
    for s in query.streams:
        m = (measured or {}).get(s.name)
        out[s.name] = float(m) if m is not None else full_bytes(s)
    return out
