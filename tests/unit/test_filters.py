"""Filters (joinlib/filter_spec.py): the conditions SQL's WHERE and YAML's streams.S.where give, what they keep, the
live sources' decoder dropping records (never dead letters), and `joinlib run --out` writing rows."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from joinlib.errors import QueryError
from joinlib.filter_spec import Condition, compile_filter, parse_where_text
from joinlib.ingest.contract import Written, expected_output
from joinlib.ingest.records import Decoder, Event, Filtered
from joinlib.query import parse_query
from joinlib.sql import parse_sql

REPO = Path(__file__).resolve().parents[2]
DECLS = """CREATE STREAM s1 WITH (site = 'r1');
CREATE STREAM s2 WITH (site = 'r2');
"""


def _sql(where: str, select: str = "*") -> str:
    return DECLS + f"CREATE STREAM q AS SELECT {select} FROM s1 JOIN s2 WITHIN 1 SECOND ON s1.k = s2.k WHERE {where};"


def test_where_goes_to_the_stream_of_each_condition_in_order() -> None:
    q = parse_sql(_sql("s1.dest <> '10.0.0.1' AND s2.n IN (1, 2) AND 100 < s1.bytes AND s2.x IS NOT NULL AND "
                       "s1.dest LIKE '10.%' AND s2.n BETWEEN -1 AND 5"), "q.sql")
    assert q.stream("s1").where == (Condition("dest", "<>", ("10.0.0.1",)), Condition("bytes", ">", (100,)),
                                    Condition("dest", "LIKE", ("10.%",)))
    assert q.stream("s2").where == (Condition("n", "IN", (1, 2)), Condition("x", "IS NOT NULL"),
                                    Condition("n", ">=", (-1,)), Condition("n", "<=", (5,)))


def test_the_yaml_spelling_and_its_errors() -> None:
    doc: dict[str, Any] = {
        "streams": {"A": {"site": "a", "window": "1s", "where": "dest <> '10.0.0.1' AND bytes > 100"},
                    "B": {"site": "b", "window": "1s"}}, "join": ["A.k = B.k"]}
    q = parse_query(doc, "q.yaml")
    assert q.stream("A").where == (Condition("dest", "<>", ("10.0.0.1",)), Condition("bytes", ">", (100,)))
    for bad, message in (("a = 1 OR b = 2", "streams.A.where: OR is not supported in WHERE"),
                         ("B.a = 1", "streams.A.where: 'B.a': a filter of stream A tests its own fields"),
                         ("a >", "streams.A.where: cannot read 'a >' as a condition"),
                         (3, "streams.A.where: expected a condition")):
        with pytest.raises(QueryError, match=message):
            parse_query({**doc, "streams": {**doc["streams"], "A": {"site": "a", "window": "1s", "where": bad}}},
                        "q.yaml")


@pytest.mark.parametrize(("where", "keeps", "drops"), [
    ("n > 2", [{"n": 3}, {"n": 2.5}], [{"n": 2}, {"n": None}, {}, {"n": "9"}, {"n": True}]),
    ("n <> 2", [{"n": 3}], [{"n": 2}, {}, {"n": "x"}]),
    ("s IN ('a', 'b')", [{"s": "a"}], [{"s": "c"}, {}, {"s": 1}]),
    ("s NOT IN ('a')", [{"s": "b"}], [{"s": "a"}, {}, {"s": 1}]),
    ("s IS NULL", [{}, {"s": None}], [{"s": ""}]),
    ("s LIKE 'a_%'", [{"s": "ab"}, {"s": "abc"}], [{"s": "a"}, {"s": "ba"}, {"s": 1}]),
    ("s NOT LIKE 'a%'", [{"s": "b"}], [{"s": "ab"}, {}]),
    ("f = TRUE AND n = 1", [{"f": True, "n": 1.0}], [{"f": 1, "n": 1}, {"f": True, "n": 2}]),
])
def test_what_a_filter_keeps(where: str, keeps: list[dict[str, object]], drops: list[dict[str, object]]) -> None:
    keep = compile_filter(parse_where_text(where, "S"))
    assert keep is not None
    assert [keep(r) for r in keeps] == [True] * len(keeps)
    assert [keep(r) for r in drops] == [False] * len(drops)


def test_a_live_source_drops_filtered_records_without_dead_letters() -> None:
    q = parse_query({"streams": {
        "A": {"site": "a", "window": "1s", "where": "n > 1", "source": {"topic": "ta", "time": "ts", "id": "id"}},
        "B": {"site": "b", "window": "1s", "source": {"topic": "tb", "time": "ts", "id": "id"}}},
        "join": ["A.k = B.k"], "execution": {"max_delay": "0ms"}}, "q.yaml")
    dec = Decoder(q.streams[0], q.streams[0].source)  # type: ignore[arg-type]
    assert isinstance(dec.decode(b'{"id": 1, "ts": 5, "k": "x", "n": 0}', 0, 0), Filtered)
    assert isinstance(dec.decode(b'{"id": 1, "ts": 5, "k": "x", "n": 2}', 0, 0), Event)
    rec = [orjson.dumps({"id": i, "ts": 10 * i, "k": "x", "n": i % 3}) for i in range(6)]
    written = {"A": [Written(0, i, r) for i, r in enumerate(rec)], "B": [Written(0, i, r) for i, r in enumerate(rec)]}
    out = expected_output(q, written, 0)
    assert out.dead == {}
    assert [t.id for t in out.on_time["A"]] == [2, 5] and [t.seq for t in out.on_time["A"]] == [0, 1]


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "joinlib", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})


def test_joinlib_run_writes_rows_of_the_select_list(tmp_path: Path) -> None:
    example = REPO / "examples" / "routers_selective.sql"
    assert _cli("gen", str(example), "--out", "d", "--duration", "8s", "--no-progress", cwd=tmp_path).returncode == 0
    run = _cli("run", str(example), "--data", "d", "--plan", "auto", "--out", "rows.jsonl", "--quiet", "--no-progress",
               "--check", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    rows = [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert rows, "the example finds matches in 8 s"
    data = {s: {r["id"]: r for r in map(json.loads, (tmp_path / "d" / f"{s}.jsonl").read_text().splitlines())}
            for s in ("S1", "S2", "S3")}
    for row in rows:
        assert list(row) == ["dest", "id1", "id2", "id3", "payload3", "ids", "ts"]
        ids = row["ids"]
        assert (row["id1"], row["id2"], row["id3"]) == (ids["S1"], ids["S2"], ids["S3"])
        assert row["dest"] == data["S1"][ids["S1"]]["dest"] == data["S3"][ids["S3"]]["dest"]
        assert row["payload3"] == data["S3"][ids["S3"]]["a0"]
        assert row["ts"] == max(data[s][i]["ts"] for s, i in ids.items())
    # WITH (results = 'ids'): the ids format, as a YAML query without output.select
    ids_only = example.read_text().replace("interval = '100ms'", "interval = '100ms', results = 'ids'").replace(
        "SELECT S1.dest, S1.id AS id1, S2.id AS id2, S3.id AS id3, S3.a0 AS payload3", "SELECT *")
    (tmp_path / "ids.sql").write_text(ids_only)
    run = _cli("run", "ids.sql", "--data", "d", "--plan", "central", "--out", "ids.jsonl", "--quiet", "--no-progress",
               cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    lines = [json.loads(line) for line in (tmp_path / "ids.jsonl").read_text().splitlines()]
    def key(r: dict[str, object]) -> str:
        return json.dumps(r, sort_keys=True)
    assert sorted(map(key, lines)) == sorted(key({"ids": r["ids"], "ts": r["ts"]}) for r in rows)
