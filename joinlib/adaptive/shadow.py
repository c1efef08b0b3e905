"""Windows copied to their new holders before a switch: the paper's *jump start* of the distributed
track strategy.

A new plan may keep the window of S_j at a node that did not keep it (a source-placement join
moved there).  Waiting for it to fill from live tuples would take a whole window; instead:

* the home of S_j, asked by a :class:`~.protocol.WindowRequest`, starts a :class:`Feed`: it first
  subscribes to the live tuples (a *tap*: from epoch S on, the home window keeps its batches and
  tuples for the feed), then sends the snapshot of its window as epoch S finds it, then every
  epoch's batch -- the new operator set in shadow mode, "update and raw ship only";
* the new holder merges them in a :class:`ShadowWindow`, dropping any tuple it already has (by
  tuple id: a snapshot sent again after a restart, or one taken later than the subscription);
* at the switch epoch E the holder hands the runtime's new replica the window as E finds it
  (:meth:`ShadowWindow.snapshot_for`), in the form the runtime's own jump start has
  (:class:`~joinlib.protocol.messages.WindowSnapshot`), so the new generation's join operators start with
  a full window, and the feed ends with epoch E - 1.

A window kept in both plans needs no copy: the node's old replica has it
(:func:`replica_snapshot`, the paper's "make W_j accessible").
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from joinlib.adaptive.protocol import WindowData
from joinlib.model import Stream, Tup
from joinlib.protocol import avro
from joinlib.protocol.messages import WindowSnapshot
from joinlib.runtime.algorithms.simple import FullReplica
from joinlib.runtime.lanes import Lane
from joinlib.runtime.window import HomeWindow
from joinlib.runtime.windowing import Progress, below, expiry_bound


def tap(home: HomeWindow, name: str, epoch: int) -> Lane:
    """A reader of ``home`` that the host never runs: it holds the window's purges and batches
    from ``epoch`` on (a feed or a monitor moves it on as it takes batches)."""
    lane = Lane(name, [], epoch, None)
    home.use(lane)
    return lane


@dataclass
class Feed:
    """The home's side of a copied window: snapshot, then one batch per epoch until ``stop``."""

    stream: str
    holder: str
    lane: Lane
    stop: Optional[int] = None      # the last epoch to ship (E - 1), once the switch is agreed

    @classmethod
    def start(cls, home: HomeWindow, holder: str, mid: int) -> tuple["Feed", WindowData]:
        s = home.next
        lane = tap(home, f"feed:{mid}:{home.stream.name}>{holder}", s)
        snap = WindowData(home.stream.name, s, True, home.count_before(s), tuple(home.boundary(s)))
        return cls(home.stream.name, holder, lane), snap

    def poll(self, home: HomeWindow) -> list[WindowData]:
        """The batches inserted since the last poll (up to ``stop``)."""
        out = []
        while home.inserted(self.lane.epoch) and (self.stop is None or self.lane.epoch <= self.stop):
            e = self.lane.epoch
            out.append(WindowData(self.stream, e, False, 0, tuple(home.batches[e])))
            self.lane.epoch = e + 1
        return out

    @property
    def done(self) -> bool:
        return self.stop is not None and self.lane.epoch > self.stop

    def close(self, home: HomeWindow) -> None:
        home.drop([self.lane])


@dataclass
class ShadowWindow:
    """The new holder's copy of a window, filled by a snapshot and the batches after it."""

    stream: Stream
    tau: int
    start: Optional[int] = None                   # the snapshot's epoch S
    base: int = 0                                 # tuples of the stream before S
    next: int = 0                                 # the next batch epoch expected
    tuples: dict[int, Tup] = field(default_factory=dict)   # by tuple id
    arrivals: dict[int, list[int]] = field(default_factory=dict)   # epoch -> ts of its tuples
    early: dict[int, tuple[Tup, ...]] = field(default_factory=dict)  # batches before the snapshot came

    @property
    def full(self) -> bool:
        """The snapshot is here: the window holds everything before ``next``."""
        return self.start is not None

    def complete_through(self, epoch: int) -> bool:
        return self.full and self.next > epoch

    def on_data(self, d: WindowData) -> None:
        if d.snapshot:
            if self.start is not None:
                return   # a copy
            self.start, self.base, self.next = d.epoch, d.base, d.epoch
            self._add(d.tuples)
            for e in [e for e in self.early if e < self.next]:
                del self.early[e]   # the snapshot has these tuples
        elif d.epoch >= self.next:
            self.early.setdefault(d.epoch, d.tuples)
        if self.start is None:
            return
        while self.next in self.early:   # the batches in epoch order, none skipped
            tups = self.early.pop(self.next)
            self._add(tups)
            self.arrivals[self.next] = [t.ts for t in tups]
            self.next += 1

    def _add(self, tups: tuple[Tup, ...]) -> None:
        for t in tups:
            self.tuples.setdefault(t.id, t)   # dedup by tuple id

    def progress(self) -> Progress:
        p = Progress()
        p.start_at(self.start or 0, self.base)
        for e in range(self.start or 0, self.next):
            p.add_epoch(e, self.arrivals.get(e, []))
        return p

    def snapshot_for(self, epoch: int) -> WindowSnapshot:
        """The window as the generation starting at ``epoch`` finds it (batches through
        ``epoch - 1`` taken)."""
        assert self.complete_through(epoch - 1), f"shadow window of {self.stream.name} incomplete before {epoch}"
        return view_at(self.stream, self.tau, epoch, self.tuples.values(), self.progress())

    def snapshot(self) -> dict[str, Any]:
        enc = avro.encode_tuple
        return {"start": self.start, "base": self.base, "next": self.next,
                "tuples": [enc(t) for t in self.tuples.values()],
                "arrivals": list(self.arrivals.items()),
                "early": [(e, [enc(t) for t in ts]) for e, ts in self.early.items()]}

    def restore(self, data: dict[str, Any]) -> None:
        dec = avro.decode_tuple
        self.start, self.base, self.next = data["start"], data["base"], data["next"]
        self.tuples = {t.id: t for t in map(dec, data["tuples"])}
        self.arrivals = {e: list(ts) for e, ts in data["arrivals"]}
        self.early = {e: tuple(map(dec, ts)) for e, ts in data["early"]}


def view_at(stream: Stream, tau: int, epoch: int, tups: Any, progress: Optional[Progress]) -> WindowSnapshot:
    """The tuples of ``tups`` a head of ``epoch`` may join (ts before the epoch, not expired at it),
    in rank order, and the number of the stream's tuples before ``epoch``."""
    p = None if stream.window.is_time else progress
    bound = expiry_bound(stream, epoch, tau, p)
    end = epoch * tau
    alive = sorted((t for t in tups if t.ts < end and not below(t, bound)), key=lambda t: t.seq)
    base = p.through(epoch - 1) if p is not None else 0
    return WindowSnapshot(base, alive)


def replica_snapshot(rep: FullReplica, stream: Stream, tau: int, epoch: int) -> WindowSnapshot:
    """The window a node already keeps (the old generation's replica, applied through ``epoch -
    1``) as the new generation's replica starting at ``epoch`` needs it: no copy over the network."""
    assert rep.next >= epoch, f"replica of {stream.name} applied through {rep.next - 1}, not {epoch - 1}"
    return view_at(stream, tau, epoch, rep.store.tuples(), rep.progress)
