"""``auto``'s faster search (issue 30: an 8-stream query plans in under 1 s without data) is the same
search: its shortcuts price exactly what the byte model prices, and on the bytes bench's queries the
plan it chooses is never estimated worse than the one the full-lowering search chose before.

No timed assertions here: ``bench/plan_time.py`` measures the time."""
from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from joinlib.algorithms import ALGORITHMS
from joinlib.costs import WireModel
from joinlib.costs.incremental import Ensemble, PlanPricer
from joinlib.costs.unit_time import StepCache
from joinlib.data.synthetic import SyntheticStats, build_query, topology_edges
from joinlib.model import Execution, Network, Query
from joinlib.plan import logical as plans
from joinlib.plan.logical import Plan, Sequence, Step
from joinlib.planner.auto import auto_ranked
from joinlib.planner.exhaustive import Memo, exhaustive_sequence
from joinlib.planner.improved import random_query


def bench_query(graph: str, m: int, topology: str, per_edge: bool, f: float, tuple_bytes: int, window_ms: int,
                skew: bool) -> Query:
    """A workload's query as ``bench/bytes_bench.py`` builds it (``Workload.query``)."""
    stats: list[SyntheticStats] = [{"rate": 1000.0 if (skew and i == 0) else 100.0,
                                    "attributes": max(1, tuple_bytes // 5), "tuple_bytes": tuple_bytes,
                                    "selectivity": f, "window_ms": window_ms} for i in range(m)]
    return build_query(graph, stats, topology_edges(m, topology), per_edge_attrs=per_edge,
                       network=Network(25.0, 1024.0), execution=Execution(100, 80))


#: (query, the estimate of auto's choice without data before the faster search, at 304035c)
PINNED = [
    (("2way", 2, "chain", False, 0.001, 50, 500, False), 942.8081808342461),
    (("chain3-keys", 3, "chain", True, 0.001, 1250, 3000, False), 50285.33211495027),
    (("clique3-keys", 3, "complete", True, 0.0001, 50, 500, True), 700.2741973856369),
    (("chain4", 4, "chain", False, 0.01, 1250, 3000, False), 373871.20379448275),
    (("star4-keys", 4, "star", True, 0.001, 50, 500, False), 1241.8372261140814),
    (("clique4", 4, "complete", False, 0.001, 1250, 500, True), 4083.4587785178246),
    (("clique4", 4, "complete", False, 0.01, 1250, 3000, False), 373021.78222920635),
    (("star4", 4, "star", False, 0.1, 50, 500, False), 14670.0),
]


@pytest.mark.parametrize("spec,before", PINNED, ids=[f"{s[0]}-f{s[4]:g}-{s[5]}B-w{s[6]}" for s, _ in PINNED])
def test_choice_never_estimated_worse_than_before(spec, before):
    best = auto_ranked(bench_query(*spec))[0][0]
    assert best.estimate <= before * (1 + 1e-9), (best.name, best.estimate, before)


# ------------------------------------------------------------------ the shortcuts price what the model prices
def _random_sequence(rng: random.Random, q: Query, head: str) -> Sequence:
    order = plans.bfs_order(q, head)
    if rng.random() < 0.5:   # another join-graph order
        done, order = {head}, []
        while len(done) < len(q.names):
            nxt = sorted(n for n in q.names if n not in done and any(q.predicates_between(n, d) for d in done))
            pick = rng.choice(nxt)
            done.add(pick)
            order.append(pick)
    start = rng.choice([None, *q.nodes])
    return Sequence(head, tuple(Step(o, rng.choice(ALGORITHMS)) for o in order), start)


def _query(seed: int, m: int, topology: str) -> Query:
    rng = random.Random(seed)
    sites = [f"N{rng.randrange(1, m + 1)}" for _ in range(m)] if rng.random() < 0.3 else None   # shared sites
    return random_query(rng, m, topology, sites=sites)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), m=st.integers(2, 5), topology=st.sampled_from(["chain", "star", "cycle",
                                                                                   "complete"]))
def test_incremental_pricing_equals_the_model(seed, m, topology):
    """A plan priced from its sequences' parts, and a sequence replaced by a delta, cost what the
    plan-level model (the whole plan lowered) says."""
    q = _query(seed, m, topology)
    rng = random.Random(seed)
    model = WireModel()
    enc, inputs = model.context(q)
    pricer = PlanPricer(inputs, enc)
    seqs = [_random_sequence(rng, q, h) for h in q.names]
    full = model.estimate(q, Plan(tuple(seqs))).bytes_per_s
    assert math.isclose(pricer.cost(seqs), full, rel_tol=1e-9)
    ens = Ensemble(pricer, [pricer.parts(s) for s in seqs])
    i = rng.randrange(m)
    new = _random_sequence(rng, q, q.names[i])
    seqs[i] = new
    after = model.estimate(q, Plan(tuple(seqs))).bytes_per_s
    assert math.isclose(full + ens.delta(i, pricer.parts(new)), after, rel_tol=1e-9, abs_tol=1e-6)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), m=st.integers(2, 5), topology=st.sampled_from(["chain", "star", "cycle",
                                                                                   "complete"]))
def test_reduction_shape_equals_the_model(seed, m, topology):
    """A reduction priced from its site-independent shape costs what its lowered plan costs, at every node."""
    q = _query(seed, m, topology)
    rng = random.Random(seed)
    model = WireModel()
    tree = plans.spanning_tree(q, rng.choice(q.names))
    base = plans.reduction(q, q.nodes[0], tree, cross=rng.random() < 0.5)
    assert base.reduce is not None
    edges = [d for a, b in base.reduce.edges(q) for d in ((a, b), (b, a))]
    skip = [d for d in edges if rng.random() < 0.3]
    for node in q.nodes:
        p = plans.with_skip(q, plans.reduction(q, node, tree, base.reduce.root, (), base.reduce.cross), skip)
        assert math.isclose(model.plan_cost(q, p), model.estimate(q, p).bytes_per_s, rel_tol=1e-9)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), m=st.integers(2, 5), topology=st.sampled_from(["chain", "star", "complete"]))
def test_a_shared_dp_table_gives_every_start_its_optimum(seed, m, topology):
    """The per-start searches of one head share the DP's table (``auto``'s ``Search``): each start's
    optimum is the one a search of its own finds."""
    q = _query(seed, m, topology)
    model = WireModel()
    cache = StepCache(q, model)
    for head in q.names:
        memo: Memo = {}
        for node in q.nodes:
            _, shared = exhaustive_sequence(q, model, head, node, cache, memo)
            _, alone = exhaustive_sequence(q, WireModel(), head, node)
            assert math.isclose(shared, alone, rel_tol=1e-9, abs_tol=1e-9)
