"""The narrow interface between the node runtime and a window store.

A store holds the tuples of ONE stream that a node keeps (its own window, or a
replica of a remote one), indexed by join key.  The runtime never asks a store to
evaluate a window: it asks for the tuples sharing a key, ordered by ``seq``, and
cuts the valid range itself with two bisections (:mod:`joinlib.runtime.windowing`).
Removal is always of a prefix in stream order (windows slide), or of single oldest
tuples (the FIFO of SM-S1, the per-key lists of SM-S2).
"""
from __future__ import annotations

from bisect import bisect_left
from typing import Iterable, Optional, Protocol, Sequence

from joinlib.model import Tup, Value

Index = tuple[int, ...]  # positions in the stream's join_attrs that form a key
Key = tuple[Value, ...]  # the values of a tuple's key at an Index (as joinlib.protocol.messages.Key)


class KeyList:
    """Tuples with one key, in ``seq`` order, with parallel ``ts``/``seq`` lists for bisection.

    ``lo`` marks the first live entry: removing the oldest tuple only moves ``lo``;
    the lists are compacted when the dead prefix grows large.
    """

    __slots__ = ("ts", "seq", "tups", "lo")

    def __init__(self) -> None:
        self.ts: list[int] = []
        self.seq: list[int] = []
        self.tups: list[Tup] = []
        self.lo = 0

    @classmethod
    def of_one(cls, t: Tup) -> "KeyList":
        """A list holding ``t`` alone: a window's index makes one for every key new to the window, which on
        selective joins is nearly every tuple (so without the three appends)."""
        kl = cls.__new__(cls)
        kl.ts, kl.seq, kl.tups, kl.lo = [t.ts], [t.seq], [t], 0
        return kl

    def __len__(self) -> int:
        return len(self.tups) - self.lo

    def append(self, t: Tup) -> None:
        self.ts.append(t.ts)
        self.seq.append(t.seq)
        self.tups.append(t)

    def insert(self, t: Tup) -> None:
        """Insert keeping seq order (replicas may receive older tuples late)."""
        if not self.seq or self.seq[-1] < t.seq:
            self.append(t)
            return
        i = bisect_left(self.seq, t.seq, self.lo)
        if i < len(self.seq) and self.seq[i] == t.seq:
            return  # already present
        self.ts.insert(i, t.ts)
        self.seq.insert(i, t.seq)
        self.tups.insert(i, t)

    def pop_oldest(self, n: int = 1) -> list[Tup]:
        out = self.tups[self.lo:self.lo + n]
        self.lo += len(out)
        self._maybe_compact()
        return out

    def drop_below(self, *, ts: Optional[int] = None, seq: Optional[int] = None) -> list[Tup]:
        """Remove the prefix with ts < ``ts`` (or seq < ``seq``); return it."""
        if ts is not None:
            arr, bound = self.ts, ts
        elif seq is not None:
            arr, bound = self.seq, seq
        else:
            raise TypeError("drop_below needs ts or seq")
        hi = bisect_left(arr, bound, self.lo)
        out = self.tups[self.lo:hi]
        self.lo = hi
        self._maybe_compact()
        return out

    def live(self) -> list[Tup]:
        return self.tups[self.lo:]

    def _maybe_compact(self) -> None:
        if self.lo > 64 and self.lo * 2 > len(self.tups):
            del self.ts[:self.lo], self.seq[:self.lo], self.tups[:self.lo]
            self.lo = 0


class WindowStore(Protocol):
    """What a node needs from the place its window tuples live."""

    def add_index(self, index: Index) -> None:
        """Maintain a key index over these attribute positions (idempotent)."""

    def insert(self, tups: Sequence[Tup]) -> None:
        """Add tuples (any seq order; a tuple already present is ignored)."""

    def lookup(self, index: Index, key: Key) -> Optional[KeyList]:
        """The tuples with ``key`` under ``index``, or None."""

    def lookup_many(self, index: Index, keys: Iterable[Key]) -> dict[Key, KeyList]:
        """Batch form of :meth:`lookup` (one round trip for remote stores); absent keys omitted."""

    def purge_below(self, *, ts: Optional[int] = None, seq: Optional[int] = None) -> list[Tup]:
        """Remove every tuple with ts < ``ts`` (or seq < ``seq``); return them in seq order."""

    def remove_oldest(self, tups: Sequence[Tup]) -> None:
        """Remove tuples each of which is the oldest remaining one with its key."""

    def first_seq_at_or_after(self, ts: int) -> Optional[int]:
        """Seq of the oldest stored tuple with ts >= ``ts`` (None if none)."""

    def tuples(self) -> list[Tup]:
        """Every stored tuple, in seq order."""

    def snapshot(self) -> list[Tup]:
        """The store's content as a value (every tuple, seq order): :meth:`load` of it into any
        store, of this kind or another, gives the same observable state.  Checkpoints, plan
        switches (a replica jump-started from another node's window) and partition hand-offs
        all move windows this way."""

    def load(self, tuples: Sequence[Tup]) -> None:
        """Replace the content by ``tuples`` (a :meth:`snapshot`); the indexes stay."""

    def clear(self) -> int:
        """Drop everything (tuples and indexes): the store is done with.  Returns how many storage
        keys were freed (0 in memory)."""

    def __len__(self) -> int: ...
