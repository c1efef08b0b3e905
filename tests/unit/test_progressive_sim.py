"""The virtual-time simulator: the paper's workloads and networks, determinism, the driver,
and ``joinlib experiment rpj --quick``."""
from __future__ import annotations

import json
from collections import Counter
from itertools import islice

import pytest

from joinlib.cli.main import main
from joinlib.progressive.model import JoinSpec, VirtualClock, partition_of
from joinlib.progressive.registry import ALGORITHMS, make_join
from joinlib.progressive.runs import MemoryRunStore
from joinlib.progressive.sim import ArrivalNetwork, Recorder, Workload, partition_probabilities, schedule, simulate


def test_partition_probabilities_are_the_papers():
    p1, p2 = partition_probabilities(20, "harmony")
    assert p1[0] == pytest.approx(0.01) and p1[19] == pytest.approx(0.09) and sum(p1) == pytest.approx(1)
    assert p1[1] - p1[0] == pytest.approx(0.08 / 19) and p2 == p1
    _, rev = partition_probabilities(20, "reverse")
    assert rev[0] == pytest.approx(0.09) and rev == p1[::-1]  # P(j | R2) = P(21 - j | R1)


def test_workload_values_ratio_and_ends():
    wl = Workload(n=6000, ratio=5, distribution="reverse", seed=3)
    events = list(wl.events())
    rows = [e for e in events if not e.end]
    assert len(rows) == 6000 and len(events) == 6002
    share = sum(e.rel == 0 for e in rows) / len(rows)
    assert share == pytest.approx(5 / 6, abs=0.02)
    for rel in (0, 1):  # end-of-stream right after the relation's last tuple
        last = max(i for i, e in enumerate(events) if e.rel == rel and not e.end)
        assert events[last + 1] == (rel, 0, 0, True)
    # paper partition j holds the values v with v mod 20 = j mod 20; reverse: R2 favours j = 1
    parts = Counter(partition_of(e.key, 20) for e in rows if e.rel == 1)
    assert parts[1] > 5 * parts[0]  # H = v mod 20: paper j = 1 -> 1, j = 20 -> 0
    assert all(isinstance(e.key, int) and 1 <= e.key <= 10_000 for e in rows)
    assert list(Workload(n=50, seed=3).events()) == list(Workload(n=50, seed=3).events())


def test_network_gaps():
    assert list(islice(ArrivalNetwork("reliable").gaps(), 3)) == [1.0, 1.0, 1.0]
    gaps = list(islice(ArrivalNetwork("unreliable", seed=2).gaps(), 50_000))
    assert min(gaps) == 1 and max(gaps) == 30 and set(gaps) <= set(map(float, range(1, 31)))
    assert sum(gaps) / len(gaps) == pytest.approx(ArrivalNetwork("unreliable").mean_gap_ms(), rel=0.03)
    assert ArrivalNetwork("unreliable").mean_gap_ms() == pytest.approx(7.12, abs=0.01)
    assert gaps[:100] == list(islice(ArrivalNetwork("unreliable", seed=2).gaps(), 100))


def test_schedule_times():
    wl = Workload(n=5, seed=1)
    timed = list(schedule(wl.events(), iter([2.0, 3.0, 4.0, 5.0])))
    rows = [t for t, e in timed if not e.end]
    assert rows == [0.0, 2.0, 5.0, 9.0, 14.0]
    assert [t for t, e in timed if e.end] and max(t for t, _ in timed) == 14.0


def _run(alg: str, network: ArrivalNetwork, n: int = 3000):
    wl = Workload(n=n, ratio=2, domain=300, seed=5)
    spec = JoinSpec(memory=150, n_flush=15, domain=300)
    clock = VirtualClock(spec.costs)
    out: list = []
    rec = Recorder(clock, forward=lambda *r: out.append(r))
    stats = simulate(make_join(alg, spec, MemoryRunStore(), clock, rec), schedule(wl.events(), network.gaps()),
                     network, rec)
    return out, stats, rec


@pytest.mark.parametrize("alg", list(ALGORITHMS))
def test_simulation_is_deterministic_and_exact(alg):
    net = ArrivalNetwork("unreliable", seed=4)
    out, stats, rec = _run(alg, net)
    assert _run(alg, net)[0] == out  # same inputs, same run: results, order, times
    rows = [e for e in Workload(n=3000, ratio=2, domain=300, seed=5).events() if not e.end]
    keys = [{e.id: e.key for e in rows if e.rel == r} for r in (0, 1)]
    want = Counter((a, b) for a in keys[0] for b in keys[1] if keys[0][a] == keys[1][b])
    assert Counter((a, b) for a, b, _, _ in out) == want
    assert stats.stalls > 0 and rec.by_phase["arrival"] > 0
    assert stats.transmission_end_ms <= stats.cleanup_start_ms <= stats.end_ms
    assert [t for _, _, _, t in out] == sorted(t for _, _, _, t in out)  # logical time never goes back
    if alg != "xjoin" or stats.reactive_tasks:
        assert rec.by_phase["reactive"] > 0


def test_reliable_network_never_blocks():
    out, stats, rec = _run("rpj", ArrivalNetwork("reliable"))
    assert stats.stalls == 0 and rec.by_phase["reactive"] == 0
    assert stats.results_before_cleanup == rec.by_phase["arrival"]


def test_experiment_quick(tmp_path, capsys):
    assert main(["experiment", "rpj", "--out", str(tmp_path), "--quick", "--jobs", "2", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "exact (zero duplicates, none missing) in every run: True" in out
    report = json.loads((tmp_path / "rpj.json").read_text())
    assert report["checks"]["all_exact"] and len(report["runs"]) == 4 * 3 + 4 * 5
    assert all(r["duplicates"] == 0 and r["results"] == r["expected"] for r in report["runs"])
    pngs = sorted(p.name for p in tmp_path.glob("*.png"))
    assert pngs == ["fig10_unreliable_results.png", "fig11_variants_results.png", "fig12_variants_cost.png",
                    "fig8_reliable_results.png", "fig9_reliable_cost.png"]
    assert all(p.stat().st_size < 1_000_000 for p in tmp_path.iterdir())
