"""The soak's code path, short (bench/soak.py, docs/reliability.md "Soak"): 45 s at a given low rate on a broker
and Redis of its own, every result and dead letter checked against the live contract's reference as the soak
checks them (chunk tallies, bench/soak_check.py), both after the input (``--check after``, the default: the check
reads the kept source topics once the generator is done) and beside the nodes (``--check live``, here with the
first node under ``--trace-memory``: its heap snapshots and the Redis key kinds are written); then ``--from-json``
on a copy whose check failed must fail.  The memory, lag and latency verdicts are the benchmark's figures, not
asserted here (no timed assertions)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.test_live import REPO


@pytest.mark.parametrize("mode", ["after", "live"])
def test_soak_checks_every_result_and_a_mismatch_fails(tmp_path, mode):
    name = f"smoke-{mode}"
    cmd = [sys.executable, "bench/soak.py", "--minutes", "0.75", "--rate", "100", "--every", "3", "--warmup", "10",
           "--malformed-every", "300", "--check", mode, "--out", str(tmp_path), "--name", name]
    if mode == "live":
        cmd += ["--trace-memory", "8"]
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=400)
    out = r.stdout + r.stderr
    assert "Traceback" not in out, out[-5000:]
    doc = json.loads((tmp_path / f"{name}.json").read_text())
    assert (tmp_path / f"{name}.png").stat().st_size > 0
    check = doc["soak"]["check"]
    samples = doc["soak"]["samples"]
    assert check["mode"] == mode and samples
    if mode == "after":   # nothing read the sources while the generator wrote
        assert not any("checked_records" in x for x in samples)
    else:
        assert samples[-1]["checked_records"] > 0 and "key_kinds" in samples[-1]["redis"]
        heaps = sorted(Path(doc["soak"]["logs"]).glob("heap-*/heap-*.txt"))
        assert heaps and "traced=" in heaps[-1].read_text()
    assert check["results"]["exact"] and check["dead_letters"]["ok"] and check["complete"], (check, out[-3000:])
    assert check["results"]["reference"] >= 1000, "the input is too thin to check anything"
    assert check["results"]["chunks"] >= 3 and check["dead_letters"]["expected"] > 0
    assert check["source"]["records"] == doc["soak"]["events_written"] > 0
    assert doc["verdicts"]["results_exact"] is True
    assert r.returncode == (0 if doc["verdicts"]["ok"] else 1)

    check["exact"] = False
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    r = subprocess.run([sys.executable, "bench/soak.py", "--from-json", str(tmp_path / "bad.json"),
                        "--warmup", "10"], cwd=REPO,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "results exact: NO" in r.stdout, r.stdout + r.stderr
    assert json.loads((tmp_path / "bad.json").read_text())["verdicts"]["ok"] is False
