"""Hostile input on joinlib's own topics: a message that does not decode or validate is rejected --
counted in ``joinlib_rejected_messages_total{site, topic, reason}``, logged as an error, and ignored.

(Bad records of the users' live source topics are not rejected here: they go to ``dlq.<query>`` with
their reason, :mod:`joinlib.node.sources`.)

Logging is bounded: the first :data:`LOG_FIRST` rejections of each (topic, reason) are logged one
by one, then every :data:`LOG_EVERY`-th with the running count, so a flood of garbage cannot flood
the log.  A control message is counted once per reader, whichever of a node's control readers (the
serving loop, a query's run) meets it first.
"""
from __future__ import annotations

import threading
from collections import defaultdict
from typing import Any, Callable, Optional

LOG_FIRST = 20
LOG_EVERY = 1000


class Rejections:
    """``reject(topic, reason, detail, offset)`` for one reader (``site``: a node's site, or
    ``planner``); ``sensor``: anything with ``on_rejected(site, topic, reason)`` (or None)."""

    def __init__(self, site: str, sensor: Any, log: Callable[[str], None]) -> None:
        self.site, self.sensor, self.log = site, sensor, log
        self.counts: defaultdict[tuple[str, str], int] = defaultdict(int)
        self._seen: set[tuple[str, int, int]] = set()   # (topic, partition, offset) already rejected
        self._lock = threading.Lock()

    def reject(self, topic: str, reason: str, detail: str, partition: int = 0,
               offset: Optional[int] = None) -> None:
        with self._lock:
            if offset is not None:
                where = (topic, partition, offset)
                if where in self._seen:
                    return
                if len(self._seen) > 100_000:
                    self._seen.clear()
                self._seen.add(where)
            self.counts[(topic, reason)] += 1
            n = self.counts[(topic, reason)]
        if self.sensor is not None:
            try:
                self.sensor.on_rejected(self.site, topic, reason)
            except Exception:  # metrics must never take the reader down
                pass
        if n <= LOG_FIRST or n % LOG_EVERY == 0:
            at = "" if offset is None else f"@{partition}:{offset}"
            more = f" ({n} so far)" if n > LOG_FIRST else ""
            self.log(f"error: rejected a message of {topic}{at} ({reason}): {detail[:300]}{more}")

    def control(self, topic: str) -> Callable[..., None]:
        """The ``reject(offset, reason, detail[, topic])`` callback :func:`joinlib.node.control.decode_control_message`
        takes, for the control topics (``topic`` when the call names none)."""
        return lambda offset, reason, detail, at=topic: self.reject(at, reason, detail, 0, offset)
