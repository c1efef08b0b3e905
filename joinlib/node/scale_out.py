"""Scale-out within a site: the partitions of a PMJoin plan shared by a site's node instances.

A partitioned plan (:class:`joinlib.plan.partitioned.Partitioned`, D partitions) runs a plan instance per
partition, and the instances of different partitions share nothing: partition p's windows hold only
the tuples the partition function sends to p, and its messages name p.  So partition p of a site is a
unit of work that can live in any process of that site.  With ``"scale_out": true`` in the plan
message (``joinlib run ... --plan pmjoin... --cluster --scale-out``):

* the source topics ``src.<query>.<stream>`` and the node topics ``node.<query>.<site>.from.<peer>`` have D Kafka
  partitions; the replayer writes partition p's tuples to partition p (a stream the plan does not
  partition, to every one), and a node sends partition p's messages to partition p.  A live query's
  streams are written there by each site's re-keyer (:mod:`.rekey`), a role of the site's group: partition
  D of ``parts.<query>.<site>``; the partitions' runs then read them as replayed sources;
* every node instance of a site joins the consumer group ``joinlib-parts.<query>.<site>.<run>`` on
  the topic ``parts.<query>.<site>`` (D partitions, never written): the group's assignment says which
  plan partitions the instance runs.  Any number of instances may serve a site (``python -m
  services.node --site S`` several times, or the Helm chart's ``replicas``);
* an instance runs each plan partition it owns as its own run (:func:`part_run`) -- a
  :class:`~.node_run.PlanRun` with one plan instance, its own consumer of partition p of its topics,
  and its own checkpoints in Redis (namespace ``joinlib:<query>:<run>:p<p>``);
* **hand-over** (the cooperative-sticky assignor moves only the partitions that change owner, and
  gives a revoked partition to its new owner only after the old owner's revoke callback returned):
  the old owner stops the partition's run and checkpoints it (windows, host state, input positions,
  delivered result batches); the new owner's run resumes from that checkpoint, as a restarted node
  does (docs/contracts.md "Restart recovery");
* an instance that dies loses its partitions when its group session expires (``session.timeout.ms``:
  6 s, or ``$JOINLIB_SESSION_TIMEOUT_MS`` down to 1 s where the broker's ``group.min.session.timeout.ms``
  allows it; ``$JOINLIB_GROUP_INSTANCE_ID``: static membership); their new owners resume from the last
  periodic checkpoint and redo the work since: receivers drop the messages sent again, result batches
  already in ``out.<query>`` are skipped.  So no result is lost or duplicated;
* **fencing**: each partition's run claims its work in Redis when it starts (an owner epoch,
  :mod:`joinlib.adapters.redis_fence`); an instance that lost its partitions but still runs (paused past
  its session, then resumed) has its checkpoint saves and window flushes refused by Redis and stops at its
  next round of work, without writing (docs/reliability.md "Fenced instances").

Each partition's run publishes its own ``status`` and ``done`` (with ``part``); the cluster runner
waits for a ``done`` of every (site, partition) and adds them up per site.  An instance leaves the
group once every partition of its site is done.  Redis is required: a partition moves with its
window state only through its checkpoint.
"""
from __future__ import annotations

import threading
import time
import uuid
from dataclasses import replace
from typing import Any, Callable, Optional, Sequence

from joinlib.adapters.kafka import (
    TopicPartition,
    consume,
    ensure_partitions,
    flow_topics,
    make_consumer,
    make_watcher,
    partition_ends,
    source_topic,
)
from joinlib.adapters.redis_client import redis_client
from joinlib.adapters.redis_outage import REDIS_WAIT_S, redis_outage, wait_for_redis
from joinlib.control.compile import Compiled
from joinlib.control.messages import DoneMessage, Naive, PlanMessage, merge_done
from joinlib.errors import ClusterError, PlanError
from joinlib.model import Stream, Tup
from joinlib.node.control import ControlLog, ControlRecord, decode_control_message, read_control_to_end
from joinlib.node.node_run import PlanRun
from joinlib.node.rekey import Rekeyer
from joinlib.node.run_parts import NodeOwner, RunScope, SourceReader
from joinlib.node.sources import live_streams
from joinlib.plan.partitioned import Partitioned
from joinlib.protocol import wire
from joinlib.runtime.deploy import generations


def parts_topic(query: str, site: str) -> str:
    """The topic whose partitions stand for the plan partitions of ``site`` (the group's subscription)."""
    return f"parts.{query}.{site}"


def group_of(query: str, site: str, run: Optional[str]) -> str:
    return f"joinlib-parts.{query}.{site}.{run or 'norun'}"


def part_sites(specs: Sequence[Any]) -> dict[int, list[str]]:
    """Per plan partition, the sites that run something of it (its stream sites and plan nodes)."""
    out: dict[int, list[str]] = {}
    for spec in specs:
        sites = dict.fromkeys(s.site for s in spec.ir.query.streams)
        sites.update(dict.fromkeys(spec.ir.nodes))
        out[spec.part] = list(sites)
    return out


def done_key(site: str, part: Optional[int]) -> str:
    """What a ``status`` or ``done`` stands for: a site, or one partition of it (``r1/p2``)."""
    return site if part is None else f"{site}/p{part}"


class PartReader(SourceReader):
    """The source batches of plan partition ``part``: a batch with a tuple the partition function sends
    elsewhere is not ours (rejected); the naive baseline is not counted here: it prices each source batch
    whole, and a partition sees only its share (the cluster runner prices the batches it replays:
    :func:`naive_of`)."""

    naive = False

    def __init__(self, router: dict[str, Optional[Callable[[Tup], int]]], part: int) -> None:
        self.router, self.part = router, part

    def tuples(self, run: Any, b: Any, stream: Stream) -> Optional[list[Tup]]:
        tups = super().tuples(run, b, stream)
        route = self.router.get(stream.name)
        if tups is None or (route is not None and any(route(t) != self.part for t in tups)):
            return None
        # a batch's tuples are at or above the previous batch's watermark; below it they are copies of tuples
        # fed already -- epochs a re-keyer that lost its role wrote before it found itself fenced
        window = run.host.windows.get((run.q.name, self.part, stream.name))
        if tups and window is not None and tups[0].ts < window.watermark:
            tups = [t for t in tups if t.ts >= window.watermark]
        return tups


def part_run(svc: NodeOwner, rec: ControlRecord, compiled: Compiled, consumer: Any, admin: Any, ctl: ControlLog,
             part: int, halt: threading.Event) -> PlanRun:
    """Plan partition ``part`` of a scaled-out plan at this site (see the module docstring): its own consumer
    of partition ``part`` of its topics, its own checkpoints, and ``part`` and ``instance`` in its status and
    done."""
    partitioned = compiled.partitioned
    assert partitioned is not None
    # a live query's sources come re-keyed into src.<query>.<stream> (joinlib.node.rekey), as replayed ones do
    scope = RunScope(part, partitioned.function.d, instance=svc.instance, rekeyed=rec.plan.live is not None)
    return PlanRun(svc, rec, compiled, consumer, admin, ctl, scope=scope,
                   reader=PartReader(partitioned.router(compiled.query), part), halt=halt)


class _PartThread(threading.Thread):
    def __init__(self, svc: NodeOwner, rec: ControlRecord, compiled: Compiled, admin: Any, ctl: ControlLog,
                 part: int) -> None:
        super().__init__(name=f"node-{svc.site}-p{part}", daemon=True)
        self.svc, self.rec, self.compiled, self.admin, self.ctl, self.part = svc, rec, compiled, admin, ctl, part
        self.halt = threading.Event()
        self.run_: Any = None   # its PlanRun (a re-keyer's: its Rekeyer), once started
        self.error: Optional[BaseException] = None

    def run(self) -> None:
        while True:   # again from the last checkpoint after a Redis outage, as a node's plain runs do
            consumer = make_consumer(self.svc.bootstrap, f"joinlib-node-{self.svc.site}-{uuid.uuid4().hex[:8]}")
            try:
                self.run_ = None
                self._execute(consumer)
                return
            except BaseException as e:  # reported by the owner, unless Redis went away and came back
                if not self._rode_out(e):
                    return
            finally:
                consumer.close()

    def _execute(self, consumer: Any) -> None:
        self.run_ = part_run(self.svc, self.rec, self.compiled, consumer, self.admin, self.ctl.copy(),
                             self.part, self.halt)
        self.run_.execute()

    def _redis(self) -> Any:
        factory = getattr(self.run_, "factory", None) or getattr(self.svc, "store_factory", None)
        return getattr(factory, "client", None)

    def _rode_out(self, e: BaseException) -> bool:
        """True if ``e`` was Redis going away, Redis answers again and the run should start over from its last
        checkpoint (what it produced delivered first, so that the next run's count of delivered batches is
        final); else ``e`` is this thread's error (False)."""
        cause = redis_outage(e) if isinstance(e, Exception) else None
        client = self._redis()
        if cause is None or client is None or self.halt.is_set():
            self.error = e
            return False
        what = "the re-keyer" if isinstance(self, _RekeyThread) else f"partition {self.part}"
        self.svc.log(f"{self.rec.query}: Redis went away under {what} ({type(cause).__name__}); it restarts from "
                     "its last checkpoint when Redis answers")
        out = getattr(self.run_, "out", None)
        try:
            if out is not None:
                out.drain(self.svc.log)
            stop = _Either(self.halt, self.svc.stop)
            if wait_for_redis(client, timeout_s=REDIS_WAIT_S, stop=stop, log=self.svc.log):
                return True
            if not stop.is_set():
                self.error = ClusterError(f"node {self.svc.site}: Redis did not answer for {REDIS_WAIT_S:.0f} s; "
                                          "restart the node once it is back (it resumes from its checkpoint)")
        except BaseException as again:
            self.error = again
        return False

    def finished(self) -> bool:
        return self.run_ is not None and self.run_.finished is not None

    def stop(self, save: bool) -> None:
        """Halt the run (checkpointed if ``save``: a hand-over) and wait for it."""
        if self.run_ is not None:
            self.run_.save_on_halt = save
        self.halt.set()
        self.join()


class _RekeyThread(_PartThread):
    """The site's re-keyer (:mod:`.rekey`) of a scaled-out live run, in the role of partition D of the group."""

    def __init__(self, svc: NodeOwner, rec: ControlRecord, compiled: Compiled, admin: Any, ctl: ControlLog,
                 part: int, redis: Any) -> None:
        super().__init__(svc, rec, compiled, admin, ctl, part)
        self.name, self.redis = f"rekey-{svc.site}", redis

    def _execute(self, consumer: Any) -> None:
        self.run_ = Rekeyer(self.svc, self.rec, self.compiled, self.redis, self.ctl.copy(), self.halt)
        self.run_.execute(consumer, self.admin)

    def _redis(self) -> Any:
        return self.redis


class _Either:
    """Set when either event is (a partition's halt, the service's stop): what a wait for Redis watches."""

    def __init__(self, a: threading.Event, b: threading.Event) -> None:
        self.a, self.b = a, b

    def is_set(self) -> bool:
        return self.a.is_set() or self.b.is_set()


def rekey_role(compiled: Compiled, rec: ControlRecord, site: str) -> Optional[int]:
    """The group partition standing for the site's re-keyer (D, after the plan partitions), or None: the run is
    not live, or no live stream is born at ``site``."""
    partitioned = compiled.partitioned
    if partitioned is None or rec.plan.live is None or not live_streams(compiled.query, site):
        return None
    return partitioned.function.d


class _Owner:
    """The plan partitions (and, for a live query, the re-keyer: :func:`rekey_role`) this instance owns, as the
    group assigns them; the rebalance callbacks run in the group consumer's poll, on the coordinating thread."""

    def __init__(self, svc: NodeOwner, rec: ControlRecord, compiled: Compiled, admin: Any, ctl: ControlLog,
                 redis: Any = None) -> None:
        self.svc, self.rec, self.compiled, self.admin, self.ctl = svc, rec, compiled, admin, ctl
        self.query, self.run_id = compiled.query.name, rec.run
        self.mine = {p for p, sites in part_sites(compiled.specs).items() if svc.site in sites}
        self.rekey, self.redis = rekey_role(compiled, rec, svc.site), redis
        self.done: set[int] = set()
        self.runs: dict[int, _PartThread] = {}
        self.lost_at: Optional[float] = None   # when our session was lost, until an assignment comes again

    def assigned(self, _consumer: Any, tps: list[TopicPartition]) -> None:
        self.lost_at = None
        new = [tp.partition for tp in tps if tp.partition in self.mine and tp.partition not in self.done
               and tp.partition not in self.runs]
        for p in new:
            self.runs[p] = t = _PartThread(self.svc, self.rec, self.compiled, self.admin, self.ctl, p)
            t.start()
        if new:
            self.svc.log(f"{self.query}: partitions {new} of {self.svc.site} start here (running "
                         f"{sorted(self.runs)})")
        r = self.rekey
        if r is not None and r not in self.done and r not in self.runs and any(tp.partition == r for tp in tps):
            self.runs[r] = t = _RekeyThread(self.svc, self.rec, self.compiled, self.admin, self.ctl, r, self.redis)
            t.start()
            self.svc.log(f"{self.query}: the re-keyer of {self.svc.site} runs here")

    def revoked(self, _consumer: Any, tps: list[TopicPartition]) -> None:
        self._release(tps, save=True)

    def lost(self, _consumer: Any, tps: list[TopicPartition]) -> None:
        """Our session expired: another instance may already run these; stop without a checkpoint."""
        self._release(tps, save=False)
        self.lost_at = time.monotonic()

    def stranded(self, after_s: float) -> bool:
        """Our session was lost ``after_s`` ago and no assignment, not even an empty one, has come since: the
        client did not join the group again.  bench/chaos.py saw it after a broker restart: the group of a site
        with one instance stayed empty, and the query stalled (docs/reliability.md, chaos finding 7)."""
        return self.lost_at is not None and time.monotonic() - self.lost_at > after_s

    def _release(self, tps: list[TopicPartition], save: bool) -> None:
        gone = [tp.partition for tp in tps if tp.partition in self.runs]
        for p in gone:
            t = self.runs.pop(p)
            if t.finished():
                self.done.add(p)
            t.stop(save)
        if gone:
            self.svc.log(f"{self.query}: partitions {sorted(gone)} of {self.svc.site} handed over"
                         + (" (checkpointed)" if save else " (session lost: no checkpoint)"))

    def on_control(self, rec: ControlRecord) -> None:
        d = rec.message
        if (isinstance(d, DoneMessage) and rec.query == self.query and d.run == self.run_id
                and d.site == self.svc.site and d.part in self.mine):
            part = int(d.part)
            self.done.add(part)
            t = self.runs.get(part)
            if t is not None and not t.finished():  # another instance finished it: ours redoes nothing new
                del self.runs[part]
                t.stop(save=False)

    def check(self) -> None:
        for p, t in list(self.runs.items()):
            if t.finished():
                self.done.add(p)
            elif t.error is not None:
                what = "the re-keyer" if p == self.rekey else f"partition {p}"
                raise ClusterError(f"node {self.svc.site}: {what} of {self.query} failed: "
                                   f"{type(t.error).__name__}: {t.error}") from t.error

    def over(self) -> bool:
        """Every plan partition of the site is done, and the re-keyer, if it runs here, has seen the stop."""
        r = self.runs.get(self.rekey) if self.rekey is not None else None
        return self.mine <= self.done and (r is None or r.finished())

    def stop_all(self) -> None:
        for t in self.runs.values():
            t.stop(save=True)
        self.runs.clear()


def run_scaled_plan(svc: Any, rec: ControlRecord, compiled: Compiled, admin: Any, ctl: ControlLog) -> None:
    """Run the partitions of a scaled-out plan that the site's group gives this instance, until every
    partition of the site is done (or the service is stopped: the runs checkpoint and end)."""
    q, partitioned = compiled.query, compiled.partitioned
    if not isinstance(partitioned, Partitioned):
        raise PlanError("scale_out needs a partitioned plan (pmjoin)")
    if not svc.redis_url and getattr(svc.store_factory, "client", None) is None:
        raise ClusterError(f"node {svc.site}: a scaled-out plan needs Redis (REDIS_URL): a partition moves to "
                           "another instance with its windows through its checkpoint")
    membership = svc.settings.group_config()   # session timeout, static membership (checked here: a ClusterError)
    run_id = rec.run
    topic = parts_topic(q.name, svc.site)
    role = rekey_role(compiled, rec, svc.site)
    ensure_partitions(admin, [topic], partitioned.function.d + (role is not None))
    redis = None
    if role is not None:
        redis = getattr(svc.store_factory, "client", None) or redis_client(svc.redis_url)
    owner = _Owner(svc, rec, compiled, admin, ctl, redis)
    control = make_watcher(svc.bootstrap, f"joinlib-node-{svc.site}-{uuid.uuid4().hex[:8]}")
    # the partitions already done (an instance that joins late, or a restarted one) are not run again
    seen = read_control_to_end(control, ControlLog.of([svc.site], rec.offset + 1), reject=svc.reject_control)
    owner.done |= {p for r, site, p in seen.parts_done if r == run_id and site == svc.site and p in owner.mine}
    control.assign(seen.assignment())

    def join() -> Any:
        g = make_consumer(svc.bootstrap, group_of(q.name, svc.site, run_id), **{
            "partition.assignment.strategy": "cooperative-sticky", "enable.auto.commit": False, **membership})
        g.subscribe([topic], on_assign=owner.assigned, on_revoke=owner.revoked, on_lost=owner.lost)
        return g

    group = join()
    rejoin_s = max(10.0, 2 * membership["session.timeout.ms"] / 1000)
    svc.log(f"{q.name}: serving partitions of {svc.site} with the other instances of group "
            f"{group_of(q.name, svc.site, run_id)}")
    try:
        while not owner.over() and not svc.stop.is_set():
            for m in consume(control, 1000, 0.05):   # dones first: a finished partition is not run again
                r = decode_control_message(m, svc.reject_control)
                if r is not None:
                    owner.on_control(r)
            group.poll(0.1)   # heartbeats; rebalance callbacks
            owner.check()
            if owner.stranded(rejoin_s):
                svc.log(f"{q.name}: no assignment {rejoin_s:.0f} s after the session was lost; {svc.site} joins "
                        "the group again with a new client")
                group.close()
                group = join()
                owner.lost_at = time.monotonic()
    finally:
        owner.stop_all()
        group.close()   # leave the group: the others take our partitions now, not a session later
        control.close()
    svc.log(f"{q.name}: every partition of {svc.site} is done")


# --------------------------------------------------------------------------- the cluster runner's side

def split_of(plan: Any, instances: Optional[dict[str, int]], redis_url: Optional[str], adaptive: Any,
             faults: Sequence[tuple[Any, ...]] = ()) -> Optional[Partitioned]:
    """The partitioned plan of a scaled-out run (``instances`` given), else None; ClusterError for what
    cannot scale out."""
    if instances is None:
        if any(f[2:3] == ("join",) for f in faults):
            raise ClusterError("starting another instance of a site needs a scaled-out plan (--scale-out)")
        return None
    if not isinstance(plan, Partitioned):
        raise ClusterError("scaling out needs a partitioned plan (--plan pmjoin[:hash|range|rate][:D]): its "
                           "partitions are what a site's instances share")
    if adaptive is not None:
        raise ClusterError("a partitioned plan is not adaptive")
    if not redis_url:
        raise ClusterError("scaling out needs Redis windows (REDIS_URL): a partition moves to another instance "
                           "with its windows through its checkpoint")
    for site, n in instances.items():
        if not isinstance(n, int) or n < 1:
            raise ClusterError(f"instances of {site}: {n!r} is not a positive number")
    return plan


def scaled_topics(query: Any, plan: Any, admin: Any, split: Optional[Partitioned]) -> list[str]:
    """A scaled-out run's source and node topics, made to have a partition per plan partition."""
    if split is None:
        return []
    nodes = dict.fromkeys(site for at in part_sites(generations(query, plan)).values() for site in at)
    topics = [source_topic(query, s.name) for s in query.streams] + flow_topics(query.name, nodes)
    ensure_partitions(admin, topics, split.function.d)
    return topics


def scale_message(msg: PlanMessage, consumer: Any, split: Optional[Partitioned], topics: list[str]) -> PlanMessage:
    """``msg`` scaled out, with the start offset of every partition of ``topics`` (if ``split``: else ``msg``)."""
    if split is None:
        return msg
    return replace(msg, scale_out=True, part_offsets={t: tuple(partition_ends(consumer, t, split.function.d))
                                                      for t in topics})


def wanted(specs: Sequence[Any], split: Optional[Partitioned]) -> Optional[set[str]]:
    """Whose ``done`` a run waits for: None (every node), or every (site, partition) of a scaled-out plan."""
    if split is None:
        return None
    return {done_key(site, p) for p, at in part_sites(specs).items() for site in at}


def naive_of(query: Any, streams: dict[str, list[Any]]) -> dict[str, list[dict[str, Any]]]:
    """Per site, the naive baseline of its source batches (every batch to every other site, priced as a node
    prices the batches it reads: :func:`joinlib.protocol.wire.naive_batch_size`) -- a scaled-out run's ``naive``."""
    tau = query.execution.interval_ms
    out: dict[str, dict[str, int]] = {}
    for s in query.streams:
        by_epoch: dict[int, list[Any]] = {}
        for t in streams.get(s.name, []):
            by_epoch.setdefault(t.ts // tau, []).append(t)
        cost = sum(wire.naive_batch_size(e, tups) for e, tups in by_epoch.items())
        for dst in query.sites:
            if dst != s.site and cost:
                row = out.setdefault(s.site, {})
                row[dst] = row.get(dst, 0) + cost
    return {site: [{"src": site, "dst": d, "bytes": n} for d, n in sorted(rows.items())] for site, rows in out.items()}


def per_site(done: dict[str, DoneMessage], naive: Optional[dict[str, list[dict[str, Any]]]] = None,
             ) -> dict[str, DoneMessage]:
    """The ``done`` messages per site: a scaled-out plan's per partition added up (``parts`` kept), with the
    naive baseline ``naive`` (:func:`naive_of`)."""
    if all(d.part is None for d in done.values()):
        return done
    by_site: dict[str, list[DoneMessage]] = {}
    for d in done.values():
        by_site.setdefault(d.site, []).append(d)
    out = {}
    for site, parts in by_site.items():
        parts.sort(key=lambda d: d.part or 0)
        # a partition's cpu_s is its process's: count each instance once, at its latest figure
        cpu: dict[str, float] = {}
        for d in parts:
            key = d.instance or f"part{d.part}"
            cpu[key] = max(cpu.get(key, 0.0), d.cpu_s)
        merged = merge_done(site, parts[0].run, parts, max(d.wall_s for d in parts), sum(cpu.values()))
        out[site] = replace(merged, parts=tuple(parts),
                            naive=tuple(Naive.from_json(n) for n in (naive or {}).get(site, [])))
    return out
