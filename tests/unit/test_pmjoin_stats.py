"""PMJoin statistics and models from a query file and a joinlib data directory; FINDPARTITION."""
from __future__ import annotations

from pathlib import Path

import pytest

from joinlib.data.files import write_stream
from joinlib.data.stats import measure_query
from joinlib.errors import DataError, PlanError
from joinlib.pmjoin import (
    JoinClass,
    Leaf,
    MJoin,
    SelectivityModel,
    StreamSpec,
    find_partitions,
    plan_pmjoin,
    rate_partition,
    select_pmjoins,
    selectivity_model,
    stream_join_opt,
    value_model,
    value_rates,
)
from joinlib.pmjoin.tree import describe
from joinlib.query import load_query

QUERY = """
name: routers3
streams:
  S1: {site: n1, window: 500ms, tuple_bytes: 1}
  S2: {site: n2, window: 500ms, tuple_bytes: 1}
  S3: {site: n3, window: 500ms, tuple_bytes: 1}
join:
  - S1.dest = S2.dest
  - S2.dest = S3.dest
network: {nodes: [dc]}
"""
# per 10 s: S1 mostly c, S2 mostly b, S3 mostly a (Table 1's shape)
COUNTS = {"S1": {"a": 1, "b": 1, "c": 100}, "S2": {"a": 1, "b": 100, "c": 2}, "S3": {"a": 100, "b": 1, "c": 1}}


def write_data(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "q.yaml").write_text(QUERY)
    data = tmp_path / "data"
    for s, counts in COUNTS.items():
        vals = [v for v, n in counts.items() for _ in range(n)]
        n = len(vals)
        rows = [{"id": k, "ts": round(k * 10_000 / (n - 1)), "dest": vals[(k * 7) % n]} for k in range(n)]
        write_stream(data / f"{s}.jsonl", rows)
    return tmp_path / "q.yaml", data


def test_value_rates_from_data_match_joinlib_stats(tmp_path: Path) -> None:
    qpath, data = write_data(tmp_path)
    query = load_query(qpath)
    vr = value_rates(query, data)
    assert vr.streams == ("S1", "S2", "S3") and vr.values == ("a", "b", "c") and vr.attribute == "S1.dest"
    for m in measure_query(query, data):  # per-value rates sum to the rate `joinlib stats` measures
        assert vr.stream_rate(m["stream"]) == pytest.approx(m["rate"])
    s3 = vr.rates[2]
    assert s3[0] == pytest.approx(100 * (101 / 102) / 10)


def test_plan_from_data_partitions_by_hot_site(tmp_path: Path) -> None:
    qpath, data = write_data(tmp_path)
    query = load_query(qpath)
    vr = value_rates(query, data)
    model = value_model(query, vr)
    assert model.nodes == ("n1", "n2", "n3", "dc")
    whole = stream_join_opt(model)
    plan = plan_pmjoin(model, vr.values, rate_partition(vr, 3), vr.attribute)
    assert plan.cost < 0.05 * plan_pmjoin(model, vr.values, rate_partition(vr, 1)).cost
    assert plan_pmjoin(model, vr.values, rate_partition(vr, 1)).groups[0].tree == whole
    # each value's plan ends at the site where it is hot
    assert {v: plan.tree_for(v).node for v in "abc"} == {"a": "n3", "b": "n2", "c": "n1"}


def test_value_rates_errors(tmp_path: Path) -> None:
    qpath, data = write_data(tmp_path)
    query = load_query(qpath)
    with pytest.raises(DataError, match="no such directory"):
        value_rates(query, tmp_path / "missing")
    with pytest.raises(PlanError, match="no selectivity for join attribute dest; add 'selectivity'"):
        selectivity_model(query)
    two = tmp_path / "two.yaml"
    two.write_text(QUERY.replace("S2.dest = S3.dest", "S2.src = S3.src"))
    with pytest.raises(PlanError, match="2 equality class"):
        value_rates(load_query(two), data)


def test_selectivity_model_from_query_with_implied_edge(tmp_path: Path) -> None:
    q = tmp_path / "q.yaml"
    q.write_text(QUERY.replace("tuple_bytes: 1}", "tuple_bytes: 1, rate: 100, selectivity: 0.01}"))
    m = selectivity_model(load_query(q))
    assert [c.name for c in m.classes] == ["S1.dest = S2.dest = S3.dest"]
    assert m.joinable(frozenset({0}), frozenset({2}))  # S1-S3: implied
    # W_{1,2,3} = f² ∏ W (not f³): 0.01² · 50³
    assert m.window(frozenset({0, 1, 2})) == pytest.approx(1e-4 * 50 ** 3)


# ---------------------------------------------------------------------------------------------- FINDPARTITION

def five_streams() -> SelectivityModel:
    specs = [StreamSpec(f"S{i}", f"n{i}", r, window_s=10) for i, r in enumerate([100, 50, 80, 20, 60])]
    classes = [JoinClass("a", ((0, .01), (1, .01), (2, .01))), JoinClass("b", ((2, .02), (3, .02))),
               JoinClass("c", ((3, .01), (4, .01)))]
    return SelectivityModel(specs, classes)


def leaf(i: int) -> Leaf:
    return Leaf(f"S{i}", f"n{i}")


@pytest.mark.parametrize("tree, found, chosen", [
    # root joins {S0,S1,S2} with {S3,S4} on b only: a PMJoin; its left child on a (absorbing S2 ⋈ S0)
    (MJoin((MJoin((leaf(1), MJoin((leaf(2), leaf(0)), "n0")), "n0"), MJoin((leaf(4), leaf(3)), "n3")), "n3"),
     [((), "b", 2), ((0,), "a", 3)], [()]),
    # the partitionable a-join is the right child: not a PMJoin; the root mixes b and c
    (MJoin((leaf(4), leaf(3), MJoin((leaf(1), leaf(2), leaf(0)), "n0")), "n0"), [], []),
    # left child on a; root has two classes (b, c): only the child
    (MJoin((MJoin((leaf(1), leaf(2), leaf(0)), "n0"), leaf(4), leaf(3)), "n3"), [((0,), "a", 3)], [(0,)]),
])
def test_find_partitions(tree: MJoin, found: list[tuple[tuple[int, ...], str, int]],
                         chosen: list[tuple[int, ...]]) -> None:
    m = five_streams()
    cands = find_partitions(tree, m)
    assert [(c.path, c.attribute, len(c.inputs)) for c in cands] == found
    assert [c.path for c in select_pmjoins(cands)] == chosen


def test_select_keeps_the_child_when_it_is_faster() -> None:
    m = five_streams()
    tree = MJoin((MJoin((leaf(1), MJoin((leaf(2), leaf(0)), "n0")), "n0"), MJoin((leaf(4), leaf(3)), "n3")), "n3")
    root, child = find_partitions(tree, m)
    from dataclasses import replace
    faster = replace(child, input_rate=root.input_rate + 1)
    assert [c.path for c in select_pmjoins([root, faster])] == [(0,)]
    assert describe(tree).startswith("MJoin@n3(")


# ---------------------------------------------------------------------------------------------- the example

def test_example_script_plans_example1_x10_from_data(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """examples/pmjoin_plan.py: demo data (Table 1 x 10, 20 s) -> the digest's 1001 / 540.3 / 0.696."""
    import importlib.util
    import json
    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("pmjoin_plan", root / "examples" / "pmjoin_plan.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.write_demo(tmp_path / "data", seconds=20)
    out = tmp_path / "plan.json"
    assert mod.main([str(root / "examples" / "pmjoin_routers.yaml"), "--data", str(tmp_path / "data"),
                     "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "centralized (Simple): 1001 bytes/s" in text and "one plan (STREAMJOINOPT): 540.3 bytes/s" in text
    assert json.loads(out.read_text())["cost"] == pytest.approx(0.696, rel=1e-3)
    assert mod.main([str(root / "examples" / "pmjoin_routers.yaml"), "--data", str(tmp_path / "missing")]) == 2
    assert "error: --data" in capsys.readouterr().err
