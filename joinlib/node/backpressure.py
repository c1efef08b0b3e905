"""Back-pressure on a node's inbound topic: stop reading other sites' messages while they are far ahead.

A node reads its home sources and ``node.<query>.<site>.from.<peer>`` through one consumer, a batch of messages at a
time.  A source record is one event; an inbound message is a whole flow's epoch (hundreds of tuples).  A
node that falls behind therefore reads the other sites' data many times faster than its own, and the
host's inbox -- kept in memory and in every checkpoint -- grows with the backlog (the soak's central node:
+220 MB in 3.5 min, ``docs/reliability.md``).  The gate pauses the inbound partition once *every* flow
that ends here has delivered epochs at least ``ahead`` past the oldest epoch the node is still working
on, and resumes it when that margin has shrunk to half.  Pausing only when every flow is that far ahead
cannot deadlock: nothing the node needs before that epoch is still unread on the paused topic (one
producer per flow, so a flow's epochs arrive in order).  A flow that has sent nothing yet, or that skips
epochs, keeps the gate open -- no back-pressure then, never a stall.

librdkafka drops what it prefetched for a paused partition and fetches again from the consumer's
position on resume: nothing is lost, and checkpoints (which save ``position``) are unaffected.
"""
from __future__ import annotations

import math
from typing import Any, Optional

from joinlib.control.check import InboundFlows

PAUSE_AHEAD_S = 4.0   # pause when every inbound flow is this far ahead of the node's work
#: a stream's sources pause at PAUSE_AHEAD_S past its slowest reader once SOURCE_BUDGET tuples are held past it,
#: and at SOURCE_AHEAD_MOST_S whatever it holds (SourceGate)
SOURCE_AHEAD_MOST_S = 30.0
SOURCE_BUDGET = 50_000


class InboundGate:
    """Decides when to pause and resume a node's inbound partition (see the module docstring); the
    caller applies :meth:`decide`'s answer to its consumer (:func:`apply`)."""

    def __init__(self, site: str, interval_ms: int, *, ahead_s: float = PAUSE_AHEAD_S) -> None:
        self.site = site
        self.ahead = max(2, math.ceil(ahead_s * 1000.0 / max(1, interval_ms)))
        self.latest: dict[tuple[int, int, int], int] = {}   # (part, gen, flow rank) -> highest epoch read
        self.paused = False
        self.pauses = 0
        self._needed: dict[int, list[int]] = {}             # id(instance) -> ranks of the flows ending here

    def received(self, part: int, gen: int, flow: int, epoch: int) -> None:
        key = (part, gen, flow)
        if epoch > self.latest.get(key, -1):
            self.latest[key] = epoch

    def decide(self, host: Any) -> Optional[bool]:
        """After a round of work of ``host``: True = pause now, False = resume now, None = no change."""
        margin = self._margin(host)
        if not self.paused and margin is not None and margin >= self.ahead:
            self.paused, self.pauses = True, self.pauses + 1
            return True
        if self.paused and (margin is None or margin < self.ahead // 2):
            self.paused = False
            return False
        return None

    def _margin(self, host: Any) -> Optional[float]:
        """How many epochs every inbound flow is ahead of the oldest epoch in work; None: unknown."""
        cur: Optional[int] = None
        low = math.inf
        for (_, part, gen), inst in host.instances.items():
            epochs = [lane.epoch for lane in inst.lanes if not lane.done]
            if not epochs:
                continue
            cur = min(epochs) if cur is None else min(cur, min(epochs))
            for rank in self._flows_here(inst):
                got = self.latest.get((part, gen, rank), -1)
                if inst.stop is not None and got >= inst.stop:
                    continue   # this generation's flow has sent its last epoch
                low = min(low, got)
        if cur is None or low == math.inf:
            return None
        return low - cur

    def _flows_here(self, inst: Any) -> list[int]:
        ranks = self._needed.get(id(inst))
        if ranks is None:
            flows = InboundFlows(inst.ir, self.site).flows
            ranks = self._needed[id(inst)] = sorted(r for r, (f, _) in flows.items()
                                                    if f.dst == self.site and f.src != self.site)
        return ranks


class SourceGate:
    """Pauses the sources of a stream born here while its window is far ahead of its readers.

    A home window inserts each epoch as soon as the stream's watermark passes it (the insert lane runs
    ahead of everything that reads the window) and purges only what its slowest reader has finished
    (:mod:`joinlib.runtime.window`).  A node that reads its sources faster than it joins therefore keeps
    the backlog *inserted*: in its window store (Redis) and in the epoch batches it holds.  A stream's
    sources are paused once every window of the stream here (one per partition) has inserted ``most``
    epochs past its slowest reader, or ``ahead`` epochs while it holds ``budget`` tuples or more past it, and
    resumed at half that.  Nothing waits for the paused records: a lane that needs a window reads it, so it
    is one of the readers, and the window has inserted far past the slowest of them.

    Why two depths: the depth is how many epochs a backlog's drain can have in flight between reading a
    stream and the rounds of key sets that join it, which cross the broker several times per epoch.  At
    4 s (40 epochs at tau = 100 ms, resumed at 20) the routers workload drained at ~18k events/s with the
    nodes idle most of the time; at 30 s, ~23k with less CPU (fewer pauses, and librdkafka fetches a
    paused partition's records again on resume).  But what a node holds grows with the depth times the
    rate, so beyond ``ahead`` the depth is bounded by tuples held, not by event time.
    """

    def __init__(self, interval_ms: int, *, ahead_s: float = PAUSE_AHEAD_S, most_s: float = SOURCE_AHEAD_MOST_S,
                 budget: int = SOURCE_BUDGET) -> None:
        self.ahead = max(2, math.ceil(ahead_s * 1000.0 / max(1, interval_ms)))
        self.most = max(self.ahead, math.ceil(most_s * 1000.0 / max(1, interval_ms)))
        self.budget = budget
        self.paused: set[str] = set()
        self.pauses = 0

    def decide(self, host: Any, query: str) -> dict[str, bool]:
        """The streams to pause (True) or resume (False) now, after a round of work of ``host``."""
        margins: dict[str, tuple[int, int]] = {}   # per stream, over its windows: the least epochs and tuples ahead
        for (q, _, stream), w in host.windows.items():
            if q == query:
                m, n = (w.next - w.low_epoch(), held(w)) if any(not u.done for u in w.users) else (0, 0)
                was = margins.get(stream)
                margins[stream] = (m, n) if was is None else (min(was[0], m), min(was[1], n))
        out: dict[str, bool] = {}
        for stream, (m, n) in margins.items():
            if stream not in self.paused and (m >= self.most or (m >= self.ahead and n >= self.budget)):
                self.paused.add(stream)
                self.pauses += 1
                out[stream] = True
            elif stream in self.paused and (m < self.ahead // 2 or (m < self.most // 2 and n < self.budget // 2)):
                self.paused.discard(stream)
                out[stream] = False
        return out

    def topics_to_change(self, changes: dict[str, bool], topics: dict[str, str]) -> dict[str, bool]:
        """Per source topic (``topics``: stream -> topic): pause it when every stream it feeds is paused,
        resume it when one of them is not -- a topic is read once for all the streams it feeds."""
        out: dict[str, bool] = {}
        for stream in changes:
            topic = topics.get(stream)
            if topic is None:
                continue
            feeds = [s for s, t in topics.items() if t == topic]
            out[topic] = all(s in self.paused for s in feeds)
        return out


def held(window: Any) -> int:
    """The tuples a home window holds in the epochs at or past its slowest reader's."""
    low, batches = window.low_epoch(), window.batches
    if not batches:
        return 0
    if min(batches) >= low:   # the usual case (a window drops the batches below its readers): no test per epoch
        return sum(map(len, batches.values()))
    return sum(len(b) for e, b in batches.items() if e >= low)


def apply(decision: Optional[bool], consumer: Any, tps: list[Any]) -> None:
    """Pause (True) or resume (False) the partitions ``tps`` on a confluent-kafka ``consumer``; None: nothing."""
    if decision is True and tps:
        consumer.pause(tps)
    elif decision is False and tps:
        consumer.resume(tps)
