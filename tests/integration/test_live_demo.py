"""`make live-demo` (scripts/live_demo.py) end to end on the real broker and Redis, for a few seconds:
the planner, a node per site and the generator start, the query is submitted, results and the bytes
figure are printed, and on the way out the query is stopped: the default SQL query's rows (with the matched
destination, from its sink topic), and the YAML query's ids (``--query``)."""
from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("query,shown", [(None, 'row: {"dest": "10.'),
                                         ("examples/routers_live.yaml", 'result: {"ids"')])
def test_live_demo_shows_results_and_bytes_against_central(kafka_bootstrap, redis_url, tmp_path, query, shown):
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap, "REDIS_URL": redis_url}
    tag = uuid.uuid4().hex[:6]
    p = subprocess.run([sys.executable, "scripts/live_demo.py", "--duration", "14", "--every", "4", "--tag", tag,
                        "--logs", str(tmp_path), *(["--query", query] if query else [])], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=120)
    out = p.stdout
    assert p.returncode == 0, out + p.stderr
    assert out.count(shown) == 3, out
    if query is None:
        assert f"rows go to topic matches.routers.{tag}" in out, out
    figures = [line for line in out.splitlines() if "bytes vs central" in line]
    assert len(figures) >= 2 and " 0 results" not in figures[-1], out
    assert f"query routers_live_{tag} stopped" in out, out
