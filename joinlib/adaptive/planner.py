"""Algorithm 1 of seed 003 (the greedy plan generator) and the one-way join cost it minimises.

The unit-time cost of joining the intermediate stream S^i_{k-1} of SEP_i to S_k (Eq. 1 and 2):

    p = 0 (source):       T(r_k·t_k)           + r_k·c_u + r^i_{k-1}·c_p·w_k
    p = 1 (destination):  T(r^i_{k-1}·t^i_{k-1}) + r_k·c_u + r^i_{k-1}·c_p·w_k
    C = min of the two (Eq. 3; a tie goes to the source),   T(x) = c_l + x / c_r

with the link's latency c_l and rate c_r between the intermediate's node and S_k's (0 when both
are on one node), r^i_k = r^i_{k-1}·min(f^i_{k-1}, f_k)·w_k, f^i_k = max(f^i_{k-1}, f_k) and
t^i_k = t^i_{k-1} + t_k: exactly the recurrences of :class:`joinlib.cost.SeqState`, which this
module reuses.  t_k is the tuple size *as the runtime encodes it* (what the monitor measures,
:mod:`.stats`), so the transmission part of the cost is the project's byte cost.

Algorithm 1 builds each SEP_i by appending, position by position, the joinable stream of least C
(ties to the stream earlier in the query: deterministic, so that the centralised and the
distributed update -- which compare the same numbers, computed by the same function, in another
order -- reach the same plan).  The distributed update (:mod:`.dnu`) keeps the same invariant
(Eq. 4) with :func:`choose` and :func:`better`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..cost import SeqState, full_bytes, stream_rate, transfer_s, window_tuples
from ..model import Query
from .jep import ALGORITHM, DESTINATION, JEP, SEP, SOURCE


@dataclass(frozen=True)
class Eq12:
    """Seed 003's Eq. (1) and (2) with per-tuple probe and update costs ``c_p`` and ``c_u`` in
    seconds (the project's ``PaperModel`` defaults)."""

    c_p: float = 1e-6
    c_u: float = 5e-6

    def costs(self, query: Query, state: SeqState, stream: str) -> tuple[float, float]:
        """(C at the source, C at the destination) of joining ``stream`` after ``state``."""
        nxt = query.stream(stream)
        r_k, t_k, w_k = stream_rate(nxt), full_bytes(nxt), window_tuples(nxt)
        common = r_k * self.c_u + state.rate * self.c_p * w_k
        at_source = transfer_s(query, nxt.site, state.location, r_k * t_k) + common
        at_dest = transfer_s(query, state.location, nxt.site, state.rate * state.full_bytes) + common
        return at_source, at_dest


@dataclass(frozen=True)
class Choice:
    """The cost of putting ``stream`` next (with its best placement) and how it ranks."""

    stream: str
    cost: float
    placement: int
    rank: int  # the stream's position in the query: the tie-break

    def key(self) -> tuple[float, int]:
        return (self.cost, self.rank)


def choose(model: Eq12, query: Query, state: SeqState, stream: str) -> Choice:
    """Eq. 3: the cheaper placement of joining ``stream`` next (a tie: source)."""
    c0, c1 = model.costs(query, state, stream)
    p = SOURCE if c0 <= c1 else DESTINATION
    return Choice(stream, min(c0, c1), p, query.names.index(stream))


def better(a: Choice, b: Optional[Choice]) -> bool:
    """Is ``a`` a strictly better next stream than ``b`` (cost, then query order)?"""
    return b is None or a.key() < b.key()


def advance(query: Query, state: SeqState, stream: str, placement: int) -> SeqState:
    """The intermediate stream after joining ``stream`` with ``placement``."""
    return state.advance(query, stream, ALGORITHM[placement])


def candidates(query: Query, state: SeqState, among: tuple[str, ...]) -> list[str]:
    """The streams of ``among`` that can be joined next (they share a predicate with the prefix)."""
    return [s for s in among if state.can_join(query, s)]


def greedy_sep(query: Query, model: Eq12, head: str) -> SEP:
    """Lines 3-12 of Algorithm 1 for one head stream."""
    state = SeqState.start(query, head)
    order: list[str] = []
    placement: list[int] = []
    rest = tuple(n for n in query.names if n != head)
    while len(order) < len(rest):
        best: Optional[Choice] = None
        for s in candidates(query, state, tuple(n for n in rest if n not in order)):
            c = choose(model, query, state, s)
            if better(c, best):
                best = c
        if best is None:
            missing = ", ".join(n for n in rest if n not in order)
            raise ValueError(f"the join graph does not connect {head} to {missing}")
        order.append(best.stream)
        placement.append(best.placement)
        state = advance(query, state, best.stream, best.placement)
    return SEP(head, tuple(order), tuple(placement))


def algorithm1(query: Query, model: Optional[Eq12] = None) -> JEP:
    """Algorithm 1: one greedy SEP per head stream, from the statistics in ``query``."""
    m = model or Eq12()
    return JEP(tuple(greedy_sep(query, m, h) for h in query.names))


def sep_cost(query: Query, model: Eq12, sep: SEP) -> float:
    """C_SEP = Σ_k C^i_{k-1,k} with the placements of ``sep`` (Eq. 1 or 2 per position)."""
    state = SeqState.start(query, sep.head)
    total = 0.0
    for s, p in zip(sep.order, sep.placement, strict=True):
        total += model.costs(query, state, s)[p]
        state = advance(query, state, s, p)
    return total


def jep_cost(query: Query, jep: JEP, model: Optional[Eq12] = None) -> float:
    """The plan's unit-time cost: Σ over its SEPs (seconds per second of stream time)."""
    m = model or Eq12()
    return sum(sep_cost(query, m, s) for s in jep.seps)
