"""Compact key sets: Bloom filters sized per batch, and the choice between a filter and the keys.

A semijoin ships the join keys of one side so the other side can send back (or forward) only the
tuples that may match.  The keys need not be exact: a *false positive* only lets an extra tuple
through, which the join at its destination then drops, so results stay exact.  A Bloom filter of
n keys at false-positive rate p takes ``m = -n ln p / (ln 2)^2`` bits (about 9.6 bits per key at
1 %), against several bytes per key written out.

Keys are hashed from a canonical encoding in which values equal in Python (``1 == 1.0 == True``)
hash alike, as they match alike in the windows' dictionaries.  The k ≤ 16 positions are sixteen
independent 32-bit words of one BLAKE2b digest: the same bits on every node and every run.  (Double
hashing, h1 + i·h2, is not used: for the few hundred bits a batch's filter has, keys whose h2
agree modulo m share most positions, and the false-positive rate came out 100-300 times the
design rate.  With k capped at 16, rates below ~1e-5 cost a few more bits than the optimum.)
"""
from __future__ import annotations

import functools
import math
import struct
from dataclasses import dataclass
from hashlib import blake2b
from typing import Any, Callable, Iterable, Optional, Sequence

import numpy as np

from joinlib.kernels import kernel

#: The C kernels (setup.py builds them; _bloomc.c says why), or None: no compiler at install, or a
#: big-endian machine; then the numpy forms below answer, the same answers more slowly.
_c: Any = kernel("joinlib.protocol._bloomc")

Key = tuple[Any, ...]

MIN_BITS = 8


def _canon(v: Any) -> bytes:
    t = type(v)
    if t is str:
        return b"s" + str(v).encode("utf-8", "surrogatepass")
    if t is int or t is bool:
        return b"i%d" % v
    if t is float:
        if v.is_integer():
            return b"i%d" % int(v)
        return b"f" + repr(v).encode()
    if v is None:
        return b"n"
    if isinstance(v, bool):
        return b"i%d" % int(v)
    if isinstance(v, int):
        return b"i%d" % int(v)
    if isinstance(v, float):
        return _canon(float(v))
    if isinstance(v, str):
        return b"s" + str(v).encode("utf-8", "surrogatepass")
    return b"r" + repr(v).encode("utf-8", "backslashreplace")


MAX_HASHES = 16
_WORDS = struct.Struct("<16I")

Hashes = tuple[int, ...]


#: distinct keys whose hashes are remembered: join keys repeat epoch after epoch (a window's keys are tested
#: against every new filter), and a BLAKE2b digest costs ~20x a cache hit.  Equal keys (1 == 1.0 == True)
#: share an entry, which is right: their canonical encodings, so their hashes, are equal too.
KEY_HASH_CACHE = 1 << 16

#: key -> its digest: a plain dictionary, emptied when full, rather than an LRU cache -- a reducer looks up a
#: batch's keys at a time (:func:`digests`), and with tens of tuples an epoch between two looks at a key its
#: entry is out of the processor's caches: a dictionary hit reads the entry and the digest, an LRU hit also
#: relinks its neighbours.
_DIGESTS: dict[Key, bytes] = {}


def _digest(key: Key) -> bytes:
    """BLAKE2b of the key's canonical encoding (what :func:`key_digest` remembers)."""
    if len(key) == 1 and type(key[0]) is str:   # the usual join key: _canon's encoding, without the calls
        return blake2b(b"s" + key[0].encode("utf-8", "surrogatepass"), digest_size=64).digest()
    return blake2b(b"\x1f".join(map(_canon, key)), digest_size=64).digest()


def key_digest(key: Key) -> bytes:
    """The 64-byte digest whose sixteen little-endian 32-bit words are :func:`key_hash` (arrays of many keys'
    hashes are built from these bytes in one step)."""
    d = _DIGESTS.get(key)
    if d is None:
        d = _remember(key)
    return d


def digests(keys: Sequence[Key]) -> bytes:
    """The :func:`key_digest` of each of ``keys``, end to end (one dictionary look-up per key)."""
    ds = list(map(_DIGESTS.get, keys))
    if None in ds:
        ds = [d if d is not None else _remember(k) for k, d in zip(keys, ds, strict=True)]
    return b"".join(ds)  # type: ignore[arg-type]


def _remember_py(key: Key) -> bytes:
    """The key's digest, put in the cache (emptied first when full)."""
    if len(_DIGESTS) >= KEY_HASH_CACHE:
        _DIGESTS.clear()
    d = _DIGESTS[key] = _digest(key)
    return d


#: What a cache miss calls, here and in the kernels handed it (_keytablec, _bloomc's key_filter): a run digests each
#: distinct key once, ~0.3 us in _digestc.c against ~2 us through hashlib; a key other than one str is digested by
#: :func:`_digest` either way.
_d: Any = kernel("joinlib.protocol._digestc")
if _d is not None:
    _d.setup(_DIGESTS, KEY_HASH_CACHE, _digest)
    _remember: Callable[[Key], bytes] = _d.remember
else:  # pragma: no cover - depends on the install
    _remember = _remember_py


@functools.lru_cache(maxsize=KEY_HASH_CACHE)
def key_hash(key: Key) -> Hashes:
    """Sixteen independent 32-bit hashes of ``key`` (equal keys, equal hashes)."""
    return _WORDS.unpack(key_digest(key))


def filter_bits(keys: list[Key], m: int, k: int) -> bytes:
    """The m bits with each key's first k hash words (mod m) set: bit p is bit p % 8 of byte p // 8."""
    if _c is not None:
        return bytes(_c.filter_bits(digests(keys), m, k))
    return filter_bits_np(keys, m, k)


def filter_bits_np(keys: list[Key], m: int, k: int) -> bytes:
    """:func:`filter_bits` without the C kernels: a filter of more than a few keys is set in array operations (a
    loop of n·k steps costs ~0.3 us each)."""
    if len(keys) * k <= 32:
        bits = bytearray(m // 8)
        for key in keys:
            for p in key_hash(key)[:k]:
                p %= m
                bits[p >> 3] |= 1 << (p & 7)
        return bytes(bits)
    words = np.frombuffer(digests(keys), dtype="<u4").reshape(len(keys), MAX_HASHES)
    flat = np.zeros(m, dtype=np.uint8)
    flat[(words[:, :k] % m).ravel()] = 1
    return np.packbits(flat, bitorder="little").tobytes()


def rate(m: int, k: int, n: int) -> float:
    """The false-positive rate of m bits and k hash functions holding n keys."""
    return (1.0 - math.exp(-k * n / m)) ** k if n else 0.0


@functools.lru_cache(maxsize=4096)
def sizing(n: int, fpr: float) -> tuple[int, int]:
    """(bits, hash functions) for ``n`` keys at false-positive rate ``fpr`` (at most
    :data:`MAX_HASHES` functions: the bits grow until the rate is met).  Cached: a reducer sizes a filter
    every epoch, and its (n, rate) pairs repeat."""
    if n <= 0:
        return MIN_BITS, 1
    m = max(MIN_BITS, math.ceil(-n * math.log(fpr) / (math.log(2) ** 2)))
    m = (m + 7) // 8 * 8
    k = min(MAX_HASHES, max(1, round(m / n * math.log(2))))
    while rate(m, k, n) > fpr * 1.05:
        m += 8 * max(1, m // 64)
    return m, k


@dataclass(frozen=True)
class Bloom:
    """An immutable Bloom filter: ``bits`` (``m = 8 * len(bits)``), ``k`` hash functions, ``n`` keys."""

    bits: bytes
    k: int
    n: int

    @classmethod
    def of(cls, keys: Iterable[Key], fpr: float) -> "Bloom":
        ks = list(keys)
        m, k = sizing(len(ks), fpr)
        return cls(filter_bits(ks, m, k), k, len(ks))

    def __contains__(self, key: Key) -> bool:
        return self.has(key_hash(key))

    def has(self, h: Hashes) -> bool:
        """Membership from a precomputed :func:`key_hash`."""
        bits, m = self.bits, len(self.bits) * 8
        for p in h[:self.k]:
            p %= m
            if not bits[p >> 3] & (1 << (p & 7)):
                return False
        return True


def best_rate(n: int, cap: float, fp_cost: float) -> float:
    """The false-positive rate that minimises filter bytes plus the expected cost of false
    positives: a filter of n keys takes about ``n (-ln p) / (8 ln² 2)`` bytes, and each of the
    receiver's candidates passes falsely with probability p at ``fp_cost / candidates`` bytes --
    so with ``fp_cost`` = candidates × bytes per false pass, p* = n / (8 ln² 2 · fp_cost),
    at most ``cap``."""
    if fp_cost <= 0:
        return cap
    return max(1e-12, min(cap, n / (8 * math.log(2) ** 2 * fp_cost)))


@functools.lru_cache(maxsize=4096)
def filter_cost(n: int, fpr: float, fp_cost: float) -> tuple[int, int, float]:
    """(bits, hash functions, cost in bytes) of the filter :meth:`KeySet.of` weighs against ``n`` keys written
    out: its bytes plus the expected cost of its false positives, at :func:`best_rate`.  Cached: a reducer
    prices a set on every edge every epoch, and its (keys, rate, cost) triples repeat."""
    m, k = sizing(n, best_rate(n, fpr, fp_cost))
    return m, k, m // 8 + 6 + rate(m, k, n) * fp_cost


def choose(keys: Iterable[Key], fpr: Optional[float], key_bytes: Any = None,
           fp_cost: Optional[float] = None) -> tuple[tuple[Key, ...], Optional[tuple[bytes, int, int]]]:
    """:meth:`KeySet.of`'s choice, as plain data: the distinct keys and None, or no keys and the filter's
    (bits, hash functions, keys).  A reduction makes a set for every edge every epoch and writes it straight
    into a message (:func:`joinlib.runtime.algorithms.keysets.key_filter`): no objects in between."""
    ks = tuple(dict.fromkeys(keys))
    if fpr is None or fp_cost is None or not ks:
        return ks, None
    exact = key_bytes(ks) if key_bytes is not None else sum(2 + 8 * len(k) for k in ks)
    m, k, cost = filter_cost(len(ks), fpr, fp_cost)
    if cost < exact:
        return (), (filter_bits(list(ks), m, k), k, len(ks))
    return ks, None


@dataclass(frozen=True)
class KeySet:
    """A set of join keys as shipped: the keys themselves, or a Bloom filter when that is cheaper."""

    keys: Optional[tuple[Key, ...]] = None
    bloom: Optional[Bloom] = None

    @classmethod
    def of(cls, keys: Iterable[Key], fpr: Optional[float], key_bytes: Any = None,
           fp_cost: Optional[float] = None) -> "KeySet":
        """The exact keys or a Bloom filter, whichever costs less: ``fp_cost`` is what false
        positives would cost at the receiver if every candidate passed, in bytes; the filter's rate
        is :func:`best_rate`, at most ``fpr``, and the expected cost of its false positives counts
        against it.  ``key_bytes(keys)``: the encoded size of the keys (default ~8 bytes per
        value).  ``fpr`` or ``fp_cost`` None: always the keys -- a filter sized blind can cost far
        more in false positives than it saves."""
        ks, bloom = choose(keys, fpr, key_bytes, fp_cost)
        return cls(bloom=Bloom(*bloom)) if bloom is not None else cls(keys=ks)

    def __len__(self) -> int:
        if self.bloom is not None:
            return self.bloom.n
        return len(self.keys or ())

    def matcher(self) -> "Matcher":
        return Matcher(self)


class Matcher:
    """Membership tests against one :class:`KeySet` (a Python set for exact keys).  ``cache``: a form of
    the set that a caller derived once for its own tests (the array form of a filter's bits,
    :func:`unpacked`); a matcher is compared by identity."""

    __slots__ = ("_set", "_bloom", "cache")

    def __init__(self, ks: KeySet) -> None:
        self._set = set(ks.keys or ()) if ks.bloom is None else None
        self._bloom = ks.bloom
        self.cache: Any = None

    @classmethod
    def of(cls, keys: Iterable[Key] = (), bloom: Optional[Bloom] = None) -> "Matcher":
        """``Matcher(KeySet(keys=..., bloom=...))`` without the KeySet: a reducer makes one for every set it
        takes, every epoch."""
        m = cls.__new__(cls)
        m._set = set(keys) if bloom is None else None
        m._bloom = bloom
        m.cache = None
        return m

    def has(self, key: Key, h: Optional[Hashes] = None) -> bool:
        if self._set is not None:
            return key in self._set
        assert self._bloom is not None
        return self._bloom.has(h if h is not None else key_hash(key))


# ----------------------------------------------------------------------------- the array form
# Testing many keys against a filter one call at a time costs ~1 us a pair in Python; as arrays, the keys'
# hash words are rows of a (keys, 16) array and a test is a few array operations.  The answers are exactly
# Matcher.has's: the same words, the same bit positions (word mod m for the filter's first k words).

#: eight bools read as one 64-bit word, all of them set
ALL_SET = np.uint64(0x0101010101010101)


def hash_rows(keys: Sequence[Key]) -> np.ndarray:
    """The :func:`key_hash` words of ``keys``, a row per key."""
    return np.frombuffer(digests(keys), dtype="<u4").reshape(len(keys), MAX_HASHES)


def unpacked(m: Matcher) -> np.ndarray:
    """A Bloom matcher's bits, one bool per bit (bit p of the filter is element p), unpacked once per
    matcher (kept in its ``cache``): a filter is tested on every epoch it is live."""
    bits: Optional[np.ndarray] = m.cache
    if bits is None:
        assert m._bloom is not None
        bits = m.cache = np.unpackbits(np.frombuffer(m._bloom.bits, np.uint8), bitorder="little").view(bool)
    return bits


def bloom_hits(m: Matcher, rows: np.ndarray) -> np.ndarray:
    """Does the Bloom filter of ``m`` hold the key of each hash row (a bool per row)."""
    assert m._bloom is not None
    if _c is not None:
        return np.frombuffer(_c.hits(m._bloom.bits, m._bloom.k, rows), dtype=bool)
    return bloom_hits_np(m, rows)


def bloom_hits_np(m: Matcher, rows: np.ndarray) -> np.ndarray:
    """:func:`bloom_hits` without the C kernels."""
    assert m._bloom is not None
    bits, k = unpacked(m), m._bloom.k
    got = bits.take(rows[:, :k] % len(bits))
    if k % 8:
        return np.asarray(got.all(axis=1))
    words = got.view(np.uint64)
    return np.asarray((words[:, 0] if k == 8 else words[:, 0] & words[:, 1]) == ALL_SET)


def hit_index(m: Matcher, digests: Any) -> list[int]:
    """The numbers of the keys whose :func:`key_digest` are ``digests`` (64 bytes each, end to end: bytes or a
    bytearray) that the Bloom filter of ``m`` holds, in order."""
    assert m._bloom is not None
    if _c is not None:
        out: list[int] = _c.hit_index(m._bloom.bits, m._bloom.k, digests)
        return out
    rows = np.frombuffer(digests, dtype="<u4").reshape(-1, MAX_HASHES)
    return np.flatnonzero(bloom_hits_np(m, rows)).tolist()


def latest_holding(filters: Sequence[tuple[Matcher, int]], keys: Sequence[Key]) -> Optional[list[int]]:
    """Per key of ``keys``, the largest tag of the Bloom filters ``(matcher, tag)`` holding it (-1: none); None
    without the C kernels (the caller then tests in its own array form, :class:`KeyIndex`'s bank)."""
    return latest_tags([(m._bloom.bits, m._bloom.k, tag) for m, tag in filters],  # type: ignore[union-attr]
                       digests(keys))


def latest_tags(filters: Sequence[tuple[bytes, int, int]], digests: bytes | bytearray) -> Optional[list[int]]:
    """:func:`latest_holding` of filters given as ``(bits, k, tag)`` and keys as their digests end to end (a
    caller that keeps its live filters in this form builds nothing per call); None without the C kernels."""
    if _c is None:
        return None
    out: list[int] = _c.latest(filters, digests)
    return out
