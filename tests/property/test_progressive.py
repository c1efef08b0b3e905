"""Every progressive join outputs exactly the plain hash join, with zero duplicates, under
random stall schedules, flush sizes, memory limits, partitionings, fan-ins, key skews and
key types, ends of stream, and arrival times (which move RPJ's statistics).

The in-memory path (key index, runs read without copying) and the streaming path (runs read
page by page from files) must also give the identical output sequence.
"""
from __future__ import annotations

import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from joinlib.progressive.hmj import POLICIES
from joinlib.progressive.model import Id, JoinSpec, Key, VirtualClock
from joinlib.progressive.registry import ALGORITHMS, make_join
from joinlib.progressive.runs import FileRunStore, MemoryRunStore
from joinlib.progressive.sim import ArrivalNetwork, Recorder, Workload, schedule, simulate

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
VARIANTS = [(a, "adaptive") for a in ALGORITHMS if a != "hmj"] + [("hmj", p) for p in POLICIES]


@dataclass
class Scenario:
    rows: list[tuple[int, Id, Key]]  # (relation, id, key)
    times: list[float]  # virtual ms of each arrival (non-decreasing)
    stalls: list[int]  # blocked() calls after each arrival
    end_after: tuple[int, int]  # each relation's end-of-stream after this row (-1: before any)
    spec: JoinSpec

    def expected(self) -> Counter:
        left = [(i, k) for r, i, k in self.rows if r == 0]
        right = [(i, k) for r, i, k in self.rows if r == 1]
        return Counter((a, b) for a, ka in left for b, kb in right if ka == kb)


@st.composite
def scenarios(draw) -> Scenario:
    n = draw(st.integers(0, 70))
    domain = draw(st.sampled_from([1, 2, 3, 6, 15, 40]))
    skewed = draw(st.booleans())
    as_str = draw(st.booleans())
    rows = []
    ids = [0, 0]
    for _ in range(n):
        rel = draw(st.integers(0, 1))
        k = draw(st.integers(0, domain - 1))
        if skewed:  # min of two draws: small keys much more frequent
            k = min(k, draw(st.integers(0, domain - 1)))
        rows.append((rel, ids[rel], f"k{k}" if as_str else k))
        ids[rel] += 1
    gaps = draw(st.lists(st.sampled_from([0.0, 1.0, 7.0, 400.0, 1500.0]), min_size=n, max_size=n))
    times = [sum(gaps[:i + 1]) for i in range(n)]
    stalls = draw(st.lists(st.integers(0, 4), min_size=n, max_size=n))
    end_after = tuple(draw(st.integers(max((i for i, r in enumerate(rows) if r[0] == rel), default=-1), n - 1))
                      if n else -1 for rel in (0, 1))
    memory = draw(st.integers(2, 24))
    spec = JoinSpec(memory=memory, n_flush=draw(st.integers(1, memory)), partitions=draw(st.integers(1, 4)),
                    fanin=draw(st.integers(2, 4)), cleanup_fanin=draw(st.sampled_from([None, 2, 3])),
                    lam=draw(st.sampled_from([0.0, 0.5, 0.9, 1.0])), domain=draw(st.sampled_from([None, 40])))
    return Scenario(rows, times, stalls, end_after, spec)  # type: ignore[arg-type]


def drive(sc: Scenario, algorithm: str, policy: str, store) -> list[tuple]:
    out: list[tuple] = []
    clock = VirtualClock(sc.spec.costs)
    join = make_join(algorithm, sc.spec, store, clock, lambda *r: out.append(r), hmj_policy=policy)
    for rel in (0, 1):
        if sc.end_after[rel] < 0:
            join.end(rel)
    for i, (rel, tid, key) in enumerate(sc.rows):
        clock.advance_to(sc.times[i])
        join.arrival(rel, tid, key)
        for r in (0, 1):
            if sc.end_after[r] == i:
                join.end(r)
        for _ in range(sc.stalls[i]):
            if not join.blocked():
                break
    join.cleanup()
    return out


def assert_exact(sc: Scenario, out: list[tuple], what: str) -> None:
    got = Counter((a, b) for a, b, _, _ in out)
    want = sc.expected()
    dup = [p for p, c in got.items() if c > 1]
    missing, extra = list((want - got).items())[:5], list((got - want).items())[:5]
    assert not dup and got == want, f"{what}: duplicates {dup[:5]}, missing {missing}, extra {extra}"
    assert all(ph in ("arrival", "reactive", "cleanup") for _, _, ph, _ in out)
    assert [t for *_, t in out] == sorted(t for *_, t in out), f"{what}: logical time went back"


@SETTINGS
@given(sc=scenarios(), pick=st.integers(0, len(VARIANTS) - 1))
def test_every_algorithm_outputs_the_hash_join(sc, pick):
    for algorithm, policy in VARIANTS:
        out = drive(sc, algorithm, policy, MemoryRunStore())
        assert_exact(sc, out, f"{algorithm}/{policy}")
    # one algorithm per example also through the streaming path, files on disk: same sequence
    algorithm, policy = VARIANTS[pick]
    root = tempfile.mkdtemp(prefix="jl-prop-")
    try:
        streamed = drive(sc, algorithm, policy, FileRunStore(root, page_tuples=3))
        assert streamed == drive(sc, algorithm, policy, MemoryRunStore()), f"{algorithm}: paths differ"
    finally:
        shutil.rmtree(root, ignore_errors=True)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(0, 400), ratio=st.sampled_from([0.2, 1.0, 5.0]), dist=st.sampled_from(["harmony", "reverse"]),
       seed=st.integers(0, 10_000), memory=st.integers(2, 60), timeout=st.sampled_from([2.0, 10.0, 25.0]),
       alg=st.sampled_from(VARIANTS))
def test_simulated_networks_stay_exact(n, ratio, dist, seed, memory, timeout, alg):
    """The simulator's driver (queueing, stall detection, Zipf gaps) around every algorithm."""
    wl = Workload(n=n, ratio=ratio, distribution=dist, domain=40, partitions=4, seed=seed)
    net = ArrivalNetwork("unreliable", timeout_ms=timeout, seed=seed)
    spec = JoinSpec(memory=memory, partitions=4, domain=40)
    clock = VirtualClock(spec.costs)
    out: list[tuple] = []
    rec = Recorder(clock, forward=lambda *r: out.append(r))
    simulate(make_join(alg[0], spec, MemoryRunStore(), clock, rec, hmj_policy=alg[1]),
             schedule(wl.events(), net.gaps()), net, rec)
    rows = [e for e in wl.events() if not e.end]
    sc = Scenario([(e.rel, e.id, e.key) for e in rows], [], [], (-1, -1), spec)
    assert_exact(sc, out, f"{alg} n={n}")
    assert rec.results == sum(rec.by_phase.values()) == len(out)
