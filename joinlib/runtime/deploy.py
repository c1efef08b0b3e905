"""What each node runs: a plan's generations (or partitions) as instance specs, and the hosts that install them.

Why here and not in the simulator: the embedded engine and the node services on Kafka deploy plans the same
way, so this is runtime code that neither transport owns.
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence, Union

from joinlib.errors import PlanError
from joinlib.model import Query
from joinlib.plan.ir import Topology, lower
from joinlib.plan.logical import Plan
from joinlib.plan.partitioned import Partitioned
from joinlib.runtime.host import Host
from joinlib.runtime.instance import InstanceSpec
from joinlib.runtime.sensor import TotalsSensor
from joinlib.runtime.sink import Sink
from joinlib.state.base import WindowStore

#: a plan, generations of plans: (first head epoch, plan), the first at epoch 0, or a plan per
#: partition (:class:`~joinlib.plan.partitioned.Partitioned`)
Plans = Union[Plan, Sequence[tuple[int, Plan]], Partitioned]


def generations(query: Query, plans: Plans, topology: Optional[Topology] = None) -> list[InstanceSpec]:
    """The instances of a run: one per plan generation, each serving the head epochs from its
    first epoch to the epoch before the next generation's (a partitioned plan: one per partition)."""
    topo = topology or Topology.of(query)
    if isinstance(plans, Partitioned):
        return [InstanceSpec(lower(query, p, topo), 0, 0, None, part) for part, p in enumerate(plans.plans)]
    gens = [(0, plans)] if isinstance(plans, Plan) else sorted(plans, key=lambda g: g[0])
    if not gens or gens[0][0] != 0:
        raise PlanError("the first plan generation must start at epoch 0")
    for (a, _), (b, _) in zip(gens, gens[1:], strict=False):
        if a == b:
            raise PlanError(f"two plan switches at the same epoch {a}")
    specs = []
    for g, (start, plan) in enumerate(gens):
        stop = gens[g + 1][0] - 1 if g + 1 < len(gens) else None
        specs.append(InstanceSpec(lower(query, plan, topo), g, start, stop))
    return specs


def hosts_for(specs: Sequence[InstanceSpec], transport: Any, sink: Sink, sensor: TotalsSensor,
              store_factory: Optional[Callable[[str], WindowStore]] = None) -> dict[str, Host]:
    """One host per node that any generation uses, every instance installed where it runs."""
    nodes: dict[str, None] = {}
    for spec in specs:
        nodes.update(dict.fromkeys(spec.ir.nodes))
    hosts = {n: Host(n, transport, sink, sensor=sensor, store_factory=store_factory) for n in nodes}
    for spec in specs:
        for n, host in hosts.items():
            if n in spec.ir.nodes or any(s.site == n for s in spec.ir.query.streams):
                host.install(spec)
    return hosts


def plan_json(specs: Sequence[InstanceSpec], plan: Optional[Plans] = None) -> Any:
    """The report's ``plan``: the plan's JSON, per generation its first epoch and plan, or the
    partitioned plan's JSON."""
    if isinstance(plan, Partitioned):
        return plan.to_json()
    if len(specs) == 1:
        return specs[0].ir.plan.to_json()
    return [{"from_epoch": s.start, "plan": s.ir.plan.to_json()} for s in specs]
