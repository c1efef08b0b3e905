"""The batch forms of a live source's record path answer what the record-by-record forms answer (issue 27).

* :meth:`StreamIngest.offer_run` (a run of one partition's records in one call) against :meth:`StreamIngest.offer` /
  :meth:`StreamIngest.skip` one by one: the same reasons for the same records, the same releases (ranks included)
  and the same state after every step -- positions, watermarks, max event times, recent ids, anchors, logged
  advances still to replay, pending records, snapshots -- with idle advances, a restart's logged advances replayed
  at their positions, malformed and filtered records, late records, duplicates and records too far ahead.
* :meth:`LiveInputs.handle_run` (decode and offer per partition run, :meth:`Decoder.decode_run`) against
  :meth:`LiveInputs.handle` per message: the same dead letters (value, key, headers, in the order written), the same
  tuples and watermarks to the host and the same snapshots, on JSON records of three partitions, some malformed,
  some read twice (a run of a partition that starts below its read position), with and without the flat-JSON
  kernel.
"""
from __future__ import annotations

import json
import os
from typing import Any, Optional

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from joinlib.ingest import Advance, Bad, Event, StreamIngest, records
from joinlib.ingest.records import BAD_JSON, FILTERED
from joinlib.ingest.stream import MAX_AHEAD_MS
from joinlib.model import Stream, Window
from joinlib.node.sources import LiveInputs
from tests.kernels import kernels
from tests.live_inputs import two_stream_query

EXAMPLES = int(os.environ.get("INGEST_EXAMPLES", "300"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TAU, DELTA = 100, 80


# ----------------------------------------------------------------------------- StreamIngest.offer_run


def _state(ing: StreamIngest) -> Any:
    parts = {part: (p.next, p.wm, p.max_ts, dict(p.ids), list(p.ids), list(p.order), p.anchor_wm, p.anchor_wall,
                    list(p.marks)) for part, p in ing.parts.items()}
    return parts, ing.seq, ing.pending, dict(ing.missing), ing.watermark, ing.snapshot()


@st.composite
def _ingest_scenarios(draw: Any) -> dict[str, Any]:
    nparts = draw(st.integers(1, 3))
    recs: dict[int, list[tuple[int, Any]]] = {}
    for p in range(nparts):
        t = draw(st.integers(-50, 300))
        rows: list[tuple[int, Any]] = []
        for off in range(draw(st.integers(0, 30))):
            t += draw(st.integers(-150, 300))   # disorder, sometimes beyond delta
            kind = draw(st.integers(0, 15))
            if kind == 0:
                rows.append((off, Bad(BAD_JSON, "not JSON")))
            elif kind == 1:
                rows.append((off, FILTERED))
            else:
                ts = t + MAX_AHEAD_MS + 1 if kind == 2 else t
                rows.append((off, Event(ts, draw(st.integers(0, 25)), (off % 3,), bytes([off % 256]))))
        recs[p] = rows
    steps = draw(st.lists(st.tuples(st.sampled_from(["run", "run", "run", "adv", "rel", "cap"]), st.integers(1, 8),
                                    st.integers(0, 400)), max_size=40))
    marks = draw(st.lists(st.tuples(st.integers(0, nparts - 1), st.integers(0, 30), st.integers(0, 600)),
                          max_size=4))
    return {"recs": recs, "steps": steps, "marks": marks,
            "window": draw(st.sampled_from([Window("time", 200), Window("time", 1000), Window("tuples", 5)])),
            "tau": draw(st.sampled_from([1, 7, TAU, 1000]))}


@SETTINGS
@given(_ingest_scenarios())
def test_offer_run_is_offer_one_by_one(sc: dict[str, Any]) -> None:
    stream = Stream("S", 1, "a", sc["window"], ("k",))

    def fresh() -> StreamIngest:
        ing = StreamIngest(stream, {p: 0 for p in sc["recs"]}, tau=sc["tau"], delta=DELTA, idle_timeout=1000)
        ing.replay([Advance(p, at, wm) for p, at, wm in sc["marks"]])   # a restart's logged advances
        return ing

    one, many = fresh(), fresh()
    at = {p: 0 for p in sc["recs"]}
    now = 0.0
    for i, (kind, n, by) in enumerate(sc["steps"] + [("run", 10 ** 6, 0)] * len(sc["recs"])):
        now += by / 7
        part = i % len(sc["recs"])
        if kind == "run":
            rows = sc["recs"][part][at[part]:at[part] + n]
            at[part] += len(rows)
            want: list[tuple[int, Bad]] = []
            for j, (off, ev) in enumerate(rows):
                if type(ev) is Event:
                    why = one.offer(part, off, ev, now)
                    if why is not None:
                        want.append((j, why))
                else:
                    one.skip(part, off)
                    if isinstance(ev, Bad):
                        want.append((j, ev))
            assert many.offer_run(part, [off for off, _ in rows], [ev for _, ev in rows], now) == want
        elif kind == "adv":
            adv = Advance(part, one.parts[part].next, one.parts[part].wm + by)
            one.advance(adv, now)
            many.advance(adv, now)
        else:
            cap: Optional[int] = None if kind == "rel" else one.watermark - by
            w = one.watermark
            got = [(t.pos, t.id, t.ts, t.seq, t.key, t.rest) for t in many.release(cap)]
            assert got == [(t.pos, t.id, t.ts, t.seq, t.key, t.rest) for t in one.release(cap)]
            assert all(x[2] < w and (cap is None or x[2] < cap) for x in got)
        assert _state(many) == _state(one)
    for ing in (one, many):
        for part, p in ing.parts.items():
            ing.advance(Advance(part, p.next, 10 ** 9), now)
    assert [(t.id, t.ts, t.seq) for t in many.release()] == [(t.id, t.ts, t.seq) for t in one.release()]
    assert _state(many) == _state(one)


# ----------------------------------------------------------------------------- LiveInputs.handle_run


class _Msg:
    def __init__(self, part: int, offset: int, value: Optional[bytes]) -> None:
        self._part, self._offset, self._value = part, offset, value

    def topic(self) -> str:
        return "t1"

    def partition(self) -> int:
        return self._part

    def offset(self) -> int:
        return self._offset

    def value(self) -> Optional[bytes]:
        return self._value

    def key(self) -> bytes:
        return b"k%d" % self._offset


class _Out:
    def __init__(self) -> None:
        self.sent: list[Any] = []

    def produce(self, topic: str, value: Any, key: Any = None, headers: Any = None, *a: Any, **k: Any) -> None:
        self.sent.append((topic, value, key, headers))

    def __getattr__(self, name: str) -> Any:
        return lambda *a, **k: None


class _Null:
    def __getattr__(self, name: str) -> Any:
        return lambda *a, **k: None


class _Host:
    def __init__(self) -> None:
        self.fed: list[Any] = []

    def feed(self, query: str, stream: str, tups: list[Any], watermark: int) -> None:
        self.fed.append(([(t.id, t.ts, t.seq, t.key, t.rest) for t in tups], watermark))


def _inputs(out: _Out) -> LiveInputs:
    return LiveInputs(two_stream_query(DELTA), "a", 0, {"S1": {0: 0, 1: 0, 2: 0}}, bootstrap="unused:9092",
                      out=out,  # type: ignore[arg-type]
                      run_id="r1", sensor=_Null(), log=lambda s: None, on_naive=lambda *a: None, now=0.0)


@st.composite
def _value(draw: Any, ts: int, id_: int) -> Optional[bytes]:
    kind = draw(st.integers(0, 12))
    if kind == 0:
        return None                                                  # a tombstone
    if kind == 1:
        return b'{"id": 1, "ts": '                                   # bad JSON
    if kind == 2:
        return json.dumps({"id": "x", "ts": ts, "J": 1}).encode()    # a wrong type
    if kind == 3:
        return json.dumps({"id": id_, "ts": ts}).encode()            # a missing field
    if kind == 4:
        return json.dumps({"id": id_, "ts": ts + 0.5, "J": 1, "p": "é"}).encode()   # the Python path
    row = {"id": id_, "ts": ts, "J": draw(st.integers(0, 3)), "p": "x" * draw(st.integers(0, 20))}
    if kind == 5:
        row["extra"] = True                                          # another layout
    return json.dumps(row).encode()


@st.composite
def _live_scenarios(draw: Any) -> dict[str, Any]:
    msgs: dict[int, list[_Msg]] = {}
    for p in range(3):
        t, rows = draw(st.integers(0, 200)), []
        for off in range(draw(st.integers(0, 25))):
            t += draw(st.integers(-120, 150))
            rows.append(_Msg(p, off, draw(_value(t, draw(st.integers(0, 20))))))
        msgs[p] = rows
    # the order read: runs of one partition, interleaved; handed over in batches of a few runs
    order: list[_Msg] = []
    at = {p: 0 for p in msgs}
    while any(at[p] < len(msgs[p]) for p in msgs):
        p = draw(st.sampled_from([p for p in msgs if at[p] < len(msgs[p])]))
        n = draw(st.integers(1, 6))
        order += msgs[p][at[p]:at[p] + n]
        at[p] += n
    cuts = sorted(draw(st.lists(st.integers(0, len(order)), max_size=6)))
    return {"order": order, "cuts": cuts, "c": draw(st.booleans()), "pre": draw(st.integers(0, len(order)))}


@SETTINGS
@given(_live_scenarios())
def test_handle_run_is_handle_one_by_one(sc: dict[str, Any]) -> None:
    order, cuts = sc["order"], [0, *sc["cuts"], len(sc["order"])]
    with kernels(records, sc["c"]):
        one_out, many_out = _Out(), _Out()
        one, many = _inputs(one_out), _inputs(many_out)
        one_host, many_host = _Host(), _Host()
        for m in order[:sc["pre"]]:   # read already: the whole order again below (as after a rewind) skips them
            one.handle(m, 0.0)
        many.handle_run("t1", order[:sc["pre"]], 0.0)
        for lo, hi in zip(cuts, cuts[1:], strict=False):
            for m in order[lo:hi]:
                one.handle(m, 0.0)
            many.handle_run("t1", order[lo:hi], 0.0)
            one.drain(one_host)
            many.drain(many_host)
            assert many_out.sent == one_out.sent
            assert many_host.fed == one_host.fed
            assert many.snapshot() == one.snapshot()
            assert many.stats() == one.stats() and many.dead_total == one.dead_total
