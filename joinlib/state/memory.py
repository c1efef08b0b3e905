"""In-memory window store: the embedded mode's store and the reference for conformance."""
from __future__ import annotations

from bisect import bisect_left
from itertools import repeat
from operator import itemgetter, lt
from typing import Any, Callable, Iterable, Optional, Sequence

from joinlib.kernels import kernel
from joinlib.model import Tup
from joinlib.state.base import Index, Key, KeyList

Projector = Callable[[Key], Key]  # a tuple's key -> its key at one Index

#: the per-batch loops of insert and purge_below in C (joinlib/state/_storec.c; None: the Python form below)
_c: Any = kernel("joinlib.state._storec")


class MemoryWindowStore:
    """Tuples of one stream in seq order plus one hash index per requested key shape."""

    def __init__(self) -> None:
        self._all = KeyList()  # every stored tuple, seq order
        self._indexes: dict[Index, tuple[dict[Key, KeyList], Projector]] = {}  # index -> (table, projector)

    def add_index(self, index: Index) -> None:
        if index in self._indexes:
            return
        table: dict[Key, KeyList] = {}
        proj = projector(index)
        live = self._all.live()
        for t, k in zip(live, _keys(live, proj), strict=True):
            _entry(table, k).append(t)
        self._indexes[index] = (table, proj)

    def insert(self, tups: Sequence[Tup]) -> None:
        if not tups:
            return
        if _c is not None and _c.insert(self._all, self._indexes, tups):  # the usual case, below
            return
        all_ = self._all
        last = all_.seq[-1] if len(all_) else -1
        seqs = [t.seq for t in tups]
        if seqs[0] > last and all(map(lt, seqs, seqs[1:])):  # the usual case: a new batch, in order
            self._append(tups, seqs)
            return
        # a replica's batch: a reduction ships a tuple when it passes, which may be epochs after newer ones
        # did.  Those older than the newest stored go in one by one; the rest (most) are appended at once.
        newer: dict[int, Tup] = {}
        for t in tups:
            if t.seq > last:
                newer.setdefault(t.seq, t)   # a repeat is ignored, as a tuple already stored is
                continue
            n = len(all_)
            all_.insert(t)
            if len(all_) == n:
                continue
            for table, proj in self._indexes.values():
                _entry(table, _keys((t,), proj)[0]).insert(t)
        if newer:
            order = sorted(newer)
            self._append([newer[q] for q in order], order)

    def _append(self, tups: Sequence[Tup], seqs: list[int]) -> None:
        """``tups`` (seqs ``seqs``, increasing, all above the stored ones) at the end of the window and of their
        keys' lists."""
        if _c is not None:
            _c.append(self._all, self._indexes, tups)
            return
        all_ = self._all
        all_.ts.extend([t.ts for t in tups])
        all_.seq.extend(seqs)
        all_.tups.extend(tups)
        for table, proj in self._indexes.values():
            # strict=False: one key per tuple by construction, and this is the per-batch hot path
            for t, k in zip(tups, _keys(tups, proj), strict=False):
                kl = table.get(k)
                if kl is None:
                    table[k] = KeyList.of_one(t)
                else:
                    kl.ts.append(t.ts)
                    kl.seq.append(t.seq)
                    kl.tups.append(t)

    def lookup(self, index: Index, key: Key) -> Optional[KeyList]:
        return self._indexes[index][0].get(key)

    def table(self, index: Index) -> dict[Key, KeyList]:
        """The index itself, key -> list (to be read, not changed): a probe's kernel looks its keys up there
        (:func:`joinlib.runtime.algorithms.base.store_join`)."""
        return self._indexes[index][0]

    def lookup_many(self, index: Index, keys: Iterable[Key]) -> dict[Key, KeyList]:
        table = self._indexes[index][0]
        return {k: kl for k in keys if (kl := table.get(k)) is not None}

    def purge_below(self, *, ts: Optional[int] = None, seq: Optional[int] = None) -> list[Tup]:
        if _c is not None:
            gone: list[Tup] = _c.purge_below(self._all, self._indexes, ts, seq)  # the same steps
            return gone
        gone = self._all.drop_below(ts=ts, seq=seq)
        if gone:
            for table, proj in self._indexes.values():
                counts: dict[Key, int] = {}
                for k in _keys(gone, proj):
                    counts[k] = counts.get(k, 0) + 1
                for k, n in counts.items():  # the purged tuples are the oldest of each key
                    kl = table[k]
                    if len(kl) == n:
                        del table[k]
                    else:
                        kl.pop_oldest(n)
        return gone

    def remove_oldest(self, tups: Sequence[Tup]) -> None:
        if not tups:
            return
        doomed = {t.seq for t in tups}
        for table, proj in self._indexes.values():
            for t, k in zip(tups, _keys(tups, proj), strict=False):  # one key per tuple by construction
                kl = table[k]
                assert kl.seq[kl.lo] == t.seq, "remove_oldest: not the oldest tuple of its key"
                kl.pop_oldest()
                if not len(kl):
                    del table[k]
        a = self._all
        n = len(doomed)
        if a.seq[a.lo:a.lo + n] == sorted(doomed):  # the oldest tuples overall (SM-S1's FIFO): a prefix
            a.pop_oldest(n)
            return
        keep = [t for t in a.live() if t.seq not in doomed]
        self._all = fresh = KeyList()
        fresh.ts, fresh.seq, fresh.tups = [t.ts for t in keep], [t.seq for t in keep], keep

    def first_seq_at_or_after(self, ts: int) -> Optional[int]:
        a = self._all
        i = bisect_left(a.ts, ts, a.lo)
        return a.seq[i] if i < len(a.seq) else None

    def oldest_seq(self) -> Optional[int]:
        """Seq of the oldest stored tuple (None if empty): every stored seq is at least this, so a
        durable copy can drop whatever it keeps below it (:mod:`joinlib.adapters.redis_blocks`)."""
        a = self._all
        return a.seq[a.lo] if a.lo < len(a.seq) else None

    def tuples(self) -> list[Tup]:
        """All stored tuples in seq order."""
        return self._all.live()

    def holds_all(self, tups: Sequence[Tup], seqs: Sequence[int]) -> bool:
        """Whether every tuple of ``tups`` (seqs ``seqs``) is stored: the object itself or an equal one (the same
        stream and id), so a checkpoint names such tuples by seq instead of writing them
        (:meth:`joinlib.runtime.instance.Instance.snapshot`) whether or not a restore made them again -- a
        snapshot is a function of the state, not of object identity.  A bisection per tuple and the list
        comparison (identity first) in C."""
        a = self._all
        try:
            found = list(map(a.tups.__getitem__, map(bisect_left, repeat(a.seq), seqs, repeat(a.lo))))
        except IndexError:   # a seq above every stored one
            return False
        return found == list(tups)

    def snapshot(self) -> list[Tup]:
        return list(self._all.live())

    def load(self, tuples: Sequence[Tup]) -> None:
        indexes = list(self._indexes)
        self.clear()
        for index in indexes:
            self.add_index(index)
        self.insert(sorted(tuples, key=lambda t: t.seq))

    def clear(self) -> int:
        self._all = KeyList()
        self._indexes = {}
        return 0

    def indexes(self) -> set[Index]:
        """The indexes maintained."""
        return set(self._indexes)

    def __len__(self) -> int:
        return len(self._all)


class _Prefix:
    """Projection on the first n key attributes; the identity when a stream has exactly n."""

    __slots__ = ("n",)

    def __init__(self, n: int) -> None:
        self.n = n

    def __call__(self, key: Key) -> Key:
        return key if len(key) == self.n else key[:self.n]


class _Pick:
    """Projection on the key attributes at ``positions`` (any but a prefix).  An object of its own class, not a
    closure, so the kernel knows it by its type and picks the same positions itself without calling it."""

    __slots__ = ("positions", "_get", "_one")

    def __init__(self, positions: Index) -> None:
        self.positions = positions
        self._get = itemgetter(*positions)
        self._one = len(positions) == 1   # itemgetter of one position gives the value, not a 1-tuple

    def __call__(self, key: Key) -> Key:
        return (self._get(key),) if self._one else self._get(key)


def projector(index: Index) -> Projector:
    """A function key -> the values at ``index``."""
    if index == tuple(range(len(index))):
        return _Prefix(len(index))
    return _Pick(index)


def _keys(tups: Sequence[Tup], proj: Projector) -> list[Key]:
    """The index keys of ``tups`` (one stream: all keys have the same length)."""
    if type(proj) is _Prefix and tups and len(tups[0].key) == proj.n:
        return [t.key for t in tups]
    return [proj(t.key) for t in tups]


def _entry(table: dict[Key, KeyList], key: Key) -> KeyList:
    kl = table.get(key)
    if kl is None:
        kl = table[key] = KeyList()
    return kl


if _c is not None:
    _c.setup(KeyList, Tup, _Prefix, _Pick)
