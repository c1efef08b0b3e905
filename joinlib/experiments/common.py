"""What every experiment shares: the queries it sweeps, their warm-up, generated data cached across runs,
and the records it writes.

The rest of the experiments' toolkit has a module each: :mod:`joinlib.experiments.measure` (steady-state
measurement of a plan), :mod:`joinlib.experiments.estimates` (the cost models' estimates, their agreement with
measurements), :mod:`joinlib.experiments.output` (JSON, figures, progress bars).
"""
from __future__ import annotations

import math
import tempfile
from collections.abc import Hashable
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Optional

from joinlib import units
from joinlib.data.files import load_stream, write_stream
from joinlib.data.gen import stream_rows
from joinlib.model import Query, Stream, Tup, Window
from joinlib.planner.measure import fill_ms

Record = dict[str, Any]  # one JSON object of an experiment's output
ProgressFn = Callable[[int], None]


def round_sig(x: float, digits: int = 6) -> float:
    """``x`` to ``digits`` significant digits (0, inf and nan as they are): the records' numbers."""
    if x == 0 or not math.isfinite(x):
        return x
    return float(f"{x:.{digits}g}")


# --------------------------------------------------------------------------- queries


TOPOLOGY_LABELS = {"star": "Star", "chain": "Chain", "cycle": "Cycle", "complete": "Fully-connected"}


def with_stream_stats(query: Query, name: str, **changes: Any) -> Query:
    """``query`` with some statistics of stream ``name`` changed (``window_ms`` too)."""
    out = []
    for s in query.streams:
        if s.name == name:
            window = s.window
            if "window_ms" in changes:
                window = Window("time", int(changes.pop("window_ms")))
            if "selectivity" in changes:
                f = float(changes.pop("selectivity"))
                changes["selectivity"] = tuple((a, f) for a in s.join_attrs)
            s = replace(s, window=window, stats=replace(s.stats, **changes))
        out.append(s)
    return replace(query, streams=tuple(out))


def warmup_for(query: Query, spec: Any = "auto", cap_ms: Optional[int] = None) -> int:
    """Warm-up in ms: ``auto`` = the longest window (a tuple window counts size/rate),
    else a duration; rounded up to a multiple of τ (so epochs split cleanly)."""
    tau = query.execution.interval_ms
    if spec in (None, "auto"):
        ms = fill_ms(query)
        if cap_ms is not None:
            ms = min(ms, cap_ms)
    else:
        ms = parse_warmup(spec) if isinstance(spec, str) else int(spec)
    return int(math.ceil(ms / tau)) * tau


def parse_warmup(text: str) -> int:
    """A warm-up: a duration as :func:`joinlib.units.parse_duration` reads it ('5s', '500ms', a bare number
    of ms), or none ('0', '0ms', '0s')."""
    if str(text).strip() in ("0", "0ms", "0s"):
        return 0
    return units.parse_duration(text)


# --------------------------------------------------------------------------- data


def _gen_key(s: Stream, total_ms: int, seed: int) -> tuple[Hashable, ...]:
    st = s.stats
    return (s.name, s.pos, s.join_attrs, st.rate, st.attributes,
            st.tuple_bytes if st.attributes is None else None, st.selectivity, total_ms, seed)


class DataCache:
    """Generated streams, loaded as tuples, cached per (stream spec, duration, seed).

    A stream's data depends only on its own statistics and the seed
    (:func:`joinlib.data.gen.stream_rows`), so sweeps that change one stream, or only the
    network, reuse the others' data.  Files go to a temporary directory removed by
    :meth:`close`.
    """

    def __init__(self, directory: Optional[Path] = None) -> None:
        self._tmp: Optional[tempfile.TemporaryDirectory[str]] = None
        if directory is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="joinlib-exp-")
            directory = Path(self._tmp.name)
        self.dir = Path(directory)
        self._loaded: dict[tuple[Hashable, ...], list[Tup]] = {}
        self._n = 0

    def streams(self, query: Query, total_ms: int, seed: int) -> dict[str, list[Tup]]:
        out = {}
        for s in query.streams:
            key = _gen_key(s, total_ms, seed)
            tups = self._loaded.get(key)
            if tups is None:
                self._n += 1
                path = self.dir / f"{self._n:05d}-{s.name}.jsonl"
                write_stream(path, stream_rows(s, total_ms, seed))
                tups = self._loaded[key] = load_stream(s, path)
                path.unlink()
            out[s.name] = tups
        return out

    def clear(self) -> None:
        self._loaded.clear()

    def close(self) -> None:
        self.clear()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> "DataCache":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
