"""What an MJoin operator makes at its node, and how it reaches its readers and its queries' sinks.

Why here and not in the simulator: embedded tree runs (:mod:`joinlib.sim.tree_engine`) and node services on
Kafka (:mod:`joinlib.node.tree_service`) hand a tree operator's results over with this same code.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any, Optional

from joinlib.mjoin.derived import Deployment, Named, Operator, alive, base_row, components, derived_tuple, leaf_tuple
from joinlib.model import Tup
from joinlib.protocol.messages import InstanceKey
from joinlib.runtime.host import Host
from joinlib.runtime.sink import Group, Sink


class OpOutput:
    """What one operator of a deployment makes, at its node: its results, flattened and checked
    (:func:`~joinlib.mjoin.derived.alive`); a root's go to ``out`` as results of its queries (rows of the base
    query, the query named in the instance key); the others' are kept per head epoch until
    :meth:`handover` gives them, numbered, to the operators that read them. Embedded runs feed those to
    the readers' hosts (:class:`TreeSink`); node services publish them on Kafka
    (:mod:`joinlib.node.tree_service`)."""

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


class Fanout(Sink):
    """Each query's results to its own sink (results carry their query's name)."""

    def __init__(self, sinks: Mapping[str, Sink]) -> None:
        self.sinks = sinks

    def emit(self, inst: InstanceKey, head_pos: int, pos: int, groups: list[Group], now: float) -> None:
        self.sinks[inst[0]].emit(inst, head_pos, pos, groups, now)
