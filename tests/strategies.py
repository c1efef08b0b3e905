"""Random queries, data and plans for property tests (hypothesis strategies)."""
from __future__ import annotations

import itertools

from hypothesis import strategies as st

from joinlib.algorithms import ALGORITHMS
from joinlib.model import Execution, Network, Predicate, Query, Stream, StreamStats, Tup, Window
from joinlib.plan.logical import Plan, Sequence, Step, off_tree, reduction

TOPOLOGIES = ("chain", "star", "cycle", "complete")


def edges(topology: str, m: int) -> list[tuple[int, int]]:
    if topology == "chain" or m == 2:
        return [(i, i + 1) for i in range(m - 1)]
    if topology == "star":
        return [(0, i) for i in range(1, m)]
    if topology == "cycle":
        return [(i, (i + 1) % m) for i in range(m)] if m > 2 else [(0, 1)]
    return list(itertools.combinations(range(m), 2))


@st.composite
def queries(draw, max_streams: int = 4) -> Query:
    m = draw(st.integers(2, max_streams))
    topo = draw(st.sampled_from(TOPOLOGIES))
    shared_site = draw(st.booleans()) and m > 2      # two streams at one site sometimes
    attrs_per_stream = {i: [] for i in range(m)}
    preds = []
    for a, b in edges(topo, m):
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
    # Bloom filters: none (keys only), the default, or tiny and very false (exactness must not care)
    fpr = draw(st.sampled_from([0.0, 0.01, 0.5, 0.9]))
    return Query(f"{topo}{m}", tuple(streams), tuple(preds),
                 Network(draw(st.integers(0, 30)), draw(st.integers(50, 5000))),
                 Execution(tau, draw(st.integers(0, 50)), bloom_fpr=fpr))


@st.composite
def stream_data(draw, query: Query, max_tuples: int = 25) -> dict[str, list[Tup]]:
    """Timestamps with ties, bursts and gaps; a few join values so matches happen."""
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
def plans(draw, query: Query) -> Plan:
    """Any join-graph-consistent order for every head, any algorithm per step."""
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
def reductions(draw, query: Query) -> Plan:
    """A reduction to a random node along a random spanning tree with a random root, on a cyclic
    graph with or without key sets along the off-tree edges, with a random set of skipped directions
    (none, some, or every one)."""
    names = list(query.names)
    root = draw(st.sampled_from(names))
    done, edges = {root}, []
    while len(done) < len(names):
        cands = sorted({(a, b) for a in done for b in query.neighbours(a) if b not in done})
        a, b = draw(st.sampled_from(cands))
        edges.append((a, b))
        done.add(b)
    cross = draw(st.booleans())
    used = edges + (list(off_tree(query, tuple(tuple(sorted(e, key=names.index)) for e in edges))) if cross else [])
    directed = [d for a, b in used for d in ((a, b), (b, a))]
    how = draw(st.sampled_from(["none", "some", "some", "all"]))
    skip = [] if how == "none" else directed if how == "all" else \
        [d for d in directed if draw(st.booleans())]
    return reduction(query, draw(st.sampled_from(query.nodes)), edges, draw(st.sampled_from(names)), skip, cross)
