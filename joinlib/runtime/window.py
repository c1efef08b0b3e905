"""The window of a stream at the site it is born at, shared by every plan instance there.

A base stream's window has the same content whatever plan runs over it, so it belongs to the
host, keyed by (query, partition, stream), not to a plan generation: two generations of a plan
read the same window during a switch, and a new generation finds it full.

Each epoch the window inserts its batch B_e as soon as the stream's watermark passes the end of
the epoch (the *insert lane*, ahead of everything that reads the window).  Removal lags: the
tuples dead by epoch e (deadline < e) are purged only once every lane that reads the window
(its *users*) has finished the epochs before e.  Users read the window at their own epoch, cut
by bisection (:mod:`joinlib.runtime.windowing`), so a window holding more than one epoch's view
answers every one of them exactly.  The batches B_e are kept as long as a user may still take
them (senders ship them, sequences start from them).

A window may have a *history* (:meth:`open_history`): tuples from before epoch 0 that its first batch takes in
too, so that the tuples of epoch 0 on can join them (a reader of a shared operator keeps the derived tuples the
operator made within a window before the reader's origin: docs/multiquery.md "What a reusing query sees").  They
go wherever B_0 goes -- the store, the replicas its senders fill, the sequences it starts -- so every plan sees
them; a result they head is older than the origin, and the reader's output drops it.
"""
from __future__ import annotations

from bisect import bisect_left
from collections import deque
from typing import Any, Iterable, Optional

from joinlib.kernels import kernel
from joinlib.model import Stream, Tup
from joinlib.protocol.bloom import Matcher
from joinlib.protocol.messages import Key
from joinlib.runtime.keycolumn import KeyColumn
from joinlib.runtime.lanes import Lane, Phase, lowest_epoch
from joinlib.runtime.sensor import Sensor
from joinlib.runtime.windowing import Bound, Progress, expiry_bound, purge_bound, view_slice
from joinlib.state.base import Index, WindowStore

#: the insert loop in C (``joinlib/runtime/_rowsc.c`` take_below), None: its Python form in :meth:`HomeWindow.insert`
_c: Any = kernel("joinlib.runtime._rowsc")


def _take_below(src: deque[Tup], end: int, start: int) -> tuple[list[Tup], int]:
    """The tuples at the left of ``src`` while their ts is below ``end``, taken off it, and how many of them were
    below ``start`` (late: dropped): ``_rowsc.take_below``'s Python form."""
    batch, late = [], 0
    while src and src[0].ts < end:
        t = src.popleft()
        if t.ts < start:
            late += 1
            continue
        batch.append(t)
    return batch, late


class HomeWindow:
    """The window of ``stream`` at its site (see the module docstring)."""

    def __init__(self, stream: Stream, store: WindowStore, tau: int, site: str, sensor: Sensor) -> None:
        self.stream, self.store, self.tau, self.site, self.sensor = stream, store, tau, site, sensor
        self.progress: Optional[Progress] = None if stream.window.is_time else Progress()
        self._time_size: Optional[int] = stream.window.size if stream.window.is_time else None
        self.next = 0                     # the next epoch to insert
        self.purged = 0                   # tuples with deadline < purged are gone
        self.source: deque[Tup] = deque()
        self.watermark = -1
        self.since = 0                    # epoch 0 takes the tuples from here on (< 0: a history)
        self.batches: dict[int, list[Tup]] = {}
        self.users: list[Lane] = []
        self.columns: dict[Index, KeyColumn] = {}   # built when a request is first tested, then kept up
        # the insert waits for the watermark to pass the epoch's end: the scheduler tests that (Phase.gates)
        self.lane = Lane(f"insert:{stream.name}", [Phase((0,), "tick", self.insert,
                                                        gates=((self, "watermark", tau, tau, 0),))], 0, None)

    # ------------------------------------------------------------------ inputs
    def feed(self, tups: Iterable[Tup], watermark: Optional[int]) -> None:
        self.source.extend(tups)
        if watermark is not None and watermark > self.watermark:
            self.watermark = watermark

    def open_history(self, since: int) -> None:
        """Before anything is fed: epoch 0's batch also takes the tuples in ``[since, 0)``, and nothing fed has
        been seen below ``since`` (the watermark starts there; tuples older than ``since`` stay late)."""
        assert self.next == 0 and not self.source, "a window's history is opened before anything is fed"
        assert self.stream.window.is_time, "a history needs a time window (a tuple window would count from 0)"
        self.since = min(since, 0)
        self.watermark = min(self.watermark, self.since)

    def insert(self, e: int) -> bool:
        """The insert lane's phase: B_e into the store once the watermark passes the epoch."""
        end = (e + 1) * self.tau
        if self.watermark < end:
            return False
        start = e * self.tau if e else self.since
        batch, late = _c.take_below(self.source, end, start) if _c is not None else _take_below(self.source, end, start)
        for _ in range(late):
            self.sensor.on_late(self.site, "input")  # arrived after its epoch closed
        self.store.insert(batch)
        if self.columns:
            for index, col in list(self.columns.items()):
                if not col.append(batch):
                    del self.columns[index]
        if self.progress is not None:
            self.progress.add_epoch(e, [t.ts for t in batch])
        self.next = e + 1
        self.batches[e] = batch
        self.maintain()
        if batch:
            self.sensor.on_input(self.site, self.stream.name, len(batch))
        return True

    # ------------------------------------------------------------------ users
    def use(self, lane: Lane) -> None:
        """``lane`` reads the window (or takes batches) at its epoch: hold purges back for it."""
        self.users.append(lane)

    def drop(self, lanes: Iterable[Lane]) -> None:
        gone = {id(lane) for lane in lanes}
        self.users = [u for u in self.users if id(u) not in gone]

    def low_epoch(self) -> int:
        """The lowest epoch a user still needs (``next`` when none does)."""
        return lowest_epoch(self.users, self.next)

    def maintain(self) -> None:
        """Purge what no user needs any more; drop batches no user will take."""
        low = self.low_epoch()
        if low > self.purged:
            if self._time_size is not None and not self.columns:   # a time window: purge_bound's ts, directly
                self.store.purge_below(ts=low * self.tau - self._time_size)
            else:
                bound = purge_bound(self.stream, low, self.tau, self.progress)
                self.store.purge_below(**bound)
                for col in self.columns.values():
                    col.purge(bound)
            if self.progress is not None:
                self.progress.prune(low)
            self.purged = low
        batches = self.batches
        while batches:  # epochs in insertion (= epoch) order: drop from the oldest
            first = next(iter(batches))
            if first >= low:
                break
            del batches[first]

    def inserted(self, e: int) -> bool:
        return self.next > e

    # ------------------------------------------------------------------ views
    def lower(self, e: int) -> Bound:
        """Tuples below this are not in the view of epoch ``e``."""
        return expiry_bound(self.stream, e, self.tau, self.progress)

    def view(self, index: Index, keys: Iterable[Key], e: int) -> dict[Key, list[Tup]]:
        """The tuples of the view of epoch ``e`` with each of ``keys`` (keys without any omitted)."""
        lower, end = self.lower(e), (e + 1) * self.tau
        out: dict[Key, list[Tup]] = {}
        for k, kl in self.store.lookup_many(index, keys).items():
            sl = view_slice(kl, lower, end)
            if sl:
                out[k] = sl
        return out

    def view_keys(self, index: Index, e: int) -> list[Key]:
        """The distinct keys (under ``index``) of the view of epoch ``e``, in the order they first occur."""
        return self._column(index).distinct(self.lower(e), (e + 1) * self.tau)

    def held_keys(self, index: Index, m: Matcher, e: int) -> list[Key]:
        """The distinct keys (under ``index``) of the view of epoch ``e`` that the set of ``m`` holds, in the
        order they first occur: a request sent as a Bloom filter tested against the window, as arrays."""
        return self._column(index).held(m, self.lower(e), (e + 1) * self.tau)

    def _column(self, index: Index) -> KeyColumn:
        col = self.columns.get(index)
        if col is None:
            col = self.columns[index] = KeyColumn(index, self.store.tuples())
        return col

    def boundary(self, start: int) -> list[Tup]:
        """The window as a generation starting at epoch ``start`` finds it: tuples of epochs before
        ``start`` that heads of ``start`` may still join (seq order)."""
        lower, end = self.lower(start), start * self.tau
        field_ = 0 if lower[0] == "ts" else 1
        return [t for t in self.store.tuples() if t.ts < end and (t.ts, t.seq)[field_] >= lower[1]]

    def count_before(self, epoch: int) -> int:
        """How many tuples of the stream came before ``epoch`` (tuple windows; 0 otherwise)."""
        return self.progress.through(epoch - 1) if self.progress is not None else 0

    # ------------------------------------------------------------------ checkpoints
    def snapshot(self, encode: Any, with_store: bool) -> dict[str, Any]:
        """Plain data (``encode``: Tup -> bytes); the store's tuples only ``with_store``.  The kept batches are
        named by their epochs, not written out: every tuple of a kept batch is in the store (a purge at ``low``
        removes only tuples of epochs below it), and a restore finds the store as of this snapshot (loaded from
        it, or a durable store rolled back to it), so :meth:`restore` cuts them from the store again.  Why: in a
        backlog's drain a window holds hundreds of epochs its readers have not reached, and encoding them took
        two thirds of a node's checkpoint."""
        out: dict[str, Any] = {
            "next": self.next, "purged": self.purged, "watermark": self.watermark, "since": self.since,
            "source": [encode(t) for t in self.source],
            "batch_epochs": list(self.batches),
            "progress": self.progress.snapshot() if self.progress is not None else None,
            "lane": (self.lane.epoch, self.lane.cursor),
        }
        if with_store:
            out["store"] = [encode(t) for t in self.store.tuples()]
        return out

    def restore(self, data: dict[str, Any], decode: Any) -> None:
        self.next, self.purged, self.watermark = data["next"], data["purged"], data["watermark"]
        self.since = int(data.get("since", 0))
        self.source = deque(decode(b) for b in data["source"])
        self.progress = Progress.restored(data["progress"]) if data["progress"] is not None else None
        self.lane.epoch, self.lane.cursor = data["lane"]
        self.columns = {}
        if "store" in data:
            self.store.load([decode(b) for b in data["store"]])
        if "batches" in data:   # a checkpoint written before batches were named by epoch
            self.batches = {int(e): [decode(b) for b in bs] for e, bs in data["batches"].items()}
        else:
            self.batches = self._cut_batches([int(e) for e in data["batch_epochs"]])

    def _cut_batches(self, epochs: list[int]) -> dict[int, list[Tup]]:
        """The batches B_e of ``epochs`` (ascending) cut from the store: its tuples with ts in epoch e (from
        ``since`` for epoch 0), in seq order -- the order they were inserted in (seq is the rank in ts order)."""
        if not epochs:
            return {}
        tups = self.store.tuples()
        ts = [t.ts for t in tups]
        tau, out = self.tau, {}
        for e in epochs:
            lo = bisect_left(ts, e * tau if e else self.since)
            out[e] = tups[lo:bisect_left(ts, (e + 1) * tau, lo)]
        return out
