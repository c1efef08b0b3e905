"""One node of an adaptive query: the runtime's host plus what seed 003 adds around it.

An :class:`AdaptiveNode` owns the node's :class:`~joinlib.runtime.host.Host` and

* measures the streams born at the node (:mod:`.stats`), reading each epoch's batch from the home
  window through a *tap* (a reader that holds the batch until it is measured);
* re-plans: sends statistics reports to the planner (CNU, :mod:`.cnu`, which runs at one node) or
  takes part in the distributed update (DNU, :mod:`.dnu`);
* migrates, round after round (:mod:`.migration`): copies windows, exchanges LOCAL_READY /
  GLOBAL_READY, holds its inserts at its fence, switches generation and drops the old one.

It never touches I/O: messages go out through ``send`` (the simulated network, Kafka), results
through the host's sink.  Inputs: :meth:`advance` (the watermark), :meth:`on_envelope` (the
runtime's messages), :meth:`on_message` (the protocol's), then :meth:`step`.  :meth:`state` and
:meth:`restored` give plain-data checkpoints (the host's with its stores, and the node's own).
"""
from __future__ import annotations

from collections import deque
from typing import Any, Callable, Optional

from joinlib.adaptive.cnu import CnuPlanner
from joinlib.adaptive.config import AdaptiveConfig, AdaptiveSensor, adaptive_sensor
from joinlib.adaptive.dnu import DnuNode
from joinlib.adaptive.jep import JEP, SEP, nos_changes
from joinlib.adaptive.migration import Generation, Migration, generation_cap
from joinlib.adaptive.protocol import (
    Message,
    PlanUpdate,
    Ready,
    Relay,
    StatsReport,
    WindowData,
    WindowRequest,
    trigger_id,
)
from joinlib.adaptive.protocol import decode as decode_message
from joinlib.adaptive.protocol import encode as encode_message
from joinlib.adaptive.shadow import Feed, ShadowWindow, replica_snapshot, tap
from joinlib.adaptive.stats import StreamMonitor, StreamStatistics
from joinlib.model import Query
from joinlib.plan.ir import PlanIR, lower
from joinlib.protocol.messages import Envelope, WindowSnapshot
from joinlib.runtime.algorithms.simple import FullReplica
from joinlib.runtime.checkpoint import state_of
from joinlib.runtime.host import Host, Transport
from joinlib.runtime.instance import InstanceSpec
from joinlib.runtime.window import HomeWindow

Send = Callable[[Message], None]


class SnapshotFilter:
    """The host's transport, minus the jump-start snapshots of new generations: the adaptive node
    starts every replica of a new generation itself, from a window it already has or copied in
    the shadow phase (:mod:`.migration`), so the home's copy would only repeat it.  The run's first
    generation ``first`` keeps its snapshots: a replanned run's starts mid-stream (docs/live.md "Replan"),
    with nothing the node copied."""

    def __init__(self, transport: Transport, first: int = 0) -> None:
        self.transport, self.first = transport, first

    def send(self, env: Envelope) -> None:
        if env.gen == self.first or not isinstance(env.body, WindowSnapshot):
            self.transport.send(env)


class AdaptiveNode:
    """See the module docstring.  ``gens``: the plan generations installed at ``host`` (a
    restart); by default generation 0 with ``initial``."""

    def __init__(self, site: str, query: Query, config: AdaptiveConfig, host: Host, send: Send, initial: JEP,
                 gens: Optional[list[Generation]] = None) -> None:
        self.site, self.q, self.cfg, self.host, self._send = site, query, config, host, send
        self.sensor: AdaptiveSensor = adaptive_sensor(host.sensor)
        self.tau = query.execution.interval_ms
        self.participants = query.sites
        self.gens = gens if gens is not None else [Generation(0, initial, 0)]
        for g in self.gens:
            host.install(InstanceSpec(self._lower(g.jep), g.gen, g.start, g.stop))
        self.gen, self.jep = self.gens[-1].gen, self.gens[-1].jep
        self.ir: PlanIR = self._lower(self.jep)
        self.mine = tuple(s.name for s in query.streams if s.site == site)
        self.monitors = {n: StreamMonitor.of(query.stream(n), self.tau, config.monitor) for n in self.mine}
        self.taps = {n: tap(self.home(n), f"monitor:{n}", 0) for n in self.mine}
        planner = config.planner or query.sites[0]
        self.planner_site = planner
        self.cnu = (CnuPlanner(site, query, initial, config.model, self.gens[0].gen)
                    if config.mode == "cnu" and site == planner else None)
        self.dnu = DnuNode(site, query, initial, config.model) if config.mode == "dnu" else None
        self.announced = {s.head: s for s in initial.seps if s.head in self.mine}
        self.announced_mids: set[int] = set()
        self.round = 1
        self.migs: dict[int, Migration] = {}
        self.feeds: dict[tuple[int, str, str], Feed] = {}
        self.seen: set[tuple[Any, ...]] = set()
        self.wm = -1
        self.fence: Optional[int] = None
        self._local: deque[Message] = deque()
        self._draining = False

    def _lower(self, jep: JEP) -> PlanIR:
        return lower(self.q, jep.to_plan(self.q))

    def home(self, stream: str) -> HomeWindow:
        return self.host.windows[(self.q.name, 0, stream)]

    # ------------------------------------------------------------------ inputs
    def advance(self, watermark: int) -> None:
        """Every stream born here has seen everything before ``watermark`` (held at the fence)."""
        self.wm = max(self.wm, watermark)
        self._apply_watermark()

    def _apply_watermark(self) -> None:
        wm = self.wm if self.fence is None else min(self.wm, self.fence * self.tau)
        self.host.advance(self.q.name, wm)

    def on_envelope(self, env: Envelope, now: Optional[float] = None, sent: Optional[float] = None) -> None:
        self.host.on_message(env, now, sent)

    def on_message(self, msg: Message) -> None:
        """A protocol message for this node (copies are dropped)."""
        self._local.append(msg)
        if self._draining:
            return
        self._draining = True
        try:
            while self._local:
                self._dispatch(self._local.popleft())
        finally:
            self._draining = False

    def send(self, msg: Message) -> None:
        self.sensor.on_protocol(self.site, type(msg.body).__name__, msg.kind)
        if msg.dst == self.site:
            self.on_message(msg)
        else:
            self._send(msg)

    def step(self, now: Optional[float] = None) -> None:
        """Run the host as far as it can, then everything the node does around it, until still."""
        self.host.run(now)
        while self._poll():
            self.host.run(now)

    # ------------------------------------------------------------------ dispatch
    def _dispatch(self, msg: Message) -> None:
        key = msg.dedup()
        if key in self.seen:
            return
        self.seen.add(key)
        b = msg.body
        if isinstance(b, (PlanUpdate, WindowData, Ready)) and msg.mid < self.round:
            return   # a round this node has finished: a copy, or data past its switch
        for m in self._handle(msg):
            self.send(m)

    def _handle(self, msg: Message) -> list[Message]:
        b = msg.body
        if isinstance(b, StatsReport):
            if self.cnu is None:
                raise AssertionError(f"statistics report at {self.site}, which is not the planner")
            return self.cnu.on_report(msg.mid, b)
        if isinstance(b, Relay):
            assert self.dnu is not None, "a DNU relay in a CNU run"
            return self.dnu.on_relay(msg)
        if isinstance(b, WindowRequest):
            feed, snap = Feed.start(self.home(b.stream), b.holder, msg.mid)
            self.feeds[(msg.mid, b.stream, b.holder)] = feed
            return [Message(self.site, b.holder, self.q.name, msg.mid, snap)]
        mig = self._mig(msg.mid)
        if isinstance(b, PlanUpdate) and mig.jep is None:
            mig.jep, mig.gen, mig.triggers = b.jep, b.gen, set(b.triggers)
        elif isinstance(b, WindowData):
            self._holder(mig, b.stream).on_data(b)
        elif isinstance(b, Ready):
            (mig.glob if b.glob else mig.local)[msg.src] = b
        return []

    def _mig(self, r: int) -> Migration:
        mig = self.migs.get(r)
        if mig is None:
            mig = self.migs[r] = Migration(r)
        return mig

    def _holder(self, mig: Migration, stream: str) -> ShadowWindow:
        h = mig.holders.get(stream)
        if h is None:
            h = mig.holders[stream] = ShadowWindow(self.q.stream(stream), self.tau)
        return h

    # ------------------------------------------------------------------ the work around the host
    def _poll(self) -> bool:
        self._measure()
        self._feed()
        changed = False
        while self._round():
            changed = True
        return changed

    def _measure(self) -> None:
        for n, lane in self.taps.items():
            home = self.home(n)
            while home.inserted(lane.epoch):
                e = lane.epoch
                measured, report = self.monitors[n].add(e, home.batches[e])
                lane.epoch = e + 1
                if measured is not None:
                    self.sensor.on_stream_stats(self.site, self.q.name, e, measured)
                if report is not None:
                    self._trigger(n, e, report)

    def _trigger(self, stream: str, epoch: int, stats: StreamStatistics) -> None:
        self.sensor.on_trigger(self.site, self.q.name, epoch, stats)
        mid = trigger_id(epoch, self.q.stream(stream).pos)
        if self.dnu is not None:
            for m in self.dnu.trigger(mid, stream, stats):
                self.send(m)
        else:
            self.send(Message(self.site, self.planner_site, self.q.name, mid, StatsReport(stream, epoch, stats)))

    def _feed(self) -> None:
        for key, feed in list(self.feeds.items()):
            home = self.home(feed.stream)
            for d in feed.poll(home):
                self.send(Message(self.site, feed.holder, self.q.name, key[0], d))
            if feed.done:
                feed.close(home)
                del self.feeds[key]

    def _round(self) -> bool:
        """Move the current round on; True if it changed the host or finished the round."""
        mig = self._mig(self.round)
        if self.dnu is not None and not self._dnu_plan(mig):
            return False
        if mig.noop:
            return self._next_round(mig)
        if mig.jep is None or mig.gen is None:
            return False
        if not mig.active:
            self._activate(mig)
        if self.dnu is None and not mig.sent_local and mig.full():
            self._ready(mig, False, 0)
        everyone = all(p in mig.local for p in self.participants)
        if not mig.sent_global and everyone and mig.full():
            # not before the current generation's first epoch: a replanned run's starts mid-stream (docs/live.md
            # "Replan"), and its homes hold the epochs before it (its warm-up), which a round may measure
            self.fence = max(max((self.home(n).next for n in self.mine), default=0) + self.cfg.fence_margin,
                             self.gens[-1].start + 1)
            self._apply_watermark()
            self._ready(mig, True, self.fence)
        if mig.switch is None:
            e = mig.switch_epoch(self.participants)
            if e is None:
                return False
            self._switch(mig, e)
            return True
        if self._finish(mig):
            return self._next_round(mig)
        return False

    def _ready(self, mig: Migration, glob: bool, epoch: int, seps: tuple[SEP, ...] = (),
               versions: tuple[int, ...] = ()) -> None:
        digest = "" if mig.jep is None else self._lower(mig.jep).digest()
        ready = Ready(glob, epoch, digest, seps, versions, tuple(sorted(mig.triggers)))
        if glob:
            mig.sent_global = True
        else:
            mig.sent_local = True
        for p in self.participants:
            self.send(Message(self.site, p, self.q.name, mig.round, ready))

    def _dnu_plan(self, mig: Migration) -> bool:
        """DNU: announce my SEPs in the round when due; once every node's are in, the round's plan."""
        dnu = self.dnu
        assert dnu is not None
        if not mig.sent_local:
            mentioned = set().union(*(r.triggers for r in mig.local.values())) if mig.local else set()
            news = any(dnu.heads[h].sep != self.announced[h] for h in self.mine)
            if (news or mig.local) and dnu.settled(mentioned):
                seps = dnu.seps()
                done = dnu.known()   # settled: every trigger my heads know is done
                mig.triggers = (done - self.announced_mids) | mentioned
                self._ready(mig, False, 0, tuple(s for s, _ in seps), tuple(v for _, v in seps))
                self.announced.update({s.head: s for s, _ in seps})
                self.announced_mids |= done
        if mig.jep is not None or mig.noop:
            return True
        if not mig.sent_local or any(p not in mig.local for p in self.participants):
            return False
        by_head = {s.head: s for r in mig.local.values() for s in r.seps}
        jep = JEP(tuple(by_head[h] for h in self.q.names))
        mig.triggers = set().union(*(r.triggers for r in mig.local.values()))
        if jep == self.jep or self.gen >= generation_cap(self.gen):   # the cap: never, in practice
            mig.noop = True
        else:
            mig.jep, mig.gen = jep, self.gen + 1
        return True

    def _activate(self, mig: Migration) -> None:
        """The round is the node's current one: set up the windows it will newly keep."""
        assert mig.jep is not None
        mig.active = True
        new = nos_changes(self.ir, self._lower(mig.jep)).get(self.site)
        for stream in new.windows if new is not None else ():
            self._holder(mig, stream)
            if self.dnu is not None:   # DNU: the holder asks; CNU: the planner asked the home
                home = self.q.stream(stream).site
                self.send(Message(self.site, home, self.q.name, mig.round, WindowRequest(stream, self.site)))
        mig.requested = True

    def _switch(self, mig: Migration, e: int) -> None:
        """Every GLOBAL_READY is in: the old generation stops after head epoch e − 1, the new one
        runs from e, the fence is lifted."""
        assert mig.jep is not None and mig.gen is not None
        for ready in mig.glob.values():
            if ready.digest != self._lower(mig.jep).digest():
                raise AssertionError(f"round {mig.round} at {self.site}: nodes disagree on the new plan")
        self.host.stop_instance((self.q.name, 0, self.gen), e - 1)
        new_ir = self._lower(mig.jep)
        self.host.install(InstanceSpec(new_ir, mig.gen, e, None))
        self.gens[-1].stop = e - 1
        self.gens.append(Generation(mig.gen, mig.jep, e))
        mig.old_gen, mig.switch = self.gen, e
        self.gen, self.jep, self.ir = mig.gen, mig.jep, new_ir
        last = self.host.last.get(self.q.name)
        for (r, _, _), feed in self.feeds.items():
            if r == mig.round:
                feed.stop = e - 1 if last is None else min(e - 1, last)
        self.fence = None
        self._apply_watermark()
        self.sensor.on_plan_change(self.site, self.q.name, mig.gen, e, mig.jep, tuple(sorted(mig.triggers)))

    def _finish(self, mig: Migration) -> bool:
        """Start the new replicas here as epoch E finds their windows; drop the old generation
        once it has run its epochs.  True when the round is over at this node."""
        e, gen = mig.switch, mig.gen
        assert e is not None and mig.old_gen is not None and gen is not None
        q, last = self.q.name, self.host.last.get(self.q.name)
        old = self.host.instances.get((q, 0, mig.old_gen))
        for r in self.ir.replicas:
            if r.loc != self.site or r.sig in mig.injected or (last is not None and e - 1 > last):
                continue
            kept = old.replicas.get(r.sig) if old is not None else None
            if isinstance(kept, FullReplica):
                if kept.next < e:
                    continue
                snap = replica_snapshot(kept, self.q.stream(r.stream), self.tau, e)
            else:
                shadow = mig.holders[r.stream]
                if not shadow.complete_through(e - 1):
                    continue
                snap = shadow.snapshot_for(e)
            flow = self.ir.flow_ids[self.ir.update_flow(r).sig]
            self.host.on_message(Envelope(r.home, self.site, flow, e - 1, snap, 0, gen, q))
            mig.injected.add(r.sig)
        waiting = [r for r in self.ir.replicas if r.loc == self.site and r.sig not in mig.injected
                   and not (last is not None and e - 1 > last)]
        if waiting or any(k[0] == mig.round for k in self.feeds):
            return False
        if old is not None:
            if not old.finished:
                return False
            self.host.retire((q, 0, mig.old_gen))
            self.gens = [g for g in self.gens if g.gen != mig.old_gen]
        return True

    def _next_round(self, mig: Migration) -> bool:
        mig.done = True
        self.round += 1
        del self.migs[mig.round]
        if self.cnu is not None and not mig.noop:
            for m in self.cnu.switched():
                self.send(m)
        return True

    # ------------------------------------------------------------------ status
    @property
    def settled(self) -> bool:
        """No round under way, nothing to copy, no trigger waiting (the run may end)."""
        busy_dnu = self.dnu is not None and not all(h.idle for h in self.dnu.heads.values())
        busy_cnu = self.cnu is not None and (self.cnu.busy or bool(self.cnu.pending))
        open_round = any(m.jep is not None or m.local or m.glob for m in self.migs.values())
        return not (busy_dnu or busy_cnu or open_round or self.feeds or self.fence is not None)

    # ------------------------------------------------------------------ checkpoints
    def state(self, with_stores: bool = True) -> dict[str, Any]:
        """Plain data: the host's state (with its stores' contents unless ``with_stores`` is False: a node
        service's Redis checkpoint copies them itself), and the node's own."""
        return {
            "host": state_of(self.host, with_stores=with_stores),
            "gens": [g.data() for g in self.gens],
            "round": self.round, "wm": self.wm, "fence": self.fence,
            "monitors": {n: [m.snapshot(), self.taps[n].epoch] for n, m in self.monitors.items()},
            "feeds": [[r, s, h, f.lane.epoch, f.stop] for (r, s, h), f in self.feeds.items()],
            "migs": [m.snapshot() for m in self.migs.values()],
            "cnu": None if self.cnu is None else self.cnu.snapshot(),
            "dnu": None if self.dnu is None else self.dnu.snapshot(),
            "announced": [[s.head, list(s.order), list(s.placement)] for s in self.announced.values()],
            "announced_mids": sorted(self.announced_mids),
            "seen": [list(k) for k in self.seen],
            "queued": [encode_message(m) for m in self._local],
        }

    @classmethod
    def restored(cls, site: str, query: Query, config: AdaptiveConfig, host: Host, send: Send, initial: JEP,
                 data: dict[str, Any]) -> "AdaptiveNode":
        """A node rebuilt from :meth:`state` on a fresh ``host`` of the same site."""
        gens = [Generation.of(g) for g in data["gens"]]
        node = cls(site, query, config, host, send, initial, gens)
        host.load_state(data["host"])
        node.round, node.wm, node.fence = data["round"], data["wm"], data["fence"]
        for n, (mon, epoch) in data["monitors"].items():
            node.monitors[n].restore(mon)
            node.taps[n].epoch = epoch
        for r, s, h, epoch, stop in data["feeds"]:
            lane = tap(node.home(s), f"feed:{r}:{s}>{h}", epoch)
            node.feeds[(r, s, h)] = Feed(s, h, lane, stop)
        for m in data["migs"]:
            mig = node._mig(m["round"])
            mig.restore_into(m, lambda s: ShadowWindow(query.stream(s), node.tau))
        if node.cnu is not None:
            node.cnu.restore(data["cnu"])
        if node.dnu is not None:
            node.dnu.restore(data["dnu"])
        node.announced = {h: SEP(h, tuple(o), tuple(p)) for h, o, p in data["announced"]}
        node.announced_mids = set(data["announced_mids"])
        node.seen = {_tupled(k) for k in data["seen"]}
        node._local = deque(decode_message(b) for b in data["queued"])
        return node


def _tupled(x: Any) -> Any:
    return tuple(_tupled(v) for v in x) if isinstance(x, list) else x

