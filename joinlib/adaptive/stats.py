"""Monitoring: each node measures the streams born there and decides when a change matters.

Over a measurement interval (``interval_ms``, default 200 ms as in the paper's experiments; a whole
number of batch epochs), measured again every ``step_ms`` (default 0: every batch epoch, a sliding
interval; ``step_ms = interval_ms``: back-to-back intervals) a :class:`StreamMonitor` measures its
stream's

* rate r (tuples per second of stream time),
* tuple size t (bytes as the runtime encodes the tuples: what shipping them costs),
* window size w (tuples: r × T for a time window, the count for a tuple window),
* selectivity f of each join attribute: the chance that two tuples share the value, Σ_v p_v²,
  over the last ``key_horizon_ms`` of tuples (for d equally likely values that is the paper's
  1/d; it is also what a join with a skewed stream sees).  A 200 ms sample is too small for a
  stable estimate (10 tuples over 100 values share nothing), hence the longer horizon.

**When a change triggers re-planning.**  The monitor compares each measurement with its
*reference*, the statistics the current plan was made from (the query file's to begin with).
A statistic has changed when new/old or old/new exceeds 1 + ``threshold`` (a relative threshold,
the same up and down: with the default 0.5, a rate from 100/s to 150/s or to 66/s) *and*, for the
rate and the selectivities, the difference is more than ``noise_z`` standard deviations of what
sampling alone gives (Poisson counts: a stream at 100/s shows 20 ± 4.5 tuples per 200 ms, so 30
is only 2.2 σ; equal pairs of join values, likewise).  The change triggers only when
``persistence`` intervals in a row (default 2) show it -- with a sliding interval, every measurement
from the first interval to the last (2 intervals of 200 ms measured every 100 ms: 3 measurements,
two of them on disjoint data) -- and the reference then becomes the mean of those measurements but
the first (which may straddle the change: half of it at the old
rate) -- or the declared statistics, when that mean is within sampling noise of them (the same
test: a stream back at its declared rate is reported at it, not at a noisy sample of it).  With
a sliding interval a change is seen as soon as two disjoint intervals show it, wherever they start
(back-to-back intervals: only when they end on a boundary): up to one epoch earlier; the noise test
is the same, on each interval's counts.  This is the hysteresis: noisy intervals trigger nothing, and
once re-planned, the plan does not move back until the stream moves back past the threshold from
the *new* reference -- a stream hovering around a boundary cannot flap.

Statistics that did not trigger are never reported, so the plan is a function of the reported
values only: every node and the planner see the same numbers (what lets the centralised and
the distributed update reach the same plan).
"""
from __future__ import annotations

import math
from collections import Counter, deque
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping, Optional

from joinlib.costs.unit_time import full_bytes, selectivity, stream_rate, window_tuples
from joinlib.errors import JoinlibError
from joinlib.model import Query, Stream, StreamStats, Tup
from joinlib.protocol import avro


@dataclass(frozen=True)
class MonitorConfig:
    """The measurement and trigger parameters (see the module docstring)."""

    interval_ms: int = 200
    threshold: float = 0.5
    persistence: int = 2
    key_horizon_ms: int = 2000
    noise_z: float = 3.0
    step_ms: int = 0      # how often the last interval is measured: 0 = every batch epoch (sliding)

    def __post_init__(self) -> None:
        if self.interval_ms <= 0:
            raise JoinlibError(f"adaptive: the measurement interval must be positive, not {self.interval_ms} ms")
        if not self.threshold > 0:
            raise JoinlibError(f"adaptive: the threshold is a relative change above 0 (0.5 = 50 %), "
                               f"not {self.threshold}")
        if self.persistence < 1:
            raise JoinlibError("adaptive: persistence counts measurement intervals: at least 1")
        if self.key_horizon_ms < self.interval_ms:
            raise JoinlibError("adaptive: the key horizon must cover at least one measurement interval")
        if self.noise_z < 0:
            raise JoinlibError("adaptive: noise_z counts standard deviations: 0 or more")
        if not 0 <= self.step_ms <= self.interval_ms:
            raise JoinlibError(f"adaptive: the measurement step is 0 (every epoch) up to the interval "
                               f"({self.interval_ms} ms), not {self.step_ms} ms")

    def epochs(self, tau: int) -> int:
        """The interval in batch epochs (rounded, at least one)."""
        return max(1, round(self.interval_ms / tau))

    def step_epochs(self, tau: int) -> int:
        """Batch epochs between two measurements of the last interval (1: a sliding interval)."""
        return min(self.epochs(tau), max(1, round(self.step_ms / tau))) if self.step_ms else 1


@dataclass(frozen=True)
class StreamStatistics:
    """Seed 003's statistics of one stream: r, t, w and f per join attribute."""

    stream: str
    rate: float
    tuple_bytes: float
    window: float
    selectivity: tuple[tuple[str, float], ...] = ()

    def f(self, attr: str) -> Optional[float]:
        return dict(self.selectivity).get(attr)

    def factor(self, ref: "StreamStatistics", interval_s: float) -> float:
        """The largest relative change against ``ref``: max over r, t and every f of
        max(new, old) / min(new, old) (rates floored at one tuple per interval, so that 0 and 1
        tuple do not differ infinitely)."""
        floor = 1.0 / interval_s
        out = _ratio(self.rate, ref.rate, floor)
        out = max(out, _ratio(self.tuple_bytes, ref.tuple_bytes, 1.0))
        for a, f in self.selectivity:
            g = ref.f(a)
            if g is not None:
                out = max(out, _ratio(f, g, 1e-9))
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"stream": self.stream, "rate": round(self.rate, 3), "tuple_bytes": round(self.tuple_bytes, 1),
                "window": round(self.window, 2), "selectivity": {a: round(f, 6) for a, f in self.selectivity}}


def _ratio(a: float, b: float, floor: float) -> float:
    lo, hi = sorted((max(a, 0.0), max(b, 0.0)))
    return max(hi, floor) / max(lo, floor)


def declared(stream: Stream) -> StreamStatistics:
    """The statistics the query file declares (the cost model's defaults where it does not)."""
    return StreamStatistics(stream.name, stream_rate(stream), full_bytes(stream), window_tuples(stream),
                            tuple((a, selectivity(stream, a)) for a in stream.join_attrs))


def with_stats(query: Query, stats: Mapping[str, StreamStatistics]) -> Query:
    """``query`` with the statistics of the streams in ``stats`` replaced (what the planner plans
    with).  Tuple sizes are rounded to whole bytes (``StreamStats.tuple_bytes`` is an int)."""
    streams = []
    for s in query.streams:
        st = stats.get(s.name)
        if st is None:
            streams.append(s)
            continue
        sel = tuple((a, st.f(a) or selectivity(s, a)) for a in s.join_attrs)
        new = StreamStats(rate=st.rate, tuple_bytes=max(1, round(st.tuple_bytes)), attributes=s.stats.attributes,
                          selectivity=sel)
        streams.append(replace(s, stats=new))
    return replace(query, streams=tuple(streams))


#: equal pairs an estimate of f needs (fewer: its relative error exceeds ~30 %, no estimate)
MIN_EQUAL_PAIRS = 10


def collision_selectivity(values: Iterable[Any], min_pairs: int = MIN_EQUAL_PAIRS) -> Optional[float]:
    """Σ_v p_v² estimated without bias from a sample: ordered pairs with equal values / all
    pairs; None when fewer than ``min_pairs`` unordered pairs share a value (too few to tell)."""
    counts = Counter(values)
    n = sum(counts.values())
    same = sum(c * (c - 1) for c in counts.values())
    if n < 2 or same < 2 * min_pairs:
        return None
    return same / (n * (n - 1))


@dataclass
class StreamMonitor:
    """Measures one stream at its home, interval by interval, and says when to report."""

    stream: Stream
    tau: int
    config: MonitorConfig
    reference: StreamStatistics
    next_epoch: int = 0
    count: int = 0
    nbytes: int = 0
    streak: list[StreamStatistics] = field(default_factory=list)
    keys: deque[tuple[int, tuple[Any, ...]]] = field(default_factory=deque)   # (epoch, key) over the horizon
    last: Optional[StreamStatistics] = None
    recent: deque[tuple[int, int]] = field(default_factory=deque)   # (tuples, bytes) per epoch of the interval

    @classmethod
    def of(cls, stream: Stream, tau: int, config: MonitorConfig) -> "StreamMonitor":
        return cls(stream, tau, config, declared(stream))

    def add(self, epoch: int, batch: list[Tup]) -> tuple[Optional[StreamStatistics], Optional[StreamStatistics]]:
        """Take the batch of ``epoch`` (epochs in order, none skipped).  Returns (the interval's
        measurement when ``epoch`` closes one, the statistics to report when they trigger)."""
        if epoch != self.next_epoch:
            raise ValueError(f"monitor of {self.stream.name}: epoch {epoch} after {self.next_epoch - 1}")
        self.next_epoch += 1
        per = self.config.epochs(self.tau)
        self.recent.append((len(batch), sum(len(avro.encode_tuple(t)) for t in batch)))
        while len(self.recent) > per:
            self.recent.popleft()
        self.count = sum(n for n, _ in self.recent)
        self.nbytes = sum(b for _, b in self.recent)
        self.keys.extend((epoch, t.key) for t in batch)
        horizon = max(1, self.config.key_horizon_ms // self.tau)
        while self.keys and self.keys[0][0] <= epoch - horizon:
            self.keys.popleft()
        if (epoch + 1) % self.config.step_epochs(self.tau) or len(self.recent) < per:
            return None, None
        span = per * self.tau / 1000.0
        measured = self._measure(span)
        significant = self._significant(measured, span)
        self.last = measured
        return measured, self._trigger(measured, span, significant)

    def _measure(self, span_s: float) -> StreamStatistics:
        ref = self.reference
        rate = self.count / span_s
        tb = self.nbytes / self.count if self.count else ref.tuple_bytes
        w = rate * self.stream.window.size / 1000.0 if self.stream.window.is_time else float(self.stream.window.size)
        sel = []
        for i, a in enumerate(self.stream.join_attrs):
            f = collision_selectivity(k[i] for _, k in self.keys)
            sel.append((a, f if f is not None else (ref.f(a) or 1.0)))
        return StreamStatistics(self.stream.name, rate, tb, w, tuple(sel))

    def _significant(self, measured: StreamStatistics, span_s: float, ref: Optional[StreamStatistics] = None) -> bool:
        """Is the difference from ``ref`` (default: the reference) more than sampling noise (rate:
        Poisson counts of the interval; f: equal pairs among the horizon's keys)?  Tuple sizes
        need no test."""
        z, ref = self.config.noise_z, ref or self.reference
        lam = ref.rate * span_s
        if _ratio(measured.tuple_bytes, ref.tuple_bytes, 1.0) > 1.0 + self.config.threshold:
            return True
        if abs(measured.rate * span_s - lam) > z * math.sqrt(max(lam, 1.0)):
            return True
        n = len(self.keys)
        pairs = n * (n - 1) / 2
        for a, f in measured.selectivity:
            g = ref.f(a)
            # equal pairs among n draws from d = 1/g values: mean pairs·g, variance pairs·g·(1 + 2ng)
            # (a value drawn c times makes c(c-1)/2 pairs: far more spread than a Poisson count)
            if g is not None and pairs and abs(f - g) * pairs > z * math.sqrt(max(g * pairs * (1 + 2 * n * g), 1.0)):
                return True
        return False

    def streak_needed(self) -> int:
        """Measurements in a row a change must show: ``persistence`` intervals' worth -- with a
        sliding interval, every measurement from the first interval to the last disjoint one
        (persistence 2, 200 ms measured every 100 ms: 3)."""
        per = self.config.epochs(self.tau)
        return (self.config.persistence - 1) * (per // self.config.step_epochs(self.tau)) + 1

    def _trigger(self, measured: StreamStatistics, span_s: float, significant: bool) -> Optional[StreamStatistics]:
        if not significant or measured.factor(self.reference, span_s) <= 1.0 + self.config.threshold:
            self.streak.clear()
            return None
        self.streak.append(measured)
        if len(self.streak) < self.streak_needed():
            return None
        report = mean(self.streak[1:] or self.streak)
        if not self._significant(report, span_s, declared(self.stream)):
            # back within sampling noise of what the query declares: the declared statistics are
            # the better estimate (a 200 ms sample of a 50/s stream reads 30/s one time in eight)
            report = declared(self.stream)
        self.reference = report
        self.streak.clear()
        return report

    # ------------------------------------------------------------------ checkpoints
    def snapshot(self) -> dict[str, Any]:
        return {"next": self.next_epoch, "count": self.count, "bytes": self.nbytes, "recent": list(self.recent),
                "reference": stats_data(self.reference), "streak": [stats_data(s) for s in self.streak],
                "keys": [(e, list(k)) for e, k in self.keys],
                "last": None if self.last is None else stats_data(self.last)}

    def restore(self, data: dict[str, Any]) -> None:
        self.next_epoch, self.count, self.nbytes = data["next"], data["count"], data["bytes"]
        self.recent = deque((n, b) for n, b in data.get("recent", ()))
        self.reference = stats_of(data["reference"])
        self.streak = [stats_of(s) for s in data["streak"]]
        self.keys = deque((e, tuple(k)) for e, k in data["keys"])
        self.last = None if data["last"] is None else stats_of(data["last"])


def mean(stats: list[StreamStatistics]) -> StreamStatistics:
    """The mean of several measurements of one stream (the reported value after a streak)."""
    n = len(stats)
    first = stats[0]
    sel = tuple((a, math.fsum(s.f(a) or 0.0 for s in stats) / n) for a, _ in first.selectivity)
    return StreamStatistics(first.stream, math.fsum(s.rate for s in stats) / n,
                            math.fsum(s.tuple_bytes for s in stats) / n, math.fsum(s.window for s in stats) / n, sel)


def stats_data(s: StreamStatistics) -> list[Any]:
    """Plain data (checkpoints)."""
    return [s.stream, s.rate, s.tuple_bytes, s.window, [list(x) for x in s.selectivity]]


def stats_of(d: list[Any]) -> StreamStatistics:
    return StreamStatistics(d[0], d[1], d[2], d[3], tuple((a, f) for a, f in d[4]))
