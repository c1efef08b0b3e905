"""Query files: YAML parsing, validation and serialisation.

A query file is written by people, so every mistake in it must end as one
:class:`~joinlib.errors.QueryError` whose message names the file, the offending key
(as a dotted path such as ``streams.S1.window``) and what to do about it.  The
parser never lets a ``KeyError`` or a YAML traceback through.

Units: durations accept ``ms``, ``s``, ``min`` and ``h`` (a bare number is ms);
bandwidths accept ``bps``, ``kbps``, ``mbps`` and ``gbps`` in any case, with SI
multiples (1 mbps = 1000 kbps, matching :meth:`Network.transfer_ms`, where
1 kbps = 1000 bit/s); a bare number is kbps.  Windows are ``3s``-style durations
or ``100 tuples``; a bare number is refused because it could mean either.
"""
from __future__ import annotations

import difflib
import re
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Literal, Optional, Union, overload

import yaml

from joinlib.errors import QueryError
from joinlib.filter_spec import Condition, FilterProblem, parse_where_text, where_to_text
from joinlib.model import Execution, Link, Network, Predicate, Query, Stream, StreamStats, Window
from joinlib.output_spec import STAR, Output, output_to_dict, parse_output
from joinlib.source_spec import parse_source, source_to_dict

TOP_KEYS = ("name", "streams", "join", "network", "execution", "output")
STREAM_KEYS = ("site", "window", "rate", "attributes", "tuple_bytes", "selectivity", "source", "where")
NETWORK_KEYS = ("latency", "bandwidth", "links", "nodes")
LINK_KEYS = ("from", "to", "latency", "bandwidth")
EXECUTION_KEYS = ("interval", "max_delay", "idle_timeout", "bloom_fpr")
RESERVED_ATTRS = ("id", "ts")  # columns every data row has; they cannot be join attributes

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_QUERY_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]*\Z")  # goes into topic names: no dots
_NUMBER = r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE]([-+]?[0-9]+))?"
_DURATION = re.compile(rf"\s*{_NUMBER}\s*([a-zA-Z]*)\s*\Z")
_TUPLES = re.compile(r"\s*([0-9]+)\s*tuples?\s*\Z")
_PREDICATE = re.compile(r"\s*(\w+)\s*\.\s*(\w+)\s*=\s*(\w+)\s*\.\s*(\w+)\s*\Z")
_TIME_UNITS = {"ms": Decimal(1), "s": Decimal(1000), "min": Decimal(60_000), "h": Decimal(3_600_000)}
_BW_UNITS = {"bps": Decimal("0.001"), "kbps": Decimal(1), "mbps": Decimal(1000), "gbps": Decimal(1_000_000)}
_DURATION_HINT = "write e.g. '25ms', '0.025s', '2min' or a bare number of ms"
_WINDOW_HINT = "write a time window such as '3s', '500ms', '2min' or a tuple window such as '100 tuples'"
_BW_HINT = "write e.g. '1024kbps', '1mbps', '512kbps' or a bare number of kbps"

Source = Union[str, Path]
Spec = dict[str, Any]  # one mapping of the YAML document, as loaded


# --------------------------------------------------------------------------- reading

def load_query(path: Source) -> Query:
    """Read and validate a YAML query file; the query name defaults to the file stem.
    ``joinlib.sql.load_query_file`` reads SQL files too (this module cannot import the SQL front end, which
    builds on it)."""
    path = Path(path)
    if path.suffix.lower() == ".sql":
        raise QueryError(f"{path}: an SQL query file; read it with joinlib.sql.load_query_file")
    text = read_query_text(path, ".yaml")
    try:
        data = yaml.load(text, Loader=_StrictLoader)
    except yaml.MarkedYAMLError as e:
        where = f"line {e.problem_mark.line + 1}, column {e.problem_mark.column + 1}" if e.problem_mark else "?"
        raise QueryError(f"{path}: invalid YAML at {where}: {e.problem or e.context}; fix the syntax") from None
    except yaml.YAMLError as e:
        raise QueryError(f"{path}: invalid YAML: {e}") from None
    return parse_query(data, str(path), base_dir=path.parent)


def read_query_text(path: Path, suffix: str) -> str:
    """The text of a query file (``suffix``: the kind to name when ``path`` is a directory); a QueryError, never an
    OSError, for a path that cannot be read."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise QueryError(f"{path}: query file not found; check the path") from None
    except IsADirectoryError:
        raise QueryError(f"{path}: is a directory; pass a query {suffix} file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise QueryError(f"{path}: cannot read the query file ({e})") from None


def parse_query(data: Any, source_name: str = "<query>", *, base_dir: Optional[Path] = None) -> Query:
    """Validate the parsed YAML document ``data``; ``source_name`` prefixes every error;
    ``base_dir``: where files the query names (Avro schemas of sources) are looked up."""
    err = _Errors(source_name)
    if data is None:
        raise err("", "the query is empty; it needs at least 'streams' and 'join'")
    if not isinstance(data, dict):
        raise err("", f"the query must be a mapping with keys {', '.join(TOP_KEYS)}, not {_kind(data)}")
    _check_keys(err, "", data, TOP_KEYS)
    for key in ("streams", "join"):
        if key not in data:
            raise err("", f"missing required key '{key}'")
    name = _parse_name(err, data.get("name"), source_name)
    specs = _parse_stream_specs(err, data["streams"])
    predicates = _parse_predicates(err, data["join"], specs)
    output = parse_output(err, data.get("output"), tuple(specs))
    streams = _build_streams(err, specs, predicates, base_dir, output)
    _check_connected(err, streams, predicates)
    sites = tuple(dict.fromkeys(s.site for s in streams))
    network = _parse_network(err, data.get("network"), sites)
    execution = _parse_execution(err, data.get("execution"))
    return Query(name, streams, predicates, network, execution, output)


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate mapping keys (PyYAML silently keeps the last,
    which would quietly drop a stream declared twice)."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            duplicate = key in seen
            seen.add(key)
        except TypeError:
            continue  # unhashable key: let the base constructor report it
        if duplicate:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping", node.start_mark, f"duplicate key {key!r}", key_node.start_mark)
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


class _Errors:
    """Builds QueryErrors of the form ``<file>: <key path>: <problem>``."""

    def __init__(self, source: str) -> None:
        self.source = source

    def __call__(self, where: str, msg: str) -> QueryError:
        return QueryError(f"{self.source}: {where}: {msg}" if where else f"{self.source}: {msg}")


def _kind(value: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean",
            type(None): "empty"}.get(type(value), f"a {type(value).__name__}")


def _suggest(word: Any, choices: Any) -> str:
    """A 'did you mean' hint, case-insensitive (so 's3' finds 'S3', 'latncy' finds 'latency')."""
    by_lower = {str(c).lower(): str(c) for c in choices}
    close = difflib.get_close_matches(str(word).lower(), list(by_lower), n=1)
    return f"did you mean '{by_lower[close[0]]}'? " if close else ""


def _check_keys(err: _Errors, where: str, data: Spec, allowed: tuple[str, ...]) -> None:
    for key in data:
        if key not in allowed:
            at = f"{where}.{key}" if where else str(key)
            raise err(at, f"unknown key '{key}'; {_suggest(key, allowed)}valid keys: {', '.join(allowed)}")


def _parse_name(err: _Errors, name: Any, source_name: str) -> str:
    if name is None:
        stem = Path(source_name).stem
        if not _QUERY_NAME.match(stem):
            raise err("name", f"the file stem {stem!r} is not a valid query name; add e.g. 'name: my_query' "
                              "(letters, digits, '_' and '-')")
        return stem
    if not isinstance(name, str) or not _QUERY_NAME.match(name):
        raise err("name", f"{name!r} is not a valid query name; use letters, digits, '_' and '-' "
                          "(it becomes part of Kafka topic names)")
    return name


# --------------------------------------------------------------------------- streams

def _parse_stream_specs(err: _Errors, streams: Any) -> dict[str, Spec]:
    """Check the ``streams`` mapping: names, keys and the required site and window."""
    if not isinstance(streams, dict):
        raise err("streams", f"expected a mapping of stream name to settings, not {_kind(streams)}")
    if len(streams) < 2:
        raise err("streams", f"a join needs at least 2 streams, found {len(streams)}")
    for name, spec in streams.items():
        where = f"streams.{name}"
        if not isinstance(name, str) or not _NAME.match(name):
            raise err(where, f"{name!r} is not a valid stream name; use letters, digits and '_', "
                             "starting with a letter")
        if not isinstance(spec, dict):
            raise err(where, f"expected a mapping such as {{site: r1, window: 3s}}, not {_kind(spec)}")
        _check_keys(err, where, spec, STREAM_KEYS)
        for key in ("site", "window"):
            if spec.get(key) is None:
                raise err(where, f"missing '{key}'; every stream needs a site and a window")
    specs: dict[str, Spec] = streams
    return specs


def _build_streams(err: _Errors, specs: dict[str, Spec], predicates: tuple[Predicate, ...],
                   base_dir: Optional[Path], output: Output) -> tuple[Stream, ...]:
    attrs: dict[str, list[str]] = {name: [] for name in specs}
    for p in predicates:
        for stream, attr in ((p.left, p.left_attr), (p.right, p.right_attr)):
            if attr not in attrs[stream]:
                attrs[stream].append(attr)
    out = []
    for pos, (name, spec) in enumerate(specs.items()):
        where = f"streams.{name}"
        site = spec["site"]
        if isinstance(site, bool) or not isinstance(site, (str, int)) or not str(site).strip():
            raise err(f"{where}.site", f"expected a site name, not {site!r}")
        window = _parse_window(err, f"{where}.window", spec["window"])
        join_attrs = tuple(attrs[name])
        stats = _parse_stats(err, where, spec, join_attrs)
        source = parse_source(err, f"{where}.source", spec.get("source"), join_attrs, base_dir,
                              carried_by_default(output, name, join_attrs))
        conditions = _parse_where(err, f"{where}.where", spec.get("where"), name)
        out.append(Stream(name, pos, str(site), window, join_attrs, stats, source, conditions))
    return tuple(out)


def _parse_where(err: _Errors, where: str, value: Any, stream: str) -> tuple[Condition, ...]:
    if value is None:
        return ()
    try:
        return parse_where_text(value, stream)
    except FilterProblem as e:
        raise err(where, e.problem) from None


def carried_by_default(output: Output, stream: str, join_attrs: tuple[str, ...]) -> Optional[tuple[str, ...]]:
    """What a live source of ``stream`` carries when its ``attributes`` are not given: the fields the SELECT list
    names of it (None, every field, for ``*`` or ``stream.*``), besides its join attributes and the ``id`` and
    ``ts`` every tuple has; nothing without a SELECT list (results are then ids).  Why derived: a result row needs
    those fields at the result site, and nothing else should ship (a filter's fields are read at the source)."""
    if output.columns is None:
        return ()
    if any(c == STAR or (c.stream == stream and c.field == "*") for c in output.columns):
        return None
    skip = set(join_attrs) | set(RESERVED_ATTRS)
    return tuple(dict.fromkeys(c.field for c in output.columns if c.stream == stream and c.field not in skip))


def _parse_window(err: _Errors, where: str, value: Any) -> Window:
    if isinstance(value, str):
        m = _TUPLES.match(value)
        if m:
            count = int(m.group(1))
            if count <= 0:
                raise err(where, f"window {value!r} must hold at least 1 tuple")
            return Window("tuples", count)
        return Window("time", _duration_ms(err, where, value, integral=True, positive=True, hint=_WINDOW_HINT))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        raise err(where, f"bare number {value!r} is ambiguous; {_WINDOW_HINT}")
    raise err(where, f"cannot read {value!r} as a window; {_WINDOW_HINT}")


def _parse_stats(err: _Errors, where: str, spec: Spec, join_attrs: tuple[str, ...]) -> StreamStats:
    rate = spec.get("rate")
    if rate is not None and (not _is_number(rate) or rate <= 0):
        raise err(f"{where}.rate", f"expected a positive number of tuples per second, not {rate!r}")
    attributes = spec.get("attributes")
    if attributes is not None and (not _is_int(attributes) or attributes < 0):
        raise err(f"{where}.attributes", f"expected a non-negative integer number of payload attributes, "
                                         f"not {attributes!r}")
    tuple_bytes = spec.get("tuple_bytes")
    if tuple_bytes is not None and (not _is_int(tuple_bytes) or tuple_bytes <= 0):
        raise err(f"{where}.tuple_bytes", f"expected a positive integer number of bytes, not {tuple_bytes!r}")
    selectivity = _parse_selectivity(err, f"{where}.selectivity", spec.get("selectivity"), join_attrs)
    return StreamStats(None if rate is None else float(rate), tuple_bytes, attributes, selectivity)


def _parse_selectivity(err: _Errors, where: str, value: Any,
                       join_attrs: tuple[str, ...]) -> tuple[tuple[str, float], ...]:
    if value is None:
        return ()
    if _is_number(value):
        return tuple((a, _fraction(err, where, value)) for a in join_attrs)
    if not isinstance(value, dict):
        raise err(where, f"expected a number or a mapping attribute -> factor, not {_kind(value)}")
    for attr in value:
        if attr not in join_attrs:
            raise err(f"{where}.{attr}", f"{attr!r} is not a join attribute of this stream; "
                                         f"{_suggest(attr, join_attrs)}its join attributes: {', '.join(join_attrs)}")
    return tuple((a, _fraction(err, f"{where}.{a}", value[a])) for a in join_attrs if a in value)


def _fraction(err: _Errors, where: str, value: Any) -> float:
    if not _is_number(value) or not 0 < value <= 1:
        raise err(where, f"a selectivity factor f = 1 / distinct values must satisfy 0 < f <= 1, not {value!r}")
    return float(value)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# --------------------------------------------------------------------------- join graph

def _parse_predicates(err: _Errors, join: Any, specs: dict[str, Spec]) -> tuple[Predicate, ...]:
    if not isinstance(join, list) or not join:
        raise err("join", "expected a non-empty list of predicates such as '- S1.dest = S2.dest'")
    out: list[Predicate] = []
    seen: dict[frozenset[tuple[str, str]], int] = {}
    for i, text in enumerate(join):
        where = f"join[{i}]"
        pred = _parse_predicate(err, where, text, specs)
        sides = frozenset({(pred.left, pred.left_attr), (pred.right, pred.right_attr)})
        if sides in seen:
            raise err(where, f"'{pred}' repeats join[{seen[sides]}]; remove one of them")
        seen[sides] = i
        out.append(pred)
    return tuple(out)


def _parse_predicate(err: _Errors, where: str, text: Any, specs: dict[str, Spec]) -> Predicate:
    if not isinstance(text, str):
        raise err(where, f"expected a string 'A.x = B.y', not {_kind(text)}")
    if "==" in text:
        raise err(where, f"{text!r}: write a single '=' as in 'A.x = B.y'")
    m = _PREDICATE.match(text)
    if not m:
        raise err(where, f"{text!r} is not an equi-join predicate; write 'A.x = B.y' "
                         "(stream.attribute on both sides)")
    left, left_attr, right, right_attr = m.groups()
    for stream in (left, right):
        if stream not in specs:
            raise err(where, f"unknown stream {stream!r} in {text!r}; {_suggest(stream, specs)}"
                             f"declared streams: {', '.join(specs)}")
    if left == right:
        raise err(where, f"{text!r} joins {left} with itself; a predicate must join two different streams")
    for attr in (left_attr, right_attr):
        if attr in RESERVED_ATTRS:
            raise err(where, f"{text!r}: '{attr}' is a reserved column of every data row and cannot be "
                             "a join attribute; rename the attribute")
    return Predicate(left, left_attr, right, right_attr)


def _check_connected(err: _Errors, streams: tuple[Stream, ...], predicates: tuple[Predicate, ...]) -> None:
    """Every stream must be reachable from every other through predicates; otherwise the
    join is a cross product of independent joins, which the algorithms do not support."""
    names = [s.name for s in streams]
    comp = {n: {n} for n in names}
    for p in predicates:
        merged = comp[p.left] | comp[p.right]
        for n in merged:
            comp[n] = merged
    groups: list[list[str]] = []
    for n in names:
        if not any(n in g for g in groups):
            groups.append([m for m in names if m in comp[n]])
    if len(groups) > 1:
        parts = " and ".join("{" + ", ".join(g) + "}" for g in groups)
        raise err("join", f"the join graph is not connected: {parts} share no predicate; "
                          "add a predicate linking them")


# --------------------------------------------------------------------------- network / execution

def _parse_network(err: _Errors, data: Any, sites: tuple[str, ...]) -> Network:
    if data is None:
        return Network()
    if not isinstance(data, dict):
        raise err("network", f"expected a mapping with keys {', '.join(NETWORK_KEYS)}, not {_kind(data)}")
    _check_keys(err, "network", data, NETWORK_KEYS)
    default = Network()
    latency = _latency(err, "network.latency", data.get("latency"), default.latency_ms)
    bandwidth = _bandwidth(err, "network.bandwidth", data.get("bandwidth"), default.bandwidth_kbps)
    nodes = _parse_nodes(err, data.get("nodes"), sites)
    links = _parse_links(err, data.get("links"), sites + nodes, latency, bandwidth)
    return Network(latency, bandwidth, links, nodes)


def _parse_nodes(err: _Errors, data: Any, sites: tuple[str, ...]) -> tuple[str, ...]:
    """Processing-only nodes (``network.nodes``): names of sites without streams."""
    if data is None:
        return ()
    if not isinstance(data, list) or not all(isinstance(n, (str, int)) and str(n) for n in data):
        raise err("network.nodes", f"expected a list of node names, not {_kind(data)}")
    out: list[str] = []
    for n in map(str, data):
        if n in out:
            raise err("network.nodes", f"node {n!r} is listed twice")
        if n not in sites:  # a stream site listed again is harmless
            out.append(n)
    return tuple(out)


def _parse_links(err: _Errors, data: Any, sites: tuple[str, ...], latency: float,
                 bandwidth: float) -> tuple[Link, ...]:
    if data is None:
        return ()
    if not isinstance(data, list):
        raise err("network.links",
                  f"expected a list of {{from, to, latency, bandwidth}} mappings, not {_kind(data)}")
    out: list[Link] = []
    for i, item in enumerate(data):
        where = f"network.links[{i}]"
        if not isinstance(item, dict):
            raise err(where, "expected a mapping {from: SITE, to: SITE, latency: .., bandwidth: ..}, "
                             f"not {_kind(item)}")
        _check_keys(err, where, item, LINK_KEYS)
        ends = []
        for key in ("from", "to"):
            site = item.get(key)
            if site is None:
                raise err(where, f"missing '{key}'; a link needs 'from' and 'to' sites")
            if str(site) not in sites:
                raise err(f"{where}.{key}", f"unknown site {site!r}; {_suggest(site, sites)}"
                                            f"sites of this query: {', '.join(sites)}")
            ends.append(str(site))
        if ends[0] == ends[1]:
            raise err(where, f"a link joins two different sites, not {ends[0]} with itself")
        if any((lk.src, lk.dst) == tuple(ends) for lk in out):
            raise err(where, f"link {ends[0]} -> {ends[1]} is declared twice; keep one")
        out.append(Link(ends[0], ends[1], _latency(err, f"{where}.latency", item.get("latency"), latency),
                        _bandwidth(err, f"{where}.bandwidth", item.get("bandwidth"), bandwidth)))
    return tuple(out)


def _parse_execution(err: _Errors, data: Any) -> Execution:
    if data is None:
        return Execution()
    if not isinstance(data, dict):
        raise err("execution", f"expected a mapping with keys {', '.join(EXECUTION_KEYS)}, not {_kind(data)}")
    _check_keys(err, "execution", data, EXECUTION_KEYS)
    default = Execution()
    interval, max_delay, idle = default.interval_ms, default.max_delay_ms, default.idle_timeout_ms
    if data.get("interval") is not None:
        interval = int(_duration_ms(err, "execution.interval", data["interval"], integral=True, positive=True))
    if data.get("max_delay") is not None:
        max_delay = int(_duration_ms(err, "execution.max_delay", data["max_delay"], integral=True))
    if data.get("idle_timeout") is not None:
        idle = int(_duration_ms(err, "execution.idle_timeout", data["idle_timeout"], integral=True, positive=True))
    fpr = default.bloom_fpr
    if data.get("bloom_fpr") is not None:
        v = data["bloom_fpr"]
        if not _is_number(v) or not 0 <= v < 1:
            raise err("execution.bloom_fpr", f"a false-positive rate must satisfy 0 <= p < 1 (0: ship keys, never "
                                             f"Bloom filters), not {v!r}")
        fpr = float(v)
    return Execution(interval, max_delay, idle, fpr)


def _latency(err: _Errors, where: str, value: Any, default: float) -> float:
    return default if value is None else float(_duration_ms(err, where, value))


def _bandwidth(err: _Errors, where: str, value: Any, default: float) -> float:
    if value is None:
        return default
    kbps = _scaled(err, where, value, _BW_UNITS, "kbps", _BW_HINT)
    if kbps <= 0:
        raise err(where, f"bandwidth must be positive, not {value!r}")
    return float(kbps)


@overload
def _duration_ms(err: _Errors, where: str, value: Any, *, integral: Literal[True], positive: bool = ...,
                 hint: str = ...) -> int: ...
@overload
def _duration_ms(err: _Errors, where: str, value: Any, *, integral: Literal[False] = ..., positive: bool = ...,
                 hint: str = ...) -> float: ...
def _duration_ms(err: _Errors, where: str, value: Any, *, integral: bool = False, positive: bool = False,
                 hint: str = _DURATION_HINT) -> Union[int, float]:
    """A duration in ms: an int when ``integral`` (refusing e.g. '1.5ms'), else a float."""
    ms = _scaled(err, where, value, _TIME_UNITS, "ms", hint)
    if positive and ms <= 0:
        raise err(where, f"{value!r} must be positive")
    if integral:
        if ms != ms.to_integral_value():
            raise err(where, f"{value!r} is {ms} ms; it must be a whole number of milliseconds")
        return int(ms)
    return float(ms)


def _scaled(err: _Errors, where: str, value: Any, units: dict[str, Decimal], bare: str, hint: str) -> Decimal:
    """Parse '<number><unit>' exactly (Decimal, so '0.025s' is exactly 25 ms)."""
    if _is_number(value):
        number, unit = Decimal(str(value)), bare
    elif isinstance(value, str) and (m := _DURATION.match(value)):
        try:
            number = Decimal(m.group(1)) * (Decimal(10) ** int(m.group(2) or 0))
        except InvalidOperation:
            raise err(where, f"cannot read {value!r}; {hint}") from None
        unit = m.group(3).lower() or bare
    else:
        raise err(where, f"cannot read {value!r}; {hint}")
    if unit not in units:
        raise err(where, f"unknown unit {unit!r} in {value!r}; {_suggest(unit, units)}{hint}")
    if number < 0:
        raise err(where, f"{value!r} must not be negative")
    return number * units[unit]


# --------------------------------------------------------------------------- writing

def query_to_dict(query: Query) -> Spec:
    """The YAML document of ``query``: ``parse_query(query_to_dict(q)) == q``."""
    streams = {s.name: _stream_to_dict(s) for s in query.streams}
    net = query.network
    network: dict[str, Any] = {"latency": f"{_num(net.latency_ms)}ms", "bandwidth": f"{_num(net.bandwidth_kbps)}kbps"}
    if net.nodes:
        network["nodes"] = list(net.nodes)
    if net.links:
        network["links"] = [{"from": lk.src, "to": lk.dst, "latency": f"{_num(lk.latency_ms)}ms",
                             "bandwidth": f"{_num(lk.bandwidth_kbps)}kbps"} for lk in net.links]
    execution: dict[str, Any] = {"interval": f"{query.execution.interval_ms}ms",
                                 "max_delay": f"{query.execution.max_delay_ms}ms"}
    if query.execution.idle_timeout_ms != Execution().idle_timeout_ms:
        execution["idle_timeout"] = f"{query.execution.idle_timeout_ms}ms"
    if query.execution.bloom_fpr != Execution().bloom_fpr:
        execution["bloom_fpr"] = query.execution.bloom_fpr
    doc = {
        "name": query.name,
        "streams": streams,
        "join": [str(p) for p in query.predicates],
        "network": network,
        "execution": execution,
    }
    output = output_to_dict(query.output)
    if output is not None:
        doc["output"] = output
    return doc


def _stream_to_dict(s: Stream) -> Spec:
    spec: dict[str, Any] = {"site": s.site, "window": str(s.window)}
    st = s.stats
    if st.rate is not None:
        spec["rate"] = _num(st.rate)
    if st.attributes is not None:
        spec["attributes"] = st.attributes
    if st.tuple_bytes is not None:
        spec["tuple_bytes"] = st.tuple_bytes
    if st.selectivity:
        spec["selectivity"] = {a: f for a, f in st.selectivity}
    if s.source is not None:
        spec["source"] = source_to_dict(s.source)
    if s.where:
        spec["where"] = where_to_text(s.where)
    return spec


def dump_query(query: Query, path: Source) -> None:
    """Write ``query`` as a YAML query file that :func:`load_query` reads back equal."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(query_to_yaml(query), encoding="utf-8")


def query_to_yaml(query: Query) -> str:
    """The text of ``query``'s YAML file, written as the example files are (a stream or a link a line)."""
    doc = query_to_dict(query)
    doc["streams"] = {name: _Flow(spec) for name, spec in doc["streams"].items()}
    if "links" in doc["network"]:
        doc["network"]["links"] = [_Flow(link) for link in doc["network"]["links"]]
    if "output" in doc:
        doc["output"] = _Flow(doc["output"])
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, default_flow_style=False, allow_unicode=True,
                     width=120)


class _Flow(dict[str, Any]):
    """A mapping dumped on one line, as the example files write streams and links."""


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(
    _Flow, lambda dumper, data: dumper.represent_mapping("tag:yaml.org,2002:map", data.items(), flow_style=True))


def _num(x: float) -> Union[int, float]:
    """Render 300.0 as 300 but keep 12.5 (and repr precision for anything else)."""
    return int(x) if float(x).is_integer() else x
