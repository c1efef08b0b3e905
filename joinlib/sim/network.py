"""A deterministic simulated network with per-link latency, bandwidth and FIFO order.

Virtual time only: a message sent at time t on link (a, b) departs when the link is
free, occupies it for bytes / bandwidth, and arrives ``latency`` later.  Every message
is Avro-encoded (:mod:`joinlib.protocol.wire`) so the bytes charged are the bytes Kafka would
carry.  Node processing time is measured (wall clock) but does not move virtual time,
so a run is reproducible bit for bit.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from joinlib.model import Network
from joinlib.protocol.messages import Envelope
from joinlib.runtime.report import LinkStats

#: a scheduled event, (kind, payload): ("msg", (envelope, time sent)) or ("tick", batch number).
#: The payload's type follows the kind, which a consumer's ``kind, x = payload`` unpacking cannot
#: narrow, hence Any rather than a union of the two tuple shapes.
Event = tuple[str, Any]


@dataclass
class SimNetwork:
    model: Network
    size_of: Callable[[Envelope], int]
    decode: Optional[Callable[[Envelope], Envelope]] = None  # round-trip through the codec (tests)
    now: float = 0.0
    stats: dict[tuple[str, str, str], LinkStats] = field(default_factory=dict)
    _free_at: dict[tuple[str, str], float] = field(default_factory=dict)
    _queue: list[tuple[float, int, Event]] = field(default_factory=list)
    _seq: int = 0
    _links: dict[tuple[str, str], tuple[float, float]] = field(default_factory=dict)   # the model's, looked up once

    def send(self, env: Envelope) -> None:
        size = self.size_of(env)
        src, dst, now = env.src, env.dst, self.now
        link = (src, dst)
        got = self._links.get(link)
        if got is None:
            got = self._links[link] = self.model.link(src, dst)
        lat, bw = got
        tx = size * 8.0 / bw
        free = self._free_at.get(link, 0.0)
        depart = free if free > now else now
        self._free_at[link] = depart + tx
        arrive = depart + tx + lat
        kind = env.kind
        st = self.stats.get((src, dst, kind))
        if st is None:
            st = self.stats[(src, dst, kind)] = LinkStats()
        st.messages += 1
        st.bytes += size
        st.transfer_ms += lat + tx
        st.queued_ms += depart - now
        if self.decode is not None:
            env = self.decode(env)
        self._seq += 1
        heapq.heappush(self._queue, (arrive, self._seq, ("msg", (env, now))))

    def schedule(self, at: float, event: Event) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (at, self._seq, event))

    def pop(self) -> Optional[tuple[float, Event]]:
        """Next (time, event) in virtual-time order, or None when nothing is left."""
        if not self._queue:
            return None
        at, _, event = heapq.heappop(self._queue)
        self.now = max(self.now, at)
        return at, event
