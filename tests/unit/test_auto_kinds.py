"""``auto`` over every run kind (issue 30): partitioned plans, MJoin trees and trees per partition,
priced by the byte model, measured on the short list, chosen where keys are skewed per site, run by
``joinlib run --plan auto`` and listed by ``joinlib plan --explain``."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from joinlib.cli.main import main
from joinlib.control.run_plan import PartitionedRun
from joinlib.costs import WireModel, from_data
from joinlib.data.files import load_streams
from joinlib.mjoin.derived import lower_tree
from joinlib.plan.logical import Plan, central
from joinlib.planner.auto import auto_ranked
from joinlib.planner.kinds import tree_cost
from joinlib.planner.measure import central_bytes, run_candidate
from joinlib.planner.registry import resolve_run_plan
from joinlib.pmjoin.tree import Leaf, MJoin
from joinlib.query import query_to_dict

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def zipf2(tmp_path_factory):
    """2-way join, keys Zipf(1) ranked differently at each site, the query declaring uniform keys."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import bytes_bench  # type: ignore[import-not-found]
    finally:
        sys.path.pop(0)
    w = bytes_bench.Workload("2way", 2, "chain", False, 0.01, 1250, 3000, False, 8000, 1.0)
    d = tmp_path_factory.mktemp("zipf2")
    w.generate(str(d / "data"))
    doc = query_to_dict(w.query())
    doc["name"] = "zipf2"
    (d / "q.yaml").write_text(yaml.safe_dump(doc))
    q = w.query()
    return q, load_streams(q, d / "data"), d


def test_skewed_keys_choose_a_partitioned_plan_that_ships_less_than_central(zipf2):
    q, streams, _ = zipf2
    ranked, measured = auto_ranked(q, streams, every_kind=True)
    kinds = {r.kind for r in ranked}
    assert {"plan", "pmjoin", "mjoin", "pmjoin:mjoin"} <= kinds
    assert {r.kind for r in measured} >= {"plan", "pmjoin"}   # the best of each kind is sampled
    best = measured[0]
    assert best.kind == "pmjoin"
    got = run_candidate(q, streams, best.plan)
    best_central = min(central_bytes(q, streams, n) for n in q.nodes)
    assert got.bytes < 0.6 * best_central
    assert got.results == run_candidate(q, streams, central(q, q.nodes[0])).results
    assert isinstance(resolve_run_plan(q, "auto", streams=streams), PartitionedRun)


def test_plans_of_sequences_only_where_they_are_asked_for(zipf2):
    q, streams, _ = zipf2
    ranked, measured = auto_ranked(q, streams)     # a partition's plan, a --switch generation
    assert all(isinstance(r.plan, Plan) for r in ranked + measured)
    ranked, measured = auto_ranked(q, None, every_kind=True)   # no data: no per-value statistics
    assert all(isinstance(r.plan, Plan) for r in ranked) and not measured


def test_a_tree_of_one_mjoin_is_priced_as_central_at_its_node(zipf2):
    q, streams, _ = zipf2
    inputs = from_data(q, streams)
    node = q.nodes[1]
    program = lower_tree(q, MJoin(tuple(Leaf(s.name, s.site) for s in q.streams), node))
    want = WireModel(inputs).plan_cost(q, central(q, node))
    assert tree_cost(program, inputs) == pytest.approx(want, rel=0.02)


def test_plan_explain_lists_the_candidates_of_every_kind(zipf2, capsys, tmp_path):
    _, _, d = zipf2
    assert main(["plan", str(d / "q.yaml"), "--data", str(d / "data"), "--explain",
                 "--out", str(tmp_path / "plan.json")]) == 0
    out = capsys.readouterr().out
    assert "candidates auto weighed" in out
    rows = [ln.split() for ln in out.splitlines() if ln.startswith("  ") and "pmjoin" in ln or "mjoin " in ln]
    assert any(r[0] == "*" and r[1] == "pmjoin" for r in rows)
    assert any("pmjoin:mjoin" in r for r in rows) and any("mjoin" in r for r in rows)
    assert "partitioned" in (tmp_path / "plan.json").read_text()


def test_run_plan_auto_runs_the_partitioned_choice_exactly(zipf2, capsys, tmp_path):
    _, _, d = zipf2
    assert main(["run", str(d / "q.yaml"), "--data", str(d / "data"), "--out", str(tmp_path / "r.jsonl"),
                 "--check", "--no-progress"]) == 0
    assert "missing 0, extra or duplicated 0" in capsys.readouterr().out


def test_explain_says_when_auto_runs_a_plan_per_partition(zipf2):
    """Where `run --plan auto` runs a partitioned plan, `explain` (plans of join sequences) shows the best plan of
    sequences and says that auto runs something else, and how to see it."""
    from joinlib.planner.explained import explain_query
    q, streams, _ = zipf2
    e = explain_query(q, "auto", streams=streams)
    assert "on this data auto runs a plan per partition" in e.description
    assert "joinlib plan --planner auto --data DIR --explain" in e.description
