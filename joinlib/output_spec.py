"""What a query outputs: its SELECT list and its sink, the ``output`` of a query file.

```yaml
output:
  select: [S1.dest, S1.id AS id1, S2.id AS id2, S3.bytes]   # or ['*'], ['S1.*', S2.dest]
  topic: matches                                             # the sink topic (optional)
  format: json                                               # or avro (Confluent wire format)
  registry: http://localhost:8081                            # avro: the schema registry the schema goes to
```

Why a section of its own, and in both formats: an SQL query (:mod:`joinlib.sql`) always has a SELECT list, and
``joinlib sql --to-yaml`` must not lose it; the YAML format says the same thing so that the two stay equivalent.
With a SELECT list (``select``, ``['*']`` included) ``joinlib run --out`` writes each result as a row of the
selected columns (:mod:`joinlib.rows`, docs/sql.md "Results as rows"); without one (``select`` absent, what every
YAML file written before this section says; in SQL ``WITH (results = 'ids')``) a result is ``{"ids": ..., "ts":
...}``, as before.  The default (no SELECT list, no sink topic, json) is left out by :func:`output_to_dict`, so
those files read back unchanged.

Parsing is part of :mod:`joinlib.query` (same error style: file, key path, what to do); this module only knows the
``output`` mapping.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any, Callable, Optional

from joinlib.errors import QueryError
from joinlib.source_spec import is_topic

OUTPUT_KEYS = ("select", "topic", "format", "registry")
ROW_KEYS = ("ids", "ts")  # keys every result row has (joinlib.rows); no output column may take them
SINK_FORMATS = ("json", "avro")  # rows on the sink topic: JSON text, or Avro in the Confluent wire format
_COLUMN = re.compile(r"\s*(?:(\*)|([A-Za-z_]\w*)\s*\.\s*(\*|[A-Za-z_]\w*))(?:\s+(?i:as)\s+([A-Za-z_]\w*))?\s*\Z")
_HINT = "write 'S1.dest', 'S1.id AS id1', 'S1.*' or '*'"

Err = Callable[[str, str], QueryError]


@dataclass(frozen=True)
class Column:
    """One item of the SELECT list: ``stream.field [AS alias]``; ``field`` ``*`` is every field (of ``stream``, or
    of every stream when ``stream`` is None)."""

    stream: Optional[str]
    field: str
    alias: Optional[str] = None

    @property
    def name(self) -> str:
        """The output column's name: the alias, else the field (``S1.dest`` is ``dest``, as in SQL)."""
        return self.alias or self.field

    def __str__(self) -> str:
        text = self.field if self.stream is None else f"{self.stream}.{self.field}"
        return f"{text} AS {self.alias}" if self.alias else text


STAR = Column(None, "*")


@dataclass(frozen=True)
class Output:
    """The SELECT list (``columns``; None: no SELECT list, results are the members' ids) and the sink: ``topic``
    (None: only ``out.<query>``), its ``format`` and, for Avro, the schema ``registry`` its schema is registered
    at (docs/sql.md "Rows on the sink topic")."""

    columns: Optional[tuple[Column, ...]] = None
    topic: Optional[str] = None
    format: str = "json"
    registry: Optional[str] = None

    @property
    def rows(self) -> bool:
        """Results are rows of the selected columns (:mod:`joinlib.rows`), not ``{"ids": ..., "ts": ...}``."""
        return self.columns is not None

    @property
    def sink_topic(self) -> Optional[str]:
        """The topic live runs write rows to: ``topic`` when results are rows (None: no rows on Kafka)."""
        return self.topic if self.rows else None


def parse_output(err: Err, value: Any, streams: tuple[str, ...]) -> Output:
    """The ``output`` mapping of a query over ``streams`` (names), or the default when absent."""
    if value is None:
        return Output()
    if not isinstance(value, dict):
        raise err("output", "expected a mapping such as {select: [S1.dest, S2.id AS id2], topic: matches}")
    for key in value:
        if key not in OUTPUT_KEYS:
            close = difflib.get_close_matches(str(key), OUTPUT_KEYS, n=1)
            hint = f"did you mean '{close[0]}'? " if close else ""
            raise err(f"output.{key}", f"unknown key '{key}'; {hint}valid keys: {', '.join(OUTPUT_KEYS)}")
    columns = None if value.get("select") is None else _parse_select(err, value["select"], streams)
    topic = value.get("topic")
    if topic is not None and not is_topic(topic):
        raise err("output.topic", f"expected a Kafka topic name (letters, digits, '.', '_', '-'), not {topic!r}")
    fmt = value.get("format", "json")
    if fmt not in SINK_FORMATS:
        raise err("output.format", f"unknown sink format {fmt!r}; choose from {', '.join(SINK_FORMATS)}")
    registry = value.get("registry")
    if fmt == "avro":
        _check_avro(err, columns, topic, registry)
    elif registry is not None:
        raise err("output.registry", f"'registry' applies to Avro sinks only (format is {fmt}); remove it or "
                                     "write format: avro")
    return Output(columns, topic, fmt, registry)


def _check_avro(err: Err, columns: Optional[tuple[Column, ...]], topic: Optional[str], registry: Any) -> None:
    """An Avro sink writes rows (a schema derived from the SELECT list) to a topic, registered at a registry."""
    if columns is None:
        raise err("output.format", "an Avro sink writes rows: give a SELECT list (output.select), or drop "
                                   "format: avro (results as ids go to out.<query> only)")
    if any(c.field == "*" for c in columns):
        raise err("output.format", "an Avro sink's schema is derived from the SELECT list, so it names every "
                                   "column: write S1.dest, S1.id AS id1, ... instead of '*' or 'S1.*'")
    if topic is None:
        raise err("output.format", "an Avro sink needs its topic: add topic (SQL: WITH (topic = 'matches', "
                                   "format = 'avro', registry = 'http://...'))")
    if registry is None:
        raise err("output.format", "an Avro sink needs 'registry', the schema registry URL its schema is "
                                   "registered at (e.g. http://localhost:8081)")
    if not isinstance(registry, str) or not re.match(r"https?://\S+\Z", registry):
        raise err("output.registry", f"expected an http(s) URL such as http://localhost:8081, not {registry!r}")


def _parse_select(err: Err, value: Any, streams: tuple[str, ...]) -> tuple[Column, ...]:
    if not isinstance(value, list) or not value:
        raise err("output.select", f"expected a non-empty list of columns; {_HINT}")
    out: list[Column] = []
    names: dict[str, int] = {}
    for i, text in enumerate(value):
        where = f"output.select[{i}]"
        m = _COLUMN.match(text) if isinstance(text, str) else None
        if not m:
            raise err(where, f"cannot read {text!r} as a column; {_HINT}")
        star, stream, field, alias = m.groups()
        if star and alias:
            raise err(where, f"{text!r}: '*' cannot be renamed; remove 'AS {alias}'")
        if stream is not None and stream not in streams:
            close = difflib.get_close_matches(stream, streams, n=1)
            hint = f"did you mean '{close[0]}'? " if close else ""
            raise err(where, f"unknown stream {stream!r} in {text!r}; {hint}declared streams: {', '.join(streams)}")
        col = STAR if star else Column(stream, field, alias)
        if col.field != "*" and col.name in ROW_KEYS:
            raise err(where, f"output column '{col.name}' would be the result row's own '{col.name}' (every row has "
                             f"\"ids\", the members' ids, and \"ts\", its event time); give it another name, e.g. "
                             f"'{col.stream}.{col.field} AS {col.stream}_{col.field}'")
        if col.field != "*":
            if col.name in names:
                raise err(where, f"output column '{col.name}' is named twice (items {names[col.name] + 1} and "
                                 f"{i + 1} of the select list); give one another name, e.g. "
                                 f"'{col.stream}.{col.field} AS {col.stream}_{col.field}'")
            names[col.name] = i
        out.append(col)
    return tuple(out)


def output_to_dict(output: Output) -> Optional[dict[str, Any]]:
    """The ``output`` mapping of a query file, or None for the default (a file need not say it)."""
    if output == Output():
        return None
    out: dict[str, Any] = {} if output.columns is None else {"select": [str(c) for c in output.columns]}
    if output.topic is not None:
        out["topic"] = output.topic
    if output.format != "json":
        out["format"] = output.format
    if output.registry is not None:
        out["registry"] = output.registry
    return out
