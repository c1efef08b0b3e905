"""A reducer with its C bookkeeping (``_reducerc.c``) does exactly what the Python form does (issue 27): the same
sets out and tuples shipped, epoch by epoch, and the same state after every step -- the pending entries with
what they were sent on and whether they shipped, the window, the ranks, what each channel has left to look at,
the indexes' latest tags and the snapshot -- whichever key sets arrive (written-out keys of one or several ages,
Bloom filters), in whichever order the channels look, with tuples leaving the window before a channel looked,
and across a snapshot restored."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from joinlib.data.synthetic import SyntheticStats, build_query, topology_edges
from joinlib.model import Stream, Tup
from joinlib.plan import logical as plans
from joinlib.plan.ir import ReducerOp, lower
from joinlib.protocol.avro import decode_tuple, encode_tuple
from joinlib.query import load_query
from joinlib.runtime.algorithms import reduce as reduce_mod
from joinlib.runtime.algorithms.keysets import Outgoing, key_filter
from joinlib.runtime.algorithms.reduce import PassReducer, Reducer
from tests.kernels import kernels

ROOT = Path(__file__).resolve().parents[2]


def _ops() -> list[tuple[ReducerOp, Stream]]:
    """The reducers that take sets, of reductions of the demo's chain (S1 - S2 - S3) and of a 3-cycle with its
    crossing edge, at each site and with directions skipped."""
    out: list[tuple[ReducerOp, Stream]] = []
    chain = load_query(ROOT / "examples" / "routers_selective.yaml")
    tree = [("S1", "S2"), ("S2", "S3")]
    for site, skip in (("r1", []), ("r3", []), ("r2", [("S2", "S1")]), ("r1", [("S3", "S2")])):
        for op in lower(chain, plans.reduction(chain, site, tree, "S2", skip)).reducers:
            out.append((op, chain.stream(op.stream)))
    stats: list[SyntheticStats] = [{"rate": 100.0, "attributes": 4, "tuple_bytes": 50, "selectivity": 0.1,
                                    "window_ms": 500} for _ in range(3)]
    cycle = build_query("clique3k", stats, topology_edges(3, "complete"), per_edge_attrs=True)
    for op in lower(cycle, plans.reduction(cycle, cross=True)).reducers:
        out.append((op, cycle.stream(op.stream)))
    return [(op, s) for op, s in out if op.filters]


def _pass_ops() -> list[tuple[ReducerOp, Stream]]:
    """The reducers that take no sets (every direction toward them skipped), shipping or not."""
    chain = load_query(ROOT / "examples" / "routers_selective.yaml")
    tree = [("S1", "S2"), ("S2", "S3")]
    out = []
    for site, skip in (("r2", [("S2", "S1")]), ("r1", [("S2", "S1")]), ("r2", [("S2", "S3")])):
        for op in lower(chain, plans.reduction(chain, site, tree, "S2", skip)).reducers:
            if not op.filters:
                out.append((op, chain.stream(op.stream)))
    return out


OPS = _ops()
PASS_OPS = _pass_ops()
KEYS = [(f"k{i}",) for i in range(12)]


@st.composite
def _epochs(draw):
    """Per epoch: the tuples arriving (their keys' numbers), how far the window's lower bound moves, the order
    the phases run in, the key sets arriving (per neighbour: keys, their ages, and whether a Bloom filter may
    carry them) and whether to snapshot and restore first."""
    out = []
    for _ in range(draw(st.integers(1, 30))):
        tuples = draw(st.lists(st.integers(0, len(KEYS) - 1), max_size=8))
        sets = draw(st.lists(st.tuples(st.lists(st.tuples(st.integers(0, len(KEYS) - 1), st.integers(0, 3)),
                                                max_size=6),
                                       st.integers(0, 4), st.booleans()), min_size=3, max_size=3))
        out.append((tuples, draw(st.integers(0, 3)), draw(st.randoms(use_true_random=False)), sets,
                    draw(st.booleans()) and draw(st.integers(0, 4)) == 0))
    return out


def _join_values(k: int, n: int) -> tuple[str, ...]:
    """A tuple's n join values, a different key's value at each position (so that a key read at the wrong position
    is a different key), each one a key the sets may hold."""
    return tuple(KEYS[(k + j) % len(KEYS)][0] for j in range(n))


def _state(red: Reducer) -> dict:
    """Everything a reducer keeps that another step reads, and how many references hold each window row and each
    pending entry (the same in both forms: a reference the C code forgot to release is a leak)."""
    refs = [sys.getrefcount(row) for row in red.window] + [sys.getrefcount(x) for x in red.pending.values()]
    return {
        "refs": refs,
        "pending": {s: (x.t.id, x.sent, bool(x.shipped), x.keys, x.rank) for s, x in red.pending.items()},
        "window": list(red.window), "rank": red._rank,
        "fresh": {c: [x.seq for x in xs] for c, xs in red._fresh.items()},
        "again": {c: sorted(a) for c, a in red._again.items()},
        "best": {n: {k: ix.best.get(k) for k in ix.seqs} for n, ix in red._index.items()},
        "seqs": {n: dict(ix.seqs) for n, ix in red._index.items()},
        "live_from": dict(red.live_from), "received": dict(red.received),
        "snapshot": red.snapshot(encode_tuple),
    }


@settings(max_examples=80, deadline=None)
@given(which=st.integers(0, len(OPS) - 1), script=_epochs())
def test_the_c_reducer_is_the_python_reducer(which, script):
    op, stream = OPS[which]
    reds = {}
    for c in (True, False):
        with kernels(reduce_mod, c):
            reds[c] = Reducer(op, stream, 100, 0.05)
    takes = [e.stream for e in op.filters]
    steps = [("in", n) for n in takes] + [("out", e.stream) for e in op.sends] + ([("ship", "")] if op.replica else [])
    seq, low = 0, 0
    for e, (keys, move, rnd, sets, snap) in enumerate(script):
        batch = [Tup(stream.pos, seq + i, e * 100 + i, seq + i, _join_values(k, len(stream.join_attrs)), b"")
                 for i, k in enumerate(keys)]
        seq += len(batch)
        low += move * 41
        bodies = {}
        for n, (ks, live, bloom) in zip(takes, sets, strict=False):   # at most 3 neighbours take sets
            ages = [a for _, a in ks]
            sent = Outgoing([KEYS[k] for k, _ in ks], min(ages, default=0), max(ages + [live]), ages)
            bodies[n] = key_filter(sent, 0.05 if bloom else None, 1e6 if bloom else None)
        rnd.shuffle(steps)
        got = {}
        for c, red in reds.items():
            with kernels(reduce_mod, c):
                if snap:
                    data = red.snapshot(encode_tuple)
                    red = reds[c] = Reducer(op, stream, 100, 0.05)
                    red.restore(data, decode_tuple)
                red.admit(e, batch, ("ts", low))
                out: list[object] = []
                for way, n in steps:
                    if way == "in":
                        red.take(n, e, bodies[n])
                    elif way == "out":   # every other epoch the Outgoing itself: keys, ages, back and live
                        out.append(red.out(n, e) if e % 2 else red.out_keys(n, e))
                    else:
                        out.append(red.ship(e, batch))
                got[c] = (out, _state(red))
        assert got[True][0] == got[False][0], f"epoch {e}: what went out"
        assert got[True][1] == got[False][1], f"epoch {e}: the state"


def test_an_entry_reads_and_sets_as_the_python_one():
    assert reduce_mod._c is not None, "joinlib/runtime/algorithms/_reducerc.c is not built: run `pip install -e .`"
    t = Tup(0, 7, 100, 3, ("a",), b"")
    x = reduce_mod._c.Entry(t, (("a",),), 5)
    assert (x.t, x.seq, x.sent, x.shipped, x.keys, x.rank) == (t, 3, (), False, (("a",),), 5)
    x.sent += ("S2",)
    x.shipped = True
    assert (x.sent, x.shipped) == (("S2",), True)
    with pytest.raises(AttributeError):
        x.rank = 1
    with pytest.raises(TypeError):
        reduce_mod._c.pass_channel(None, "", None, [])


@settings(max_examples=60, deadline=None)
@given(which=st.integers(0, len(PASS_OPS) - 1), script=_epochs())
def test_the_c_pass_reducer_is_the_python_one(which, script):
    """A reducer that takes no sets admits in C too: the same window, the same tuples left for each channel (a
    tuple that leaves before a channel looked is dropped from it), the same sets out and tuples shipped."""
    op, stream = PASS_OPS[which]
    assert not op.filters and (op.sends or op.replica)
    reds = {c: PassReducer(op, stream, 100, 0.05) for c in (True, False)}
    steps = [("out", e.stream) for e in op.sends] + ([("ship", "")] if op.replica else [])
    seq, low = 0, 0
    for e, (keys, move, rnd, _, snap) in enumerate(script):
        batch = [Tup(stream.pos, seq + i, e * 100 + i, seq + i, _join_values(k, len(stream.join_attrs)), b"")
                 for i, k in enumerate(keys)]
        seq += len(batch)
        low += move * 41
        looks = [s for s in steps if rnd.random() < 0.7]   # a channel that does not look keeps its tuples
        got = {}
        for c, red in reds.items():
            with kernels(reduce_mod, c):
                if snap:
                    data = red.snapshot(encode_tuple)
                    red = reds[c] = PassReducer(op, stream, 100, 0.05)
                    red.restore(data, decode_tuple)
                red.admit(e, batch, ("ts", low) if e % 3 else ("seq", low // 41))
                state = (list(red.window), {ch: [t.seq for t in new] for ch, new in red._new.items()},
                         [sys.getrefcount(row) for row in red.window])
                out = [red.out(n, e) if way == "out" else red.ship(e, batch) for way, n in looks]
                got[c] = (state, out)
        assert got[True] == got[False], f"epoch {e}"
