"""Synthetic workloads of the PMJoin model sweep (seed 002, Sect. 4): per-value rates of streams
over the integer data range 1..R under the paper's four value distributions.

* Uniform; Normal (mean at the hot spot, σ drawn as a share of R); Zipf θ; Self-Similar h (the first
  h·R values get 1 - h of the weight, recursively: P(v < x) = (x/R)^(log(1-h)/log h)).
* Hot-spot layout: position k of a distribution (k = 0 the hottest) is value (anchor + k) mod R under
  a contiguous hot spot (CHS), value perm[k] under a randomly spread one (RHS).
* Similar distributions (SD): every stream Zipf with θ in [0.1, 0.3] and one shared anchor /
  permutation, so the streams agree on which values are frequent. Different distributions (DD): each
  stream draws its distribution family and parameters and its own anchor / permutation ([impl]: the
  paper does not say where the hot spots of different distributions lie).
* Rates U[10, 1000] tuples/s, time windows U[10, 100] s, each stream at its own node (Sect. 4.2).
  LASW / HASW (Sect. 4.1): the slower streams get the smaller / the larger windows.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from joinlib.pmjoin.rates import FloatArray, StreamSpec, ValueRateModel

FAMILIES = ("uniform", "normal", "zipf", "selfsimilar")


@dataclass(frozen=True)
class Distribution:
    """A value distribution by position (0 = hottest): ``family`` with its ``param``
    (normal: σ / R; zipf: θ; selfsimilar: h; uniform: unused)."""

    family: str
    param: float = 0.0

    def by_position(self, r: int) -> FloatArray:
        k = np.arange(r, dtype=np.float64)
        if self.family == "uniform":
            p = np.ones(r)
        elif self.family == "zipf":
            p = 1.0 / (k + 1.0) ** self.param
        elif self.family == "normal":
            offset = np.minimum(k, r - k)  # symmetric around position 0, wrapping
            p = np.exp(-0.5 * (offset / max(self.param * r, 1e-9)) ** 2)
        elif self.family == "selfsimilar":
            e = math.log(1.0 - self.param) / math.log(self.param)
            cdf = (np.arange(r + 1, dtype=np.float64) / r) ** e
            p = np.diff(cdf)
        else:
            raise ValueError(f"unknown distribution family {self.family!r}")
        out: FloatArray = p / p.sum()
        return out

    def label(self) -> str:
        return self.family if self.family == "uniform" else f"{self.family}({self.param:.2f})"


def draw_distribution(rng: np.random.Generator, similar: bool) -> Distribution:
    if similar:
        return Distribution("zipf", float(rng.uniform(0.1, 0.3)))
    family = FAMILIES[int(rng.integers(len(FAMILIES)))]
    param = {"uniform": 0.0, "normal": float(rng.uniform(0.02, 0.25)), "zipf": float(rng.uniform(0.1, 1.5)),
             "selfsimilar": float(rng.uniform(0.1, 0.9))}[family]
    return Distribution(family, param)


@dataclass(frozen=True)
class Scenario:
    """SD / DD × CHS / RHS, the data range, the streams, and (Sect. 4.1) the window order."""

    similar: bool
    contiguous: bool
    data_range: int = 1000
    streams: int = 10
    windows: str = "random"  # random | lasw | hasw

    @property
    def name(self) -> str:
        return ("SD" if self.similar else "DD") + "-" + ("CHS" if self.contiguous else "RHS")


@dataclass(frozen=True)
class WorkloadInstance:
    """One drawn workload: the rate model, the values (1..R) and each stream's distribution (not a running plan
    instance, :mod:`joinlib.runtime.instance`)."""

    model: ValueRateModel
    values: tuple[int, ...]
    distributions: tuple[str, ...]


def _layout(rng: np.random.Generator, r: int, contiguous: bool) -> np.ndarray:
    if contiguous:
        return (int(rng.integers(r)) + np.arange(r)) % r
    return rng.permutation(r)


def _windows(rng: np.random.Generator, rates: FloatArray, order: str) -> FloatArray:
    w = rng.uniform(10.0, 100.0, size=len(rates))
    if order == "random":
        return w
    ranks = np.argsort(np.argsort(rates, kind="stable"), kind="stable")
    w_sorted = np.sort(w)
    return w_sorted[ranks] if order == "lasw" else w_sorted[::-1][ranks]


def instance(scenario: Scenario, seed: int) -> WorkloadInstance:
    """Draw the streams of ``scenario`` with ``seed`` (numpy's PCG64: the same on every machine).

    Rates, windows and distributions do not depend on the data range (only the hot-spot layouts
    do), so a sweep over data ranges changes the selectivities and nothing else."""
    streams = np.random.default_rng([seed, scenario.similar, scenario.contiguous, scenario.streams])
    layouts = np.random.default_rng([seed, scenario.similar, scenario.contiguous, scenario.data_range])
    n, r = scenario.streams, scenario.data_range
    rates = streams.uniform(10.0, 1000.0, size=n)
    windows = _windows(streams, rates, scenario.windows)
    dists = [draw_distribution(streams, scenario.similar) for _ in range(n)]
    shared = _layout(layouts, r, scenario.contiguous)
    lam = np.empty((n, r))
    for i, dist in enumerate(dists):
        layout = shared if scenario.similar else _layout(layouts, r, scenario.contiguous)
        lam[i, layout] = rates[i] * dist.by_position(r)
    specs = [StreamSpec(f"S{i}", f"n{i}", float(rates[i]), window_s=float(windows[i])) for i in range(n)]
    return WorkloadInstance(ValueRateModel(specs, lam, same_size=True), tuple(range(1, r + 1)),
                    tuple(d.label() for d in dists))
