"""``joinlib progressive``: the OUT format, exactness on files, spill clean-up, and one
``error: ...`` line (exit 2, no traceback) for each user mistake."""
from __future__ import annotations

import json
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from joinlib.cli.main import main


def write_rows(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> tuple[Path, Path, Counter]:
    d = tmp_path_factory.mktemp("progressive")
    rng = random.Random(7)
    left = [{"id": i, "k": rng.randint(0, 40), "x": "pad"} for i in range(400)]
    right = [{"id": 1000 + i, "k": rng.randint(0, 40)} for i in range(300)]
    right.insert(5, {})  # a blank line in the file below
    lp = write_rows(d / "orders.jsonl", left)
    rp = d / "payments.jsonl"
    rp.write_text("".join((json.dumps(r) if r else "") + "\n" for r in right))
    want = Counter((a["id"], b["id"]) for a in left for b in right if b and a["k"] == b["k"])
    return lp, rp, want


def read_out(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("algorithm", ["rpj", "rpj-md", "rpj-dd", "xjoin", "hmj"])
@pytest.mark.parametrize("network", ["reliable", "unreliable"])
def test_output_is_the_hash_join(inputs, tmp_path, algorithm, network, capsys):
    lp, rp, want = inputs
    out = tmp_path / "out.jsonl"
    assert main(["progressive", str(lp), str(rp), "--on", "k", "--memory", "40", "--algorithm", algorithm,
                 "--network", network, "--spill", f"file:{tmp_path / 'spill'}", "--out", str(out),
                 "--no-progress"]) == 0
    rows = read_out(out)
    assert all(list(r) == ["ids", "phase", "t"] and list(r["ids"]) == ["orders", "payments"] for r in rows)
    assert Counter((r["ids"]["orders"], r["ids"]["payments"]) for r in rows) == want
    assert [r["t"] for r in rows] == sorted(r["t"] for r in rows)
    phases = Counter(r["phase"] for r in rows)
    assert set(phases) <= {"arrival", "reactive", "cleanup"} and phases["arrival"] > 0
    if network == "unreliable" and algorithm != "xjoin":
        assert phases["reactive"] > 0
    assert list((tmp_path / "spill").iterdir()) == []  # the join's runs are gone
    err = capsys.readouterr().err
    assert f"{sum(want.values()):,} results" in err


def test_stdout_and_determinism(inputs, tmp_path):
    lp, rp, want = inputs
    cmd = [sys.executable, "-m", "joinlib", "progressive", str(lp), str(rp), "--on", "k", "--memory", "30",
           "--network", "unreliable", "--seed", "4", "--spill", "memory:"]
    a = subprocess.run(cmd, capture_output=True, text=True, check=True)
    b = subprocess.run(cmd, capture_output=True, text=True, check=True)
    assert a.stdout == b.stdout and len(a.stdout.splitlines()) == sum(want.values())
    assert "Traceback" not in a.stderr


def test_string_keys_and_ids(tmp_path):
    lp = write_rows(tmp_path / "a.jsonl", [{"id": "a1", "k": "x"}, {"id": "a2", "k": "y"}])
    rp = write_rows(tmp_path / "b.jsonl", [{"id": "b1", "k": "x"}, {"id": "b2", "k": "x"}])
    out = tmp_path / "out.jsonl"
    assert main(["progressive", str(lp), str(rp), "--on", "k", "--memory", "2", "--out", str(out),
                 "--no-progress"]) == 0
    assert sorted((r["ids"]["a"], r["ids"]["b"]) for r in read_out(out)) == [("a1", "b1"), ("a1", "b2")]


def test_help_explains_the_output():
    r = subprocess.run([sys.executable, "-m", "joinlib", "progressive", "--help"], capture_output=True, text=True)
    assert r.returncode == 0
    for words in ('"phase": "arrival|reactive|cleanup"', "--spill", "kafka:TOPIC", "--memory"):
        assert words in r.stdout


@pytest.mark.parametrize("case,args,message", [
    ("missing file", ["{d}/nope.jsonl", "{r}", "--on", "k", "--memory", "10"], "no such file"),
    ("bad attr", ["{l}", "{r}", "--on", "zz", "--memory", "10"], "no attribute 'zz'"),
    ("memory too small", ["{l}", "{r}", "--on", "k", "--memory", "1"], "--memory 1: too small"),
    ("flush too large", ["{l}", "{r}", "--on", "k", "--memory", "10", "--flush", "11"], "--flush 11"),
    ("bad spill", ["{l}", "{r}", "--on", "k", "--memory", "10", "--spill", "s3://x"], "--spill s3://x: expected"),
    ("empty spill dir", ["{l}", "{r}", "--on", "k", "--memory", "10", "--spill", "file:"], "give a directory"),
    ("redis down", ["{l}", "{r}", "--on", "k", "--memory", "10", "--spill", "redis://127.0.0.1:1/0"],
     "Redis does not answer"),
    ("same names", ["{l}", "{d}/other/orders.jsonl", "--on", "k", "--memory", "10"], "both relations are named"),
    ("not an object", ["{l}", "{d}/list.jsonl", "--on", "k", "--memory", "10"], "list.jsonl:1: expected a JSON object"),
    ("not json", ["{l}", "{d}/junk.jsonl", "--on", "k", "--memory", "10"], "junk.jsonl:2: not JSON"),
    ("bad key type", ["{l}", "{d}/floats.jsonl", "--on", "k", "--memory", "10"], "must be an integer or a string"),
    ("mixed key types", ["{l}", "{d}/strs.jsonl", "--on", "k", "--memory", "10"], "use one type"),
    ("no id", ["{l}", "{d}/noid.jsonl", "--on", "k", "--memory", "10"], 'no "id"'),
    ("kafka without broker", ["kafka:t1", "{r}", "--on", "k", "--memory", "10"], "needs a Kafka broker"),
])
def test_user_mistakes(inputs, tmp_path, monkeypatch, case, args, message):
    lp, rp, _ = inputs
    (tmp_path / "other").mkdir()
    write_rows(tmp_path / "other" / "orders.jsonl", [{"id": 1, "k": 1}])
    (tmp_path / "list.jsonl").write_text("[1, 2]\n")
    (tmp_path / "junk.jsonl").write_text('{"id": 1, "k": 1}\n{oops\n')
    write_rows(tmp_path / "floats.jsonl", [{"id": 1, "k": 1.5}])
    write_rows(tmp_path / "strs.jsonl", [{"id": 1, "k": "1"}])
    write_rows(tmp_path / "noid.jsonl", [{"k": 1}])
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    argv = [a.format(d=tmp_path, l=lp, r=rp) for a in args]
    r = subprocess.run([sys.executable, "-m", "joinlib", "progressive", *argv, "--no-progress"],
                       capture_output=True, text=True, env=_env_without_kafka())
    assert r.returncode == 2, (case, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], (case, r.stderr)


def _env_without_kafka() -> dict:
    import os
    return {k: v for k, v in os.environ.items() if k != "KAFKA_BOOTSTRAP_SERVERS"}
