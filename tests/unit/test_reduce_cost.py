"""The byte model of reductions and Bloom-filter key sets (joinlib.costs), auto's reduction
candidates and the ``reduce[:NODE]`` plan name."""
from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from joinlib.costs import WireModel, estimate, from_data, from_query
from joinlib.costs.explain import format_estimate
from joinlib.costs.flows import reduction_flows
from joinlib.data.files import load_streams
from joinlib.data.gen import generate
from joinlib.data.synthetic import SyntheticStats, build_query, topology_edges
from joinlib.errors import PlanError
from joinlib.model import Execution, Network, StreamStats
from joinlib.plan.ir import lower
from joinlib.plan.logical import Plan, central, reduction, uniform
from joinlib.planner.auto import auto_ranked, rank, short_list
from joinlib.planner.registry import PLAN_HELP, resolve_plan
from joinlib.protocol.bloom import KeySet
from joinlib.protocol.messages import Envelope, KeyBatch, KeyFilter, ShippedBatch
from joinlib.protocol.wire import envelope_size
from joinlib.query import load_query
from joinlib.runtime.algorithms.base import key_message
from joinlib.runtime.sink import CountingSink
from joinlib.sim.engine import run_embedded

ROOT = Path(__file__).resolve().parents[2]
SELECTIVE = ROOT / "examples" / "routers_selective.yaml"


@pytest.fixture(scope="module")
def selective(tmp_path_factory):
    q = load_query(SELECTIVE)
    d = tmp_path_factory.mktemp("sel")
    generate(q, d, 8000, seed=3)
    return q, load_streams(q, d)


def _synthetic(m: int, topology: str, f: float, per_edge: bool, tuple_bytes: int = 50, window_ms: int = 500):
    stats: list[SyntheticStats] = [{"rate": 100.0, "attributes": max(1, tuple_bytes // 5), "tuple_bytes": tuple_bytes,
                                "selectivity": f, "window_ms": window_ms} for _ in range(m)]
    return build_query("t", stats, topology_edges(m, topology), per_edge_attrs=per_edge,
                       network=Network(25.0, 1024.0), execution=Execution(100, 80))


def _span_s(streams) -> float:
    return (max(t.ts for v in streams.values() for t in v) + 1) / 1000


# ------------------------------------------------------------------ message sizes
def test_key_sets_are_priced_as_the_runtime_builds_them():
    q = load_query(SELECTIVE)
    enc = from_query(q).encoding()
    fc = enc.window_fp_cost("S2")
    assert fc == pytest.approx(100 * 3 * 1250)
    sizes = []
    for k in range(0, 40):
        keys = enc.distinct_keys("S1", (0,), k)
        assert len(set(keys)) == k
        body = key_message(keys, q.execution.bloom_fpr, fc)
        assert enc._request("S1", (0,), k, fc) == body  # the runtime's choice, keys or filter
        sizes.append(envelope_size(Envelope("r1", "r2", 1, enc._epoch, body)))
        ks = KeySet.of(keys, q.execution.bloom_fpr, fp_cost=fc)
        f = enc._filter("S1", (0,), k, fc)
        assert (ks.bloom is not None) == bool(f.bits) and (f.bits == (ks.bloom.bits if ks.bloom else b""))
    # the number of keys per message is Poisson: the expected size is the mean over it
    n, pk, mean = 3.0, math.exp(-3.0), 0.0
    for k in range(40):
        mean += pk * sizes[k]
        pk *= n / (k + 1)
    assert enc.request("r1", "r2", "S1", (0,), n, fc) == pytest.approx(mean, rel=1e-6)
    assert enc.request("r1", "r2", "S1", (0,), 0, fc) == sizes[0]
    # ten keys against a 375 kB window: a filter (a few bytes), not the keys (~80 bytes)
    assert isinstance(key_message(enc.distinct_keys("S1", (0,), 10), 0.01, fc), KeyFilter)
    assert enc.request("r1", "r2", "S1", (0,), 10, fc) < enc.keys("r1", "r2", "S1", (0,), 10)
    # no declared statistics: the runtime writes the keys out, and so does the model
    bare = replace(q, streams=tuple(replace(s, stats=StreamStats()) for s in q.streams))
    enc0 = from_query(bare).encoding()
    assert enc0.window_fp_cost("S2") is None
    assert enc0.request_fp("S1", (0,), 10, None) == 0.0
    assert isinstance(key_message(enc0.distinct_keys("S1", (0,), 10), 0.01, None), KeyBatch)
    # a ShippedBatch of n tuples adds the declared tuple bytes per tuple
    one, two = enc.shipped("r1", "r3", "S1", 1, 0), enc.shipped("r1", "r3", "S1", 2, 0)
    assert two - one == pytest.approx(1250, abs=2)
    assert enc.shipped("r1", "r3", "S1", 0, 0) == envelope_size(Envelope("r1", "r3", 1, enc._epoch, ShippedBatch()))


def test_reduction_flows_follow_the_tree():
    q = load_query(SELECTIVE)
    plan = reduction(q, "r3")
    ir = lower(q, plan)
    edges, shipped = reduction_flows(q, ir.reducers)
    # the leaves send every new tuple's key to the root; the root only what passes the other leaf
    assert edges[("S1", "S2")].tuples == pytest.approx(10.0)
    assert edges[("S2", "S1")].tuples < edges[("S1", "S2")].tuples / 5
    assert set(shipped) == {"S1", "S2", "S3"} and all(0 < v < 1 for v in shipped.values())
    est = estimate(q, plan)
    links = est.by_link()
    # S3 is born at the result site: it ships nothing in full, but sends its keys to S2
    assert ("r3", "r2", "partial") in links and not any(s == "r3" and k == "full" for s, _, k in links)
    assert {k for _, _, k in links} == {"full", "partial"}
    assert est.bytes_per_s < estimate(q, central(q, "r3")).bytes_per_s / 50


# ------------------------------------------------------------------ estimates against measurement
def test_reduction_estimates_follow_measurement(selective):
    q, streams = selective
    model = WireModel(from_data(q, streams))
    dur = _span_s(streams)
    for site in q.sites:
        plan = reduction(q, site)
        got = run_embedded(q, streams, plan, CountingSink()).bytes
        assert model.estimate(q, plan).bytes(dur) == pytest.approx(got, rel=0.35), site


@pytest.mark.parametrize("m,topology,per_edge", [(3, "chain", True), (3, "complete", False), (4, "star", False)])
def test_reduction_estimates_on_chains_stars_and_cycles(tmp_path, m, topology, per_edge):
    q = _synthetic(m, topology, 0.01, per_edge)
    generate(q, tmp_path, 6000, seed=1)
    streams = load_streams(q, tmp_path)
    plan = reduction(q, "N1")
    got = run_embedded(q, streams, plan, CountingSink()).bytes
    est = estimate(q, plan, from_data(q, streams)).bytes(_span_s(streams))
    assert est == pytest.approx(got, rel=0.2)


def test_bloom_requests_and_dja_deltas_follow_measurement(selective):
    q, streams = selective
    inputs = from_data(q, streams)
    dur = _span_s(streams)
    for algorithm in ("SM-S1", "SM-S2", "SM-D1", "SM-D2"):
        plan = uniform(q, algorithm)
        got = run_embedded(q, streams, plan, CountingSink()).bytes
        assert estimate(q, plan, inputs).bytes(dur) == pytest.approx(got, rel=0.2), algorithm


# ------------------------------------------------------------------ explain
def test_explain_shows_a_reductions_bytes_per_link_and_kind(selective):
    q, streams = selective
    text = format_estimate(q, reduction(q, "r3"), streams)
    assert "r1 -> r3" in text and "full" in text and "partial" in text
    assert "reduce:S2@r2>r3/to:S1" in text and "RF:S1@r1>r3/update" in text


# ------------------------------------------------------------------ auto and the registry
def test_auto_ranks_reductions_and_measures_the_best(selective):
    q, streams = selective
    ranked = rank(q, WireModel(from_data(q, streams)))
    names = {r.name.split("/")[0] for r in ranked}  # reduce:NODE[/skip:...]
    assert {"reduce:r1", "reduce:r2", "reduce:r3"} <= names
    assert ranked[0].plan.reduce is not None  # the model's best on a selective 3-way join
    # a reduction is measured even when the model ranks others first
    others = [r for r in ranked if r.plan.reduce is None]
    assert any(r.is_reduction for r in short_list(q, others + [ranked[0]]))


def test_cyclic_graphs_get_a_reduction_per_tree():
    q = _synthetic(3, "complete", 0.001, True)
    names = {r.name.split("/skip:")[0] for r in rank(q, WireModel())}
    assert {"reduce:N1", "reduce:N1/tree:S2", "reduce:N1/tree:S3"} <= names
    assert not any("/tree:" in n for n in {r.name for r in rank(load_query(SELECTIVE), WireModel())})


def test_auto_picks_a_reduction_or_something_as_cheap(selective):
    q, streams = selective
    ranked, measured = auto_ranked(q, streams)
    plan = measured[0].plan
    assert isinstance(plan, Plan)   # auto_ranked weighs plans of sequences only unless asked for every kind
    got = run_embedded(q, streams, plan, CountingSink()).bytes
    best_reduction = min(run_embedded(q, streams, reduction(q, s), CountingSink()).bytes for s in q.sites)
    best_central = min(run_embedded(q, streams, central(q, s), CountingSink()).bytes for s in q.sites)
    assert plan.reduce is not None or got <= best_reduction
    assert got <= 1.25 * best_reduction and got * 20 < best_central


def test_reduce_names_a_plan():
    q = load_query(SELECTIVE)
    p = resolve_plan(q, "reduce:r2")
    assert p.reduce is not None and p.reduce.site == "r2" and p.reduce.root == "S2"
    assert resolve_plan(q, "reduce").reduce is not None
    with pytest.raises(PlanError, match=r"reduce:zz: no such node \(nodes: r1, r2, r3\)"):
        resolve_plan(q, "reduce:zz")
    assert "reduce[:NODE]" in PLAN_HELP
