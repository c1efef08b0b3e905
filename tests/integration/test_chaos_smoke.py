"""The chaos benchmark's code path, short (bench/chaos.py, docs/reliability.md "Chaos"): 60 s of input at a low
rate with faults drawn from -- a node instance SIGKILLed and restarted, a replan of the reduction query, a Redis
restart (the scaled-out query's partition runs and re-keyers ride it out in process), a node instance SIGSTOPped
past its session and continued -- on a broker and a durable Redis of the benchmark's own; both queries' outputs
must equal the live contract's.  Recovery times are the benchmark's figures, not asserted here (no timed
assertions)."""
from __future__ import annotations

import json
import subprocess
import sys

from tests.integration.test_live import REPO


def test_chaos_for_a_minute_keeps_both_outputs_exact(tmp_path):
    cmd = [sys.executable, "bench/chaos.py", "--minutes", "1", "--rate", "60", "--seed", "11",
           "--faults", "kill-node,replan,redis-restart,pause-node", "--gap", "12", "--out", str(tmp_path),
           "--name", "smoke",
           "--logs", str(tmp_path / "logs")]
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    out = r.stdout + r.stderr
    assert "Traceback" not in out, out[-5000:]
    doc = json.loads((tmp_path / "smoke.json").read_text())
    assert (tmp_path / "smoke.png").stat().st_size > 0
    assert doc["seed"] == 11 and "chaos seed 11" in out
    kinds = [f["kind"] for f in doc["faults"]]
    assert len(kinds) >= 2 and set(kinds) <= {"kill-node", "replan", "redis-restart", "pause-node"}, kinds
    v = doc["verdicts"]
    for key in ("chaos_reduce_results_exact", "chaos_pmjoin_results_exact", "chaos_reduce_dead_letters_accounted",
                "chaos_pmjoin_dead_letters_accounted", "faults_carried_out", "no_process_died"):
        assert v[key], (key, doc["check"], doc["faults"], out[-3000:])
    for q in ("chaos_reduce", "chaos_pmjoin"):
        assert doc["check"][q]["results"]["reference"] >= 200, "the input is too thin to check anything"
        assert doc["check"][q]["dead_letters"]["expected"] > 0, "no malformed record was written"
    if "replan" in kinds:
        assert len(doc["check"]["chaos_reduce"]["runs"]) == 1 + kinds.count("replan")
