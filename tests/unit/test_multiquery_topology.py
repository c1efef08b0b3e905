"""Topologies: the seeded generator, shortest paths and per-link usage, the hierarchy (sizes, coordinators,
the estimate bound), and the YAML format's validation errors (one message naming file and key)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from joinlib.multiquery.cost import Deployments
from joinlib.multiquery.errors import TopologyError
from joinlib.multiquery.hierarchy import build_hierarchy
from joinlib.multiquery.topology import (
    PhysicalLink,
    PhysicalNetwork,
    load_topology,
    parse_topology,
    to_yaml,
    transit_stub,
)

GOOD = """
nodes: [a, b, c]
links:
  - {from: a, to: b, latency: 5ms, bandwidth: 10mbps}
  - {from: b, to: c, latency: 0.02s}
  - {from: a, to: c, latency: 30}
"""


def test_yaml_topology_and_shortest_paths():
    top = parse_topology(GOOD)
    assert top.nodes == ("a", "b", "c")
    assert top.dist[0][2] == 25.0 and top.path(0, 2) == [(0, 1), (1, 2)]
    assert top.links[0].bandwidth == 10_000 and top.links[1].bandwidth == 100_000
    assert parse_topology(to_yaml(top)).dist == top.dist


def test_generator_is_seeded_connected_and_round_trips():
    t1, t2 = transit_stub(seed=7), transit_stub(seed=7)
    assert t1.n == 64 and t1.links == t2.links and t1.links != transit_stub(seed=8).links
    assert max(max(r) for r in t1.dist) < float("inf")
    assert parse_topology(to_yaml(t1)).dist == t1.dist


def test_link_usage_sums_to_the_total():
    top = transit_stub(seed=2)
    d = Deployments(transfers=[(0, 63, 2.5, "q"), (5, 40, 1.0, "q"), (7, 7, 9.0, "q")])
    usage = d.link_usage(top)
    assert abs(sum(usage.values()) - d.total_cost(top)) < 1e-6
    assert d.total_cost(top) == 2.5 * top.dist[0][63] + top.dist[5][40]


@pytest.mark.parametrize("text,message", [
    ("links: [", "not valid YAML"),
    ("- a\n- b", "expected a mapping"),
    ("links: []", "'links' must be a non-empty list"),
    ("lnks: []", "unknown key 'lnks'"),
    ("links: [a-b]", "links[0]: expected a mapping"),
    ("links: [{from: a, to: b}]", "links[0]: missing 'latency'"),
    ("links: [{from: a, latency: 1}]", "links[0]: missing 'to'"),
    ("links: [{from: a, to: b, latency: 1, cost: 3}]", "links[0]: unknown key 'cost'"),
    ("links: [{from: a, to: b, latency: 5 parsecs}]", "links[0].latency: '5 parsecs' is not a positive latency"),
    ("links: [{from: a, to: b, latency: -1}]", "links[0].latency: -1"),
    ("links: [{from: a, to: b, latency: 0ms}]", "is not a positive latency"),
    ("links: [{from: a, to: b, latency: 1, bandwidth: fast}]", "links[0].bandwidth: 'fast'"),
    ("links: [{from: a, to: a, latency: 1}]", "two different nodes"),
    ("links: [{from: a, to: b, latency: 1}, {from: b, to: a, latency: 2}]", "a second link between"),
    ("nodes: [a, b]\nlinks: [{from: a, to: c, latency: 1}]", "unknown node 'c'"),
    ("nodes: [a, b, c]\nlinks: [{from: a, to: b, latency: 1}]", "not connected: c cannot be reached"),
    ("nodes: [a, a]\nlinks: [{from: a, to: b, latency: 1}]", "listed twice"),
    ("nodes: a\nlinks: [{from: a, to: b, latency: 1}]", "'nodes' must be a list"),
    ("bandwidth: -3\nlinks: [{from: a, to: b, latency: 1}]", "bandwidth: -3"),
])
def test_yaml_mistakes_are_one_line_errors(text, message):
    with pytest.raises(TopologyError) as e:
        parse_topology(text, "net.yaml")
    assert message in str(e.value) and str(e.value).startswith("net.yaml")


def test_missing_file(tmp_path):
    with pytest.raises(TopologyError, match="no such topology file"):
        load_topology(tmp_path / "nope.yaml")
    (tmp_path / "t.yaml").write_text(GOOD)
    assert load_topology(tmp_path / "t.yaml").n == 3


def test_cli_style_error_without_traceback(capsys):
    import argparse

    from joinlib import command  # the CLI's handler prints JoinlibError as one line, exit 2
    p = argparse.ArgumentParser()
    p.set_defaults(func=lambda args: parse_topology("links: [{from: a, to: a, latency: 1}]", "x.yaml") and 0)
    assert command.run(p, []) == 2
    err = capsys.readouterr().err
    assert "x.yaml" in err and "Traceback" not in err


@pytest.mark.parametrize("maxcs", [2, 4, 8, 16, 32, 64])
def test_hierarchy_shape(maxcs):
    top = transit_stub(seed=1)
    h = build_hierarchy(top, maxcs)
    assert len(h.root.leaves) == 64 and len(h.levels[-1]) == 1
    for lv, clusters in enumerate(h.levels, start=1):
        assert sorted(v for c in clusters for v in c.leaves) == list(range(64))  # a partition
        for c in clusters:
            assert len(c.members) <= maxcs and c.coordinator in c.members and c.level == lv
    if maxcs == 8:  # the 8 stubs are found exactly
        assert sorted(sorted(c.leaves) for c in h.levels[0]) == [list(range(8 * s, 8 * s + 8)) for s in range(8)]


def test_maxcs_must_leave_room():
    with pytest.raises(TopologyError, match="maxcs 1"):
        build_hierarchy(transit_stub(2, 2), 1)


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 50), st.sampled_from([2, 3, 4, 8]), st.integers(0, 35), st.integers(0, 35))
def test_estimate_bound(seed, maxcs, u, v):
    """[RECON] |d(u, v) − d(rep_l(u), rep_l(v))| <= 2 Σ_{i<l} d_i (metric costs; not the paper's Theorem 1)."""
    top = transit_stub(6, 6, seed=seed)
    h = build_hierarchy(top, maxcs)
    slack = 0.0
    for level in range(1, len(h.levels) + 1):
        est = top.dist[h.rep(u, level)][h.rep(v, level)]
        assert abs(top.dist[u][v] - est) <= 2 * slack + 1e-9
        slack += h.radius(top, level)


def test_topology_rejects_bad_links_directly():
    with pytest.raises(TopologyError, match="latency must be a positive"):
        PhysicalNetwork(("a", "b"), (PhysicalLink("a", "b", 0.0),))
