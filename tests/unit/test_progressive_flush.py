"""RPJ's mm-stage: the optimal flush of Lemma 1, the arrival statistics, the Er bookkeeping."""
from __future__ import annotations

import itertools
import random

import pytest

from joinlib.progressive.model import JoinSpec, MemTuple, SpecError, VirtualClock, partition_of
from joinlib.progressive.rpj import RPJ
from joinlib.progressive.runs import MemoryRunStore
from joinlib.progressive.stats import ArrivalStats, plan_optimal_flush

# The digest's worked example (paper Sect. 4.1): two join values = two partitions.
# p1(1) = 35 %, p1(2) = 25 %, p2(1) = 10 %, p2(2) = 30 %; 20 tuples of each relation in
# memory, half with value 1, half with value 2; n_flush = 15.
P_ARR = [[0.35, 0.25], [0.10, 0.30]]  # [relation][value - 1]


def test_worked_example_plan():
    plan = plan_optimal_flush(P_ARR, [[10, 10], [10, 10]], 15)
    # smallest p is p2(1): evict R1's value-1 tuples (the OPPOSITE relation), then p1(2): R2's value 2
    assert plan == [(0, 0, 10), (1, 1, 5)]


def test_worked_example_end_to_end():
    """The same example through RPJ itself: statistics -> plan -> eviction from memory."""
    spec = JoinSpec(memory=40, n_flush=15, partitions=2)
    join = RPJ(spec, MemoryRunStore(), VirtualClock(), lambda *a: None)
    values = {1: partition_of(1, 2), 2: partition_of(2, 2)}
    # statistics: P(R1) = 0.6, P(R2) = 0.4; P(v | R1) = 35/60, 25/60; P(v | R2) = 10/40, 30/40
    join.stats.n_rcnt = [60.0, 40.0]
    for rel, counts in ((0, {1: 35, 2: 25}), (1, {1: 10, 2: 30})):
        for v, n in counts.items():
            join.stats.n_total[rel][values[v]] = n
        join.stats.sum_total[rel] = sum(counts.values())
    p = join.stats.p_arr(0.0)
    assert p[0][values[1]] == pytest.approx(0.35) and p[1][values[1]] == pytest.approx(0.10)
    for rel in (0, 1):
        for i in range(20):
            join.mem.insert(rel, values[1 + i % 2], MemTuple(1 + i % 2, join.clock.tick(), i))
    join._flush(join._flush_requests())
    size = join.mem.size
    assert (size(0, values[1]), size(0, values[2]), size(1, values[1]), size(1, values[2])) == (0, 10, 10, 5)
    # each flushed (relation, partition) became one sorted run
    assert [len(dp.slots) for dp in join.disk.parts] == [1, 1]


def _eta(p_arr, n_mem):
    return sum(n_mem[0][j] * p_arr[1][j] + p_arr[0][j] * n_mem[1][j] for j in range(len(n_mem[0])))


@pytest.mark.parametrize("seed", range(40))
def test_lemma1_no_other_eviction_keeps_more_expected_results(seed):
    """Brute force over every way to evict n_flush tuples: the plan maximises η (Eq. 3)."""
    rng = random.Random(seed)
    parts = rng.randint(1, 3)
    n_mem = [[rng.randint(0, 4) for _ in range(parts)] for _ in range(2)]
    total = sum(map(sum, n_mem))
    if total == 0:
        return
    n_flush = rng.randint(1, total)
    p_arr = [[rng.choice([0.0, 0.05, 0.1, 0.2, 0.3]) for _ in range(parts)] for _ in range(2)]
    plan = plan_optimal_flush(p_arr, n_mem, n_flush)
    assert sum(k for _, _, k in plan) == n_flush
    after = [row[:] for row in n_mem]
    for rel, j, k in plan:
        after[rel][j] -= k
    best = max(_eta(p_arr, [list(c[:parts]), list(c[parts:])])
               for c in itertools.product(*(range(n + 1) for n in n_mem[0] + n_mem[1]))
               if sum(c) == total - n_flush)
    assert _eta(p_arr, after) == pytest.approx(best)


def test_arrival_statistics_decay_and_end_of_stream():
    st = ArrivalStats(partitions=2, lam=0.5, unit_ms=1000)
    for _ in range(30):
        st.record(0, 0, 100)
    for _ in range(10):
        st.record(1, 1, 200)
    assert st.p_rel() == [0.75, 0.25]  # first unit still open: its own counts
    st.record(1, 0, 1500)  # closes unit 0: n_rcnt = (30, 10)
    assert st.n_rcnt == [30.0, 10.0]
    st.roll(3000)  # closes unit 1 (alpha = 0, 1) and decays one empty unit
    assert st.n_rcnt == [pytest.approx(15 * 0.5), pytest.approx(5.5 * 0.5)]
    p = st.p_arr(3000)
    assert p[0] == [pytest.approx(st.p_rel()[0]), 0.0]
    assert p[1][0] == pytest.approx(st.p_rel()[1] * 1 / 11)
    st.end(0)
    assert st.p_arr(3000)[0] == [0.0, 0.0]


def test_er_mem_and_er_disk_follow_lemma_2():
    """Arrivals add n_disk / s; flushing a tuple no md-task saw moves |S_bfr| / s from Er_mem
    to Er_disk; after an md-task, flushing it changes neither."""
    spec = JoinSpec(memory=100, partitions=1, domain=2)  # s = 2
    join = RPJ(spec, MemoryRunStore(), VirtualClock(), lambda *a: None)
    join.arrival(1, 0, 5)
    join.arrival(1, 1, 5)
    join._flush([(1, 0, None)])  # two R2 tuples on disk
    join.arrival(0, 10, 5)
    assert join.er_mem[0][0] == pytest.approx(1.0)  # 2 / s
    join._flush([(0, 0, None)])  # nothing ran an md-task: the estimate moves to the dd-task
    assert join.er_mem[0][0] == 0.0 and join.er_disk[0] == pytest.approx(1.0)
    join.arrival(0, 11, 5)
    # Er / Et: md 1.0 / (1 seek) beats dd 1.0 / (2·c_ran·2 pages)
    assert join.best_task() == ("md", 0, 0)
    assert join.blocked() and join.best_task() == ("dd", -1, 0) and join.blocked()
    assert not join.blocked()  # ... then nothing is worth doing
    assert join.er_mem[0][0] == 0.0 and join.er_disk[0] == 0.0
    join._flush([(0, 0, None)])  # an md-task saw tuple 11: no new dd-task result expected
    assert join.er_disk[0] == 0.0


def test_spec_validation():
    with pytest.raises(SpecError, match="too small"):
        JoinSpec(memory=1)
    with pytest.raises(SpecError, match="flush size"):
        JoinSpec(memory=10, n_flush=11)
    assert JoinSpec(memory=10_000).flush_size == 1000
    assert JoinSpec(memory=10_000, domain=10_000).s == 500
