"""In-memory window store: the embedded mode's store and the reference for conformance."""
from __future__ import annotations

from bisect import bisect_left
from typing import Iterable, Optional, Sequence

from ..model import Tup
from .base import Index, KeyList


class MemoryWindowStore:
    """Tuples of one stream in seq order plus one hash index per requested key shape."""

    def __init__(self) -> None:
        self._all = KeyList()  # every stored tuple, seq order
        self._indexes: dict[Index, dict[tuple, KeyList]] = {}

    def add_index(self, index: Index) -> None:
        if index in self._indexes:
            return
        table: dict[tuple, KeyList] = {}
        for t in self._all.live():
            _entry(table, _project(t.key, index)).append(t)
        self._indexes[index] = table

    def insert(self, tups: Sequence[Tup]) -> None:
        all_ = self._all
        tables = list(self._indexes.items())
        for t in tups:
            in_order = not all_.seq or all_.seq[-1] < t.seq
            if not in_order:
                n = len(all_)
                all_.insert(t)
                if len(all_) == n:
                    continue  # duplicate
            else:
                all_.append(t)
            for index, table in tables:
                kl = _entry(table, _project(t.key, index))
                if in_order:
                    kl.append(t)
                else:
                    kl.insert(t)

    def lookup(self, index: Index, key: tuple) -> Optional[KeyList]:
        return self._indexes[index].get(key)

    def lookup_many(self, index: Index, keys: Iterable[tuple]) -> dict[tuple, KeyList]:
        table = self._indexes[index]
        return {k: table[k] for k in keys if k in table}

    def purge_below(self, *, ts: Optional[int] = None, seq: Optional[int] = None) -> list[Tup]:
        gone = self._all.drop_below(ts=ts, seq=seq)
        if gone:
            for index, table in self._indexes.items():
                for t in gone:
                    k = _project(t.key, index)
                    kl = table.get(k)
                    if kl is not None:
                        kl.drop_below(seq=t.seq + 1)
                        if not len(kl):
                            del table[k]
        return gone

    def remove_oldest(self, tups: Sequence[Tup]) -> None:
        if not tups:
            return
        doomed = {t.seq for t in tups}
        for index, table in self._indexes.items():
            for t in tups:
                k = _project(t.key, index)
                kl = table[k]
                assert kl.seq[kl.lo] == t.seq, "remove_oldest: not the oldest tuple of its key"
                kl.pop_oldest()
                if not len(kl):
                    del table[k]
        # the global list: rebuild without the removed tuples (they may sit anywhere)
        keep = [t for t in self._all.live() if t.seq not in doomed]
        self._all = KeyList()
        for t in keep:
            self._all.append(t)

    def first_seq_at_or_after(self, ts: int) -> Optional[int]:
        a = self._all
        i = bisect_left(a.ts, ts, a.lo)
        return a.seq[i] if i < len(a.seq) else None

    def tuples(self) -> list[Tup]:
        """All stored tuples in seq order (tests, metrics)."""
        return self._all.live()

    def __len__(self) -> int:
        return len(self._all)


def _entry(table: dict[tuple, KeyList], key: tuple) -> KeyList:
    kl = table.get(key)
    if kl is None:
        kl = table[key] = KeyList()
    return kl


def _project(key: tuple, index: Index) -> tuple:
    return tuple(key[i] for i in index)
