"""Algorithm 1 and its cost, the monitor (threshold, hysteresis), the protocol's codec, shadow windows."""
from __future__ import annotations

import random

import pytest

from joinlib.adaptive import protocol
from joinlib.adaptive.config import AdaptiveConfig, is_adaptive, parse_plan
from joinlib.adaptive.jep import JEP, SEP
from joinlib.adaptive.planner import Eq12, algorithm1, jep_cost
from joinlib.adaptive.protocol import Message, PlanUpdate, Ready, Relay, StatsReport, WindowData, WindowRequest
from joinlib.adaptive.shadow import ShadowWindow, view_at
from joinlib.adaptive.stats import MonitorConfig, StreamMonitor, StreamStatistics, collision_selectivity, declared
from joinlib.costs.unit_time import SeqState
from joinlib.data.synthetic import SyntheticStats, build_query, topology_edges
from joinlib.errors import JoinlibError
from joinlib.model import Execution, Network, Stream, Tup, Window
from joinlib.runtime.windowing import Progress


def toggle_query(m: int, rate: float):
    """The paper's defaults (150-byte tuples, 100/s, f = 0.01, 500 ms windows, 5 ms, 1024 kbps);
    the last stream at ``rate``."""
    stats = [SyntheticStats(rate=100, tuple_bytes=150, selectivity=0.01, window_ms=500) for _ in range(m)]
    stats[-1]["rate"] = rate
    return build_query(f"t{m}", stats, topology_edges(m, "complete"), network=Network(5, 1024),
                       execution=Execution(100, 80))


# ----------------------------------------------------------------------------- Algorithm 1

def test_homogeneous_streams_tie_and_the_tie_goes_to_the_source_and_the_earlier_stream():
    j = algorithm1(toggle_query(4, 100))
    assert j.sep("S1") == SEP("S1", ("S2", "S3", "S4"), (0, 0, 1))
    assert j.sep("S4") == SEP("S4", ("S1", "S2", "S3"), (0, 0, 1))


@pytest.mark.parametrize("m", [4, 8])
def test_the_toggle_changes_every_sep(m):
    """The digest's reading of Eq. 1/2: a stream at 50/s goes first with source placement in
    every other SEP; at 200/s it goes last with destination placement."""
    low, high = algorithm1(toggle_query(m, 50)), algorithm1(toggle_query(m, 200))
    x = f"S{m}"
    for h in (f"S{i + 1}" for i in range(m - 1)):
        assert low.sep(h).order[0] == x and low.sep(h).placement[0] == 0
        assert high.sep(h).order[-1] == x and high.sep(h).placement[-1] == 1
    assert all(low.sep(h) != high.sep(h) for h in low.to_json())


def test_eq_1_and_2_by_hand():
    q = toggle_query(2, 200)
    state = SeqState.start(q, "S1")     # r = 100/s, t = 150 B, at N1
    c0, c1 = Eq12().costs(q, state, "S2")
    common = 200 * 5e-6 + 100 * 1e-6 * 100           # r_k c_u + r c_p w_k (w_k = 200/s x 0.5 s)
    assert c0 == pytest.approx(0.005 + 200 * 150 / 128000 + common)   # T(r_k t_k), c_r = 1024 kbps
    assert c1 == pytest.approx(0.005 + 100 * 150 / 128000 + common)   # T(r t)
    assert jep_cost(q, algorithm1(q)) > 0


# ----------------------------------------------------------------------------- monitoring

S = Stream("S", 0, "n", Window("time", 500), ("J",))


def batch(epoch: int, n: int, keys: int = 100) -> list[Tup]:
    rng = random.Random(epoch)
    return [Tup(0, epoch * 1000 + i, epoch * 100 + i % 100, epoch * 1000 + i, (f"v{rng.randrange(keys)}",),
                b"x" * 40) for i in range(n)]


def feed(mon: StreamMonitor, counts: list[int]) -> list[StreamStatistics]:
    reports = []
    for e, n in enumerate(counts, mon.next_epoch):
        _, rep = mon.add(e, batch(e, n))
        if rep is not None:
            reports.append(rep)
    return reports


def monitor(**kw) -> StreamMonitor:
    mon = StreamMonitor.of(S, 100, MonitorConfig(**kw))
    mon.reference = StreamStatistics("S", 100.0, 50.0, 50.0, (("J", 0.01),))
    return mon


def test_a_change_triggers_after_persistence_intervals_and_becomes_the_reference():
    mon = monitor(interval_ms=200, threshold=0.5, persistence=2)
    assert feed(mon, [10, 10, 10, 10]) == []            # 100/s: the reference
    rep = feed(mon, [20, 20, 20, 20])                    # 200/s for two intervals
    assert len(rep) == 1 and rep[0].rate == pytest.approx(200) and mon.reference.rate == pytest.approx(200)
    assert feed(mon, [20] * 10) == []                    # stays: no new report


def test_one_noisy_interval_triggers_nothing_and_small_changes_are_ignored():
    mon = monitor(interval_ms=200, threshold=0.5, persistence=2)
    assert feed(mon, [20, 20, 10, 10, 20, 20, 10, 10]) == []   # 200/s once, then back: no streak
    assert feed(mon, [14, 14] * 6) == []                        # 140/s: within 1 + 0.5


def test_hysteresis_does_not_flap_around_the_boundary():
    """Once re-planned at 200/s, a stream hovering at 150-180/s reports nothing: the threshold is
    measured from the new reference, not from the old one."""
    mon = monitor(interval_ms=200, threshold=0.5, persistence=2)
    assert len(feed(mon, [20, 20, 20, 20])) == 1
    assert feed(mon, [15, 15, 18, 18, 16, 16, 15, 15]) == []


def test_selectivity_is_measured_over_the_key_horizon():
    assert collision_selectivity(["a"] * 10) == pytest.approx(1.0)
    assert collision_selectivity(list("abcdefghij") * 20) == pytest.approx(0.1, rel=0.1)
    assert collision_selectivity(list("abcdefghij")) is None     # no pair shares a value: no estimate
    mon = monitor(interval_ms=200, threshold=0.5, persistence=1, key_horizon_ms=1000)
    for e in range(10):
        mon.add(e, batch(e, 10, keys=5))
    assert mon.last is not None and mon.last.f("J") == pytest.approx(0.2, rel=0.15)


def test_monitor_and_config_errors_are_user_errors():
    with pytest.raises(JoinlibError, match="threshold"):
        MonitorConfig(threshold=0)
    with pytest.raises(JoinlibError, match="mode"):
        AdaptiveConfig("xnu")
    with pytest.raises(JoinlibError, match="adaptive:dnu"):
        parse_plan("adaptive:fast")
    assert is_adaptive("adaptive") and is_adaptive("adaptive:dnu") and not is_adaptive("auto")
    assert parse_plan("adaptive").mode == "cnu" and parse_plan("adaptive:dnu").mode == "dnu"


def test_declared_statistics_fill_defaults():
    d = declared(Stream("X", 0, "n", Window("time", 2000), ("J",)))
    assert d.rate == 100 and d.window == 200 and d.f("J") == 0.1


# ----------------------------------------------------------------------------- protocol

JEP2 = JEP((SEP("S1", ("S2",), (0,)), SEP("S2", ("S1",), (1,))))
STATS = StreamStatistics("S1", 123.5, 150.25, 61.75, (("J", 0.01),))
TUP = Tup(0, 7, 1234, 9, ("v1",), b"payload")


@pytest.mark.parametrize("body", [
    StatsReport("S1", 17, STATS),
    PlanUpdate(3, False, JEP2, (18435,)),
    PlanUpdate(3, True, JEP2),
    WindowRequest("S1", "n2"),
    WindowData("S1", 12, True, 40, (TUP,)),
    Ready(False, 0, "abc", (JEP2.seps[0],), (2,), (1, 2)),
    Ready(True, 41, "abc"),
    Relay("FIND_MIN", "S1", 2, 1, ("S2", "S3"), (0, 1), SeqState.start(toggle_query(3, 50), "S1"),
          ("S2", 0.25, 1), None, None, at=2),
    Relay("TRIGGER", "S1", 0, 0, (), (), stream="S1", stats=STATS, check=True),
])
def test_every_message_round_trips_through_avro(body):
    msg = Message("n1", "n2", "q", 5, body)
    back = protocol.decode(protocol.encode(msg))
    assert back.dedup() == msg.dedup() and back.kind == msg.kind
    if isinstance(body, WindowData):
        assert isinstance(back.body, WindowData)
        assert [t.id for t in back.body.tuples] == [7] and back.body.tuples[0].key == ("v1",)
    elif isinstance(body, Relay) and body.state is not None:
        assert isinstance(back.body, Relay) and back.body.state is not None
        assert back.body.state.rate == body.state.rate and back.body.state.classes == body.state.classes
    else:
        assert back == msg


# ----------------------------------------------------------------------------- shadow windows

def tups(epoch: int, ids: range, stream: int = 0) -> tuple[Tup, ...]:
    return tuple(Tup(stream, i, epoch * 10 + i % 10, i, ("v",)) for i in ids)


def test_shadow_window_merges_snapshot_and_batches_and_drops_duplicates():
    s = Stream("S", 0, "n", Window("tuples", 5), ("J",))
    w = ShadowWindow(s, 10)
    w.on_data(WindowData("S", 4, False, 0, tups(4, range(4, 6))))     # a batch before the snapshot
    assert not w.full
    w.on_data(WindowData("S", 3, True, 3, tups(2, range(0, 4))))       # tuples 0-3; 3 came before epoch 3
    w.on_data(WindowData("S", 3, False, 0, tups(3, range(3, 4))))      # epoch 3 again has tuple 3: kept once
    w.on_data(WindowData("S", 5, False, 0, tups(5, range(6, 8))))
    w.on_data(WindowData("S", 5, False, 0, tups(5, range(6, 8))))      # a copy
    assert w.full and w.complete_through(5) and len(w.tuples) == 8
    snap = w.snapshot_for(6)
    assert snap.base == 3 + 1 + 2 + 2      # base before 3, then epochs 3, 4, 5
    assert [t.id for t in snap.tuples] == [3, 4, 5, 6, 7]   # the last 5 tuples before epoch 6


def test_view_at_a_time_window():
    s = Stream("S", 0, "n", Window("time", 20), ("J",))
    ts = [Tup(0, i, i * 10, i, ("v",)) for i in range(10)]
    snap = view_at(s, 10, 6, ts, Progress())
    assert [t.ts for t in snap.tuples] == [40, 50] and snap.base == 0   # alive at epoch 6: ts >= 60 - 20
