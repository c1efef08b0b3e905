"""Synthetic stream data in the shape the paper's experiments use.

Per stream: Poisson arrivals at the declared rate (exponential inter-arrival times,
truncated to integer ms, so equal timestamps happen as in real feeds), ids
0..n-1 in arrival order, each join attribute uniform over d = round(1/f) values
rendered ``"v0007"`` (the same value universe for every stream, so predicates match
with probability f), and ``attributes`` payload attributes ``a0..`` holding random
4-character strings: about 5 bytes per attribute on the wire, so the paper's
250-attribute tuple is about 1250 bytes.

Every stream draws from its own ``random.Random`` seeded by (seed, stream name):
a stream's data depends on nothing but those, not on the other streams, their
order or global random state.
"""
from __future__ import annotations

import random
from pathlib import Path
from typing import Callable, Iterator, NoReturn, Optional, Union

from tqdm import tqdm

from joinlib.data.files import stream_path, write_stream
from joinlib.data.stats import BYTES_PER_ATTRIBUTE, DEFAULT_RATE, DEFAULT_SELECTIVITY
from joinlib.errors import JoinlibError
from joinlib.model import Query, Stream

# Payload attributes of a generated stream that declares neither attributes nor tuple_bytes: fewer than the cost
# models assume (joinlib.data.stats.DEFAULT_ATTRIBUTES), so that test data stays small.
GENERATED_ATTRIBUTES = 10
VALUE_CHARS = 4
BURST_PROBABILITY = 0.05     # share of arrival events that are bursts when bursts=True
BURST_SIZES = (2, 6)         # a burst emits randint(*BURST_SIZES) tuples with one ts

_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"  # 64: bytes map uniformly
_BYTE_TO_CHAR = bytes(_ALPHABET[b % 64] for b in range(256))

Advance = Callable[[int], object]  # told the ms of stream time generated since the last call
GenRow = dict[str, Union[int, str]]  # "id" and "ts" (int), then the attributes (str)


def generate(query: Query, out_dir: Union[str, Path], duration_ms: int, seed: int,
             progress: bool = False, bursts: bool = False) -> dict[str, int]:
    """Write ``<stream>.jsonl`` for every stream of ``query`` covering [0, duration_ms);
    return the number of rows written per stream."""
    if isinstance(duration_ms, bool) or not isinstance(duration_ms, int) or duration_ms <= 0:
        raise JoinlibError(f"the generated duration must be a positive whole number of ms, not {duration_ms!r}")
    bar = _progress_bar(duration_ms * len(query.streams)) if progress else None
    counts: dict[str, int] = {}
    try:
        for stream in query.streams:
            if bar is not None:
                bar.set_description(f"generating {stream.name}")
            advance = bar.update if bar is not None else None
            rows = stream_rows(stream, duration_ms, seed, bursts, advance)
            counts[stream.name] = write_stream(stream_path(out_dir, stream.name), rows)
    finally:
        if bar is not None:
            bar.close()
    return counts


def _progress_bar(total_ms: int) -> tqdm[NoReturn]:
    return tqdm(total=total_ms, unit="ms", unit_scale=True, leave=False)


def payload_attributes(stream: Stream) -> int:
    """Number of payload attributes: declared, else derived from tuple_bytes, else the default."""
    st = stream.stats
    if st.attributes is not None:
        return st.attributes
    if st.tuple_bytes is not None:
        return max(0, round(st.tuple_bytes / BYTES_PER_ATTRIBUTE))
    return GENERATED_ATTRIBUTES


def distinct_values(stream: Stream, attr: str) -> int:
    """d = round(1/f) distinct values of a join attribute (f defaults to 0.1)."""
    f = stream.stats.selectivity_of(attr) or DEFAULT_SELECTIVITY
    return max(1, round(1.0 / f))


def _payload_names(stream: Stream) -> list[str]:
    """a0, a1, ... skipping any name that is already a join attribute of the stream."""
    names: list[str] = []
    i = 0
    while len(names) < payload_attributes(stream):
        if f"a{i}" not in stream.join_attrs:
            names.append(f"a{i}")
        i += 1
    return names


def stream_rows(stream: Stream, duration_ms: int, seed: int, bursts: bool = False,
                advance: Optional[Advance] = None) -> Iterator[GenRow]:
    """The rows of one stream, lazily, in (ts, id) order."""
    rng = random.Random(f"joinlib.gen:{seed}:{stream.name}")
    per_ms = (stream.stats.rate or DEFAULT_RATE) / 1000.0
    if bursts:  # keep the mean tuple rate: fewer arrival events, some of several tuples
        per_ms /= 1 + BURST_PROBABILITY * ((BURST_SIZES[0] + BURST_SIZES[1]) / 2 - 1)
    domains = [(a, distinct_values(stream, a)) for a in stream.join_attrs]
    names = _payload_names(stream)
    nbytes = VALUE_CHARS * len(names)
    t, next_id, reported = 0.0, 0, 0
    while True:
        t += rng.expovariate(per_ms)
        if t >= duration_ms:
            break
        ts = int(t)
        size = rng.randint(*BURST_SIZES) if bursts and rng.random() < BURST_PROBABILITY else 1
        for _ in range(size):
            row: GenRow = {"id": next_id, "ts": ts}
            for attr, d in domains:
                row[attr] = f"v{rng.randrange(d):04d}"
            text = rng.randbytes(nbytes).translate(_BYTE_TO_CHAR).decode("ascii")
            row.update(zip(names, [text[j:j + VALUE_CHARS] for j in range(0, nbytes, VALUE_CHARS)], strict=True))
            next_id += 1
            yield row
        if advance is not None and ts - reported >= 1000:
            advance(ts - reported)
            reported = ts
    if advance is not None:
        advance(duration_ms - reported)
