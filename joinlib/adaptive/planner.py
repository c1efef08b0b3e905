"""Algorithm 1 of seed 003 (the greedy plan generator) and the one-way join cost it minimises.

The unit-time cost of joining the intermediate stream S^i_{k-1} of SEP_i to S_k (Eq. 1 and 2):

    p = 0 (source):       T(r_k·t_k)           + r_k·c_u + r^i_{k-1}·c_p·w_k
    p = 1 (destination):  T(r^i_{k-1}·t^i_{k-1}) + r_k·c_u + r^i_{k-1}·c_p·w_k
    C = min of the two (Eq. 3; a tie goes to the source),   T(x) = c_l + x / c_r

with the link's latency c_l and rate c_r between the intermediate's node and S_k's (0 when both
are on one node), r^i_k = r^i_{k-1}·min(f^i_{k-1}, f_k)·w_k, f^i_k = max(f^i_{k-1}, f_k) and
t^i_k = t^i_{k-1} + t_k: exactly the recurrences of :class:`joinlib.costs.unit_time.SeqState`, which this
module reuses.  t_k is the tuple size *as the runtime encodes it* (what the monitor measures,
:mod:`.stats`), so the transmission part of the cost is the project's byte cost.

Algorithm 1 builds each SEP_i by appending, position by position, the joinable stream of least C
(ties to the stream earlier in the query: deterministic, so that the centralised and the
distributed update -- which compare the same numbers, computed by the same function, in another
order -- reach the same plan).  The distributed update (:mod:`.dnu`) keeps the same invariant
(Eq. 4) with :func:`choose` and :func:`better`.

Eq. 1/2 charge a window replica per sequence and a link's latency once per step, while the
runtime ships a replica once whatever the number of sequences probing it, and sends a message
per flow and batch epoch.  :class:`PlanLevel` (the adaptive runs' default) prices plans as the
runtime ships them -- the plan-level byte cost of :mod:`joinlib.costs` where it applies -- and
:func:`plan_level` is Algorithm 1 with that pricing.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Optional

from joinlib.adaptive.jep import ALGORITHM, DESTINATION, JEP, SEP, SOURCE
from joinlib.costs.unit_time import SeqState, full_bytes, interval_s, stream_rate, transfer_s, window_tuples
from joinlib.model import Query


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


def advance_sequence(query: Query, state: SeqState, stream: str, placement: int) -> SeqState:
    """The intermediate stream after joining ``stream`` with ``placement``."""
    return state.advance(query, stream, ALGORITHM[placement])


def next_streams(query: Query, state: SeqState, among: tuple[str, ...]) -> list[str]:
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
        for s in next_streams(query, state, tuple(n for n in rest if n not in order)):
            c = choose(model, query, state, s)
            if better(c, best):
                best = c
        if best is None:
            missing = ", ".join(n for n in rest if n not in order)
            raise ValueError(f"the join graph does not connect {head} to {missing}")
        order.append(best.stream)
        placement.append(best.placement)
        state = advance_sequence(query, state, best.stream, best.placement)
    return SEP(head, tuple(order), tuple(placement))


def algorithm1(query: Query, model: Optional[Eq12] = None) -> JEP:
    """Algorithm 1: one greedy SEP per head stream, from the statistics in ``query`` -- each step
    priced by Eq. 1/2 (``Eq12``: the paper's), or with the plan-level cost (``PlanLevel``:
    :func:`plan_level`)."""
    m = model or Eq12()
    if isinstance(m, PlanLevel):
        return plan_level(query, m)
    return eq4_plan(query, m)


def eq4_plan(query: Query, model: Eq12) -> JEP:
    """Algorithm 1 with Eq. 1/2 per step, whatever the model's plan-level options: the plan whose
    SEPs hold Eq. 4, which the distributed update's relays keep (:mod:`.dnu`)."""
    return JEP(tuple(greedy_sep(query, model, h) for h in query.names))


# ----------------------------------------------------------------------------- plan-level pricing

Kept = frozenset[tuple[str, str]]   # the windows the plan keeps away from home: (stream, node)


@dataclass(frozen=True)
class PlanLevel(Eq12):
    """Algorithm 1 with the plan-level byte cost where it applies (:func:`plan_level`).

    Eq. 1/2 per step (its processing terms, ``c_p`` and ``c_u``, included), but a window replica
    is charged once per plan, as the runtime ships it once (the byte model of
    :mod:`joinlib.costs`: every shipment named by content, a replica shared by every step probing
    it), and, with ``per_message``, a link's latency once per message -- one per flow and batch
    epoch, as the runtime sends them -- rather than once per step.  ``lookahead``: steps priced
    with the greedy completion of the rest of their sequence behind them (0: plain greedy).  The
    per-step costs of :meth:`Eq12.costs` stay those of Eq. 1/2 (the distributed update's relays
    keep Eq. 4 with them).  ``hub_factor``: a stream whose r·t exceeds every other's by this
    factor makes its site a *hub* candidate (see :func:`plan_level`)."""

    per_message: bool = True
    lookahead: int = 1
    hub_factor: float = 1.5


class _Pricer:
    """Steps priced for :func:`plan_level`: Eq. 1/2 with a window kept in ``kept`` free."""

    def __init__(self, query: Query, model: PlanLevel) -> None:
        self.q, self.m = query, model
        self.messages = 1.0 / interval_s(query) if model.per_message else 1.0

    def transfer(self, src: str, dst: str, nbytes: float) -> float:
        if src == dst:
            return 0.0
        lat_ms, bw_kbps = self.q.network.link(src, dst)
        return self.messages * lat_ms / 1000.0 + nbytes * 8.0 / (bw_kbps * 1000.0)

    def step(self, state: SeqState, stream: str, placement: int, kept: Kept) -> float:
        nxt = self.q.stream(stream)
        r_k, w_k = stream_rate(nxt), window_tuples(nxt)
        cost = r_k * self.m.c_u + state.rate * self.m.c_p * w_k
        if placement == SOURCE:
            if (stream, state.location) not in kept:
                cost += self.transfer(nxt.site, state.location, r_k * full_bytes(nxt))
        else:
            cost += self.transfer(state.location, nxt.site, state.rate * state.full_bytes)
        return cost

    def keeps(self, state: SeqState, stream: str, placement: int, kept: Kept) -> Kept:
        """``kept`` with the window a source placement keeps away from its home."""
        if placement == SOURCE and self.q.stream(stream).site != state.location:
            return kept | {(stream, state.location)}
        return kept


def _complete(pr: _Pricer, state: SeqState, rest: tuple[str, ...], kept: Kept,
              look: int) -> tuple[float, tuple[tuple[str, int], ...], Kept]:
    """The greedy completion of a sequence: (its cost, its steps, the windows kept after it).
    Each step is the joinable (stream, placement) of least cost -- with ``look`` > 0, its own
    cost plus that of completing the sequence after it with ``look`` − 1 -- ties to the source
    placement, then to the stream earlier in the query."""
    total, steps = 0.0, []
    while rest:
        best: Optional[tuple[tuple[float, int, int], str, int]] = None
        for s in next_streams(pr.q, state, rest):
            for p in (SOURCE, DESTINATION):
                c = pr.step(state, s, p, kept)
                after = tuple(n for n in rest if n != s)
                if look > 0 and after:
                    nxt = advance_sequence(pr.q, state, s, p)
                    c += _complete(pr, nxt, after, pr.keeps(state, s, p, kept), look - 1)[0]
                key = (c, p, pr.q.names.index(s))
                if best is None or key < best[0]:
                    best = (key, s, p)
        if best is None:
            raise ValueError(f"the join graph does not connect {state.head} to {', '.join(rest)}")
        _, s, p = best
        total += pr.step(state, s, p, kept)
        kept = pr.keeps(state, s, p, kept)
        steps.append((s, p))
        state, rest = advance_sequence(pr.q, state, s, p), tuple(n for n in rest if n != s)
    return total, tuple(steps), kept


def head_order(query: Query) -> list[str]:
    """The order :func:`plan_level` builds the SEPs in: the heaviest stream (r·t) first -- its
    windows are those the others are likeliest to share -- ties in query order."""
    weight = {s.name: stream_rate(s) * full_bytes(s) for s in query.streams}
    return sorted(query.names, key=lambda n: (-weight[n], query.names.index(n)))


@lru_cache(maxsize=256)
def plan_level(query: Query, model: PlanLevel) -> JEP:
    """Algorithm 1 with plan-level pricing: the SEPs are built one after the other
    (:func:`head_order`), each greedily as in Algorithm 1 (with ``model.lookahead``), and a step
    that probes a window the plan already keeps at that node -- for an earlier SEP or an earlier
    step -- pays nothing to ship it (see :class:`PlanLevel`).

    A greedy SEP never keeps a window for the sake of the SEPs after it, so it misses the plan
    that ships everything to the site of a stream far heavier than the others (a *hub*).  When one
    stream's r·t exceeds every other's by ``model.hub_factor``, the same construction runs once
    more with every window already kept at its site, and the cheaper of the two plans by
    :func:`plan_cost` is the plan (a tie: the first).  Deterministic: the same statistics give the
    same plan at every node (ties: source placement, then query order)."""
    pr = _Pricer(query, model)
    plan = _build(pr, frozenset())
    hub = _hub(query, model)
    if hub is not None:
        seeded = frozenset((s.name, hub) for s in query.streams if s.site != hub)
        other = _build(pr, seeded)
        if plan_level_cost(query, other, model) < plan_level_cost(query, plan, model):
            plan = other
    return plan


def _build(pr: _Pricer, kept: Kept) -> JEP:
    seps: dict[str, SEP] = {}
    for h in head_order(pr.q):
        _, steps, kept = _complete(pr, SeqState.start(pr.q, h), tuple(n for n in pr.q.names if n != h), kept,
                                   pr.m.lookahead)
        seps[h] = SEP(h, tuple(s for s, _ in steps), tuple(p for _, p in steps))
    return JEP(tuple(seps[h] for h in pr.q.names))


def _hub(query: Query, model: PlanLevel) -> Optional[str]:
    """The site of a stream whose r·t exceeds every other's by ``model.hub_factor`` (None: no such)."""
    weight = sorted(((stream_rate(s) * full_bytes(s), s.site) for s in query.streams), key=lambda x: -x[0])
    if len(weight) < 2 or weight[0][0] <= model.hub_factor * weight[1][0]:
        return None
    return weight[0][1]


def plan_level_cost(query: Query, jep: JEP, model: PlanLevel) -> float:
    """The plan-level cost of ``jep`` (seconds per second): Eq. 1/2 per step with every window
    replica charged once (and, with ``per_message``, a link's latency per message)."""
    pr = _Pricer(query, model)
    kept: Kept = frozenset()
    total = 0.0
    for sep in jep.seps:
        state = SeqState.start(query, sep.head)
        for s, p in zip(sep.order, sep.placement, strict=True):
            total += pr.step(state, s, p, kept)
            kept = pr.keeps(state, s, p, kept)
            state = advance_sequence(query, state, s, p)
    return total


def sep_cost(query: Query, model: Eq12, sep: SEP) -> float:
    """C_SEP = Σ_k C^i_{k-1,k} with the placements of ``sep`` (Eq. 1 or 2 per position)."""
    state = SeqState.start(query, sep.head)
    total = 0.0
    for s, p in zip(sep.order, sep.placement, strict=True):
        total += model.costs(query, state, s)[p]
        state = advance_sequence(query, state, s, p)
    return total


def jep_cost(query: Query, jep: JEP, model: Optional[Eq12] = None) -> float:
    """The plan's unit-time cost: Σ over its SEPs (seconds per second of stream time)."""
    m = model or Eq12()
    return sum(sep_cost(query, m, s) for s in jep.seps)
