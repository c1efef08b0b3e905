"""The cost models' estimates of a plan and how well they agree with measurements: the statistics every
experiment reports (summaries, Pearson and Spearman correlations, the worst pairs).

Why apart from :mod:`joinlib.experiments.measure`: estimating and comparing needs no engine run; the
accuracy report (:mod:`joinlib.experiments.accuracy`) works from saved records alone.
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from pathlib import Path
from typing import Iterable, Optional, Sequence, TypedDict

from joinlib.costs import get_model
from joinlib.costs.unit_time import CostModel, plan_cost, sequence_cost
from joinlib.errors import JoinlibError
from joinlib.experiments.common import Record, round_sig
from joinlib.model import Query
from joinlib.plan.logical import Plan


def cost_models(calibration: Optional[Path] = None) -> dict[str, CostModel]:
    """The models every experiment reports: paper, bytes, and calibrated if a file is given."""
    models = {"paper": get_model("paper"), "bytes": get_model("bytes")}
    if calibration is not None:
        models["calibrated"] = get_model("calibrated", path=calibration)
    return models


def planning_model(name: str, calibration: Optional[Path] = None) -> CostModel:
    if name == "calibrated":
        if calibration is None:
            raise JoinlibError("--model calibrated needs --calibration FILE.json (see 'joinlib calibrate')")
        return get_model("calibrated", path=calibration)
    return get_model(name)


class Estimate(TypedDict):
    plan: dict[str, float]  # model -> cost
    by_head: dict[str, dict[str, float]]  # head -> model -> cost


def estimate_all(query: Query, plan: Plan, models: Mapping[str, CostModel]) -> Estimate:
    """{"plan": {model: cost}, "by_head": {head: {model: cost}}} (s/s, bytes model in B/s)."""
    out: Estimate = {"plan": {}, "by_head": {}}
    for name, model in models.items():
        out["plan"][name] = round_sig(plan_cost(query, plan, model), 9)
        for seq in plan.sequences:
            out["by_head"].setdefault(seq.head, {})[name] = round_sig(sequence_cost(query, seq, model), 9)
    return out


# --------------------------------------------------------------------------- statistics


class Summary(TypedDict):
    mean: Optional[float]
    median: Optional[float]
    sd: Optional[float]
    max: Optional[float]
    min: Optional[float]
    n: int


def summarize(values: Iterable[float]) -> Summary:
    """mean, median, sd (sample, n−1), max, min and n of ``values``."""
    xs = [float(x) for x in values]
    if not xs:
        return {"mean": None, "median": None, "sd": None, "max": None, "min": None, "n": 0}
    return {"mean": round_sig(statistics.fmean(xs)), "median": round_sig(statistics.median(xs)),
            "sd": round_sig(statistics.stdev(xs)) if len(xs) > 1 else 0.0,
            "max": round_sig(max(xs)), "min": round_sig(min(xs)), "n": len(xs)}


def pearson(xs: Sequence[float], ys: Sequence[float]) -> Optional[float]:
    """Pearson's r, or None with fewer than 2 points or a constant variable."""
    n = len(xs)
    if n != len(ys):
        raise ValueError("pearson: sequences of different lengths")
    if n < 2:
        return None
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    sxx = sum((x - mx) ** 2 for x in xs)
    syy = sum((y - my) ** 2 for y in ys)
    if sxx <= 0 or syy <= 0:
        return None
    return max(-1.0, min(1.0, sxy / math.sqrt(sxx * syy)))


def _ranks(xs: Sequence[float]) -> list[float]:
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    ranks = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2.0 + 1.0  # ties share their average rank
        i = j + 1
    return ranks


def spearman(xs: Sequence[float], ys: Sequence[float]) -> Optional[float]:
    """Spearman's rho: Pearson's r of the ranks (ties averaged)."""
    if len(xs) != len(ys):
        raise ValueError("spearman: sequences of different lengths")
    return pearson(_ranks(xs), _ranks(ys))


class Pair(TypedDict):
    """One estimate and the measurement it predicts."""

    estimated: Optional[float]
    measured: float
    label: str


class Worst(TypedDict):
    label: str
    estimated: float
    measured: float
    ratio: float


class Accuracy(TypedDict):
    n: int
    pearson: Optional[float]
    spearman: Optional[float]
    ratio_measured_over_estimated: Summary
    worst: list[Worst]


def accuracy(pairs: Sequence[Pair], worst: int = 5) -> Accuracy:
    """Agreement of estimates with measurements.

    ``pairs``: dicts with ``estimated``, ``measured`` and ``label``.  Reports n, Pearson
    and Spearman correlation, the ratio measured / estimated (mean, median, min, max)
    and the ``worst`` pairs by |log(measured / estimated)|.
    """
    ok = [(est, p["measured"], p["label"]) for p in pairs
          if (est := p["estimated"]) and est > 0 and p["measured"] > 0]
    xs = [est for est, _, _ in ok]
    ys = [measured for _, measured, _ in ok]
    ratios = [y / x for x, y in zip(xs, ys, strict=True)]
    ranked = sorted(ok, key=lambda p: -abs(math.log(p[1] / p[0])))
    r, rho = pearson(xs, ys), spearman(xs, ys)
    return {
        "n": len(ok),
        "pearson": None if r is None else round_sig(r, 4),
        "spearman": None if rho is None else round_sig(rho, 4),
        "ratio_measured_over_estimated": summarize(ratios),
        "worst": [{"label": label, "estimated": round_sig(est), "measured": round_sig(measured),
                   "ratio": round_sig(measured / est, 4)} for est, measured, label in ranked[:worst]],
    }


# Which measurement each model predicts.
MODEL_TARGET = {"paper": "execution_s_per_s", "bytes": "bytes_per_s", "calibrated": "execution_s_per_s"}


def accuracy_pairs(records: Iterable[Record]) -> dict[str, list[Pair]]:
    """Pairs per model from run records with ``estimated`` (model -> value),
    ``measured`` (a :meth:`Measurement.to_dict`) and ``label``."""
    out: dict[str, list[Pair]] = {}
    for rec in records:
        for model, est in rec["estimated"].items():
            target = MODEL_TARGET.get(model, "execution_s_per_s")
            out.setdefault(model, []).append({"estimated": est, "measured": rec["measured"][target],
                                              "label": rec["label"]})
    return out


def _corr(v: Optional[float]) -> str:
    return "  n/a" if v is None else f"{v:5.3f}"


def format_accuracy(acc: Mapping[str, Accuracy], title: str = "model accuracy") -> str:
    lines = [f"{title} (estimated vs measured, steady state):"]
    for model, a in acc.items():
        target = "bytes/s" if MODEL_TARGET.get(model) == "bytes_per_s" else "execution s/s"
        rr = a["ratio_measured_over_estimated"]
        if not a["n"]:
            lines.append(f"  {model:<10} no pairs")
            continue
        lines.append(f"  {model:<10} vs {target:<13} n={a['n']:<4} Pearson {_corr(a['pearson'])}  "
                     f"Spearman {_corr(a['spearman'])}  measured/estimated median {rr['median']:.3g} "
                     f"(min {rr['min']:.3g}, max {rr['max']:.3g})")
        for w in a["worst"][:3]:
            lines.append(f"      worst: {w['label']}: estimated {w['estimated']:.4g}, measured "
                         f"{w['measured']:.4g} (x{w['ratio']:.3g})")
    return "\n".join(lines)
