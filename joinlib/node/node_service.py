"""The node service (``python -m services.node``): the embedded mode's
:class:`~joinlib.runtime.host.Host`, unchanged, on Kafka.

One process (or thread) per site.  It

1. reads ``control`` from the beginning and takes the latest ``plan`` of its query (any query
   with a stream or an operator at its site if none is named) that it has not finished yet,
   waiting for one if there is none;
2. lowers the plan and its generations (``switches``: later plans taking over at given epochs)
   and installs every generation that places anything here in a Host, with a
   :class:`KafkaTransport` (node-to-node messages on ``node.<query>.<dst>.from.<src>``), a
   :class:`KafkaResultSink` (``out.<query>``), a window store factory (Redis when ``REDIS_URL``
   is set, else memory) and a :class:`PrometheusSensor`;
3. consumes ``src.<query>.<stream>`` of its home streams (``SourceBatch``: tuples + watermark ->
   ``Host.feed``), ``node.<query>.<site>.from.<peer>`` (-> ``Host.on_message`` with the wall-clock receive
   time and the ``sent_ms`` header) and ``control`` (``end`` -> ``Host.set_last``), calling
   ``Host.run(now)`` after each batch of messages;
4. when the host is ``finished``: flushes, publishes ``done`` (per link and kind message and byte
   counts, results, ...) and exits -- or, with ``serve``, waits for the next plan.

A query whose streams have ``json`` or ``avro`` sources is *live*: the node reads the users' topics
of its home streams (:mod:`joinlib.node.sources`: watermarks, idle advances, dead letters) and
the run lasts until a ``stop`` control message for it.  With ``serve`` a node runs every query with
a stream or an operator at its site at once, each in its own thread with its own host, consumer,
producer and checkpoints (nothing is shared between queries but the process and its metrics).

``now`` is wall-clock ms (``time.time()``): lateness (delay > max_delay) is real network delay,
and a result's ``emit_ms`` is the wall-clock time it was produced.
"""
from __future__ import annotations

import os
import socket
import threading
import time
import traceback
import uuid
from typing import Any, Callable, Optional

from joinlib.adapters.kafka import (
    CONTROL_TOPIC,
    check_reachable,
    consume,
    ensure_topics,
    make_admin,
    make_consumer,
    make_watcher,
    report_topics,
)
from joinlib.adapters.prometheus import PrometheusSensor, serve_metrics
from joinlib.adapters.redis_outage import REDIS_WAIT_S, redis_outage, wait_for_redis
from joinlib.adapters.rejections import Rejections
from joinlib.control.compile import Compiled
from joinlib.control.run_plan import TreesRun
from joinlib.errors import ClusterError, PlanError, QueryError
from joinlib.node.control import ControlLog, ControlRecord, decode_control_message, read_control_to_end
from joinlib.node.node_run import CHECKPOINT_EVERY_S, PlanRun, info_line
from joinlib.node.scale_out import run_scaled_plan
from joinlib.node.tree_service import run_tree_plan
from joinlib.settings import NodeSettings


class NodeService:
    """One site's node on Kafka; :meth:`run` returns an exit status (0 = finished cleanly).

    ``registry``: a prometheus CollectorRegistry (one per node when several share a process);
    ``metrics_port``: serve it over HTTP (None: don't); ``stop``: an Event that ends the service;
    ``store_factory``: overrides the Redis/memory choice (a ``name -> WindowStore`` callable);
    ``shared``: one of several instances of the site, which runs only scaled-out plans (:mod:`.scale_out`);
    ``settings``: what the environment says (the entry point's, read once; default: read now).
    """

    def __init__(self, site: str, bootstrap: str, *, query: Optional[str] = None, run: Optional[str] = None,
                 redis_url: Optional[str] = None, metrics_port: Optional[int] = None, serve: bool = False,
                 registry: Any = None, stop: Optional[threading.Event] = None, plan_timeout_s: Optional[float] = None,
                 connect_timeout_s: float = 15.0, store_factory: Any = None, quiet: bool = False,
                 checkpoint_every_s: float = CHECKPOINT_EVERY_S, shared: bool = False,
                 settings: Optional[NodeSettings] = None) -> None:
        self.site, self.bootstrap, self.query_name, self.run_id = site, bootstrap, query, run
        self.redis_url, self.metrics_port, self.serve = redis_url, metrics_port, serve
        self.registry = registry
        self.stop = stop or threading.Event()
        self.plan_timeout_s, self.connect_timeout_s = plan_timeout_s, connect_timeout_s
        self.store_factory = store_factory
        self.quiet = quiet
        self.checkpoint_every_s = checkpoint_every_s
        self.shared = shared   # one of several instances of the site: scaled-out plans only
        self.settings = settings if settings is not None else NodeSettings.from_env()
        self.resumed_from: Optional[dict[str, Any]] = None  # where the last run resumed (epochs per lane)
        self.sensor: Any = None
        self.finished_runs: list[dict[str, Any]] = []   # the done payloads published
        # which instance of the site this is (a scaled-out plan's partitions say who ran them)
        self.instance = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:4]}"

    def log(self, msg: str) -> None:
        if not self.quiet:
            info_line(f"node {self.site}", msg)

    def log_error(self, msg: str) -> None:
        """Errors are logged even when ``quiet``."""
        info_line(f"node {self.site}", msg)

    # ------------------------------------------------------------------ main loop
    def run(self) -> int:
        check_reachable(self.bootstrap, self.connect_timeout_s)
        self.sensor = PrometheusSensor(self.registry)
        self.rejections = Rejections(self.site, self.sensor, self.log_error)
        self.reject_control = self.rejections.control(CONTROL_TOPIC)
        if self.metrics_port is not None:
            serve_metrics(self.metrics_port, self.registry)
            self.log(f"metrics on :{self.metrics_port}/metrics")
        admin = make_admin(self.bootstrap)
        ensure_topics(admin, [CONTROL_TOPIC, *report_topics([self.site])])   # the ends, its own reports
        consumer = make_watcher(self.bootstrap, f"joinlib-node-{self.site}-{uuid.uuid4().hex[:8]}")
        try:
            ctl = read_control_to_end(consumer, ControlLog.of([self.site]), reject=self.reject_control)
            if self.serve and self.run_id is None:
                return self._serve(consumer, admin, ctl)
            while not self.stop.is_set():
                rec = self._wait_for_plan(consumer, ctl)
                if rec is None:
                    return 0 if self.stop.is_set() else 3
                try:
                    self.execute_plan(rec, admin, ctl)
                except (QueryError, PlanError) as e:
                    if not self.serve:
                        raise
                    self.log(f"error: skipping the plan at control offset {rec.offset}: {e}")
                    ctl.done.add((rec.run, self.site))
                    continue
                if not self.serve or self.run_id is not None:
                    return 0
            return 0
        finally:
            consumer.close()

    def execute_plan(self, rec: ControlRecord, admin: Any, ctl: ControlLog) -> None:
        """Run the plan of ``rec`` here to its end: an MJoin tree's operators (:mod:`.tree_service`), the
        partitions of a scaled-out plan this instance owns (:mod:`.scale_out`), or the plan and its
        generations; a plan that does not compile is a QueryError or PlanError."""
        if self.shared and not rec.plan.scale_out:
            raise PlanError(f"this node is one of several instances of {self.site} (--shared): it runs only "
                            "scaled-out plans ('joinlib run|submit ... --plan pmjoin... --scale-out'), not plan "
                            f"{rec.query} (each instance would run it whole)")
        compiled = rec.compile()
        if isinstance(compiled.plan, TreesRun):
            run_tree_plan(self, rec, compiled, admin, ctl)
        elif rec.plan.scale_out:   # the site's partitions shared by its instances (joinlib.node.scale_out)
            run_scaled_plan(self, rec, compiled, admin, ctl)
        else:
            self._execute(rec, compiled, admin, ctl)

    def _accept(self, ctl: ControlLog) -> Callable[[ControlRecord], bool]:
        def accept(rec: ControlRecord) -> bool:
            if self.query_name is not None and rec.query != self.query_name:
                return False
            if self.run_id is not None and rec.run != self.run_id:
                return False
            if (rec.run, self.site) in ctl.done or ctl.is_stopped(rec):
                return False
            return self.site in rec.plan.node_set()
        return accept

    # ------------------------------------------------------------------ serving several queries
    def _serve(self, consumer: Any, admin: Any, ctl: ControlLog) -> int:
        """Run the latest plan of every query that involves this site, each in its own thread, until
        the service is stopped; a query's next plan starts when its current run has ended."""
        runs: dict[Any, _RunThread] = {}   # by run: a replan's two runs of a query overlap (docs/live.md "Replan")
        accept = self._accept(ctl)
        consumer.assign(ctl.assignment())
        self.log("serving every query with a stream or an operator here")
        try:
            while not self.stop.is_set():
                for key, t in list(runs.items()):
                    if not t.is_alive():
                        del runs[key]
                        ctl.done.add((t.run_id, self.site))
                for rec in _wanted(ctl, accept):
                    key = rec.run or rec.offset
                    busy = [t for t in runs.values() if t.rec.query == rec.query]
                    if key not in runs and all(t.run_id == _replaced_run(rec) for t in busy):
                        runs[key] = t = _RunThread(self, rec, admin, ctl.copy())
                        t.start()
                for m in consume(consumer, 1000, 0.2):
                    r = decode_control_message(m, self.reject_control)
                    if r is not None:
                        ctl.add(r)
        finally:
            self.stop.set()
            for t in runs.values():
                t.join(60)
        return 0

    def _wait_for_plan(self, consumer: Any, ctl: ControlLog) -> Optional[ControlRecord]:
        accept = self._accept(ctl)
        rec = ctl.latest_plan(accept)
        if rec is not None:
            return rec
        what = f"query {self.query_name}" if self.query_name else f"a query with a stream or operator at {self.site}"
        self.log(f"waiting for a plan of {what} on '{CONTROL_TOPIC}'")
        consumer.assign(ctl.assignment())
        deadline = None if self.plan_timeout_s is None else time.monotonic() + self.plan_timeout_s
        while not self.stop.is_set():
            for m in consume(consumer, 1000, 0.2):
                r = decode_control_message(m, self.reject_control)
                if r is None:
                    continue
                ctl.add(r)
                if r.kind == "plan" and accept(r):
                    return r
            if deadline is not None and time.monotonic() > deadline:
                raise ClusterError(f"node {self.site}: no plan of {what} on '{CONTROL_TOPIC}' "
                                   f"after {self.plan_timeout_s:.0f}s")
        return None

    def _execute(self, rec: ControlRecord, compiled: Compiled, admin: Any,
                 ctl: ControlLog) -> None:
        """Run a plan to its end; when Redis fails under it, wait for Redis and start the plan over from
        the last checkpoint, in this process (:mod:`joinlib.adapters.redis_outage` says why)."""
        while True:
            # a fresh consumer per run: re-assigning a consumer that already fetched
            # stalls its first fetches of the new partitions for ~0.6 s (librdkafka 2.x)
            consumer = make_consumer(self.bootstrap, f"joinlib-node-{self.site}-{uuid.uuid4().hex[:8]}")
            run = PlanRun(self, rec, compiled, consumer, admin, ctl)
            try:
                run.execute()
                return
            except Exception as e:
                cause = redis_outage(e)
                if cause is None or getattr(run, "ckpt", None) is None:
                    raise
                if not self._after_outage(run, cause):
                    return
            finally:
                consumer.close()

    def _after_outage(self, run: PlanRun, cause: BaseException) -> bool:
        """Abandon ``run`` like a crash -- but deliver what it produced first, so that the next run's
        count of delivered result batches is final -- and wait for Redis to answer again.  False: the
        service was stopped meanwhile."""
        self.log(f"{run.q.name}: Redis went away ({type(cause).__name__}); the run restarts from its "
                 "last checkpoint when Redis answers")
        run.out.drain(self.log)
        t0 = time.monotonic()
        if not wait_for_redis(run.factory.client, timeout_s=REDIS_WAIT_S, stop=self.stop, log=self.log):
            if self.stop.is_set():
                return False
            raise ClusterError(f"node {self.site}: Redis did not answer for {REDIS_WAIT_S:.0f} s; restart the "
                               "node once it is back (it resumes from its checkpoint)")
        self.log(f"{run.q.name}: Redis answers again after {time.monotonic() - t0:.1f} s; resuming")
        return True



def _replaced_run(rec: ControlRecord) -> Optional[str]:
    """The run that the run of plan ``rec`` takes over (``joinlib replan``), if any."""
    return rec.plan.replan.replaces if rec.plan.replan is not None else None


def _wanted(ctl: ControlLog, accept: Callable[[ControlRecord], bool]) -> list[ControlRecord]:
    """The plans a serving node runs: the latest accepted plan of each query and, while a replan switches it, the
    plan of the run it replaces (until that run is done here), in control order."""
    latest = ctl.latest_plans(accept)
    before = [p for p in (ctl.predecessor(r) for r in latest) if p is not None and accept(p)]
    return sorted(before + latest, key=lambda r: r.offset)


class _RunThread(threading.Thread):
    """One plan of a serving node, in its own thread; a failure is logged and ends only this run."""

    def __init__(self, svc: NodeService, rec: ControlRecord, admin: Any, ctl: ControlLog) -> None:
        super().__init__(name=f"run-{rec.query}", daemon=True)
        self.svc, self.rec, self.admin, self.ctl = svc, rec, admin, ctl
        self.run_id = rec.run
        self.error: Optional[BaseException] = None

    def run(self) -> None:
        svc = self.svc
        try:
            svc.execute_plan(self.rec, self.admin, self.ctl)
        except Exception as e:  # one query's failure must not take the others down
            self.error = e
            svc.log(f"error: query {self.rec.query} (run {self.run_id}) failed: {type(e).__name__}: {e}")
            if not isinstance(e, (QueryError, PlanError, ClusterError)):
                traceback.print_exc()

