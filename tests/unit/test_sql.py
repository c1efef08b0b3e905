"""SQL query files (joinlib/sql, docs/sql.md): the examples read as their YAML twins, every option reaches the
query, and every error case docs/sql.md lists says what it says at the line and column it says."""
from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from joinlib.errors import QueryError
from joinlib.output_spec import Column, Output
from joinlib.query import load_query, parse_query, query_to_dict
from joinlib.sql import SqlError, load_query_file, load_sql, parse_sql, query_to_sql

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"

DECLS = """CREATE STREAM s1 (id BIGINT, ts BIGINT, dest VARCHAR) WITH (site = 'r1');
CREATE STREAM s2 (id BIGINT, ts BIGINT, dest VARCHAR) WITH (site = 'r2');
CREATE STREAM s3 (id BIGINT, ts BIGINT, dest VARCHAR) WITH (site = 'r3');
"""
QUERY = """CREATE STREAM out AS
  SELECT *
  FROM s1
  JOIN s2 WITHIN 3 SECONDS ON s1.dest = s2.dest
  JOIN s3 WITHIN 3 SECONDS ON s2.dest = s3.dest
  EMIT CHANGES;
"""
BASE = DECLS + QUERY

ISSUE_EXAMPLE = """
CREATE STREAM s1 (id BIGINT, ts BIGINT, dest VARCHAR, bytes INT)
  WITH (topic = 'events.r1', format = 'json', timestamp = 'ts', site = 'r1');
CREATE STREAM s2 (id BIGINT, ts BIGINT, dest VARCHAR, bytes INT)
  WITH (topic = 'events.r2', format = 'json', timestamp = 'ts', site = 'r2');
CREATE STREAM s3 (id BIGINT, ts BIGINT, dest VARCHAR, bytes INT)
  WITH (topic = 'events.r3', format = 'json', timestamp = 'ts', site = 'r3');
CREATE STREAM matches WITH (topic = 'matches', format = 'json') AS
  SELECT s1.dest, s1.id AS id1, s2.id AS id2, s3.bytes
  FROM s1 JOIN s2 WITHIN 3 SECONDS ON s1.dest = s2.dest
          JOIN s3 WITHIN 3 SECONDS ON s2.dest = s3.dest
  EMIT CHANGES;
"""


def _position(text: str, needle: str, nth: int = 1) -> tuple[int, int]:
    at = -1
    for _ in range(nth):
        at = text.index(needle, at + 1)
    line = text.count("\n", 0, at) + 1
    return line, at - (text.rfind("\n", 0, at) + 1) + 1


def test_the_sql_example_is_the_yaml_example() -> None:
    sql = load_sql(EXAMPLES / "routers_selective.sql")
    assert replace(sql, output=Output()) == load_query(EXAMPLES / "routers_selective.yaml")   # but its SELECT list
    assert [str(c) for c in sql.output.columns or ()] == ["S1.dest", "S1.id AS id1", "S2.id AS id2", "S3.id AS id3",
                                                         "S3.a0 AS payload3"]


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_yaml_example_round_trips_through_sql(path: Path) -> None:
    q = load_query(path)
    assert parse_sql(query_to_sql(q), "x.sql") == q


def test_the_issue_example() -> None:
    q = parse_sql(ISSUE_EXAMPLE, "m.sql")
    assert q.name == "matches"
    assert q.names == ("s1", "s2", "s3")
    assert [str(p) for p in q.predicates] == ["s1.dest = s2.dest", "s2.dest = s3.dest"]
    assert all(s.window.kind == "time" and s.window.size == 3000 for s in q.streams)
    source = q.stream("s2").source
    assert source is not None and source.topic == "events.r2" and source.time_field == "ts"
    assert q.output == Output((Column("s1", "dest"), Column("s1", "id", "id1"), Column("s2", "id", "id2"),
                               Column("s3", "bytes")), "matches", "json")


def test_windows_from_within_and_the_from_streams_own() -> None:
    q = parse_sql(BASE.replace("JOIN s2 WITHIN 3 SECONDS", "JOIN s2 WITHIN 500 MILLISECONDS")
                  .replace("JOIN s3 WITHIN 3 SECONDS", "JOIN s3 WITHIN 20 ROWS"), "q.sql")
    assert [str(s.window) for s in q.streams] == ["500ms", "500ms", "20 tuples"]
    q = parse_sql(BASE.replace("(site = 'r1')", "(site = 'r1', window = '2min')"), "q.sql")
    assert str(q.stream("s1").window) == "120000ms"


def test_every_option() -> None:
    sql = """
    CREATE STREAM a (id BIGINT, t BIGINT, k VARCHAR, j VARCHAR, p VARCHAR) WITH (
        site = 'n1', rate = 12.5, attributes = 3, tuple_bytes = 40, selectivity = 'k: 0.1, j: 0.5',
        topic = 'ev.a', format = 'json', timestamp = 't', timestamp_unit = 's', id = 'id', carry = 'p',
        start = 'earliest');
    CREATE STREAM b WITH ('site' = 'n2', selectivity = 0.25, topic = 'ev.b', format = 'sourcebatch');
    CREATE STREAM c WITH (site = 'n3', topic = 'ev.c', timestamp = 'ts', carry = 'all',
        registry = 'http://localhost:8081', format = 'avro');
    CREATE STREAM "q-1" WITH (topic = 'rows', latency = '5ms', bandwidth = '2mbps', nodes = 'dc, dc2',
        links = 'n1 -> dc 1ms 10mbps, dc -> n2 3ms', interval = '50ms', max_delay = '10ms', idle_timeout = '2s',
        bloom_fpr = 0.001) AS
      SELECT x.k, b.*, c.k AS ck
      FROM a AS x
      JOIN b WITHIN 2 SECONDS ON x.k = b.k AND x.j = b.j
      JOIN c WITHIN 100 ROWS ON b.k = c.k;
    """
    q = parse_sql(sql, "q.sql")
    d = query_to_dict(q)
    assert d["name"] == "q-1"
    assert d["streams"]["a"] == {
        "site": "n1", "window": "2000ms", "rate": 12.5, "attributes": 3, "tuple_bytes": 40,
        "selectivity": {"k": 0.1, "j": 0.5},
        "source": {"topic": "ev.a", "format": "json", "time": {"field": "t", "unit": "s"}, "id": "id",
                   "attributes": ["p"], "start": "earliest"}}
    assert d["streams"]["b"]["selectivity"] == {"k": 0.25, "j": 0.25}
    assert d["streams"]["b"]["source"] == {"topic": "ev.b", "format": "sourcebatch", "start": "latest"}
    assert d["streams"]["c"]["source"]["attributes"] == "all"
    assert d["streams"]["c"]["source"]["registry"] == "http://localhost:8081"
    assert d["join"] == ["a.k = b.k", "a.j = b.j", "b.k = c.k"]
    assert d["network"] == {"latency": "5ms", "bandwidth": "2000kbps", "nodes": ["dc", "dc2"], "links": [
        {"from": "n1", "to": "dc", "latency": "1ms", "bandwidth": "10000kbps"},
        {"from": "dc", "to": "n2", "latency": "3ms", "bandwidth": "2000kbps"}]}
    assert d["execution"] == {"interval": "50ms", "max_delay": "10ms", "idle_timeout": "2000ms", "bloom_fpr": 0.001}
    assert d["output"] == {"select": ["a.k", "b.*", "c.k AS ck"], "topic": "rows"}
    assert parse_sql(query_to_sql(q), "again.sql") == q
    assert parse_query(d, "q.yaml") == q


def test_a_topology_file_and_the_querys_own_options(tmp_path: Path) -> None:
    (tmp_path / "topo.yaml").write_text("latency: 7ms\nbandwidth: 45mbps\nnodes: [dc]\n"
                                        "links:\n  - {from: r1, to: dc, latency: 2ms}\n")
    (tmp_path / "q.sql").write_text(BASE.replace("CREATE STREAM out AS",
                                                 "CREATE STREAM out WITH (topology = 'topo.yaml', latency = '9ms') AS"))
    q = load_query_file(tmp_path / "q.sql")
    assert q.network.latency_ms == 9 and q.network.bandwidth_kbps == 45000 and q.network.nodes == ("dc",)
    assert q.network.link("r1", "dc") == (2.0, 45000.0)


def test_names_comments_aliases_and_unqualified_columns() -> None:
    sql = """-- WITHIN 9 SECONDS in a comment is not a window
    CREATE STREAM "Select" (id BIGINT, k VARCHAR) WITH (site = 'a');  /* EMIT CHANGES */
    CREATE STREAM s2 (id BIGINT, k2 VARCHAR) WITH (site = 'b');
    create stream out as select k, k2 AS "within" from "Select" x join s2 within 1 second on x.k = k2;
    """
    q = parse_sql(sql, "q.sql")
    assert q.names == ("Select", "s2")
    assert [str(p) for p in q.predicates] == ["Select.k = s2.k2"]
    assert q.output.columns == (Column("Select", "k"), Column("s2", "k2", "within"))
    assert parse_sql(query_to_sql(q), "x.sql") == q


def test_predicates_keep_their_order_unless_no_sql_can() -> None:
    d = {"name": "q", "streams": {n: {"site": n, "window": "1s"} for n in ("A", "B", "C", "D")},
         "join": ["A.k = B.k", "C.k = D.k", "B.k = C.k"]}
    q = parse_query(d, "q.yaml")
    again = parse_sql(query_to_sql(q), "q.sql")
    assert [str(p) for p in again.predicates] == ["A.k = B.k", "B.k = C.k", "C.k = D.k"]
    assert set(again.predicates) == set(q.predicates) and again.names == q.names


def test_yaml_output_section() -> None:
    d = {"name": "q", "streams": {"A": {"site": "a", "window": "1s"}, "B": {"site": "b", "window": "1s"}},
         "join": ["A.k = B.k"], "output": {"select": ["A.k", "B.id AS bid"], "topic": "t"}}
    q = parse_query(d, "q.yaml")
    assert q.output == Output((Column("A", "k"), Column("B", "id", "bid")), "t")
    assert query_to_dict(q)["output"] == {"select": ["A.k", "B.id AS bid"], "topic": "t"}
    for bad, message in ((["A.id", "B.id"], "output column 'id' is named twice \\(items 1 and 2"),
                         (["C.k"], "unknown stream 'C'"), (["A.k +1"], "cannot read")):
        with pytest.raises(QueryError, match=message):
            parse_query({**d, "output": {"select": bad}}, "q.yaml")
    avro: dict[str, Any] = {"select": ["A.k"], "topic": "t", "format": "avro", "registry": "http://localhost:8081"}
    assert parse_query({**d, "output": avro}, "q.yaml").output.registry == "http://localhost:8081"
    assert query_to_dict(parse_query({**d, "output": avro}, "q.yaml"))["output"] == avro
    avro_errors: list[tuple[dict[str, Any], str]] = [
        ({"format": "avro"}, "an Avro sink writes rows: give a SELECT list"),
        ({**avro, "select": ["*"]}, "instead of '\\*' or 'S1.\\*'"),
        ({**avro, "topic": None}, "an Avro sink needs its topic"),
        ({**avro, "registry": None}, "an Avro sink needs 'registry'"),
        ({**avro, "registry": "localhost"}, "output.registry: expected an http\\(s\\) URL"),
        ({"select": ["A.k"], "registry": "http://r"}, "'registry' applies to Avro sinks only"),
        ({"format": "csv"}, "unknown sink format 'csv'; choose from json, avro")]
    for output, message in avro_errors:
        with pytest.raises(QueryError, match=message):
            parse_query({**d, "output": output}, "q.yaml")


def _swap(old: str, new: str, text: str = BASE) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


def _where(condition: str) -> str:
    return _swap("  EMIT CHANGES", f"  WHERE {condition}\n  EMIT CHANGES")


# (name, SQL, the text the error points at (and which occurrence), what the message says): docs/sql.md "Errors"
ERRORS = [
    ("left-join", _swap("  JOIN s3", "  LEFT JOIN s3"), ("LEFT JOIN", 1), "LEFT JOIN is not supported"),
    ("right-join", _swap("  JOIN s3", "  RIGHT JOIN s3"), ("RIGHT JOIN", 1), "RIGHT JOIN is not supported"),
    ("full-join", _swap("  JOIN s3", "  FULL OUTER JOIN s3"), ("FULL OUTER", 1), "FULL JOIN is not supported"),
    ("cross-join", _swap("  JOIN s3 WITHIN 3 SECONDS ON s2.dest = s3.dest", "  CROSS JOIN s3 WITHIN 3 SECONDS"),
     ("CROSS JOIN", 1), "CROSS JOIN is not supported"),
    ("comma-join", _swap("FROM s1\n  JOIN s2 WITHIN 3 SECONDS ON s1.dest = s2.dest", "FROM s1, s2"),
     ("s2\n  JOIN", 1), "not listed with commas"),
    ("using", _swap("ON s2.dest = s3.dest", "USING (dest)"), ("dest)", 1), "JOIN ... USING is not supported"),
    ("missing-within", _swap("JOIN s3 WITHIN 3 SECONDS ON", "JOIN s3 ON"), ("JOIN s3", 1), "missing WITHIN"),
    ("missing-on", _swap(" ON s2.dest = s3.dest", ""), ("s3 WITHIN", 1), "missing ON"),
    ("within-unit", _swap("s3 WITHIN 3 SECONDS", "s3 WITHIN 3 SECS"), ("SECS", 1), "unknown window unit 'SECS'"),
    ("within-asymmetric", _swap("s3 WITHIN 3 SECONDS", "s3 WITHIN (1 SECOND, 2 SECONDS)"), ("(1 SECOND", 1),
     "asymmetric windows"),
    ("within-size", _swap("s3 WITHIN 3 SECONDS", "s3 WITHIN 1.5 MILLISECONDS"), ("WITHIN 1.5", 1),
     "WITHIN: '1.5ms' is 1.5 ms; it must be a whole number of milliseconds"),
    ("within-rows", _swap("s3 WITHIN 3 SECONDS", "s3 WITHIN 2.5 ROWS"), ("2.5", 1), "a whole number of rows"),
    ("within-from", _swap("FROM s1", "FROM s1 WITHIN 3 SECONDS"), ("WITHIN 3 SECONDS\n  JOIN s2", 1),
     "WITHIN belongs to a joined stream"),
    ("within-twice", _swap("s3 WITHIN 3 SECONDS", "s3 WITHIN 3 SECONDS WITHIN 4 SECONDS"), ("WITHIN 4", 1),
     "already has a WITHIN"),
    ("window-on-joined", _swap("(site = 'r2')", "(site = 'r2', window = '3s')"), ("window = '3s'", 1),
     "s2's window is its JOIN's WITHIN"),
    ("unknown-stream", _swap("JOIN s3", "JOIN s4"), ("s4", 1), "unknown stream s4"),
    ("unknown-stream-in-on", _swap("s2.dest = s3.dest", "s2.dest = s9.dest"), ("s9.dest", 1),
     "unknown stream s9 in s9.dest"),
    ("unknown-column", _swap("s2.dest = s3.dest", "s2.dest = s3.dst"), ("s3.dst", 1),
     "unknown column 'dst' of stream s3; did you mean 'dest'?"),
    ("unknown-column-selected", _swap("SELECT *", "SELECT s1.bytes"), ("s1.bytes", 1),
     "unknown column 'bytes' of stream s1"),
    ("unqualified-column", _swap("SELECT *", "SELECT dest"), ("dest\n", 1), "qualify column 'dest'"),
    ("not-joined-yet", _swap("ON s1.dest = s2.dest", "ON s1.dest = s3.dest"), ("s3.dest", 1),
     "s3 is not joined yet here"),
    ("non-equality", _swap("s2.dest = s3.dest", "s2.dest < s3.dest"), ("s2.dest <", 1),
     "only equality predicates join streams"),
    ("or", _swap("s2.dest = s3.dest", "s2.dest = s3.dest OR s1.dest = s3.dest"), ("s2.dest = s3.dest OR", 1),
     "OR is not supported in ON"),
    ("constant", _swap("s2.dest = s3.dest", "s2.dest = 'x'"), ("s2.dest = 'x'", 1),
     "compares with a constant: that is a filter; move it to the WHERE clause"),
    ("self-predicate", _swap("s2.dest = s3.dest", "s2.dest = s2.dest AND s2.dest = s3.dest"),
     ("s2.dest = s2.dest", 1), "joins s2 with itself"),
    ("reserved-attribute", _swap("s2.dest = s3.dest", "s2.id = s3.id"), ("s2.id", 1),
     "'id' is a reserved column of every data row"),
    ("disconnected", "CREATE STREAM s1 WITH (site = 'r1');\nCREATE STREAM s2 WITH (site = 'r2');\n"
                     "CREATE STREAM s3 WITH (site = 'r3');\n" + _swap("ON s2.dest = s3.dest", "ON s1.x = s2.x", QUERY),
     ("s1\n", 1), "the join graph is not connected: {s1, s2} and {s3} share no predicate"),
    ("where-or", _where("s1.dest = 'x' OR s2.dest = 'y'"), ("s1.dest = 'x' OR", 1),
     "OR is not supported in WHERE"),
    ("where-two-streams", _where("s1.dest <> 'x' AND s1.dest < s2.dest"), ("s1.dest < s2.dest", 1),
     "compares two streams' fields"),
    ("where-same-stream", _where("s1.dest = s1.dest"), ("s1.dest = s1.dest", 1), "compares two fields of one stream"),
    ("where-function", _where("upper(s1.dest) = 'X'"), ("s1.dest)", 1), "functions and expressions are not supported"),
    ("where-null", _where("s1.dest = NULL"), ("s1.dest = NULL", 1), "write s1.dest IS NULL"),
    ("where-not", _where("NOT s1.dest = 'x'"), ("s1.dest = 'x'", 1), "NOT is supported in IS NOT NULL"),
    ("where-in-kinds", _where("s1.dest IN ('a', 2)"), ("s1.dest IN", 1), "must be of one kind"),
    ("where-like", _where("s1.dest LIKE 3"), ("s1.dest LIKE", 1), "LIKE takes a 'pattern' string"),
    ("where-literal", _where("s1.dest = s1.dest + 1"), ("s1.dest + 1", 1), "expected a literal"),
    ("where-unknown-column", _where("s1.dst = 'x'"), ("s1.dst", 1), "unknown column 'dst' of stream s1"),
    ("where-unknown-stream", _where("s9.dest = 'x'"), ("s9.dest", 1), "unknown stream s9"),
    ("output-row-key", _swap("SELECT *", "SELECT s1.ts"), ("s1.ts", 1),
     "output column 'ts' would be the result row's own 'ts'"),
    ("group-by", _swap("  EMIT CHANGES", "  GROUP BY s1.dest"), ("GROUP BY", 1), "GROUP BY is not supported"),
    ("expression-selected", _swap("SELECT *", "SELECT s1.id + 1"), ("s1.id + 1", 1),
     "only columns can be selected yet"),
    ("output-column-twice", _swap("SELECT *", "SELECT s1.id, s2.id"), ("s2.id\n", 1),
     "output column 'id' is named twice"),
    ("emit-final", _swap("EMIT CHANGES", "EMIT FINAL"), ("EMIT FINAL", 1), "EMIT FINAL is not supported"),
    ("unknown-option", _swap("(site = 'r1')", "(site = 'r1', rat = 100)"), ("rat =", 1),
     "unknown option 'rat'; did you mean 'rate'?"),
    ("option-twice", _swap("(site = 'r1')", "(site = 'r1', site = 'r9')"), ("site = 'r9'", 1),
     "option 'site' is given twice"),
    ("option-value", _swap("(site = 'r1')", "(site = 'r1', rate = -3)"), ("-3", 1),
     "rate: expected a positive number of tuples per second, not -3"),
    ("option-unquoted", _swap("(site = 'r1')", "(site = r1)"), ("r1)", 1), "option values are 'strings' or numbers"),
    ("option-of-the-query", _swap("(site = 'r1')", "(site = 'r1', interval = '50ms')"), ("interval", 1),
     "'interval' is an option of the query"),
    ("option-of-a-stream", _swap("CREATE STREAM out AS", "CREATE STREAM out WITH (site = 'x') AS"),
     ("site = 'x'", 1), "'site' is an option of a source stream"),
    ("missing-site", _swap("WITH (site = 'r3')", ""), ("s3 (", 1), "stream s3 needs a site"),
    ("source-without-topic", _swap("(site = 'r1')", "(site = 'r1', timestamp = 'ts')"), ("timestamp", 1),
     "'timestamp' describes a Kafka source: add topic"),
    ("source-without-timestamp", _swap("(site = 'r1')", "(site = 'r1', topic = 'ev')"), ("topic", 1),
     "a json source needs its event time"),
    ("source-bad-format", _swap("(site = 'r1')", "(site = 'r1', topic = 'ev', timestamp = 'ts', format = 'csv')"),
     ("'csv'", 1), "format: unknown format 'csv'"),
    ("sink-format", _swap("CREATE STREAM out AS", "CREATE STREAM out WITH (format = 'csv') AS"), ("'csv'", 1),
     "unknown sink format 'csv'; choose from json, avro"),
    ("sink-avro-star", _swap("CREATE STREAM out AS", "CREATE STREAM out WITH (topic = 'm', format = 'avro') AS"),
     ("'avro'", 1), "an Avro sink's schema is derived from the SELECT list"),
    ("sink-avro-registry", _swap("SELECT *", "SELECT s1.dest", _swap(
        "CREATE STREAM out AS", "CREATE STREAM out WITH (topic = 'm', format = 'avro') AS")), ("'avro'", 1),
     "an Avro sink needs 'registry'"),
    ("sink-topic", _swap("CREATE STREAM out AS", "CREATE STREAM out WITH (topic = 'a b') AS"), ("'a b'", 1),
     "topic: expected a Kafka topic name"),
    ("links", _swap("CREATE STREAM out AS", "CREATE STREAM out WITH (links = 'x -> r1 5ms') AS"),
     ("'x -> r1", 1), "links[0].from: unknown site 'x'"),
    ("links-syntax", _swap("CREATE STREAM out AS", "CREATE STREAM out WITH (links = 'r1 r2') AS"),
     ("'r1 r2'", 1), "cannot read the link 'r1 r2'"),
    ("topology-missing", _swap("CREATE STREAM out AS", "CREATE STREAM out WITH (topology = 'nope.yaml') AS"),
     ("'nope.yaml'", 1), "cannot read the topology file"),
    ("duplicate-stream", DECLS + DECLS.splitlines()[1] + "\n" + QUERY, ("s2 (id", 2), "stream s2 is declared twice"),
    ("stream-twice-in-query", _swap("JOIN s3 WITHIN 3 SECONDS ON s2.dest = s3.dest",
                                    "JOIN s1 WITHIN 3 SECONDS ON s2.dest = s1.dest"), ("s1 WITHIN", 1),
     "stream s1 appears twice in the query"),
    ("declared-not-joined", DECLS + "CREATE STREAM s4 WITH (site = 'r4');\n" + QUERY, ("s4", 1),
     "stream s4 is declared but not in the query"),
    ("create-table", _swap("CREATE STREAM s1", "CREATE TABLE s1"), ("TABLE", 1), "CREATE TABLE is not supported"),
    ("set", "SET 'interval' = '50ms';\n" + BASE, ("SET", 1), "SET is not supported"),
    ("bare-select", DECLS + "SELECT * FROM s1;\n" + QUERY, ("SELECT * FROM", 1), "a bare SELECT"),
    ("no-query", DECLS, None, "no query"),
    ("two-queries", BASE + QUERY, ("out", 2), "a second query"),
    ("query-name", _swap("CREATE STREAM out", 'CREATE STREAM "a.b"'), ('"a.b"', 1),
     "'a.b' is not a valid query name"),
    ("unclosed-quote", _swap("s2.dest = s3.dest", "s2.dest = 's3.dest"), ("'s3", 1), "this ' is never closed"),
    ("syntax", _swap("s2.dest = s3.dest", "s2.dest = = s3.dest"), ("= s3.dest", 1),
     "SQL syntax error: Required keyword: 'expression' missing for EQ"),
    ("syntax-join", _swap("FROM s1", "FROM s1 JOIN"), ("JOIN s2", 1), "SQL syntax error: Expected table name"),
    ("explain-run", _swap("CREATE STREAM out AS", "EXPLAIN CREATE STREAM out AS"), ("EXPLAIN", 1),
     "this query is EXPLAINed: 'joinlib explain FILE' prints its plan"),
    ("explain-declaration", _swap("CREATE STREAM s2", "EXPLAIN CREATE STREAM s2"), ("EXPLAIN", 1),
     "EXPLAIN goes on the query statement"),
    ("explain-nothing", BASE + "EXPLAIN;\n", ("EXPLAIN", 1), "EXPLAIN of nothing"),
]


@pytest.mark.parametrize(("sql", "where", "message"), [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_error_cases(sql: str, where: tuple[str, int] | None, message: str) -> None:
    with pytest.raises(SqlError) as info:
        parse_sql(sql, "q.sql")
    e = info.value
    assert message in e.problem, str(e)
    if where is None:
        lines = sql.split("\n")
        expected = (len(lines), len(lines[-1]) + 1)
    else:
        expected = _position(sql, *where)
    assert (e.line, e.column) == expected, str(e)
    assert str(e).startswith(f"q.sql:{e.line}:{e.column}: {e.problem}")
    if where is not None:  # the line quoted, a caret under the spot
        assert str(e).splitlines()[-1].strip() == "^"
        assert str(e).splitlines()[-1].index("^") - 4 == e.column - 1


def test_the_docs_list_every_error_case() -> None:
    docs = (REPO / "docs" / "sql.md").read_text()
    for name, *_ in ERRORS:
        assert f"`{name}`" in docs, f"docs/sql.md does not list the error case {name}"


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "joinlib", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})


def test_cli_converts_both_ways_and_runs_sql_like_yaml(tmp_path: Path) -> None:
    yaml_q = tmp_path / "q.yaml"
    yaml_q.write_text((EXAMPLES / "routers_selective.yaml").read_text())
    out = _cli("sql", str(yaml_q), "--from-yaml", "-o", str(tmp_path / "q.sql"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    back = _cli("sql", str(tmp_path / "q.sql"), "--to-yaml", cwd=tmp_path)
    assert back.returncode == 0, back.stderr
    (tmp_path / "back.yaml").write_text(back.stdout)
    assert load_query(tmp_path / "back.yaml") == load_query(yaml_q)
    gen = _cli("gen", str(tmp_path / "q.sql"), "--out", "d", "--duration", "4s", "--no-progress", cwd=tmp_path)
    assert gen.returncode == 0, gen.stderr
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["S1.jsonl", "S2.jsonl", "S3.jsonl"]
    for fmt in ("sql", "yaml"):
        run = _cli("run", f"q.{fmt}", "--data", "d", "--plan", "auto", "--out", f"{fmt}.jsonl", "--quiet",
                   "--no-progress", "--check", cwd=tmp_path)
        assert run.returncode == 0, run.stderr
    rows = (tmp_path / "sql.jsonl").read_text()
    assert rows == (tmp_path / "yaml.jsonl").read_text()
    assert [json.loads(r)["ids"].keys() for r in rows.splitlines()][:1] in ([], [{"S1", "S2", "S3"}])


def test_cli_errors_are_one_message_without_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "bad.sql").write_text(_swap("  JOIN s3", "  LEFT JOIN s3"))
    for args in (("plan", "bad.sql"), ("sql", "bad.sql", "--to-yaml"), ("sql", "bad.sql", "--from-yaml")):
        run = _cli(*args, cwd=tmp_path)
        assert run.returncode == 2, run.stderr
        assert run.stderr.startswith("error: ") and "Traceback" not in run.stderr, run.stderr
    assert "bad.sql:8:3: LEFT JOIN is not supported" in _cli("plan", "bad.sql", cwd=tmp_path).stderr
    with pytest.raises(QueryError, match="an SQL query file"):
        load_query(tmp_path / "bad.sql")


def test_explain_is_read_by_explain_only() -> None:
    """``EXPLAIN CREATE STREAM ...`` and ``EXPLAIN SELECT ...`` read into the query they prefix (with ``explain``);
    a bare EXPLAIN SELECT is named by its file, as a YAML query without a name."""
    plain = parse_sql(BASE, "q.sql")
    assert parse_sql(_swap("CREATE STREAM out AS", "explain CREATE STREAM out AS"), "q.sql", explain=True) == plain
    bare = _swap("CREATE STREAM out AS\n", "EXPLAIN\n")
    assert parse_sql(bare, "dir/routers.sql", explain=True) == replace(plain, name="routers")
    assert parse_sql(bare, "<sql>", explain=True).name == "explain"
    assert parse_sql(BASE, "q.sql", explain=True) == plain   # explain accepts a query without EXPLAIN too
    with pytest.raises(SqlError, match="a bare SELECT"):   # SELECT alone is still no query
        parse_sql(_swap("CREATE STREAM out AS\n", ""), "q.sql", explain=True)
    # EXPLAIN inside a string or a comment is no keyword
    quoted = _swap("CREATE STREAM out AS", "-- EXPLAIN this\nCREATE STREAM \"EXPLAIN\" AS")
    assert parse_sql(quoted, "q.sql").name == "EXPLAIN"
