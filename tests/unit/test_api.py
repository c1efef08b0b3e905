"""The Python API (docs/api.md): ``joinlib.run_embedded`` gives what ``joinlib run --out`` writes (rows of the SELECT
list, or ids) and the reference join's results; ``joinlib.explain`` what ``joinlib explain --json`` prints; mistakes
raise :class:`JoinlibError`; ``import joinlib`` loads neither the API nor a Kafka client."""
from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import joinlib
from joinlib.cli.main import main
from joinlib.data.files import load_streams
from joinlib.errors import JoinlibError
from joinlib.reference import reference_join
from joinlib.sql import load_query_file

ROOT = Path(__file__).resolve().parents[2]
SQL = ROOT / "examples" / "routers_selective.sql"
YAML = ROOT / "examples" / "routers.yaml"


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("api")
    assert main(["gen", str(SQL), "--out", str(d), "--duration", "8s", "--seed", "4", "--no-progress"]) == 0
    return d


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("plan", ["auto", "SM-S1", "central:r2"])
def test_run_embedded_is_joinlib_run(data: Path, tmp_path: Path, plan: str, capsys: pytest.CaptureFixture[str]) -> None:
    out, report = tmp_path / "out.jsonl", tmp_path / "report.json"
    assert main(["run", str(SQL), "--data", str(data), "--plan", plan, "--out", str(out), "--report", str(report),
                 "--quiet", "--no-progress"]) == 0
    res = joinlib.run_embedded(str(SQL), data, plan=plan)
    assert res.rows == _lines(out) and res.rows and set(res.rows[0]) >= {"dest", "ids", "ts"}
    assert res.bytes == json.loads(report.read_text())["bytes"] == res.report["bytes"]
    q = load_query_file(SQL)
    want = Counter({(tuple(ids), ts): n for (ids, ts), n in reference_join(q, load_streams(q, data)).items()})
    got = Counter((tuple(r["ids"][s] for s in q.names), r["ts"]) for r in res.rows)
    assert got == want
    # SQL text and a Path give the same
    assert joinlib.run_embedded(SQL.read_text(), data, plan=plan).rows == res.rows
    assert joinlib.run_embedded(SQL, data, plan=plan).ids == res.ids


def test_a_query_without_select_gives_ids(tmp_path: Path) -> None:
    d = tmp_path / "d"
    assert main(["gen", str(YAML), "--out", str(d), "--duration", "2s", "--seed", "3", "--no-progress"]) == 0
    assert main(["run", str(YAML), "--data", str(d), "--plan", "SP-S", "--out", str(tmp_path / "o.jsonl"),
                 "--quiet", "--no-progress"]) == 0
    res = joinlib.run_embedded(YAML, d, "SP-S")
    assert res.rows == _lines(tmp_path / "o.jsonl") and set(res.rows[0]) == {"ids", "ts"}


def test_explain_is_joinlib_explain(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", str(SQL), "--plan", "SM-S1", "--json"]) == 0
    e = joinlib.explain(SQL, "SM-S1")
    assert json.loads(json.dumps(e.to_json())) == json.loads(capsys.readouterr().out)
    assert str(e).startswith("query routers_selective, plan SM-S1")


def test_mistakes_raise(data: Path) -> None:
    explained = SQL.read_text().replace("CREATE STREAM routers_selective", "EXPLAIN CREATE STREAM routers_selective")
    with pytest.raises(JoinlibError, match="this query is EXPLAINed"):
        joinlib.run_embedded(explained, data)
    assert joinlib.explain(explained).query == "routers_selective"
    with pytest.raises(JoinlibError, match="run_embedded runs plans"):
        joinlib.run_embedded(SQL, data, "adaptive")
    with pytest.raises(JoinlibError, match="query file not found"):
        joinlib.run_embedded(ROOT / "nope.sql", data)
    with pytest.raises(JoinlibError, match="cannot reach the planner service"):
        joinlib.connect("http://127.0.0.1:9").submit(SQL)


def test_import_joinlib_is_light() -> None:
    code = ("import sys, joinlib; assert 'joinlib.api' not in sys.modules; joinlib.connect; "
            "assert 'joinlib.api' in sys.modules and 'confluent_kafka' not in sys.modules; print('ok')")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          cwd=ROOT).stdout.strip() == "ok"
