"""Window semantics as seen by one probing head tuple, and when tuples die.

The project's exact contract (``shared/notes/000-semijoin-core.md``): s_k joins head
s_h iff s_k ≺ s_h in the order (ts, stream position, id) and s_k lies in W_k as seen
by s_h — time window: s_h.ts − T_k <= s_k.ts; tuple window: s_k is among the last
w_k tuples of S_k preceding s_h.  Within one key's list (seq order) both conditions
cut a contiguous range, so a probe is two bisections (the paper's T-limit join,
made O(log n) by the hash index).

*Deadline* of a tuple: the last batch epoch whose heads may still join it.  Time
window: floor((ts + T) / τ).  Tuple window: the epoch of its w-th successor in the
stream.  At the tick of epoch e a window drops every tuple whose deadline is < e —
the semi-delayed removal of the paper, made exact by processing epochs in order.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right

from ..model import Stream, Tup
from ..state.base import KeyList


class Progress:
    """Arrival timestamps per epoch of a tuple-window stream, as known at one place.

    Needed to count how many tuples of S_k precede a head (the count limit) where
    the stream's tuples are not all present (replicas of SM-S1 / SM-S2).
    """

    __slots__ = ("_first", "_ts", "_before")

    def __init__(self) -> None:
        self._first = 0                      # first epoch kept
        self._ts: list[list[int]] = []       # arrival ts per kept epoch
        self._before: list[int] = []         # tuples in epochs before each kept epoch

    def add_epoch(self, epoch: int, ts: list[int]) -> None:
        """Record epoch ``epoch``'s arrivals; epochs must come in order, none skipped."""
        if not self._ts:
            self._first = epoch
            self._before.append(0)
        else:
            assert epoch == self._first + len(self._ts), "progress epochs must be consecutive"
            self._before.append(self._before[-1] + len(self._ts[-1]))
        self._ts.append(ts)

    def through(self, epoch: int) -> int:
        """N(epoch): tuples of the stream with epoch <= ``epoch``."""
        i = epoch - self._first
        if i < 0:
            return self._before[0] if self._before else 0
        i = min(i, len(self._ts) - 1)
        return self._before[i] + len(self._ts[i])

    def count_preceding(self, epoch: int, ts: int, ties_precede: bool) -> int:
        """How many tuples of the stream precede a head (ts in ``epoch``) in ≺."""
        i = epoch - self._first
        arr = self._ts[i]
        return self._before[i] + (bisect_right(arr, ts) if ties_precede else bisect_left(arr, ts))

    def prune(self, keep_from: int) -> None:
        """Forget epochs before ``keep_from`` (their counts are folded into the base)."""
        drop = min(keep_from - self._first, len(self._ts) - 1)
        if drop > 0:
            del self._ts[:drop], self._before[:drop]
            self._first += drop


def valid_range(kl: KeyList, stream: Stream, head: Tup, progress: "Progress | None", tau: int) -> tuple[int, int]:
    """[lo, hi) indexes of ``kl`` holding the S_k tuples that may join ``head``."""
    ties = stream.pos < head.pos  # equal ts: S_k precedes the head iff its position is lower
    hi = bisect_right(kl.ts, head.ts, kl.lo) if ties else bisect_left(kl.ts, head.ts, kl.lo)
    w = stream.window
    if w.is_time:
        lo = bisect_left(kl.ts, head.ts - w.size, kl.lo, hi)
    else:
        assert progress is not None, "tuple windows need progress"
        before = progress.count_preceding(head.ts // tau, head.ts, ties)
        lo = bisect_left(kl.seq, before - w.size, kl.lo, hi)
    return lo, hi


def purge_bound(stream: Stream, epoch: int, tau: int, progress: "Progress | None") -> dict:
    """Keyword arguments for ``store.purge_below`` dropping tuples with deadline < ``epoch``."""
    w = stream.window
    if w.is_time:
        # deadline < e  <=>  floor((ts+T)/tau) <= e-1  <=>  ts < e*tau - T
        return {"ts": epoch * tau - w.size}
    # deadline < e  <=>  w-th successor arrived by epoch e-1  <=>  seq + w < N(e-1) + ... i.e. seq < N(e-1) - w
    assert progress is not None
    return {"seq": progress.through(epoch - 1) - w.size}


def epoch_of(ts: int, tau: int) -> int:
    return ts // tau
