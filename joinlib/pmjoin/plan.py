"""PMJoin plans: one partition function, D partition groups, an MJoin tree placed on nodes per group.

:func:`plan_pmjoin` partitions the values of a :class:`~.rates.ValueRateModel` with the plan's
function, restricts the model to each group (its substreams, W_i^k = λ_i^k·T_i) and optimises each
group on its own (STREAMJOINOPT by default). A group no known value falls in still needs a plan,
because unseen values are mapped to it at run time: it gets the plan of the unpartitioned streams.

The plan is a value object with a JSON form (``to_json`` / ``from_json``, the shape a runtime would
load: which partition a tuple's value goes to, then which tree routes it) and a text description.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from joinlib.errors import PlanError
from joinlib.plan.partition import PartitionFunction
from joinlib.plan.partition import from_json as partition_from_json
from joinlib.pmjoin.rates import RateModel, ValueRateModel
from joinlib.pmjoin.streamjoinopt import stream_join_opt
from joinlib.pmjoin.tree import Tree, describe, tree_cost
from joinlib.pmjoin.tree import from_json as tree_from_json
from joinlib.pmjoin.tree import to_json as tree_to_json

Optimizer = Callable[[RateModel], Tree]
FORMAT = 1


@dataclass(frozen=True)
class GroupPlan:
    """The plan of partition group ``pid``: its tree, predicted bytes/s, known values, substream rates."""

    pid: int
    tree: Tree
    cost: float
    values: int
    rates: tuple[float, ...]

    def to_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "cost": self.cost, "values": self.values, "rates": list(self.rates),
                "plan": tree_to_json(self.tree)}


@dataclass(frozen=True)
class PMJoinPlan:
    """Partition every stream on ``attribute`` with ``partition``; run ``groups[pid].tree`` for group pid."""

    attribute: str
    streams: tuple[str, ...]
    partition: PartitionFunction
    groups: tuple[GroupPlan, ...]

    def __post_init__(self) -> None:
        if len(self.groups) != self.partition.d or any(g.pid != k for k, g in enumerate(self.groups)):
            raise PlanError(f"a PMJoin plan needs one group plan per partition 0..{self.partition.d - 1}")

    @property
    def d(self) -> int:
        return self.partition.d

    @property
    def cost(self) -> float:
        """Predicted bytes per second shipped between nodes, all groups."""
        return sum(g.cost for g in self.groups)

    def tree_for(self, value: Any) -> Tree:
        """The plan that routes tuples with join value ``value``."""
        return self.groups[self.partition(value)].tree

    def to_json(self) -> dict[str, Any]:
        return {"kind": "pmjoin", "format": FORMAT, "attribute": self.attribute, "streams": list(self.streams),
                "partition": self.partition.to_json(), "cost": self.cost,
                "groups": [g.to_json() for g in self.groups]}

    @classmethod
    def from_json(cls, obj: Any) -> PMJoinPlan:
        if not isinstance(obj, dict) or obj.get("kind") != "pmjoin":
            raise PlanError("not a PMJoin plan: expected a JSON object with \"kind\": \"pmjoin\"")
        if obj.get("format") != FORMAT:
            raise PlanError(f"PMJoin plan format {obj.get('format')!r} is not {FORMAT}: re-create the plan")
        try:
            groups = tuple(GroupPlan(int(g["pid"]), tree_from_json(g["plan"]), float(g["cost"]), int(g["values"]),
                                     tuple(float(r) for r in g["rates"])) for g in obj["groups"])
            return cls(str(obj["attribute"]), tuple(obj["streams"]), partition_from_json(obj["partition"]), groups)
        except (KeyError, TypeError, ValueError) as e:
            raise PlanError(f"malformed PMJoin plan ({e!r})") from None

    def describe(self, unit: str = "bytes/s", limit: int = 20) -> str:
        """Human-readable: the function, the total, then each group's plan and shipments."""
        p = self.partition.to_json()
        extra = {k: v for k, v in p.items() if k in ("seed",)}
        lines = [f"PMJoin on {self.attribute} over {', '.join(self.streams)}: {p['kind']} partition, D = {self.d}"
                 + (f" ({', '.join(f'{k} {v}' for k, v in extra.items())})" if extra else "")
                 + f"; predicted {self.cost:.6g} {unit}"]
        for g in self.groups[:limit]:
            lines.append(f"  group {g.pid}: {g.values} value(s), substream rates "
                         f"{', '.join(f'{r:.4g}' for r in g.rates)}; {g.cost:.6g} {unit}")
            lines.append(f"    {describe(g.tree)}")
        if self.d > limit:
            lines.append(f"  ... {self.d - limit} more group(s)")
        return "\n".join(lines)


def group_columns(model: ValueRateModel, values: Sequence[Any], partition: PartitionFunction) -> list[list[int]]:
    """The value columns of each partition group."""
    if len(values) != model.lam.shape[1]:
        raise PlanError(f"{len(values)} values for a model of {model.lam.shape[1]} value columns")
    cols: list[list[int]] = [[] for _ in range(partition.d)]
    for k, v in enumerate(values):
        cols[partition(v)].append(k)
    return cols


def plan_pmjoin(model: ValueRateModel, values: Sequence[Any], partition: PartitionFunction,
                attribute: str = "key", optimizer: Optimizer = stream_join_opt) -> PMJoinPlan:
    """Optimise every partition group of ``model`` (values in the model's column order)."""
    whole = optimizer(model)
    groups = []
    for pid, cols in enumerate(group_columns(model, values, partition)):
        sub = model.group(cols)
        tree = optimizer(sub) if cols else whole
        rates = tuple(sub.rate(frozenset({i})) for i in range(len(model.streams)))
        groups.append(GroupPlan(pid, tree, tree_cost(tree, sub) if cols else 0.0, len(cols), rates))
    return PMJoinPlan(attribute, tuple(s.name for s in model.streams), partition, tuple(groups))


def group_costs(model: ValueRateModel, columns: list[list[int]], optimizer: Optimizer = stream_join_opt) -> list[float]:
    """Only the predicted bytes/s of each group of :func:`group_columns` (the experiments' fast path:
    no plan objects kept)."""
    out = []
    for cols in columns:
        if cols:
            sub = model.group(cols)
            out.append(tree_cost(optimizer(sub), sub))
        else:
            out.append(0.0)
    return out
