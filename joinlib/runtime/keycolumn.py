"""The join keys of a home window under one index, as a column: what a request sent as a Bloom filter is
tested against.

Why a column: a semijoin's home answering a filter must test every distinct key of its window's view
(SM-S1, SM-S2, SM-D2).  Scanning the window's tuples for their keys and hashing them costs O(window) Python
steps per request, every epoch.  Here the keys of the window's tuples are kept in seq order with their hash
rows, appended a batch at a time and cut from the front as the window purges; a view is two bisections and a
filter test is a few array operations over its rows.

It follows the window's store: it is appended what the store is inserted (in seq order, after the last
tuple: a home window's batches are) and purged with the same bound.  Anything else -- a batch out of order,
a store loaded from a checkpoint -- drops it, and it is rebuilt from the store's tuples when next asked.
"""
from __future__ import annotations

from bisect import bisect_left
from operator import lt
from typing import Sequence

import numpy as np

from joinlib.model import Tup
from joinlib.protocol.bloom import MAX_HASHES, Matcher, bloom_hits, hash_rows
from joinlib.protocol.messages import Key
from joinlib.runtime.windowing import Bound
from joinlib.state.base import Index


class KeyColumn:
    """The keys (under ``index``) of a window's tuples in seq order, their ts and seq, and their hash rows;
    entries before ``head`` are purged."""

    def __init__(self, index: Index, tuples: Sequence[Tup]) -> None:
        self.index = tuple(index)
        self.ts: list[int] = []
        self.seq: list[int] = []
        self.keys: list[Key] = []
        self.rows = np.zeros((0, MAX_HASHES), dtype=np.uint32)
        self.hashed = 0   # entries before this have their rows (hashed when first tested: exact sets never need them)
        self.head = 0
        self.append(tuples)

    def append(self, tups: Sequence[Tup]) -> bool:
        """Add a batch after the tuples already in; False (nothing added) when it does not follow them
        in seq order."""
        if not tups:
            return True
        seqs = [t.seq for t in tups]
        last = self.seq[-1] if self.seq else -1
        if seqs[0] <= last or not all(map(lt, seqs, seqs[1:])):
            return False
        ix = self.index
        if len(ix) == 1:
            i = ix[0]
            keys = [(t.key[i],) for t in tups]
        else:
            keys = [tuple(t.key[i] for i in ix) for t in tups]
        self._compact(len(keys))
        self.ts.extend(t.ts for t in tups)
        self.seq.extend(seqs)
        self.keys.extend(keys)
        return True

    def _compact(self, more: int) -> None:
        """Room for ``more`` rows: drop the purged entries when they are at least half, grow by doubling."""
        h = self.head
        if h and h >= len(self.keys) // 2:
            del self.ts[:h], self.seq[:h], self.keys[:h]
            done = max(0, self.hashed - h)
            self.rows[:done] = self.rows[h:h + done]
            self.head, self.hashed = 0, done
        need = len(self.keys) + more
        if need > len(self.rows):
            grown = np.zeros((max(64, 2 * need), MAX_HASHES), dtype=np.uint32)
            grown[:len(self.keys)] = self.rows[:len(self.keys)]
            self.rows = grown

    def purge(self, bound: dict[str, int]) -> None:
        """Cut what the store's ``purge_below(**bound)`` cut."""
        ((field_, value),) = bound.items()
        col = self.ts if field_ == "ts" else self.seq
        self.head = bisect_left(col, value, self.head)

    def view(self, lower: Bound, end: int) -> tuple[int, int]:
        """The entries of a window view, as a range: not below ``lower``, ts < ``end``."""
        hi = bisect_left(self.ts, end, self.head)
        col = self.ts if lower[0] == "ts" else self.seq
        return bisect_left(col, lower[1], self.head, hi), hi

    def distinct(self, lower: Bound, end: int) -> list[Key]:
        """The distinct keys of a view, in the order they first occur."""
        lo, hi = self.view(lower, end)
        return list(dict.fromkeys(self.keys[lo:hi]))

    def held(self, m: Matcher, lower: Bound, end: int) -> list[Key]:
        """The distinct keys of a view that the set of ``m`` holds, in the order they first occur."""
        lo, hi = self.view(lower, end)
        if m._bloom is None:
            return [k for k in dict.fromkeys(self.keys[lo:hi]) if m.has(k)]
        keys = self.keys
        if self.hashed < hi:
            start = max(self.hashed, self.head)
            self.rows[start:hi] = hash_rows(keys[start:hi])
            self.hashed = hi
        return list(dict.fromkeys(keys[lo + i] for i in np.flatnonzero(bloom_hits(m, self.rows[lo:hi])).tolist()))
