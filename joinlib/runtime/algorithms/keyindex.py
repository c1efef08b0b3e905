"""A reducer's pending tuples toward one neighbour, by join key, with the latest live set holding each key.

Why a module of its own: this is where a reduction's per-epoch work is spent.  A set that arrives must
find the pending keys it holds, and a key that arrives must find the latest live set holding it.  For
explicit key sets both are dictionary look-ups; for Bloom filters every (key, filter) pair must be
tested, so the keys' hashes are kept as rows of one array and a filter is tested against all pending
keys at once (:meth:`KeyIndex.holding`), and the new keys of an epoch against all live filters at once
(:meth:`KeyIndex.settle`): a handful of array operations in place of a Python call per pair.

The answers are exactly :meth:`joinlib.protocol.bloom.Matcher.has`'s: the same hash words, the same bit
positions (word mod m for the filter's first k words).
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from joinlib.protocol.bloom import MAX_HASHES, Bloom, Matcher, key_digest
from joinlib.protocol.messages import Key

#: a live set of a neighbour as the reducer keeps it: (its number, its tag, its matcher)
LiveSet = tuple[int, int, Matcher]


def hash_rows(keys: Sequence[Key]) -> np.ndarray:
    """The :func:`~joinlib.protocol.bloom.key_hash` words of ``keys``, a row per key."""
    return np.frombuffer(b"".join(map(key_digest, keys)), dtype="<u4").reshape(len(keys), MAX_HASHES)


def unpacked(b: Bloom) -> np.ndarray:
    """A filter's bits, one array element per bit (bit p of the filter is element p)."""
    return np.unpackbits(np.frombuffer(b.bits, np.uint8), bitorder="little")


class _Bank:
    """Several Bloom filters tested at once: their bits end to end, with one set bit after them that the
    hash words a filter does not use point at."""

    def __init__(self, blooms: Sequence[Bloom], bits: Sequence[np.ndarray]) -> None:
        sizes = np.array([len(x) for x in bits], dtype=np.int64)
        self.offsets = np.concatenate(([0], np.cumsum(sizes)[:-1]))
        self.sizes = sizes
        self.bits = np.concatenate([*bits, np.ones(1, np.uint8)]).astype(bool)
        self.unused = np.arange(MAX_HASHES)[None, :] >= np.array([b.k for b in blooms])[:, None]   # (F, 16)

    def test(self, rows: np.ndarray) -> np.ndarray:
        """(keys, filters): does filter j hold the key of row i."""
        pos = rows[:, None, :].astype(np.int64) % self.sizes[None, :, None] + self.offsets[None, :, None]
        pos = np.where(self.unused[None, :, :], len(self.bits) - 1, pos)
        hit: np.ndarray = self.bits[pos].all(axis=2)
        return hit


class KeyIndex:
    """Pending seqs by key, the latest tag of a live set holding each key (``best``), and the keys' hashes
    as array rows (slots reused as keys come and go)."""

    def __init__(self) -> None:
        self.seqs: dict[Key, set[int]] = {}
        self.best: dict[Key, int] = {}
        self._slot: dict[Key, int] = {}
        self._keys: list[Optional[Key]] = []
        self._free: list[int] = []
        self._rows = np.zeros((0, MAX_HASHES), dtype=np.uint32)
        self._live = np.zeros(0, dtype=bool)
        self._new: list[Key] = []
        self._bank: tuple[tuple[int, ...], Optional[_Bank]] = ((), None)
        self._bits: dict[int, np.ndarray] = {}   # the unpacked bits of each live filter, by its number

    def add(self, k: Key, seq: int) -> None:
        seqs = self.seqs.get(k)
        if seqs is None:
            seqs = self.seqs[k] = set()
            self._new.append(k)
            self._place(k)
        seqs.add(seq)

    def discard(self, k: Key, seq: int) -> None:
        seqs = self.seqs[k]
        seqs.discard(seq)
        if not seqs:
            del self.seqs[k]
            self.best.pop(k, None)
            slot = self._slot.pop(k)
            self._keys[slot] = None
            self._live[slot] = False
            self._free.append(slot)

    def _place(self, k: Key) -> None:
        if not self._free:
            n = len(self._keys)
            grow = max(64, n)
            self._rows = np.concatenate([self._rows, np.zeros((grow, MAX_HASHES), dtype=np.uint32)])
            self._live = np.concatenate([self._live, np.zeros(grow, dtype=bool)])
            self._keys.extend([None] * grow)
            self._free.extend(range(n + grow - 1, n - 1, -1))
        slot = self._free.pop()
        self._slot[k], self._keys[slot], self._live[slot] = slot, k, True
        self._rows[slot] = np.frombuffer(key_digest(k), dtype="<u4")

    # ------------------------------------------------------------------ sets against keys
    def settle(self, live: Sequence[LiveSet]) -> None:
        """The latest tag of a live set holding each key added since the last call (-1: none)."""
        new = [k for k in self._new if k in self.seqs]
        self._new = []
        if not new:
            return
        best = dict.fromkeys(new, -1)
        blooms: list[tuple[int, int, Bloom]] = []
        for idx, tag, m in live:
            if m._set is None:
                assert m._bloom is not None
                blooms.append((idx, tag, m._bloom))
                continue
            for k in new:
                if tag > best[k] and k in m._set:
                    best[k] = tag
        if blooms:
            hit = self._bank_of(blooms).test(self._rows[[self._slot[k] for k in new]])
            tags = np.array([tag for _, tag, _ in blooms], dtype=np.int64)
            latest = np.where(hit, tags[None, :], -1).max(axis=1).tolist()
            for k, tag in zip(new, latest, strict=True):
                if tag > best[k]:
                    best[k] = tag
        self.best.update(best)

    def holding(self, m: Matcher) -> list[Key]:
        """The pending keys that the set of ``m`` holds."""
        if m._set is not None:
            if len(m._set) < len(self.seqs):
                return [k for k in m._set if k in self.seqs]
            return [k for k in self.seqs if k in m._set]
        assert m._bloom is not None
        slots = np.flatnonzero(self._live)
        if not len(slots):
            return []
        hit = _Bank([m._bloom], [unpacked(m._bloom)]).test(self._rows[slots])[:, 0]
        keys = self._keys
        return [k for k in (keys[i] for i in slots[hit].tolist()) if k is not None]

    def _bank_of(self, blooms: list[tuple[int, int, Bloom]]) -> _Bank:
        ids = tuple(idx for idx, _, _ in blooms)
        if self._bank[0] != ids or self._bank[1] is None:
            old = self._bits
            self._bits = {idx: old[idx] if idx in old else unpacked(b) for idx, _, b in blooms}
            self._bank = (ids, _Bank([b for _, _, b in blooms], [self._bits[idx] for idx in ids]))
        bank = self._bank[1]
        assert bank is not None
        return bank


def held_keys(m: Matcher, keys: Sequence[Key]) -> list[Key]:
    """The keys of ``keys`` (in their order) that the set of ``m`` holds: a Bloom filter tests them all at
    once (a semijoin's home answering a request sent as a filter tests every key of its window)."""
    if m._set is not None or len(keys) < 8:
        return [k for k in keys if m.has(k)]
    assert m._bloom is not None
    rows = hash_rows(keys)
    hit = _Bank([m._bloom], [unpacked(m._bloom)]).test(rows)[:, 0].tolist()
    return [k for k, h in zip(keys, hit, strict=True) if h]
