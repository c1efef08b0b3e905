"""Live sources, the pure part (joinlib.ingest.stream): watermarks, lateness, duplicates and ranks
against a naive model of the rule in docs/live.md, with restarts.

The model classifies each partition's records in offset order on its own (watermark = max event time
seen - δ, raised by the logged idle advances at their positions; late below it; a duplicate if an
earlier on-time record of the partition has the id and an event time within the horizon below the
watermark) and ranks the on-time records by (ts, id, partition, offset).  The implementation gets the
partitions interleaved at random, idle advances at random points, releases at random points, and
sometimes a crash: a snapshot at a random step, work after it lost, a fresh instance restored from
the snapshot that re-reads the records after it in *another* interleaving and replays the advances
logged after it.  Every record must be classified as the model says, and the tuples released (before
the snapshot by the first instance, after it by the second) must be the model's on-time records in
rank order, each once, each released only below the watermark.
"""
from __future__ import annotations

import os
import random
from typing import Any, Optional

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from joinlib.ingest import Advance, Event, StreamIngest
from joinlib.ingest.stream import TUPLE_WINDOW_HORIZON_MS
from joinlib.model import Stream, Window

EXAMPLES = int(os.environ.get("INGEST_EXAMPLES", "300"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TAU, DELTA = 100, 80
FLUSH = 10 ** 9


def _stream(window: Window) -> Stream:
    return Stream("S", 1, "a", window, ("k",))


# ----------------------------------------------------------------------------- scenario


@st.composite
def scenarios(draw: Any) -> dict[str, Any]:
    nparts = draw(st.integers(1, 3))
    recs: dict[int, list[tuple[int, int, int, bool]]] = {p: [] for p in range(nparts)}
    for p in range(nparts):
        n = draw(st.integers(0, 25))
        t = draw(st.integers(-50, 300))
        for off in range(n):
            t += draw(st.integers(-120, 150))          # disorder, sometimes beyond δ
            recs[p].append((off, t, draw(st.integers(0, 30)), draw(st.booleans()) and draw(st.booleans())
                            and draw(st.booleans())))  # ids repeat; about 1 in 8 malformed
    total = sum(len(v) for v in recs.values())
    steps = draw(st.lists(st.sampled_from(["rec", "rec", "rec", "adv", "rel"]), min_size=total, max_size=total + 12))
    return {
        "window": draw(st.sampled_from([Window("time", 200), Window("time", 1000), Window("tuples", 5)])),
        "recs": recs, "steps": steps,
        "adv_ms": draw(st.lists(st.integers(0, 400), min_size=len(steps), max_size=len(steps))),
        "seed": draw(st.integers(0, 2 ** 16)),
        "crash": draw(st.one_of(st.none(), st.integers(0, len(steps)))),
    }


# ----------------------------------------------------------------------------- the model


def model(recs: dict[int, list], advances: dict[int, list[tuple[int, int]]], horizon: int) -> tuple[dict, list]:
    outcome: dict[tuple[int, int], str] = {}
    on_time = []
    for part, rows in recs.items():
        wm, max_ts = 0, None
        seen: dict[int, int] = {}
        advs = list(advances.get(part, []))
        for off, ts, id_, bad in rows:
            while advs and advs[0][0] <= off:
                wm = max(wm, advs.pop(0)[1])
            if bad:
                outcome[(part, off)] = "malformed"
            elif ts < wm:
                outcome[(part, off)] = "late"
            elif ts > wm + 86_400_000:
                outcome[(part, off)] = "too_far_ahead"
            elif id_ in seen and seen[id_] >= wm - horizon:
                outcome[(part, off)] = "duplicate_id"
            else:
                outcome[(part, off)] = "ok"
                seen[id_] = ts
                max_ts = ts if max_ts is None else max(max_ts, ts)
                wm = max(wm, max_ts - DELTA)
                on_time.append((ts, id_, part, off))
    return outcome, sorted(on_time)


# ----------------------------------------------------------------------------- driving the implementation


class Driver:
    """Feeds one StreamIngest; records outcomes, releases and the advances it logged."""

    def __init__(self, ingest: StreamIngest) -> None:
        self.ingest = ingest
        self.outcome: dict[tuple[int, int], str] = {}
        self.released: list[tuple[int, int, int]] = []   # (ts, id, seq)
        self.logged: list[Advance] = []

    def offer(self, part: int, off: int, ts: int, id_: int, bad: bool) -> None:
        if bad:
            self.ingest.skip(part, off)
            self.outcome[(part, off)] = "malformed"
            return
        b = self.ingest.offer(part, off, Event(ts, id_, (id_ % 3,), b""), 0.0)
        self.outcome[(part, off)] = "ok" if b is None else b.reason

    def readmit(self, part: int, off: int, ts: int, id_: int, bad: bool) -> None:
        """A record before the restored position, read again (LiveInputs does this for a checkpoint's pending
        records, which it names by position only)."""
        self.ingest.readmit(part, off, None if bad else Event(ts, id_, (id_ % 3,), b""))

    def advance(self, part: int, by: int) -> None:
        p = self.ingest.parts[part]
        adv = Advance(part, p.next, p.wm + by)
        self.logged.append(adv)
        self.ingest.advance(adv)

    def release(self) -> None:
        w = self.ingest.watermark
        for t in self.ingest.release():
            assert t.ts < w, (t, w)
            self.released.append((t.ts, t.id, t.seq))
        assert self.ingest.missing or all(x[0] >= w for x in self.ingest.pending)

    def flush(self) -> None:
        for part, p in self.ingest.parts.items():
            self.ingest.advance(Advance(part, p.next, FLUSH))
        self.release()


def _interleave(recs: dict[int, list], start: dict[int, int], rng: random.Random) -> list[tuple[int, tuple]]:
    """The records from ``start`` on, partitions interleaved at random (each in offset order)."""
    queues = {p: [r for r in rows if r[0] >= start.get(p, 0)] for p, rows in recs.items()}
    out = []
    while any(queues.values()):
        p = rng.choice([p for p, q in queues.items() if q])
        out.append((p, queues[p].pop(0)))
    return out


@SETTINGS
@given(scenarios())
def test_ingest_matches_the_model_with_restarts(sc: dict[str, Any]) -> None:
    recs, window = sc["recs"], sc["window"]
    horizon = window.size if window.is_time else TUPLE_WINDOW_HORIZON_MS
    rng = random.Random(sc["seed"])
    stream = _stream(window)

    def fresh() -> StreamIngest:
        return StreamIngest(stream, {p: 0 for p in recs}, tau=TAU, delta=DELTA, idle_timeout=1000)

    a = Driver(fresh())
    order = iter(_interleave(recs, {}, rng))
    snap: Optional[dict[str, Any]] = None
    snap_at = {"released": 0, "logged": 0}
    for i, (step, by) in enumerate(zip(sc["steps"], sc["adv_ms"], strict=True)):
        if i == sc["crash"]:
            snap = a.ingest.snapshot()
            snap_at = {"released": len(a.released), "logged": len(a.logged)}
        if step == "rec":
            nxt = next(order, None)
            if nxt is not None:
                part, (off, ts, id_, bad) = nxt
                a.offer(part, off, ts, id_, bad)
        elif step == "adv":
            a.advance(rng.randrange(len(recs)), by)
        else:
            a.release()
    for part, (off, ts, id_, bad) in order:
        a.offer(part, off, ts, id_, bad)
    if sc["crash"] is None or sc["crash"] >= len(sc["steps"]):
        snap = None

    advances: dict[int, list[tuple[int, int]]] = {}
    for adv in a.logged:
        advances.setdefault(adv.part, []).append((adv.at, adv.wm))
    want_outcome, on_time = model(recs, advances, horizon)
    want = [(ts, id_, seq) for seq, (ts, id_, _, _) in enumerate(on_time)]
    for kind in sorted(set(want_outcome.values())):
        event(f"has {kind}")
    event("crash" if snap is not None else "no crash")

    if snap is None:
        a.flush()
        assert a.outcome == want_outcome
        assert a.released == want
        return

    # the crash: everything after the snapshot is lost; a fresh instance restores it, re-reads the
    # records from its positions -- back to the first pending record the snapshot named by position -- in
    # another interleaving, and replays the advances logged after it
    b = Driver(fresh())
    b.ingest.restore(snap, 0.0)
    b.ingest.replay(a.logged[snap_at["logged"]:])
    starts = {part: p.next for part, p in b.ingest.parts.items()}
    back = {part: min([n] + [x for x in [b.ingest.rewind(part)] if x is not None]) for part, n in starts.items()}
    b.outcome = {k: v for k, v in a.outcome.items() if k[1] < starts[k[0]]}
    for part, (off, ts, id_, bad) in _interleave(recs, back, random.Random(sc["seed"] + 1)):
        if off < starts[part]:
            b.readmit(part, off, ts, id_, bad)
        else:
            b.offer(part, off, ts, id_, bad)
        if rng.random() < 0.3:
            b.release()
    assert not b.ingest.missing
    assert not b.ingest.replaying()
    b.flush()
    assert b.outcome == want_outcome
    assert a.released[:snap_at["released"]] + b.released == want
