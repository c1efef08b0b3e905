"""A testing source: the streams of a query, built in memory from rows a test writes.

Why not data files: a test that checks a plan on five hand-picked tuples should not need a directory. The rows
follow the data files' conventions (:mod:`joinlib.data.files`), so the tuples are those a node would load:
``ts`` in ms (an integer, not negative), ``id`` unique within its stream, ``key`` the values of the stream's join
attributes in their declared order, ``rest`` the other attributes Avro-encoded in sorted name order, and the
tuples in (ts, id) order with ``seq`` their rank.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from joinlib.errors import DataError
from joinlib.model import Query, Stream, Tup
from joinlib.protocol.values import encode_values

Row = Mapping[str, Any]  # "ts", optional "id", the join attributes and any others (JSON scalars)


@dataclass(frozen=True)
class TestingSource:
    """In-memory streams of ``query``: per stream name, its rows (a stream left out has no tuples).

    A row without ``id`` takes its index in its stream's list. Rows may come in any order. A bad row (no
    ``ts``, a negative one, a missing join attribute, a repeated id, a stream the query lacks) raises
    :class:`~joinlib.errors.DataError` when the source is built.

    >>> from joinlib.query import parse_query
    >>> q = parse_query({"name": "q", "join": ["A.k = B.k"], "streams": {
    ...     "A": {"site": "n1", "window": "100ms"}, "B": {"site": "n2", "window": "3 tuples"}}})
    >>> src = TestingSource(q, {"A": [{"ts": 5, "k": "x", "note": "first"}], "B": [{"id": 7, "ts": 9, "k": "x"}]})
    >>> [(t.id, t.ts, t.key) for t in src.streams()["B"]]
    [(7, 9, ('x',))]
    """

    __test__ = False  # not a pytest test class, whatever its name

    query: Query
    rows: Mapping[str, Sequence[Row]]
    _tuples: dict[str, tuple[Tup, ...]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        unknown = sorted(set(self.rows) - set(self.query.names))
        if unknown:
            raise DataError(f"query {self.query.name} has no stream {', '.join(unknown)} "
                            f"(its streams: {', '.join(self.query.names)})")
        tuples = {s.name: _tuples(s, self.rows.get(s.name, ())) for s in self.query.streams}
        object.__setattr__(self, "_tuples", tuples)  # frozen: set once, here

    def streams(self) -> dict[str, list[Tup]]:
        """Every stream's tuples in (ts, id) order: what :func:`~joinlib.sim.engine.run_embedded` and
        :func:`~joinlib.reference.reference_join` take (fresh lists, the same tuples)."""
        return {name: list(tups) for name, tups in self._tuples.items()}


def _tuples(stream: Stream, rows: Sequence[Row]) -> tuple[Tup, ...]:
    """One stream's rows as tuples, checked, in (ts, id) order with ``seq`` their rank."""
    loose: list[tuple[int, int, tuple[Any, ...], bytes]] = []
    seen: dict[int, int] = {}
    for i, row in enumerate(rows):
        id_, ts = row.get("id", i), row.get("ts")
        where = f"stream {stream.name}, row {i}"
        if type(id_) is not int or type(ts) is not int or ts < 0:
            raise DataError(f"{where}: 'id' and 'ts' must be integers, ts not negative (got id {id_!r}, ts {ts!r})")
        if seen.setdefault(id_, i) != i:
            raise DataError(f"{where}: id {id_} repeats the id of row {seen[id_]}; ids must be unique in a stream")
        missing = [a for a in stream.join_attrs if a not in row]
        if missing:
            raise DataError(f"{where}: missing join attribute {', '.join(map(repr, missing))}")
        others = sorted(a for a in row if a not in ("id", "ts") and a not in stream.join_attrs)
        loose.append((ts, id_, tuple(row[a] for a in stream.join_attrs), encode_values([row[a] for a in others])))
    loose.sort(key=lambda r: (r[0], r[1]))
    return tuple(Tup(stream.pos, id_, ts, seq, key, rest) for seq, (ts, id_, key, rest) in enumerate(loose))
