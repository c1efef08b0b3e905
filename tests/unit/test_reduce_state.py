"""A reducer's per-channel candidates stay bounded: what a channel has not looked at yet is at most what arrived
since it last looked, and a reducer that ships nothing (its stream is joined where it lives) keeps no shipping
candidates at all -- else a live query's reducer would keep every tuple it ever admitted."""
from __future__ import annotations

from pathlib import Path

from joinlib.model import Tup
from joinlib.plan import logical as plans
from joinlib.plan.ir import lower
from joinlib.query import load_query
from joinlib.runtime.algorithms.reduce import Reducer

ROOT = Path(__file__).resolve().parents[2]


def test_candidates_stay_bounded_for_a_reducer_that_ships_nothing():
    q = load_query(ROOT / "examples" / "routers_selective.yaml")
    ops = {r.stream: r for r in lower(q, plans.reduction(q, "r3")).reducers}
    op = ops["S3"]
    assert not op.replica, "S3 lives at the result site: its reducer ships nothing"
    s3 = q.stream("S3")
    red = Reducer(op, s3, 100, None)
    seq = 0
    for e in range(200):
        batch = []
        for i in range(10):
            batch.append(Tup(s3.pos, seq, e * 100 + i, seq, (f"v{seq % 37}",), b""))
            seq += 1
        red.admit(e, batch, ("ts", e * 100 - 3000))
        for n in (s.stream for s in op.sends):
            red.out_keys(n, e)
        assert all(len(f) == 0 for f in red._fresh.values()), "every channel looked: nothing left fresh"
        assert all(len(a) == 0 for a in red._again.values())
    assert set(red._fresh) == {s.stream for s in op.sends}
    assert len(red.pending) <= 31 * 10   # the window (3 s at 100 ms epochs), not everything admitted
