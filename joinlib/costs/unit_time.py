"""Unit-time cost model of join plans (Appendix B of Tran & Lee 2010).

The cost of a plan is the sum of the costs of its join sequences, and the cost of
a sequence is the sum of the costs of its one-way joins (Eq. 1).  A one-way join is
costed from the state of the *intermediate stream* it reads (:class:`SeqState`:
rate r_1, tuple size F_1, key selectivities, the site where it lives) and the
statistics of the next stream.  Costs are *unit-time* costs: seconds of processing
plus transmission time per second of stream time.

A step's formula is its algorithm's (the record's ``terms``, :mod:`joinlib.algorithms`), in the
symbols of :class:`~joinlib.algorithms.terms.StepParams` (computed here by :func:`step_params`).
A :class:`TermModel` prices those terms; :mod:`joinlib.costs.term_models` has the three that do:

* :class:`~joinlib.costs.term_models.PaperModel` — the paper's constants c_p, c_u, c_h, c_i and
  S(x) = latency + x / bandwidth;
* :class:`~joinlib.costs.term_models.BytesModel` — bytes per second crossing the network;
* :class:`~joinlib.costs.term_models.CalibratedModel` — the paper's formulas with measured constants.

:func:`joinlib.costs.get_model` builds any cost model by name.  ``docs/cost-model.md`` gives the
formulas and the readings chosen where the paper is garbled or silent.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import (
    Any,
    Callable,
    Generic,
    NamedTuple,
    NotRequired,
    Optional,
    Protocol,
    TypedDict,
    TypeVar,
    Union,
    overload,
    runtime_checkable,
)

from joinlib.algorithms import ALGORITHMS, REGISTRY, at_source, get_algorithm
from joinlib.algorithms.terms import RawTerm, StepParams, Term, ship_term
from joinlib.data.stats import BYTES_PER_ATTRIBUTE, DEFAULT_ATTRIBUTES, DEFAULT_RATE, DEFAULT_SELECTIVITY
from joinlib.model import Query, Stream
from joinlib.plan.logical import Plan, Sequence, validate

# --- wire sizes of the paper's model (the defaults of missing statistics: joinlib.data.stats, docs/cost-model.md)
KEY_BYTES = 8                 # one join-attribute value on the wire
TUPLE_OVERHEAD = 16           # timestamp + id of a full tuple


# --- statistics of a base stream ----------------------------------------------------
def stream_rate(s: Stream) -> float:
    """r_i in tuples per second (default :data:`DEFAULT_RATE`)."""
    r = s.stats.rate
    return DEFAULT_RATE if r is None else max(0.0, float(r))


def window_tuples(s: Stream) -> float:
    """w_i: tuples in the window (r_i × T_i for a time window, the count otherwise)."""
    if s.window.is_time:
        return stream_rate(s) * s.window.size / 1000.0
    return float(s.window.size)


def full_bytes(s: Stream) -> float:
    """F_Si: ``tuple_bytes``, else attributes × 5 + 16 (ts, id) + 8 per join attribute -- less what a live source
    does not carry: a source that carries k of the ``attributes`` payload attributes (its ``attributes`` list: what
    the query's SELECT list needs, docs/sql.md "What is carried") ships k / attributes of the payload, and one that
    carries none ships no payload at all."""
    attrs = DEFAULT_ATTRIBUTES if s.stats.attributes is None else s.stats.attributes
    head = float(TUPLE_OVERHEAD + KEY_BYTES * len(s.join_attrs))
    full = float(s.stats.tuple_bytes) if s.stats.tuple_bytes is not None else attrs * BYTES_PER_ATTRIBUTE + head
    carried = None if s.source is None or s.source.attributes is None else len(s.source.attributes)
    if carried == 0:   # the join values, the id and the time only
        return min(full, head)
    if carried is None or not s.stats.attributes or carried >= s.stats.attributes:
        return full   # everything, or a part of a payload whose attributes are not counted
    return head + max(0.0, full - head) * carried / s.stats.attributes


def selectivity(s: Stream, attr: str) -> float:
    """f of ``s.attr`` (default :data:`DEFAULT_SELECTIVITY`), clamped to (0, 1]."""
    f = s.stats.selectivity_of(attr)
    if f is None or f <= 0:
        return DEFAULT_SELECTIVITY
    return min(1.0, float(f))


def interval_s(query: Query) -> float:
    """τ in seconds."""
    return query.execution.interval_ms / 1000.0


def transfer_s(query: Query, src: str, dst: str, nbytes: float) -> float:
    """S(x) in seconds: latency + x / bandwidth of the link src -> dst; 0 on one site."""
    if src == dst:
        return 0.0
    lat_ms, bw_kbps = query.network.link(src, dst)
    return lat_ms / 1000.0 + nbytes * 8.0 / (bw_kbps * 1000.0)


# --- the state of a join sequence -----------------------------------------------------
T = TypeVar("T")


class _once(Generic[T]):
    """An attribute computed on first use and kept in the instance (``functools.cached_property``
    without the lock Python 3.11 takes on each first use, which the searches, making thousands of
    states, paid for measurably)."""

    def __init__(self, fn: Callable[[Any], T]) -> None:
        self.fn, self.name = fn, fn.__name__
        self.__doc__ = fn.__doc__

    @overload
    def __get__(self, obj: None, owner: Optional[type] = None) -> "_once[T]": ...
    @overload
    def __get__(self, obj: object, owner: Optional[type] = None) -> T: ...

    def __get__(self, obj: Optional[object], owner: Optional[type] = None) -> Union[T, "_once[T]"]:
        if obj is None:
            return self
        value = obj.__dict__[self.name] = self.fn(obj)   # an instance attribute from now on: no more calls
        return value

MemoKey = tuple[str, frozenset[str], str]  # (head, joined streams, location)
_Node = tuple[str, Union[int, str]]  # ("c", index of a key class) or ("a", attribute of the next stream)

@dataclass(frozen=True)
class KeyClass:
    """Join attributes forced equal by the predicates applied so far, and the
    selectivity f of their common value in the intermediate stream.

    Under the paper's containment assumption (the smaller domain of two joined
    attributes is a subset of the larger, Table 4's f_ij) equal attributes share
    the smallest domain, so f = max of the members' f.
    """

    attrs: frozenset[tuple[str, str]]  # of (stream, attr)
    f: float


@dataclass(frozen=True)
class KeyLink:
    """One join attribute class of the intermediate stream tied to ``attr`` of the next stream."""

    cls: KeyClass
    attr: str


class _Graph:
    """The join graph of a query, precomputed: per stream, its predicates as
    (own attr, other stream, other attr) and its neighbours."""

    def __init__(self, query: Query) -> None:
        self.query = query
        self.preds: dict[str, list[tuple[str, str, str]]] = {n: [] for n in query.names}
        for p in query.predicates:
            self.preds[p.left].append((p.left_attr, p.right, p.right_attr))
            self.preds[p.right].append((p.right_attr, p.left, p.left_attr))
        self.adj = {n: frozenset(o for _, o, _ in ps) for n, ps in self.preds.items()}
        #: :meth:`SeqState.info`'s set-level part per (joined set, key classes, next stream): every head and
        #: join order reaching one set shares it (the per-head searches ask it of thousands of states)
        self.steps: dict[tuple[frozenset[str], tuple["KeyClass", ...], str], _Joining] = {}
        #: per stream, (w, F): what a step joining it multiplies the rate by and adds to the row size
        self.sizes = {s.name: (window_tuples(s), full_bytes(s)) for s in query.streams}


_GRAPHS: dict[int, _Graph] = {}


def _graph(query: Query) -> _Graph:
    g = _GRAPHS.get(id(query))
    if g is None or g.query is not query:
        if len(_GRAPHS) > 64:
            _GRAPHS.clear()
        g = _GRAPHS[id(query)] = _Graph(query)
    return g


class _Joining(NamedTuple):
    """The part of :class:`_StepInfo` that depends on the joined set and its key classes only."""

    links: tuple[KeyLink, ...]
    key_attrs: tuple[str, ...]
    f1: float
    rho: float
    classes: tuple[KeyClass, ...]


class _StepInfo(NamedTuple):
    """What joining ``stream`` to a state gives, whatever the algorithm (named tuples, these: the
    searches make one per step they price)."""

    links: tuple[KeyLink, ...]
    key_attrs: tuple[str, ...]
    f1: float
    rho: float
    classes: tuple[KeyClass, ...]
    rate: float
    full_bytes: float


@dataclass(frozen=True)
class SeqState:
    """The intermediate stream after a prefix of a join sequence.

    ``joined`` lists the streams joined so far, head first; ``rate`` is r_1 (tuples/s),
    ``full_bytes`` F_1 (sum of the components' full sizes), ``classes`` the
    selectivity per join key (equivalence classes of joined attributes) and
    ``location`` the site where the intermediate stream is produced.  The partial
    size P_1 and the key selectivity f_1 depend on the next stream as well, so they
    are methods (:meth:`partial_bytes`, :meth:`key_selectivity`).

    Everything but ``joined``'s order is a function of the set of joined streams and
    the location (see docs/cost-model.md): the exhaustive planner relies on it.
    """

    head: str
    joined: tuple[str, ...]
    rate: float
    full_bytes: float
    classes: tuple[KeyClass, ...]
    location: str
    _cache: dict[tuple[int, str], tuple[Query, _StepInfo]] = field(default_factory=dict, compare=False, hash=False,
                                                                   repr=False)

    @classmethod
    def start(cls, query: Query, head: str, site: Optional[str] = None) -> "SeqState":
        s = query.stream(head)
        classes = tuple(KeyClass(frozenset({(head, a)}), selectivity(s, a)) for a in s.join_attrs)
        return cls(head, (head,), stream_rate(s), full_bytes(s), classes, site or s.site)

    @_once
    def joined_set(self) -> frozenset[str]:
        """The joined streams as a set (kept: the searches key their tables on it, millions of times)."""
        return frozenset(self.joined)

    @_once
    def _memo_key(self) -> MemoKey:
        return (self.head, self.joined_set, self.location)

    def memo_key(self) -> MemoKey:
        """(head, set of joined streams, location): determines the rest of the state."""
        return self._memo_key

    def class_of(self, stream: str, attr: str) -> KeyClass:
        for c in self.classes:
            if (stream, attr) in c.attrs:
                return c
        raise KeyError((stream, attr))

    def can_join(self, query: Query, stream: str) -> bool:
        """``stream`` is not joined yet and shares a predicate with a joined stream."""
        return stream not in self.joined and not _graph(query).adj[stream].isdisjoint(self.joined)

    def info(self, query: Query, stream: str) -> _StepInfo:
        """Links, ρ and the next key classes of joining ``stream`` (cached per state)."""
        key = (id(query), stream)
        hit = self._cache.get(key)
        if hit is not None and hit[0] is query:
            return hit[1]
        if not self.can_join(query, stream):
            raise ValueError(f"{stream} cannot be joined after {', '.join(self.joined)}")
        g = _graph(query)
        skey = (self.joined_set, self.classes, stream)
        j = g.steps.get(skey)
        if j is None:
            if len(g.steps) > 100_000:
                g.steps.clear()
            j = g.steps[skey] = self._joining(query, stream)
        w, size = g.sizes[stream]
        out = _StepInfo(j.links, j.key_attrs, j.f1, j.rho, j.classes, self.rate * w * j.rho, self.full_bytes + size)
        self._cache[key] = (query, out)
        return out

    def _joining(self, query: Query, stream: str) -> _Joining:
        """Links, key attributes, f_1, ρ and the next key classes of joining ``stream``: a function of the
        joined set and its classes only (not of the head, the order or the location)."""
        nxt = query.stream(stream)
        links: list[KeyLink] = []
        for attr, other, oattr in _graph(query).preds[stream]:
            if other in self.joined:
                link = KeyLink(self.class_of(other, oattr), attr)
                if link not in links:
                    links.append(link)
        used = {ln.attr for ln in links}
        key_attrs = tuple(a for a in nxt.join_attrs if a in used)
        f1 = math.prod({ln.cls: ln.cls.f for ln in links}.values())
        rho, classes = _merge(self, nxt, links)
        return _Joining(tuple(links), key_attrs, f1, rho, classes)

    def links(self, query: Query, stream: str) -> list[KeyLink]:
        """Predicates between the joined streams and ``stream``, as (class, next attr), deduplicated."""
        return list(self.info(query, stream).links)

    def key_attrs(self, query: Query, stream: str) -> tuple[str, ...]:
        """Attributes of ``stream`` probed by the step (in ``join_attrs`` order)."""
        return self.info(query, stream).key_attrs

    def partial_bytes(self, query: Query, stream: str) -> float:
        """P_S1 = P_S2: the size of a partial tuple (the probed key) of the step."""
        return float(KEY_BYTES * max(1, len(self.key_attrs(query, stream))))

    def key_selectivity(self, query: Query, stream: str) -> float:
        """f_1: product of the f of the intermediate's key classes involved."""
        return self.info(query, stream).f1

    def join_selectivity(self, query: Query, stream: str) -> float:
        """ρ: probability that an intermediate tuple and a ``stream`` tuple match."""
        return self.info(query, stream).rho

    def advance(self, query: Query, stream: str, algorithm: str) -> "SeqState":
        """The state after joining ``stream`` with ``algorithm``: r_new = r_old × w_next × ρ."""
        get_algorithm(algorithm)
        i = self.info(query, stream)
        loc = self.location if at_source(algorithm) else query.stream(stream).site
        return self._joining_at(i, stream, loc, {})

    def _joining_at(self, i: _StepInfo, stream: str, location: str,
                    cache: dict[tuple[int, str], tuple[Query, _StepInfo]]) -> "SeqState":
        """The state after joining ``stream`` (step information ``i``) with the output at ``location``."""
        return SeqState(self.head, self.joined + (stream,), i.rate, i.full_bytes, i.classes, location, cache)


def _merge(state: SeqState, nxt: Stream, links: list[KeyLink]) -> tuple[float, tuple[KeyClass, ...]]:
    """ρ of joining ``nxt`` and the key classes afterwards.

    Each group of attributes made equal by the step (old classes and attributes of
    ``nxt`` connected by the step's predicates) matches with probability
    Π f / max f over its members (independent uniform values on nested domains);
    the group becomes one class with f = max.  Groups are independent: ρ = Π.
    """
    parent: dict[_Node, _Node] = {}

    def find(x: _Node) -> _Node:
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x

    index = {c: i for i, c in enumerate(state.classes)}
    for ln in links:
        parent[find(("c", index[ln.cls]))] = find(("a", ln.attr))
    groups: dict[_Node, set[_Node]] = {}
    for ln in links:
        groups.setdefault(find(("a", ln.attr)), set()).update({("c", index[ln.cls]), ("a", ln.attr)})
    rho = 1.0
    merged: set[int] = set()
    new: list[KeyClass] = []
    for members in groups.values():
        fs: list[float] = []
        attrs: set[tuple[str, str]] = set()
        for kind, v in sorted(members):
            if kind == "c":
                cls = state.classes[int(v)]
                fs.append(cls.f)
                attrs |= cls.attrs
                merged.add(int(v))
            else:
                fs.append(selectivity(nxt, str(v)))
                attrs.add((nxt.name, str(v)))
        rho *= math.prod(fs) / max(fs)
        new.append(KeyClass(frozenset(attrs), max(fs)))
    linked = {ln.attr for ln in links}
    kept = [c for i, c in enumerate(state.classes) if i not in merged]
    fresh = [KeyClass(frozenset({(nxt.name, a)}), selectivity(nxt, a))
             for a in nxt.join_attrs if a not in linked]
    classes = tuple(sorted(kept + new + fresh, key=lambda c: min(c.attrs)))
    return rho, classes


# --- the parameters of one step, with the paper's symbols ----------------------------
def step_params(query: Query, state: SeqState, stream: str) -> StepParams:
    """Table 4's symbols for joining ``stream`` to the intermediate stream ``state``."""
    nxt = query.stream(stream)
    info = state.info(query, stream)
    tau = interval_s(query)
    r1, r2 = state.rate, stream_rate(nxt)
    f1 = info.f1
    f2 = math.prod(selectivity(nxt, a) for a in info.key_attrs)
    wp1, wp2, w2 = r1 * tau, r2 * tau, window_tuples(nxt)
    P = float(KEY_BYTES * max(1, len(info.key_attrs)))
    return StepParams(r1=r1, r2=r2, w2=w2, wp1=wp1, wp2=wp2, f1=f1, f2=f2,
                      f12=min(1.0, f1 / f2), f21=min(1.0, f2 / f1),
                      F1=state.full_bytes, F2=full_bytes(nxt), P1=P, P2=P,
                      k2=min(1.0 / f2, w2), m1=min(1.0 / f1, wp1), m2=min(1.0 / f2, wp2),
                      tau=tau, rho=info.rho, src=state.location, dst=nxt.site)


# --- models ------------------------------------------------------------------------------
@runtime_checkable
class CostModel(Protocol):
    """Estimates the unit-time cost of one one-way join of a join sequence.

    Costs must be non-negative and depend on ``state`` only through its
    order-independent content (joined set, rate, sizes, key classes, location):
    the exhaustive planner's dynamic programme relies on both.
    """

    name: str

    def step_cost(self, query: Query, state: SeqState, stream: str, algorithm: str) -> float: ...


class TermModel:
    """A model that evaluates the Appendix B terms of each step's algorithm; subclasses price each term kind
    (:mod:`joinlib.costs.term_models`)."""

    name = "terms"

    def terms(self, query: Query, state: SeqState, stream: str, algorithm: str) -> list[tuple[Term, float]]:
        """Every term of the step's formula with its priced value."""
        formula = get_algorithm(algorithm).terms
        p = step_params(query, state, stream)
        return [(Term._make(t), self.price(query, p, t)) for t in formula(p)]

    def step_cost(self, query: Query, state: SeqState, stream: str, algorithm: str) -> float:
        return sum(v for _, v in self.terms(query, state, stream, algorithm))

    def step_costs(self, query: Query, state: SeqState, stream: str) -> dict[str, float]:
        """All six algorithms at once (the parameters are computed once)."""
        p = step_params(query, state, stream)
        return {a: sum(self.price(query, p, t) for t in rec.terms(p)) for a, rec in REGISTRY.items()}

    def start_cost(self, query: Query, head: str, site: str) -> float:
        """Cost of shipping the head's batches to a ``start`` site other than its own."""
        s = query.stream(head)
        if site == s.site:
            return 0.0
        t = ship_term("ship head batches to start", 1.0 / interval_s(query), "fwd",
                      stream_rate(s) * interval_s(query) * full_bytes(s))
        p = _start_params(query, s, site)
        return self.price(query, p, t)

    def price(self, query: Query, p: StepParams, t: RawTerm) -> float:  # pragma: no cover
        """The value of one term tuple (label, kind, qty, arg, arg2); see :class:`~joinlib.algorithms.terms.Term`."""
        raise NotImplementedError


def _start_params(query: Query, s: Stream, site: str) -> StepParams:
    r, tau = stream_rate(s), interval_s(query)
    return StepParams(r1=r, r2=0, w2=0, wp1=r * tau, wp2=0, f1=1, f2=1, f12=1, f21=1,
                      F1=full_bytes(s), F2=0, P1=0, P2=0, k2=0, m1=0, m2=0, tau=tau, rho=1,
                      src=s.site, dst=site)


# --- costs of sequences and plans ----------------------------------------------------------
def _start_cost(model: CostModel, query: Query, seq: Sequence) -> float:
    if seq.start is None:
        return 0.0
    fn: Optional[Callable[[Query, str, str], float]] = getattr(model, "start_cost", None)
    return fn(query, seq.head, seq.start) if fn else 0.0


def sequence_cost(query: Query, seq: Sequence, model: CostModel) -> float:
    """C_Pi: the sum of the step costs of one join sequence."""
    state = SeqState.start(query, seq.head, seq.start)
    total = _start_cost(model, query, seq)
    for st in seq.steps:
        total += model.step_cost(query, state, st.stream, st.algorithm)
        state = state.advance(query, st.stream, st.algorithm)
    return total


def plan_cost(query: Query, plan: Plan, model: CostModel) -> float:
    """C_JEP (Eq. 1): the sum of the sequence costs; a model that prices whole plans (its own
    ``plan_cost``, e.g. the plan-level byte model of :mod:`joinlib.costs`) prices it itself."""
    whole: Optional[Callable[[Query, Plan], float]] = getattr(model, "plan_cost", None)
    if whole is not None:
        return whole(query, plan)
    return sum(sequence_cost(query, seq, model) for seq in plan.sequences)


class ExplainRow(TypedDict):
    """One step of :func:`explain`."""

    head: str
    step: int
    stream: str
    algorithm: str
    cost: float
    rho: float
    rate: float
    site: str
    rate_out: float
    site_out: str
    bytes_out: float
    transmission: NotRequired[float]
    processing: NotRequired[float]


def explain(query: Query, plan: Plan, model: CostModel) -> list[ExplainRow]:
    """One row per step, in plan order.

    Keys: ``head``, ``step`` (1-based; 0 for the shipping of the head's batches to a
    ``start`` site), ``stream``, ``algorithm``, ``cost`` (s/s, or B/s for the bytes
    model), ``rho``, ``rate`` / ``site`` (the intermediate stream entering the step:
    rate r_1 and where it lives), ``rate_out`` / ``site_out`` / ``bytes_out`` (after
    the step); with the term models also ``transmission`` and ``processing``.
    """
    validate(query, plan)
    rows: list[ExplainRow] = []
    for seq in plan.sequences:
        state = SeqState.start(query, seq.head, seq.start)
        start = _start_cost(model, query, seq)
        if start:
            rows.append({"head": seq.head, "step": 0, "stream": seq.head, "algorithm": "start",
                         "cost": start, "rho": 1.0, "rate": state.rate,
                         "site": query.stream(seq.head).site, "rate_out": state.rate,
                         "site_out": state.location, "bytes_out": state.full_bytes})
        for i, st in enumerate(seq.steps, 1):
            cost = model.step_cost(query, state, st.stream, st.algorithm)
            nxt = state.advance(query, st.stream, st.algorithm)
            row: ExplainRow = {"head": seq.head, "step": i, "stream": st.stream, "algorithm": st.algorithm,
                               "cost": cost, "rho": state.join_selectivity(query, st.stream),
                               "rate": state.rate, "site": state.location, "rate_out": nxt.rate,
                               "site_out": nxt.location, "bytes_out": nxt.full_bytes}
            if isinstance(model, TermModel):
                terms = model.terms(query, state, st.stream, st.algorithm)
                row["transmission"] = sum(v for t, v in terms if t.kind == "ship")
                row["processing"] = cost - row["transmission"]
            rows.append(row)
            state = nxt
    return rows


def frontier(query: Query, state: SeqState) -> list[str]:
    """Streams that may be appended next (adjacent to a joined one), in query order."""
    return [n for n in query.names if state.can_join(query, n)]


def all_step_costs(model: CostModel, query: Query, state: SeqState, stream: str) -> dict[str, float]:
    """The six step costs, using the model's batched form when it has one."""
    fn: Optional[Callable[[Query, SeqState, str], dict[str, float]]] = getattr(model, "step_costs", None)
    if fn is not None:
        return fn(query, state, stream)
    return {a: model.step_cost(query, state, stream, a) for a in ALGORITHMS}


class StepCache:
    """Step costs and successor states of one (query, model), shared across a planner run.

    Keyed on :meth:`SeqState.memo_key` (head, joined set, location), which determines the
    rest of the state; successor states are canonical instances so their own
    caches are shared too.
    """

    def __init__(self, query: Query, model: "CostModel") -> None:
        self.query, self.model = query, model
        batched: Optional[Callable[[Query, SeqState, str], dict[str, float]]] = getattr(model, "step_costs", None)
        self._all_costs = batched or (lambda q, state, stream: all_step_costs(model, q, state, stream))
        self._costs: dict[tuple[MemoKey, str], dict[str, float]] = {}
        self._options: dict[tuple[MemoKey, str], list[tuple[str, float, SeqState]]] = {}
        self._states: dict[MemoKey, SeqState] = {}
        self._infos: dict[tuple[str, frozenset[str]], dict[tuple[int, str], tuple[Query, _StepInfo]]] = {}
        self._frontiers: dict[frozenset[str], list[str]] = {}
        self._next_sets: dict[tuple[frozenset[str], str], frozenset[str]] = {}
        #: a model's kept costs of a step, the same at every location (WireModel.step_costs_shared), if it has them
        self._shared: Optional[Callable[[Query, SeqState, str], Optional[dict[str, float]]]] = \
            getattr(model, "step_costs_shared", None)
        self._sides: dict[int, tuple[dict[str, float], tuple[tuple[str, float, bool], ...]]] = {}
        self._located: Optional[bool] = None
        self._sites: dict[str, str] = {}
        #: (head, joined set, next stream) -> [the set after it, the cheapest algorithm of each side away from its site]
        self._by_set: dict[tuple[str, frozenset[str], str], list[Any]] = {}

    def canonical(self, state: SeqState) -> SeqState:
        key = state.memo_key()
        hit = self._states.get(key)
        if hit is None:
            # the step information (links, ρ, next classes) does not depend on the location: one
            # cache for every location of a (head, joined set)
            shared = self._infos.setdefault((state.head, state.joined_set), state._cache)
            hit = self._states[key] = state if state._cache is shared else \
                SeqState(state.head, state.joined, state.rate, state.full_bytes, state.classes, state.location, shared)
        return hit

    def frontier(self, state: SeqState) -> list[str]:
        """:func:`frontier`, kept per joined set (the searches ask it of every state)."""
        hit = self._frontiers.get(state.joined_set)
        if hit is None:
            hit = self._frontiers[state.joined_set] = frontier(self.query, state)
        return hit

    def costs(self, state: SeqState, stream: str) -> dict[str, float]:
        key = (state.memo_key(), stream)
        hit = self._costs.get(key)
        if hit is None:
            hit = self._costs[key] = all_step_costs(self.model, self.query, state, stream)
        return hit

    def options(self, state: SeqState, stream: str, keep: bool = True) -> list[tuple[str, float, SeqState]]:
        """The distinct successors of joining ``stream``: per resulting location the
        cheapest algorithm (first in ``ALGORITHMS`` order on ties), its cost and the
        next state, ordered by that algorithm's position.  Algorithms reaching the
        same location reach the same state, so only the cheapest matters.  Not ``keep``: a
        caller that asks once per state (a DP with its own table) does not keep them alive."""
        key = (state.memo_key(), stream)
        hit = self._options.get(key)
        if hit is None:
            hit = self._options_of(state, stream)
            if keep:
                self._options[key] = hit
        return hit

    def _options_of(self, state: SeqState, stream: str) -> list[tuple[str, float, SeqState]]:
        if self._shared is not None:
            return self._options_shared(state, stream)
        costs = self._all_costs(self.query, state, stream)
        src, dst = state.location, self.query.stream(stream).site
        best: dict[str, tuple[int, float, str]] = {}   # per resulting location: the first cheapest algorithm
        for i, alg, source_side in _SIDES:
            loc = src if source_side else dst
            c = costs[alg]
            cur = best.get(loc)
            if cur is None or c < cur[1]:
                best[loc] = (i, c, alg)
        key = (state.joined_set, stream)
        joined = self._next_sets.get(key)
        if joined is None:
            joined = self._next_sets[key] = state.joined_set | {stream}
        out = []
        for loc, (_, c, alg) in sorted(best.items(), key=_position):
            hit = self._states.get((state.head, joined, loc))
            out.append((alg, c, hit if hit is not None else self._new_state(state, joined, stream, loc)))
        return out

    def moves(self, state: SeqState) -> list[tuple[float, int, str, str, SeqState]]:
        """Every option of every next stream of ``state`` (:meth:`frontier`, :meth:`options` not kept) as
        (cost, rank, stream, algorithm, next state), cheapest first (rank: its place in frontier-then-options
        order, which breaks ties): what the per-head DP expands, once per state.  With a model whose step
        costs are the same at every location but the stream's own site (``location_free``), each (head,
        joined set, stream)'s cheapest algorithm per side is found once for all its locations."""
        if self._located is None:
            free = getattr(self.model, "location_free", None)
            self._located = bool(self._shared is not None and free is not None and free(self.query))
        if not self._located:
            out = [(c, rank, nxt, alg, succ) for rank, (nxt, alg, c, succ) in enumerate(
                (nxt, alg, c, succ) for nxt in self.frontier(state)
                for alg, c, succ in self.options(state, nxt, False))]
            out.sort()
            return out
        head, joined_set, loc = state.head, state.joined_set, state.location
        states, sites, tmpl = self._states, self._sites, self._by_set
        out = []
        rank = 0
        for nxt in self.frontier(state):
            key = (head, joined_set, nxt)
            t = tmpl.get(key)
            if t is None:
                joined = self._next_sets.get((joined_set, nxt))
                if joined is None:
                    joined = self._next_sets[(joined_set, nxt)] = joined_set | {nxt}
                t = tmpl[key] = [joined, None]
            joined = t[0]
            site = sites.get(nxt)
            if site is None:
                site = sites[nxt] = self.query.stream(nxt).site
            if loc == site:   # within one site: every algorithm ships nothing and ends there; the first wins
                hit = states.get((head, joined, loc))
                out.append((0.0, rank, nxt, ALGORITHMS[0],
                            hit if hit is not None else self._new_state(state, joined, nxt, loc)))
                rank += 1
                continue
            sides = t[1]
            if sides is None:
                costs = self._shared(self.query, state, nxt)   # type: ignore[misc]
                assert costs is not None
                sides = t[1] = self._sides_of(costs)
            for alg, c, source_side in sides:
                at = loc if source_side else site
                hit = states.get((head, joined, at))
                out.append((c, rank, nxt, alg, hit if hit is not None else self._new_state(state, joined, nxt, at)))
                rank += 1
        out.sort()
        return out

    def _options_shared(self, state: SeqState, stream: str) -> list[tuple[str, float, SeqState]]:
        """:meth:`_options_of` for a model whose costs of a step are one kept dict for every location it is priced
        the same at (``step_costs_shared``): the cheapest algorithm of each side is found once per such dict, not
        once per location.  The same options: the first cheapest algorithm per resulting location (the source's
        for the source side, the stream's site for the other; every algorithm's cost 0 when they are one site),
        ordered by that algorithm's position."""
        assert self._shared is not None
        costs = self._shared(self.query, state, stream)
        key = (state.joined_set, stream)
        joined = self._next_sets.get(key)
        if joined is None:
            joined = self._next_sets[key] = state.joined_set | {stream}
        head, states = state.head, self._states
        if costs is None:   # within one site: every algorithm ships nothing and ends there; the first wins
            loc = state.location
            hit = states.get((head, joined, loc))
            return [(ALGORITHMS[0], 0.0, hit if hit is not None else self._new_state(state, joined, stream, loc))]
        out = []
        for alg, c, source_side in self._sides_of(costs):
            loc = state.location if source_side else self.query.stream(stream).site
            hit = states.get((head, joined, loc))
            out.append((alg, c, hit if hit is not None else self._new_state(state, joined, stream, loc)))
        return out

    def _sides_of(self, costs: dict[str, float]) -> tuple[tuple[str, float, bool], ...]:
        """:func:`_cheapest_sides` of a model's kept costs, once per instance (steps that ask the same of a stream
        share one: ``WireModel._priced``)."""
        sides = self._sides.get(id(costs))
        if sides is None or sides[0] is not costs:
            if len(self._sides) > 200_000:
                self._sides.clear()
            sides = self._sides[id(costs)] = (costs, _cheapest_sides(costs))
        return sides[1]

    def _new_state(self, state: SeqState, joined: frozenset[str], stream: str, loc: str) -> SeqState:
        """The canonical state after joining ``stream`` at ``loc``, made at once with the step-information
        cache of its (head, joined set) (what :meth:`canonical` of :meth:`SeqState.advance` gives)."""
        shared = self._infos.setdefault((state.head, joined), {})
        hit = self._states[(state.head, joined, loc)] = state._joining_at(state.info(self.query, stream), stream, loc,
                                                                          shared)
        return hit

    def advance(self, state: SeqState, stream: str, algorithm: str) -> SeqState:
        loc = state.location if at_source(algorithm) else self.query.stream(stream).site
        hit = self._states.get((state.head, state.joined_set | {stream}, loc))
        if hit is not None and algorithm in REGISTRY:
            return hit
        return self.canonical(state.advance(self.query, stream, algorithm))


#: (position, name, output at the source) of every algorithm, for the searches' inner loop
_SIDES = tuple((i, a, at_source(a)) for i, a in enumerate(ALGORITHMS))


def _cheapest_sides(costs: dict[str, float]) -> tuple[tuple[str, float, bool], ...]:
    """Of a step between two sites: (algorithm, cost, output at the source) of the first cheapest algorithm of
    each side, ordered by position (as :meth:`StepCache._options_of` picks them)."""
    best: dict[bool, tuple[int, float, str]] = {}
    for i, alg, source_side in _SIDES:
        c = costs[alg]
        cur = best.get(source_side)
        if cur is None or c < cur[1]:
            best[source_side] = (i, c, alg)
    return tuple((alg, c, side) for side, (_, c, alg) in sorted(best.items(), key=lambda kv: kv[1][0]))


def _position(item: tuple[str, tuple[int, float, str]]) -> int:
    return item[1][0]


__all__ = [
    "CostModel", "TermModel", "SeqState", "KeyClass", "step_params",
    "sequence_cost", "plan_cost", "explain", "ExplainRow", "frontier", "all_step_costs", "StepCache",
    "stream_rate", "window_tuples", "full_bytes", "selectivity", "transfer_s",
]
