"""The auto planner: the whole plan space under the byte model, a measured short list with data."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from joinlib.costs import WireModel
from joinlib.data.files import load_streams
from joinlib.data.gen import generate
from joinlib.plan.logical import central, validate
from joinlib.planner.auto import auto, auto_ranked, rank, short_list
from joinlib.planner.measure import fill_ms, sample_ms
from joinlib.planner.registry import PLANNERS, resolve_plan
from joinlib.query import load_query
from joinlib.runtime.sink import CountingSink
from joinlib.sim.engine import run_embedded

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def selective(tmp_path_factory):
    q = load_query(ROOT / "examples" / "routers_selective.yaml")
    d = tmp_path_factory.mktemp("sel")
    generate(q, d, 8000, seed=5)
    return q, load_streams(q, d)


def test_auto_is_registered_and_the_default():
    assert "auto" in PLANNERS
    from joinlib.cli.main import _parser
    p = _parser()
    assert p.parse_args(["run", "q.yaml", "--data", "d"]).plan == "auto"
    assert p.parse_args(["plan", "q.yaml"]).planner == "auto"


def test_rank_covers_central_everywhere_uniform_and_mixed_plans():
    q = load_query(ROOT / "examples" / "routers_selective.yaml")
    ranked = rank(q, WireModel())
    names = {r.name for r in ranked}
    assert {"central:r1", "central:r2", "central:r3", "SM-S1", "per-head"} <= names
    assert [r.estimate for r in ranked] == sorted(r.estimate for r in ranked)
    for r in ranked:
        validate(q, r.plan)
    best = ranked[0]
    assert best.estimate <= min(r.estimate for r in ranked if r.name.startswith("central:"))
    sl = short_list(q, ranked)
    assert sum(r.name.startswith("central:") for r in sl) == 3 and len(sl) <= 6


def test_samples_are_long_enough_for_windows_to_fill():
    q = load_query(ROOT / "examples" / "routers_selective.yaml")
    assert fill_ms(q) == 3000
    assert sample_ms(q) >= 2 * 3000


def test_auto_with_data_ships_at_most_central_and_far_less_when_selective(selective):
    q, streams = selective
    plan = resolve_plan(q, "auto", streams=streams)
    got = run_embedded(q, streams, plan, CountingSink()).bytes
    best_central = min(run_embedded(q, streams, central(q, s), CountingSink()).bytes for s in q.sites)
    assert got < best_central / 5
    ranked, measured = auto_ranked(q, streams)
    assert measured and measured[0].plan == plan
    assert auto(q) == ranked[0].plan or auto(q) is not None  # the model alone also plans


def test_bytes_bench_quick_grid(tmp_path):
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import bytes_bench  # type: ignore[import-not-found]  # bench/, on sys.path only here (mypy checks no bench)
    finally:
        sys.path.pop(0)
    assert bytes_bench.main(["--quick", "--duration", "6s", "--jobs", "1", "--only", "2way",
                             "--out", str(tmp_path), "--table", str(tmp_path / "t.md")]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["checks"]["workloads"] == 2
    for row in summary["rows"]:
        assert row["auto"] <= 1.02 * row["central"] and row["floor"] <= row["central"]
    assert (tmp_path / "2way-f0.001-1250B-w500.png").exists()
    assert "auto ≤ 1.02" in (tmp_path / "t.md").read_text()
