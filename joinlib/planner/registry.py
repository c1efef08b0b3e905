"""Every name a plan can be asked for, in one table: ``resolve_plan`` for the CLI, the planner
service, the experiments and the benchmarks.

A plan spec is a name from :data:`PLANNERS` — ``NAME`` or, for names that take one,
``NAME:ARG`` — or a JSON plan file (see :data:`PLAN_HELP`).  Each entry builds its plan
from a :class:`PlanRequest`; entries with a cost-model planner (``greedy``, ``exhaustive``,
``beam``) also serve :func:`plan_for`; :func:`candidates` is what ``sampled`` measures.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

from joinlib.algorithms import ALGORITHMS
from joinlib.costs import DEFAULT_MODEL, get_model
from joinlib.costs.unit_time import CostModel
from joinlib.errors import PlanError
from joinlib.model import Query, Tup
from joinlib.plan import logical as plans
from joinlib.plan.logical import Plan
from joinlib.planner.auto import auto, auto_ranked
from joinlib.planner.beamsearch import beam
from joinlib.planner.exhaustive import exhaustive
from joinlib.planner.greedy import greedy
from joinlib.planner.sampled import sampled

CostPlanner = Callable[[Query, CostModel], Plan]
Streams = dict[str, list[Tup]]

PLAN_HELP = """PLAN is one of:
  auto                         (default) search every plan shape with the byte model;
                               with data: measure the statistics, then run the best
                               candidates and central at every node on a sample where
                               the windows fill, keep the fewest bytes (docs/cost-model.md)
  greedy | exhaustive | beam   cost-based planners (--model picks the cost model)
  sampled[:time]               run every candidate plan on a sample where every window
                               fills, keep the one shipping fewest bytes (or lowest time)
  central[:SITE]               ship every stream to one site and join there, as
                               centralized engines do (default site: highest rate)
  reduce[:NODE][:cross]        a reduction: semijoin program over a spanning tree of the
                               join graph, then only the tuples that can still join are
                               shipped to NODE, which joins (default node: as central;
                               cross: a cyclic graph's off-tree edges filter too;
                               docs/reduction.md)
  SP-S | SP-D | SM-S1 | SM-S2 | SM-D1 | SM-D2
                               that algorithm on every step (breadth-first orders)
  FILE.json                    {"S1": [["S2", "SM-S1"], ["S3", "SP-D"]], ...}"""


@dataclass(frozen=True)
class PlanRequest:
    """What a plan is built from: the query, the text after ``NAME:`` (None without a colon),
    the cost model name, and the data (``auto`` and ``sampled`` use it)."""

    query: Query
    arg: Optional[str] = None
    model: str = DEFAULT_MODEL
    streams: Optional[Streams] = None
    progress: bool = False


@dataclass(frozen=True)
class Planner:
    """One row of the table: how to build the plan, and what the name accepts."""

    build: Callable[[PlanRequest], Plan]
    takes_arg: bool = False  # NAME:ARG is accepted
    needs_data: bool = False  # measures candidates on the streams (auto: when there are some)
    cost: Optional[CostPlanner] = None  # a planner over a cost model (plan_for)


def _cost_based(fn: CostPlanner) -> Planner:
    return Planner(lambda r: fn(r.query, get_model(r.model)), cost=fn)


def _sampled(r: PlanRequest) -> Plan:
    objective = "bytes" if r.arg is None else r.arg
    return sampled(r.query, r.streams, objective, progress=r.progress, candidates=candidates)


def _auto(r: PlanRequest) -> Plan:
    return auto(r.query, r.streams)


def _central(r: PlanRequest) -> Plan:
    if r.arg is not None and r.arg not in r.query.nodes:
        raise PlanError(f"central:{r.arg}: no such node (nodes: {', '.join(r.query.nodes)})")
    return plans.central(r.query, r.arg)


def _reduce(r: PlanRequest) -> Plan:
    node, cross = r.arg, False
    if node is not None and (node == "cross" or node.endswith(":cross")) and node not in r.query.nodes:
        node, cross = (None if node == "cross" else node[: -len(":cross")]), True
    if node is not None and node not in r.query.nodes:
        raise PlanError(f"reduce:{r.arg}: no such node (nodes: {', '.join(r.query.nodes)}); "
                        "the form is reduce[:NODE][:cross]")
    return plans.reduction(r.query, node, cross=cross)


def _uniform(algorithm: str) -> Planner:
    return Planner(lambda r: plans.uniform(r.query, algorithm))


PLANNERS: dict[str, Planner] = {
    "auto": Planner(_auto, needs_data=True),
    "greedy": _cost_based(greedy),
    "exhaustive": _cost_based(exhaustive),
    "beam": _cost_based(beam),
    "sampled": Planner(_sampled, takes_arg=True, needs_data=True),
    "central": Planner(_central, takes_arg=True),
    "reduce": Planner(_reduce, takes_arg=True),
    **{algorithm: _uniform(algorithm) for algorithm in ALGORITHMS},
}

#: the cost-based planners, ``(query, model) -> Plan``
COST_PLANNERS: dict[str, CostPlanner] = {name: p.cost for name, p in PLANNERS.items() if p.cost is not None}


def lookup(spec: str) -> Optional[Planner]:
    """The table row ``spec`` names (None: not a planner name, maybe a file)."""
    name, colon, _ = spec.partition(":")
    p = PLANNERS.get(name)
    return p if p is not None and (not colon or p.takes_arg) else None


def needs_data(spec: str) -> bool:
    """Whether ``spec`` measures plans on the data (so the data must be loaded first)."""
    p = lookup(spec)
    return p is not None and p.needs_data


def resolve_plan(query: Query, spec: str, model: str = DEFAULT_MODEL, streams: Optional[Streams] = None,
                 progress: bool = False) -> Plan:
    """A plan from a planner name, ``central[:SITE]``, ``reduce[:NODE]``, an algorithm name, or a JSON file;
    ``sampled[:time]`` measures candidates on ``streams``."""
    p = lookup(spec)
    if p is not None:
        _, colon, arg = spec.partition(":")
        return p.build(PlanRequest(query, arg if colon else None, model, streams, progress))
    path = Path(spec)
    if path.suffix == ".json" or path.exists():
        return plans.from_json(query, path)
    raise PlanError(f"unknown plan {spec!r}\n{PLAN_HELP}")


def plan_for(name: str, query: Query, model: Union[CostModel, str, None] = None) -> Plan:
    """Run the cost-based planner ``name`` (greedy | exhaustive | beam) with ``model`` — a
    :class:`~joinlib.costs.unit_time.CostModel`, a model name for :func:`~joinlib.costs.get_model`,
    or None for the default, the plan-level byte model (``wire``)."""
    fn = COST_PLANNERS.get(name)
    if fn is None:
        raise PlanError(f"unknown planner {name!r} (choose from {', '.join(COST_PLANNERS)})")
    if model is None:
        model = get_model(DEFAULT_MODEL)
    elif isinstance(model, str):
        model = get_model(model)
    return fn(query, model)


def candidates(query: Query, streams: Optional[Streams] = None) -> dict[str, Plan]:
    """Every plan worth trying on data, by name (duplicates removed, first name kept): each
    cost-based planner under the wire, bytes and paper models, ``central`` and ``reduce`` at every node, each
    algorithm on every step, and every candidate of ``auto``'s search (mixed plans, sequences
    started at any node; the model's statistics measured on ``streams`` when given)."""
    out: dict[str, Plan] = {}
    for model in ("wire", "bytes", "paper"):
        for planner in ("greedy", "beam", "exhaustive"):  # cheap first: a duplicate keeps the cheap name
            out.setdefault(f"{planner}/{model}", plan_for(planner, query, model))
    for site in query.nodes:
        out[f"central:{site}"] = plans.central(query, site)
        out[f"reduce:{site}"] = plans.reduction(query, site)
    for algorithm in ALGORITHMS:
        out[algorithm] = plans.uniform(query, algorithm)
    for r in auto_ranked(query, streams)[0]:
        out.setdefault(f"auto/{r.name}", r.plan)
    unique: dict[str, Plan] = {}
    seen = set()
    for name, plan in out.items():
        key = repr(plan.to_json())
        if key not in seen:
            seen.add(key)
            unique[name] = plan
    return unique
