"""A deterministic simulated network with per-link latency, bandwidth and FIFO order.

Virtual time only: a message sent at time t on link (a, b) departs when the link is
free, occupies it for bytes / bandwidth, and arrives ``latency`` later.  Every message is
charged the bytes of its Avro encoding (:func:`joinlib.protocol.wire.envelope_size`, counted
without writing them): the bytes Kafka would carry.  Node processing time is measured (wall
clock) but does not move virtual time, so a run is reproducible bit for bit.
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
    _queue: list[tuple[float, int, Event]] = field(default_factory=list)
    _seq: int = 0
    #: per (src, dst, kind) sent on: the link's latency and bandwidth (the model's, looked up once), the time the
    #: link is free from (a cell the link's kinds share) and the kind's stats -- one lookup per message
    _routes: dict[tuple[str, str, str], tuple[float, float, list[float], LinkStats]] = field(default_factory=dict)
    _free_at: dict[tuple[str, str], list[float]] = field(default_factory=dict)

    def send(self, env: Envelope) -> None:
        size = self.size_of(env)
        now = self.now
        route = self._routes.get((env.src, env.dst, env.kind))
        if route is None:
            route = self._route(env.src, env.dst, env.kind)
        lat, bw, free, st = route
        tx = size * 8.0 / bw
        depart = free[0] if free[0] > now else now
        free[0] = depart + tx
        st.messages += 1
        st.bytes += size
        st.transfer_ms += lat + tx
        st.queued_ms += depart - now
        if self.decode is not None:
            env = self.decode(env)
        self._seq += 1
        heapq.heappush(self._queue, (depart + tx + lat, self._seq, ("msg", (env, now))))

    def _route(self, src: str, dst: str, kind: str) -> tuple[float, float, list[float], LinkStats]:
        lat, bw = self.model.link(src, dst)
        free = self._free_at.setdefault((src, dst), [0.0])
        st = self.stats.setdefault((src, dst, kind), LinkStats())
        route = self._routes[(src, dst, kind)] = (lat, bw, free, st)
        return route

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
