"""Streams whose rate changes over time: the workload of seed 003's experiment.

:func:`toggle_rows` is the project's generator (:func:`joinlib.data.gen.stream_rows`: Poisson arrivals,
uniform join values, payload attributes) run phase by phase: one stream switches between a low
and a high rate every ``period_ms`` from ``first_ms`` on (the paper: 50 ↔ 200 tuples/s every 2 s
from 1.5 s); the others keep their declared rate.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Union

from joinlib.data.files import stream_path, write_stream
from joinlib.data.gen import GenRow, stream_rows
from joinlib.errors import JoinlibError
from joinlib.model import Query, Stream


@dataclass(frozen=True)
class Toggle:
    """``stream`` runs at ``low`` tuples/s until ``first_ms``, then at ``high`` for ``period_ms``,
    ``low`` for ``period_ms``, and so on."""

    stream: str
    low: float = 50.0
    high: float = 200.0
    first_ms: int = 1500
    period_ms: int = 2000

    def phases(self, duration_ms: int) -> list[tuple[int, int, float]]:
        """(start, end, rate) of each phase within [0, duration_ms)."""
        out = [(0, min(self.first_ms, duration_ms), self.low)]
        t, high = self.first_ms, True
        while t < duration_ms:
            out.append((t, min(t + self.period_ms, duration_ms), self.high if high else self.low))
            t, high = t + self.period_ms, not high
        return [p for p in out if p[1] > p[0]]


def toggle_rows(stream: Stream, toggle: Toggle, duration_ms: int, seed: int) -> list[GenRow]:
    """The rows of ``stream`` over [0, duration_ms): toggled when it is ``toggle.stream``."""
    if stream.name != toggle.stream:
        return list(stream_rows(stream, duration_ms, seed))
    rows: list[GenRow] = []
    for i, (start, end, rate) in enumerate(toggle.phases(duration_ms)):
        phase = replace(stream, stats=replace(stream.stats, rate=rate))
        for row in stream_rows(phase, end - start, seed * 1000 + i):
            row["ts"] = int(row["ts"]) + start
            row["id"] = len(rows)
            rows.append(row)
    return rows


def write_toggle(query: Query, toggle: Toggle, out_dir: Union[str, Path], duration_ms: int,
                 seed: int) -> dict[str, int]:
    """Write ``<stream>.jsonl`` for every stream of ``query`` (what ``joinlib run --data`` reads)."""
    if toggle.stream not in query.names:
        raise JoinlibError(f"toggle: no stream {toggle.stream!r} in {query.name} (streams: {', '.join(query.names)})")
    return {s.name: write_stream(stream_path(out_dir, s.name), toggle_rows(s, toggle, duration_ms, seed))
            for s in query.streams}
