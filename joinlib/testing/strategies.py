"""Hypothesis strategies for testing plans: random queries, their streams, and plans of every kind.

Why public: a user with a plan of their own (or a planner) tests it the way the project tests its own, against
the reference join on data hypothesis shrinks to a minimal failing case. hypothesis is a test dependency, so this
module is not imported by :mod:`joinlib.testing` itself: import it from tests.

>>> from hypothesis import given, settings, strategies as st
>>> from joinlib.plan.logical import uniform
>>> from joinlib.testing import assert_exact
>>> @settings(max_examples=5, deadline=None)
... @given(st.data())
... def test_my_plan(data):
...     query = data.draw(queries(max_streams=3))
...     assert_exact(query, data.draw(stream_data(query)), uniform(query, "SP-D"))
>>> test_my_plan()
"""
from __future__ import annotations

import itertools

from hypothesis import strategies as st

from joinlib.algorithms import ALGORITHMS
from joinlib.model import Execution, Network, Predicate, Query, Stream, StreamStats, Tup, Window
from joinlib.plan.logical import Plan, Sequence, Step, central, off_tree, reduction, uniform

TOPOLOGIES = ("chain", "star", "cycle", "complete")


def _edges(topology: str, m: int) -> list[tuple[int, int]]:
    """The join graph's edges over streams 0..m-1. Not :func:`joinlib.data.synthetic.topology_edges`: a cycle
    closes with (m-1, 0), so some predicates name the later stream first (plans must not care)."""
    if topology == "chain" or m == 2:
        return [(i, i + 1) for i in range(m - 1)]
    if topology == "star":
        return [(0, i) for i in range(1, m)]
    if topology == "cycle":
        return [(i, (i + 1) % m) for i in range(m)] if m > 2 else [(0, 1)]
    return list(itertools.combinations(range(m), 2))


@st.composite
def queries(draw: st.DrawFn, max_streams: int = 4) -> Query:
    """Queries of 2..``max_streams`` streams S0, S1, ... over a chain, star, cycle or complete join graph: time
    or tuple windows, sometimes two streams at one site, sometimes declared statistics, Bloom filters of any
    false-positive rate (none, the default, or so false that they stop little: exactness must not care).

    >>> from hypothesis import find
    >>> find(queries(max_streams=2), lambda q: True).names
    ('S0', 'S1')
    """
    m = draw(st.integers(2, max_streams))
    topo = draw(st.sampled_from(TOPOLOGIES))
    shared_site = draw(st.booleans()) and m > 2      # two streams at one site sometimes
    attrs_per_stream: dict[int, list[str]] = {i: [] for i in range(m)}
    preds = []
    for a, b in _edges(topo, m):
        # a few attribute names so that some streams join on different attributes
        aa, ba = draw(st.sampled_from(["k", "x"])), draw(st.sampled_from(["k", "y"]))
        preds.append(Predicate(f"S{a}", aa, f"S{b}", ba))
        for s, at in ((a, aa), (b, ba)):
            if at not in attrs_per_stream[s]:
                attrs_per_stream[s].append(at)
    streams = []
    for i in range(m):
        if draw(st.booleans()):
            win = Window("time", draw(st.integers(5, 80)))
        else:
            win = Window("tuples", draw(st.integers(1, 8)))
        site = "site0" if (shared_site and i == m - 1) else f"site{i}"
        # declared statistics size the Bloom filters (without them, semijoins send keys)
        stats = StreamStats(rate=draw(st.floats(0.1, 200)), tuple_bytes=draw(st.integers(1, 60))) \
            if draw(st.booleans()) else StreamStats()
        streams.append(Stream(f"S{i}", i, site, win, tuple(attrs_per_stream[i]), stats=stats))
    tau = draw(st.integers(3, 40))
    fpr = draw(st.sampled_from([0.0, 0.01, 0.5, 0.9]))
    return Query(f"{topo}{m}", tuple(streams), tuple(preds),
                 Network(draw(st.integers(0, 30)), draw(st.integers(50, 5000))),
                 Execution(tau, draw(st.integers(0, 50)), bloom_fpr=fpr))


@st.composite
def stream_data(draw: st.DrawFn, query: Query, max_tuples: int = 25) -> dict[str, list[Tup]]:
    """Up to ``max_tuples`` tuples per stream of ``query``: timestamps with ties, bursts and gaps; a few join
    values so matches happen.

    >>> from hypothesis import find
    >>> q = find(queries(max_streams=2), lambda q: True)
    >>> data = find(stream_data(q), lambda d: len(d["S1"]) == 2)
    >>> [(t.id, t.seq) for t in data["S1"]], data["S1"][0].pos
    ([(0, 0), (1, 1)], 1)
    """
    span = draw(st.integers(1, 250))
    nvals = draw(st.integers(1, 4))
    out = {}
    for s in query.streams:
        n = draw(st.integers(0, max_tuples))
        ts = sorted(draw(st.lists(st.integers(0, span), min_size=n, max_size=n)))
        tups = []
        for i, t in enumerate(ts):
            key = tuple(draw(st.sampled_from([f"v{v}" for v in range(nvals)])) for _ in s.join_attrs)
            tups.append(Tup(s.pos, i, t, i, key, b"r"))
        out[s.name] = tups
    return out


@st.composite
def plans(draw: st.DrawFn, query: Query) -> Plan:
    """Any join-graph-consistent order for every head, any algorithm per step.

    >>> from hypothesis import find
    >>> q = find(queries(max_streams=2), lambda q: True)
    >>> [s.head for s in find(plans(q), lambda p: True).sequences]
    ['S0', 'S1']
    """
    seqs = []
    for s in query.streams:
        done, steps = {s.name}, []
        while len(done) < len(query.streams):
            frontier = [n for n in query.names if n not in done
                        and any(query.predicates_between(n, d) for d in done)]
            nxt = draw(st.sampled_from(frontier))
            steps.append(Step(nxt, draw(st.sampled_from(ALGORITHMS))))
            done.add(nxt)
        seqs.append(Sequence(s.name, tuple(steps)))
    return Plan(tuple(seqs))


@st.composite
def reductions(draw: st.DrawFn, query: Query) -> Plan:
    """A reduction to a random node along a random spanning tree with a random root, on a cyclic graph with or
    without key sets along the off-tree edges, with a random set of skipped directions (none, some, or every one).

    >>> from hypothesis import find
    >>> q = find(queries(max_streams=2), lambda q: True)
    >>> find(reductions(q), lambda p: True).reduce is not None
    True
    """
    names = list(query.names)
    root = draw(st.sampled_from(names))
    done, edges = {root}, []
    while len(done) < len(names):
        cands = sorted({(a, b) for a in done for b in query.neighbours(a) if b not in done})
        a, b = draw(st.sampled_from(cands))
        edges.append((a, b))
        done.add(b)
    cross = draw(st.booleans())
    in_order = tuple((a, b) if names.index(a) < names.index(b) else (b, a) for a, b in edges)
    used = edges + (list(off_tree(query, in_order)) if cross else [])
    directed = [d for a, b in used for d in ((a, b), (b, a))]
    how = draw(st.sampled_from(["none", "some", "some", "all"]))
    skip = [] if how == "none" else directed if how == "all" else \
        [d for d in directed if draw(st.booleans())]
    return reduction(query, draw(st.sampled_from(query.nodes)), edges, draw(st.sampled_from(names)), skip, cross)


@st.composite
def any_plans(draw: st.DrawFn, query: Query) -> Plan:
    """A random mixed plan (:func:`plans`), one algorithm everywhere, central at a random site, or a reduction
    (:func:`reductions`).

    >>> from hypothesis import find
    >>> q = find(queries(max_streams=2), lambda q: True)
    >>> sorted(s.head for s in find(any_plans(q), lambda p: p.reduce is None).sequences)
    ['S0', 'S1']
    """
    how = draw(st.sampled_from(["mixed", "mixed", "uniform", "central", "reduce"]))
    if how == "mixed":
        return draw(plans(query))
    if how == "uniform":
        return uniform(query, draw(st.sampled_from(ALGORITHMS)))
    if how == "reduce":
        return draw(reductions(query))
    return central(query, draw(st.sampled_from(query.sites)))


@st.composite
def switched_plans(draw: st.DrawFn, query: Query, streams: dict[str, list[Tup]]) -> list[tuple[int, Plan]]:
    """Generations: a first plan, then one to three switches to random plans (:func:`any_plans`) at random epochs
    (up to two epochs past the last one of ``streams``: a switch after the data is allowed).

    >>> from hypothesis import find
    >>> q = find(queries(max_streams=2), lambda q: True)
    >>> [epoch for epoch, _ in find(switched_plans(q, {}), lambda g: len(g) == 3)]
    [0, 1, 2]
    """
    tau = query.execution.interval_ms
    last = max([t.ts for tups in streams.values() for t in tups] or [0]) // tau
    n = draw(st.integers(1, 3))
    starts = sorted(set(draw(st.lists(st.integers(1, last + 2), min_size=n, max_size=n))))
    return [(0, draw(any_plans(query)))] + [(s, draw(any_plans(query))) for s in starts]
