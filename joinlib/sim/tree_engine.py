"""Embedded mode for MJoin trees: every operator of a tree on one simulated network, at once.

Each MJoin runs as its operator query (:mod:`joinlib.mjoin.derived`) with ``central`` at its node, in the
same hosts as the others. A child's results become its parent's derived-stream tuples at the child's
node *while the run goes on*: a head epoch's results are handed over once every sequence of the
child has produced all of that epoch's (their last steps are done with it), sorted and numbered, with
the watermark of the epoch's end. So a parent's window on a derived stream fills epoch by epoch, as
a base stream's does, and the parent's insert lane waits for the child exactly as it waits for a
late source. Bytes are the simulator's, per link and kind, for every operator together.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Callable, Optional

from joinlib.errors import PlanError
from joinlib.mjoin.derived import (
    Deployment,
    Operator,
    TreeProgram,
    deploy,
    leaf_tuple,
)
from joinlib.mjoin.output import Fanout, OpOutput, results_through
from joinlib.model import Query, Tup
from joinlib.plan.logical import central
from joinlib.protocol.messages import Envelope, InstanceKey
from joinlib.runtime.deploy import generations, hosts_for
from joinlib.runtime.host import Host
from joinlib.runtime.report import Report
from joinlib.runtime.sensor import TotalsSensor
from joinlib.runtime.sink import Group, LatencyTap, Sink
from joinlib.sim.engine import _report, drive, sim_network
from joinlib.state.base import WindowStore


class TreeSink(Sink):
    """Takes every operator's results (one :class:`OpOutput` each, on one simulated network)."""

    def __init__(self, dep: Deployment, out: Sink) -> None:
        self.dep = dep
        self.index = {op.name: i for i, op in enumerate(dep.ops)}
        self.outputs = [OpOutput(dep, i, out) for i in range(len(dep.ops))]

    def emit(self, inst: InstanceKey, head_pos: int, pos: int, groups: list[Group], now: float) -> None:
        self.outputs[self.index[inst[0]]].emit(pos, groups, now)

    def pump(self, i: int, hosts: dict[str, Host]) -> bool:
        """Hand operator ``i``'s finished head epochs to the windows that read it; True if any."""
        op, output = self.dep.ops[i], self.outputs[i]
        ready = output.handover(results_through(op, hosts.values()))
        for e, feeds in ready:
            for reader, slot, tups in feeds:
                hosts[op.node].feed(reader.name, slot, tups, watermark=(e + 1) * output.tau)
        return bool(ready)


def run_tree(program: TreeProgram, streams: dict[str, list[Tup]], sink: Sink, *,
             size_of: Optional[Callable[[Envelope], int]] = None, roundtrip: bool = False,
             progress: bool = False, store_factory: Optional[Callable[[str], WindowStore]] = None) -> Report:
    """Run every operator of ``program`` over ``streams`` on one simulated network; the tree's
    results (base-query rows) go to ``sink``."""
    name = program.base.name
    rep = run_deployment(deploy([program]), {name: streams}, {name: sink}, size_of=size_of, roundtrip=roundtrip,
                         progress=progress, store_factory=store_factory)
    rep.query, rep.plan = name, program.to_json()
    return rep


def run_deployment(dep: Deployment, streams: Mapping[str, Mapping[str, list[Tup]]], sinks: Mapping[str, Sink], *,
                   size_of: Optional[Callable[[Envelope], int]] = None, roundtrip: bool = False,
                   progress: bool = False, store_factory: Optional[Callable[[str], WindowStore]] = None) -> Report:
    """Run the operators of several queries' trees (each shared operator once) over ``streams``
    (per query, per stream) on one simulated network; each query's results go to ``sinks[query]``.
    The report counts every query's results and every operator's bytes."""
    first = _one_network(dep)
    specs = [s for op in dep.ops for s in generations(op.query, central(op.query, op.node))]
    tau = first.execution.interval_ms
    net = sim_network(first, size_of, roundtrip)
    sensor = TotalsSensor()
    tap = LatencyTap(Fanout(sinks))
    tsink = TreeSink(dep, tap)
    hosts = hosts_for(specs, net, tsink, sensor, store_factory)
    all_ts = sorted({(n, t.id, t.ts) for q in dep.queries for n, tups in streams[q.name].items() for t in tups})
    last = max(ts for *_, ts in all_ts) // tau if all_ts else 0
    leaves = {op.name: _feed(op, streams[_reader(dep, i).name], hosts) for i, op in enumerate(dep.ops)}
    for h in hosts.values():
        for op in dep.ops:
            h.set_last(op.name, last)
    producers = [i for i in range(len(dep.ops)) if dep.consumers[i]]

    def advance(h: Host, at: float) -> None:
        for name, names in leaves.items():
            h.advance(name, int(at), names)

    def settle(at: float) -> None:  # derived streams move on as their producers finish epochs
        while any([tsink.pump(i, hosts) for i in producers]):
            for h in hosts.values():
                h.run(at)
    wall = drive(net, hosts, last, tau, advance, after=settle, progress=progress,
                 name="+".join(q.name for q in dep.queries))
    rep = _report(first, specs, net, sensor, tap, wall, [ts for *_, ts in all_ts])
    rep.query = "+".join(q.name for q in dep.queries)
    rep.plan, rep.switches = deployment_json(dep), []
    return rep


def _one_network(dep: Deployment) -> Query:
    """The first query; the others must agree with it on the network and the execution parameters."""
    first = dep.queries[0]
    for q in dep.queries[1:]:
        if replace(q.network, nodes=()) != replace(first.network, nodes=()) or q.execution != first.execution:
            raise PlanError(f"queries {first.name} and {q.name} run on one network with one batch interval: "
                            "their network (latency, bandwidth, links) and execution sections must agree")
    return first


def _reader(dep: Deployment, i: int) -> Query:
    """A query whose tree uses operator ``i`` (its leaves' tuples come from that query's data)."""
    while not dep.roots[i]:
        i = dep.consumers[i][0][0]
    return dep.roots[i][0]


def deployment_json(dep: Deployment) -> dict[str, Any]:
    """The operators of a run, for reports: node, inputs, the streams they feed and who uses them."""
    return {"operators": [{"operator": op.name, "node": op.node, "inputs": list(op.query.names),
                           "feeds": [f"{dep.ops[p].name}.{slot}" for p, slot in dep.consumers[i]],
                           "results_of": [q.name for q in dep.roots[i]], "used_by": list(dep.owners(i))}
                          for i, op in enumerate(dep.ops)]}


def _feed(op: Operator, streams: Mapping[str, list[Tup]], hosts: dict[str, Host]) -> frozenset[str]:
    """The base streams ``op`` reads, to their sites' hosts; returns their names (the streams whose
    watermark moves with time: a derived one moves when its child hands an epoch over)."""
    names = []
    for s in op.query.streams:
        if not op.is_derived(s.name):
            hosts[s.site].feed(op.name, s.name, [leaf_tuple(t, s.pos) for t in streams.get(s.name, [])])
            names.append(s.name)
    return frozenset(names)
