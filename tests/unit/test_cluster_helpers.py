"""Pieces of the cluster runner that need no broker (the runs themselves: tests/integration)."""
from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from joinlib.adapters import cluster


def test_repo_root_is_where_the_services_are():
    # node processes run `python -m services.node` from there
    assert (cluster.REPO_ROOT / "services" / "node" / "__main__.py").is_file()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(-1e6, 1e6), st.integers(1, 6)), min_size=1, max_size=40))
def test_weighted_percentiles_equal_those_of_the_expanded_list(pairs):
    xs, ws = [x for x, _ in pairs], [w for _, w in pairs]
    expanded = [x for x, w in pairs for _ in range(w)]
    got, want = cluster._percentiles(xs, ws), cluster._percentiles(expanded)
    assert {k: got[k] for k in ("p50", "p90", "p99", "max")} == {k: want[k] for k in ("p50", "p90", "p99", "max")}
    assert abs(got["mean"] - want["mean"]) <= 1e-6 * max(1.0, abs(want["mean"])) + 1e-3


def test_percentiles_of_nothing_are_empty():
    assert cluster._percentiles([]) == {}
    rng = random.Random(3)
    xs = [rng.random() for _ in range(101)]
    assert cluster._percentiles(xs)["p50"] == round(sorted(xs)[50], 3)
