"""One plan run by a node service (:class:`PlanRun`), start to ``done`` or ``stop``: the embedded mode's
:class:`~joinlib.runtime.host.Host` on Kafka, with its consumer, producer, windows, checkpoints and
metrics (:mod:`.node_service` says how the node finds plans and runs them).

A run is composed of parts: its inputs (:class:`~.run_inputs.RunInputs`), its status reporter
(:class:`~.run_report.RunReport`), its checkpoints (:class:`~.recovery.NodeCheckpoints`) and the strategies
of :mod:`.run_parts` that a scaled-out partition (:mod:`.scale_out`) and an MJoin operator
(:mod:`.tree_service`) pass in: which part of the plan it runs, how it reads its source batches, where its
results go.
"""
from __future__ import annotations

import cProfile
import os
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from joinlib.adapters.kafka import NODE_LINGER_MS, KafkaTransport, Producing, consume, make_producer, now_ms
from joinlib.adapters.redis_outage import no_retry
from joinlib.control.compile import Compiled
from joinlib.control.messages import DoneMessage, EndMessage, PlanMessage, StopMessage
from joinlib.errors import FencedError
from joinlib.node.adaptive_service import AdaptivePart
from joinlib.node.control import ControlLog, ControlRecord, decode_control_message, publish
from joinlib.node.recovery import NodeCheckpoints, checkpoints_for, clear_state, next_checkpoint
from joinlib.node.run_inputs import RunInputs
from joinlib.node.run_parts import NodeOwner, PlanOutput, RunScope, SourceReader
from joinlib.node.run_report import Counters, QuerySensor, RunReport, StatusLatencySampler, TeeSensor
from joinlib.node.sources import LiveInputs, live_streams
from joinlib.pmjoin.value_monitor import ValueMonitor
from joinlib.runtime.host import Host
from joinlib.settings import redact_url

STATUS_EVERY_S = 2.0
GAUGES_EVERY_S = 1.0
CHECKPOINT_EVERY_S = 1.0
#: messages a run's loop takes from its consumer per round (what has arrived, at most this many).  A round also
#: ticks the sources, runs the host and polls the producer; in a backlog's drain fewer, larger rounds went faster
#: and cost less CPU (routers workload, 300 s backlog: 2,000 -> 24.6k events/s, 10,000 -> 28.6k, docs/results.md);
#: at live rates a round takes what is there, so this changes nothing
READ_BATCH = 10_000


@contextmanager
def thread_profile(site: str, query: str) -> Iterator[None]:
    """``JOINLIB_PROFILE_DIR`` set: the run's loop under cProfile with the thread's CPU clock, written to
    ``<dir>/<query>-<site>.prof`` when it ends (``python -m pstats``).  Why the thread's CPU clock: on a busy
    machine a sampling profiler counts the time a runnable thread waits for a core (after each produce, poll or
    lock) as the function's own, and wall-clock timers do too; this counts what the loop spent."""
    out = os.environ.get("JOINLIB_PROFILE_DIR")
    if not out:
        yield
        return
    prof = cProfile.Profile(time.thread_time)
    prof.enable()
    try:
        yield
    finally:
        prof.disable()
        Path(out).mkdir(parents=True, exist_ok=True)
        prof.dump_stats(str(Path(out) / f"{query}-{site}.prof"))


def info_line(prefix: str, msg: str) -> None:
    print(f"[{prefix}] {msg}", file=sys.stderr, flush=True)


def default_store_factory(redis_url: Optional[str], namespace: str, log: Callable[[str], None]) -> Any:
    """Window stores in Redis (``joinlib.adapters.redis_store``) if ``redis_url``, else in memory."""
    if not redis_url:
        return None
    try:
        from joinlib.adapters.redis_store import redis_store_factory  # heavy optional dependency: redis
    except ImportError:
        log(f"REDIS_URL={redact_url(redis_url)} is set but joinlib.adapters.redis_store is not available; "
            "keeping windows in memory")
        return None
    # no retries: a retried window script may run twice; a Redis outage restarts the run from its
    # checkpoint instead (joinlib.adapters.redis_outage, NodeService._execute)
    return redis_store_factory(redis_url, namespace, retry=no_retry())


def run_namespace(query: str, run: Optional[str], part: Optional[int] = None) -> str:
    """The Redis namespace of the windows and checkpoints of ``query``'s run ``run`` (of its partition ``part``)."""
    return f"joinlib:{query}:{run or 'norun'}" + ("" if part is None else f":p{part}")


class PlanRun:
    """One plan (all its generations) executed by a node service (``svc``), start to ``done`` (a finite
    replay) or to ``stop`` (a live query); ``scope``, ``reader`` and ``output``: see :mod:`.run_parts`;
    ``halt`` (default: the service's stop): set, the run checkpoints (if ``save_on_halt``) and returns."""

    def __init__(self, svc: NodeOwner, rec: ControlRecord, compiled: Compiled, consumer: Any, admin: Any,
                 ctl: ControlLog, *, scope: Optional[RunScope] = None, reader: Optional[SourceReader] = None,
                 output: Optional[PlanOutput] = None, halt: Optional[threading.Event] = None) -> None:
        self.svc, self.rec, self.consumer, self.admin, self.ctl = svc, rec, consumer, admin, ctl
        self.site = svc.site
        self.q, self.specs, self.partitioned = compiled.query, list(compiled.specs), compiled.partitioned
        self.msg = rec.plan
        self.run_id = self.msg.run
        self.headers = [("run", self.run_id.encode())] if self.run_id else None
        self.scope, self.reader = scope or RunScope(), reader or SourceReader()
        self.output = output or PlanOutput()
        self.ctl_query = self.scope.ctl_query or self.q.name   # the query whose end and stop messages apply
        self.live_name = self.scope.live_name or self.q.name   # whose dead letters and idle advances
        self.halt = halt or svc.stop
        self.save_on_halt = True
        self.ready = threading.Event()   # set once its inputs are assigned
        self.finished: Optional[DoneMessage] = None   # the done message, once published
        self.origin = self.msg.origin_ms
        self.counters = Counters()
        self.made: list[Any] = []
        self.live: Optional[LiveInputs] = None
        self.stopped = False
        self.fenced: Optional[FencedError] = None   # set when another instance took the work over
        self.resumed_from: Optional[dict[str, int]] = None
        self.startup_s: Optional[float] = None   # execute() to inputs assigned (a resume: restoring the checkpoint)
        self.sensor = QuerySensor(svc.sensor, self.q.name)
        # a live query's per-value rates, reported for re-partitioning (docs/pmjoin.md "Live statistics")
        self.values = ValueMonitor.of(self.q, self.site) if self.msg.live is not None else None
        ad = compiled.adaptive  # re-planned while running (docs/adaptive.md): the node around the host
        self.adaptive = None if ad is None else AdaptivePart(self, ad.config, ad.start(), compiled.gen_base,
                                                              compiled.first_epoch)
        self.inputs = RunInputs(self)
        self.report = RunReport(self)
        self._t0, self._cpu0 = time.perf_counter(), time.process_time()

    @property
    def out_query(self) -> Any:
        """The query whose out topic the results go to (a tree operator's: its tree query's)."""
        return self.output.out_query or self.q

    @property
    def tps(self) -> list[Any]:
        """Every partition the run reads, as assigned (checkpoints save their positions)."""
        return self.inputs.tps

    # ------------------------------------------------------------------ setup
    def execute(self) -> None:
        svc, q = self.svc, self.q
        self._t_exec = time.monotonic()
        svc.sensor.set_plan(q.name, self.partitioned or self.specs[-1].ir.plan)
        # idempotent: a send retried across a broker restart is neither duplicated nor reordered (result
        # batches are skipped by number after a restart, which needs the producer's order in out.<query>)
        self.out = Producing(make_producer(svc.bootstrap, **{"delivery.report.only.error": True,
                                                              "enable.idempotence": True, "acks": "all",
                                                              "linger.ms": NODE_LINGER_MS}))
        self.transport = KafkaTransport(self.out, q.name, sensor=svc.sensor, run=self.run_id,
                                        by_part=self.scope.part is not None)
        self.sink: Any = self.output.sink(self)
        self.tap = StatusLatencySampler(self.sink, self.origin)
        self.factory: Any = svc.store_factory or default_store_factory(svc.redis_url, self._namespace(), svc.log)
        self.ckpt: Optional[NodeCheckpoints] = checkpoints_for(self, self.factory)
        saved = self.ckpt.load() if self.ckpt else None  # before the host adds its indexes to the stores
        self.host = self._host(self.factory)
        self.live = self._live()
        offsets = self.msg.positions()
        resumed = self.ckpt.resume(saved, self) if self.ckpt and saved else None
        if resumed is not None:
            offsets = resumed
            if self.adaptive is not None:   # a fresh host from the checkpoint: the ends read apply to it too
                self._ends(self.host)
        else:
            offsets = self.reader.start(self, offsets)
            if self.adaptive is not None:
                self.adaptive.resume_log("start")   # a predecessor that crashed before its first checkpoint
        try:
            self._start(offsets, resumed is not None)
            with thread_profile(self.site, q.name):
                self._loop()
        except FencedError as e:
            self._fenced(e)
        finally:
            if self.live is not None:
                self.live.close()

    def _namespace(self) -> str:
        """The Redis namespace of this run's windows and checkpoints."""
        return run_namespace(self.q.name, self.run_id, self.scope.part)

    def _host(self, factory: Any) -> Host:
        sensor = TeeSensor(self.sensor, self.counters.totals)

        def store_factory(name: str) -> Any:
            store = factory(name)
            self.made.append(store)
            return store
        if self.adaptive is not None:  # the adaptive node installs generation 0 and every later one
            host = self.adaptive.host(sensor, self.tap, store_factory if factory else None)
        else:
            host = Host(self.site, self.transport, self.tap, store_factory=store_factory if factory else None,
                        sensor=sensor)
            for spec in self.specs:
                if self.scope.part is not None and spec.part != self.scope.part:
                    continue
                if self.site in spec.ir.nodes or any(s.site == self.site for s in spec.ir.query.streams):
                    host.install(spec)
            if self.partitioned is not None and self.scope.part is None:  # source tuples to their partitions
                self.partitioned.route(self.q, host)
        self._ends(host)
        return host

    def _ends(self, host: Host) -> None:
        """The plan's last epoch, and ends already read (after the plan), apply to ``host``."""
        if self.msg.last_epoch is not None:
            host.set_last(self.q.name, int(self.msg.last_epoch))
        for end in self.ctl.ends_of(self.ctl_query, self.run_id):
            host.set_last(self.q.name, end.last_epoch)
        succ = self.ctl.successor(self.rec)
        if succ is not None:
            self._replaced(succ.plan, host)

    def _replaced(self, succ: PlanMessage, host: Host) -> None:
        """Run ``succ.run`` takes this one over from ``succ.replan.switch_ms`` on (``joinlib replan``, docs/live.md
        "Replan"): this run serves the head epochs before it and then ends by itself; the dead letters of records
        from the handover offsets on are the new run's."""
        assert succ.replan is not None
        last = succ.replan.switch_epoch(self.origin, self.q.execution.interval_ms) - 1
        ahead = max((w.lane.epoch - 1 for (q, _, _), w in host.windows.items() if q == self.q.name), default=-1)
        if ahead > last:   # the switch came too late here: results of the epochs between may come from both runs
            self.svc.log(f"error: {self.q.name}: run {self.run_id} has taken in epoch {ahead} already, past the "
                         f"switch to run {succ.run} at epoch {last + 1}: results of epochs {last + 1}..{ahead} may "
                         f"be written by both runs (replan again with a larger --margin; docs/live.md 'Replan')")
        host.set_last(self.q.name, last)
        if self.live is not None:
            self.live.own_dead_letters(until=succ.replan.handover_at())
        self.svc.log(f"{self.q.name}: run {succ.run} takes run {self.run_id} over from epoch {last + 1}; "
                     f"this run ends after epoch {last}")

    def _live(self) -> Optional[LiveInputs]:
        """The live sources of the home streams (None if they are all replayed SourceBatch topics, or re-keyed
        into them: :mod:`.rekey`)."""
        if self.scope.rekeyed or not live_streams(self.q, self.site):   # re-keyed: read as replayed sources
            return None
        starts = self.msg.live.starts() if self.msg.live is not None else {}
        live = LiveInputs(self.q, self.site, self.origin, starts, name=self.live_name, bootstrap=self.svc.bootstrap,
                          out=self.out, run_id=self.run_id, sensor=self.svc.sensor, log=self.svc.log,
                          on_naive=self.inputs.naive, now=now_ms())
        if self.msg.replan is not None:   # a replanned run: the dead letters before the handover are the old run's
            live.own_dead_letters(since=self.msg.replan.handover_at())
        succ = self.ctl.successor(self.rec)   # replaced already (a restart): those from the handover on are not
        if succ is not None and succ.plan.replan is not None:
            live.own_dead_letters(until=succ.plan.replan.handover_at())
        return live

    def _start(self, offsets: dict[tuple[str, int], int], resumed: bool) -> None:
        """Read the inputs from ``offsets``; with checkpoints, skip what a predecessor delivered already."""
        svc, q = self.svc, self.q
        self.inputs.assign(offsets)
        self.resumed_from = svc.resumed_from = self.report.epochs() if resumed else None
        if resumed:
            svc.sensor.on_resume(self.site, q.name)
        if self.ckpt:
            self.ckpt.prepare(self, offsets, resumed)
        lanes = sum(len(i.lanes) for i in self.host.instances.values())
        kind = "live" if self.live is not None else "replayed"
        self.startup_s = round(time.monotonic() - self._t_exec, 3)
        svc.log(f"running query {q.name}{self.label()} (run {self.run_id}, {kind}): {len(self.inputs.homes)} home "
                f"stream(s), {len(self.host.instances)} plan generation(s), {lanes} lane(s) here")
        self.ready.set()

    def label(self) -> str:
        return "" if self.scope.part is None else f" partition {self.scope.part}"

    # ------------------------------------------------------------------ the loop
    def _ended(self) -> bool:
        """The host has run its last epoch (an adaptive node: and every node is idle, nothing in flight)."""
        if self.adaptive is not None:
            return bool(self.adaptive.over(self._publish_done))
        return self.host.finished

    def _next(self) -> list[Any]:
        """The next messages to handle (an adaptive node with checkpoints logs their order, and a restarted
        one hands the logged ones over in that order first)."""
        if self.adaptive is not None:
            return list(self.adaptive.inputs(self._read))
        return self._read()

    def _read(self) -> list[Any]:
        """What has arrived; when nothing has, the producer's lingering messages go out before the node waits
        (:data:`~joinlib.adapters.kafka.NODE_LINGER_MS`): a busy node sends a round's messages together, an idle
        one at once."""
        msgs = consume(self.consumer, READ_BATCH, 0)
        if msgs:
            return msgs
        self.out.push()
        return consume(self.consumer, READ_BATCH, 0.05)

    def _step(self, now: float) -> None:
        if self.adaptive is not None:
            self.adaptive.step(now)
        else:
            self.host.run(now)
            self.inputs.pace()
        self.output.after_step(self)

    def _loop(self) -> None:
        svc, live = self.svc, self.live
        t_start, cpu_start = time.perf_counter(), time.process_time()
        self._t0, self._cpu0 = t_start, cpu_start
        next_status = next_gauges = time.monotonic()
        every = svc.checkpoint_every_s
        next_ckpt = next_status + every if self.ckpt and every > 0 else float("inf")
        while not self.stopped and not self._ended():
            if self.halt.is_set():
                self._halted()
                return
            if self.ckpt is not None:   # still the owner of this work: before a round that produces
                self.ckpt.fence.check_often("producing")
            now = now_ms()
            self.inputs.handle_all(self._next(), now)
            if live is not None:
                self._live_step(live, now)
            self._step(now)
            self.out.poll()
            t = time.monotonic()
            if t >= next_ckpt and (self.adaptive is None or self.adaptive.may_checkpoint):
                cpu = time.thread_time()
                self._checkpoint()
                next_ckpt = next_checkpoint(time.monotonic(), every, time.thread_time() - cpu)
            if t >= next_gauges:
                next_gauges = t + GAUGES_EVERY_S
                self.report.gauges()
            if t >= next_status:
                next_status = t + STATUS_EVERY_S
                publish(self.out, self.q.name, self.report.status(), flush=False)
        self._finish(time.perf_counter() - t_start, time.process_time() - cpu_start)

    def _live_step(self, live: LiveInputs, now: float) -> None:
        """The live sources' idle advances, then their released tuples and watermarks to the host -- an adaptive
        node's held at its fence, and while it hands logged iterations over again, no new advance and the logged
        watermarks (:meth:`~.adaptive_service.AdaptivePart.drain_caps`)."""
        observe = self.values.add if self.values is not None else None
        ad = self.adaptive
        if ad is None:
            live.tick(now, self.consumer)
            live.drain(self.host, observe)
            return
        if not ad.replaying:
            live.tick(now, self.consumer)
        ad.fed(live.drain(ad, observe, ad.drain_caps()))

    def _halted(self) -> None:
        """Stopped before finishing: checkpointed (if ``save_on_halt``), the producer flushed."""
        if self.ckpt and self.save_on_halt:
            self._checkpoint()
        saved = " (checkpoint saved)" if self.ckpt and self.save_on_halt else ""
        self.svc.log(f"{self.q.name}{self.label()}: stopped before finishing{saved}")
        self.out.flush(5)

    def _fenced(self, e: FencedError) -> None:
        """Another instance owns this work now (a higher owner epoch: :mod:`joinlib.adapters.redis_fence`): drop
        what the producer still queues and end without a checkpoint and without ``done``."""
        self.fenced = e
        left = self.out.purge()
        self.svc.log(f"{self.q.name}{self.label()}: fenced, stopping without writing ({left} queued message(s) "
                     f"dropped): {e}")

    def _checkpoint(self) -> None:
        assert self.ckpt is not None
        if self.live is not None:
            self.live.settle()   # the records held for a pending idle advance: handled before positions are read
        self.ckpt.take(self, self.out, self.svc.sensor)

    def on_control(self, m: Any) -> None:
        """A message of ``control`` or ``status`` read during the run: an end or stop of its query, a done of its
        run."""
        r = decode_control_message(m, self.svc.reject_control)
        if r is None:
            return
        self.ctl.add(r)
        if r.query != self.ctl_query:
            return
        msg = r.message
        if isinstance(msg, EndMessage) and msg.applies_to(self.run_id):
            self.host.set_last(self.q.name, msg.last_epoch)
        elif isinstance(msg, PlanMessage) and msg.replan is not None and msg.replan.replaces == self.run_id:
            self._replaced(msg, self.host)   # an adaptive run too: its node ends as at an 'end
        elif isinstance(msg, StopMessage) and self.ctl.is_stopped(self.rec):
            self.stopped = True
        elif isinstance(msg, DoneMessage) and self.adaptive is not None and msg.run == self.run_id:
            self.adaptive.on_done(msg)

    # ------------------------------------------------------------------ the end
    def _publish_done(self) -> DoneMessage:
        """An adaptive node's ``done`` while it serves the protocol on (see :meth:`_ended`)."""
        done = self.report.done(time.perf_counter() - self._t0, time.process_time() - self._cpu0)
        publish(self.out, self.q.name, done)
        return done

    def _finish(self, wall: float, cpu: float) -> None:
        svc, q, site = self.svc, self.q, self.site
        self.out.flush()
        self.report.gauges()
        done = self.finished = self.report.done(wall, cpu)
        publish(self.out, q.name, done)
        clear_state(self)
        self.ctl.done.add((self.run_id, site))
        svc.finished_runs.append(done)
        svc.log(f"{q.name}{self.label()}: {'stopped' if self.stopped else 'done'}: {self.sink.count} results, "
                f"{done.sent_bytes} bytes sent in {wall:.2f}s")
