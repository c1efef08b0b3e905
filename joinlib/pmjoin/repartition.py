"""When a running partitioned plan should be partitioned again: its function against one fitted to the current
per-value rates, both priced by seed 002's per-value rate model.

A live ``pmjoin:rate|range|site`` query's partition function was fitted to the per-value rates known at its
submission (``--values``) or at its last re-partition.  Rates move: a value's tuples come from another site, a
few values take most of the traffic.  The nodes report the current rates (:mod:`.value_monitor`), and the planner
service asks :func:`verdict` whether the function it runs still fits them: the bytes per second the model
predicts for the running function's groups, against those of a function of the same scheme and D fitted to the
current rates.  When the running one costs more than ``1 + threshold`` times the refit, the planner moves the
query to the refit with a replan (seed 003's jump-start and switch at an event time: docs/live.md "Replan"), so
the output stays exact across it.

Why the rate model and not the byte model ``auto`` uses: per-value rates are all a live query has -- no tuples
to run candidates on -- and they are what the function was fitted to.  The model prices each group with
STREAMJOINOPT's MJoin tree, where the running plan may run a reduction per partition: the ratio, not the
absolute bytes, is what the trigger reads.  No I/O here: the planner service calls it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from joinlib.errors import PlanError
from joinlib.model import Query
from joinlib.plan.partition import PartitionFunction
from joinlib.plan.partitioned import Partitioned, is_partitioned, parse_spec
from joinlib.pmjoin.partitioned import function_from_stats
from joinlib.pmjoin.plan import group_columns, group_costs
from joinlib.pmjoin.rates import ValueRates
from joinlib.pmjoin.stats import single_class, value_model

#: the schemes whose function is fitted to per-value rates (hash has nothing to refit)
FITTED = ("range", "rate", "site")
#: the default threshold of ``joinlib submit --repartition``: re-partition when the running function costs 25 % more
DEFAULT_THRESHOLD = 0.25


@dataclass(frozen=True)
class Verdict:
    """The model's bytes per second of the running function and of the refit, and whether to move."""

    current: float
    refit: float
    threshold: float
    function: PartitionFunction    # the refit

    @property
    def gain(self) -> float:
        """How many times the running function costs the refit's (1.0: no better)."""
        return self.current / self.refit if self.refit > 0 else 1.0

    @property
    def due(self) -> bool:
        return self.current > (1.0 + self.threshold) * self.refit

    def to_json(self) -> dict[str, Any]:
        return {"current": round(self.current, 3), "refit": round(self.refit, 3), "gain": round(self.gain, 4),
                "threshold": self.threshold, "due": self.due}


def check_repartitionable(query: Query, spec: str, threshold: float) -> None:
    """PlanError unless a query running plan ``spec`` can be re-partitioned automatically at ``threshold``."""
    if not threshold > 0:
        raise PlanError(f"--repartition {threshold}: the threshold must be positive (0.25: re-partition when the "
                        "running function costs 25 % more than one fitted to the current rates)")
    if scheme_of(spec) not in FITTED:
        raise PlanError(f"--repartition needs --plan pmjoin:rate|range|site[:D] (a function fitted to per-value "
                        f"rates), not {spec!r}")
    single_class(query)   # the rate model prices one equality class


def scheme_of(spec: str) -> Optional[str]:
    """The partition scheme of a ``pmjoin...`` plan name, None for any other plan (or a malformed one)."""
    try:
        return parse_spec(spec)[0] if is_partitioned(spec) else None
    except PlanError:
        return None


def rates_of(query: Query, stats: Any) -> ValueRates:
    """:func:`~.partitioned.value_stats`'s JSON as the model's rates: a row per stream of the query, in its
    order (a stream the report has no tuples of yet: zeros)."""
    if not isinstance(stats, dict) or not all(isinstance(stats.get(k), list) for k in ("streams", "values", "rates")):
        raise PlanError("value statistics: expected {\"streams\": [...], \"values\": [...], \"rates\": [[...]]}")
    values = tuple(stats["values"])
    given = dict(zip(stats["streams"], stats["rates"], strict=False))
    rows = []
    for name in query.names:
        row = given.get(name) or [0.0] * len(values)
        if len(row) != len(values):
            raise PlanError(f"value statistics: stream {name} has {len(row)} rates for {len(values)} values")
        rows.append(tuple(float(r) for r in row))
    return ValueRates(query.names, values, tuple(rows))


def function_cost(query: Query, rates: ValueRates, fn: PartitionFunction) -> float:
    """The rate model's bytes per second of partitioning by ``fn`` under ``rates`` (a tree per group)."""
    model = value_model(query, rates)
    return float(sum(group_costs(model, group_columns(model, rates.values, fn))))


def verdict(query: Query, running: Partitioned, spec: str, stats: Any, threshold: float) -> Verdict:
    """Whether the running plan's function should give way to ``spec``'s function fitted to ``stats`` (the
    current per-value rates, :func:`~.partitioned.value_stats`'s JSON)."""
    scheme, parts = parse_spec(spec)
    rates = rates_of(query, stats)
    refit = function_from_stats(query, stats, scheme, parts)
    return Verdict(function_cost(query, rates, running.function), function_cost(query, rates, refit), threshold, refit)
