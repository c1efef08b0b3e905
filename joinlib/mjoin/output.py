"""What an MJoin operator makes at its node, and how it reaches its readers and its queries' sinks.

Why here and not in the simulator: embedded tree runs (:mod:`joinlib.sim.tree_engine`) and node services on
Kafka (:mod:`joinlib.node.tree_service`) hand a tree operator's results over with this same code.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from operator import le
from typing import Any, Optional

from joinlib.mjoin.derived import Deployment, Named, Operator, alive, base_row, components, derived_tuple, leaf_tuple
from joinlib.model import Query, Tup
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
        if self.publishes:
            self._emit_each(pos, groups, now)
            return
        for q in self.roots:
            out: dict[tuple[int, int], list[Group]] = {}
            rest: list[Group] = []
            moved: dict[int, Tup] = {}   # id of a tuple at pos -> it at its position in q (one object per emit)
            for row, tups in groups:
                self._factorise(q, pos, row, tups, out, rest, moved)
            for (head_pos, slot), groups_ in sorted(out.items()):
                self.out.emit((q.name, self.part, 0), head_pos, slot, groups_, now)
            if rest:
                self._emit_each(pos, rest, now, (q,))

    def _factorise(self, q: Query, pos: int, row: tuple[Any, ...], tups: Sequence[Tup],
                   out: dict[tuple[int, int], list[Group]], rest: list[Group], moved: dict[int, Tup]) -> None:
        """The results of one group of a root that hands nothing over, as groups of ``q``'s rows: the row's
        part is decoded, checked and placed once.  A result is alive when its latest tuple is within every
        component's window (max ts <= min (ts + window)); its head is the row's latest component unless the
        tuple at ``pos`` is later (or as late and first in ``q``'s order).  With the tuples in ts order (a
        window's are), those headed by the row's component and alive are one slice: ts in [head - w, head),
        ties included when the row's head comes first -- a group of ``q`` without a Python step per result.
        The others, and derived tuples at ``pos``, go to ``rest`` (one result each)."""
        names = self.op.parts
        if len(tups) < 2 or len(names[pos]) != 1:
            rest.append((row, tups))
            return
        ts = [t.ts for t in tups]
        if not all(map(le, ts, ts[1:])):
            rest.append((row, tups))
            return
        comps = components(self.op, row[:pos] + row[pos + 1:])
        name = names[pos][0]
        w, at = self.windows[name], q.stream(name).pos
        placed = base_row(q, comps)
        head = max(placed, key=_ts)
        top = bisect_right(ts, head.ts) if at > head.pos else bisect_left(ts, head.ts)
        if top < len(ts):
            rest.append((row, tups[top:]))      # headed by the tuple at pos, or dead
        bound = min(t.ts + self.windows[n] for n, t in comps)
        if head.ts > bound or (self.floor is not None and head.ts < self.floor):
            return
        shared = tups[bisect_left(ts, head.ts - w, 0, top):top]
        if not shared:
            return
        if shared[0].pos != at:   # a group's tuples are of one stream
            shared = [moved.get(id(t)) or moved.setdefault(id(t), Tup(at, t.id, t.ts, t.seq, t.key, t.rest))
                      for t in shared]
        base: list[Optional[Tup]] = list(placed)
        base.insert(at, None)
        out.setdefault((head.pos, at), []).append((tuple(base), shared))

    def _emit_each(self, pos: int, groups: list[Group], now: float, roots: Optional[Sequence[Query]] = None) -> None:
        """Every result on its own: flattened, checked, kept for the readers if published, and one group per
        result for each root query (by head stream)."""
        results: list[Named] = []
        for row, tups in groups:
            for t in tups:
                comps = components(self.op, row[:pos] + (t,) + row[pos + 1:])
                if alive(self.windows, comps) and (self.floor is None or max(c.ts for _, c in comps) >= self.floor):
                    results.append(comps)  # else a derived window's min-size over-approximation let it through
        if self.publishes:
            for comps in results:
                self.buffer[max(c.ts for _, c in comps) // self.tau].append(comps)
        for q in self.roots if roots is None else roots:  # one emit per head stream
            by_head: defaultdict[int, list[Group]] = defaultdict(list)
            for comps in results:
                row = base_row(q, comps)
                head = max(row, key=_ts)
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


def _ts(t: Tup) -> int:
    return t.ts


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
