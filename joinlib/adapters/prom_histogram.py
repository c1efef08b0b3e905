"""A Prometheus histogram whose observations cost a bisection and two list updates.

A node observes one processing time per phase it runs and one transmission time per message it
receives: tens of thousands per second while it drains a backlog.  prometheus_client's
:class:`~prometheus_client.Histogram` takes a lock and walks its buckets in Python for each (about
2 µs, 5-8 % of a busy node's CPU in a profile of the routers drain).  :class:`FastHistogram` keeps,
per label tuple, one count per bucket and the sum in a plain list, and turns them into the same
exposition (``_bucket`` cumulative with ``le``, ``_count``, ``_sum``) only when scraped, through the
client's public custom-collector API.

Thread safety: observations come from the node's loop thread, scrapes from the HTTP server's.  A
scrape copies each list in one step (a slice under the GIL), so it sees every observation but the
one under way, possibly with its count and not its sum: the next scrape has both.  Series are never
removed (as with the client's histograms).
"""
from __future__ import annotations

from bisect import bisect_left
from typing import Iterator, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString


class FastHistogram(Collector):
    """``observe(labels, value)``: ``labels`` a tuple of label values in ``labelnames``' order.  Bucket ``i``
    counts the values ``<= buckets[i]`` that exceed ``buckets[i - 1]`` (the client's rule: ``le`` is inclusive);
    the last slot counts the rest (``+Inf``)."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str], buckets: Sequence[float],
                 registry: CollectorRegistry) -> None:
        self.name, self.documentation, self.labelnames = name, documentation, list(labelnames)
        self.bounds = [float(b) for b in buckets]
        if sorted(self.bounds) != self.bounds or len(set(self.bounds)) != len(self.bounds):
            raise ValueError(f"{name}: buckets must increase strictly, got {list(buckets)}")
        self._les = [floatToGoString(b) for b in self.bounds] + ["+Inf"]
        self._series: dict[tuple[str, ...], list[float]] = {}   # label values -> [count per bucket..., sum]
        registry.register(self)

    def observe(self, labels: tuple[str, ...], value: float) -> None:
        s = self._series.get(labels)
        if s is None:
            s = self.series(labels)
        s[bisect_left(self.bounds, value)] += 1
        s[-1] += value

    def series(self, labels: tuple[str, ...]) -> list[float]:
        """The counts of ``labels`` (made if new): [count per bucket..., sum], the list :meth:`observe` adds to, the
        same list for the histogram's life -- a caller that observes one series often may keep it and add to it
        itself (``s[bisect_left(self.bounds, value)] += 1; s[-1] += value``)."""
        s = self._series.get(labels)
        if s is None:
            if len(labels) != len(self.labelnames):
                raise ValueError(f"{self.name}: expected {len(self.labelnames)} label values, got {labels!r}")
            s = self._series[labels] = [0.0] * (len(self.bounds) + 2)
        return s

    def describe(self) -> Iterator[HistogramMetricFamily]:
        yield HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def collect(self) -> Iterator[HistogramMetricFamily]:
        fam = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for labels, s in list(self._series.items()):
            snap = s[:]
            acc, buckets = 0.0, []
            for le, n in zip(self._les, snap[:-1], strict=True):
                acc += n
                buckets.append((le, acc))
            fam.add_metric(list(labels), buckets, snap[-1])
        yield fam


class FastCounter(Collector):
    """A Prometheus counter per label tuple whose ``inc(labels, n)`` is a dict lookup and an addition: a node
    counts each message it ships (bytes and messages, per link and kind), thousands per second in a backlog's
    drain, and prometheus_client's :class:`~prometheus_client.Counter` takes a lock per ``inc`` (with its label
    lookup, ~3 % of a busy node's CPU).  Exposed as the client's counters are (``<name>_total``), without their
    ``_created`` series; thread safety as :class:`FastHistogram`'s (an addition under the GIL)."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str],
                 registry: CollectorRegistry) -> None:
        self.name, self.documentation, self.labelnames = name, documentation, list(labelnames)
        self._series: dict[tuple[str, ...], list[float]] = {}   # label values -> [total]
        registry.register(self)

    def inc(self, labels: tuple[str, ...], n: float = 1.0) -> None:
        s = self._series.get(labels)
        if s is None:
            if len(labels) != len(self.labelnames):
                raise ValueError(f"{self.name}: expected {len(self.labelnames)} label values, got {labels!r}")
            s = self._series[labels] = [0.0]
        if n < 0:
            raise ValueError(f"{self.name}: counters can only be incremented by non-negative amounts")
        s[0] += n

    def value(self, labels: tuple[str, ...]) -> float:
        """The total of ``labels`` (0 if never counted)."""
        s = self._series.get(labels)
        return s[0] if s is not None else 0.0

    def describe(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def collect(self) -> Iterator[CounterMetricFamily]:
        fam = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for labels, s in list(self._series.items()):
            fam.add_metric(list(labels), s[0])
        yield fam
