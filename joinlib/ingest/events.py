"""Synthetic live events for a stream with a json source: what a router writes to its topic.

Deterministic per (seed, stream): event ``i`` is *created* at ``i * 1000 / rate`` ms after the
generator's start and arrives in that order; its event time is its creation time minus a random
delay below ``disorder_ms`` (so events arrive out of order by less than δ when ``disorder_ms`` <= δ,
and none of them is late), except that every ``late_every``-th event is ``late_by_ms`` old when it
arrives (late if its partition has seen a newer event within ``late_by_ms - δ``), and every
``malformed_every``-th record is malformed (cycling through bad JSON, a missing event-time field, an
event time of the wrong type and a join value of the wrong type).

A record is a JSON object with the source's id and event-time fields (ms), the stream's join
attributes (values ``10.0.x.y`` over ``distinct`` destinations, uniform) and a ``payload`` string of
``payload_bytes`` characters; its Kafka key is its first join value (same destination, same partition).
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Iterator, NamedTuple, Optional

import orjson

from joinlib.model import Stream

OK, LATE_INTENDED, MALFORMED = "ok", "late", "malformed"


class Record(NamedTuple):
    created_ms: float   # ms after the generator's start
    key: bytes
    value: bytes
    kind: str           # OK, LATE_INTENDED or MALFORMED (what was meant; the node decides)


@dataclass(frozen=True)
class EventProfile:
    rate: float = 100.0             # events per second per stream
    distinct: int = 500             # join values
    payload_bytes: int = 100
    disorder_ms: int = 60           # event time = creation time - U[0, disorder)
    late_every: int = 0             # 0: none
    late_by_ms: int = 2000
    malformed_every: int = 0        # 0: none

    def __post_init__(self) -> None:
        if self.rate <= 0 or self.distinct <= 0 or self.payload_bytes < 0 or self.disorder_ms < 0:
            raise ValueError("rate and distinct must be positive, payload_bytes and disorder_ms not negative")


def _dest(k: int) -> str:
    return f"10.{k >> 16 & 255}.{k >> 8 & 255}.{k & 255}"


class EventGen:
    """The records of one stream (see the module docstring); ``time_base_ms`` is added to every event
    time (the wall clock at the start for live demos, 0 for synthetic times), ``id_base`` to every id."""

    def __init__(self, stream: Stream, profile: EventProfile, *, seed: int = 1, time_base_ms: int = 0,
                 id_base: int = 0) -> None:
        src = stream.source
        if src is None or src.format != "json":
            raise ValueError(f"stream {stream.name}: the generator writes json sources only")
        self.stream, self.p, self.base, self.id_base = stream, profile, time_base_ms, id_base
        self.time_field, self.id_field = src.time_field or "ts", src.id_field
        self.rng = random.Random(f"{seed}/{stream.name}")
        self.i = 0
        self.payload = "x" * profile.payload_bytes

    def created_ms(self, i: int) -> float:
        return i * 1000.0 / self.p.rate

    def until(self, t_ms: float) -> Iterator[Record]:
        """Every record created before ``t_ms`` (ms after the start) not yet returned."""
        while self.created_ms(self.i) < t_ms:
            yield self.next()

    def take(self, n: int) -> list[Record]:
        return [self.next() for _ in range(n)]

    def next(self) -> Record:
        i, p, rng = self.i, self.p, self.rng
        self.i += 1
        c = self.created_ms(i)
        delay = rng.uniform(0, p.disorder_ms) if p.disorder_ms else 0.0
        kind = OK
        if p.late_every and i % p.late_every == p.late_every - 1:
            delay, kind = float(p.late_by_ms), LATE_INTENDED
        values = {a: _dest(rng.randrange(p.distinct)) for a in self.stream.join_attrs}
        row: dict[str, object] = {}
        if self.id_field is not None:
            row[self.id_field] = self.id_base + i
        row[self.time_field] = self.base + int(c - delay)
        row.update(values)
        row["payload"] = self.payload
        key = str(next(iter(values.values()), "")).encode()
        if p.malformed_every and i % p.malformed_every == p.malformed_every - 1:
            return Record(c, key, self._malformed(row, i // p.malformed_every), MALFORMED)
        return Record(c, key, orjson.dumps(row), kind)

    def _malformed(self, row: dict[str, object], n: int) -> bytes:
        how = n % 4
        if how == 0:
            return orjson.dumps(row)[:-7]                    # bad JSON (cut short)
        bad = dict(row)
        if how == 1:
            del bad[self.time_field]                         # missing event-time field
        elif how == 2:
            bad[self.time_field] = str(bad[self.time_field])  # event time of the wrong type
        else:
            attr = self.stream.join_attrs[0] if self.stream.join_attrs else self.time_field
            bad[attr] = {"nested": bad.get(attr)}            # join value of the wrong type
        return orjson.dumps(bad)


def profile_from(rate: Optional[float] = None, **kw: int) -> EventProfile:
    """An :class:`EventProfile` with only the given fields changed (command-line glue)."""
    fields = {k: v for k, v in kw.items() if v is not None}
    if rate is not None:
        return EventProfile(rate=rate, **fields)
    return EventProfile(**fields)
