"""Duplicate avoidance in md-tasks, dd-tasks (PSMJ) and clean-up: the paper's scenarios,
scripted step by step (memory large enough that only the script flushes)."""
from __future__ import annotations

from bisect import bisect_left

import pytest

from joinlib.progressive.disk import RunRef, Slot
from joinlib.progressive.model import JoinSpec, VirtualClock
from joinlib.progressive.rpj import RPJ
from joinlib.progressive.runs import FileRunStore, MemoryRunStore
from joinlib.progressive.tasks import dd_rule, dd_task, md_task, pack_slots


class Script:
    """A one-partition join driven by hand: arrivals, flushes, md- and dd-tasks, clean-up."""

    def __init__(self, store=None) -> None:
        self.results: list[tuple[object, object, str]] = []
        self.join = RPJ(JoinSpec(memory=1000, partitions=1, fanin=2), store or MemoryRunStore(), VirtualClock(),
                        lambda left, right, phase, t: self.results.append((left, right, phase)))

    def arrive(self, rel: int, tid: int, key: int = 7) -> None:
        self.join.arrival(rel, tid, key)

    def flush(self, rel: int) -> None:
        self.join._flush([(rel, 0, None)])

    def md(self, rel: int) -> None:
        md_task(self.join.ctx, self.join.mem.parts[rel][0], rel, 0)

    def dd(self) -> None:
        dd_task(self.join.ctx, 0, self.join.spec.fanin)

    def cleanup(self) -> list[tuple[object, object, str]]:
        self.join.end(0)
        self.join.end(1)
        self.join.cleanup()
        return self.results


@pytest.mark.parametrize("store", ["memory", "file"])
def test_xjoin_example_is_reported_once(store, tmp_path):
    """Sect. 2.1: t1 arrives (0), t2 arrives (5) and is reported; t1 is flushed (10); an
    md-task of R2^mem meets t1 on disk (15); t2 is flushed (20); the clean-up's dd-task meets
    both on disk.  Without ATS/DTS the pair would be reported three times."""
    s = Script(FileRunStore(tmp_path) if store == "file" else None)
    s.arrive(0, 1)
    s.arrive(1, 2)
    s.flush(0)
    s.md(1)
    s.flush(1)
    assert s.cleanup() == [(1, 2, "arrival")]


def test_md_task_skips_what_the_previous_md_task_saw():
    """Fig. 5: the second md-task of the same memory partition reports only new pairs."""
    s = Script()
    s.arrive(1, 20)
    s.flush(1)  # t20 on disk
    s.arrive(0, 1)
    s.md(0)  # (1, 20)
    s.arrive(0, 2)
    s.md(0)  # (2, 20) only
    assert s.results == [(1, 20, "reactive"), (2, 20, "reactive")]
    assert s.cleanup() == s.results  # and nothing again in the clean-up


def test_dd_rule_line_7_fix_keeps_the_result():
    """Fig. 7 as printed tests T1md[c1] (the LAST md-task) > t2.DTS; it must be T1md[i].
    Here an md-task of R1^mem ran while t1 was in memory but before t2 existed, and another
    one after t2 was flushed: nothing reported (t1, t2), the printed test would drop it."""
    s = Script()
    s.arrive(1, 90)
    s.flush(1)  # R2 disk is not empty, so md-tasks of R1^mem make sense
    s.arrive(0, 1)  # t1
    s.md(0)  # T_1, t1 in memory, t2 not yet arrived
    s.flush(0)  # t1 -> disk
    s.arrive(1, 2)  # t2: t1 is already on disk, nothing in memory to meet
    s.flush(1)  # t2 -> disk
    s.arrive(0, 3)
    s.md(0)  # T_2 > t2.DTS, t1 long gone from memory
    out = s.cleanup()
    assert out.count((1, 2, "cleanup")) == 1
    assert sorted(out) == sorted([(1, 90, "reactive"), (3, 90, "reactive"), (3, 2, "reactive"),
                                  (1, 2, "cleanup")])

    # the rule itself: T_1 inside [a1, d1] but before d2, T_2 after d2 but outside [a1, d1]
    a1, t_1, d1, a2, d2, t_2 = 3, 4, 5, 6, 7, 9
    tmd1 = [t_1, t_2]
    assert dd_rule(tmd1, [])(a1, d1, a2, d2)

    def printed(a1, d1, a2, d2):  # Fig. 7 line 7 as printed
        return not any(a1 <= t <= d1 and tmd1[-1] > d2 for t in tmd1)
    assert not printed(a1, d1, a2, d2)


def test_dd_task_reports_each_pair_once_across_tasks():
    """PSMJ merges slots; a second dd-task after new flushes reports only the new pairs."""
    s = Script()
    for i in range(3):  # three R1 runs, two R2 runs, none ever in memory together
        s.arrive(0, i)
        s.flush(0)
    for i in range(2):
        s.arrive(1, 10 + i)
        s.flush(1)
    s.dd()
    assert sorted(s.results) == [(i, 10 + k, "reactive") for i in range(3) for k in range(2)]
    assert len(s.join.disk.parts[0].slots) == 1  # merged into one matching pair of runs
    s.arrive(1, 20)
    s.flush(1)
    s.dd()
    assert sorted(s.results[6:]) == [(i, 20, "reactive") for i in range(3)]
    assert s.cleanup()[9:] == []


def test_pack_slots_respects_fanin_per_side():
    r = RunRef(1, 1)
    slots = [Slot((r, None)), Slot((None, r)), Slot((r, r)), Slot((r, None)), Slot((r, None))]
    groups = pack_slots(slots, 2)
    assert [len(g) for g in groups] == [3, 2]  # (r,-) (-,r) (r,r): two runs per side
    for g in groups:
        assert sum(s.runs[0] is not None for s in g) <= 2 and sum(s.runs[1] is not None for s in g) <= 2


def test_md_history_is_what_the_dd_rule_reads():
    """T^md stays sorted (ticks are strictly monotone), so the rule may bisect it."""
    s = Script()
    s.arrive(1, 1)
    s.flush(1)
    for i in range(5):
        s.arrive(0, 10 + i)
        s.md(0)
    tmd = s.join.disk.parts[0].tmd[0]
    assert tmd == sorted(tmd) and len(set(tmd)) == 5
    assert bisect_left(tmd, tmd[2]) == 2
