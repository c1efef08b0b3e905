"""A reducer that takes no sets (:class:`PassReducer`) sends and ships exactly what :class:`Reducer` does for the
same operator, epoch by epoch, whatever order its channels look in, whichever tuples leave the window before
a channel looked, and across a snapshot restored into either class (issue 27: the pass-through form keeps no
per-tuple bookkeeping; the general one is the reference)."""
from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from joinlib.model import Stream, Tup
from joinlib.plan import logical as plans
from joinlib.plan.ir import ReducerOp, lower
from joinlib.protocol.avro import decode_tuple as _decode
from joinlib.protocol.avro import encode_tuple as _encode
from joinlib.query import load_query
from joinlib.runtime.algorithms.reduce import PassReducer, Reducer, make_reducer

ROOT = Path(__file__).resolve().parents[2]
TREE = [("S1", "S2"), ("S2", "S3")]


def _ops() -> list[tuple[ReducerOp, Stream]]:
    """Reducers without sets to take: S3 skipped toward (at the result site: ships nothing) and S1 (ships)."""
    q = load_query(ROOT / "examples" / "routers_selective.yaml")
    out: list[tuple[ReducerOp, Stream]] = []
    for site, skip in (("r3", [("S2", "S3")]), ("r3", [("S2", "S1")]), ("r2", [("S2", "S1"), ("S2", "S3")])):
        for op in lower(q, plans.reduction(q, site, TREE, "S2", skip)).reducers:
            if not op.filters:
                out.append((op, q.stream(op.stream)))
    return out


OPS = _ops()


@st.composite
def _script(draw):
    """Per epoch: how many tuples arrive, how far the window's lower bound moves, the order the channels look in,
    and whether to snapshot and restore (into which class) before the epoch."""
    epochs = draw(st.integers(1, 25))
    return [(draw(st.integers(0, 6)), draw(st.integers(0, 3)), draw(st.randoms(use_true_random=False)),
             draw(st.sampled_from([None, "pass", "general"]))) for _ in range(epochs)]


@settings(max_examples=60, deadline=None)
@given(which=st.integers(0, len(OPS) - 1), script=_script(), keys=st.integers(1, 5))
def test_pass_reducer_is_the_reducer_without_sets(which, script, keys):
    op, stream = OPS[which]
    ref, fast = Reducer(op, stream, 100, None), make_reducer(op, stream, 100, None)
    assert isinstance(fast, PassReducer)
    channels = [e.stream for e in op.sends] + (["ship"] if op.replica else [])
    seq, low = 0, 0
    for e, (n, move, rnd, snap) in enumerate(script):
        if snap is not None:
            data = fast.snapshot(_encode)
            assert data == ref.snapshot(_encode) or _same_snapshot(data, ref.snapshot(_encode))
            fast = (PassReducer if snap == "pass" else Reducer)(op, stream, 100, None)
            fast.restore(data, _decode)
        batch = [Tup(stream.pos, seq + i, e * 100 + i, seq + i, (f"k{(seq + i) % keys}",), b"") for i in range(n)]
        seq += n
        low += move * 37
        ref.admit(e, batch, ("ts", low))
        fast.admit(e, batch, ("ts", low))
        rnd.shuffle(channels)
        for c in channels:
            if c == "ship":
                assert fast.ship(e, batch) == ref.ship(e, batch), f"epoch {e}: shipped"
            else:
                assert fast.out_keys(c, e) == ref.out_keys(c, e), f"epoch {e}: set for {c}"


def _same_snapshot(a: dict, b: dict) -> bool:
    """Snapshots equal up to the order of the pending rows and an empty filter section."""
    return (a["window"] == b["window"] and sorted(a["pending"]) == sorted(b["pending"])
            and all(not v for v in b["filters"].values()))
