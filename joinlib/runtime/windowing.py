"""Window semantics as seen by one probing head tuple, and when tuples die.

The project's exact contract (``shared/notes/000-semijoin-core.md``): s_k joins head
s_h iff s_k ≺ s_h in the order (ts, stream position, id) and s_k lies in W_k as seen
by s_h — time window: s_h.ts − T_k <= s_k.ts; tuple window: s_k is among the last
w_k tuples of S_k preceding s_h.  Within one key's list (seq order) both conditions
cut a contiguous range, so a probe is two bisections (the paper's T-limit join,
made O(log n) by the hash index).

*Deadline* of a tuple: the last batch epoch whose heads may still join it.  Time
window: floor((ts + T) / τ).  Tuple window: the epoch of its w-th successor in the
stream.  The *view* of a window at epoch e is what heads of epoch e may join: tuples
of epochs <= e whose deadline is >= e.  A store may hold more (newer tuples already
inserted, older ones whose purge is still held back by a slower reader): probes and
semijoins cut the view out by bisection, so epochs pipeline and purges lag safely.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import Any, Optional

from joinlib.model import Stream, Tup
from joinlib.state.base import KeyList

Bound = tuple[str, int]  # ("ts", x): drop ts < x;  ("seq", y): drop seq < y


class Progress:
    """Arrival timestamps per epoch of a tuple-window stream, as known at one place.

    Needed to count how many tuples of S_k precede a head (the count limit) where
    the stream's tuples are not all present (replicas of SM-S1 / SM-S2).  It may start
    mid-stream (:meth:`start_at`): a replica of a generation installed at epoch E knows only
    how many tuples came before E.
    """

    __slots__ = ("_first", "_ts", "_before")

    def __init__(self) -> None:
        self._first = 0                      # first epoch kept
        self._ts: list[list[int]] = []       # arrival ts per kept epoch
        self._before: list[int] = []         # tuples in epochs before each kept epoch

    def start_at(self, epoch: int, base: int) -> None:
        """Begin at ``epoch``: ``base`` tuples of the stream arrived before it."""
        self._first, self._ts, self._before = epoch, [], [base]

    def add_epoch(self, epoch: int, ts: list[int]) -> None:
        """Record epoch ``epoch``'s arrivals; epochs must come in order, none skipped."""
        if not self._before:
            self._first = epoch
            self._before.append(0)
        elif self._ts:
            if epoch != self._first + len(self._ts):
                raise ValueError(f"progress epochs must be consecutive: got {epoch} after "
                                 f"{self._first + len(self._ts) - 1}")
            self._before.append(self._before[-1] + len(self._ts[-1]))
        elif epoch != self._first:
            raise ValueError(f"progress started at epoch {self._first}, got {epoch}")
        self._ts.append(ts)

    def through(self, epoch: int) -> int:
        """N(epoch): tuples of the stream with epoch <= ``epoch``."""
        if not self._before:
            return 0
        i = epoch - self._first
        if i < 0 or not self._ts:
            return self._before[0]
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

    def snapshot(self) -> dict[str, Any]:
        return {"first": self._first, "ts": [list(x) for x in self._ts], "before": list(self._before)}

    @classmethod
    def restored(cls, data: dict[str, Any]) -> "Progress":
        p = cls()
        p._first, p._ts, p._before = int(data["first"]), [list(x) for x in data["ts"]], list(data["before"])
        return p


def valid_range(kl: KeyList, stream: Stream, head: Tup, progress: Optional[Progress], tau: int) -> tuple[int, int]:
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


def expiry_bound(stream: Stream, epoch: int, tau: int, progress: Optional[Progress]) -> Bound:
    """Tuples below this bound have a deadline < ``epoch``: the window of epoch ``epoch`` has none."""
    w = stream.window
    if w.is_time:
        # deadline < e  <=>  floor((ts+T)/tau) <= e-1  <=>  ts < e*tau - T
        return ("ts", epoch * tau - w.size)
    # deadline < e  <=>  the w-th successor arrived by epoch e-1  <=>  seq < N(e-1) - w
    assert progress is not None, "tuple windows need progress"
    return ("seq", progress.through(epoch - 1) - w.size)


def purge_bound(stream: Stream, epoch: int, tau: int, progress: Optional[Progress]) -> dict[str, int]:
    """Keyword arguments for ``store.purge_below`` dropping tuples with deadline < ``epoch``."""
    field_, value = expiry_bound(stream, epoch, tau, progress)
    return {field_: value}


def below(t: Tup, bound: Bound) -> bool:
    """Is ``t`` below ``bound`` (dead by the bound's epoch)?"""
    return (t.ts if bound[0] == "ts" else t.seq) < bound[1]


def view_slice(kl: KeyList, lower: Bound, end_ts: int) -> list[Tup]:
    """The tuples of ``kl`` in a window view: not below ``lower``, ts < ``end_ts``."""
    hi = bisect_left(kl.ts, end_ts, kl.lo)
    arr = kl.ts if lower[0] == "ts" else kl.seq
    lo = bisect_left(arr, lower[1], kl.lo, hi)
    return kl.tups[lo:hi]


def epoch_of(ts: int, tau: int) -> int:
    return ts // tau
