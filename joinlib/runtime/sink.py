"""Where results go.  The last step of a sequence hands over *groups* — a row and the
list of tuples of the last stream that join it — so a counting sink never pays for
building every combination."""
from __future__ import annotations

from typing import Sequence

from ..model import Query, Tup

Group = tuple[tuple, Sequence[Tup]]  # (row without the last stream, matching tuples)


class Sink:
    def emit(self, head_pos: int, pos: int, groups: list[Group], now: float) -> None:
        raise NotImplementedError


class CountingSink(Sink):
    """Counts results and sums their latency (emit time - head ts), nothing else."""

    def __init__(self) -> None:
        self.count = 0
        self.latency_sum = 0.0

    def emit(self, head_pos: int, pos: int, groups: list[Group], now: float) -> None:
        for row, tups in groups:
            n = len(tups)
            self.count += n
            self.latency_sum += n * (now - row[head_pos].ts)


class CollectingSink(Sink):
    """Keeps every result as (ids by stream position, head ts, emit time)."""

    def __init__(self, query: Query) -> None:
        self.query = query
        self.results: list[tuple[tuple[int, ...], int, float]] = []

    def emit(self, head_pos: int, pos: int, groups: list[Group], now: float) -> None:
        out = self.results
        for row, tups in groups:
            head_ts = row[head_pos].ts
            base = [t.id if t is not None else None for t in row]
            for t in tups:
                base[pos] = t.id
                out.append((tuple(base), head_ts, now))

    def records(self) -> list[dict]:
        names = self.query.names
        return [{"ids": dict(zip(names, ids)), "ts": ts, "emit_ms": round(now, 3)}
                for ids, ts, now in self.results]
