"""What a run executes, typed: plan generations, a partitioned plan (PMJoin), an adaptive plan or MJoin trees.

A :data:`RunPlan` is what :func:`joinlib.planner.registry.run_plan` resolves a ``--plan`` name to, what a
``plan`` control message carries (:meth:`message`, built once by the cluster runner and the planner) and
what a node compiles such a message back into (:func:`joinlib.control.compile.compile_plan`): the CLI, the
planner service and the nodes dispatch on these types, not on the prefixes of plan names or on the keys of a
plan's JSON.

Pure: no I/O, no client libraries.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Optional, Sequence, Union

from joinlib.adaptive.config import AdaptiveConfig
from joinlib.adaptive.jep import JEP, from_plan
from joinlib.adaptive.migration import generation_cap
from joinlib.adaptive.service import config_json
from joinlib.control.messages import PlanMessage, Switch
from joinlib.errors import ClusterError
from joinlib.mjoin.derived import TreeProgram, deploy
from joinlib.mjoin.tree_plans import PartitionedTrees, SharedTrees
from joinlib.model import Query
from joinlib.plan.logical import Plan
from joinlib.plan.partitioned import Partitioned
from joinlib.query import query_to_dict
from joinlib.runtime.deploy import Plans, generations
from joinlib.runtime.instance import InstanceSpec

Offsets = Mapping[str, Optional[int]]
Tree = Union[TreeProgram, PartitionedTrees, SharedTrees]


def nodes_of(specs: Sequence[InstanceSpec]) -> list[str]:
    """Every node any plan generation places something at (stream sites first)."""
    out: dict[str, None] = {}
    for spec in specs:
        out.update(dict.fromkeys(spec.ir.nodes))
    return list(out)


def _base(query: Query, plan: Any, run: str, offsets: Offsets, nodes: Sequence[str]) -> PlanMessage:
    return PlanMessage(query_to_dict(query), plan, run, dict(offsets), tuple(nodes), ())


@dataclass(frozen=True)
class Generations:
    """A plan, and the later plans taking over at given head epochs (``--switch``): ``gens`` is
    ``((0, plan), (first epoch, plan), ...)``."""

    gens: tuple[tuple[int, Plan], ...]

    @classmethod
    def of(cls, plans: Union[Plan, Sequence[tuple[int, Plan]]]) -> Generations:
        return cls(((0, plans),) if isinstance(plans, Plan) else tuple(sorted(plans, key=lambda g: g[0])))

    @property
    def plans(self) -> Plans:
        """What the runtime deploys: the plan, or its generations if it has switches."""
        return self.gens[0][1] if len(self.gens) == 1 else list(self.gens)

    @property
    def first(self) -> Plan:
        """The plan of generation 0."""
        return self.gens[0][1]

    def message(self, query: Query, run: str, offsets: Offsets) -> PlanMessage:
        """The plan message of a run: its first plan, the later generations as ``switches``, every node."""
        specs = generations(query, self.plans)
        msg = _base(query, specs[0].ir.plan.to_json(), run, offsets, nodes_of(specs))
        return replace(msg, switches=tuple(Switch(s.start, s.ir.plan.to_json()) for s in specs[1:]))


@dataclass(frozen=True)
class PartitionedRun:
    """A plan per partition of the join values (PMJoin, ``--plan pmjoin...``), sent whole."""

    plan: Partitioned

    @property
    def plans(self) -> Plans:
        return self.plan

    @property
    def first(self) -> Partitioned:
        """What the run starts with (the plan metric's): the partitioned plan."""
        return self.plan

    def message(self, query: Query, run: str, offsets: Offsets) -> PlanMessage:
        return _base(query, self.plan.to_json(), run, offsets, nodes_of(generations(query, self.plan)))


@dataclass(frozen=True)
class AdaptiveRun:
    """Re-planned while running (``--plan adaptive[:cnu|:dnu]``, docs/adaptive.md): the configuration and the
    plan it starts with (Algorithm 1's); ``jep``: that plan as a join execution plan (a compiled message's)."""

    config: AdaptiveConfig
    initial: Plan
    jep: Optional[JEP] = field(default=None, compare=False)

    @property
    def plans(self) -> Plans:
        return self.initial

    @property
    def first(self) -> Plan:
        return self.initial

    def start(self) -> JEP:
        """The join execution plan the nodes start with (the compiled message's: it checked it)."""
        return self.jep if self.jep is not None else from_plan(self.initial)

    def message(self, query: Query, run: str, offsets: Offsets) -> PlanMessage:
        """No switches (the nodes choose them), every site of the query as a node (any may take part in a
        later plan), and the configuration the nodes re-plan with."""
        msg = _base(query, self.initial.to_json(), run, offsets, query.sites)
        return replace(msg, adaptive=config_json(self.config))


@dataclass(frozen=True)
class TreesRun:
    """MJoin trees (``--plan mjoin...``): a tree program, a tree per partition, or several queries' trees
    sharing operators; ``only`` / ``external``: a single tree's message that runs one operator
    (:func:`joinlib.control.compile.tree_scope`)."""

    plan: Tree
    only: Optional[int] = None
    external: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    @property
    def programs(self) -> list[TreeProgram]:
        return list(getattr(self.plan, "programs", [self.plan]))

    @property
    def shared(self) -> bool:
        return isinstance(self.plan, SharedTrees)

    def nodes(self) -> list[str]:
        """Every site of the run's operators (stream sites first)."""
        out: dict[str, None] = {}
        for op in deploy(self.programs, share=self.shared).ops:
            out.update(dict.fromkeys(op.sites))
        return list(out)

    def message(self, query: Query, run: str, offsets: Offsets) -> PlanMessage:
        return _base(query, self.plan.to_json(), run, offsets, self.nodes())


RunPlan = Union[Generations, PartitionedRun, AdaptiveRun, TreesRun]
#: the run plans the runtime deploys as plan instances (:func:`joinlib.runtime.deploy.generations`): all but trees
Deployable = Union[Generations, PartitionedRun, AdaptiveRun]


def as_run_plan(plan: Union[Plans, Tree, RunPlan], adaptive: Optional[AdaptiveConfig] = None) -> RunPlan:
    """The run plan of what :func:`joinlib.node.cluster.run_cluster` is given: a plan, generations, a
    partitioned plan or a tree, and (an adaptive run) its configuration; ClusterError for what cannot be."""
    if isinstance(plan, (Generations, PartitionedRun, AdaptiveRun, TreesRun)):
        return plan
    if isinstance(plan, (TreeProgram, PartitionedTrees, SharedTrees)):
        if adaptive is not None:
            raise ClusterError("an MJoin tree is not adaptive")
        return TreesRun(plan)
    if isinstance(plan, Partitioned):
        if adaptive is not None:
            raise ClusterError("a partitioned plan is not adaptive")
        return PartitionedRun(plan)
    gens = Generations.of(plan)
    if adaptive is None:
        return gens
    if len(gens.gens) > 1:
        raise ClusterError("an adaptive run starts with one plan and chooses its switches itself")
    return AdaptiveRun(adaptive, gens.first)


def next_generation(replaced: PlanMessage) -> int:
    """The first plan generation of a run replacing ``replaced``: after its last static switch, or -- an adaptive run,
    which chooses its own -- at the block after its own (:func:`generation_cap`)."""
    base = replaced.replan.gen if replaced.replan is not None else 0
    if replaced.adaptive is not None:
        return generation_cap(base) + 1
    return base + 1 + len(replaced.switches or ())
