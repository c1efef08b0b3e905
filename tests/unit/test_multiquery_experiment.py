"""``joinlib experiment iflow --quick``: runs (once, small), writes the JSON keys of the full run and the
PNGs, its checks hold; planners never beat the optimum under the same D; mistakes are one-line errors."""
from __future__ import annotations

import json

import pytest

from joinlib.cli.main import main
from joinlib.experiments.iflow import QUICK, Scale, run_sequence
from joinlib.multiquery.cost import Deployments
from joinlib.multiquery.hierarchy import build_hierarchy
from joinlib.multiquery.planners import PLANNERS, get_planner
from joinlib.multiquery.streams import generate_workload
from joinlib.multiquery.topology import transit_stub

KEYS = {"scale", "topology", "paper", "lemma1", "hierarchies", "runs", "savings", "sweep", "checks", "seconds"}
RUN_KEYS = {"planner", "maxcs", "total", "total_deployed", "total_link_usage", "optimum_total_same_d",
            "ratio_of_totals", "ratio",
            "fraction_examined", "plans_examined_mean", "planning_ms_mean", "reuses", "operators",
            "exhaustive_equals_optimal"}


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("iflow")
    args = ["experiment", "iflow", "--quick", "--queries", "3", "--maxcs", "4,8,16,32", "--out", str(out),
            "--no-progress"]
    assert main(args) == 0
    return out


def test_quick_experiment_writes_json_and_pngs(quick, capsys):
    report = json.loads((quick / "iflow.json").read_text())
    assert set(report) == KEYS
    assert report["lemma1"] == {"k": 5, "n": 64, "count": 3_019_898_880}
    assert set(report["hierarchies"]) == {"4", "8", "16", "32"}
    assert len(report["runs"]) == 5 + 3 * 4
    for r in report["runs"]:
        assert set(r) == RUN_KEYS
    assert set(report["savings"]) == {"integrated_optimum_vs", "reuse_share_of_optimum", "top_down_vs",
                                      "total_relative_to_optimal_run"}
    assert {row["variant"] for row in report["sweep"]} == {"varied", "uniform"}
    assert all(report["checks"].values()), report["checks"]
    runs = json.loads((quick / "iflow_runs.json").read_text())
    assert len(runs["optimal"]) == 3 and set(runs) >= {"top-down@8", "npc@32", "ptd-relaxation"}
    for name in ("totals", "maxcs", "cumulative", "overlap"):
        assert (quick / f"iflow_{name}.png").stat().st_size > 5_000


def test_quick_scale_has_the_full_scales_shape():
    assert QUICK.maxcs == Scale().maxcs and QUICK.k == Scale().k == 5 and Scale().queries == 100


def test_every_planner_is_at_least_the_optimum_under_the_same_deployments():
    top = transit_stub(4, 6, seed=3)
    work = generate_workload(top.nodes, n_queries=6, k=4, n_streams=8, seed=2)
    h = build_hierarchy(top, 6)
    for spec in PLANNERS.values():
        summ, recs = run_sequence(top, work, spec, h if spec.hierarchical else None, lambda n: None)
        assert all(r["cost"] >= r["optimum"] * (1 - 1e-9) for r in recs), spec.name
        assert abs(summ["total"] - summ["total_link_usage"]) <= 1e-6 * summ["total"]
        assert summ["operators"] + summ["reuses"] >= len(recs)  # every query deploys or reuses something


def test_planner_registry_and_mistakes(tmp_path, capsys):
    with pytest.raises(Exception, match="unknown multi-query planner 'nope'"):
        get_planner("nope")
    assert main(["experiment", "iflow", "--out", str(tmp_path), "--maxcs", "eight"]) == 2
    assert "--maxcs 'eight'" in capsys.readouterr().err
    assert main(["experiment", "iflow", "--out", str(tmp_path), "--maxcs", "1"]) == 2
    assert "at least 2" in capsys.readouterr().err
    assert main(["experiment", "iflow", "--out", str(tmp_path), "--queries", "0"]) == 2
    bad = tmp_path / "t.yaml"
    bad.write_text("links: [{from: a, to: b, latency: fast}]")
    assert main(["experiment", "iflow", "--out", str(tmp_path), "--topology", str(bad)]) == 2
    assert "links[0].latency" in capsys.readouterr().err
    assert Deployments().total_cost(transit_stub(1, 2)) == 0


def test_one_cluster_makes_every_hierarchical_planner_exact():
    """maxcs >= N: a single level-1 cluster of every node, so Top-Down, Bottom-Up and NPC all solve the
    whole query exactly, reuse included."""
    top = transit_stub(3, 4, seed=4)
    work = generate_workload(top.nodes, n_queries=5, k=4, n_streams=6, seed=3)
    h = build_hierarchy(top, top.n)
    assert len(h.levels) == 1
    for name in ("top-down", "bottom-up", "npc"):
        _, recs = run_sequence(top, work, get_planner(name), h, lambda n: None)
        assert all(abs(r["cost"] - r["optimum"]) <= 1e-6 * max(1.0, r["optimum"]) for r in recs), name
