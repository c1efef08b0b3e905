"""The plan a ``--plan`` name chooses, explained (:mod:`joinlib.costs.explanation`): what ``joinlib explain``, the
planner service's ``POST /explain`` and :func:`joinlib.api.explain` share, so all three pick the plan the way
``joinlib plan`` and ``joinlib submit`` do."""
from __future__ import annotations

from dataclasses import replace
from typing import Optional

from joinlib.control.run_plan import AdaptiveRun, Generations, PartitionedRun
from joinlib.costs import DEFAULT_MODEL
from joinlib.costs.explanation import Explanation, explain_plan
from joinlib.errors import PlanError
from joinlib.model import Query, Tup
from joinlib.planner.registry import PlanKind, plan_kind, resolve_plan, resolve_run_plan

DEFAULT_PLAN = "auto"


def explain_query(query: Query, spec: str = DEFAULT_PLAN, model: str = DEFAULT_MODEL,
                  streams: Optional[dict[str, list[Tup]]] = None, progress: bool = False) -> Explanation:
    """The plan ``spec`` names for ``query`` (statistics and ``sampled`` / ``auto``'s measurements from
    ``streams`` when given), explained; ``adaptive[...]`` explains the plan it starts with.  Partitioned plans and
    MJoin trees are not plans of join sequences: a :class:`PlanError` says so."""
    kind = plan_kind(spec)
    if kind is PlanKind.ADAPTIVE:
        run = resolve_run_plan(query, spec, model, streams, progress=progress)
        assert isinstance(run, AdaptiveRun)
        return explain_plan(query, run.initial, spec, streams)
    if kind is not PlanKind.PLANS:
        raise PlanError(f"--plan {spec}: explain shows plans of join sequences (auto, greedy, central, reduce, an "
                        "algorithm, a JSON file, adaptive's first plan); a partitioned plan or an MJoin tree is "
                        "not one yet ('joinlib plan --planner mjoin --explain' describes a tree)")
    if spec == "auto" and streams is not None:   # the plan `joinlib run --plan auto` runs on this data
        run = resolve_run_plan(query, spec, model, streams, progress=progress)
        if isinstance(run, Generations) and len(run.gens) == 1:
            return explain_plan(query, run.gens[0][1], spec, streams)
        what = "a plan per partition" if isinstance(run, PartitionedRun) else "MJoin trees"
        e = explain_plan(query, resolve_plan(query, spec, model, streams, progress), spec, streams)
        return replace(e, description=f"{e.description} -- the best plan of join sequences; on this data auto runs "
                                      f"{what} ('joinlib plan --planner auto --data DIR --explain' shows them)")
    return explain_plan(query, resolve_plan(query, spec, model, streams, progress), spec, streams)
