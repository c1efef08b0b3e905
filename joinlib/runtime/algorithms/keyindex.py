"""A reducer's pending tuples toward one neighbour, by join key, with the latest live set holding each key.

Why a module of its own: this is where a reduction's per-epoch work is spent.  A set that arrives must
find the pending keys it holds, and a key that arrives must find the latest live set holding it.  For
explicit key sets both are dictionary look-ups; for Bloom filters every (key, filter) pair must be
tested, so the keys' hash digests are kept end to end in one buffer and a filter is tested against all
pending keys at once (:meth:`KeyIndex.holding`), and the new keys of an epoch against all live filters at
once (:meth:`KeyIndex.settle`): one call of a C kernel (or a handful of array operations without the
kernels) in place of a Python call per pair, with the live filters kept in the form the kernel takes.

The answers are exactly :meth:`joinlib.protocol.bloom.Matcher.has`'s: the same hash words, the same bit
positions (word mod m for the filter's first k words).
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from joinlib.protocol.bloom import ALL_SET, MAX_HASHES, Matcher, hash_rows, hit_index, key_digest, latest_tags, unpacked
from joinlib.protocol.messages import Key

#: a live set of a neighbour as the reducer keeps it: (its number, its tag, its matcher)
LiveSet = tuple[int, int, Matcher]


class _Bank:
    """The bits of the live Bloom filters of one index, end to end in one array, so that a batch of keys
    is tested against all of them in a handful of array operations.

    Element 0 of the bits is a set bit.  Each filter has a row of sixteen (size, offset) pairs, one per
    hash word: (m, its offset) for the k words it uses and (1, 0) for the others, so that word % size +
    offset is the bit to test, and the unused words test the set bit.  A filter is copied in once, when
    first tested; everything is compacted to the live filters when the bits fill up."""

    def __init__(self) -> None:
        self.bits = np.ones(1, dtype=bool)
        self.end = 1
        self.slot: dict[Matcher, int] = {}
        self.size = np.ones((0, MAX_HASHES), dtype=np.uint32)
        self.off = np.zeros((0, MAX_HASHES), dtype=np.uint32)

    def place(self, ms: Sequence[Matcher]) -> list[int]:
        """The slots of the filters of ``ms``, copied in as needed."""
        slot = self.slot
        new = [m for m in ms if m not in slot]
        if new:
            need = sum(len(unpacked(m)) for m in new)
            if self.end + need > len(self.bits) or len(slot) + len(new) > len(self.size):
                self._compact(ms, need, len(new))
            for m in new:
                self._copy(m, unpacked(m))
            slot = self.slot
        return [slot[m] for m in ms]

    def _copy(self, m: Matcher, bits: np.ndarray) -> None:
        assert m._bloom is not None
        i = self.slot[m] = len(self.slot)
        k, n = m._bloom.k, len(bits)
        self.bits[self.end:self.end + n] = bits
        self.size[i, :k], self.size[i, k:] = n, 1
        self.off[i, :k], self.off[i, k:] = self.end, 0
        self.end += n

    def _compact(self, live: Sequence[Matcher], need: int, more: int) -> None:
        keep = [m for m in dict.fromkeys(live) if m in self.slot]
        size = 1 + sum(len(unpacked(m)) for m in keep) + need
        rows = max(64, 2 * (len(keep) + more))
        self.bits, self.end, self.slot = np.ones(max(4096, 2 * size), dtype=bool), 1, {}
        self.size = np.ones((rows, MAX_HASHES), dtype=np.uint32)
        self.off = np.zeros((rows, MAX_HASHES), dtype=np.uint32)
        for m in keep:
            self._copy(m, unpacked(m))

    def test(self, ms: Sequence[Matcher], rows: np.ndarray) -> np.ndarray:
        """(keys, filters): does the filter of ``ms[j]`` hold the key of row i.  The sixteen bools of a
        (key, filter) pair are read as two 64-bit words: all set is both words 0x0101010101010101."""
        slots = self.place(ms)
        pos = rows[:, None, :] % self.size[slots] + self.off[slots]
        words = self.bits.take(pos).view(np.uint64)
        hit: np.ndarray = (words[:, :, 0] & words[:, :, 1]) == ALL_SET
        return hit




class KeyIndex:
    """Pending seqs by key, the latest tag of a live set holding each key (``best``), the live sets (:meth:`live`),
    and the keys' digests end to end in one buffer, 64 bytes per slot (slots reused as keys come and go; a slot's
    digest is written when its key is placed, so a filter is tested against the buffer as it is)."""

    def __init__(self) -> None:
        self.seqs: dict[Key, set[int]] = {}
        self.best: dict[Key, int] = {}
        self._slot: dict[Key, int] = {}
        self._keys: list[Optional[Key]] = []
        self._free: list[int] = []
        self._dig = bytearray()
        self._new: list[Key] = []        # added since the last settle
        self._exact: list[tuple[set[Key], int]] = []       # the live explicit sets, with their tags
        self._blooms: list[tuple[bytes, int, int]] = []     # the live Bloom filters as (bits, k, tag)
        self._matchers: list[tuple[Matcher, int]] = []      # the same, as matchers (the numpy form's bank)
        self._bank = _Bank()

    def add(self, k: Key, seq: int) -> None:
        self.add_all((k,), (seq,))

    def add_all(self, keys: Sequence[Key], seqs: Sequence[int]) -> None:
        """:meth:`add` of each (key, seq) pair, in one call (a reducer's batch)."""
        index, new, place = self.seqs, self._new, self._place
        for k, seq in zip(keys, seqs, strict=True):
            got = index.get(k)
            if got is None:
                index[k] = {seq}
                new.append(k)
                place(k)
            else:
                got.add(seq)

    def discard_all(self, keys: Sequence[Key], seqs: Sequence[int]) -> None:
        """:meth:`discard` of each (key, seq) pair, in one call (the tuples that left a reducer's window)."""
        index, best, slot_of, at, free = self.seqs, self.best, self._slot, self._keys, self._free
        for k, seq in zip(keys, seqs, strict=True):
            got = index[k]
            got.discard(seq)
            if not got:
                del index[k]
                best.pop(k, None)
                slot = slot_of.pop(k)
                at[slot] = None
                free.append(slot)

    def discard(self, k: Key, seq: int) -> None:
        self.discard_all((k,), (seq,))

    def _place(self, k: Key) -> None:
        free = self._free
        if not free:
            n = len(self._keys)
            grow = max(64, n)
            self._dig.extend(bytes(64 * grow))
            self._keys.extend([None] * grow)
            free.extend(range(n + grow - 1, n - 1, -1))
        slot = free.pop()
        self._slot[k], self._keys[slot] = slot, k
        self._dig[64 * slot:64 * slot + 64] = key_digest(k)

    # ------------------------------------------------------------------ sets against keys
    def live(self, sets: Sequence[LiveSet]) -> None:
        """The live sets are now ``sets`` (their owner calls this when one arrives or expires): kept in the forms
        the tests below take, so an epoch's :meth:`settle` builds nothing."""
        self._exact = [(m._set, tag) for _, tag, m in sets if m._set is not None]
        self._matchers = [(m, tag) for _, tag, m in sets if m._set is None]
        self._blooms = [(m._bloom.bits, m._bloom.k, tag) for m, tag in self._matchers]  # type: ignore[union-attr]

    def more_live(self, sets: Sequence[LiveSet], new: Sequence[LiveSet]) -> None:
        """The live sets are now ``sets``, of which ``new`` just arrived: appended to the forms kept, without
        dropping the sets that expired meanwhile -- a set below the live tag holds nothing that counts (a key's
        latest tag from it is below the tag too, as if no set held the key), it only costs :meth:`settle` a test.
        So the forms are rebuilt only when the expired ones are more than a quarter of the live ones: an epoch's
        new set costs what it holds, not the whole window's sets, and :meth:`settle` tests at most a quarter more
        sets than are live (with half, rebuilding less often cost more in settle than it saved here)."""
        if 4 * (len(self._exact) + len(self._matchers)) > 5 * len(sets):
            self.live(sets)
            return
        for _, tag, m in new:
            if m._set is not None:
                self._exact.append((m._set, tag))
            else:
                assert m._bloom is not None
                self._matchers.append((m, tag))
                self._blooms.append((m._bloom.bits, m._bloom.k, tag))

    def settle(self, live: Optional[Sequence[LiveSet]] = None) -> None:
        """The latest tag of a live set holding each key added since the last call (-1: none); ``live``: the
        live sets changed to these first."""
        if live is not None:
            self.live(live)
        seqs = self.seqs
        new = [k for k in self._new if k in seqs]
        self._new = []
        if not new:
            return
        best = dict.fromkeys(new, -1)
        for held, tag in self._exact:
            for k in best.keys() & held:   # explicit keys: the few new keys they hold, found in C
                if tag > best[k]:
                    best[k] = tag
        if self._blooms:
            latest = latest_tags(self._blooms, b"".join(map(key_digest, new)))
            if latest is None:
                latest = self._latest_np(new)
            for k, tag in zip(new, latest, strict=True):
                if tag > best[k]:
                    best[k] = tag
        self.best.update(best)

    def _latest_np(self, new: Sequence[Key]) -> list[int]:
        """:func:`latest_tags` in array form, without the C kernels: the bank's test of every (key, filter)."""
        hit = self._bank.test([m for m, _ in self._matchers], hash_rows(new))
        tags = np.array([tag for _, tag in self._matchers], dtype=np.int64)
        latest: list[int] = np.where(hit, tags[None, :], -1).max(axis=1).tolist()
        return latest

    def holding(self, m: Matcher) -> list[Key]:
        """The pending keys that the set of ``m`` holds."""
        if m._set is not None:
            if len(m._set) < len(self.seqs):
                return [k for k in m._set if k in self.seqs]
            return [k for k in self.seqs if k in m._set]
        if not self.seqs:
            return []
        keys = self._keys     # a free slot's digest is stale: its key is None
        return [k for k in map(keys.__getitem__, hit_index(m, self._dig)) if k is not None]


def held_keys(m: Matcher, keys: Sequence[Key]) -> list[Key]:
    """The keys of ``keys`` (in their order) that the set of ``m`` holds: a Bloom filter tests them all at
    once (a semijoin's home answering a request sent as a filter tests every key of its window)."""
    if m._set is not None or len(keys) < 8:
        return [k for k in keys if m.has(k)]
    return [keys[i] for i in hit_index(m, b"".join(map(key_digest, keys)))]
