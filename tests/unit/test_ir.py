"""The plan IR (joinlib/plan/ir.py): content-derived names, node operator sets, diffs, topology."""
from __future__ import annotations

from typing import Any

import pytest

from joinlib.errors import PlanError, QueryError
from joinlib.plan import logical as plans
from joinlib.plan.ir import Base, Derived, Part, Topology, lower
from joinlib.query import parse_query

ROUTERS: dict[str, Any] = {
    "name": "routers",
    "streams": {"S1": {"site": "r1", "window": "3s"}, "S2": {"site": "r2", "window": "3s"},
                "S3": {"site": "r3", "window": "100 tuples"}},
    "join": ["S1.dest = S2.dest", "S2.dest = S3.dest"],
    "network": {"latency": "25ms", "bandwidth": "1024kbps"},
}


def query(**network):
    doc = {**ROUTERS, "network": {**ROUTERS["network"], **network}}
    return parse_query(doc, "routers")


def test_streams_are_named_by_content():
    assert Base("S1").sig == "S1"
    # the rows of head S1 joined with S2 and S3, whatever the order they were joined in
    assert Derived("S1", frozenset({"S1", "S3", "S2"})).sig == Derived("S1", frozenset({"S1", "S2", "S3"})).sig
    assert Derived("S1", frozenset({"S1", "S2"})).sig != Derived("S2", frozenset({"S1", "S2"})).sig
    assert Part(Base("S1"), "hash/8", 3).sig == "S1#hash/8:3"


def test_lowering_is_deterministic_and_flow_ids_are_ranks_of_signatures():
    q = query()
    a, b = lower(q, plans.uniform(q, "SM-S1")), lower(q, plans.uniform(q, "SM-S1"))
    assert a.signatures() == b.signatures() and a.flow_ids == b.flow_ids and a.digest() == b.digest()
    assert sorted(a.flow_ids.values()) == list(range(len(a.flows)))
    assert [sig for sig, _ in sorted(a.flow_ids.items(), key=lambda kv: kv[1])] == sorted(f.sig for f in a.flows)


def test_the_same_operator_has_the_same_name_in_two_plans():
    q = query()
    sps = lower(q, plans.uniform(q, "SP-S"))
    central = lower(q, plans.central(q, "r2"))
    # SP-S everywhere and central:r2 both keep a full replica of S1 at r2
    assert "SP-S:S1@r1>r2" in {r.sig for r in sps.replicas} & {r.sig for r in central.replicas}
    assert "SP-S:S1@r1>r2/update" in set(sps.flow_ids) & set(central.flow_ids)


def test_node_operator_sets_of_central():
    q = query()
    ir = lower(q, plans.central(q, "r3"))
    r3 = ir.nos("r3")
    assert r3.windows == ("S3",) and set(r3.starts) == {"S1", "S2", "S3"}
    assert set(r3.held) == {"SP-S:S1@r1>r3", "SP-S:S2@r2>r3"}
    assert all(st.loc == st.proc == "r3" for st in ir.steps)
    r1 = ir.nos("r1")
    assert r1.windows == ("S1",) and r1.served == ("SP-S:S1@r1>r3",) and not r1.steps and not r1.starts


def test_diff_names_what_changes_and_where():
    q = query()
    a, b = lower(q, plans.uniform(q, "SP-S")), lower(q, plans.central(q, "r2"))
    same = a.diff(a)
    assert not same.removed and not same.added and not same.affected
    d = a.diff(b)
    assert d.removed and d.added and d.kept
    assert "r1:SP-S:S2@r2>r1" in d.removed        # r1 no longer probes S2 itself
    assert "r2:start:S1" in d.added                # S1's sequence now starts at r2
    assert "r2:SP-S:S1@r1>r2" in d.kept            # the replica of S1 at r2 serves both plans
    assert set(d.affected) == {"r1", "r2", "r3"}


def test_processing_only_nodes():
    q = query(nodes=["dc"])
    assert q.sites == ("r1", "r2", "r3") and q.nodes == ("r1", "r2", "r3", "dc")
    assert Topology.of(q).nodes == q.nodes
    ir = lower(q, plans.central(q, "dc"))
    assert ir.nodes == ("r1", "r2", "r3", "dc")
    dc = ir.nos("dc")
    assert not dc.windows and set(dc.starts) == {"S1", "S2", "S3"} and len(dc.held) == 3
    with pytest.raises(PlanError, match="not a node of the query"):
        plans.central(query(), "dc")
    with pytest.raises(QueryError, match="listed twice"):
        query(nodes=["dc", "dc"])


def test_round_trip_chain():
    q = query()
    assert lower(q, plans.uniform(q, "SP-S")).round_trip_chain_ms() == 25.0      # the replica's update
    assert lower(q, plans.uniform(q, "SM-S1")).round_trip_chain_ms() == 125.0    # (25 | req 25 + resp 25) x 2
    assert lower(q, plans.central(q, "r2")).round_trip_chain_ms() == 25.0
    assert lower(q, plans.uniform(q, "SM-D2")).round_trip_chain_ms() == 150.0    # keys, match, data x 2
    # per-hop costs from the caller (a benchmark adds transfer times)
    assert lower(q, plans.uniform(q, "SP-D")).round_trip_chain_ms(lambda f: 10.0) == 20.0
