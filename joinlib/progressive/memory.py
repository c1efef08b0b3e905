"""Partitioned memory: R_i^mem[j] for both relations, under the limit M counted by the caller.

Each partition keeps its tuples by join value (the paper's sub-hash tables, so an arrival
inspects only its own value's tuples) and in arrival order (a partial flush evicts the
oldest first, "the first n_flush tuples" of Fig. 4).  Costs are charged by the algorithms
as the paper's sub-partitioned scan, not by what this dict-based layout really does.
"""
from __future__ import annotations

from collections import deque

from joinlib.progressive.model import Key, MemTuple


class MemPartition:
    """One R_i^mem[j]: tuples by key (each list in arrival order) and in arrival order."""

    __slots__ = ("by_key", "order")

    def __init__(self) -> None:
        self.by_key: dict[Key, list[MemTuple]] = {}
        self.order: deque[MemTuple] = deque()

    def __len__(self) -> int:
        return len(self.order)

    def insert(self, t: MemTuple) -> None:
        self.by_key.setdefault(t.key, []).append(t)
        self.order.append(t)

    def probe(self, key: Key) -> list[MemTuple]:
        return self.by_key.get(key, [])

    def evict_oldest(self, k: int) -> list[MemTuple]:
        """Remove and return the ``k`` oldest tuples.  Each is also the oldest of its key,
        so it sits at the front of its key's list."""
        out = [self.order.popleft() for _ in range(min(k, len(self.order)))]
        for t in out:
            same = self.by_key[t.key]
            same.pop(0)
            if not same:
                del self.by_key[t.key]
        return out

    def evict_all(self) -> list[MemTuple]:
        out = list(self.order)
        self.order.clear()
        self.by_key.clear()
        return out


class Memory:
    """R_1^mem and R_2^mem, ``partitions`` partitions each; ``total`` = |R_1^mem| + |R_2^mem|."""

    def __init__(self, partitions: int) -> None:
        self.parts = [[MemPartition() for _ in range(partitions)] for _ in range(2)]
        self.total = 0

    def size(self, rel: int, part: int) -> int:
        return len(self.parts[rel][part])

    def sizes(self) -> list[list[int]]:
        return [[len(p) for p in side] for side in self.parts]

    def insert(self, rel: int, part: int, t: MemTuple) -> None:
        self.parts[rel][part].insert(t)
        self.total += 1

    def evict(self, rel: int, part: int, k: int | None) -> list[MemTuple]:
        """The ``k`` oldest tuples of R_rel^mem[part] (all of them when ``k`` is None)."""
        p = self.parts[rel][part]
        out = p.evict_all() if k is None or k >= len(p) else p.evict_oldest(k)
        self.total -= len(out)
        return out
