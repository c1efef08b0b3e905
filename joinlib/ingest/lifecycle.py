"""A live query's life as the planner service sees it: its origin, and what ``joinlib queries`` shows.

*Origin.*  The runtime numbers epochs from event time 0; a live query's events carry wall-clock
times (ms since the Unix epoch), so each query gets an origin, a multiple of τ: epoch 0 starts there
and records with an earlier event time are late.  ``joinlib submit --since`` chooses it:
``now`` (default: the submission time minus :data:`DEFAULT_LOOKBACK_MS`), ``now-5min``, an ISO-8601
date-time, or a number of ms since the Unix epoch (``0`` for synthetic times that start at 0).

*Status.*  Every node publishes a ``status`` control message every ~2 s (docs/contracts.md) with its
counters; :class:`QueryStats` turns the last two of each site into rates, bytes shipped against
what ``central`` would ship, dead letters and the latest p50/p99 event-to-result latency.
"""
from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Any, Callable, Mapping, Optional, Union

from joinlib.control.messages import DoneMessage, StatusMessage
from joinlib.errors import JoinlibError
from joinlib.model import Query
from joinlib.pmjoin.value_monitor import merge_reports

DEFAULT_LOOKBACK_MS = 2000
_RELATIVE = re.compile(r"now\s*-\s*([0-9]+)\s*(ms|s|min|h)\Z")
_UNIT_MS = {"ms": 1, "s": 1000, "min": 60_000, "h": 3_600_000}


def origin_for(since: Optional[str], now_ms: float, tau: int) -> int:
    """The origin (ms since the Unix epoch, a multiple of ``tau``) for ``--since`` (see above)."""
    text = (since or "now").strip()
    if text == "now":
        t = int(now_ms) - DEFAULT_LOOKBACK_MS
    elif m := _RELATIVE.match(text):
        t = int(now_ms) - int(m.group(1)) * _UNIT_MS[m.group(2)]
    elif re.fullmatch(r"-?[0-9]+", text):
        t = int(text)
    else:
        try:
            dt = datetime.fromisoformat(text)
        except ValueError:
            raise JoinlibError(f"--since {since!r}: expected now, now-5min, an ISO-8601 date-time or a number "
                               "of ms since the Unix epoch") from None
        dt = dt if dt.tzinfo is not None else dt.replace(tzinfo=timezone.utc)
        t = int(dt.timestamp() * 1000)
    if t < 0:
        raise JoinlibError(f"--since {since!r} is before the Unix epoch")
    return t // tau * tau


def unit(site: str, part: Optional[int]) -> str:
    """Who a ``status`` or ``done`` speaks for: a site, or one partition of it (``r1/p2``)."""
    return site if part is None else f"{site}/p{part}"


class QueryStats:
    """The figures of one run of a query, from its nodes' ``status`` and ``done`` messages.

    ``central_site``: where ``central`` would join (its bytes are what the other sites' streams
    cost to ship there, the nodes' ``naive`` counters towards that site)."""

    def __init__(self, query: Query, central_site: str) -> None:
        self.query, self.central = query, central_site
        # per reporting unit (:func:`unit`): a site, or one partition of a scaled-out plan at a site (or the
        # site's re-keyer of a scaled-out live query, joinlib.node.rekey), each with its own counters
        self.last: dict[str, StatusMessage] = {}   # unit -> latest status
        self.prev: dict[str, StatusMessage] = {}   # unit -> the status before it
        self.done: dict[str, DoneMessage] = {}
        self.values: dict[str, Any] = {}   # unit -> its latest per-value report
        self.site_of: dict[str, str] = {}

    def on_status(self, status: Union[StatusMessage, Mapping[str, Any]]) -> None:
        """A node's ``status`` (its JSON is read as :meth:`StatusMessage.from_json` reads it)."""
        st = status if isinstance(status, StatusMessage) else StatusMessage.from_json(status)
        key = unit(st.site, st.part)
        self.site_of[key] = st.site
        if key in self.last:
            self.prev[key] = self.last[key]
        self.last[key] = st
        if st.values is not None:
            self.values[key] = st.values

    def value_stats(self) -> Optional[dict[str, Any]]:
        """The live per-value rates (:func:`joinlib.pmjoin.value_monitor.merge_reports`), None before any report."""
        return merge_reports(self.query, self.values.values()) if self.values else None

    def on_done(self, done: DoneMessage) -> None:
        self.done[unit(done.site, done.part)] = done

    def _rate(self, key: str, get: Callable[[StatusMessage], int]) -> Optional[float]:
        a, b = self.prev.get(key), self.last.get(key)
        if a is None or b is None or key in self.done or b.t_ms is None or a.t_ms is None:
            return None
        dt = (b.t_ms - a.t_ms) / 1000.0
        return None if dt <= 0 else max(0.0, (get(b) - get(a)) / dt)

    def _site_rate(self, site: str, get: Callable[[StatusMessage], int]) -> Optional[float]:
        """The rate of ``get`` summed over the units of ``site`` (None if none has one yet)."""
        rates = [r for key, at in self.site_of.items() if at == site if (r := self._rate(key, get)) is not None]
        return sum(rates) if rates else None

    def summary(self) -> dict[str, Any]:
        """Input rates per stream, results/s, bytes, central's bytes, dead letters, latency."""
        rates: dict[str, Optional[float]] = {}
        for s in self.query.streams:
            rates[s.name] = self._site_rate(s.site, lambda p, n=s.name: (p.inputs or {}).get(n, 0))  # type: ignore[misc]
        res_rates = [r for r in (self._rate(key, lambda p: p.results) for key in self.last) if r is not None]
        latest: dict[str, Union[StatusMessage, DoneMessage]] = {**self.last, **self.done}
        sent = sum(p.sent_bytes for p in latest.values())
        central = sum(n.bytes for p in latest.values() for n in p.naive if n.dst == self.central)
        dead: dict[str, int] = {}
        for p in latest.values():
            for per in (p.dead_letters or {}).values():
                for reason, k in per.items():
                    dead[reason] = dead.get(reason, 0) + k
        lats = [p.latency_ms for p in self.last.values() if p.latency_ms is not None]
        return {
            "input_per_s": {k: None if v is None else round(v, 1) for k, v in rates.items()},
            "results": sum(int(p.results) for p in latest.values()),
            "results_per_s": round(sum(res_rates), 1) if res_rates else None,
            "bytes": sent, "central_bytes": central, "central_site": self.central,
            "bytes_vs_central": round(sent / central, 3) if central else None,
            "dead_letters": dead,
            "p50_latency_ms": max((x["p50"] for x in lats), default=None),
            "p99_latency_ms": max((x["p99"] for x in lats), default=None),
            "watermarks_ms": {k: v for p in self.last.values() for k, v in (p.watermarks_ms or {}).items()},
        }
