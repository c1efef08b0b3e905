"""The CLI contract other tools rely on: commands, output format, exit codes, messages."""
from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from joinlib.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
ROUTERS = str(ROOT / "examples" / "routers.yaml")


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("routers")
    assert main(["gen", ROUTERS, "--out", str(d), "--duration", "2s", "--seed", "3", "--no-progress"]) == 0
    return d


def results(path: Path) -> Counter:
    return Counter((tuple(sorted(r["ids"].items())), r["ts"])
                   for r in map(json.loads, path.read_text().splitlines()))


@pytest.mark.parametrize("plan", ["SP-S", "SM-S2", "SM-D2", "central", "central:r2", "greedy"])
def test_run_writes_exactly_the_reference_output(data, tmp_path, plan, capsys):
    out, ref, rep = tmp_path / "out.jsonl", tmp_path / "ref.jsonl", tmp_path / "rep.json"
    assert main(["run", ROUTERS, "--data", str(data), "--plan", plan, "--out", str(out),
                 "--report", str(rep), "--no-progress", "--check"]) == 0
    assert "missing 0, extra or duplicated 0" in capsys.readouterr().out
    assert main(["reference", ROUTERS, "--data", str(data), "--out", str(ref)]) == 0
    assert results(out) == results(ref) and sum(results(ref).values()) > 0
    report = json.loads(rep.read_text())
    assert report["results"] == sum(results(ref).values())
    assert {ln["kind"] for ln in report["links"]} <= {"full", "partial", "update"}
    first = json.loads(out.read_text().splitlines()[0])
    assert set(first) >= {"ids", "ts"} and set(first["ids"]) == {"S1", "S2", "S3"}


def test_plan_json_round_trips_into_run(data, tmp_path, capsys):
    plan = tmp_path / "plan.json"
    assert main(["plan", ROUTERS, "--planner", "exhaustive", "--out", str(plan)]) == 0
    spec = json.loads(plan.read_text())
    assert set(spec) == {"S1", "S2", "S3"}
    assert main(["run", ROUTERS, "--data", str(data), "--plan", str(plan), "--quiet", "--no-progress"]) == 0


def test_plan_switches_keep_the_output_exact(data, tmp_path, capsys):
    """--switch AT:PLAN: the old plan joins the head tuples of the epochs before AT, the new one
    the rest; the output is the reference join's, and the report lists the generations."""
    out, rep = tmp_path / "out.jsonl", tmp_path / "rep.json"
    assert main(["run", ROUTERS, "--data", str(data), "--plan", "SM-S1", "--switch", "650ms:central:r2",
                 "--switch", "1.2s:SP-D", "--out", str(out), "--report", str(rep), "--no-progress", "--check"]) == 0
    text = capsys.readouterr().out
    assert "missing 0, extra or duplicated 0" in text
    assert "generation 1: head epochs 7 to epoch 11" in text and "generation 2: head epochs 12 to the end" in text
    report = json.loads(rep.read_text())
    assert [g["from_epoch"] for g in report["plan"]] == [0, 7, 12]
    assert [s["generation"] for s in report["switches"]] == [0, 1, 2]
    assert "snapshot" in {ln["kind"] for ln in report["links"]}  # r2's replicas of generation 1 jump-started
    assert report["p99_latency_ms"] >= report["p50_latency_ms"] > 0


@pytest.mark.parametrize("argv, message", [
    (["run", ROUTERS, "--data", ".", "--plan", "SP-S", "--switch", "soon:SM-S1"],
     "--switch 'soon:SM-S1': bad duration"),
    (["run", ROUTERS, "--data", ".", "--plan", "SP-S", "--switch", "2s"], "expected AT:PLAN"),
    (["run", ROUTERS, "--data", ".", "--plan", "SP-S", "--switch", "2s:nonsense"], "unknown plan 'nonsense'"),
    (["run", ROUTERS, "--data", ".", "--plan", "SP-S", "--switch", "1s:SP-D", "--switch", "950ms:SM-S1"],
     "another switch is at the same epoch 10"),
    (["run", "/no/such.yaml", "--data", ".", "--plan", "SP-S"], "query file not found"),
    (["run", ROUTERS, "--data", "/no/such/dir", "--plan", "SP-S"], "data file of stream S1 not found"),
    (["run", ROUTERS, "--data", ".", "--plan", "nonsense"], "unknown plan 'nonsense'"),
    (["run", ROUTERS, "--data", ".", "--plan", "central:mars"], "no such node"),
    (["gen", ROUTERS, "--out", "/tmp/x", "--duration", "ten"], "bad duration"),
])
def test_user_mistakes_give_one_line_and_status_2(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and "Traceback" not in err


@pytest.mark.parametrize("extra, message", [
    (["--kill", "r1@2"], "--kill needs --cluster"),
    (["--cluster", "127.0.0.1:1", "--kill", "r1"], "expected SITE@SECONDS"),
    (["--cluster", "127.0.0.1:1", "--kill", "mars@1"], "no site 'mars'"),
    (["--cluster", "127.0.0.1:1", "--kill", "r1@-3"], "expected SITE@SECONDS"),
    (["--scale-out"], "--scale-out and --join need --cluster"),
    (["--cluster", "127.0.0.1:1", "--scale-out", "r1=0"], "expected SITE=N,... with N >= 1"),
    (["--cluster", "127.0.0.1:1", "--scale-out", "mars=2"], "no site 'mars'"),
    (["--cluster", "127.0.0.1:1", "--scale-out", "r1=2"], "scaling out needs a partitioned plan"),
    (["--cluster", "127.0.0.1:1", "--join", "r1@2"], "--join needs --scale-out"),
    (["--cluster", "127.0.0.1:1", "--scale-out", "--join", "r1"], "--join 'r1': expected SITE@SECONDS"),
])
def test_bad_kill_options_give_one_line(data, extra, message, capsys, monkeypatch):
    monkeypatch.delenv("REDIS_URL", raising=False)
    assert main(["run", ROUTERS, "--data", str(data), "--plan", "SP-S", "--no-progress", *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and "Traceback" not in err


def test_bad_plan_file_names_the_problem(tmp_path, capsys):
    bad = tmp_path / "p.json"
    bad.write_text(json.dumps({"S1": [["S3", "SP-S"], ["S2", "SP-D"]], "S2": [["S1", "SP-S"], ["S3", "SP-S"]],
                               "S3": [["S2", "SP-S"], ["S1", "SP-S"]]}))
    assert main(["run", ROUTERS, "--data", ".", "--plan", str(bad)]) == 2
    assert "S3 shares no join predicate with S1" in capsys.readouterr().err


def test_python_dash_m_and_help_work():
    out = subprocess.run([sys.executable, "-m", "joinlib", "run", "--help"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0 and "--plan" in out.stdout and "central" in out.stdout
    for cmd in ("gen", "plan", "reference"):
        r = subprocess.run([sys.executable, "-m", "joinlib", cmd, "--help"], capture_output=True, text=True, cwd=ROOT)
        assert r.returncode == 0 and "usage: joinlib " + cmd in r.stdout
