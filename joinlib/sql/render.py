"""A query as SQL: what ``joinlib sql --from-yaml`` prints; :func:`joinlib.sql.parse_sql` reads it back equal.

Why from :func:`joinlib.query.query_to_dict`: the YAML document already spells every value the way the parser
reads it back exactly ('25ms', '1024kbps', schemas inline), so the two writers cannot drift apart.

Streams are declared in the query's order (their positions).  The FROM / JOIN order follows the predicates: the
first predicate's left stream is the FROM stream, and each predicate goes into the ON of the JOIN that brings in
its second stream (or of the last JOIN so far, if both are in), so the predicates keep their order.  Only a
predicate between two streams neither of which is joined yet (possible in YAML's ``join`` list) has to wait until
one of them is, and moves after the predicate that joins it in: the query then differs in the order of its
predicates only, which no result depends on.
"""
from __future__ import annotations

import json
from typing import Any, Optional

from sqlglot.tokens import Tokenizer

from joinlib.model import Predicate, Query, Window
from joinlib.output_spec import STAR, Column, Output
from joinlib.query import carried_by_default, query_to_dict
from joinlib.sql.lexer import UNITS

_RESERVED = set(Tokenizer.KEYWORDS) | set(UNITS) | {"WITHIN", "EMIT", "CHANGES", "STREAM"}


def ident(name: str) -> str:
    """A stream, column or query name as SQL: quoted when it is not a plain name or is a keyword."""
    plain = name.isidentifier() and name.isascii() and name.upper() not in _RESERVED
    return name if plain else '"' + name.replace('"', '""') + '"'


def literal(value: Any) -> str:
    """An option value: numbers as written by repr (exact floats), everything else a quoted string."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "'" + str(value).replace("'", "''") + "'"
    return repr(value)


def within(window: Window) -> str:
    if not window.is_time:
        return f"WITHIN {window.size} ROWS"
    if window.size % 1000 == 0:
        return f"WITHIN {window.size // 1000} SECONDS"
    return f"WITHIN {window.size} MILLISECONDS"


def _window_option(window: Window) -> str:
    """The FROM stream's own window, as the YAML spells windows ('3s', '250ms', '100 tuples')."""
    if window.is_time and window.size % 1000 == 0:
        return f"{window.size // 1000}s"
    return str(window)


def query_to_sql(query: Query) -> str:
    """The SQL file of ``query``."""
    doc = query_to_dict(query)
    order, on = join_order(query)
    lines = [f"-- {query.name}: {len(query.streams)} streams joined on {len(query.predicates)} predicates", ""]
    for s in query.streams:
        opts = _stream_options(doc["streams"][s.name], s.join_attrs,
                               carried_by_default(query.output, s.name, s.join_attrs))
        if s.name == order[0] and (len(order) < 2 or s.window != query.stream(order[1]).window):
            opts.append(("window", _window_option(s.window)))
        lines.append(f"CREATE STREAM {ident(s.name)}" + _with(opts) + ";")
    lines.append("")
    lines.append(f"CREATE STREAM {ident(query.name)}{_with(_query_options(doc, query.output))} AS")
    lines.append(f"  SELECT {', '.join(_column(c) for c in query.output.columns or (STAR,))}")
    lines.append(f"  FROM {ident(order[0])}")
    for name in order[1:]:
        preds = " AND ".join(_predicate(p) for p in on[name])
        lines.append(f"  JOIN {ident(name)} {within(query.stream(name).window)} ON {preds}")
    where = [f"{ident(s.name)}.{c}" for s in query.streams for c in s.where]
    if where:
        lines.append(f"  WHERE {' AND '.join(where)}")
    lines.append("  EMIT CHANGES;")
    return "\n".join(lines) + "\n"


def join_order(query: Query) -> tuple[list[str], dict[str, list[Predicate]]]:
    """(FROM stream then JOINed streams, each JOINed stream's ON predicates); see the module docstring."""
    first = query.predicates[0]
    order = [first.left]
    on: dict[str, list[Predicate]] = {}
    pending = list(query.predicates)
    while pending:
        for i, p in enumerate(pending):  # noqa: B007 - i is used after the loop
            new = [s for s in (p.left, p.right) if s not in order]
            if len(new) < 2:
                break
        else:  # pragma: no cover - a connected join graph always has a placeable predicate
            raise AssertionError("the join graph is not connected")
        del pending[i]
        if new:
            order.append(new[0])
            on[new[0]] = []
        on[order[-1]].append(p)
    return order, on


def _predicate(p: Predicate) -> str:
    return f"{ident(p.left)}.{ident(p.left_attr)} = {ident(p.right)}.{ident(p.right_attr)}"


def _with(options: list[tuple[str, Any]]) -> str:
    """`` WITH (k = v, ...)`` on one line, or an option a line when that is long."""
    if not options:
        return ""
    items = [f"{k} = {literal(v)}" for k, v in options]
    one = " WITH (" + ", ".join(items) + ")"
    return one if len(one) <= 90 else " WITH (\n    " + ",\n    ".join(items) + "\n  )"


def _stream_options(spec: dict[str, Any], join_attrs: tuple[str, ...],
                    derived: Optional[tuple[str, ...]]) -> list[tuple[str, Any]]:
    opts: list[tuple[str, Any]] = [("site", spec["site"])]
    opts += [(k, spec[k]) for k in ("rate", "attributes", "tuple_bytes") if k in spec]
    sel = spec.get("selectivity")
    if sel:
        same = len(set(sel.values())) == 1 and list(sel) == list(join_attrs)
        opts.append(("selectivity", next(iter(sel.values())) if same else
                     ", ".join(f"{a}: {f!r}" for a, f in sel.items())))
    if "source" in spec:
        opts += _source_options(spec["source"], derived)
    return opts


def _source_options(src: dict[str, Any], derived: Optional[tuple[str, ...]]) -> list[tuple[str, Any]]:
    """``derived``: what the source carries without a ``carry`` option (written only when it carries else)."""
    opts: list[tuple[str, Any]] = [("topic", src["topic"])]
    if src["format"] != "json":
        opts.append(("format", src["format"]))
    if "time" in src:
        opts.append(("timestamp", src["time"]["field"]))
        if src["time"]["unit"] != "ms":
            opts.append(("timestamp_unit", src["time"]["unit"]))
    if src.get("id") is not None:
        opts.append(("id", src["id"]))
    attrs = src.get("attributes")
    if attrs is not None and attrs != ("all" if derived is None else list(derived)):
        opts.append(("carry", attrs if attrs == "all" else ", ".join(attrs)))
    if "schema" in src:
        opts.append(("schema", json.dumps(src["schema"], sort_keys=True, separators=(",", ":"))))
    if "registry" in src:
        opts.append(("registry", src["registry"]))
    if src["start"] != "latest":
        opts.append(("start", src["start"]))
    return opts


def _query_options(doc: dict[str, Any], output: Output) -> list[tuple[str, Any]]:
    opts: list[tuple[str, Any]] = [] if output.rows else [("results", "ids")]
    if output.topic is not None:
        opts.append(("topic", output.topic))
    if output.format != "json":
        opts.append(("format", output.format))
    if output.registry is not None:
        opts.append(("registry", output.registry))
    net = doc["network"]
    opts += [("latency", net["latency"]), ("bandwidth", net["bandwidth"])]
    if "nodes" in net:
        opts.append(("nodes", ", ".join(net["nodes"])))
    if "links" in net:
        opts.append(("links", ", ".join(f"{lk['from']} -> {lk['to']} {lk['latency']} {lk['bandwidth']}"
                                        for lk in net["links"])))
    opts += list(doc["execution"].items())
    return opts


def _column(c: Column) -> str:
    if c.stream is None:
        text = "*"
    else:
        text = f"{ident(c.stream)}.{'*' if c.field == '*' else ident(c.field)}"
    return f"{text} AS {ident(c.alias)}" if c.alias else text
