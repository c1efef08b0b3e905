"""Cutting one live stream's released tuples into per-partition batches of whole epochs (:class:`EpochSplit`):
the pure part of the re-keying stage (:mod:`joinlib.node.rekey`), kept apart so that it can be tested
without Kafka.

Why whole epochs: a re-keyer that restarts from its checkpoint releases the same tuples again (the live
ingest is deterministic given its logged idle advances), but not in the same slices -- the consumer's fetches,
and so the watermark's steps, differ from run to run.  What *is* the same is the content of every epoch once the
watermark has passed its end.  So a batch names the last epoch it covers, and after a restart every epoch up to
the last one already in the topic is left out: the topic holds each epoch of each partition once.
"""
from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from typing import Any, Callable, Optional

from joinlib.model import Tup
from joinlib.protocol import avro


@dataclass(frozen=True)
class EpochBatch:
    """What goes to Kafka partition ``part``: the tuples of the epochs after the previous batch's up to
    ``last_epoch`` (perhaps none), and ``watermark`` = the end of ``last_epoch`` (no later tuple is below it)."""

    part: int
    last_epoch: int
    tuples: tuple[Tup, ...]
    watermark: int


class EpochSplit:
    """One stream's released tuples (in (ts, id) order, ranked) -> :class:`EpochBatch` per plan partition.

    ``route``: tuple -> partition (None: a stream the plan does not partition goes whole to every one).  Every
    partition gets a batch whenever the watermark completes an epoch it has not had, even an empty one: the
    node instance of a partition without data must still see the watermark move to close its epochs.
    ``written[p]``: the last epoch sent to partition p (-1: none); ``held``: released tuples of the epoch not
    complete yet."""

    def __init__(self, d: int, route: Optional[Callable[[Tup], int]], tau: int) -> None:
        if d < 1 or tau < 1:
            raise ValueError(f"an epoch split needs partitions >= 1 and tau >= 1, not {d}, {tau}")
        self.d, self.route, self.tau = d, route, tau
        self.written = [-1] * d
        self.held: list[Tup] = []

    def add(self, tups: list[Tup]) -> None:
        """Released tuples (each later than those added before)."""
        self.held.extend(tups)

    def close(self, watermark: int) -> list[EpochBatch]:
        """The batches that the stream's watermark ``watermark`` completes (every epoch ending at or below it)."""
        last = watermark // self.tau - 1
        if last <= min(self.written):
            return []
        end = (last + 1) * self.tau
        cut = bisect_left(self.held, end, key=lambda t: t.ts)
        done, self.held = self.held[:cut], self.held[cut:]
        per: list[list[Tup]] = [done] * self.d
        if self.route is not None:
            per = [[] for _ in range(self.d)]
            for t in done:
                per[self.route(t)].append(t)
        out = []
        for p in range(self.d):
            w = self.written[p]
            if last <= w:
                continue
            lo = (w + 1) * self.tau   # epochs up to w are in the topic already (a restart redoes them)
            tups = per[p] if not per[p] or per[p][0].ts >= lo else [t for t in per[p] if t.ts >= lo]
            out.append(EpochBatch(p, last, tuple(tups), end))
            self.written[p] = last
        return out

    def skip_to(self, part: int, epoch: int) -> None:
        """Partition ``part`` already holds every epoch up to ``epoch`` (found in the topic after a restart)."""
        self.written[part] = max(self.written[part], epoch)

    def snapshot(self) -> dict[str, Any]:
        return {"written": list(self.written), "held": [avro.encode_tuple(t) for t in self.held]}

    def restore(self, d: dict[str, Any]) -> None:
        written = list(d["written"])
        if len(written) != self.d:
            raise ValueError(f"the checkpoint splits into {len(written)} partitions, the plan into {self.d}")
        self.written = written
        self.held = [avro.decode_tuple(b) for b in d["held"]]
