"""What a message costs on the wire, as the runtime encodes it.

Every size here comes from :func:`joinlib.wire.envelope_size` applied to a *representative*
message: an :class:`~joinlib.messages.Envelope` on the flow's own link whose body holds synthetic
tuples (their payload padded to the stream's tuple size), join keys shaped like the stream's and
counts of the expected magnitude.  No byte constant is written by hand, so when the runtime's
encodings change (a smaller envelope, Bloom-filter key batches, delta updates) the model follows
by construction: each message kind is one method of :class:`Encoding` to point at the new body.

Expected sizes of messages with a fractional expected number of items are interpolated between
the two neighbouring whole numbers; bodies of more than :data:`EXACT` items are built at two
significant digits and scaled (sizes are affine in the item count above a few items).
"""
from __future__ import annotations

import math
from typing import Callable, Optional

from ..messages import Body, DjaUpdate, Envelope, ExpiryUpdate, Key, KeyBatch, TupleBatch
from ..model import Query, Stream, Tup, Value
from ..wire import encode_tuple, envelope_size

#: item counts up to which bodies are built exactly
EXACT = 64
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
    (sets the magnitude of ids, timestamps and epoch numbers, a byte or two per message).
    """

    def __init__(self, query: Query, tuple_bytes: dict[str, float], key_values: dict[str, tuple[Value, ...]],
                 horizon_s: float = 15.0) -> None:
        self.query = query
        self.horizon_s = horizon_s
        self.tau_ms = query.execution.interval_ms
        self._tuple_bytes = tuple_bytes
        self._key_values = key_values
        self._tups: dict[str, Tup] = {}
        self._cache: dict[tuple[object, ...], int] = {}
        self._flow = 1
        self._epoch = max(0, int(horizon_s * 1000 / self.tau_ms / 2))

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

    def _rate(self, s: Stream) -> float:
        r = s.stats.rate
        return 100.0 if r is None else float(r)

    def key(self, stream: str, index: tuple[int, ...]) -> Key:
        """A representative key of ``stream`` on the join attributes at ``index``."""
        vals = self._key_values[stream]
        return tuple(vals[i] for i in index)

    # ------------------------------------------------------------ the message kinds
    def size(self, src: str, dst: str, body: Body) -> int:
        """The bytes of one envelope carrying ``body`` from ``src`` to ``dst``."""
        return envelope_size(Envelope(src, dst, self._flow, self._epoch, body))

    def rows(self, src: str, dst: str, streams: tuple[str, ...], n: float) -> float:
        """A full-tuple message of ``n`` rows, each with one tuple of every stream of ``streams``."""
        parts = tuple(sorted((self.tup(s) for s in streams), key=lambda t: t.pos))
        return self._expected(("rows", src, dst, streams), n,
                              lambda k: self.size(src, dst, TupleBatch([parts] * k)))

    def keys(self, src: str, dst: str, stream: str, index: tuple[int, ...], n: float) -> float:
        """A partial-tuple message of ``n`` distinct keys of ``stream`` on ``index``."""
        key = self.key(stream, index)
        return self._expected(("keys", src, dst, stream, index), n,
                              lambda k: self.size(src, dst, KeyBatch([key] * k)))

    def expiry(self, src: str, dst: str, expired: float, arrivals: float) -> float:
        """SM-S1's update: the count k of expired shipped tuples, and ``arrivals`` timestamps
        (tuple windows only)."""
        ts = int(self.horizon_s * 500)
        k = max(0, round(expired))
        return self._expected(("expiry", src, dst, k), arrivals,
                              lambda a: self.size(src, dst, ExpiryUpdate(k, [ts] * a)))

    def dja(self, src: str, dst: str, stream: str, index: tuple[int, ...], new_keys: float, entries: float,
            count: float, full: float, arrivals: float) -> float:
        """A DJA update (SM-S2, SM-D1): ``new_keys`` values v_J, a count vector v_C of ``entries``
        counts of about ``count``, ``full`` tuples s_F (SM-S2) and ``arrivals`` timestamps."""
        key, tup, ts, c = self.key(stream, index), self.tup(stream), int(self.horizon_s * 500), max(0, round(count))
        total = self._expected(("dja-c", src, dst, c), entries,
                               lambda k: self.size(src, dst, DjaUpdate([], [c] * k, [], [])))
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
    def _expected(self, tag: tuple[object, ...], n: float, build: Callable[[int], int]) -> float:
        """E[size] for an expected ``n`` items: interpolated between whole counts."""
        n = max(0.0, n)
        lo = math.floor(n)
        a = self._at(tag, lo, build)
        if n == lo:
            return float(a)
        b = self._at(tag, lo + 1, build)
        return a + (b - a) * (n - lo)

    def _at(self, tag: tuple[object, ...], k: int, build: Callable[[int], int]) -> int:
        if k > EXACT:
            r = _round2(k)
            if r != k:
                base = self._at_exact(tag, 0, build)
                return round(base + (self._at_exact(tag, r, build) - base) * k / r)
        return self._at_exact(tag, k, build)

    def _at_exact(self, tag: tuple[object, ...], k: int, build: Callable[[int], int]) -> int:
        key = tag + (k,)
        hit = self._cache.get(key)
        if hit is None:
            hit = self._cache[key] = build(k)
        return hit


def _sized(enc: Encoding, src: str, dst: str, make: Callable[[int], DjaUpdate]) -> Callable[[int], int]:
    return lambda k: enc.size(src, dst, make(k))


def _round2(k: int) -> int:
    """``k`` rounded to two significant digits."""
    p: int = 10 ** max(0, len(str(k)) - 2)
    return max(1, int(round(k / p)) * p)


def tuple_bytes_of(query: Query, measured: Optional[dict[str, float]] = None) -> dict[str, float]:
    """F per stream: measured, else the query's ``tuple_bytes``, else the cost model's default."""
    from ..cost import full_bytes
    out = {}
    for s in query.streams:
        m = (measured or {}).get(s.name)
        out[s.name] = float(m) if m is not None else full_bytes(s)
    return out
