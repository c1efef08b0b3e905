"""Pieces of the cluster runner that need no broker (the runs themselves: tests/integration)."""
from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from joinlib.node import cluster
from joinlib.node.cluster_nodes import REPO_ROOT, ServingNode
from joinlib.node.cluster_report import percentiles


def test_repo_root_is_where_the_services_are():
    # node processes run `python -m services.node` from there
    assert (REPO_ROOT / "services" / "node" / "__main__.py").is_file()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(-1e6, 1e6), st.integers(1, 6)), min_size=1, max_size=40))
def test_weighted_percentiles_equal_those_of_the_expanded_list(pairs):
    xs, ws = [x for x, _ in pairs], [w for _, w in pairs]
    expanded = [x for x, w in pairs for _ in range(w)]
    got, want = percentiles(xs, ws), percentiles(expanded)
    assert {k: got[k] for k in ("p50", "p90", "p99", "max")} == {k: want[k] for k in ("p50", "p90", "p99", "max")}
    assert abs(got["mean"] - want["mean"]) <= 1e-6 * max(1.0, abs(want["mean"])) + 1e-3


def test_percentiles_of_nothing_are_empty():
    assert percentiles([]) == {}
    rng = random.Random(3)
    xs = [rng.random() for _ in range(101)]
    assert percentiles(xs)["p50"] == round(sorted(xs)[50], 3)


def test_a_tree_sites_done_adds_its_operators_counts_and_is_a_valid_control_message():
    """One ``done`` per site of an MJoin tree run (joinlib.node.tree_service): links and received summed per
    (src, dst, kind), results and inputs added up; it passes the control checks every reader applies."""
    from joinlib.control.check import check_control
    from joinlib.control.messages import DoneMessage, merge_done
    op = {"site": "a", "run": "r", "results": 3, "input_tuples": 4, "late_messages": 1, "last_epoch": 5,
          "links": [{"src": "a", "dst": "b", "kind": "full", "messages": 2, "bytes": 10, "transfer_ms": 1.5}],
          "received": [{"src": "b", "dst": "a", "kind": "full", "messages": 1, "bytes": 5, "transfer_ms": 0.5}],
          "processing_s": {"join": 0.25}}
    other = {**op, "results": 0, "last_epoch": 7,
             "links": [{"src": "a", "dst": "c", "kind": "full", "messages": 1, "bytes": 4, "transfer_ms": 0.0}]}
    done = merge_done("a", "r", [DoneMessage.from_json(op), DoneMessage.from_json(other)], 1.0, 0.5).to_json()
    assert done["results"] == 3 and done["input_tuples"] == 8 and done["late_messages"] == 2
    assert done["last_epoch"] == 7 and done["processing_s"] == {"join": 0.5} and done["operators"] == 2
    assert [(ln["dst"], ln["messages"], ln["bytes"]) for ln in done["links"]] == [("b", 2, 10), ("c", 1, 4)]
    assert done["received"] == [{"src": "b", "dst": "a", "kind": "full", "messages": 2, "bytes": 10,
                                 "transfer_ms": 1.0}]
    assert check_control("Q", "done", done) is None
    assert check_control("Q", "status", {"site": "a", "run": "r", "operators": 2}) is None


def test_serving_nodes_are_not_killed_by_a_run():
    """``mode="serving"`` uses node services the run did not start: a --kill drill is refused before any I/O."""
    import pytest

    from joinlib.errors import ClusterError
    from joinlib.plan.logical import central
    from joinlib.query import load_query
    q = load_query(REPO_ROOT / "examples" / "routers.yaml")
    with pytest.raises(ClusterError, match="not serving ones"):
        cluster.run_cluster(q, {}, central(q, "r1"), bootstrap="127.0.0.1:1", mode="serving", faults=[("r1", 1.0)])
    with pytest.raises(ClusterError, match="unknown cluster mode"):
        cluster.run_cluster(q, {}, central(q, "r1"), bootstrap="127.0.0.1:1", mode="docker")
    assert ServingNode("r1").failure() is None
