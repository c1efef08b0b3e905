"""``joinlib explain``: its figures are the numbers they come from -- the byte model's per link and kind (what
``joinlib plan --explain`` prints), ``central``'s best site under the same model, the floor of
``python -m joinlib.costs.floor`` with data -- and the command reads SQL's EXPLAIN, which ``run`` refuses."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from joinlib.cli.main import main
from joinlib.costs.explanation import explain_plan, floor_estimate, format_explanation
from joinlib.costs.floor import floor
from joinlib.costs.floor import main as floor_main
from joinlib.costs.inputs import inputs_for
from joinlib.costs.model import WireModel
from joinlib.data.files import load_streams
from joinlib.errors import PlanError
from joinlib.plan.logical import central
from joinlib.planner.explained import explain_query
from joinlib.planner.registry import resolve_plan
from joinlib.sql import load_query_file

ROOT = Path(__file__).resolve().parents[2]
SQL = ROOT / "examples" / "routers_selective.sql"


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("routers_selective")
    assert main(["gen", str(SQL), "--out", str(d), "--duration", "6s", "--seed", "2", "--no-progress"]) == 0
    return d


@pytest.mark.parametrize("spec", ["auto", "SM-S1", "SP-D", "central:r2", "reduce", "greedy"])
def test_bytes_per_link_and_central_are_the_byte_models(spec: str) -> None:
    q = load_query_file(SQL)
    e = explain_query(q, spec)
    plan = resolve_plan(q, spec)
    est = WireModel(inputs_for(q)).estimate(q, plan)
    assert {(x.src, x.dst, x.kind): x.bytes_per_s for x in e.links} == est.by_link()
    assert e.bytes_per_s == pytest.approx(est.bytes_per_s)
    assert sum(v for _, v in e.kinds) == pytest.approx(est.bytes_per_s)
    assert sum(f.bytes_per_s for s in e.sites for f in s.sends) == pytest.approx(est.bytes_per_s)
    by_site = {n: WireModel(inputs_for(q)).estimate(q, central(q, n)).bytes_per_s for n in q.nodes}
    assert dict(e.central.by_site) == by_site
    assert e.central.bytes_per_s == min(by_site.values()) and by_site[e.central.site] == e.central.bytes_per_s
    assert e.vs_central == pytest.approx(e.bytes_per_s / e.central.bytes_per_s)
    assert e.floor.source == "model" and e.floor.bytes_per_s == min(floor_estimate(q).values())
    assert e.plan_json == plan.to_json()


def test_the_text_says_what_the_plan_estimate_says(capsys: pytest.CaptureFixture[str]) -> None:
    """The explain tree's totals are those ``joinlib plan --explain`` prints, and ``central:SITE``'s total is the
    central figure."""
    assert main(["plan", str(SQL), "--planner", "central:r1", "--explain"]) == 0
    central_total = capsys.readouterr().out.split("  total")[1].split()[0]
    assert main(["explain", str(SQL), "--plan", "SM-S1"]) == 0
    text = capsys.readouterr().out
    assert f"central: {central_total} B/s (all to r1" in text
    assert "site r1 (born here: S1; results)" in text and "joins S2 with SM-S1" in text
    assert main(["plan", str(SQL), "--planner", "SM-S1", "--explain"]) == 0
    plan_total = capsys.readouterr().out.split("  total")[1].split()[0]
    assert any(line.startswith("total") and line.split()[1] == plan_total for line in text.splitlines())


def test_with_data_the_floor_is_the_datas(data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    q = load_query_file(SQL)
    streams = load_streams(q, data)
    e = explain_query(q, "reduce", streams=streams)
    f = floor(q, streams)
    assert e.floor.source == "data" and e.floor.bytes == f.bytes and e.floor.site == f.site
    assert floor_main([str(SQL), str(data), "--json", str(tmp_path / "floor.json")]) == 0
    capsys.readouterr()
    assert json.loads((tmp_path / "floor.json").read_text())["floor"] == e.floor.bytes
    assert e.measured and e.duration_s is not None
    assert e.to_json()["bytes"] == pytest.approx(e.bytes_per_s * e.duration_s)
    assert main(["explain", str(SQL), "--plan", "reduce", "--data", str(data), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["floor"]["bytes"] == f.bytes and doc["floor"]["source"] == "data"
    assert doc["statistics"] == "measured" and doc["links"] == json.loads(json.dumps(e.to_json()["links"]))
    assert "per run" in format_explanation(e)


def test_json_is_the_explanation(capsys: pytest.CaptureFixture[str]) -> None:
    q = load_query_file(SQL)
    assert main(["explain", str(SQL), "--plan", "central:r3", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    e = explain_plan(q, resolve_plan(q, "central:r3"), "central:r3")
    assert doc == json.loads(json.dumps(e.to_json()))
    assert [s["site"] for s in doc["sites"]] == ["r1", "r2", "r3"]
    assert doc["sites"][2]["results"] and not doc["sites"][0]["results"]
    assert {(x["src"], x["dst"]) for x in doc["links"]} == {("r1", "r3"), ("r2", "r3")}


def test_explain_reads_sql_explain_and_run_refuses_it(tmp_path: Path, data: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    text = SQL.read_text().replace("CREATE STREAM routers_selective", "EXPLAIN CREATE STREAM routers_selective")
    f = tmp_path / "q.sql"
    f.write_text(text)
    assert main(["explain", str(f)]) == 0
    assert "query routers_selective, plan auto" in capsys.readouterr().out
    for argv in (["run", str(f), "--data", str(data)], ["submit", str(f), "--url", "http://127.0.0.1:9"],
                 ["reference", str(f), "--data", str(data), "--out", str(tmp_path / "o.jsonl")]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "this query is EXPLAINed: 'joinlib explain FILE'" in err and "Traceback" not in err
    assert main(["plan", str(f)]) == 0   # a plan is what EXPLAIN asks for


def test_errors_are_one_line(tmp_path: Path, data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", str(SQL), "--plan", "pmjoin:hash:2"]) == 2
    assert "explain shows plans of join sequences" in capsys.readouterr().err
    assert main(["explain", str(SQL), "--data", str(data), "--url", "http://127.0.0.1:9"]) == 2
    assert "--data goes without --url" in capsys.readouterr().err
    assert main(["explain", str(SQL), "--plan", "nope"]) == 2
    assert "unknown plan 'nope'" in capsys.readouterr().err
    assert main(["explain", str(tmp_path / "missing.sql")]) == 2
    assert main(["explain", str(SQL), "--url", "http://127.0.0.1:9"]) == 2
    assert "cannot reach the planner service" in capsys.readouterr().err
    with pytest.raises(PlanError):
        explain_query(load_query_file(SQL), "mjoin")


def test_adaptive_explains_its_first_plan() -> None:
    q = load_query_file(SQL)
    e = explain_query(q, "adaptive")
    assert e.plan == "adaptive" and e.bytes_per_s > 0 and e.description


def test_auto_with_data_explains_the_plan_run_runs(data: Path) -> None:
    """`joinlib explain --plan auto --data` shows the plan `joinlib run --plan auto` runs on that data (both weigh
    every run kind and measure the short list), not only the best plan of join sequences: with symmetric sites
    the two used to pick different, equally good result sites."""
    from joinlib.control.run_plan import Generations
    from joinlib.planner.registry import resolve_run_plan
    q = load_query_file(SQL)
    streams = load_streams(q, data)
    run = resolve_run_plan(q, "auto", streams=streams)
    assert isinstance(run, Generations)
    assert explain_query(q, "auto", streams=streams).plan_json == run.gens[0][1].to_json()
