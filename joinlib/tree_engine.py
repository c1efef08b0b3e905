"""Embedded mode for MJoin trees: every operator of a tree on one simulated network, at once.

Each MJoin runs as its operator query (:mod:`joinlib.derived`) with ``central`` at its node, in the
same hosts as the others. A child's results become its parent's derived-stream tuples at the child's
node *while the run goes on*: a head epoch's results are handed over once every sequence of the
child has produced all of that epoch's (their last steps are done with it), sorted and numbered, with
the watermark of the epoch's end. So a parent's window on a derived stream fills epoch by epoch, as
a base stream's does, and the parent's insert lane waits for the child exactly as it waits for a
late source. Bytes are the simulator's, per link and kind, for every operator together.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any, Callable, Optional

from .derived import (
    Deployment,
    Named,
    Operator,
    TreeProgram,
    alive,
    base_row,
    components,
    deploy,
    derived_tuple,
    leaf_tuple,
)
from .engine import Report, _report, drive, generations, hosts_for, sim_network
from .errors import PlanError
from .messages import Envelope, InstanceKey
from .model import Query, Tup
from .plan import central
from .runtime.host import Host
from .runtime.sensor import TotalsSensor
from .runtime.sink import Group, LatencyTap, Sink
from .state.base import WindowStore


class OpOutput:
    """What one operator of a deployment makes, at its node: its results, flattened and checked
    (:func:`~joinlib.derived.alive`); a root's go to ``out`` as results of its queries (rows of the base
    query, the query named in the instance key); the others' are kept per head epoch until
    :meth:`handover` gives them, numbered, to the operators that read them. Embedded runs feed those to
    the readers' hosts (:class:`TreeSink`); node services publish them on Kafka
    (:mod:`joinlib.adapters.tree_service`)."""

    def __init__(self, dep: Deployment, i: int, out: Sink, part: int = 0, publish: bool = False,
                 floor: Optional[int] = None) -> None:
        self.op, self.windows, self.out = dep.ops[i], dep.windows[i], out
        self.floor = floor   # results whose latest tuple is older are not ours (a reader of a shared operator)
        self.publish = publish   # hand over every epoch as the derived stream, whoever reads it (a shared operator)
        self.part = part   # a partitioned tree's partition: names the root's results (batches numbered per part)
        self.roots = dep.roots[i]
        self.readers = [(dep.ops[p], slot) for p, slot in dep.consumers[i]]
        self.tau = self.op.query.execution.interval_ms
        self.buffer: defaultdict[int, list[Named]] = defaultdict(list)
        self.next_epoch = 0
        self.seq = 0

    def emit(self, pos: int, groups: list[Group], now: float) -> None:
        results: list[Named] = []
        for row, tups in groups:
            for t in tups:
                comps = components(self.op, row[:pos] + (t,) + row[pos + 1:])
                if alive(self.windows, comps) and (self.floor is None or max(c.ts for _, c in comps) >= self.floor):
                    results.append(comps)  # else a derived window's min-size over-approximation let it through
        if self.publishes:
            for comps in results:
                self.buffer[max(c.ts for _, c in comps) // self.tau].append(comps)
        for q in self.roots:  # one emit per head stream (a node service writes a result batch per emit)
            by_head: defaultdict[int, list[Group]] = defaultdict(list)
            for comps in results:
                row = base_row(q, comps)
                head = max(row, key=lambda c: c.ts)
                by_head[head.pos].append((row, [head]))
            for pos_, groups_ in sorted(by_head.items()):
                self.out.emit((q.name, self.part, 0), pos_, pos_, groups_, now)

    def handover(self, done: int, every_reader: bool = True) -> list[tuple[int, list[tuple[Operator, str, list[Tup]]]]]:
        """The head epochs up to ``done`` not handed over yet (every sequence has made all their results):
        per epoch, the derived tuples for each (reading operator, input stream), in time order.  Each derived
        tuple is made (and its components encoded) once and moved to each reader's input position; without
        ``every_reader`` only the first reader's (a node service publishes one batch that every reader moves)."""
        out: list[tuple[int, list[tuple[Operator, str, list[Tup]]]]] = []
        if not self.publishes:
            return out
        readers = self.readers if every_reader else self.readers[:1]
        if not readers:   # published for readers deployed apart: the derived stream's own name, input 0
            readers = [(self.op, self.op.output)]
        for e in range(self.next_epoch, done + 1):
            batch = sorted(self.buffer.pop(e, []),
                           key=lambda cs: (max(c.ts for _, c in cs), [(n, c.id) for n, c in cs]))
            made = [derived_tuple(cs, 0, self.seq + k) for k, cs in enumerate(batch)]
            feeds = [(reader, slot, [leaf_tuple(t, reader.query.stream(slot).pos if reader is not self.op else 0)
                                     for t in made]) for reader, slot in readers]
            out.append((e, feeds))
            self.seq += len(batch)
        self.next_epoch = max(self.next_epoch, done + 1)
        return out


    @property
    def publishes(self) -> bool:
        """Does it hand its results over as a derived stream (to readers in its deployment, or published)?"""
        return bool(self.readers) or self.publish

    def state(self) -> dict[str, Any]:
        """What a node checkpoints of it (plain data): the results not handed over yet and the numbering."""
        return {"next": self.next_epoch, "seq": self.seq,
                "buffer": [(e, [[(n, _plain(t)) for n, t in comps] for comps in results])
                           for e, results in sorted(self.buffer.items())]}

    def load(self, st: dict[str, Any]) -> None:
        """The inverse of :meth:`state` (a node resuming from its checkpoint)."""
        self.next_epoch, self.seq = int(st["next"]), int(st["seq"])
        self.buffer = defaultdict(list, {int(e): [[(n, Tup(*t)) for n, t in comps] for comps in results]
                                         for e, results in st["buffer"]})


def _plain(t: Tup) -> tuple[Any, ...]:
    return (t.pos, t.id, t.ts, t.seq, tuple(t.key), t.rest)


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


def results_through(op: Operator, hosts: Iterable[Host]) -> int:
    """The last head epoch every sequence of ``op`` has produced all its results for (-1: none)."""
    done: dict[int, int] = {}
    for h in hosts:
        inst = h.instances.get((op.name, 0, 0))
        if inst is not None:
            for seq, e in inst.results_through().items():
                done[seq] = max(done.get(seq, -1), e)
    n = len(op.query.streams)
    return min(done.values()) if len(done) == n else -1


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
    tap = LatencyTap(_Fanout(sinks))
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


class _Fanout(Sink):
    """Each query's results to its own sink (results carry their query's name)."""

    def __init__(self, sinks: Mapping[str, Sink]) -> None:
        self.sinks = sinks

    def emit(self, inst: InstanceKey, head_pos: int, pos: int, groups: list[Group], now: float) -> None:
        self.sinks[inst[0]].emit(inst, head_pos, pos, groups, now)


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
