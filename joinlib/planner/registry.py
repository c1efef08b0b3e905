"""Every name a plan can be asked for, in one table: ``resolve_plan`` for the CLI, the planner
service, the experiments and the benchmarks.

A plan spec is a name from :data:`PLANNERS` — ``NAME`` or, for names that take one,
``NAME:ARG`` — or a JSON plan file (see :data:`PLAN_HELP`).  Each entry builds its plan
from a :class:`PlanRequest`; entries with a cost-model planner (``greedy``, ``exhaustive``,
``beam``) also serve :func:`plan_for`; :func:`candidates` is what ``sampled`` measures.

A ``--plan`` value may also name a kind of run other than plan generations: ``pmjoin[...]`` (a plan per
partition), ``adaptive[:cnu|:dnu]`` (re-planned while running) or ``mjoin[...]`` (MJoin trees).
:func:`plan_kind` is the one place these names are told apart, and :func:`run_plan` resolves any of them to
a typed :data:`~joinlib.control.run_plan.RunPlan`: the command line and the planner service dispatch on
those types, not on prefixes.
"""
from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

from joinlib.adaptive.config import AdaptiveConfig, is_adaptive, parse_plan
from joinlib.adaptive.planner import algorithm1
from joinlib.adaptive.stats import with_stats
from joinlib.algorithms import ALGORITHMS
from joinlib.control.run_plan import AdaptiveRun, Generations, PartitionedRun, RunPlan, TreesRun
from joinlib.costs import DEFAULT_MODEL, get_model
from joinlib.costs.unit_time import CostModel
from joinlib.errors import PlanError
from joinlib.mjoin.tree_plans import is_tree, plan_partitioned_trees, plan_tree
from joinlib.model import Query, Tup
from joinlib.plan import logical as plans
from joinlib.plan.logical import Plan
from joinlib.plan.partitioned import Partitioned, is_partitioned
from joinlib.planner.auto import auto, auto_any, auto_ranked
from joinlib.planner.beamsearch import beam
from joinlib.planner.exhaustive import exhaustive
from joinlib.planner.greedy import greedy
from joinlib.planner.kinds import Candidate
from joinlib.planner.sampled import sampled
from joinlib.pmjoin.partitioned import build, build_from_stats

CostPlanner = Callable[[Query, CostModel], Plan]
Streams = dict[str, list[Tup]]

PLAN_HELP = """PLAN is one of:
  auto                         (default) search every plan shape with the byte model;
                               with data: measure the statistics, then run the best
                               candidates and central at every node on a sample where
                               the windows fill, keep the fewest bytes; with data also
                               pmjoin[...][:mjoin] and mjoin (docs/cost-model.md)
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
    kind = plan_kind(spec)
    if kind is not PlanKind.PLANS:   # a partitioned plan or trees are chosen on the data; STREAMJOINOPT's tree too
        return kind in (PlanKind.PARTITIONED, PlanKind.PARTITIONED_TREES) or spec == "mjoin"
    p = lookup(spec)
    return p is not None and p.needs_data


class PlanKind(enum.Enum):
    """What a ``--plan`` value asks for."""

    PLANS = "plans"                          # a plan (and, with --switch, later ones): the table above
    PARTITIONED = "partitioned"              # pmjoin[:hash|range|rate][:D]: a plan per partition
    ADAPTIVE = "adaptive"                    # adaptive[:cnu|:dnu]: re-planned while running
    TREE = "tree"                            # mjoin[:FILE.json]: an MJoin tree
    PARTITIONED_TREES = "partitioned_trees"  # pmjoin[...]:mjoin: an MJoin tree per partition


def plan_kind(spec: str) -> PlanKind:
    """The kind of run ``spec`` names (the one place the names' prefixes are told apart)."""
    if is_tree(spec):
        return PlanKind.PARTITIONED_TREES if spec.startswith("pmjoin") else PlanKind.TREE
    if is_partitioned(spec):
        return PlanKind.PARTITIONED
    return PlanKind.ADAPTIVE if is_adaptive(spec) else PlanKind.PLANS


def tree_file(spec: str) -> Optional[str]:
    """The file of ``mjoin:FILE.json`` (None for any other spec)."""
    name, sep, path = spec.partition(":")
    return path if plan_kind(spec) is PlanKind.TREE and sep else None


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


def resolve_run_plan(query: Query, spec: str, model: str = DEFAULT_MODEL, streams: Optional[Streams] = None, *,
             progress: bool = False, switches: Sequence[tuple[int, str]] = (), values: Any = None,
             adaptive: Optional[AdaptiveConfig] = None) -> RunPlan:
    """The run ``spec`` names (:func:`plan_kind`), typed: plan generations (``spec`` at epoch 0, then each of
    ``switches``: (first epoch, spec)), a partitioned plan (chosen on ``streams``, else from the per-value rates
    ``values``: a continuous query's), an adaptive plan (``adaptive``: the configuration it starts from) or MJoin
    trees (on ``streams``, else on the query file's statistics); ``auto`` chooses each partition's plan."""
    kind = plan_kind(spec)
    if kind is PlanKind.TREE:
        return TreesRun(plan_tree(query, spec, streams))
    if kind is PlanKind.PARTITIONED_TREES:
        if streams is None:
            raise PlanError(f"--plan {spec}: a tree per partition is chosen on the data")
        return TreesRun(plan_partitioned_trees(query, streams, spec)[0])
    if kind is PlanKind.PARTITIONED:
        return PartitionedRun(_partitioned(query, spec, model, streams, values, progress))
    if kind is PlanKind.ADAPTIVE:
        cfg = parse_plan(spec, adaptive)   # Algorithm 1 on the query file's statistics: the plan it starts with
        return AdaptiveRun(cfg, algorithm1(with_stats(query, {}), cfg.model).to_plan(query))
    if spec == "auto" and streams is not None and not switches:   # every run kind, chosen on the data
        return run_plan_of(auto_any(query, streams).plan)
    gens = [(at, resolve_plan(query, s, model, streams, progress)) for at, s in [(0, spec), *switches]]
    return Generations(tuple(gens))


def run_plan_of(cand: Candidate) -> RunPlan:
    """The run of one of ``auto``'s candidates, typed by its kind."""
    if isinstance(cand, Plan):
        return Generations.of(cand)
    if isinstance(cand, Partitioned):
        return PartitionedRun(cand)
    return TreesRun(cand)


def _partitioned(query: Query, spec: str, model: str, streams: Optional[Streams], values: Any,
                 progress: bool) -> Partitioned:
    """``pmjoin[:hash|range|rate][:D]``: the function and each partition's ``auto`` plan, on the data of each
    partition, or without data from per-value rates (a continuous query's: ``hash`` needs none)."""
    if streams is not None:
        return build(query, streams, spec, lambda q, s: resolve_plan(q, "auto", model, s, progress=progress))
    return build_from_stats(query, spec, values, lambda q: resolve_plan(q, "auto", model))


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
        if isinstance(r.plan, Plan):
            out.setdefault(f"auto/{r.name}", r.plan)
    unique: dict[str, Plan] = {}
    seen = set()
    for name, plan in out.items():
        key = repr(plan.to_json())
        if key not in seen:
            seen.add(key)
            unique[name] = plan
    return unique
