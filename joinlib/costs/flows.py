"""Expected messages per epoch of every flow of a plan: the arithmetic of the byte model.

Per epoch (one batch interval τ), with b_X = r_X·τ the batch of stream X, w_X its window in
tuples and L_X the number of epochs a tuple stays in the window view (T_X/τ + 1):

* the **intermediate stream** entering a step (:class:`Inter`) has ``rows`` rows per epoch
  (r_new = r_old × w_next × ρ, as in the paper) and ``heads``: head tuples of the epoch with at
  least one row;
* a row finds a partner in the next stream N with probability ``p = 1 − (1 − ρ)^w_N``
  (uniform keys: the semijoin's pass-through fraction);
* the distinct probe keys of an epoch are ``d·(1 − (1 − 1/d)^n)`` for n key draws over d = 1/f
  values, where n is ``heads`` when the probed key is the head's own (every row of a head tuple
  carries its key) and ``rows`` otherwise;
* a tuple of N shipped by a semijoin (SM-S1's ΔW'_2) is shipped once per replica: with the
  requests of every step sharing the replica, a tuple is requested during its L_N epochs with
  probability ``q = 1 − Π (1 − ρ_i)^(n_i·L_N)``;
* DJA replicas (SM-S2, SM-D1) receive every epoch the new distinct values v_J, the count changes
  v_C (a (gap, count) pair per distinct value that gained or lost tuples: about the distinct keys
  of 2b draws) and (SM-S2) s_F, the new tuples of keys held in full;
* key requests (SM-S1, SM-S2, SM-D2) and SM-D2's match answer are key sets as the runtime sends
  them (keys, or a Bloom filter when cheaper); a filter's false positives bring back extra tuples
  (SM-S1: each window tuple is falsely requested with the filter's rate p every epoch; SM-D2: the
  home finds p × its distinct keys more, and the match filter lets p of the other rows through).

**Reductions** (:func:`reduction_flows`, plans with ``Plan.reduce``): on each directed tree edge
u → v, u sends each epoch the keys of its tuples that *newly* pass the key sets of its other
neighbours, and a tuple of v is matched by u's sets while both are in their windows: a tuple of v
meets the u tuples of ``b_u·(L_u + L_v − 1)`` arrivals (its own window's worth of the past and its
lifetime's worth of the future; deltas make this about 2w, not w).  With ``conf(u → v)`` = P(a
tuple of v is, at some point, matched by u's sets)::

    conf(u → v) = 1 − (1 − presence(ρ_uv · Π_indep conf(n → u), b_u (L_u + L_v − 1)) · Π_shared conf(n → u))
                    × (1 − p_uv)^(L_u + L_v − 1)

over u's other neighbours n: *shared* ones probe u on the same attributes as v (one shared key:
whether the key value is confirmed does not depend on which tuple of u carries it, but the
confirmations of a v tuple's several u witnesses reach further in time than one's: the shared
factor is taken over a u lifetime extended by the witnesses' expected spread), *indep* ones on
others; p_uv is the false-positive rate of u's set for v (exact keys: 0).  u sends to v the
keys of ``b_u · Π conf(n → u)`` tuples per epoch (distinct keys of those), and ships
``b_u · Π_all neighbours conf(n → u)`` tuples to the result site.  A skipped direction n → u
(``Reduce.skip``) carries no message and drops out of every product over u's neighbours
(conf = 1: u does not filter by n).  A crossing edge (``Reduce.cross``: off the tree of a cyclic
graph) carries the keys of u's tuples that pass u's *tree* neighbours, and its conf enters only the
product of what ships (no key set waits for a crossing one).

:func:`step_flows`, :func:`replica_flows` and :func:`reduction_flows` turn these into :class:`Msg`
items, the expected content of one message per flow and epoch; :mod:`joinlib.costs.model` prices
them with :class:`~joinlib.costs.encoding.Encoding`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple, Optional, Protocol, Sequence, TypeVar, cast

from joinlib.algorithms.dja import DJA, MIXED, SM_D1, SM_S2
from joinlib.algorithms.record import Flow
from joinlib.algorithms.semijoin import FIFO, SM_D2, SM_S1
from joinlib.algorithms.simple import FULL, SP_D
from joinlib.costs.unit_time import SeqState, interval_s, selectivity, stream_rate, window_tuples
from joinlib.model import Query
from joinlib.plan.ir import Edge, ReducerOp


class KeySets(Protocol):
    """What the flows need to know of key sets as the runtime sends them (implemented by
    :class:`~joinlib.costs.encoding.Encoding`): the runtime's ``fp_cost`` and the false-positive
    rate of a set of ``n`` keys (0 when it sends the keys)."""

    def window_fp_cost(self, stream: str) -> Optional[float]: ...
    def row_fp_cost(self, streams: tuple[str, ...], asked: float) -> Optional[float]: ...
    def request_fp(self, stream: str, index: tuple[int, ...], n: float, fp_cost: Optional[float]) -> float: ...
    def key_filter_fp(self, stream: str, index: tuple[int, ...], n: float, fp_cost: Optional[float]) -> float: ...


def presence(rho: float, n: float) -> float:
    """P(at least one of ``n`` independent trials of probability ``rho`` succeeds)."""
    if n <= 0 or rho <= 0:
        return 0.0
    if rho >= 1:
        return min(1.0, n)
    return -math.expm1(n * math.log1p(-rho))


def distinct(n: float, d: float) -> float:
    """Expected distinct values among ``n`` uniform draws over ``d`` values."""
    if n <= 0:
        return 0.0
    if d <= 1:
        return min(1.0, n)
    return d * -math.expm1(n * math.log1p(-1.0 / d))


@dataclass(frozen=True)
class Inter:
    """The intermediate stream entering a step, per epoch."""

    state: SeqState
    rows: float
    heads: float

    @classmethod
    def start(cls, query: Query, head: str, site: Optional[str] = None) -> "Inter":
        s = SeqState.start(query, head, site)
        b = stream_rate(query.stream(head)) * interval_s(query)
        return cls(s, b, b)


class Probe(NamedTuple):
    """What one step's rows ask of the next stream N, per epoch (a named tuple, like :class:`Msg`: the
    per-head searches make one for each of thousands of steps)."""

    stream: str
    index: tuple[int, ...]   # type: ignore[assignment]  # positions of N's probed attributes (shadows tuple.index)
    rho: float               # P(a row matches a given tuple of N)
    p: float                 # P(a row, or a probe key, finds a partner in N's window)
    draws: float             # independent key draws among the rows
    keys: float              # distinct probe keys
    rows: float              # rows
    parts: tuple[str, ...]   # the streams of a row


def probe(query: Query, inter: Inter, stream: str) -> Probe:
    info = inter.state.info(query, stream)
    n = query.stream(stream)
    head_keyed = any((inter.state.head, a) in ln.cls.attrs for ln in info.links
                     for a in query.stream(inter.state.head).join_attrs)
    draws = inter.heads if head_keyed else inter.rows
    index = tuple(n.attr_index(a) for a in info.key_attrs)
    return Probe(stream, index, info.rho, presence(info.rho, window_tuples(n)), draws,
                 distinct(draws, 1.0 / info.f1), inter.rows, inter.state.joined)


def advance_intermediate(query: Query, inter: Inter, stream: str, algorithm: str, pr: Optional[Probe] = None) -> Inter:
    """The intermediate after joining ``stream``."""
    pr = pr or probe(query, inter, stream)
    state = inter.state.advance(query, stream, algorithm)
    rows = inter.rows * window_tuples(query.stream(stream)) * pr.rho
    return Inter(state, rows, min(inter.heads * pr.p, rows))


class Msg(NamedTuple):
    """The expected content of one message per epoch on a flow: ``what`` is ``rows`` (a full-tuple
    message of ``n`` rows of ``parts``), ``keys`` (``n`` keys of ``stream`` on ``index``),
    ``request`` (``n`` keys sent as the runtime's key_message with ``fp_cost``), ``filter`` (a
    reduction's key set of ``n`` keys, ``fp_cost``), ``shipped`` (a reduction's ShippedBatch of
    ``n`` tuples of ``stream``, ``extra`` arrivals), ``expiry`` (count ``n``, ``extra`` arrival
    timestamps) or ``dja`` (``n`` new values, ``extra`` = (touched entries of v_C, their typical
    gap, their typical count, s_F tuples, arrivals)).

    A named tuple rather than a frozen dataclass: the searches build and hash (as the key of
    :func:`~joinlib.costs.model.price`'s memo) tens of thousands of them, and a tuple's are done in C."""

    name: str
    direction: str
    kind: str
    what: str
    n: float
    stream: str = ""
    index: tuple[int, ...] = ()   # type: ignore[assignment]  # (shadows tuple.index, which no one calls on a message)
    parts: tuple[str, ...] = ()
    extra: tuple[float, ...] = ()
    fp_cost: Optional[float] = None

    @classmethod
    def on(cls, flow: Flow, what: str, n: float, stream: str = "", index: tuple[int, ...] = (),
           parts: tuple[str, ...] = (), extra: tuple[float, ...] = (), fp_cost: Optional[float] = None) -> "Msg":
        """The message of an algorithm's ``flow`` (its name, direction and kind from the algorithm's record)."""
        return cls(flow.name, flow.direction, flow.kind, what, n, stream, index, parts, extra, fp_cost)


#: the update flow of each replica kind (its record builds a new one on each access), and every flow of
#: the step algorithms by (algorithm, flow name)
_UPDATE = {k.name: k.update_flow for k in (FULL, FIFO, MIXED, DJA)}
_FLOWS = {(a.name, f.name): f for a in (SP_D, SM_S1, SM_S2, SM_D1, SM_D2) for f in a.flows}


def step_flows(query: Query, algorithm: str, pr: Probe, share: float, ks: Optional[KeySets] = None) -> list[Msg]:
    """The messages of a cross-site step per epoch; ``share``: this step's part of what its
    (shared) replica ships in answers (SM-S1, SM-S2), see :func:`replica_flows`; ``ks``: how key
    sets are sent (None: keys written out, no false positives)."""
    n = pr.stream
    fc = ks.window_fp_cost(n) if ks is not None else None
    if algorithm == SP_D.name:
        return [Msg.on(_FLOWS[SP_D.name, "data"], "rows", pr.rows, parts=pr.parts)]
    if algorithm == SM_S1.name:
        return [Msg.on(_FLOWS[SM_S1.name, "req"], "request", pr.keys, n, pr.index, fp_cost=fc),
                Msg.on(_FLOWS[SM_S1.name, "resp"], "rows", share, parts=(n,))]
    if algorithm == SM_S2.name:  # share: the keys this step requests
        side = _side(query, n, pr.index)
        p = ks.request_fp(n, pr.index, share, fc) if ks is not None else 0.0
        answered = (share + p * max(0.0, side.entries - share)) * side.per_value
        return [Msg.on(_FLOWS[SM_S2.name, "req"], "request", share, n, pr.index, fp_cost=fc),
                Msg.on(_FLOWS[SM_S2.name, "resp"], "rows", answered, parts=(n,))]
    if algorithm == SM_D1.name:
        return [Msg.on(_FLOWS[SM_D1.name, "data"], "rows", pr.rows * pr.p, parts=pr.parts)]
    if algorithm == SM_D2.name:
        return _smd2_flows(query, pr, ks, fc)
    return []


def _smd2_flows(query: Query, pr: Probe, ks: Optional[KeySets], fc: Optional[float]) -> list[Msg]:
    """SM-D2's keys, the matching keys back (with the false positives of both filters), then the rows."""
    n = pr.stream
    p1 = ks.request_fp(n, pr.index, pr.keys, fc) if ks is not None else 0.0
    entries = _side(query, n, pr.index).entries
    hits = pr.keys * pr.p
    found = hits + p1 * max(0.0, entries - hits)
    fc2 = ks.row_fp_cost(pr.parts, pr.keys) if ks is not None else None
    p2 = ks.request_fp(n, pr.index, found, fc2) if ks is not None else 0.0
    return [Msg.on(_FLOWS[SM_D2.name, "keys"], "request", pr.keys, n, pr.index, fp_cost=fc),
            Msg.on(_FLOWS[SM_D2.name, "match"], "request", found, n, pr.index, fp_cost=fc2),
            Msg.on(_FLOWS[SM_D2.name, "data"], "rows", pr.rows * (pr.p + (1.0 - pr.p) * p2), parts=pr.parts)]


_MEMOS: dict[int, tuple[Query, dict[tuple[object, ...], Any]]] = {}
T = TypeVar("T")


def _cached(fn: Callable[..., T], query: Query, *args: object) -> T:
    """``fn(query, *args)``, memoised per query: the stream-level quantities below are pure functions of a
    (frozen) query's statistics, which the searches would otherwise recompute for each of the thousands
    of steps they price."""
    hit = _MEMOS.get(id(query))
    if hit is None or hit[0] is not query:
        if len(_MEMOS) > 64:
            _MEMOS.clear()
        hit = _MEMOS[id(query)] = (query, {})
    key = (fn, *args)
    out = hit[1].get(key, hit)   # hit: a sentinel no memoised value is
    if out is hit:
        out = hit[1][key] = fn(query, *args)
    return cast(T, out)


def _key_f(query: Query, stream: str, index: tuple[int, ...]) -> float:
    return _cached(_key_f_of, query, stream, index)


def _key_f_of(query: Query, stream: str, index: tuple[int, ...]) -> float:
    s = query.stream(stream)
    return math.prod(selectivity(s, s.join_attrs[i]) for i in index) if index else 1.0


def _lifetime(query: Query, stream: str) -> float:
    """L: epochs a tuple stays in the window view (T/τ + 1; w/b + 1 for tuple windows)."""
    return _cached(_lifetime_of, query, stream)


def _lifetime_of(query: Query, stream: str) -> float:
    s = query.stream(stream)
    tau = interval_s(query)
    if s.window.is_time:
        return s.window.size / 1000.0 / tau + 1
    b = stream_rate(s) * tau
    return (s.window.size / b if b > 0 else 0.0) + 1


class _Side(NamedTuple):
    """What every step probing stream N on one key asks of N (per query, memoised: :func:`_side`): its batch
    b, the arrivals a tuple window's replica is told of (0 for a time window), its window w, L, the key's
    f, the distinct values in the window, their mean count, the new values per batch, and DJA's v_C as
    the runtime sends it: the entries touched per epoch (the distinct keys of the b arrivals and the b
    expiries) and their mean gap in V order."""

    b: float
    arrivals: float
    w: float
    life: float
    key_f: float
    entries: float
    per_value: float
    new: float
    touched: float
    gap: float


def _side(query: Query, stream: str, index: tuple[int, ...]) -> _Side:
    return _cached(_side_of, query, stream, index)


def _side_of(query: Query, stream: str, index: tuple[int, ...]) -> _Side:
    s = query.stream(stream)
    key_f = _key_f(query, stream, index)
    d = 1.0 / key_f
    w, b = window_tuples(s), stream_rate(s) * interval_s(query)
    entries = distinct(w, d)
    new = distinct(b, d) * (1.0 - presence(1.0 / d, w))
    touched = min(distinct(2 * stream_rate(s) * interval_s(query), d), max(entries, 0.0))
    gap = (entries - touched) / touched if touched > 0 else 0.0
    return _Side(b, 0.0 if s.window.is_time else b, w, _lifetime(query, stream), key_f, entries,
                 w / entries if entries > 0 else 0.0, new, touched, gap)


def requested(query: Query, stream: str, probes: list[Probe], fps: Optional[list[float]] = None) -> float:
    """q: P(a tuple of ``stream`` is asked for by one of ``probes`` while in the window); ``fps``:
    each probe's request filter's false-positive rate (a tuple passes one falsely, per epoch)."""
    return _requested(_lifetime(query, stream), probes, fps)


def _requested(life: float, probes: list[Probe], fps: Optional[list[float]]) -> float:
    miss = 1.0
    for i, pr in enumerate(probes):
        miss *= 1.0 - presence(pr.rho, pr.draws * life)
        if fps:
            miss *= 1.0 - presence(fps[i], life)
    return 1.0 - miss


def replica_flows(query: Query, kind: str, stream: str, index: tuple[int, ...],
                  probes: list[Probe], ks: Optional[KeySets] = None) -> tuple[Msg, list[float]]:
    """The update message of a replica per epoch and each requester's share of the answers
    (SM-S1: tuples shipped; SM-S2: keys requested)."""
    if kind not in (FIFO.name, MIXED.name):   # SP-S's and SM-D1's: one update whoever probes it, nothing on request
        return _cached(_fixed_update, query, kind, stream, index), [0.0] * len(probes)
    side = _side(query, stream, index)
    b, arrivals = side.b, side.arrivals
    weights = [pr.draws * pr.rho for pr in probes]
    total_w = sum(weights)
    shares = [w / total_w if total_w > 0 else 1.0 / max(1, len(probes)) for w in weights]
    if kind == FIFO.name:
        fps = None
        if ks is not None:
            fc = ks.window_fp_cost(stream)
            fps = [ks.request_fp(stream, pr.index, pr.keys, fc) for pr in probes]
        shipped = b * _requested(side.life, probes, fps)
        return Msg.on(_UPDATE[FIFO.name], "expiry", shipped, extra=(arrivals,)), [shipped * x for x in shares]
    q = _requested(side.life, probes, None)
    full = b * q * presence(side.key_f, side.w)
    req = side.new * q
    msg = Msg.on(_UPDATE[MIXED.name], "dja", side.new, stream, index,
                 extra=(side.touched, side.gap, side.per_value, full, arrivals))
    return msg, [req * x for x in shares]


def _fixed_update(query: Query, kind: str, stream: str, index: tuple[int, ...]) -> Msg:
    """The update of a full copy (SP-S) or a DJA copy (SM-D1): a function of the stream (and key) only."""
    side = _side(query, stream, index)
    if kind == FULL.name:
        return Msg.on(_UPDATE[FULL.name], "rows", side.b, parts=(stream,))
    return Msg.on(_UPDATE[DJA.name], "dja", side.new, stream, index,
                  extra=(side.touched, side.gap, side.per_value, 0.0, side.arrivals))


# ----------------------------------------------------------------------------- reductions

@dataclass(frozen=True)
class TreeMsg:
    """One direction of a reduction's tree edge, per epoch: ``sender`` -> ``receiver`` carries the
    keys (on ``index``, the sender's edge attributes) of ``tuples`` newly passing tuples, ``keys``
    distinct ones, in a set of false-positive rate ``fp``.  What it offers a tuple of the receiver:
    ``rho`` = P(one of the sender's tuples matches it and passes the sender's other neighbours on
    other attributes), ``draws`` sender tuples per epoch, each valid (its key in a live set of the
    receiver) for ``valid`` epochs, and ``shared`` = P(the key is confirmed by the sender's
    neighbours on the same attributes)."""

    sender: str
    receiver: str
    index: tuple[int, ...]
    tuples: float
    keys: float
    fp: float
    rho: float
    draws: float
    valid: float
    shared: float

    def conf(self, life: float, shrink: float = 1.0) -> float:
        """P(a receiver tuple alive ``life`` epochs is matched, at some point, by these sets);
        ``shrink`` scales the time during which the match must fall (:func:`_passing`)."""
        span = max(0.0, (life + self.valid - 1.0) * shrink)
        true = presence(self.rho, self.draws * span) * self.shared
        return 1.0 - (1.0 - true) * (1.0 - presence(self.fp, span))


def _passing(life: float, ws: list[TreeMsg]) -> tuple[list[float], float]:
    """For a tuple alive ``life`` epochs that must be matched by every set of ``ws`` *at once*:
    P(matched by each) and the expected delay from its arrival until it passes.

    One match each would have windows of ``life + valid`` epochs, but all the matching sets must be
    live together: for witnesses whose validity intervals of lengths l_i fall anywhere, the volume
    of placements where all of them and the tuple's own life l_0 share a point is
    e_k(l_0..l_k) = Σ_j Π_{i≠j} l_i, against Π (l_0 + l_i) for independent overlaps -- 3/4 for two
    equal neighbours, 1/2 for three.  Each neighbour's time is scaled by the k-th root of that
    ratio, exact when matches are rare and harmless when they are certain.  The delay (a later
    witness makes the tuple pass later, so its own key is valid for fewer epochs): l_0 / 2 times
    the weight of placements where a witness starts last, fading as passing becomes certain."""
    if not ws:
        return [], 0.0
    ls = [life] + [max(1.0, w.valid) for w in ws]
    e = sum(math.prod(ls[:j] + ls[j + 1:]) for j in range(len(ls)))
    pairs = math.prod(life + x for x in ls[1:])
    shrink = (e / pairs) ** (1.0 / len(ws)) if pairs > 0 else 1.0
    confs = [w.conf(life, shrink) for w in ws]
    passed = math.prod(confs)
    late = (e - math.prod(ls[1:])) / e if e > 0 else 0.0
    return confs, life / 2.0 * late * math.sqrt(max(0.0, 1.0 - passed))


def _spread(mu: float) -> float:
    """E[(m − 1) / (m + 1) | m ≥ 1] for m Poisson with mean ``mu``: the expected range of m
    uniform points over an interval, as a fraction of it -- how much further than one witness's
    the witnesses of one key reach."""
    if mu <= 0:
        return 0.0
    if mu > 50:
        return (mu - 1.0) / (mu + 1.0)
    pk, total, mass = math.exp(-mu), 0.0, 0.0
    for m in range(1, int(mu + 8.0 * math.sqrt(mu) + 10.0)):
        pk *= mu / m
        total += pk * (m - 1) / (m + 1)
        mass += pk
    return total / mass if mass > 0 else 0.0


class _Tree:
    """A lowered reduction's structure, for pricing it under many skip sets: per directed edge u -> v its
    attributes at u, and the directions whose key sets its message depends on (``upstream``: those into u
    from its other tree neighbours, and theirs, recursively)."""

    def __init__(self, reducers: Sequence[ReducerOp]) -> None:
        self.reducers = reducers   # kept: the memo names them by identity
        self.mine: dict[tuple[str, str], tuple[int, ...]] = {}
        for op in reducers:
            for e in op.edges:
                self.mine.setdefault((op.stream, e.stream), e.mine)   # the first edge to a stream, as ReducerOp.edge
        self.into = {op.stream: list(op.filters) for op in reducers}   # every set a stream is filtered by
        self.tree_into = {u: [e for e in es if not e.cross] for u, es in self.into.items()}   # a set waits for these
        self._up: dict[tuple[str, str], frozenset[tuple[str, str]]] = {}
        self._ship: dict[str, frozenset[tuple[str, str]]] = {}

    def upstream(self, u: str, v: str) -> frozenset[tuple[str, str]]:
        hit = self._up.get((u, v))
        if hit is None:
            hit = self._up[(u, v)] = frozenset().union(
                *({(e.stream, u)} | self.upstream(e.stream, u) for e in self.tree_into[u] if e.stream != v))
        return hit

    def shipping(self, u: str) -> frozenset[tuple[str, str]]:
        """The directions what ``u`` ships depends on."""
        hit = self._ship.get(u)
        if hit is None:
            hit = self._ship[u] = frozenset().union(
                *({(e.stream, u)} | self.upstream(e.stream, u) for e in self.into[u]))
        return hit


@dataclass
class TreeMemo:
    """:func:`reduction_flows`' memo across the reductions of one query (one ``ks``).  A directed edge's
    message is a function of the edge, its sender's attributes toward its other tree neighbours and
    the messages they send it (``msgs``); what a stream ships, of the stream and the messages it
    filters by (``shipped``).  The messages are hash-consed: every one comes from ``msgs``, so a key
    names the messages it depends on by identity (``id``), which is cheaper to hash and compare than
    their ten fields.  For the reductions lowered once and priced under many skip sets (``auto``'s skip
    search), ``by_skip`` keeps an edge's message and ``shipped_by_skip`` what a stream ships, per (lowering,
    the skipped directions it depends on): a trial that skips one more direction finds most of them there.
    The tables are cleared together, so no key outlives what it names."""

    msgs: dict[tuple[str, str, tuple[int, ...], tuple[tuple[int, ...], ...], tuple[int, ...]], TreeMsg] = \
        field(default_factory=dict)
    shipped: dict[tuple[str, tuple[int, ...]], float] = field(default_factory=dict)
    by_skip: dict[tuple[int, str, str, frozenset[tuple[str, str]]], TreeMsg] = field(default_factory=dict)
    shipped_by_skip: dict[tuple[int, str, frozenset[tuple[str, str]]], float] = field(default_factory=dict)
    trees: dict[int, _Tree] = field(default_factory=dict)

    def tree(self, reducers: Sequence[ReducerOp]) -> _Tree:
        hit = self.trees.get(id(reducers))
        if hit is None or hit.reducers is not reducers:
            hit = self.trees[id(reducers)] = _Tree(reducers)
        return hit

    def trim(self) -> None:
        """Bound the memory of a long search (the memo is only a shortcut)."""
        if len(self.msgs) + len(self.shipped) + len(self.by_skip) + len(self.shipped_by_skip) > 200_000:
            for table in (self.msgs, self.shipped, self.by_skip, self.shipped_by_skip, self.trees):
                table.clear()


def reduction_flows(query: Query, reducers: Sequence[ReducerOp], ks: Optional[KeySets] = None,
                    rhos: Optional[dict[tuple[str, str], float]] = None, shared_memo: Optional[TreeMemo] = None,
                    skip: frozenset[tuple[str, str]] = frozenset(),
                    ) -> tuple[dict[tuple[str, str], TreeMsg], dict[str, float]]:
    """A reduction's key sets per directed tree edge (those not skipped) and tuples shipped to the
    result site per stream and epoch (see the module docstring).  ``rhos``: a memo of the pairs'
    join selectivities, and ``shared_memo`` one of the edges' messages (:class:`TreeMemo`), kept by a
    caller that prices many reductions of one query with one ``ks``.  ``skip``: directions skipped besides
    the reducers' own (a skipped direction is one without flows: the skip search lowers a reduction once)."""
    shared = TreeMemo() if shared_memo is None else shared_memo
    shared.trim()
    flows = _TreeFlows(query, shared.tree(reducers), ks, {} if rhos is None else rhos, shared, skip)
    edges = {(op.stream, e.stream): flows.msg(op.stream, e.stream) for op in reducers for e in op.sends
             if (op.stream, e.stream) not in skip}
    return edges, {op.stream: flows.shipped(op.stream) for op in reducers}


class _TreeFlows:
    """The messages of one reduction under one skip set (see :func:`reduction_flows`)."""

    def __init__(self, query: Query, tree: _Tree, ks: Optional[KeySets], rhos: dict[tuple[str, str], float],
                 shared: TreeMemo, skip: frozenset[tuple[str, str]]) -> None:
        self.query, self.tree, self.ks, self.rhos, self.shared, self.skip = query, tree, ks, rhos, shared, skip
        self.tau = interval_s(query)
        self.memo: dict[tuple[str, str], TreeMsg] = {}

    def msg(self, u: str, v: str) -> TreeMsg:
        hit = self.memo.get((u, v))
        if hit is None:
            key = (id(self.tree.reducers), u, v, self.skip & self.tree.upstream(u, v))
            hit = self.shared.by_skip.get(key)
            if hit is None:
                hit = self.shared.by_skip[key] = self._msg(u, v)
            self.memo[(u, v)] = hit
        return hit

    def _msg(self, u: str, v: str) -> TreeMsg:
        mine = self.tree.mine[(u, v)]
        others = [e for e in self.tree.tree_into[u] if e.stream != v and (e.stream, u) not in self.skip]
        ws = [self.msg(e.stream, u) for e in others]
        key = (u, v, mine, tuple(e.mine for e in others), tuple(map(id, ws)))
        out = self.shared.msgs.get(key)
        if out is None:
            out = self.shared.msgs[key] = self._tree_msg(u, v, mine, others, ws)
        return out

    def _tree_msg(self, u: str, v: str, mine: tuple[int, ...], others: list[Edge], ws: list[TreeMsg]) -> TreeMsg:
        query, ks = self.query, self.ks
        shared = [set(e.mine) == set(mine) for e in others]
        life = _lifetime(query, u)
        confs, delay = _passing(life, ws)
        c_shared = math.prod(c for c, sh in zip(confs, shared, strict=True) if sh)
        c_indep = math.prod(c for c, sh in zip(confs, shared, strict=True) if not sh)
        b = stream_rate(query.stream(u)) * self.tau
        tuples = b * c_shared * c_indep
        keys = distinct(tuples, 1.0 / _key_f(query, u, mine))
        fp = ks.key_filter_fp(u, mine, keys, ks.window_fp_cost(v)) if ks is not None else 0.0
        rho = self.rhos.get((v, u))
        if rho is None:
            rho = self.rhos[(v, u)] = SeqState.start(query, v).join_selectivity(query, u)
        valid = life - delay
        if any(shared):  # the key's confirmations, over the reach of all of a v tuple's u witnesses
            reach = _lifetime(query, v) + valid - 1.0
            confs, _ = _passing(life + reach * _spread(rho * c_indep * b * reach), ws)
            c_shared = math.prod(c for c, sh in zip(confs, shared, strict=True) if sh)
        return TreeMsg(u, v, mine, tuples, keys, fp, rho * c_indep, b, valid, c_shared)

    def shipped(self, u: str) -> float:
        """Tuples of ``u`` per epoch that pass every set it is filtered by."""
        key = (id(self.tree.reducers), u, self.skip & self.tree.shipping(u))
        found = self.shared.shipped_by_skip.get(key)
        if found is not None:
            return found
        ws = [self.msg(e.stream, u) for e in self.tree.into[u] if (e.stream, u) not in self.skip]
        ckey = (u, tuple(map(id, ws)))
        hit = self.shared.shipped.get(ckey)
        if hit is None:
            b = stream_rate(self.query.stream(u)) * self.tau
            confs, _ = _passing(_lifetime(self.query, u), ws)
            hit = self.shared.shipped[ckey] = b * math.prod(confs)
        self.shared.shipped_by_skip[key] = hit
        return hit
