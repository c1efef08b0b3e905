"""Stream data files: one ``<stream>.jsonl`` per stream, rows ``{"id", "ts", <attributes>}``.

Loading turns rows into :class:`~joinlib.model.Tup` objects: ``key`` holds the
values of the stream's join attributes, ``rest`` the Avro-encoded remaining
attributes in sorted attribute-name order (see :mod:`joinlib.protocol.values`).  Wide rows
(the paper's 250 attributes) make loading CPU-bound, so the per-row path is kept
to C-level calls: orjson, ``operator.itemgetter`` on a cached per-layout getter and
a string-only Avro fast path that produces the same bytes as
:func:`joinlib.protocol.values.encode_values` about fifty times faster.

Order contract: rows appear in non-decreasing ``ts``; rows with equal ``ts`` may be
in any order and are ordered by ``id`` on loading, so ``seq`` is the rank in
(ts, id) order.  Every violation is a :class:`~joinlib.errors.DataError` naming
``file:line``.

Filters: a stream's ``where`` (:mod:`joinlib.filter_spec`) is applied here, where its records enter, so a row it
drops never ships and is not ranked; :func:`iter_rows` and :func:`load_rows` give the rows as written, unfiltered.
"""
from __future__ import annotations

from operator import attrgetter, itemgetter
from pathlib import Path
from typing import IO, Any, Callable, Iterable, Iterator, NoReturn, Optional, Union

import orjson

from joinlib.errors import DataError
from joinlib.filter_spec import compile_filter
from joinlib.model import Query, Stream, Tup
from joinlib.protocol.avro import encode_tuple
from joinlib.protocol.values import encode_values as encode_rest

PathLike = Union[str, Path]
Row = dict[str, Any]  # one JSON object of a data file: "id", "ts" and the attributes (JSON scalars)
RestNames = dict[int, tuple[str, ...]]  # a tuple's id -> the attribute names of its rest, in order
RESERVED = ("id", "ts")
_UNHASHABLE = frozenset({list, dict})  # JSON values that cannot be join-attribute values



def stream_path(data_dir: PathLike, stream: str) -> Path:
    return Path(data_dir) / f"{stream}.jsonl"


# --------------------------------------------------------------------------- reading

def _open(path: Path, what: str) -> IO[bytes]:
    try:
        return open(path, "rb")
    except FileNotFoundError:
        raise DataError(f"{path}: {what} not found; expected one <stream>.jsonl file per stream") from None
    except OSError as e:
        raise DataError(f"{path}: cannot read {what} ({e.strerror or e})") from None


def _parse_line(path: Path, lineno: int, line: bytes) -> Optional[Row]:
    """The row of one line, or None for a blank line."""
    try:
        row = orjson.loads(line)
    except orjson.JSONDecodeError as e:
        if not line.strip():
            return None
        raise DataError(f"{path}:{lineno}: invalid JSON ({e}); each line must be one JSON object") from None
    if type(row) is not dict:
        raise DataError(f"{path}:{lineno}: expected a JSON object {{\"id\": .., \"ts\": .., ...}}, "
                        f"got {type(row).__name__}")
    out: Row = row
    return out


def _check_id_ts(path: Path, lineno: int, row: Row) -> NoReturn:
    """Slow path, only reached when the fast type test failed: say exactly what is wrong."""
    for col in RESERVED:
        if col not in row:
            raise DataError(f"{path}:{lineno}: missing '{col}'; every row needs an integer id and ts (ms)")
        v = row[col]
        if type(v) is not int:
            raise DataError(f"{path}:{lineno}: '{col}' must be an integer, not {v!r}")
    raise DataError(f"{path}:{lineno}: 'ts' must not be negative, not {row['ts']}")


class _Order:
    """Tracks the ts order and id uniqueness of one file; reports violations by line."""

    __slots__ = ("path", "prev_ts", "prev_id", "ids", "needs_sort")

    def __init__(self, path: Path) -> None:
        self.path, self.prev_ts, self.prev_id = path, -1, -1
        self.ids: dict[int, int] = {}
        self.needs_sort = False

    def check(self, lineno: int, id_: int, ts: int) -> None:
        if ts <= self.prev_ts:
            if ts < self.prev_ts:
                raise DataError(f"{self.path}:{lineno}: ts {ts} is smaller than the previous row's ts "
                                f"{self.prev_ts}; rows must be in timestamp order (sort the file by ts)")
            if id_ < self.prev_id:
                self.needs_sort = True
        if self.ids.setdefault(id_, lineno) != lineno:
            raise DataError(f"{self.path}:{lineno}: id {id_} repeats the id of line {self.ids[id_]}; "
                            "ids must be unique within a stream")
        self.prev_ts, self.prev_id = ts, id_


def iter_rows(path: PathLike) -> Iterator[Row]:
    """The rows of one file in (ts, id) order, validated, reading line by line.

    Only rows sharing one ts are buffered (to order them by id), so this suits files
    that do not fit in memory; the id set is the only state growing with the file.
    """
    path = Path(path)
    order = _Order(path)
    group: list[Row] = []
    with _open(path, "data file") as f:
        for lineno, line in enumerate(f, 1):
            row = _parse_line(path, lineno, line)
            if row is None:
                continue
            id_, ts = row.get("id"), row.get("ts")
            if type(id_) is not int or type(ts) is not int or ts < 0:
                _check_id_ts(path, lineno, row)
            if group and ts != order.prev_ts:
                yield from _flush(group)
            order.check(lineno, id_, ts)
            group.append(row)
    yield from _flush(group)


def _flush(group: list[Row]) -> list[Row]:
    out = sorted(group, key=itemgetter("id")) if len(group) > 1 else list(group)
    group.clear()
    return out


def load_rows(query: Query, data_dir: PathLike) -> dict[str, list[Row]]:
    """Raw validated rows of every stream, in (ts, id) order (for tests and tools)."""
    return {s.name: list(iter_rows(stream_path(data_dir, s.name))) for s in query.streams}


def load_streams(query: Query, data_dir: PathLike,
                 rest_names: Optional[dict[str, RestNames]] = None) -> dict[str, list[Tup]]:
    """Every stream's tuples, in (ts, id) order with ``seq`` = rank among the rows its filter keeps;
    ``rest_names``: filled per stream as :func:`load_stream` says."""
    return {s.name: load_stream(s, stream_path(data_dir, s.name),
                                None if rest_names is None else rest_names.setdefault(s.name, {}))
            for s in query.streams}


def load_stream(stream: Stream, path: PathLike,  # noqa: C901 - the hot loop, one function: no call per row
                rest_names: Optional[RestNames] = None) -> list[Tup]:
    """One stream's file as tuples; the hot loop of the loader.

    Rows are matched to a cached :class:`_Layout` by their number of keys; the
    layout's getters raise KeyError for a row with other keys, which then gets its own
    layout.  So a row costs one orjson parse, two itemgetter calls and one encoding.
    A row the stream's filter (``stream.where``) drops is validated like any other but becomes no tuple: it gets no
    ``seq``, so ranks (and tuple windows) count the kept rows only.  ``rest_names``: when given, each tuple's id ->
    the names of the attributes its ``rest`` holds, in their order (what a result row decodes ``rest`` with,
    :mod:`joinlib.rows`; rows of one layout share one tuple of names).
    """
    path = Path(path)
    order = _Order(path)
    layouts: dict[frozenset[str], _Layout] = {}
    cur = _Layout.EMPTY
    out: list[Tup] = []
    pos, loads, append = stream.pos, orjson.loads, out.append
    keep = compile_filter(stream.where)
    with _open(path, f"data file of stream {stream.name}") as f:
        for lineno, line in enumerate(f, 1):
            try:
                row = loads(line)
            except orjson.JSONDecodeError:
                row = None
            # not an object: _parse_line raises, unless the line is blank
            if type(row) is not dict and (row := _parse_line(path, lineno, line)) is None:
                continue
            try:
                if len(row) != cur.width:
                    raise KeyError
                id_, ts, key, vals = row["id"], row["ts"], cur.key(row), cur.rest(row)
            except KeyError:  # a new key set: id, ts and every join attribute are checked here
                cur = layouts.get(frozenset(row)) or layouts.setdefault(
                    frozenset(row), _Layout(stream, path, lineno, row))
                id_, ts, key, vals = row["id"], row["ts"], cur.key(row), cur.rest(row)
            if type(id_) is not int or type(ts) is not int or ts < 0:
                _check_id_ts(path, lineno, row)
            order.check(lineno, id_, ts)
            if keep is not None and not keep(row):
                continue
            if not _UNHASHABLE.isdisjoint(map(type, key)):
                _not_scalar(path, lineno, key)
            try:
                rest = encode_rest(vals)
            except (ValueError, TypeError, OverflowError) as e:
                raise DataError(f"{path}:{lineno}: cannot encode the attributes ({e}); values must be "
                                "strings, numbers, booleans or null") from None
            append(Tup(pos, id_, ts, len(out), key, rest))
            if rest_names is not None:
                rest_names[id_] = cur.names
    if order.needs_sort:
        _sort_by_ts_id(out)
    _encode_at_source(path, out)
    return out


def _not_scalar(path: Path, lineno: int, key: tuple[Any, ...]) -> NoReturn:
    v = next(v for v in key if type(v) in _UNHASHABLE)
    raise DataError(f"{path}:{lineno}: join attribute value {v!r} must be a scalar")


def _sort_by_ts_id(tups: list[Tup]) -> None:
    """Order tuples by (ts, id) and renumber their ``seq``."""
    tups.sort(key=attrgetter("ts", "id"))
    for i, t in enumerate(tups):
        t.seq = i


def _encode_at_source(path: Path, tups: list[Tup]) -> None:
    """Encode every tuple once, here at its source, as the source service does for Kafka: the
    engine then ships these bytes as they are (:func:`joinlib.protocol.avro.encode_tuple`)."""
    for t in tups:
        try:
            encode_tuple(t)
        except (TypeError, ValueError) as e:
            raise DataError(f"{path}: tuple id {t.id}: cannot encode its join attributes ({e})") from None


class _Layout:
    """Getters for (join key, payload values in sorted name order) of rows with one key set."""

    __slots__ = ("width", "key", "rest", "names")
    EMPTY: "_Layout"

    def __init__(self, stream: Stream, path: Path, lineno: int, row: Row) -> None:
        for col in RESERVED:
            if col not in row:
                raise DataError(f"{path}:{lineno}: missing '{col}'; every row needs an integer id and ts (ms)")
        missing = [a for a in stream.join_attrs if a not in row]
        if missing:
            raise DataError(f"{path}:{lineno}: missing join attribute {', '.join(map(repr, missing))} of "
                            f"stream {stream.name} (its join attributes: {', '.join(stream.join_attrs)})")
        skip = set(RESERVED) | set(stream.join_attrs)
        self.width = len(row)
        self.key = _tuple_getter(stream.join_attrs)
        self.names = tuple(sorted(a for a in row if a not in skip))
        self.rest = _tuple_getter(self.names)


_Layout.EMPTY = _Layout.__new__(_Layout)
_Layout.EMPTY.width = -1


def _tuple_getter(names: Iterable[str]) -> Callable[[Row], tuple[Any, ...]]:
    """itemgetter that always returns a tuple (itemgetter of one name returns the bare value)."""
    cols = tuple(names)
    if len(cols) >= 2:
        return itemgetter(*cols)
    if len(cols) == 1:
        (name,) = cols
        return lambda row: (row[name],)
    return lambda row: ()


# --------------------------------------------------------------------------- writing

def write_stream(path: PathLike, rows: Iterable[Row]) -> int:
    """Write rows as JSONL (orjson), streaming; returns the number of rows written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    dumps, opt, n = orjson.dumps, orjson.OPT_APPEND_NEWLINE, 0
    buf: list[bytes] = []
    with open(path, "wb") as f:
        for row in rows:
            buf.append(dumps(row, option=opt))
            n += 1
            if len(buf) >= 1024:
                f.write(b"".join(buf))
                buf.clear()
        f.write(b"".join(buf))
    return n
