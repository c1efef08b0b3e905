"""Algorithm 1 with the plan-level pricing (``PlanLevel``), the sliding measurement interval and
the return to declared statistics: what makes adaptive cheaper than static in the toggle."""
from __future__ import annotations

import pytest

from joinlib.adaptive.config import AdaptiveConfig
from joinlib.adaptive.jep import SEP
from joinlib.adaptive.planner import Eq12, PlanLevel, algorithm1, plan_level, plan_level_cost
from joinlib.adaptive.stats import MonitorConfig, StreamMonitor, StreamStatistics, with_stats
from joinlib.errors import JoinlibError
from joinlib.model import Stream, StreamStats, Window
from tests.unit.test_adaptive_parts import batch, toggle_query


def central_at_last(m: int) -> dict[str, SEP]:
    x = f"S{m}"
    names = [f"S{i + 1}" for i in range(m)]
    out = {x: SEP(x, tuple(n for n in names if n != x), (0,) * (m - 1))}
    for h in names[:-1]:
        rest = tuple(n for n in names if n not in (h, x))
        out[h] = SEP(h, (x,) + rest, (1,) + (0,) * (m - 2))
    return out


@pytest.mark.parametrize("m", [4, 8])
def test_the_toggled_stream_at_200_gets_everything_shipped_to_its_site(m):
    high = plan_level(toggle_query(m, 200), PlanLevel())
    assert {s.head: s for s in high.seps} == central_at_last(m)


@pytest.mark.parametrize("m", [4, 8])
def test_at_50_the_plan_keeps_the_toggled_window_where_it_is_probed(m):
    """No hub at 50/s (no stream dominates); the toggled stream's window is kept at N1 and
    probed there by every SEP that reaches N1, as Algorithm 1 would not share it."""
    q = toggle_query(m, 50)
    low = plan_level(q, PlanLevel())
    assert low.sep("S1") == SEP("S1", (f"S{m}",) + tuple(f"S{i}" for i in range(2, m)), (0,) + (1,) * (m - 2))
    assert low.sep("S2").order[:2] == ("S1", f"S{m}") and low.sep("S2").placement[:2] == (1, 0)
    assert plan_level_cost(q, low, PlanLevel()) < plan_level_cost(q, algorithm1(q), PlanLevel())


@pytest.mark.parametrize("m", [4, 8])
@pytest.mark.parametrize("rate", [40.0, 45.0, 55.0, 65.0, 80.0])
@pytest.mark.parametrize("f", [0.007, 0.01, 0.013])
def test_the_low_plan_does_not_move_with_sampling_noise(m, rate, f):
    """A 50/s stream measured at 40-80/s, f within ±30 %: the same plan (reverts are exact)."""
    q = toggle_query(m, 50)
    st = StreamStatistics(f"S{m}", rate, 152.0, rate * 0.5, (("J", f),))
    assert plan_level(with_stats(q, {f"S{m}": st}), PlanLevel()) == plan_level(q, PlanLevel())


def test_eq12_is_the_papers_algorithm_1_and_plan_level_the_default():
    q = toggle_query(4, 200)
    assert algorithm1(q) == algorithm1(q, Eq12()) != algorithm1(q, PlanLevel())
    assert isinstance(AdaptiveConfig().model, PlanLevel)


def test_a_replica_is_charged_once_per_plan():
    q = toggle_query(4, 200)
    jep = plan_level(q, PlanLevel())
    # central at N4: the three windows at N4 once, three SP-D shipments of the heads
    m = PlanLevel()
    per_msg = 10 * 0.005
    shipped = 3 * (per_msg + 100 * 150 * 8 / 1_024_000)
    assert plan_level_cost(q, jep, m) == pytest.approx(2 * shipped + _processing(q, jep, m), rel=1e-9)


def _processing(q, jep, m):
    from joinlib.adaptive.planner import advance_sequence
    from joinlib.costs.unit_time import SeqState, stream_rate, window_tuples
    total = 0.0
    for sep in jep.seps:
        state = SeqState.start(q, sep.head)
        for s, p in zip(sep.order, sep.placement, strict=True):
            nxt = q.stream(s)
            total += stream_rate(nxt) * m.c_u + state.rate * m.c_p * window_tuples(nxt)
            state = advance_sequence(q, state, s, p)
    return total


# ----------------------------------------------------------------------------- monitoring

S50 = Stream("S", 0, "n", Window("time", 500), ("J",))


def reports(mon: StreamMonitor, counts: list[int]) -> list[tuple[int, StreamStatistics]]:
    out = []
    for e, n in enumerate(counts, mon.next_epoch):
        _, rep = mon.add(e, batch(e, n))
        if rep is not None:
            out.append((e, rep))
    return out


def monitor(step_ms: int) -> StreamMonitor:
    mon = StreamMonitor.of(S50, 100, MonitorConfig(200, 0.5, 2, 2000, 3.0, step_ms))
    mon.reference = StreamStatistics("S", 100.0, 50.0, 50.0, (("J", 0.01),))
    return mon


def test_a_sliding_interval_sees_a_change_an_epoch_earlier():
    """Two disjoint intervals past the threshold, and every measurement between them: at a
    sliding interval they may start at any epoch."""
    counts = [10] * 5 + [20] * 6      # 100/s, then 200/s from epoch 5 (mid-interval)
    sliding, blocks = reports(monitor(0), counts), reports(monitor(200), counts)
    assert [e for e, _ in sliding] == [8] and [e for e, _ in blocks] == [9]
    assert sliding[0][1].rate == pytest.approx(200) and blocks[0][1].rate == pytest.approx(200)


def test_one_bursty_epoch_does_not_trigger_a_sliding_monitor():
    """An epoch of 18 tuples between 10s makes two overlapping 200 ms intervals read 140-190/s;
    no two disjoint intervals do."""
    assert reports(monitor(0), [10] * 5 + [18] + [10] * 5) == []


def test_back_within_noise_of_the_declared_rate_is_reported_at_it():
    """Declared 100/s; after a rise to 300/s, a fall to 70/s is past the threshold from 300 but
    within noise of 100: the report is the declared statistics."""
    s = Stream("S", 0, "n", Window("time", 500), ("J",),
               StreamStats(rate=100, tuple_bytes=55, selectivity=(("J", 0.01),)))
    mon = StreamMonitor.of(s, 100, MonitorConfig(200, 0.5, 2, 2000, 3.0, 200))
    assert [r.rate for _, r in reports(mon, [30] * 4)] == [pytest.approx(300)]
    back = reports(mon, [7] * 4)
    assert len(back) == 1 and back[0][1].rate == 100.0 and mon.reference.rate == 100.0


def test_margin_and_step_limits():
    assert AdaptiveConfig(fence_margin=0).fence_margin == 0
    with pytest.raises(JoinlibError, match="fence margin"):
        AdaptiveConfig(fence_margin=-1)
    with pytest.raises(JoinlibError, match="step"):
        MonitorConfig(200, step_ms=300)
