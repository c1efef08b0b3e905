"""The 'sampled' planner: the candidate plan that ships fewest bytes on a data sample."""
from __future__ import annotations

from pathlib import Path

import pytest

from joinlib.data.files import load_streams
from joinlib.data.gen import generate
from joinlib.errors import PlanError
from joinlib.planner.measure import sample_ms
from joinlib.planner.registry import candidates
from joinlib.planner.sampled import measure_candidates, sample_of, sampled
from joinlib.query import load_query
from joinlib.runtime.sink import CountingSink
from joinlib.sim.engine import run_embedded

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wan(tmp_path_factory):
    q = load_query(ROOT / "examples" / "routers_wan.yaml")
    d = tmp_path_factory.mktemp("wan")
    generate(q, d, 4000, seed=2)
    return q, load_streams(q, d)


def test_candidates_include_every_planner_central_sites_and_algorithms(wan):
    q, _ = wan
    names = set(candidates(q))
    assert {"central:r1", "central:r2", "central:r3", "SM-S1", "SM-D2"} <= names
    assert any(n.startswith("greedy/") for n in names)


def test_sampled_picks_the_fewest_steady_bytes_on_a_sample_where_windows_fill(wan):
    q, streams = wan
    assert sample_ms(q, streams) >= 2 * 3000  # 3 s windows: the old 2 s sample never filled them
    ranked = measure_candidates(q, streams, 4000, candidates=candidates)
    plan = sampled(q, streams, length_ms=4000, candidates=candidates)
    assert plan == ranked[0].plan
    assert all(ranked[0].steady_bytes_per_s <= c.steady_bytes_per_s for c in ranked)
    assert any(c.name.startswith("auto/") for c in ranked)  # auto's mixed plans are tried
    central = min(c.steady_bytes_per_s for c in ranked if c.name.startswith("central:"))
    assert ranked[0].steady_bytes_per_s <= central
    sample = sample_of(streams, 4000)
    assert run_embedded(q, sample, plan, CountingSink()).bytes == ranked[0].bytes


def test_sampled_needs_data_and_a_known_objective(wan):
    q, streams = wan
    with pytest.raises(PlanError, match="--data"):
        sampled(q, None, candidates=candidates)
    with pytest.raises(PlanError, match="objective"):
        sampled(q, streams, objective="speed", candidates=candidates)
