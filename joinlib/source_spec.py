"""Where a stream's records come from: the ``source`` of a stream in the query file.

```yaml
streams:
  S1:
    site: r1
    window: 3s
    source: {topic: events.r1, format: json, time: {field: ts, unit: ms}, id: id}
```

* ``topic`` (required): the Kafka topic the site's events are written to (any number of partitions);
* ``format``: ``json`` (default: one JSON object per record), ``avro`` (Confluent wire format: a zero
  byte, a 4-byte schema id, the Avro body) or ``sourcebatch`` (joinlib's own replayer messages);
* ``time``: the event-time field, ``{field: ts, unit: ms}`` or just ``ts`` (unit ``ms``); units ``ms``,
  ``s``, ``us``, ``ns`` (numbers) and ``iso`` (ISO-8601 strings); nested fields as ``a.b``;
* ``id``: the field holding each record's id (an integer); absent or null: ids derived from the
  partition and offset (``partition * 2**48 + offset``);
* ``attributes``: fields carried with each tuple besides the join attributes (a list, or ``all``);
  default: the fields the query's SELECT list names of this stream (``all`` for ``S1.*``), none without a SELECT
  list (``output.select`` absent or ``*``): only the join attributes (and the id and time) travel;
* ``schema`` (avro): the writer schema, a file (relative to the query file) or inline; ``registry``
  (avro): a Confluent schema registry URL, asked for each schema id; one of the two is needed, and
  the registry wins where it is reachable;
* ``start``: ``latest`` (default: records appended after the query is submitted) or ``earliest``.

Parsing is part of :mod:`joinlib.query` (same error style: file, key path, what to do); this module
only knows the ``source`` mapping.  A schema file is read once, when the query file is loaded, and
kept inline, so a plan message carries everything a node needs.
"""
from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, TypeGuard

import fastavro

from joinlib.errors import QueryError

FORMATS = ("json", "avro", "sourcebatch")
LIVE_FORMATS = ("json", "avro")
TIME_UNITS = ("ms", "s", "us", "ns", "iso")
STARTS = ("latest", "earliest")
SOURCE_KEYS = ("topic", "format", "time", "id", "attributes", "schema", "registry", "start")
TIME_KEYS = ("field", "unit")
_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}\Z")
_FIELD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")
_HINT = ("e.g. {topic: events.r1, format: json, time: {field: ts, unit: ms}, id: id}")

Err = Callable[[str, str], QueryError]


@dataclass(frozen=True)
class SourceSpec:
    """A stream's source (see the module docstring).  ``schema`` is the Avro writer schema as
    canonical JSON text; ``attributes`` None means every field (``all``)."""

    topic: str
    format: str = "json"
    time_field: Optional[str] = None
    time_unit: str = "ms"
    id_field: Optional[str] = None
    attributes: Optional[tuple[str, ...]] = ()
    schema: Optional[str] = None
    registry: Optional[str] = None
    start: str = "latest"

    @property
    def live(self) -> bool:
        """Per-event records (json, avro) rather than the replayer's SourceBatch messages."""
        return self.format in LIVE_FORMATS


def is_topic(name: Any) -> TypeGuard[str]:
    """A legal Kafka topic name (sources and sinks alike)."""
    return isinstance(name, str) and bool(_TOPIC.match(name))


def _suggest(word: Any, choices: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(str(word).lower(), list(choices), n=1)
    return f"did you mean '{close[0]}'? " if close else ""


def _check_keys(err: Err, where: str, data: dict[str, Any], allowed: tuple[str, ...]) -> None:
    for key in data:
        if key not in allowed:
            raise err(f"{where}.{key}", f"unknown key '{key}'; {_suggest(key, allowed)}valid keys: "
                                        f"{', '.join(allowed)}")


def _choice(err: Err, where: str, value: Any, choices: tuple[str, ...], what: str) -> str:
    if not isinstance(value, str) or value not in choices:
        raise err(where, f"unknown {what} {value!r}; {_suggest(value, choices)}choose from {', '.join(choices)}")
    return value


def _field(err: Err, where: str, value: Any, what: str) -> str:
    if not isinstance(value, str) or not _FIELD.match(value):
        raise err(where, f"expected the name of the {what} field (letters, digits, '_'; 'a.b' for a nested "
                         f"field), not {value!r}")
    return value


def parse_source(err: Err, where: str, value: Any, join_attrs: tuple[str, ...],
                 base_dir: Optional[Path] = None,
                 default_attributes: Optional[tuple[str, ...]] = ()) -> Optional[SourceSpec]:
    """The ``source`` of a stream (``where`` = ``streams.S1.source``), or None if absent;
    ``default_attributes``: what is carried when ``attributes`` is not given (what the query's SELECT list needs,
    :func:`joinlib.query.carried_by_default`)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise err(where, f"expected a mapping, {_HINT}")
    _check_keys(err, where, value, SOURCE_KEYS)
    topic = value.get("topic")
    if not is_topic(topic):
        raise err(f"{where}.topic", f"expected a Kafka topic name (letters, digits, '.', '_', '-'), not {topic!r}; "
                                    + _HINT)
    fmt = _choice(err, f"{where}.format", value.get("format", "json"), FORMATS, "format")
    start = _choice(err, f"{where}.start", value.get("start", "latest"), STARTS, "start")
    if fmt == "sourcebatch":
        extra = [k for k in ("time", "id", "attributes", "schema", "registry") if value.get(k) is not None]
        if extra:
            raise err(f"{where}.{extra[0]}", "a sourcebatch source carries joinlib's own tuples; "
                                             f"'{extra[0]}' applies to json and avro sources only")
        return SourceSpec(topic, fmt, start=start)
    time_field, unit = _parse_time(err, f"{where}.time", value.get("time"))
    id_field = None if value.get("id") is None else _field(err, f"{where}.id", value["id"], "id")
    attributes = _parse_attributes(err, f"{where}.attributes", value["attributes"]) if "attributes" in value \
        else default_attributes
    for name, used in (("time", time_field), ("id", id_field)):
        if used is not None and used in join_attrs:
            raise err(f"{where}.{name}", f"'{used}' is a join attribute; the {name} field must be another field")
    schema, registry = _parse_avro(err, where, fmt, value, base_dir)
    spec = SourceSpec(topic, fmt, time_field, unit, id_field, attributes, schema, registry, start)
    if schema is not None:
        check_schema_fields(err, where, spec, join_attrs)
    return spec


def _parse_time(err: Err, where: str, value: Any) -> tuple[str, str]:
    if value is None:
        raise err(where, "missing: name the event-time field, e.g. time: {field: ts, unit: ms}")
    if isinstance(value, str):
        return _field(err, where, value, "event-time"), "ms"
    if not isinstance(value, dict):
        raise err(where, f"expected {{field: ts, unit: ms}} or a field name, not {value!r}")
    _check_keys(err, where, value, TIME_KEYS)
    if value.get("field") is None:
        raise err(where, "missing 'field': the record field holding the event time")
    name = _field(err, f"{where}.field", value["field"], "event-time")
    return name, _choice(err, f"{where}.unit", value.get("unit", "ms"), TIME_UNITS, "time unit")


def _parse_attributes(err: Err, where: str, value: Any) -> Optional[tuple[str, ...]]:
    if value is None:
        return ()
    if value == "all":
        return None
    if not isinstance(value, list):
        raise err(where, f"expected a list of field names or 'all', not {value!r}")
    out = tuple(_field(err, f"{where}[{i}]", v, "attribute") for i, v in enumerate(value))
    if len(set(out)) != len(out):
        raise err(where, "an attribute is listed twice")
    return out


def _parse_avro(err: Err, where: str, fmt: str, value: dict[str, Any],
                base_dir: Optional[Path]) -> tuple[Optional[str], Optional[str]]:
    schema, registry = value.get("schema"), value.get("registry")
    if fmt != "avro":
        for key in ("schema", "registry"):
            if value.get(key) is not None:
                raise err(f"{where}.{key}", f"'{key}' applies to avro sources only (format is {fmt})")
        return None, None
    if schema is None and registry is None:
        raise err(where, "an avro source needs 'registry' (a schema registry URL) or 'schema' (an .avsc file)")
    if registry is not None and (not isinstance(registry, str) or not re.match(r"https?://\S+\Z", registry)):
        raise err(f"{where}.registry", f"expected an http(s) URL such as http://localhost:8081, not {registry!r}")
    return (None if schema is None else _load_schema(err, f"{where}.schema", schema, base_dir)), registry


def _load_schema(err: Err, where: str, value: Any, base_dir: Optional[Path]) -> str:
    """The schema as canonical JSON text: inline (a mapping, or JSON text) or read from a file."""
    if isinstance(value, str) and not value.lstrip().startswith("{"):
        path = Path(value)
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        try:
            value = path.read_text(encoding="utf-8")
        except OSError as e:
            raise err(where, f"cannot read the schema file {path} ({e.strerror or e}); give a path relative to "
                             "the query file") from None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as e:
            raise err(where, f"the schema is not valid JSON ({e})") from None
    if not isinstance(value, dict):
        raise err(where, "expected an Avro record schema ({\"type\": \"record\", ...}), a file or inline")
    try:
        fastavro.parse_schema(value)
    except Exception as e:  # fastavro raises several kinds: all mean "not a schema"
        raise err(where, f"not a valid Avro schema: {e}") from None
    if value.get("type") != "record":
        raise err(where, "the schema must be an Avro record (one record per Kafka message)")
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def check_schema_fields(err: Err, where: str, spec: SourceSpec, join_attrs: tuple[str, ...]) -> None:
    """Every field the query reads must be in the record schema (top-level names)."""
    assert spec.schema is not None
    fields = {f.get("name") for f in json.loads(spec.schema).get("fields", []) if isinstance(f, dict)}
    needed = [("time", spec.time_field), ("id", spec.id_field)]
    needed += [("join attribute", a) for a in join_attrs]
    needed += [("attribute", a) for a in spec.attributes or ()]
    for what, name in needed:
        if name is not None and name.split(".")[0] not in fields:
            raise err(f"{where}.schema", f"the schema has no field '{name}' (the {what}); its fields: "
                                         f"{', '.join(sorted(str(f) for f in fields))}")


def source_to_dict(spec: SourceSpec) -> dict[str, Any]:
    """The ``source`` mapping of a query file (schema inline): ``parse_source`` reads it back equal."""
    out: dict[str, Any] = {"topic": spec.topic, "format": spec.format}
    if spec.format != "sourcebatch":
        out["time"] = {"field": spec.time_field, "unit": spec.time_unit}
        out["id"] = spec.id_field
        out["attributes"] = "all" if spec.attributes is None else list(spec.attributes)
    if spec.schema is not None:
        out["schema"] = json.loads(spec.schema)
    if spec.registry is not None:
        out["registry"] = spec.registry
    out["start"] = spec.start
    return out
