"""Finite input relations: rows ``{"id": ..., <attr>: ...}`` from JSONL files (Kafka topics:
``joinlib.adapters.progressive_kafka``), validated here, and their interleaved replay.

The replay picks the next row's relation at random (seeded) with probability proportional
to the rows each relation has left, so both end at about the same time - two remote
sites sending at once.  The simulator's network then spaces the rows out in virtual time.
"""
from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Optional, Protocol

import orjson

from joinlib.errors import DataError
from joinlib.progressive.model import Id, Key
from joinlib.progressive.sim import Arrival, end_of

INT64 = (-(1 << 63), (1 << 63) - 1)


class RawSource(Protocol):
    """A finite relation as decoded JSON values, each with where it came from (file:line)."""

    name: str

    def count(self) -> int: ...

    def objects(self) -> Iterator[tuple[Any, str]]: ...


class Source(Protocol):
    """A finite relation: its name (file stem, topic), a row count and the (id, key) rows."""

    name: str

    def count(self) -> int: ...

    def rows(self) -> Iterator[tuple[Id, Key]]: ...


class RowParser:
    """Validates rows and pins the join attribute's type (int or str) across both relations."""

    def __init__(self, attr: str) -> None:
        self.attr = attr
        self.key_type: Optional[type] = None
        self.first_where = ""

    def parse(self, obj: Any, where: str) -> tuple[Id, Key]:
        if not isinstance(obj, dict):
            raise DataError(f"{where}: expected a JSON object, got {type(obj).__name__}")
        if "id" not in obj:
            raise DataError(f"{where}: no \"id\" (every row needs an id and the join attribute {self.attr!r})")
        if self.attr not in obj:
            raise DataError(f"{where}: no attribute {self.attr!r} (--on {self.attr}; the row has "
                            f"{', '.join(sorted(map(str, obj))[:8])})")
        tid, key = obj["id"], obj[self.attr]
        _check_scalar(tid, where, '"id"')
        _check_scalar(key, where, repr(self.attr))
        if self.key_type is None:
            self.key_type, self.first_where = type(key), where
        elif type(key) is not self.key_type:
            raise DataError(f"{where}: {self.attr!r} is a {type(key).__name__}, but a "
                            f"{self.key_type.__name__} at {self.first_where}: use one type for the join attribute")
        return tid, key


def _check_scalar(value: Any, where: str, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise DataError(f"{where}: {what} must be an integer or a string, got {orjson.dumps(value).decode()[:40]}")
    if isinstance(value, int) and not INT64[0] <= value <= INT64[1]:
        raise DataError(f"{where}: {what} {value} does not fit in 64 bits")


class ParsedSource:
    """A raw source whose values go through a :class:`RowParser`."""

    def __init__(self, raw: RawSource, parser: RowParser) -> None:
        self.raw, self.parser = raw, parser
        self.name = raw.name

    def count(self) -> int:
        return self.raw.count()

    def rows(self) -> Iterator[tuple[Id, Key]]:
        parse = self.parser.parse
        for obj, where in self.raw.objects():
            yield parse(obj, where)


class JsonlFile:
    """``path`` as a raw relation named after its stem; blank lines are skipped."""

    def __init__(self, path: Path) -> None:
        if not path.is_file():
            raise DataError(f"{path}: no such file (give a JSONL file, or kafka:TOPIC)")
        self.path = path
        self.name = path.stem

    def count(self) -> int:
        with open(self.path, "rb") as fh:
            return sum(1 for line in fh if line.strip())

    def objects(self) -> Iterator[tuple[Any, str]]:
        with open(self.path, "rb") as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                where = f"{self.path}:{lineno}"
                try:
                    yield orjson.loads(line), where
                except orjson.JSONDecodeError as e:
                    raise DataError(f"{where}: not JSON ({e})") from None


def interleave(sources: Sequence[Source], seed: int = 1) -> Iterator[Arrival]:
    """Rows of two sources in a seeded random order weighted by the rows left; each
    relation's end-of-stream right after its last row."""
    rng = random.Random(seed)
    left = [max(0, s.count()) for s in sources]
    its = [s.rows() for s in sources]
    peeked: list[Optional[tuple[Id, Key]]] = [next(it, None) for it in its]
    for rel in (0, 1):
        if peeked[rel] is None:
            yield end_of(rel)
    while peeked[0] is not None or peeked[1] is not None:
        live = [rel for rel in (0, 1) if peeked[rel] is not None]
        rel = live[0] if len(live) == 1 else rng.choices(live, weights=[max(left[r], 1) for r in live])[0]
        row = peeked[rel]
        assert row is not None
        yield Arrival(rel, row[0], row[1])
        left[rel] -= 1
        peeked[rel] = next(its[rel], None)
        if peeked[rel] is None:
            yield end_of(rel)
