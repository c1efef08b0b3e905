"""The memos behind ``auto``'s faster search (issue 30, second pass) give exactly what the computations they
replace give -- the same floats, not merely close ones: the search's choice and its estimates must not move.

* a step's information is a function of the joined set and its key classes (shared by every head and order);
* the byte model's step costs, shared by every location of a (head, joined set) and computed once for the six
  algorithms, are a fresh model's (up to the rounding of a set's rate, as they were before: see the test);
* a plan's walk, memoised on (head, join order), is a fresh walk;
* a reduction lowered once and priced for a skip set is the reduction lowered with that skip set;
* the descent's cached replica terms are each replica's term summed over every sequence, and a trial's delta
  kept until the plan changes is the one computed again;
* a plan of sequences priced from its sequences' parts is the plan lowered and estimated, and a key spec
  memoised per (stream, joined set) the one worked out afresh.

No timing here: ``bench/plan_time.py`` measures the time."""
from __future__ import annotations

import math
import random
from dataclasses import replace
from typing import Optional

from hypothesis import given, settings
from hypothesis import strategies as st

from joinlib.algorithms import ALGORITHMS
from joinlib.costs import WireModel
from joinlib.costs.flows import TreeMemo, reduction_flows
from joinlib.costs.incremental import Ensemble, PlanPricer, Replica, SeqParts, Use
from joinlib.costs.model import Walks, estimate_ir, reduction_shape
from joinlib.model import Query
from joinlib.plan import logical as plans
from joinlib.plan.ir import _key_spec, key_spec, lower
from joinlib.plan.logical import Plan, Sequence, Step
from joinlib.planner.auto import Search
from joinlib.planner.improved import random_query

TOPOLOGIES = st.sampled_from(["chain", "star", "cycle", "complete"])


def _query(seed: int, m: int, topology: str) -> Query:
    rng = random.Random(seed)
    sites = [f"N{rng.randrange(1, m + 1)}" for _ in range(m)] if rng.random() < 0.3 else None   # shared sites
    return random_query(rng, m, topology, sites=sites)


def _sequence(rng: random.Random, q: Query, head: str) -> Sequence:
    """A random join-graph order of the other streams, random algorithms, a random start."""
    done, order = {head}, []
    while len(done) < len(q.names):
        pick = rng.choice(sorted(n for n in q.names if n not in done and any(q.predicates_between(n, d) for d in done)))
        done.add(pick)
        order.append(pick)
    return Sequence(head, tuple(Step(o, rng.choice(ALGORITHMS)) for o in order), rng.choice([None, *q.nodes]))


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), m=st.integers(2, 5), topology=TOPOLOGIES)
def test_step_costs_after_a_search_are_a_fresh_models(seed, m, topology):
    """After every head's search (its tables shared by every start and location), each state's step
    information is what the state computes on its own, and its step costs what a fresh model computes --
    up to rounding only: a (head, joined set) is priced once, from the first of its states the search
    reaches, whose rate is the same product of the same factors taken in another order.  That was so
    before these memos too (``auto``'s candidates and estimates did not move by a bit)."""
    q = _query(seed, m, topology)
    model = WireModel()
    search = Search.of(q, model)
    for head in q.names:
        search.best_sequences(head)
    q = model.stats_query(q)
    rng = random.Random(seed)
    states = list(search.cache._states.values())
    for state in rng.sample(states, min(40, len(states))):
        for stream in search.cache.frontier(state):
            info = state.info(q, stream)
            assert tuple(info[:5]) == tuple(state._joining(q, stream))
            mine, fresh = model.step_costs(q, state, stream), WireModel().step_costs(q, state, stream)
            assert mine.keys() == fresh.keys()
            assert all(math.isclose(mine[a], fresh[a], rel_tol=1e-12, abs_tol=1e-12) for a in mine)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), m=st.integers(2, 5), topology=TOPOLOGIES)
def test_a_shared_walk_memo_prices_as_a_fresh_walk(seed, m, topology):
    """Plans sharing join orders priced through one walk memo cost, flow by flow, what each costs alone."""
    q = _query(seed, m, topology)
    rng = random.Random(seed)
    model = WireModel()
    enc, inputs = model.context(q)
    q = inputs.query
    walks: Walks = {}
    for _ in range(4):
        seqs = tuple(_sequence(random.Random(rng.randrange(3)), q, h) for h in q.names)   # few distinct orders
        ir = lower(q, plans.validate(q, Plan(seqs)))
        assert estimate_ir(inputs, ir, enc, walks).flows == estimate_ir(inputs, ir, enc).flows


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), m=st.integers(2, 5), topology=TOPOLOGIES)
def test_a_skip_set_priced_on_the_unskipped_lowering_is_the_skipped_one(seed, m, topology):
    """A reduction lowered once and priced for several skip sets (one memo of edge messages across them)
    has the key sets, shipped tuples and shape of the reduction lowered with each skip set."""
    q = _query(seed, m, topology)
    rng = random.Random(seed)
    model = WireModel()
    enc, inputs = model.context(q)
    q = inputs.query
    tree = plans.spanning_tree(q, rng.choice(q.names))
    base = plans.reduction(q, q.nodes[0], tree, cross=rng.random() < 0.5)
    assert base.reduce is not None
    bare = lower(q, Plan((), base.reduce))
    edges = [d for a, b in base.reduce.edges(q) for d in ((a, b), (b, a))]
    shared, rhos = TreeMemo(), dict[tuple[str, str], float]()
    for _ in range(4):
        red = plans.with_skip(q, base, [d for d in edges if rng.random() < 0.3]).reduce
        assert red is not None
        alone = reduction_flows(q, lower(q, Plan((), red)).reducers, enc)
        assert reduction_flows(q, bare.reducers, enc, rhos, shared, frozenset(red.skip)) == alone
        assert reduction_shape(inputs, red, enc, rhos, shared, bare) == reduction_shape(inputs, red, enc)
        assert replace(red, skip=()) == base.reduce


def _term(pricer: PlanPricer, parts: list[SeqParts], sig: str) -> float:
    """A replica's term as :class:`Ensemble` priced it before its memos: over every sequence, in plan order."""
    rep: Optional[Replica] = None
    users: tuple[Use, ...] = ()
    for p in parts:
        rep = rep or p.replicas.get(sig)
        users += p.uses.get(sig, ())
    return pricer.group(rep, users) if rep is not None else 0.0


def _priced(seed: int, m: int, topology: str) -> tuple[Query, random.Random, WireModel, PlanPricer]:
    """A random query (the model's statistics query), a generator seeded alike, a model and its plan pricer."""
    q = _query(seed, m, topology)
    model = WireModel()
    enc, inputs = model.context(q)
    return inputs.query, random.Random(seed), model, PlanPricer(inputs, enc)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), m=st.integers(2, 5), topology=TOPOLOGIES)
def test_the_descents_cached_terms_are_its_replicas_terms(seed, m, topology):
    """An ensemble changed sequence by sequence (its terms kept between changes, memoised on the sequences
    holding each replica) prices every plan and every replacement as summing each replica's term over
    every sequence does."""
    q, rng, _, pricer = _priced(seed, m, topology)
    ens = Ensemble(pricer, [pricer.parts(_sequence(rng, q, h)) for h in q.names])
    for _ in range(6):
        i = rng.randrange(len(q.names))
        new = pricer.parts(_sequence(rng, q, q.names[i]))
        now, swapped = list(ens.parts), [new if j == i else p for j, p in enumerate(ens.parts)]
        sigs = dict.fromkeys(sig for p in now for sig in p.replicas)
        assert ens.cost() == sum(p.fixed for p in now) + sum(_term(pricer, now, sig) for sig in sigs)
        delta = new.fixed - now[i].fixed
        for sig in dict.fromkeys([*now[i].replicas, *new.replicas]):
            delta += _term(pricer, swapped, sig) - _term(pricer, now, sig)
        assert ens.delta(i, new) == delta
        assert ens.delta(i, new) == delta   # kept until the plan changes
        ens.replace(i, new)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), m=st.integers(2, 5), topology=TOPOLOGIES)
def test_a_plan_priced_from_its_sequences_parts_is_the_plan_lowered(seed, m, topology):
    """``PlanPricer.plan_cost`` (what ``auto`` prices its plans of sequences with, from the parts the descent
    shares) is the whole plan lowered and estimated -- the same float, not merely a close one -- and a
    lowering's key specs, memoised per (stream, joined set), are the ones worked out afresh."""
    q, rng, model, pricer = _priced(seed, m, topology)
    for _ in range(4):
        plan = plans.validate(q, Plan(tuple(_sequence(rng, q, h) for h in q.names)))
        assert pricer.plan_cost(plan.sequences) == model.plan_cost(q, plan)
        for st_op in lower(q, plan).steps:
            joined = sorted(st_op.input.streams, key=q.names.index)
            assert key_spec(q, st_op.stream, joined) == _key_spec(q, st_op.stream, joined[::-1])


def test_another_query_under_a_reused_id_finds_every_memo_empty():
    """A query object freed and another made at its address (``id`` reused): nothing memoised for the old one
    may answer for the new one, so every memo of the model is forgotten -- each one, including any added later."""
    q = _query(7, 4, "chain")
    model = WireModel()
    search = Search.of(q, model)
    for head in q.names:
        search.best_sequences(head)
    model.plan_cost(q, plans.central(q, q.streams[0].site))
    memos = {n: v for n, v in vars(model).items() if isinstance(v, dict) and n != "_enc"}
    assert any(memos.values()), "the search memoised nothing: the test proves nothing"
    other = _query(8, 4, "chain")
    model._enc[id(other)] = model._enc[id(q)]   # as if ``other`` had taken q's id
    model.context(other)
    assert not any(memos.values()), {n: len(v) for n, v in memos.items() if v}


# ------------------------------------------------------------------ third pass: the 8-way clique's shortcuts
def _with_tuple_bytes(q: Query, rng: random.Random) -> Query:
    """``q`` with fractional declared tuple sizes: the declared bytes of a row are then not exact in every order."""
    from joinlib.model import Stream
    streams = tuple(replace(s, stats=replace(s.stats, tuple_bytes=rng.uniform(10.0, 90.0) + 0.1))   # type: ignore[arg-type]  # a fractional size, as a measured one may be
                    if isinstance(s, Stream) else s for s in q.streams)
    return replace(q, streams=streams)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), m=st.integers(2, 5), topology=TOPOLOGIES)
def test_the_dps_moves_are_the_options_of_every_next_stream(seed, m, topology):
    """:meth:`StepCache.moves` with the cheapest algorithm per side found once per (head, joined set, stream) is
    the frontier's options (each found for its own location), in the same order: the DP expands the same moves."""
    from joinlib.costs.unit_time import SeqState, StepCache
    q = _query(seed, m, topology)
    model = WireModel()
    fast, slow = StepCache(q, model), StepCache(q, model)
    slow._located = False
    for head in q.names:
        todo = [fast.canonical(SeqState.start(q, head, node)) for node in q.nodes]
        seen = set()
        while todo:
            state = todo.pop()
            if state.memo_key() in seen or len(state.joined) == m:
                continue
            seen.add(state.memo_key())
            got = fast.moves(state)
            want = slow.moves(slow.canonical(state))
            assert [(c, r, n, a, s.memo_key()) for c, r, n, a, s in got] == \
                [(c, r, n, a, s.memo_key()) for c, r, n, a, s in want]
            todo.extend(s for *_, s in got)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), m=st.integers(2, 5), topology=TOPOLOGIES, fractional=st.booleans())
def test_steps_asking_the_same_of_a_stream_are_priced_once_and_the_same(seed, m, topology, fractional):
    """The byte model prices steps whose probes differ only in the order of a row's streams once
    (``Encoding.rows_order_free``): each costs, to the bit, what a model without that memo computes; with
    fractional declared tuple sizes the memo is off."""
    q = _query(seed, m, topology)
    if fractional:
        q = _with_tuple_bytes(q, random.Random(seed))
    shared, alone = WireModel(), WireModel()
    assert shared.context(q)[0].rows_order_free is not fractional
    alone.context(q)[0].rows_order_free = False
    searches = [Search.of(q, shared), Search.of(q, alone)]
    for search in searches:
        for head in q.names:
            search.best_sequences(head)
    assert shared._costs == alone._costs   # every step of every head's search, bit for bit
    assert [searches[0].per_start[h] for h in q.names] == [searches[1].per_start[h] for h in q.names]
    if fractional:
        assert not shared._by_probe


def test_a_symmetric_cliques_heads_share_their_steps_prices():
    """On a fully connected query of like streams (the bench's), steps of different heads ask the same of a
    stream: priced once (about a quarter of the steps at 5 streams), and as a model without the memo prices them."""
    from tests.unit.test_plan_time import bench_query
    q = bench_query("clique5", 5, "complete", False, 0.001, 1250, 3000, False)
    shared, alone = WireModel(), WireModel()
    alone.context(q)[0].rows_order_free = False
    for model in (shared, alone):
        search = Search.of(q, model)
        for head in q.names:
            search.best_sequences(head)
    assert shared._costs == alone._costs
    assert len(shared._by_probe) < len(shared._costs) / 2
