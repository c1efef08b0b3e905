"""Query-file parsing: the happy path, every error a user can make, and round trips."""
from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from joinlib.errors import JoinlibError, QueryError
from joinlib.model import Link, Window
from joinlib.query import dump_query, load_query, parse_query, query_to_dict

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

BRIEF = """
name: routers
streams:
  S1: {site: r1, window: 3s, rate: 300, attributes: 10, selectivity: {dest: 0.1}}
  S2: {site: r2, window: 500ms}
  S3: {site: r3, window: 100 tuples, tuple_bytes: 1250}
join:
  - S1.dest = S2.dest
  - S2.dest = S3.dst2
network:
  latency: 25ms
  bandwidth: 1024kbps
  links:
    - {from: r1, to: r2, latency: 10ms, bandwidth: 4mbps}
execution:
  interval: 100ms
  max_delay: 80ms
"""


def base() -> dict:
    return yaml.safe_load(BRIEF)


def test_brief_example_parses() -> None:
    q = parse_query(base(), "q.yaml")
    assert q.name == "routers"
    assert q.names == ("S1", "S2", "S3")
    assert [s.pos for s in q.streams] == [0, 1, 2]
    s1, s2, s3 = q.streams
    assert s1.window == Window("time", 3000) and s2.window == Window("time", 500)
    assert s3.window == Window("tuples", 100)
    assert s1.join_attrs == ("dest",) and s2.join_attrs == ("dest",) and s3.join_attrs == ("dst2",)
    assert s1.stats.rate == 300 and s1.stats.attributes == 10
    assert s1.stats.selectivity_of("dest") == 0.1
    assert s3.stats.tuple_bytes == 1250 and s3.stats.rate is None
    assert [str(p) for p in q.predicates] == ["S1.dest = S2.dest", "S2.dest = S3.dst2"]
    assert q.network.links == (Link("r1", "r2", 10.0, 4000.0),)
    assert q.network.link("r1", "r2") == (10.0, 4000.0)
    assert q.network.link("r2", "r1") == (25.0, 1024.0)
    assert (q.execution.interval_ms, q.execution.max_delay_ms) == (100, 80)
    assert q.sites == ("r1", "r2", "r3")


def test_defaults_and_name_from_file_stem(tmp_path: Path) -> None:
    path = tmp_path / "tiny_q.yaml"
    path.write_text("streams: {A: {site: x, window: 1s}, B: {site: y, window: 1s}}\njoin: [A.k = B.k]\n")
    q = load_query(path)
    assert q.name == "tiny_q"
    assert (q.network.latency_ms, q.network.bandwidth_kbps, q.network.links) == (25.0, 1024.0, ())
    assert (q.execution.interval_ms, q.execution.max_delay_ms) == (100, 80)


def test_join_attrs_in_order_of_first_appearance() -> None:
    d = base()
    d["streams"]["S4"] = {"site": "r4", "window": "1s"}
    d["join"] = ["S1.b = S2.b", "S1.a = S3.dst2", "S4.z = S1.b", "S2.c = S4.y"]
    del d["streams"]["S1"]["selectivity"]
    q = parse_query(d, "q.yaml")
    assert q.stream("S1").join_attrs == ("b", "a")
    assert q.stream("S2").join_attrs == ("b", "c")
    assert q.stream("S4").join_attrs == ("z", "y")


def test_scalar_selectivity_applies_to_every_join_attribute() -> None:
    d = base()
    d["join"].append("S1.src = S3.src")
    d["streams"]["S1"]["selectivity"] = 0.25
    s1 = parse_query(d, "q.yaml").stream("S1")
    assert s1.stats.selectivity == (("dest", 0.25), ("src", 0.25))


@pytest.mark.parametrize("text, ms", [
    ("3s", 3000), ("500ms", 500), ("1.5s", 1500), ("2min", 120000), ("1h", 3600000),
    (" 250 ms ", 250), ("0.025s", 25), ("1e3ms", 1000),
])
def test_time_windows(text: str, ms: int) -> None:
    d = base()
    d["streams"]["S1"]["window"] = text
    assert parse_query(d, "q.yaml").stream("S1").window == Window("time", ms)


@pytest.mark.parametrize("text, n", [("100 tuples", 100), ("1 tuple", 1), ("7tuples", 7)])
def test_tuple_windows(text: str, n: int) -> None:
    d = base()
    d["streams"]["S1"]["window"] = text
    assert parse_query(d, "q.yaml").stream("S1").window == Window("tuples", n)


@pytest.mark.parametrize("latency, ms", [("25ms", 25.0), ("0.025s", 25.0), (40, 40.0), ("12.5ms", 12.5), (0, 0.0)])
def test_latency_syntax(latency: object, ms: float) -> None:
    d = base()
    d["network"]["latency"] = latency
    assert parse_query(d, "q.yaml").network.latency_ms == ms


@pytest.mark.parametrize("bandwidth, kbps", [
    ("1024kbps", 1024.0), ("1mbps", 1000.0), ("2Mbps", 2000.0), ("512kbps", 512.0), (256, 256.0),
    ("1Gbps", 1e6), ("64000bps", 64.0), ("1.5mbps", 1500.0),
])
def test_bandwidth_syntax(bandwidth: object, kbps: float) -> None:
    d = base()
    d["network"]["bandwidth"] = bandwidth
    assert parse_query(d, "q.yaml").network.bandwidth_kbps == kbps


def test_link_defaults_to_network_values() -> None:
    d = base()
    d["network"]["links"] = [{"from": "r2", "to": "r3", "latency": "5ms"}]
    assert parse_query(d, "q.yaml").network.links == (Link("r2", "r3", 5.0, 1024.0),)


@dataclass
class Case:
    id: str
    edit: Callable[[dict], None]  # mutates the brief's document
    message: tuple[str, ...]  # substrings the message must contain


def _set(path: str, value: object):
    def edit(d: dict) -> None:
        *parents, last = path.split("/")
        for p in parents:
            d = d[int(p)] if isinstance(d, list) else d[p]
        d[last] = value
    return edit


def _del(path: str):
    def edit(d: dict) -> None:
        *parents, last = path.split("/")
        for p in parents:
            d = d[p]
        del d[last]
    return edit


ERRORS = [
    Case("unknown stream", _set("join", ["S1.dest = S2.dest", "S2.dest = S9.dst2"]),
         ("join[1]", "unknown stream 'S9'", "declared streams: S1, S2, S3")),
    Case("unknown stream suggestion", _set("join", ["S1.dest = S2.dest", "S2.dest = s3.dst2"]),
         ("unknown stream 's3'", "did you mean 'S3'")),
    Case("malformed predicate", _set("join", ["S1.dest = S2.dest", "S2 = S3.dst2"]),
         ("join[1]", "not an equi-join predicate", "A.x = B.y")),
    Case("double equals", _set("join", ["S1.dest == S2.dest", "S2.dest = S3.dst2"]),
         ("join[0]", "single '='")),
    Case("self join", _set("join", ["S1.dest = S1.src", "S2.dest = S3.dst2"]),
         ("join[0]", "joins S1 with itself")),
    Case("predicate not a string", _set("join", [{"S1.dest": "S2.dest"}]), ("join[0]", "expected a string")),
    Case("repeated predicate", _set("join", ["S1.dest = S2.dest", "S2.dest = S3.dst2", "S2.dest = S1.dest"]),
         ("join[2]", "repeats join[0]")),
    Case("join not a list", _set("join", "S1.dest = S2.dest"), ("join", "list of predicates")),
    Case("empty join", _set("join", []), ("join", "non-empty list")),
    Case("reserved attribute", _set("join", ["S1.ts = S2.dest", "S2.dest = S3.dst2"]),
         ("join[0]", "'ts' is a reserved column")),
    Case("unknown top-level key", lambda d: d.update(strems=d.pop("streams")),
         ("strems", "unknown key", "did you mean 'streams'")),
    Case("unknown stream key", _set("streams/S2/windw", "1s"),
         ("streams.S2.windw", "did you mean 'window'")),
    Case("unknown network key", _set("network/latncy", "5ms"), ("network.latncy", "did you mean 'latency'")),
    Case("unknown execution key", _set("execution/max_dely", "5ms"),
         ("execution.max_dely", "did you mean 'max_delay'")),
    Case("unknown link key", _set("network/links", [{"from": "r1", "too": "r2"}]),
         ("network.links[0].too", "did you mean 'to'")),
    Case("missing site", _del("streams/S2/site"), ("streams.S2", "missing 'site'")),
    Case("missing window", _del("streams/S3/window"), ("streams.S3", "missing 'window'")),
    Case("missing streams", _del("streams"), ("missing required key 'streams'",)),
    Case("missing join", _del("join"), ("missing required key 'join'",)),
    Case("one stream", _set("streams", {"S1": {"site": "a", "window": "1s"}}),
         ("streams", "at least 2 streams, found 1")),
    Case("stream spec not a mapping", _set("streams/S2", "r2"), ("streams.S2", "expected a mapping")),
    Case("bad stream name", lambda d: d["streams"].update({"my-stream": {"site": "x", "window": "1s"}}),
         ("streams.my-stream", "not a valid stream name")),
    Case("disconnected", _set("join", ["S1.dest = S2.dest"]),
         ("join", "not connected", "{S1, S2} and {S3}")),
    Case("bad window unit", _set("streams/S1/window", "3x"), ("streams.S1.window", "unknown unit 'x'", "'100 tuples'")),
    Case("bad window syntax", _set("streams/S1/window", "three seconds"), ("streams.S1.window", "cannot read")),
    Case("bare window number", _set("streams/S1/window", 3000), ("streams.S1.window", "ambiguous")),
    Case("fractional ms window", _set("streams/S1/window", "1.5ms"),
         ("streams.S1.window", "whole number of milliseconds")),
    Case("zero window", _set("streams/S1/window", "0s"), ("streams.S1.window", "must be positive")),
    Case("zero tuples", _set("streams/S1/window", "0 tuples"), ("streams.S1.window", "at least 1 tuple")),
    Case("negative duration", _set("execution/interval", -5), ("execution.interval", "must not be negative")),
    Case("bad interval", _set("execution/interval", "fast"), ("execution.interval", "cannot read")),
    Case("zero interval", _set("execution/interval", "0ms"), ("execution.interval", "must be positive")),
    Case("bad latency unit", _set("network/latency", "25 sec"), ("network.latency", "unknown unit 'sec'")),
    Case("bad bandwidth", _set("network/bandwidth", "fast"), ("network.bandwidth", "cannot read", "1024kbps")),
    Case("bandwidth unit", _set("network/bandwidth", "10MB"), ("network.bandwidth", "unknown unit 'mb'")),
    Case("zero bandwidth", _set("network/bandwidth", 0), ("network.bandwidth", "must be positive")),
    Case("selectivity not a join attr", _set("streams/S1/selectivity", {"dst": 0.1}),
         ("streams.S1.selectivity.dst", "not a join attribute", "did you mean 'dest'", "join attributes: dest")),
    Case("selectivity out of range", _set("streams/S1/selectivity", 1.5), ("streams.S1.selectivity", "0 < f <= 1")),
    Case("selectivity zero", _set("streams/S1/selectivity", {"dest": 0}), ("streams.S1.selectivity.dest", "0 < f")),
    Case("selectivity wrong type", _set("streams/S1/selectivity", "high"), ("streams.S1.selectivity", "a number")),
    Case("negative rate", _set("streams/S1/rate", -3), ("streams.S1.rate", "positive number")),
    Case("bool rate", _set("streams/S1/rate", True), ("streams.S1.rate", "positive number")),
    Case("fractional attributes", _set("streams/S1/attributes", 2.5), ("streams.S1.attributes", "integer")),
    Case("zero tuple bytes", _set("streams/S3/tuple_bytes", 0), ("streams.S3.tuple_bytes", "positive integer")),
    Case("link unknown site", _set("network/links", [{"from": "r1", "to": "r7"}]),
         ("network.links[0].to", "unknown site 'r7'", "sites of this query: r1, r2, r3")),
    Case("link missing end", _set("network/links", [{"from": "r1"}]), ("network.links[0]", "missing 'to'")),
    Case("link to itself", _set("network/links", [{"from": "r1", "to": "r1"}]), ("network.links[0]", "itself")),
    Case("link twice", _set("network/links", [{"from": "r1", "to": "r2"}, {"from": "r1", "to": "r2"}]),
         ("network.links[1]", "declared twice")),
    Case("links not a list", _set("network/links", {"from": "r1"}), ("network.links", "expected a list")),
    Case("network not a mapping", _set("network", "fast"), ("network", "expected a mapping")),
    Case("bad query name", _set("name", "my.query"), ("name", "not a valid query name")),
    Case("site not a name", _set("streams/S1/site", ["r1"]), ("streams.S1.site", "expected a site name")),
]


@pytest.mark.parametrize("case", ERRORS, ids=[c.id for c in ERRORS])
def test_query_errors(case: Case) -> None:
    d = copy.deepcopy(base())
    case.edit(d)
    with pytest.raises(QueryError) as exc:
        parse_query(d, "bad.yaml")
    msg = str(exc.value)
    assert msg.startswith("bad.yaml: ")
    for part in case.message:
        assert part in msg, f"{part!r} not in {msg!r}"


@pytest.mark.parametrize("doc, message", [
    (None, "empty"), ([1, 2], "must be a mapping"), ("hello", "must be a mapping"),
])
def test_document_not_a_mapping(doc: object, message: str) -> None:
    with pytest.raises(QueryError, match=message):
        parse_query(doc, "x.yaml")


FILE_ERRORS = [
    ("invalid yaml", "streams: {S1: [unclosed\n", ("invalid YAML at line", "fix the syntax")),
    ("tab indentation", "streams:\n\tS1: {}\n", ("invalid YAML",)),
    ("duplicate stream", "streams:\n  S1: {site: a, window: 1s}\n  S1: {site: b, window: 1s}\njoin: []\n",
     ("invalid YAML at line 3", "duplicate key 'S1'")),
    ("empty file", "", ("empty",)),
    ("bad stem as name", "streams: {A: {site: x, window: 1s}, B: {site: y, window: 1s}}\njoin: [A.k = B.k]\n",
     ("not a valid query name", "name: my_query")),
]


@pytest.mark.parametrize("case, text, message", FILE_ERRORS, ids=[c[0] for c in FILE_ERRORS])
def test_file_errors(tmp_path: Path, case: str, text: str, message: tuple[str, ...]) -> None:
    path = tmp_path / "a query.yaml"
    path.write_text(text)
    with pytest.raises(QueryError) as exc:
        load_query(path)
    assert str(path) in str(exc.value)
    for part in message:
        assert part in str(exc.value)


def test_missing_and_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(QueryError, match="query file not found"):
        load_query(tmp_path / "nope.yaml")
    with pytest.raises(QueryError, match="is a directory"):
        load_query(tmp_path)
    bad = tmp_path / "bin.yaml"
    bad.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(QueryError, match="cannot read"):
        load_query(bad)


def test_query_error_is_a_joinlib_error() -> None:
    assert issubclass(QueryError, JoinlibError)


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_examples_load_and_round_trip(path: Path, tmp_path: Path) -> None:
    q = load_query(path)
    assert q.name == path.stem
    assert parse_query(query_to_dict(q), str(path)) == q
    dump_query(q, tmp_path / "out" / path.name)
    assert load_query(tmp_path / "out" / path.name) == q


def test_examples_exist() -> None:
    names = {p.stem for p in EXAMPLES.glob("*.yaml")}
    assert {"routers", "fig7", "chain3", "star4"} <= names
    star = load_query(EXAMPLES / "star4.yaml")
    assert {s.window.kind for s in star.streams} == {"time", "tuples"}
    assert len({(p.left_attr, p.right_attr) for p in star.predicates}) == len(star.predicates)


def test_brief_round_trip(tmp_path: Path) -> None:
    q = parse_query(base(), "q.yaml")
    dump_query(q, tmp_path / "q.yaml")
    assert load_query(tmp_path / "q.yaml") == q


_ms = st.integers(min_value=1, max_value=10_000_000)


@settings(max_examples=60, deadline=None)
@given(windows=st.lists(st.one_of(_ms.map(lambda n: f"{n}ms"), st.integers(1, 5000).map(lambda n: f"{n} tuples")),
                        min_size=2, max_size=5),
       latency=st.floats(min_value=0, max_value=1e4, allow_nan=False),
       bandwidth=st.floats(min_value=1e-3, max_value=1e7, allow_nan=False),
       rate=st.one_of(st.none(), st.floats(min_value=1e-3, max_value=1e6)),
       f=st.floats(min_value=1e-6, max_value=1.0))
def test_round_trip_property(windows: list[str], latency: float, bandwidth: float, rate: object, f: float) -> None:
    streams = {f"S{i}": {"site": f"n{i % 3}", "window": w, "selectivity": f} for i, w in enumerate(windows)}
    if rate is not None:
        streams["S0"]["rate"] = rate
    join = [f"S{i}.k = S{i + 1}.k" for i in range(len(windows) - 1)]
    doc = {"name": "p", "streams": streams, "join": join,
           "network": {"latency": latency, "bandwidth": bandwidth}}
    q = parse_query(doc, "p.yaml")
    again = parse_query(yaml.safe_load(yaml.safe_dump(query_to_dict(q))), "p.yaml")
    assert again == q
