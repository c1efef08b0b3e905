"""Reductions with skipped tree directions (``Reduce.skip``): the plan's JSON form and its errors,
the IR (no flow, rounds without it, signatures that tell the variants apart), what runs, the byte
model and auto's choice of skipped directions."""
from __future__ import annotations

from pathlib import Path

import pytest

from joinlib.costs import WireModel, estimate, from_data
from joinlib.data.files import load_streams
from joinlib.data.gen import generate
from joinlib.data.synthetic import SyntheticStats, build_query, topology_edges
from joinlib.errors import PlanError
from joinlib.model import Execution, Network
from joinlib.plan import logical as plans
from joinlib.plan.ir import lower
from joinlib.planner.auto import rank, skip_directions
from joinlib.query import load_query
from joinlib.runtime.sink import CountingSink
from joinlib.sim.engine import run_embedded
from joinlib.testing import run_plan

ROOT = Path(__file__).resolve().parents[2]
SELECTIVE = ROOT / "examples" / "routers_selective.yaml"   # S1@r1 - S2@r2 - S3@r3, a chain
TREE = [["S1", "S2"], ["S2", "S3"]]


def _skew(f: float = 0.001, m: int = 3):
    """Issue 11's `chain3-f0.001-50B-w500-skew`: S1 at 1000/s, the others at 100/s, 50-byte tuples."""
    stats: list[SyntheticStats] = [{"rate": 1000.0 if i == 0 else 100.0, "attributes": 10, "tuple_bytes": 50,
                                "selectivity": f, "window_ms": 500} for i in range(m)]
    return build_query("skew", stats, topology_edges(m, "chain"), network=Network(25.0, 1024.0),
                       execution=Execution(100, 80))


# ------------------------------------------------------------------ the plan and its JSON
def test_skip_round_trips_through_json():
    q = load_query(SELECTIVE)
    p = plans.from_json(q, {"reduce": {"site": "r3", "tree": TREE, "root": "S2", "skip": [["S2", "S1"], ["S1", "S2"]]}})
    assert p.reduce is not None and p.reduce.skip == (("S1", "S2"), ("S2", "S1"))   # query order
    spec = p.to_json()["reduce"]
    assert isinstance(spec, dict) and spec["skip"] == [["S1", "S2"], ["S2", "S1"]]
    assert plans.from_json(q, p.to_json()) == p
    assert "no key sets S1->S2, S2->S1" in p.describe()
    # no skip: the JSON form is the old one, and an empty list is the same plan
    plain = plans.from_json(q, {"reduce": {"site": "r3", "tree": TREE, "skip": []}})
    assert plain == plans.reduction(q, "r3") and "skip" not in plain.to_json()["reduce"]
    # the edge may be named either way round; repeats collapse
    again = plans.reduction(q, "r3", [("S2", "S1"), ("S3", "S2")], None, [("S3", "S2"), ("S3", "S2")])
    assert again.reduce is not None and again.reduce.skip == (("S3", "S2"),)


@pytest.mark.parametrize("spec,message", [
    ({"skip": "S1>S2"}, r"reduce\.skip: expected a list of \[sender, receiver\] pairs"),
    ({"skip": [["S1", "S2", "S3"]]}, r"reduce\.skip: expected a list of \[sender, receiver\] pairs"),
    ({"skip": [["S1", 2]]}, r"reduce\.skip: expected a list"),
    ({"skip": [["S1", "S3"]]}, r"reduce\.skip: S1->S3 is not a direction of a tree edge \(tree: S1-S2, S2-S3\)"),
    ({"skip": [["S1", "S1"]]}, r"reduce\.skip: S1->S1 is not a direction of a tree edge"),
    ({"skip": [["S1", "S9"]]}, r"reduce\.skip: unknown stream 'S9' in S1->S9 \(streams: S1, S2, S3\)"),
    ({"skips": [["S1", "S2"]]}, r"reduce: unknown field 'skips' \(fields: site, tree, root, cross, skip\)"),
])
def test_skip_errors_say_what_is_wrong(spec, message):
    q = load_query(SELECTIVE)
    with pytest.raises(PlanError, match=message):
        plans.from_json(q, {"reduce": {"site": "r3", "tree": TREE, **spec}})


def test_skip_is_checked_against_the_default_tree_too():
    q = load_query(SELECTIVE)   # default tree: S2 in the middle
    with pytest.raises(PlanError, match=r"S3->S1 is not a direction of a tree edge \(tree: S1-S2, S2-S3\)"):
        plans.from_json(q, {"reduce": {"site": "r1", "skip": [["S3", "S1"]]}})


# ------------------------------------------------------------------ the IR
def test_a_skipped_direction_has_no_flow_and_no_round():
    q = load_query(SELECTIVE)
    full = lower(q, plans.reduction(q, "r3", root="S2"))
    ir = lower(q, plans.reduction(q, "r3", root="S2", skip=[("S1", "S2"), ("S3", "S2")]))
    gone = {"reduce:S1@r1>r3/to:S2", "reduce:S3@r3>r3/to:S2"}
    assert gone <= set(full.flow_ids) and not gone & set(ir.flow_ids)
    assert set(full.flow_ids) - set(ir.flow_ids) == gone
    s2, s1 = ir.reducer("S2"), ir.reducer("S1")
    assert full.reducer("S2").schedule == (("in", "S1"), ("in", "S3"), ("out", "S1"), ("out", "S3"))
    assert s2.schedule == (("out", "S1"), ("out", "S3"))   # the root filters by nobody: it only sends
    assert s1.schedule == (("in", "S2"),)                   # a leaf that only takes
    assert [e.stream for e in s2.filters] == [] and [e.stream for e in s2.sends] == ["S1", "S3"]
    assert s1.edge("S2").out_flow is None and s1.edge("S2").in_flow == "reduce:S2@r2>r3/to:S1"


def test_signatures_tell_trees_roots_and_skips_apart():
    q = load_query(SELECTIVE)
    variants = [plans.reduction(q, "r3"), plans.reduction(q, "r3", root="S1"),
                plans.reduction(q, "r3", skip=[("S1", "S2")]), plans.reduction(q, "r3", skip=[("S2", "S1")]),
                plans.reduction(q, "r3", skip=[("S1", "S2"), ("S2", "S1")]),
                plans.reduction(q, "r2", skip=[("S1", "S2")])]
    irs = [lower(q, p) for p in variants]
    assert len({ir.digest() for ir in irs}) == len(irs)
    assert len({ir.signatures() for ir in irs}) == len(irs)
    d = irs[0].diff(irs[2])
    assert d.affected == ("r1", "r2")     # S1 no longer sends to S2, S2 no longer takes from S1
    assert lower(q, variants[2]).digest() == irs[2].digest()   # and lowering stays deterministic


# ------------------------------------------------------------------ what runs
@pytest.fixture(scope="module")
def selective(tmp_path_factory):
    q = load_query(SELECTIVE)
    d = tmp_path_factory.mktemp("sel")
    generate(q, d, 6000, seed=3)
    return q, load_streams(q, d)


def test_skipped_directions_send_nothing_and_lose_nothing(selective):
    q, streams = selective
    want = run_plan(q, streams, plans.central(q, "r3"))
    assert want
    plain = run_embedded(q, streams, plans.reduction(q, "r3"), CountingSink())
    every = [("S1", "S2"), ("S2", "S1"), ("S2", "S3"), ("S3", "S2")]
    for skip in ([("S1", "S2")], [("S2", "S1"), ("S3", "S2")], every):
        plan = plans.reduction(q, "r3", skip=skip)
        assert run_plan(q, streams, plan) == want, skip
        rep = run_embedded(q, streams, plan, CountingSink())
        partial = {(ln["src"], ln["dst"]) for ln in rep.links if ln["kind"] == "partial"}
        sites = {s.name: s.site for s in q.streams}
        assert not partial & {(sites[a], sites[b]) for a, b in skip}, skip
        assert rep.messages < plain.messages
    # nothing filtered at all: every tuple ships once, like central (in one ShippedBatch per epoch)
    rep = run_embedded(q, streams, plan, CountingSink())
    assert {ln["kind"] for ln in rep.links} == {"full"}


# ------------------------------------------------------------------ the byte model and auto
def test_the_model_prices_a_skipped_direction(selective):
    q, streams = selective
    model = WireModel(from_data(q, streams))
    dur = (max(t.ts for v in streams.values() for t in v) + 1) / 1000
    full = model.estimate(q, plans.reduction(q, "r3"))
    skip = model.estimate(q, plans.reduction(q, "r3", skip=[("S1", "S2")]))
    sigs = {f.sig for f in skip.flows}
    assert "reduce:S1@r1>r3/to:S2" in {f.sig for f in full.flows} and "reduce:S1@r1>r3/to:S2" not in sigs
    ship = {f.sig: f.items for f in skip.flows if f.name == "ship"}
    before = {f.sig: f.items for f in full.flows if f.name == "ship"}
    assert ship["RF:S2@r2>r3/update"] > 3 * before["RF:S2@r2>r3/update"]   # S2 no longer filtered by S1
    for s in ([("S1", "S2")], [("S2", "S1"), ("S3", "S2")]):
        plan = plans.reduction(q, "r3", skip=s)
        got = run_embedded(q, streams, plan, CountingSink()).bytes
        assert model.estimate(q, plan).bytes(dur) == pytest.approx(got, rel=0.35), s


def test_auto_skips_the_fast_streams_key_sets():
    q = _skew()
    model = WireModel()
    plan = skip_directions(q, model, plans.reduction(q, "N1"))
    assert plan.reduce is not None and ("S1", "S2") in plan.reduce.skip    # 1000 keys/s for 100 tuples/s
    assert ("S3", "S2") not in plan.reduce.skip and ("S2", "S3") not in plan.reduce.skip
    assert model.plan_cost(q, plan) < model.plan_cost(q, plans.reduction(q, "N1"))
    assert skip_directions(q, model, plans.reduction(q, "N1")) == plan     # deterministic
    best = rank(q, model)[0]
    assert best.plan.reduce is not None and best.plan.reduce.skip and "/skip:" in best.name
    # the selective routers (equal rates, 1250-byte tuples): every filter of a stream that ships pays;
    # only S3, born at the result site, is not worth filtering (it ships nothing, and its keys to S2
    # grow by less than S2's set for it costs)
    sel = load_query(SELECTIVE)
    assert skip_directions(sel, WireModel(), plans.reduction(sel, "r3")).reduce == \
        plans.reduction(sel, "r3", skip=[("S2", "S3")]).reduce
    assert skip_directions(sel, WireModel(), plans.reduction(sel, "r2")).reduce == plans.reduction(sel, "r2").reduce


def test_skipped_plans_measure_as_estimated(tmp_path):
    q = _skew(0.001)
    generate(q, tmp_path, 6000, seed=1)
    streams = load_streams(q, tmp_path)
    plan = skip_directions(q, WireModel(from_data(q, streams)), plans.reduction(q, "N1"))
    assert plan.reduce is not None and plan.reduce.skip
    got = run_embedded(q, streams, plan, CountingSink()).bytes
    dur = (max(t.ts for v in streams.values() for t in v) + 1) / 1000
    assert estimate(q, plan, from_data(q, streams)).bytes(dur) == pytest.approx(got, rel=0.25)
    assert got < run_embedded(q, streams, plans.reduction(q, "N1"), CountingSink()).bytes
