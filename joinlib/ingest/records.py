"""One record of a user's topic -> an event (time, id, join key, payload) or the reason it is malformed.

Pure functions of the record's bytes (and, for Avro, of the writer schema its id names), so a record
is malformed or not whatever happened before it: a replay after a restart classifies it the same way.

Event times become integer milliseconds since the Unix epoch (``ms`` as is; ``s`` rounded to the ms;
``us`` and ``ns`` truncated; ``iso`` ISO-8601 strings, UTC when no offset is given), then are taken
relative to the query's *origin* (``Event.ts = time - origin``): epoch 0 of the runtime starts at the
origin.  Ids are the ``id`` field (an integer) or, without one, ``partition * 2**48 + offset``.
"""
from __future__ import annotations

import io
import math
from datetime import datetime, timedelta, timezone
from operator import itemgetter
from typing import Any, Callable, NamedTuple, Optional, Union

import fastavro
import orjson

from joinlib.filter_spec import compile_filter
from joinlib.kernels import kernel
from joinlib.model import Stream, Value
from joinlib.protocol.values import encode_values
from joinlib.source_spec import SourceSpec

#: dead-letter reasons (``dlq.reason`` header of docs/live.md)
BAD_JSON, BAD_AVRO, NO_VALUE = "bad_json", "bad_avro", "no_value"
MISSING_FIELD, WRONG_TYPE = "missing_field", "wrong_type"
LATE, DUPLICATE_ID, TOO_FAR_AHEAD = "late", "duplicate_id", "too_far_ahead"
REASONS = (BAD_JSON, BAD_AVRO, NO_VALUE, MISSING_FIELD, WRONG_TYPE, LATE, DUPLICATE_ID, TOO_FAR_AHEAD)

ID_PARTITION_SHIFT = 48
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MS = timedelta(milliseconds=1)
_SCALARS = (str, int, float, bool, type(None))
_SCALAR_TYPES = frozenset(_SCALARS)
_PLAIN = frozenset({str, float, bool, type(None)})   # scalars with nothing to check (an int's range is)
_MISSING = object()

#: the flat-JSON kernel (_jsonc.c), or None when it is not built: then every record takes the Python path
_c: Any = kernel("joinlib.ingest._jsonc")

#: a parsed Avro writer schema for a schema id (None: unknown id); may raise for a registry outage
SchemaLookup = Callable[[int], Any]


class Bad(NamedTuple):
    """Why a record cannot take part: one of :data:`REASONS` and a sentence for people."""

    reason: str
    detail: str


class Event(NamedTuple):
    """A well-formed record: ``ts`` in ms relative to the query's origin."""

    ts: int
    id: int
    key: tuple[Value, ...]
    rest: bytes


class Filtered(NamedTuple):
    """A well-formed record the stream's filter (``where``) drops: not the stream's, and not a dead letter."""


FILTERED = Filtered()


class _Malformed(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.bad = Bad(reason, detail)


def derived_id(partition: int, offset: int) -> int:
    return (partition << ID_PARTITION_SHIFT) + offset


def _getter(path: str) -> Callable[[dict[str, Any]], Any]:
    parts = path.split(".")
    if len(parts) == 1:
        return lambda row: row.get(path, _MISSING)

    def get(row: dict[str, Any]) -> Any:
        cur: Any = row
        for p in parts:
            if not isinstance(cur, dict):
                return _MISSING
            cur = cur.get(p, _MISSING)
            if cur is _MISSING:
                return _MISSING
        return cur
    return get


def to_ms(value: Any, unit: str, field: str) -> int:
    """An event-time value in ``unit`` -> ms since the Unix epoch; raises :class:`_Malformed`."""
    if isinstance(value, datetime):  # Avro timestamp-millis / -micros logical types
        dt = value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)
        return (dt - _EPOCH) // _MS
    if unit == "iso":
        if not isinstance(value, str):
            raise _Malformed(WRONG_TYPE, f"'{field}' must be an ISO-8601 string, not {_short(value)}")
        try:
            return to_ms(datetime.fromisoformat(value), "ms", field)
        except ValueError:
            raise _Malformed(WRONG_TYPE, f"'{field}' is not an ISO-8601 date-time: {_short(value)}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Malformed(WRONG_TYPE, f"'{field}' must be a number ({unit}), not {_short(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise _Malformed(WRONG_TYPE, f"'{field}' must be a finite number, not {value}")
    ms = _number_ms(value, unit)
    if not _LONG_MIN <= ms <= _LONG_MAX:
        raise _Malformed(WRONG_TYPE, f"'{field}' is out of range: {_short(value)}")
    return ms


def _number_ms(value: Union[int, float], unit: str) -> int:
    if unit == "ms":
        return math.floor(value)
    if unit == "s":
        return value * 1000 if isinstance(value, int) else round(value * 1000)
    return math.floor(value) // (1000 if unit == "us" else 1_000_000)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _getters(names: list[str]) -> Callable[[dict[str, Any]], Any]:
    """The values of ``names`` in a row, as a tuple (KeyError when one is missing)."""
    if len(names) == 1:
        name = names[0]
        return lambda row: (row[name],)
    return itemgetter(*names)


class _Layout(NamedTuple):
    """How :meth:`Decoder._fast` reads rows with one set of fields: ``width`` their number (None: any, the
    source names the attributes it keeps), ``get`` the values of the event time, the id (``has_id``), the
    ``keys`` join attributes and the payload's attributes in order; ``names``: the payload's names when it
    carries them (a source keeping every field, for rows)."""

    width: Optional[int]
    get: Callable[[dict[str, Any]], Any]
    has_id: bool
    keys: int
    names: Optional[tuple[str, ...]]
    fields: tuple[str, ...]   # what ``get`` reads, in order (the C kernel's layout)


class Decoder:
    """Decodes the records of one stream's source (see the module docstring).

    ``origin_ms``: event time of the runtime's epoch 0; ``schemas``: for Avro sources, the writer
    schema of a schema id (the adapter asks a registry); without it, the spec's inline schema.
    ``named``: a source carrying every field (``attributes`` None) encodes ``rest`` as name, value pairs, so
    that a result site writing rows can name them (:func:`joinlib.rows.names_every_field`)."""

    def __init__(self, stream: Stream, spec: SourceSpec, origin_ms: int = 0,
                 schemas: Optional[SchemaLookup] = None, named: bool = False) -> None:
        if not spec.live:
            raise ValueError(f"stream {stream.name}: a {spec.format} source is not decoded per record")
        self.stream, self.spec, self.origin = stream, spec, origin_ms
        assert spec.time_field is not None
        self.time_field = spec.time_field
        self._time = _getter(spec.time_field)
        self._id = None if spec.id_field is None else _getter(spec.id_field)
        self._keys = [(a, _getter(a)) for a in stream.join_attrs]
        self._rest = None if spec.attributes is None else [(a, _getter(a)) for a in sorted(spec.attributes)]
        used = {spec.time_field.split(".")[0], *stream.join_attrs}
        if spec.id_field is not None:
            used.add(spec.id_field.split(".")[0])
        self._skip = used
        self._named = named and spec.attributes is None
        self._fixed = None if spec.schema is None else fastavro.parse_schema(orjson.loads(spec.schema))
        self._schemas = schemas
        self._keep = compile_filter(stream.where)
        # the fast path (_Layout): every field a top-level name, event times in ms
        fields = [spec.time_field, *([spec.id_field] if spec.id_field else []), *stream.join_attrs,
                  *(spec.attributes or ())]
        self._can_fast = spec.time_unit == "ms" and not any("." in f for f in fields)
        self._lay: Optional[_Layout] = None
        # the layout for _jsonc.decode_flat (None: no kernel, not JSON, a filter to test on the row, no layout yet)
        self._cspec: Optional[tuple[Callable[..., Optional[Event]], tuple[Any, ...]]] = None

    @property
    def may_raise(self) -> bool:
        """Whether :meth:`decode` may raise rather than answer: an Avro source whose writer schemas come from a
        registry (an outage, :class:`joinlib.node.sources.RegistrySchemas`)."""
        return self._schemas is not None

    def decode(self, value: Optional[bytes], partition: int, offset: int) -> Union[Event, Bad, Filtered]:
        """The record's event, why it is malformed, or :data:`FILTERED` when the stream's filter drops it (tested
        on the record as read, before its fields are: a dropped record is never a dead letter)."""
        if value is None:
            return Bad(NO_VALUE, "the record has no value (a tombstone)")
        if self._cspec is not None and type(value) is bytes:   # a flat record in one C pass, else None
            ev = self._cspec[0](value, self._cspec[1], partition, offset)
            if ev is not None:
                return ev
        try:
            row = self._json(value) if self.spec.format == "json" else self._avro(value)
            if self._keep is not None and not self._keep(row):
                return FILTERED
            return self._event(row, partition, offset)
        except _Malformed as e:
            return e.bad

    def decode_run(self, partition: int, offsets: list[int], values: list[Optional[bytes]]) -> list[Any]:
        """:meth:`decode` of each record of ``partition`` at ``offsets`` with ``values``, in one Python call: the C
        kernel is called straight for the flat records it takes.  Where :attr:`may_raise`, a raise leaves the
        records before it decoded but not returned."""
        out: list[Any] = []
        add, decode = out.append, self.decode
        for off, value in zip(offsets, values, strict=True):
            c = self._cspec   # read again each record: a record of other fields makes a new layout
            if c is not None and type(value) is bytes:
                ev = c[0](value, c[1], partition, off)
                if ev is not None:
                    add(ev)
                    continue
            add(decode(value, partition, off))
        return out

    # ------------------------------------------------------------------ formats
    @staticmethod
    def _json(value: bytes) -> dict[str, Any]:
        try:
            row = orjson.loads(value)
        except orjson.JSONDecodeError as e:
            raise _Malformed(BAD_JSON, f"not valid JSON: {e}") from None
        if type(row) is not dict:
            raise _Malformed(WRONG_TYPE, f"expected a JSON object, got {type(row).__name__}")
        return row

    def _avro(self, value: bytes) -> dict[str, Any]:
        if len(value) < 5 or value[0] != 0:
            raise _Malformed(BAD_AVRO, "not in the Confluent wire format (a zero byte, a 4-byte schema id, "
                                       "the Avro body)")
        schema_id = int.from_bytes(value[1:5], "big")
        schema = self._schemas(schema_id) if self._schemas is not None else self._fixed
        if schema is None:
            raise _Malformed(BAD_AVRO, f"unknown schema id {schema_id}")
        try:
            row = fastavro.schemaless_reader(io.BytesIO(value[5:]), schema, None)
        except Exception as e:  # truncated or garbled bodies raise several kinds
            raise _Malformed(BAD_AVRO, f"cannot decode the Avro body with schema {schema_id}: "
                                       f"{type(e).__name__}: {e}") from None
        if not isinstance(row, dict):
            raise _Malformed(WRONG_TYPE, f"expected an Avro record, got {type(row).__name__}")
        return row

    # ------------------------------------------------------------------ fields
    def _event(self, row: dict[str, Any], partition: int, offset: int) -> Event:
        """The row's event: by the layout of the last row when this one has the same fields and plain values
        (:meth:`_fast`), else field by field (:meth:`_slow`, which names what is wrong)."""
        lay = self._lay
        if lay is not None and (lay.width is None or len(row) == lay.width):
            try:
                vals = lay.get(row)
            except KeyError:   # other fields: the slow path, then a layout of this row's fields
                pass
            else:
                ev = self._fast(lay, vals, partition, offset)
                if ev is not None:
                    return ev
        ev = self._slow(row, partition, offset)
        if self._can_fast:
            self._lay = self._layout(row)
            self._cspec = self._c_layout(self._lay)
        return ev

    def _c_layout(self, lay: "_Layout") -> Optional[tuple[Callable[..., Optional[Event]], tuple[Any, ...]]]:
        """The kernel's decode_flat and its spec for ``lay`` (None: no kernel, not JSON, or a filter to test on the
        row: the kernel builds no row)."""
        if _c is None or self.spec.format != "json" or self._keep is not None or not (
                _LONG_MIN <= self.origin <= _LONG_MAX):
            return None
        spec = (tuple(f.encode() for f in lay.fields), lay.has_id, lay.keys, -1 if lay.width is None else lay.width,
                lay.names is not None, self.origin, Event)
        return _c.decode_flat, spec

    def _layout(self, row: dict[str, Any]) -> "_Layout":
        spec = self.spec
        head = [self.time_field, *([spec.id_field] if spec.id_field else []), *self.stream.join_attrs]
        if self._rest is not None:
            fields = [*head, *(a for a, _ in self._rest)]
            return _Layout(None, _getters(fields), spec.id_field is not None, len(self.stream.join_attrs), None,
                           tuple(fields))
        rest = [a for a in sorted(row) if a not in self._skip]
        return _Layout(len(row), _getters(head + rest), spec.id_field is not None, len(self.stream.join_attrs),
                       tuple(rest) if self._named else None, (*head, *rest))

    def _fast(self, lay: "_Layout", vals: Any, partition: int, offset: int) -> Optional[Event]:
        """The event of ``vals`` (the layout's fields), or None when a value needs the slow path's checks: an
        event time or id that is not a 64-bit int, a value that is not a plain scalar or an int out of range."""
        t = vals[0]
        if type(t) is not int or not _LONG_MIN <= t <= _LONG_MAX:
            return None
        if lay.has_id:
            id_, i = vals[1], 2
            if type(id_) is not int or not _LONG_MIN <= id_ <= _LONG_MAX:
                return None
        else:
            id_, i = derived_id(partition, offset), 1
        rest = vals[i:]
        kinds = set(map(type, rest))
        if not _PLAIN.issuperset(kinds):
            if not _SCALAR_TYPES.issuperset(kinds) or not all(
                    _LONG_MIN <= v <= _LONG_MAX for v in rest if type(v) is int):
                return None
        k = i + lay.keys
        if lay.names is None:
            payload = list(vals[k:])
        else:
            payload = [x for pair in zip(lay.names, vals[k:], strict=True) for x in pair]
        return Event(t - self.origin, id_, tuple(vals[i:k]), encode_values(payload))

    def _slow(self, row: dict[str, Any], partition: int, offset: int) -> Event:
        t = self._time(row)
        if t is _MISSING or t is None:
            raise _Malformed(MISSING_FIELD, f"the event-time field '{self.time_field}' is missing"
                             + (" (null)" if t is None else ""))
        ts = to_ms(t, self.spec.time_unit, self.time_field) - self.origin
        if self._id is None:
            id_ = derived_id(partition, offset)
        else:
            id_ = self._id(row)
            if id_ is _MISSING:
                raise _Malformed(MISSING_FIELD, f"the id field '{self.spec.id_field}' is missing")
            if type(id_) is not int or not _LONG_MIN <= id_ <= _LONG_MAX:
                raise _Malformed(WRONG_TYPE, f"the id field '{self.spec.id_field}' must be a 64-bit integer, "
                                             f"not {_short(id_)}")
        key = tuple(self._scalar(row, a, get, "join attribute") for a, get in self._keys)
        if self._rest is None and self._named:
            vals = [x for a in sorted(row) if a not in self._skip for x in (a, self._check(a, row[a]))]
        elif self._rest is None:
            vals = [self._check(a, row[a]) for a in sorted(row) if a not in self._skip]
        else:
            vals = [self._scalar(row, a, get, "attribute") for a, get in self._rest]
        return Event(ts, id_, key, encode_values(vals))

    @staticmethod
    def _scalar(row: dict[str, Any], name: str, get: Callable[[dict[str, Any]], Any], what: str) -> Any:
        v = get(row)
        if v is _MISSING:
            raise _Malformed(MISSING_FIELD, f"the {what} '{name}' is missing")
        return Decoder._check(name, v)

    @staticmethod
    def _check(name: str, v: Any) -> Any:
        if not isinstance(v, _SCALARS):
            raise _Malformed(WRONG_TYPE, f"'{name}' must be a string, number, boolean or null, not {_short(v)}")
        if type(v) is int and not _LONG_MIN <= v <= _LONG_MAX:
            raise _Malformed(WRONG_TYPE, f"'{name}' does not fit in 64 bits: {_short(v)}")
        return v
