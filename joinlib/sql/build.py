"""From the statements of an SQL file to the query: the YAML document it stands for, checked by
:func:`joinlib.query.parse_query`.

Why through the YAML document: one set of checks and one model for both formats.  An SQL query is exactly what
its YAML (``joinlib sql --to-yaml``) says, because it *is* that document; :func:`parse_query` checks windows,
units, statistics, sources, the join graph and the network once, and its errors (``streams.S1.rate: ...``) are
moved here to the line and column of the SQL that set the key, named as the SQL names it (``rate: ...``).
What only SQL can get wrong (scopes, aliases, declared columns, options) is checked here first.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import yaml
from sqlglot import exp

from joinlib.errors import QueryError
from joinlib.filter_spec import Condition, FilterProblem, conditions, where_to_text
from joinlib.model import Query
from joinlib.query import TOP_KEYS, parse_query
from joinlib.sql.lexer import Option, statements
from joinlib.sql.text import SqlText
from joinlib.sql.tree import (
    Declared,
    RawQuery,
    Ref,
    Scan,
    at,
    declaration,
    explained_select,
    parse_statement,
    query,
)

#: options of CREATE STREAM s (...) WITH (...): the key path each one sets in the stream's YAML mapping
STREAM_OPTIONS: dict[str, tuple[str, ...]] = {
    "site": ("site",), "window": ("window",), "rate": ("rate",), "attributes": ("attributes",),
    "tuple_bytes": ("tuple_bytes",), "selectivity": ("selectivity",),
    "topic": ("source", "topic"), "format": ("source", "format"), "timestamp": ("source", "time", "field"),
    "timestamp_unit": ("source", "time", "unit"), "id": ("source", "id"), "carry": ("source", "attributes"),
    "schema": ("source", "schema"), "registry": ("source", "registry"), "start": ("source", "start"),
}
#: options of CREATE STREAM out WITH (...) AS SELECT: the key path each one sets in the query's YAML document
QUERY_OPTIONS: dict[str, tuple[str, ...]] = {
    "topic": ("output", "topic"), "format": ("output", "format"), "registry": ("output", "registry"),
    "latency": ("network", "latency"), "bandwidth": ("network", "bandwidth"), "nodes": ("network", "nodes"),
    "links": ("network", "links"), "topology": ("network",),
    "interval": ("execution", "interval"), "max_delay": ("execution", "max_delay"),
    "idle_timeout": ("execution", "idle_timeout"), "bloom_fpr": ("execution", "bloom_fpr"),
    "results": ("output", "select"),   # 'ids': no output.select (read by _select)
}
TOPOLOGY_KEYS = ("latency", "bandwidth", "nodes", "links")
LINKS_HINT = "write links = 'c -> hub 60ms 256kbps, a -> b 10ms' (latency and bandwidth optional)"
_SENTINEL = "\x00sql"
_PATH = re.compile(r"([A-Za-z_][\w.\[\]-]*): (.*)\Z", re.S)
_LINK = re.compile(r"\s*(\S+)\s*->\s*(\S+)((?:\s+\S+)*)\s*\Z")


@dataclass
class Doc:
    """The YAML document being built and, per key path, the offset and SQL name of what set it."""

    spec: dict[str, Any] = field(default_factory=dict)
    where: dict[str, tuple[int, str]] = field(default_factory=dict)

    def put(self, path: tuple[str, ...], value: Any, offset: int, label: str) -> None:
        node = self.spec
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
        self.where[".".join(path)] = (offset, label)


def parse_sql(text: str, source_name: str = "<sql>", *, base_dir: Optional[Path] = None,
              explain: bool = False) -> Query:
    """The query of an SQL file's text; ``source_name`` prefixes every error, ``base_dir``: where the files it
    names (a topology, Avro schemas) are looked up.  A query statement written ``EXPLAIN ...`` asks for its plan,
    not for a run: it is accepted with ``explain`` (``joinlib explain``) and a positioned error otherwise, so that
    ``joinlib run`` or ``submit`` never runs a file its author meant to explain."""
    src = SqlText(source_name, text)
    decls, raw = _read(src)
    if raw.explain_at >= 0 and not explain:
        raise src.error(raw.explain_at, "this query is EXPLAINed: 'joinlib explain FILE' prints its plan and "
                                        "estimated bytes; remove EXPLAIN to run or submit it")
    doc = Doc()
    doc.where[""] = (raw.at, "")
    scope = _scope(src, decls, raw)
    _streams(src, doc, decls, raw, scope, base_dir)
    _predicates(src, doc, decls, raw, scope)
    _select(src, doc, decls, raw, scope)
    _where(src, doc, decls, raw, scope)
    _query_options(src, doc, raw, base_dir)
    doc.spec["name"] = raw.name if raw.name is not None else _explained_name(source_name)
    doc.where["name"] = (raw.at, "stream name")
    return _checked(src, doc, base_dir)


def _explained_name(source_name: str) -> str:
    """The name of a bare ``EXPLAIN SELECT``: the file's stem, as a YAML query without ``name`` (``explain`` when the
    stem cannot name a query: it is only printed, never a topic)."""
    stem = Path(source_name).stem
    return stem if re.match(r"[A-Za-z0-9_][A-Za-z0-9_-]*\Z", stem) else "explain"


def _read(src: SqlText) -> tuple[dict[str, Declared], RawQuery]:
    decls: dict[str, Declared] = {}
    raw: Optional[RawQuery] = None
    for st in statements(src):
        tree = parse_statement(src, st)
        if isinstance(tree, exp.Create) and st.stream and tree.expression is None:
            if st.explain_at >= 0:
                raise src.error(st.explain_at, "EXPLAIN goes on the query statement (EXPLAIN CREATE STREAM out AS "
                                               "SELECT ...), not on a stream's declaration")
            d = declaration(src, st, tree)
            if d.name in decls:
                line, col = src.position(decls[d.name].at)
                raise src.error(d.at, f"stream {d.name} is declared twice (first at line {line}, column {col}); "
                                      "keep one, or give the second another name")
            decls[d.name] = d
        elif (isinstance(tree, exp.Create) and st.stream) or (isinstance(tree, exp.Select) and st.explain_at >= 0):
            q = query(src, st, tree) if isinstance(tree, exp.Create) else explained_select(src, st, tree)
            if raw is not None:
                raise src.error(q.at, f"a second query; a file holds one CREATE STREAM ... AS SELECT "
                                      f"(the first makes {raw.name or 'the EXPLAIN SELECT'})")
            raw = q
        else:
            raise src.error(st.start, _not_a_statement(tree))
    if raw is None:
        raise src.error(len(src.text), "no query: add CREATE STREAM out AS SELECT ... FROM s1 JOIN s2 WITHIN "
                                       "3 SECONDS ON s1.k = s2.k")
    return decls, raw


def _not_a_statement(tree: exp.Expr) -> str:
    if isinstance(tree, exp.Set):
        return "SET is not supported; give options in WITH (...): a stream's on its CREATE STREAM, the query's " \
               "on CREATE STREAM out WITH (...) AS SELECT"
    if isinstance(tree, exp.Select):
        return "a bare SELECT; write CREATE STREAM out AS SELECT ... (out names the query and its results)"
    return "expected CREATE STREAM name WITH (...) or CREATE STREAM out AS SELECT ..."


# --------------------------------------------------------------------------- streams

def _suggest(word: str, choices: Any) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1) or \
        [c for c in choices if str(c).lower() == word.lower()][:1]
    return f"did you mean '{close[0]}'? " if close else ""


def _scope(src: SqlText, decls: dict[str, Declared], raw: RawQuery) -> dict[str, str]:
    """Names and aliases of the query's streams -> declared stream names (every scan declared, none twice)."""
    scope: dict[str, str] = {}
    seen: dict[str, Scan] = {}
    for scan in raw.scans:
        if scan.name not in decls:
            raise src.error(scan.at, f"unknown stream {scan.name}; {_suggest(scan.name, decls)}declare it with "
                                     f"CREATE STREAM {scan.name} WITH (site = ...)"
                                     + (f" (declared: {', '.join(decls)})" if decls else ""))
        if scan.name in seen:
            raise src.error(scan.at, f"stream {scan.name} appears twice in the query; a self-join needs a second "
                                     "stream: declare one more CREATE STREAM over the same topic")
        seen[scan.name] = scan
        scope[scan.name] = scan.name
        if scan.alias:
            scope[scan.alias] = scan.name
    for name, d in decls.items():
        if name not in seen:
            raise src.error(d.at, f"stream {name} is declared but not in the query; JOIN it or remove its "
                                  "CREATE STREAM")
    return scope


def _streams(src: SqlText, doc: Doc, decls: dict[str, Declared], raw: RawQuery, scope: dict[str, str],
             base_dir: Optional[Path]) -> None:
    """Every stream's mapping, in declaration order (a stream's position in the query)."""
    doc.spec["streams"] = {}
    doc.where["streams"] = (raw.at, "")
    scans = {s.name: s for s in raw.scans}
    for name, d in decls.items():
        doc.spec["streams"][name] = {}
        doc.where[f"streams.{name}"] = (d.at, "")
        if "site" not in d.options:
            raise src.error(d.at, f"stream {name} needs a site: add WITH (site = '...'), the site where its "
                                  "records are born")
        for opt in d.options.values():
            _stream_option(src, doc, d, opt)
        _window(src, doc, d, scans[name], raw)
        _source_checks(src, doc, d)


_OF_A_STREAM = "a source stream (CREATE STREAM s WITH (...))"
_OF_THE_QUERY = "the query (CREATE STREAM out WITH (...) AS SELECT)"


def _option_path(src: SqlText, opt: Option, stream: bool) -> tuple[str, ...]:
    """The YAML key path an option sets; an error naming the statement it belongs to if it is not this one's."""
    own, other = (STREAM_OPTIONS, QUERY_OPTIONS) if stream else (QUERY_OPTIONS, STREAM_OPTIONS)
    path = own.get(opt.key)
    if path is not None:
        return path
    if opt.key in other:
        raise src.error(opt.key_at, f"'{opt.key}' is an option of {_OF_THE_QUERY if stream else _OF_A_STREAM}, "
                                    f"not of {_OF_A_STREAM if stream else _OF_THE_QUERY}")
    raise src.error(opt.key_at, f"unknown option '{opt.key}'; {_suggest(opt.key, own)}options of "
                                f"{'a stream' if stream else 'the query'}: {', '.join(own)}")


def _stream_option(src: SqlText, doc: Doc, d: Declared, opt: Option) -> None:
    path = _option_path(src, opt, stream=True)
    value: Any = opt.value
    if opt.key == "selectivity":
        value = _selectivity(src, opt)
    elif opt.key == "carry":
        value = "all" if opt.value == "all" else _names(opt)
    if opt.key in ("timestamp", "id", "carry") and d.columns is not None:
        for col in ([] if value == "all" else value if isinstance(value, list) else [value]):
            _check_column(src, d, str(col), opt.value_at)
    doc.put(("streams", d.name) + path, value, opt.value_at, opt.key)


def _names(opt: Option) -> list[Any]:
    """'a, b' -> ['a', 'b'] (a list option written as one string)."""
    if not isinstance(opt.value, str):
        return [opt.value]
    return [v.strip() for v in opt.value.split(",") if v.strip()]


def _selectivity(src: SqlText, opt: Option) -> Any:
    """A number (every join attribute), or 'dest: 0.01, region: 0.25' (per attribute)."""
    if not isinstance(opt.value, str):
        return opt.value
    out: dict[str, Any] = {}
    for part in opt.value.split(","):
        attr, sep, number = part.partition(":")
        if not sep or not attr.strip():
            raise src.error(opt.value_at, f"write selectivity = 0.01, or per attribute 'dest: 0.01, region: 0.25'; "
                                          f"cannot read {part.strip()!r}")
        try:
            out[attr.strip()] = float(number)
        except ValueError:
            out[attr.strip()] = number.strip()   # parse_query says what is wrong with it
    return out


def _window(src: SqlText, doc: Doc, d: Declared, scan: Scan, raw: RawQuery) -> None:
    """A joined stream's window is its WITHIN; the FROM stream's its window option, or the first JOIN's."""
    own = d.options.get("window")
    if scan.within is not None:
        if own is not None:
            raise src.error(own.key_at, f"{d.name}'s window is its JOIN's WITHIN; remove window = ... here")
        doc.put(("streams", d.name, "window"), scan.within.window, scan.within.at, "WITHIN")
    elif own is None and len(raw.scans) > 1:
        first = raw.scans[1].within
        assert first is not None  # every JOIN has one (tree.py)
        doc.put(("streams", d.name, "window"), first.window, first.at, "WITHIN")


def _source_checks(src: SqlText, doc: Doc, d: Declared) -> None:
    source_keys = [k for k, p in STREAM_OPTIONS.items() if p[0] == "source" and k in d.options]
    if not source_keys:
        return
    doc.where[f"streams.{d.name}.source"] = (d.options[source_keys[0]].key_at, "")
    if "topic" not in d.options:
        first = d.options[source_keys[0]]
        raise src.error(first.key_at, f"'{first.key}' describes a Kafka source: add topic = '...' (without a "
                                      "topic the stream is replayed, or read from DIR/<stream>.jsonl)")
    fmt = d.options.get("format")
    if (fmt is None or fmt.value != "sourcebatch") and "timestamp" not in d.options:
        raise src.error(d.options["topic"].key_at, f"a {fmt.value if fmt else 'json'} source needs its event "
                                                   "time: add timestamp = 'ts' (the field holding it)")


def _check_column(src: SqlText, d: Declared, column: str, offset: int) -> None:
    if d.columns is not None and column != "*" and column not in d.columns:
        raise src.error(offset, f"unknown column '{column}' of stream {d.name}; {_suggest(column, d.columns)}"
                                f"its columns: {', '.join(d.columns)}")


# --------------------------------------------------------------------------- predicates and SELECT

def _resolve(src: SqlText, decls: dict[str, Declared], scope: dict[str, str], ref: Ref,
             visible: list[str]) -> str:
    """The declared stream a column belongs to (an alias resolved, an unqualified column found by the column
    lists of the ``visible`` streams)."""
    if ref.stream is None:
        owners = [n for n in visible if decls[n].columns is not None and ref.field in (decls[n].columns or {})]
        if len(owners) != 1:
            why = f"it is a column of {' and '.join(owners)}" if owners else "no column list declares it"
            raise src.error(ref.at, f"qualify column '{ref.field}' with its stream ({why}), e.g. "
                                    f"{(owners or visible)[0]}.{ref.field}")
        return owners[0]
    name = scope.get(ref.stream)
    if name is None:
        raise src.error(ref.at, f"unknown stream {ref.stream} in {ref.stream}.{ref.field}; "
                                f"{_suggest(ref.stream, scope)}streams of the query: {', '.join(scope)}")
    if name not in visible:
        raise src.error(ref.at, f"{name} is not joined yet here; move this predicate to the ON of {name}'s JOIN "
                                "or a later one")
    _check_column(src, decls[name], ref.field, ref.at)
    return name


def _predicates(src: SqlText, doc: Doc, decls: dict[str, Declared], raw: RawQuery,
                scope: dict[str, str]) -> None:
    """ON predicates, in the order written (the order of the YAML ``join`` list)."""
    join: list[str] = []
    doc.where["join"] = (raw.scans[0].at, "")
    for k, scan in enumerate(raw.scans):
        visible = [s.name for s in raw.scans[:k + 1]]
        for left, right, offset in scan.on:
            a = _resolve(src, decls, scope, left, visible)
            b = _resolve(src, decls, scope, right, visible)
            doc.where[f"join[{len(join)}]"] = (offset, "")
            join.append(f"{a}.{left.field} = {b}.{right.field}")
    doc.spec["join"] = join


def _select(src: SqlText, doc: Doc, decls: dict[str, Declared], raw: RawQuery, scope: dict[str, str]) -> None:
    """The SELECT list (YAML ``output.select``), or none with ``WITH (results = 'ids')`` (results are the members'
    ids, as a YAML query without ``output.select``)."""
    visible = [s.name for s in raw.scans]
    results = raw.options.get("results")
    if results is not None:
        if results.value not in ("ids", "rows"):
            raise src.error(results.value_at, f"results: expected 'rows' (the SELECT list's columns, the default) "
                                              f"or 'ids' (the members' ids only), not {results.value!r}")
        if results.value == "ids":
            if [(i.ref.stream, i.ref.field) for i in raw.items] != [(None, "*")]:
                raise src.error(raw.items[0].ref.at, "results = 'ids' writes the members' ids only: write SELECT *")
            return
    select: list[str] = []
    for i, item in enumerate(raw.items):
        ref = item.ref
        if ref.stream is None and ref.field == "*":
            text = "*"
        else:
            text = f"{_resolve(src, decls, scope, ref, visible)}.{ref.field}"
        select.append(f"{text} AS {item.alias}" if item.alias else text)
        doc.where[f"output.select[{i}]"] = (ref.at, "")
    doc.put(("output", "select"), select, raw.at, "SELECT")


def _where(src: SqlText, doc: Doc, decls: dict[str, Declared], raw: RawQuery, scope: dict[str, str]) -> None:
    """WHERE: each condition goes to the stream whose field it tests (``streams.S.where``), in the order written."""
    if raw.where is None:
        return
    visible = [s.name for s in raw.scans]

    def column(col: exp.Column) -> tuple[str, str]:
        ref = Ref(col.table or None, col.name, at(col, raw.where_at))
        return _resolve(src, decls, scope, ref, visible), col.name

    try:
        found = conditions(raw.where, column)
    except FilterProblem as e:
        raise src.error(at(e.node, raw.where_at), e.problem) from None
    per_stream: dict[str, list[Condition]] = {}
    for stream, cond in found:
        per_stream.setdefault(stream, []).append(cond)
    for stream, conds in per_stream.items():
        doc.put(("streams", stream, "where"), where_to_text(tuple(conds)), raw.where_at, "WHERE")


# --------------------------------------------------------------------------- query options

def _query_options(src: SqlText, doc: Doc, raw: RawQuery, base_dir: Optional[Path]) -> None:
    if "topology" in raw.options:
        _topology(src, doc, raw.options["topology"], base_dir)
    for opt in raw.options.values():
        path = _option_path(src, opt, stream=False)
        if opt.key in ("topology", "results"):
            continue
        value: Any = opt.value
        if opt.key == "nodes":
            value = _names(opt)
        elif opt.key == "links":
            value = _links(src, opt)
        doc.put(path, value, opt.value_at, opt.key)


def _links(src: SqlText, opt: Option) -> list[dict[str, Any]]:
    """'c -> hub 60ms 256kbps, a -> b 10ms' -> the YAML ``links`` list (a value ending in bps is a bandwidth)."""
    if not isinstance(opt.value, str):
        raise src.error(opt.value_at, LINKS_HINT)
    out = []
    for part in opt.value.split(","):
        m = _LINK.match(part)
        if not m:
            raise src.error(opt.value_at, f"cannot read the link {part.strip()!r}; {LINKS_HINT}")
        link: dict[str, Any] = {"from": m.group(1), "to": m.group(2)}
        for word in m.group(3).split():
            key = "bandwidth" if word.lower().endswith("bps") else "latency"
            if key in link:
                raise src.error(opt.value_at, f"the link {part.strip()!r} gives its {key} twice; {LINKS_HINT}")
            link[key] = word
        out.append(link)
    return out


def _topology(src: SqlText, doc: Doc, opt: Option, base_dir: Optional[Path]) -> None:
    """A topology file: the YAML ``network`` mapping shared by many queries; the query's own options win."""
    path = Path(str(opt.value))
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise src.error(opt.value_at, f"cannot read the topology file {path} ({e.strerror or e}); give a path "
                                      "relative to the query file") from None
    except yaml.YAMLError as e:
        raise src.error(opt.value_at, f"the topology file {path} is not valid YAML ({e})") from None
    if not isinstance(data, dict) or any(k not in TOPOLOGY_KEYS for k in data):
        raise src.error(opt.value_at, f"a topology file is a YAML mapping with keys {', '.join(TOPOLOGY_KEYS)} "
                                      f"(the network section of a YAML query); {path} is not")
    for key, value in data.items():
        doc.put(("network", key), value, opt.value_at, f"topology {path.name}: {key}")


# --------------------------------------------------------------------------- the checks of parse_query

def _checked(src: SqlText, doc: Doc, base_dir: Optional[Path]) -> Query:
    """:func:`parse_query` on the document; its errors moved to where the SQL set the offending key."""
    try:
        return parse_query(doc.spec, _SENTINEL, base_dir=base_dir)
    except QueryError as e:
        msg = str(e)
        rest = msg[len(_SENTINEL) + 2:] if msg.startswith(_SENTINEL + ": ") else msg
        m = _PATH.match(rest)
        path, problem = ("", rest)
        if m and re.split(r"[.\[]", m.group(1))[0] in TOP_KEYS:
            path, problem = m.group(1), m.group(2)
        offset, label = _lookup(doc, path)
        raise src.error(offset, f"{label}: {problem}" if label else problem) from None


def _lookup(doc: Doc, path: str) -> tuple[int, str]:
    """The offset and name of the SQL that set ``path`` or its nearest parent; the key below it kept in the name."""
    key = path
    while key not in doc.where:
        cut = max(key.rfind("."), key.rfind("["))
        key = key[:cut] if cut > 0 else ""
    offset, label = doc.where[key]
    rest = path[len(key):]
    if label and rest:
        label += rest
    return offset, label
