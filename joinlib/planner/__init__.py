"""Plan optimisers over the cost models of :mod:`joinlib.costs.unit_time`.

* ``greedy`` — Algorithm 10 of the paper (O(m³) formula evaluations);
* ``exhaustive`` — the optimum, by dynamic programming over (joined set, location)
  per head (O(2^m · m³ · 6));
* ``beam`` — beam search plus local search over orders (polynomial, ≤ greedy).

Every planner takes ``(query, model)`` and returns a validated :class:`~joinlib.plan.logical.Plan`.
Every name a plan can be asked for (these, ``sampled``, ``central``, the algorithms, a
JSON file) is in one table, :mod:`joinlib.planner.registry`.
"""
from __future__ import annotations

from joinlib.costs.unit_time import explain, plan_cost, sequence_cost
from joinlib.planner.beamsearch import beam
from joinlib.planner.exhaustive import brute_force, exhaustive
from joinlib.planner.greedy import greedy
from joinlib.planner.registry import COST_PLANNERS, plan_for, resolve_plan

__all__ = ["COST_PLANNERS", "plan_for", "resolve_plan", "greedy", "exhaustive", "beam", "brute_force",
           "explain", "plan_cost", "sequence_cost"]
