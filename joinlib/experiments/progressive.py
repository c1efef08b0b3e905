"""``joinlib experiment rpj``: the paper's Figs. 8-12 at the digest's small-reproduction scale.

Every run is a deterministic simulation (:mod:`.sim`) with the in-memory run store, and is
gated: its output must be the full hash join with zero duplicates (checked pair by pair).
Cases: harmony / reverse × P(R1):P(R2) = 1 / 5 × reliable / unreliable network; RPJ,
XJoin and HMJ everywhere, RPJ-md and RPJ-dd on the unreliable network (Figs. 11-12).
``--sweep`` adds a sensitivity table on the unreliable harmony case (c_ran, λ, n_flush).
"""
from __future__ import annotations

import json
import os
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Optional

from tqdm import tqdm

from joinlib.errors import JoinlibError
from joinlib.experiments import parallel
from joinlib.experiments.progressive_figures import DISTRIBUTIONS, LABELS, RATIOS, find, write_figures
from joinlib.progressive.model import JoinSpec, PageCosts, Phase, VirtualClock
from joinlib.progressive.registry import make_join
from joinlib.progressive.runs import MemoryRunStore
from joinlib.progressive.sim import Arrival, ArrivalNetwork, Recorder, Workload, schedule, simulate

BASELINES = ("rpj", "xjoin", "hmj")
VARIANTS = ("rpj", "rpj-md", "rpj-dd")
NETWORKS = ("reliable", "unreliable")
C_RANS = (1.0, 5.0, 10.0)
PAPER = {
    "reliable": "RPJ produces the most results during transmission in all four cases (Fig. 8); "
                "lowest amortised cost at all times (Fig. 9)",
    "unreliable": "clean-up starts around the 14000th timestamp; before it RPJ has reported most of the "
                  "results, XJoin and HMJ only about 20% (Fig. 10); RPJ-dd outputs faster than RPJ-md, "
                  "RPJ the most (Fig. 11)",
}
TIMELINE_POINTS = 200


@dataclass(frozen=True)
class Case:
    """One simulated run: algorithm, data, network, join settings."""

    algorithm: str
    workload: Workload
    network: ArrivalNetwork
    spec: JoinSpec
    label: str = ""


@dataclass(frozen=True)
class Scale:
    n: int = 200_000
    memory: int = 10_000
    n_flush: int = 1_000
    c_ran: float = 5.0
    lam: float = 0.9
    domain: int = 10_000
    page_tuples: int = 102
    seed: int = 1

    def spec(self, **changes: Any) -> JoinSpec:
        c_ran = changes.pop("c_ran", self.c_ran)
        costs = PageCosts(c_ran=c_ran, c_seq=c_ran / 10, c_cpu=c_ran / 100, page_tuples=self.page_tuples)
        base = JoinSpec(memory=self.memory, n_flush=self.n_flush, domain=self.domain, lam=self.lam, costs=costs)
        return replace(base, **changes)

    def workload(self, distribution: str, ratio: float) -> Workload:
        return Workload(n=self.n, ratio=ratio, distribution=distribution, domain=self.domain, seed=self.seed)


QUICK = Scale(n=6_000, memory=300, n_flush=30, c_ran=1.0, domain=300, page_tuples=3)
"""For tests: the full scale shrunk 1/33 in tuples per value and per page, with cheaper seeks."""


def main_cases(scale: Scale) -> list[Case]:
    out = []
    for network in NETWORKS:
        algorithms = BASELINES if network == "reliable" else BASELINES + VARIANTS[1:]
        for dist in DISTRIBUTIONS:
            for ratio in RATIOS:
                wl = scale.workload(dist, ratio)
                net = ArrivalNetwork(kind=network, seed=scale.seed)  # type: ignore[arg-type]
                out += [Case(a, wl, net, scale.spec()) for a in algorithms]
    return out


def sweep_cases(scale: Scale) -> list[Case]:
    """Sensitivity: the unreliable cases at the digest's other c_ran values (c_seq = c_ran / 10),
    and RPJ's λ and n_flush on harmony 1:1."""
    out = []
    for c in C_RANS:
        if c != scale.c_ran:
            for dist in DISTRIBUTIONS:
                for ratio in RATIOS:
                    net = ArrivalNetwork(kind="unreliable", seed=scale.seed)
                    out += [Case(a, scale.workload(dist, ratio), net, scale.spec(c_ran=c), f"c_ran={c:g}ms")
                            for a in BASELINES]
    wl, net = scale.workload("harmony", 1.0), ArrivalNetwork(kind="unreliable", seed=scale.seed)
    out += [Case("rpj", wl, net, scale.spec(lam=lam), f"lambda={lam:g}") for lam in (0.5, 0.9) if lam != scale.lam]
    out += [Case("rpj", wl, net, scale.spec(n_flush=f), f"n_flush={f}")
            for f in (scale.memory // 20, scale.memory // 4)]
    return out


# --------------------------------------------------------------------------- one run

class PairChecker:
    """Every result is a matching pair, seen once: with the count of the hash join, the
    output *is* the hash join."""

    def __init__(self, keys: tuple[list[Any], list[Any]]) -> None:
        self.keys = keys
        self.stride = len(keys[1]) + 1
        self.seen: set[int] = set()
        self.mismatched = 0
        self.results = 0

    def __call__(self, left: Any, right: Any, phase: Phase, t: int) -> None:
        self.results += 1
        if self.keys[0][left] != self.keys[1][right]:
            self.mismatched += 1
        self.seen.add(left * self.stride + right)


def _keys_and_expected(events: list[tuple[float, Arrival]]) -> tuple[tuple[list[Any], list[Any]], int]:
    keys: tuple[list[Any], list[Any]] = ([], [])
    for _, ev in events:
        if not ev.end:
            keys[ev.rel].append(ev.key)
    c1, c2 = Counter(keys[0]), Counter(keys[1])
    return keys, sum(n * c2[k] for k, n in c1.items())


def run_case(case: Case) -> dict[str, Any]:
    """Simulate one case; the summary, the gate and a downsampled timeline."""
    events = list(schedule(case.workload.events(), case.network.gaps()))
    keys, expected = _keys_and_expected(events)
    t_end = max((t for t, _ in events), default=0.0)
    clock = VirtualClock(case.spec.costs)
    checker = PairChecker(keys)
    rec = Recorder(clock, forward=checker, mark_ms=t_end)
    join = make_join(case.algorithm, case.spec, MemoryRunStore(), clock, rec)
    st = simulate(join, events, case.network, rec)
    total = rec.results
    return {
        "algorithm": case.algorithm, "label": case.label, "distribution": case.workload.distribution,
        "ratio": case.workload.ratio, "network": case.network.kind,
        "c_ran_ms": case.spec.costs.c_ran, "lambda": case.spec.lam, "n_flush": case.spec.flush_size,
        "results": total, "expected": expected, "duplicates": total - len(checker.seen),
        "mismatched": checker.mismatched, "exact": total == expected == len(checker.seen) and not checker.mismatched,
        "transmission_end_s": st.transmission_end_ms / 1000, "cleanup_start_s": st.cleanup_start_ms / 1000,
        "end_s": st.end_ms / 1000, "stalls": st.stalls, "reactive_tasks": st.reactive_tasks,
        "by_phase": dict(rec.by_phase), "before_cleanup": st.results_before_cleanup,
        "fraction_before_cleanup": st.results_before_cleanup / total if total else 1.0,
        "by_transmission_end": rec.at_mark, "fraction_by_transmission_end": rec.at_mark / total if total else 1.0,
        "cost_ms": {"cpu": clock.cpu_ms, "io": clock.io_ms, "random_pages": clock.random_pages,
                    "sequential_pages": clock.seq_pages},
        "amortised_cost_ms": clock.cost_ms / total if total else 0.0,
        "timeline": _downsample(rec.samples),
    }


def _downsample(samples: list[tuple[float, int, float]]) -> list[list[float]]:
    """≤ TIMELINE_POINTS (seconds, results, cost ms) points, first and last kept."""
    if len(samples) > TIMELINE_POINTS:
        step = (len(samples) - 1) / (TIMELINE_POINTS - 1)
        samples = [samples[round(i * step)] for i in range(TIMELINE_POINTS)]
    return [[round(t / 1000, 3), n, round(c, 1)] for t, n, c in samples]


# --------------------------------------------------------------------------- the experiment

@dataclass
class ProgressiveReport:
    """The rpj experiment's runs and sweep (named apart from a run's :class:`joinlib.runtime.report.Report`)."""

    scale: Scale
    runs: list[dict[str, Any]]
    sweep: list[dict[str, Any]] = field(default_factory=list)

    def find(self, network: str, dist: str, ratio: float, algorithm: str) -> dict[str, Any]:
        return find(self.runs, network, dist, ratio, algorithm)

    def title(self) -> str:
        s = self.scale
        return f"N = {s.n:,}, M = {s.memory:,}, n_flush = {s.n_flush:,}, c_ran = {s.c_ran:g} ms"

    def checks(self) -> dict[str, Any]:
        """The issue's targets, computed."""
        reliable, unreliable = {}, {}
        for dist in DISTRIBUTIONS:
            for ratio in RATIOS:
                case = f"{dist} {ratio:g}:1"
                by = {a: self.find("reliable", dist, ratio, a)["by_transmission_end"] for a in BASELINES}
                reliable[case] = {"by_transmission_end": by, "rpj_most": by["rpj"] == max(by.values())}
                unreliable[case] = {a: round(self.find("unreliable", dist, ratio, a)["fraction_before_cleanup"], 4)
                                    for a in BASELINES + VARIANTS[1:]}
        return {
            "all_exact": all(r["exact"] for r in self.runs + self.sweep),
            "reliable_rpj_most_in_all_four": all(v["rpj_most"] for v in reliable.values()),
            "unreliable_rpj_at_least_80pct_before_cleanup": all(v["rpj"] >= 0.8 for v in unreliable.values()),
            "reliable": reliable, "unreliable_fraction_before_cleanup": unreliable,
        }

    def to_json(self) -> dict[str, Any]:
        return {"scale": asdict(self.scale), "paper": PAPER, "checks": self.checks(),
                "runs": self.runs, "sweep": self.sweep}


def run_cases(cases: list[Case], jobs: int, progress: bool) -> list[dict[str, Any]]:
    """Run cases in ``jobs`` processes (results in case order)."""
    return parallel.run_all(run_case, cases, jobs, _bar(len(cases), progress))


def _bar(total: int, enabled: bool) -> Any:
    if not enabled:
        return lambda n: None
    t = tqdm(total=total, unit="run", file=sys.stderr, desc="rpj")
    return t.update


def main(out: Path, quick: bool = False, sweep: bool = False, jobs: Optional[int] = None,
         progress: bool = False, scale: Optional[Scale] = None) -> ProgressiveReport:
    """Run the experiment, write ``out/rpj.json`` and the figures; returns the report."""
    scale = scale or (QUICK if quick else Scale())
    jobs = jobs if jobs is not None else (os.cpu_count() or 1)
    report = ProgressiveReport(scale, run_cases(main_cases(scale), jobs, progress))
    if sweep:
        report.sweep = run_cases(sweep_cases(scale), jobs, progress)
    bad = [r for r in report.runs + report.sweep if not r["exact"]]
    (out / "rpj.json").write_text(json.dumps(report.to_json(), indent=1))
    write_figures(report.runs, report.title(), out)
    if bad:
        raise JoinlibError(f"{len(bad)} run(s) not exact (missing, extra or duplicated results): "
                           + ", ".join(f"{r['algorithm']} {r['network']} {r['distribution']}" for r in bad[:3]))
    print(summary(report))
    return report


def summary(report: ProgressiveReport) -> str:
    """The measured figures as a text table (what docs/progressive.md quotes)."""
    lines = [f"N = {report.scale.n:,}, M = {report.scale.memory:,}, n_flush = {report.scale.n_flush:,}, "
             f"c_ran = {report.scale.c_ran:g} ms"]
    lines.append("reliable: results by the end of transmission (share of the final output)")
    for row in _rows(report, "reliable", BASELINES, "fraction_by_transmission_end"):
        lines.append(row)
    lines.append("unreliable: share of the final output reported before the clean-up")
    for row in _rows(report, "unreliable", BASELINES + VARIANTS[1:], "fraction_before_cleanup"):
        lines.append(row)
    if report.sweep:
        lines += list(_sweep_rows(report))
    checks = report.checks()
    lines.append(f"exact (zero duplicates, none missing) in every run: {checks['all_exact']}")
    return "\n".join(lines)


def _sweep_rows(report: ProgressiveReport) -> Iterator[str]:
    yield "unreliable, share before the clean-up by c_ran (c_seq = c_ran / 10):"
    yield "  " + f"{'c_ran':<7}{'case':<16}" + "".join(f"{LABELS[a]:>9}" for a in BASELINES)
    for c in C_RANS:
        for dist in DISTRIBUTIONS:
            for ratio in RATIOS:
                vals = [_pick(report, c, dist, ratio, a)["fraction_before_cleanup"] for a in BASELINES]
                case = f"{dist} {ratio:g}:1"
                yield "  " + f"{c:<7g}{case:<16}" + "".join(f"{v:>9.1%}" for v in vals)
    for r in report.sweep:
        if not r["label"].startswith("c_ran"):
            yield f"  RPJ harmony 1:1 {r['label']}: {r['fraction_before_cleanup']:.1%}"


def _pick(report: ProgressiveReport, c_ran: float, dist: str, ratio: float, algorithm: str) -> dict[str, Any]:
    if c_ran == report.scale.c_ran:
        return report.find("unreliable", dist, ratio, algorithm)
    return next(r for r in report.sweep if (r["label"], r["distribution"], r["ratio"], r["algorithm"])
                == (f"c_ran={c_ran:g}ms", dist, ratio, algorithm))


def _rows(report: ProgressiveReport, network: str, algorithms: tuple[str, ...], metric: str) -> Iterator[str]:
    yield "  " + f"{'case':<16}" + "".join(f"{LABELS[a]:>9}" for a in algorithms)
    for dist in DISTRIBUTIONS:
        for ratio in RATIOS:
            vals = [report.find(network, dist, ratio, a)[metric] for a in algorithms]
            yield "  " + f"{dist + ' ' + format(ratio, 'g') + ':1':<16}" + "".join(f"{v:>9.1%}" for v in vals)
