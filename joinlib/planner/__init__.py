"""Plan optimisers over the cost models of :mod:`joinlib.cost`.

* ``greedy`` — Algorithm 10 of the paper (O(m³) formula evaluations);
* ``exhaustive`` — the optimum, by dynamic programming over (joined set, location)
  per head (O(2^m · m³ · 6));
* ``beam`` — beam search plus local search over orders (polynomial, ≤ greedy).

Every planner takes ``(query, model)`` and returns a validated :class:`~joinlib.plan.Plan`.
"""
from __future__ import annotations

from typing import Callable, Optional, Union

from ..cost import CostModel, PaperModel, explain, get_model, plan_cost, sequence_cost
from ..errors import PlanError
from ..model import Query
from ..plan import Plan
from .exhaustive import brute_force, exhaustive
from .greedy import greedy


def beam(query: Query, model: CostModel, width: Optional[int] = None, search: bool = True) -> Plan:
    """Beam search + local search (:func:`joinlib.planner.improved.beam`)."""
    from .improved import DEFAULT_WIDTH, beam as _beam  # lazy: keeps ``python -m ...improved`` clean
    return _beam(query, model, DEFAULT_WIDTH if width is None else width, search)


PLANNERS: dict[str, Callable[[Query, CostModel], Plan]] = {
    "greedy": greedy,
    "exhaustive": exhaustive,
    "beam": beam,
}


def plan_for(name: str, query: Query, model: Union[CostModel, str, None] = None) -> Plan:
    """Run planner ``name`` (greedy | exhaustive | beam) with ``model`` — a
    :class:`~joinlib.cost.CostModel`, a model name for :func:`~joinlib.cost.get_model`,
    or None for the paper model."""
    try:
        fn = PLANNERS[name]
    except KeyError:
        raise PlanError(f"unknown planner {name!r} (choose from {', '.join(PLANNERS)})") from None
    if model is None:
        model = PaperModel()
    elif isinstance(model, str):
        model = get_model(model)
    return fn(query, model)


__all__ = ["PLANNERS", "plan_for", "greedy", "exhaustive", "beam", "brute_force",
           "explain", "plan_cost", "sequence_cost"]
