"""The chaos benchmark's fault schedule (bench/chaos_faults.py): the same seed gives the same schedule, every kind
comes once before any repeats (then a replan back), faults keep their spacing and stay out of the warm-up and the
cool-down, the first pause hits a shared instance, and a replan alternates between its two plans."""
from __future__ import annotations

import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from chaos_faults import HOLD_S, KINDS, REPLAN_PLANS, make_schedule  # type: ignore[import-not-found]  # noqa: E402

NODES = ["s1-P1", "s1-P2", "s1-R", "s2", "s3"]


def _schedule(seed: int, duration: float = 600.0, kinds: tuple[str, ...] = KINDS, gap: float = 50.0):
    return make_schedule(seed, duration, kinds, NODES, warmup_s=45.0, cooldown_s=45.0, gap_s=gap,
                         shared=("s1-P1", "s1-P2"))


def test_the_same_seed_gives_the_same_schedule_and_another_seed_another():
    assert _schedule(7) == _schedule(7)
    assert _schedule(7) != _schedule(8)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), duration=st.floats(120, 1800), gap=st.floats(12, 90),
       kinds=st.lists(st.sampled_from(KINDS), min_size=1, max_size=len(KINDS), unique=True))
def test_every_kind_before_repeats_spacing_window_targets(seed, duration, gap, kinds):
    sched = _schedule(seed, duration, tuple(kinds), gap)
    slots = int((duration - 90.0) // gap) + 1 if duration >= 90.0 else 0
    assert len(sched) == slots
    first = [f.kind for f in sched[:len(kinds)]]
    assert len(set(first)) == len(first), "a kind repeats before every kind came once"
    assert all(f.kind in kinds for f in sched)
    for a, b in zip(sched, sched[1:], strict=False):
        assert b.at_s - a.at_s >= 0.7 * gap - 0.2 or b.at_s >= duration - 45.1
    assert all(45.0 <= f.at_s <= duration - 45.0 for f in sched)
    for f in sched:
        lo, hi = HOLD_S[f.kind]
        assert lo <= f.hold_s <= hi
        if f.kind in ("kill-node", "pause-node"):
            assert f.target in NODES
    if "replan" in kinds and len(sched) > len(kinds):
        assert sched[len(kinds)].kind == "replan", "no replan back after every kind came once"
    pauses = [f.target for f in sched if f.kind == "pause-node"]
    assert not pauses or pauses[0] in ("s1-P1", "s1-P2"), "the first pause does not test fencing"
    replans = [f.target for f in sched if f.kind == "replan"]
    assert replans == [REPLAN_PLANS[i % 2] for i in range(len(replans))]


def test_a_pause_outlasts_the_group_session():
    """A paused instance must lose its partitions (4 s sessions, bench/chaos_stack.py) for fencing to be tested."""
    assert HOLD_S["pause-node"][0] > 2 * 4.0
