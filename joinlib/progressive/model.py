"""Tuples, the join specification, the cost model and the injected clock.

Two notions of time, kept apart on purpose:

* **logical time** (:meth:`VirtualClock.tick`): a strictly monotone integer per event
  (arrival, flush, md-task, dd-task).  ATS, DTS and the md-task history compare these
  ticks, so the paper's closed intervals never tie and duplicate avoidance is exact;
* **virtual time** (:attr:`VirtualClock.now_ms`): milliseconds of a simulated machine.
  Arrivals set it (the simulator's network), work advances it by the cost charged per
  page (:class:`PageCosts`).  Output rates, the arrival-rate statistics and every figure
  are in virtual time; nothing reads the wall clock.
"""
from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field
from typing import Literal, NamedTuple, Optional, Protocol

from joinlib.errors import JoinlibError

Key = int | str
"""A join-attribute value: all ints or all strings within one join (runs are sorted on it)."""
Id = int | str
"""A tuple's id as given in the input (reported in the output, never compared)."""
Phase = Literal["arrival", "reactive", "cleanup"]
PHASES: tuple[Phase, ...] = ("arrival", "reactive", "cleanup")
INF = 1 << 62
"""DTS of a tuple still in memory (the paper's ∞)."""


class SpecError(JoinlibError):
    """A progressive-join setting is out of range (memory, flush size, partitions, costs)."""


class MemTuple(NamedTuple):
    """A tuple in memory: ordered by key, then arrival tick (unique)."""

    key: Key
    ats: int
    id: Id


class DiskTuple(NamedTuple):
    """A flushed tuple: ``dts`` is the tick of the flush that wrote it.  Natural tuple
    order = (key, ats): the order of every sorted run."""

    key: Key
    ats: int
    id: Id
    dts: int


class PairSink(Protocol):
    """Receives each result once, as it is produced: ids of R1 (left) and R2 (right) (a pair, not the
    runtime's result groups of :class:`joinlib.runtime.sink.Sink`)."""

    def __call__(self, left: Id, right: Id, phase: Phase, t: int) -> None: ...


def partition_of(key: Key, partitions: int) -> int:
    """H(key): ``key mod n_part`` for ints (the paper's hash), CRC-32 for strings."""
    if isinstance(key, int):
        return key % partitions
    return zlib.crc32(key.encode()) % partitions


@dataclass(frozen=True)
class PageCosts:
    """What work costs in virtual milliseconds, charged per page (the digest's model); not a plan's cost model
    (:class:`joinlib.costs.unit_time.CostModel`).

    ``c_ran`` / ``c_seq``: one random / sequential page I/O; ``c_cpu``: processing one
    page of tuples in memory (probe, sort, merge).  ``page_tuples`` = 1024-byte pages of
    10-byte records.
    """

    c_ran: float = 1.0
    c_seq: float = 0.1
    c_cpu: float = 0.01
    page_tuples: int = 102

    def __post_init__(self) -> None:
        if min(self.c_ran, self.c_seq, self.c_cpu) < 0:
            raise SpecError("costs must be >= 0 (c_ran, c_seq, c_cpu)")
        if self.page_tuples < 1:
            raise SpecError(f"page_tuples {self.page_tuples}: must be >= 1")

    def pages(self, tuples: int) -> int:
        return -(-tuples // self.page_tuples)

    def scan(self, runs: int, pages: int) -> float:
        """Reading ``runs`` runs of ``pages`` pages in all: one seek per run (Et of an md-task)."""
        return runs * self.c_ran + max(0, pages - runs) * self.c_seq


@dataclass(frozen=True)
class JoinSpec:
    """How a progressive join runs: memory limit M (tuples in memory partitions), flush
    size n_flush, n_part hash partitions, the arrival-statistics decay λ per time unit,
    PSMJ fan-ins, and the cost model.

    ``domain`` is |A_join| when known; it only scales the Er estimates (s = domain / n_part
    is the same for every task, so it never changes which task RPJ picks).
    """

    memory: int
    n_flush: Optional[int] = None
    partitions: int = 20
    sub_partitions: int = 5
    lam: float = 0.9
    time_unit_ms: float = 1000.0
    domain: Optional[int] = None
    fanin: int = 4
    cleanup_fanin: Optional[int] = None
    costs: PageCosts = field(default_factory=PageCosts)

    def __post_init__(self) -> None:
        if self.memory < 2:
            raise SpecError(f"memory {self.memory}: too small, need at least 2 tuples (one per relation)")
        if self.n_flush is not None and not 1 <= self.n_flush <= self.memory:
            raise SpecError(f"flush size {self.n_flush}: must be between 1 and the memory ({self.memory})")
        if self.partitions < 1 or self.sub_partitions < 1:
            raise SpecError("partitions and sub-partitions must be >= 1")
        if not 0.0 <= self.lam <= 1.0:
            raise SpecError(f"lambda {self.lam}: must be in [0, 1]")
        if self.time_unit_ms <= 0:
            raise SpecError("time unit must be > 0")
        if self.domain is not None and self.domain < 1:
            raise SpecError(f"domain {self.domain}: must be >= 1")
        if self.fanin < 2 or (self.cleanup_fanin is not None and self.cleanup_fanin < 2):
            raise SpecError("merge fan-in must be >= 2")

    @property
    def flush_size(self) -> int:
        """n_flush; default M / 10 (the digest's 1000 for M = 10,000)."""
        return self.n_flush if self.n_flush is not None else max(1, self.memory // 10)

    @property
    def s(self) -> float:
        """Distinct join values per partition (the paper's s), 1 when the domain is unknown."""
        return self.domain / self.partitions if self.domain else 1.0

    @property
    def final_fanin(self) -> int:
        """Clean-up fan-in: memory is free by then, so half of it per side, in pages."""
        if self.cleanup_fanin is not None:
            return self.cleanup_fanin
        return max(self.fanin, self.memory // self.costs.page_tuples // 2 - 1)

    def et_dd(self, pages1: int, pages2: int) -> float:
        """The paper's Et of a dd-task: 2·c_ran·(y1 + y2)·⌈log_f max(y1, y2)⌉ (at least one pass)."""
        y = max(pages1, pages2)
        passes = max(1, math.ceil(math.log(y, self.fanin))) if y > 1 else 1
        return 2 * self.costs.c_ran * (pages1 + pages2) * passes


class VirtualClock:
    """The injected clock: logical ticks, virtual milliseconds and the cost charged so far.

    Algorithms call :meth:`tick` for every event and ``charge_*`` for their work; the
    simulator calls :meth:`advance_to` when the next arrival comes after the join is idle.
    """

    def __init__(self, costs: Optional[PageCosts] = None) -> None:
        self.costs = costs or PageCosts()
        self.now_ms = 0.0
        self.cpu_ms = 0.0
        self.io_ms = 0.0
        self.random_pages = 0
        self.seq_pages = 0
        self._tick = 0

    def tick(self) -> int:
        self._tick += 1
        return self._tick

    @property
    def last_tick(self) -> int:
        return self._tick

    def advance_to(self, ms: float) -> None:
        if ms > self.now_ms:
            self.now_ms = ms

    def charge_cpu(self, pages: float) -> None:
        cost = pages * self.costs.c_cpu
        self.cpu_ms += cost
        self.now_ms += cost

    def charge_io(self, random: int = 0, sequential: int = 0) -> None:
        cost = random * self.costs.c_ran + sequential * self.costs.c_seq
        self.random_pages += random
        self.seq_pages += sequential
        self.io_ms += cost
        self.now_ms += cost

    def charge_scan(self, runs: int, pages: int) -> None:
        """Read ``runs`` runs (``pages`` pages): a seek per run, the rest sequential."""
        self.charge_io(random=runs, sequential=max(0, pages - runs))

    @property
    def cost_ms(self) -> float:
        """CPU + I/O charged so far (the numerator of the amortised cost per result)."""
        return self.cpu_ms + self.io_ms
