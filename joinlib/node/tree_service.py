"""MJoin trees on Kafka: the embedded tree runs (:mod:`joinlib.sim.tree_engine`) as node services.

A plan message whose plan is ``{"mjoin_tree": ...}`` (:func:`joinlib.control.compile.compile_trees`) is
lowered by every node the same way (:func:`joinlib.mjoin.derived.lower_tree`). Each node then runs, in a
thread of its own, every operator query (``<query>.mj<i>``, ``central`` at the operator's node) that
has an input or the operator at its site: an ordinary :class:`~.node_run.PlanRun` with its own consumer,
producer, node topics (``node.<query>.mj<i>.<r>.from.<s>``) and windows, and three differences:

* its inputs are read from the tree query's source topics (``src.<query>.<stream>``, the tuples moved
  to their position in the operator query) or, for a live stream, its own topic (one operator reads
  each base stream, so one ingest decides its records; dead letters and idle advances go to the tree
  query's ``dlq`` and ``wm`` topics) and, for a derived stream, from its producer's
  ``derived.<producer>``;
* at the operator's node its results go through :class:`~joinlib.mjoin.output.OpOutput`: checked on
  the exact window condition, a root's as rows of the tree query to ``out.<query>``, the others'
  handed over per head epoch, once every sequence has finished it, as ``SourceBatch`` messages on
  ``derived.<operator>`` with the epoch's end as the watermark. A derived stream is
  born at its producer's node, so that topic is read at the same site: a derived tuple crosses the
  network only as the reader's plan ships it, as in the simulator;
* the tree query's ``end`` applies to it.

With Redis windows each operator run checkpoints like any run (its own namespace), and its checkpoint
also keeps its :class:`~joinlib.mjoin.output.OpOutput` (results not handed over yet, the numbering). A
killed node's successor resumes every operator from its checkpoint: the root's result batches already in
``out.<query>`` are skipped (numbered per head stream and tree partition), and a reader drops a derived
batch at or below its window's watermark -- one its producer handed over again after resuming from an
earlier checkpoint than the reader's. An operator that is the root of several queries' trees (one
operator for identical trees) keeps no checkpoints.

A plan message may run one operator of its tree (``only`` / ``external``,
:func:`joinlib.control.check.tree_scope`): an inner operator whose results are published for readers
deployed apart, or a root reading derived streams that other deployments publish -- with their run ids,
each tuple moved from their origin to this run's (docs/multiquery.md "Shared operators"), those made within a
window before this run's origin kept as its derived window's history (they join its tuples after the origin).
With Redis windows an operator published that way saves, with each checkpoint, the offset of its derived topic
the checkpoint corresponds to, and a new reader starts there rather than at offset 0 (:mod:`.derived_start`).

The node publishes ``status`` for the tree query once every operator it runs reads its inputs, and
one ``done`` with its operators' counts merged, so the cluster runner treats a tree run as any run.
"""
from __future__ import annotations

import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Optional

from joinlib.adapters.kafka import (
    KafkaResultSink,
    Producing,
    ensure_topics,
    flow_topics,
    make_consumer,
    make_producer,
    source_topic,
)
from joinlib.control.compile import Compiled
from joinlib.control.messages import DoneMessage, StatusMessage, merge_done
from joinlib.control.run_plan import Generations, TreesRun
from joinlib.errors import ClusterError
from joinlib.mjoin.derived import Deployment, TreeProgram, deploy, leaf_tuple, moved
from joinlib.mjoin.marks import DerivedMarks
from joinlib.mjoin.output import Fanout, OpOutput, results_through
from joinlib.mjoin.tree_plans import SharedTrees
from joinlib.model import Query, Stream, Tup
from joinlib.node.control import ControlLog, ControlRecord, publish
from joinlib.node.derived_start import next_marks, reader_mark
from joinlib.node.node_run import STATUS_EVERY_S, PlanRun
from joinlib.node.run_parts import NodeOwner, PlanOutput, RunScope, SourceReader
from joinlib.plan.logical import central
from joinlib.protocol import records
from joinlib.runtime.sink import Group, Sink
from joinlib.source_spec import SourceSpec


@dataclass(frozen=True)
class TreeRun:
    """What the nodes of a tree run share: the query ``base`` whose source topics feed it, the operators
    of its tree (of the tree of each partition; of several queries' trees, shared), each operator's
    partition, per base stream how its tuples are routed to partitions (None: to every one; empty: no
    partitions), and per root's query the query whose ``out`` topic takes its results."""

    base: Query
    dep: Deployment
    part: Mapping[str, int]
    router: Mapping[str, Optional[Callable[[Tup], int]]]
    results: Mapping[str, Query]
    external: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    publish: bool = False


def tree_run(query: Query, plan: Any) -> TreeRun:
    """The :class:`TreeRun` of ``plan``: a :class:`~joinlib.mjoin.derived.TreeProgram`,
    :class:`~joinlib.mjoin.tree_plans.PartitionedTrees` or :class:`~joinlib.mjoin.tree_plans.SharedTrees`
    over ``query``."""
    programs = list(getattr(plan, "programs", [plan]))
    split = getattr(plan, "split", None)
    shared = isinstance(plan, SharedTrees)
    part = {op.name: p for p, prog in enumerate(programs) for op in prog.ops} if split is not None else {}
    return TreeRun(query, deploy(programs, share=shared), part, split.router(query) if split is not None else {},
                   {p.base.name: p.base if shared else query for p in programs})


def tree_deployment(query: Query, trees: TreesRun) -> TreeRun:
    """The tree run of a compiled tree plan message: the whole deployment, or the one operator it names."""
    if trees.only is None:
        return tree_run(query, trees.plan)
    assert isinstance(trees.plan, TreeProgram)
    return one_operator(query, trees.plan, trees.only, trees.external)


def one_operator(query: Query, prog: TreeProgram, i: int, external: Mapping[str, Mapping[str, Any]]) -> TreeRun:
    """Operator ``i`` of ``prog`` run on its own, its derived inputs read from the operators ``external``
    names: the root (its results are the query's), or an inner operator whose results are published as its
    derived stream for whoever reads it (docs/multiquery.md "Shared operators")."""
    full = deploy([prog])
    root = i == len(prog.ops) - 1
    dep = Deployment((full.ops[i],), ((),), ((query,) if root else (),), (full.windows[i],), (query,))
    return TreeRun(query, dep, {}, {}, {query.name: query}, external, publish=not root)


def derived_topic(producer: str) -> str:
    """Where operator query ``producer`` publishes its derived stream: one topic, whoever reads it (each
    reader moves the tuples to its own position), so a shared operator publishes once."""
    return f"derived.{producer}"


def operator_query(tr: TreeRun, i: int) -> Query:
    """Operator ``i``'s query with the topic of each input as its source: a derived stream's producer's
    ``derived.<producer>`` (``sourcebatch``), a base stream's live source, or the tree query's replayed
    ``src.<query>.<stream>``."""
    op, base = tr.dep.ops[i], tr.base
    producers = {slot: tr.dep.ops[j].name for j, cons in enumerate(tr.dep.consumers) for p, slot in cons if p == i}
    producers.update({slot: str(e["op"]) for slot, e in tr.external.items()})

    def source(s: Any) -> SourceSpec:
        if op.is_derived(s.name):
            return SourceSpec(derived_topic(producers[s.name]), format="sourcebatch")
        src = base.stream(s.name).source
        return src if src is not None and src.live else SourceSpec(source_topic(base, s.name), format="sourcebatch")
    return replace(op.query, streams=tuple(replace(s, source=source(s)) for s in op.query.streams))


def tree_flows(tr: TreeRun) -> list[tuple[str, list[str]]]:
    """Each operator's name with the nodes its flows join (a flow topic per ordered pair, :func:`flow_topics`;
    what ``infra.kafka_acls`` grants per site)."""
    return [(op.name, list(dict.fromkeys([*op.query.nodes, *op.sites]))) for op in tr.dep.ops]


def tree_topics(tr: TreeRun) -> list[str]:
    """Every topic a tree run uses besides its query's own (``src``, ``out``, ``control``)."""
    out: list[str] = []
    for i, (name, nodes) in enumerate(tree_flows(tr)):
        out += [derived_topic(name)] if tr.dep.consumers[i] else []
        out += flow_topics(name, nodes)
    return out


class _OpSink(Sink):
    """An operator run's sink: its :class:`OpOutput`; ``count`` is what went to ``out.<query>``.  A
    checkpoint keeps (and a resumed run restores) ``count`` and ``batches``, and ``skip`` says which result
    batches were delivered: those of the one query whose root this operator is (none for an inner one)."""

    def __init__(self, output: OpOutput, outs: list[KafkaResultSink]) -> None:
        self.output, self.outs = output, outs

    @property
    def count(self) -> int:
        return sum(s.count for s in self.outs)

    @count.setter
    def count(self, n: int) -> None:
        for s in self.outs[:1]:
            s.count = n

    @property
    def batches(self) -> dict[tuple[int, int, int], int]:
        return self.outs[0].batches if self.outs else {}

    @batches.setter
    def batches(self, b: dict[tuple[int, int, int], int]) -> None:
        for s in self.outs[:1]:
            s.batches = b

    @property
    def skip(self) -> dict[tuple[int, int, int], int]:
        return self.outs[0].skip if self.outs else {}

    @skip.setter
    def skip(self, b: dict[tuple[int, int, int], int]) -> None:
        for s in self.outs[:1]:
            s.skip = b

    def emit(self, inst: Any, head_pos: int, pos: int, groups: list[Group], now: float) -> None:
        self.output.emit(pos, groups, now)


class OperatorPart(SourceReader, PlanOutput):
    """Operator ``i`` of a tree run at this site: how its run reads its inputs (the tree query's source batches
    moved to their position in the operator query, routed to its partition; derived batches from their
    producer) and where its results go (:class:`OpOutput`: the roots' to their queries' ``out`` topics, an inner
    operator's handed over as its derived stream).  It counts no naive baseline of source batches (that is the
    tree query's, not an operator's)."""

    naive = False

    def __init__(self, tr: TreeRun, i: int, origin: int) -> None:
        self.tr, self.i, self.op = tr, i, tr.dep.ops[i]
        self.tree_part = tr.part.get(self.op.name, 0)   # the partition of a partitioned tree
        # the query of each tree whose root this is, by tree name (its results go to that query's out topic)
        self.results = {b.name: tr.results[b.name] for b in tr.dep.roots[i]}
        # a shared operator's derived stream, read from its run, moved from its origin to ours (docs/multiquery.md)
        self.shift = {slot: int(e["origin_ms"]) - origin for slot, e in tr.external.items()}
        self.keep_from = -max(tr.dep.windows[i].values())   # older derived tuples (our time) meet none of ours
        self.output: Optional[OpOutput] = None
        self.marks: Optional[DerivedMarks] = None   # a shared operator's, at its node (joinlib.mjoin.marks)

    # ------------------------------------------------------------------ output
    def sink(self, run: Any) -> Sink:
        # the results of each query whose root this is, to its out topic (a partition's: the tree query's)
        results = self.results
        outs = {q.name: KafkaResultSink(run.out, q, run.site, headers=run.headers) for q in results.values()}
        self.output = OpOutput(self.tr.dep, self.i, Fanout({n: outs[q.name] for n, q in results.items()}),
                               self.tree_part, publish=self.tr.publish, floor=0 if self.tr.external else None)
        if len(outs) == 1:
            self.out_query = next(iter(results.values()))
        if self.op.node == run.site:
            ensure_topics(run.admin, [derived_topic(self.op.name)] if self.output.publishes else [])
        return _OpSink(self.output, list(outs.values()))

    def keeps_checkpoints(self) -> bool:
        """Not when this operator is the root of several queries' trees: a checkpoint follows the delivered
        results of one out topic."""
        return len({q.name for q in self.results.values()}) <= 1

    def checkpointed(self, run: Any) -> Optional[bytes]:
        """A shared operator at its node: the mark of this checkpoint, published with it for new readers."""
        if not self.tr.publish or self.op.node != run.site:
            return None
        assert self.output is not None
        self.marks = next_marks(self.marks, run.consumer, derived_topic(self.op.name), self.output.next_epoch,
                                self.output.tau)
        return self.marks.to_json() if self.marks.marks else None

    def state(self) -> Any:
        assert self.output is not None
        st = self.output.state()
        return st if self.marks is None else {**st, "marks": self.marks.to_json().decode()}

    def restore(self, st: Any) -> None:
        assert self.output is not None
        self.output.load(st)
        if st.get("marks") is not None:
            self.marks = DerivedMarks.from_json(st["marks"])

    def after_step(self, run: Any) -> None:
        """At the operator's node: hand the epochs every sequence has finished over to the readers."""
        if self.op.node != run.site:
            return
        assert self.output is not None
        tau = self.output.tau
        for e, feeds in self.output.handover(results_through(self.op, [run.host]), every_reader=False):
            _, slot, tups = feeds[0]   # the derived stream has one name in every reader, which re-positions it
            batch = records.SourceBatch(slot, tups, (e + 1) * tau)
            run.out.produce(derived_topic(self.op.name), records.encode_source_batch(batch), slot.encode(), run.headers)

    # ------------------------------------------------------------------ inputs
    def start(self, run: Any, offsets: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        """A new reader of a shared operator, where it reads the derived topic: from the operator's mark that fits
        it (:func:`reader_mark`), else from the beginning.  Either way its derived window keeps the tuples from its
        horizon on, those before its origin as the window's history (``HomeWindow.open_history``): its tuples after
        the origin join them, and its watermark starts there (the batches below a mark would have left it there)."""
        out = dict(offsets)
        for slot, e in self.tr.external.items():
            topic, node = derived_topic(str(e["op"])), run.q.stream(slot).site
            if node != run.site:
                continue
            # the derived tuples before our origin that ours may join enter our first epoch (docs/multiquery.md)
            run.host.windows[(run.q.name, 0, slot)].open_history(self.keep_from)
            if (topic, 0) in out:
                continue
            start = reader_mark(run, topic, e, node, self.keep_from - self.shift[slot])
            if start is not None:
                out[(topic, 0)], watermark = start
                run.host.feed(run.q.name, slot, [], watermark + self.shift[slot])
        return out

    def tuples(self, run: Any, b: Any, stream: Stream) -> Optional[list[Tup]]:
        if b.stream != stream.name:
            return None
        derived = self.op.is_derived(stream.name)
        if derived and self.watermark(run, b, stream) <= run.host.windows[(run.q.name, 0, stream.name)].watermark:
            return []   # an epoch its producer handed over again, resumed from an earlier checkpoint than ours
        if stream.name in self.shift:
            return self._moved(b, stream)
        route = self.tr.router.get(stream.name) if not derived else None
        return [leaf_tuple(t, stream.pos) for t in b.tuples if route is None or route(t) == self.tree_part]

    def watermark(self, run: Any, b: Any, stream: Stream) -> int:
        return int(b.watermark) + self.shift.get(stream.name, 0)

    def _moved(self, b: Any, stream: Stream) -> list[Tup]:
        """A shared operator's derived tuples in this run's event time, those too old to meet any tuple of
        ours (older than our origin by more than their components' largest window) dropped here, at the
        producer's node, so that they never ship."""
        return moved(b.tuples, stream.pos, self.shift[stream.name], self.keep_from)


def operator_run(svc: NodeOwner, rec: ControlRecord, tr: TreeRun, i: int, consumer: Any, admin: Any,
                 ctl: ControlLog) -> PlanRun:
    """The run of operator ``i`` of ``tr`` at this site: its operator query (``central`` at its node), with the
    tree query's ``end`` and ``stop``, ``dlq`` and ``wm`` topics, and a shared operator's derived stream read
    from its producer's run."""
    q, op = operator_query(tr, i), tr.dep.ops[i]
    compiled = Compiled(q, Generations(((0, central(q, op.node)),))).lowered()
    part = OperatorPart(tr, i, rec.plan.origin_ms)
    scope = RunScope(ctl_query=rec.query, live_name=rec.query,
                     topic_runs={derived_topic(str(e["op"])): str(e["run"]) for e in tr.external.values()})
    return PlanRun(svc, rec, compiled, consumer, admin, ctl, scope=scope, reader=part, output=part)


class _OpThread(threading.Thread):
    def __init__(self, svc: NodeOwner, rec: ControlRecord, tr: TreeRun, i: int, admin: Any,
                 ctl: ControlLog) -> None:
        super().__init__(name=f"op-{tr.dep.ops[i].name}", daemon=True)
        self.svc, self.rec, self.tr, self.i, self.admin, self.ctl = svc, rec, tr, i, admin, ctl
        self.run_: Optional[PlanRun] = None
        self.error: Optional[BaseException] = None

    def run(self) -> None:
        consumer = make_consumer(self.svc.bootstrap, f"joinlib-node-{self.svc.site}-{uuid.uuid4().hex[:8]}")
        try:
            self.run_ = operator_run(self.svc, self.rec, self.tr, self.i, consumer, self.admin, self.ctl)
            self.run_.execute()
        except BaseException as e:  # reported by run_tree_plan
            self.error = e
        finally:
            consumer.close()

    @property
    def ready(self) -> bool:
        return self.run_ is not None and self.run_.ready.is_set()


def run_tree_plan(svc: NodeOwner, rec: ControlRecord, compiled: Compiled, admin: Any,
                  ctl: ControlLog) -> Optional[DoneMessage]:
    """Run this site's operators of a tree plan message to their end; returns the ``done`` published (None:
    the service was stopped)."""
    assert isinstance(compiled.plan, TreesRun)
    tr = tree_deployment(compiled.query, compiled.plan)
    dep = tr.dep
    run_id, site = rec.run, svc.site
    mine = [i for i in range(len(dep.ops)) if site in dep.ops[i].sites]
    out = Producing(make_producer(svc.bootstrap))
    threads = [_OpThread(svc, rec, tr, i, admin, ctl.copy()) for i in mine]
    svc.log(f"{rec.query}: running {len(mine)} operator(s) of the tree here: "
            + ", ".join(dep.ops[i].name for i in mine))
    t0, cpu0 = time.perf_counter(), time.process_time()
    for t in threads:
        t.start()
    _watch(threads, lambda runs: publish(out, rec.query, tree_status(site, run_id, runs)))
    failed = next((t for t in threads if t.error is not None), None)
    if failed is not None:
        raise ClusterError(f"operator {dep.ops[failed.i].name}: {type(failed.error).__name__}: {failed.error}")
    if svc.stop.is_set():
        return None
    done = merge_done(site, run_id, [t.run_.finished for t in threads if t.run_ is not None and t.run_.finished],
                      time.perf_counter() - t0, time.process_time() - cpu0)
    publish(out, rec.query, done)
    ctl.done.add((run_id, site))
    svc.log(f"{rec.query}: done: {done.results} results, {done.sent_bytes} bytes sent in {done.wall_s:.2f}s")
    return done


def _watch(threads: list[_OpThread], status: Callable[[list[Optional[PlanRun]]], None]) -> None:
    """Until every operator thread has ended: ``status`` every ``STATUS_EVERY_S`` once each reads its inputs;
    when one fails, end the tree's others here (not the node's other queries)."""
    next_status = 0.0
    while any(t.is_alive() for t in threads):
        if any(t.error is not None for t in threads):
            for t in threads:
                if t.run_ is not None:
                    t.run_.stopped = True
            for t in threads:
                t.join(10)
            return
        if all(t.ready or not t.is_alive() for t in threads) and time.monotonic() >= next_status:
            next_status = time.monotonic() + STATUS_EVERY_S
            status([t.run_ for t in threads])
        time.sleep(0.05)


def tree_status(site: str, run_id: Optional[str], runs: list[Optional[PlanRun]]) -> StatusMessage:
    """A site's ``status`` of a tree run: its operators' results so far (those delivered to an out topic),
    bytes sent, inputs and, live, dead letters and source watermarks, added up."""
    live = [r for r in runs if r is not None and r.ready.is_set()]
    inputs: defaultdict[str, int] = defaultdict(int)
    dead: dict[str, dict[str, int]] = {}
    marks: dict[str, int] = {}
    for r in live:
        for (_, s), n in list(r.counters.totals.inputs.items()):   # (another thread's: copied at once)
            inputs[s] += n
        if r.live is not None:
            for stream, per in r.live.stats()["dead_letters"].items():
                dead[stream] = {**dead.get(stream, {}), **per}
            marks.update(r.live.watermarks_ms())
    return StatusMessage(site, run_id, round(time.time() * 1000), sum(r.sink.count for r in live),
                         sum(st.bytes for r in live for st in list(r.transport.stats.values())), dict(inputs),
                         operators=len(runs), live=bool(marks or dead), dead_letters=dead, watermarks_ms=marks)
