"""``joinlib run QUERY --data DIR --plan adaptive[:cnu|:dnu]``: exact output, the report, mistakes."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from joinlib.adaptive.workload import Toggle, write_toggle
from joinlib.cli.main import main
from joinlib.query import load_query

ROOT = Path(__file__).resolve().parents[2]
TOGGLE4 = str(ROOT / "examples" / "toggle4.yaml")


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """S4 of the 4-way toggle query at 50/s, 200/s from 1.5 s, 50/s from 3.5 s (4.5 s of data)."""
    d = tmp_path_factory.mktemp("toggle4")
    write_toggle(load_query(TOGGLE4), Toggle("S4"), d, 4500, 2)
    return d


@pytest.mark.parametrize("plan", ["adaptive", "adaptive:dnu"])
def test_adaptive_run_is_exact_and_reports_its_plan_changes(data, tmp_path, plan, capsys):
    out, rep = tmp_path / "out.jsonl", tmp_path / "rep.json"
    assert main(["run", TOGGLE4, "--data", str(data), "--plan", plan, "--out", str(out), "--report", str(rep),
                 "--no-progress", "--check"]) == 0
    captured = capsys.readouterr()
    text = captured.out
    assert "missing 0, extra or duplicated 0" in text
    # the log (stderr): each trigger and each node's switch as they happen
    assert captured.err.count("S4 at N4 changed past the threshold") == 2
    assert captured.err.count("switched to plan generation 2 from head epoch") == 4
    assert f"adaptive ({'DNU' if plan.endswith('dnu') else 'CNU'})" in text and "generation 1 from head epoch" in text
    report = json.loads(rep.read_text())
    ad = report["adaptive"]
    assert ad["mode"] == ("dnu" if plan.endswith("dnu") else "cnu")
    # up at 1.5 s, down at 3.5 s: two plan changes, the second back to the initial plan
    assert [t["stream"] for t in ad["triggers"]] == ["S4", "S4"]
    assert len(ad["changes"]) == 2 and ad["changes"][1]["plan"] == ad["initial_plan"]
    assert [s["generation"] for s in report["switches"]] == [0, 1, 2]
    rnd = ad["rounds"][0]
    assert rnd["synchronisation"] == 2 * 4 * 3            # 2n(n-1): every node affected
    if plan == "adaptive":
        assert rnd["modification"] == 4                   # n: one report, n - 1 updates
    assert {ln["kind"] for ln in report["links"]} >= {"full", "modification", "migration", "sync"}
    assert ad["timeline"] and all(set(p) >= {"t_ms", "bytes", "transfer_ms"} for p in ad["timeline"])


@pytest.mark.parametrize("argv,message", [
    (["--plan", "adaptive:fast"], "expected adaptive, adaptive:cnu or adaptive:dnu"),
    (["--plan", "adaptive", "--switch", "1s:SP-S"], "--switch and --plan adaptive exclude each other"),
    (["--plan", "adaptive", "--adaptive-threshold", "0"], "threshold"),
    (["--plan", "adaptive", "--adaptive-planner", "N9"], "--adaptive-planner N9: not a site"),
    (["--plan", "adaptive", "--adaptive-interval", "soon"], "bad duration"),
])
def test_adaptive_mistakes_are_one_line_errors(data, argv, message, capsys):
    assert main(["run", TOGGLE4, "--data", str(data), "--no-progress", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and "Traceback" not in err


def test_run_help_explains_adaptive(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = capsys.readouterr().out
    assert "adaptive:dnu" in out and "--adaptive-threshold" in out
