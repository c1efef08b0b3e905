"""Base streams, continual select-project-join queries, canonical signatures, the rate model.

A query joins K base streams, each born at a node with a known rate (tuples/s), with equality join
predicates of known selectivity; selections are pushed to the sources ([PAPER] scope: sources and
sinks pinned, only joins are placed).  The rate of the join of a set T of the query's streams is

    rate(T) = Π_{s ∈ T} rate_s · Π_{selections on T} σ · Π_{join predicates inside T} σ

(a cross product where T is not connected: nothing reduces it, so the planners avoid it on cost).

Reuse is decided by *signatures*: two queries compute the same intermediate stream over T iff its
:class:`Signature` is equal -- the sorted base streams, and the sorted normalised join predicates and
selections that apply inside T -- and the advertised stream carries every column the new query needs
from it (projected columns of T, and join attributes linking T to the rest of the query).  A reuse
never widens an existing deployment ([RECON] the digest's safe default).

The seeded generator (:func:`catalogue`, :func:`queries`) is the digest's small reproduction [RECON].
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from functools import cached_property

from joinlib.multiquery.errors import WorkloadError

_OPS = {"=": "=", "==": "=", "!=": "!=", "<>": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
_FLIP = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_ATTR = r"[A-Za-z_][\w-]*\.[A-Za-z_]\w*"
_CMP = re.compile(rf"\s*(?P<l>{_ATTR}|[^<>=!\s]+|'[^']*')\s*(?P<op>==|!=|<>|<=|>=|=|<|>)\s*"
                  rf"(?P<r>{_ATTR}|[^<>=!\s]+|'[^']*')\s*$")


def _literal(text: str) -> str:
    """Numbers in one spelling (``5``, ``5.0``, ``5e0`` -> ``5``), strings as written."""
    if text.startswith("'"):
        return text
    try:
        d = Decimal(text)
    except InvalidOperation:
        return text
    return format(d.normalize(), "f")


def _is_attr(text: str) -> bool:
    return re.fullmatch(_ATTR, text) is not None


def normalise_selection(text: str) -> str:
    """``ATTR OP VALUE`` in one spelling: no spaces, attribute on the left (``5 < S.x`` -> ``S.x>5``),
    ``==`` as ``=``, ``<>`` as ``!=``, numbers normalised.  Raises :class:`WorkloadError` otherwise."""
    m = _CMP.match(text)
    if m is None:
        raise WorkloadError(f"selection {text!r}: write ATTR OP VALUE, e.g. S1.temp > 30")
    left, op, right = m.group("l"), _OPS[m.group("op")], m.group("r")
    if not _is_attr(left) and _is_attr(right):
        left, op, right = right, _FLIP[op], left
    if not _is_attr(left) or _is_attr(right):
        raise WorkloadError(f"selection {text!r}: one side must be STREAM.attr, the other a value")
    return f"{left}{op}{_literal(right)}"


def normalise_join(text: str) -> str:
    """``A.x = B.y`` in one spelling: sides sorted, no spaces (``B.y == A.x`` -> ``A.x=B.y``)."""
    m = _CMP.match(text)
    if m is None or _OPS[m.group("op")] != "=" or not (_is_attr(m.group("l")) and _is_attr(m.group("r"))):
        raise WorkloadError(f"join predicate {text!r}: write A.x = B.y")
    a, b = sorted((m.group("l"), m.group("r")))
    return f"{a}={b}"


def stream_of(attr: str) -> str:
    return attr.split(".", 1)[0]


@dataclass(frozen=True)
class BaseStream:
    """A source stream: born at ``node`` (a topology node name) at ``rate`` tuples/s, with ``columns``."""

    name: str
    node: str
    rate: float
    columns: tuple[str, ...] = ()


@dataclass(frozen=True)
class JoinPredicate:
    """``text`` (A.x = B.y, normalised on construction) with its selectivity."""

    text: str
    selectivity: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "text", normalise_join(self.text))

    @property
    def attrs(self) -> tuple[str, str]:
        a, b = self.text.split("=")
        return a, b

    @cached_property
    def streams(self) -> frozenset[str]:
        return frozenset(stream_of(a) for a in self.attrs)


@dataclass(frozen=True)
class Selection:
    """A filter ``text`` (ATTR OP VALUE, normalised on construction) applied at its stream's source."""

    text: str
    selectivity: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "text", normalise_selection(self.text))

    @property
    def stream(self) -> str:
        return stream_of(re.split(r"[<>=!]", self.text, maxsplit=1)[0])


@dataclass(frozen=True, order=True)
class Signature:
    """What an intermediate stream *is*: sorted base streams and sorted normalised predicates inside them."""

    streams: tuple[str, ...]
    predicates: tuple[str, ...]

    def __str__(self) -> str:
        return "⋈".join(self.streams) + (f" [{' ∧ '.join(self.predicates)}]" if self.predicates else "")


@dataclass(frozen=True)
class ContinualQuery:
    """A continual SPJ query: base ``streams``, ``joins``, ``selections``, projected ``columns``
    (``S.col``), delivered to ``sink`` (a node name).

    Not :class:`joinlib.model.Query` (windows, sites, statistics: what the runtime joins): this is IFLOW's
    query over a stream catalogue, which :func:`joinlib.multiquery.execute.runtime_query` turns into one."""

    name: str
    streams: tuple[str, ...]
    joins: tuple[JoinPredicate, ...]
    selections: tuple[Selection, ...]
    columns: tuple[str, ...]
    sink: str


@dataclass(frozen=True)
class Catalogue:
    """The base streams every query draws from, by name."""

    streams: dict[str, BaseStream] = field(hash=False)


@dataclass(frozen=True)
class Bound:
    """A query bound to its catalogue and node indices: what the planners and the cost read."""

    query: ContinualQuery
    catalogue: Catalogue
    node_index: dict[str, int] = field(hash=False, repr=False)

    def __post_init__(self) -> None:
        q = self.query
        unknown = [s for s in q.streams if s not in self.catalogue.streams]
        if unknown:
            raise WorkloadError(f"query {q.name}: unknown stream {unknown[0]!r}")
        if q.sink not in self.node_index:
            raise WorkloadError(f"query {q.name}: sink {q.sink!r} is not a node of the topology")
        for s in q.streams:
            if self.catalogue.streams[s].node not in self.node_index:
                raise WorkloadError(f"stream {s}: node {self.catalogue.streams[s].node!r} is not in the topology")
        used = {stream_of(a) for p in q.joins for a in p.attrs} | {s.stream for s in q.selections}
        if not used <= set(q.streams):
            raise WorkloadError(f"query {q.name}: a predicate names a stream not in the query")

    @cached_property
    def sink(self) -> int:
        return self.node_index[self.query.sink]

    def source_node(self, stream: str) -> int:
        return self.node_index[self.catalogue.streams[stream].node]

    def source_rate(self, stream: str) -> float:
        r = self.catalogue.streams[stream].rate
        for sel in self.query.selections:
            if sel.stream == stream:
                r *= sel.selectivity
        return r

    def rate(self, streams: frozenset[str]) -> float:
        """rate(T) of the module docstring."""
        r = 1.0
        for s in streams:
            r *= self.source_rate(s)
        for p in self.query.joins:
            if p.streams <= streams:
                r *= p.selectivity
        return r

    def signature(self, streams: frozenset[str]) -> Signature:
        preds = [p.text for p in self.query.joins if p.streams <= streams]
        preds += [s.text for s in self.query.selections if s.stream in streams]
        return Signature(tuple(sorted(streams)), tuple(sorted(preds)))

    def needed_columns(self, streams: frozenset[str]) -> frozenset[str]:
        """Columns the rest of the query needs from the join of ``streams``: projected ones and the
        join attributes of predicates that link ``streams`` to the other streams."""
        cols = {c for c in self.query.columns if stream_of(c) in streams}
        for p in self.query.joins:
            if p.streams & streams and not p.streams <= streams:
                cols |= {a for a in p.attrs if stream_of(a) in streams}
        return frozenset(cols)

    def connected(self, a: frozenset[str], b: frozenset[str]) -> bool:
        """Whether a join predicate links a stream of ``a`` with one of ``b``."""
        return any(p.streams & a and p.streams & b for p in self.query.joins)


# --------------------------------------------------------------------------- generator [RECON]

@dataclass(frozen=True)
class QueryWorkload:
    """A seeded catalogue and query sequence (the experiment's input); named apart from the tuple
    workloads of :mod:`joinlib.progressive.sim` and :mod:`joinlib.pmjoin.workload`."""

    catalogue: Catalogue
    joins: tuple[JoinPredicate, ...]
    filters: dict[str, tuple[Selection, ...]] = field(hash=False)
    queries: tuple[ContinualQuery, ...] = ()


def generate_workload(nodes: tuple[str, ...], n_queries: int = 100, k: int = 5, n_streams: int = 12, seed: int = 1,
             extra_edges: int = 6, p_filter: float = 0.15, p_all_columns: float = 0.6) -> QueryWorkload:
    """``n_streams`` base streams at distinct random nodes, rates U[10, 100]/s, joined by a random
    connected predicate graph (a spanning tree + ``extra_edges``), selectivity σ with σ·rate ≈ U[0.25, 2];
    ``n_queries`` queries over ``k`` connected streams each (all catalogue predicates among them),
    each stream filtered with probability ``p_filter``, all payload columns projected with probability
    ``p_all_columns`` (else a random subset), the sink a random node."""
    if not 2 <= k <= n_streams or n_streams > len(nodes):
        raise WorkloadError(f"generate: need 2 <= k ({k}) <= streams ({n_streams}) <= nodes ({len(nodes)})")
    rng = random.Random(seed)
    names = [f"S{i + 1}" for i in range(n_streams)]
    homes = rng.sample(list(nodes), n_streams)
    cat = {s: BaseStream(s, homes[i], round(rng.uniform(10, 100), 1), ("p1", "p2", "p3"))
           for i, s in enumerate(names)}
    edges = _edges(rng, names, extra_edges)
    joins = tuple(JoinPredicate(f"{a}.j{e}={b}.j{e}", round(rng.uniform(0.25, 2.0) / 55.0, 5))
                  for e, (a, b) in enumerate(edges))
    filters: dict[str, tuple[Selection, ...]] = {
        s: (Selection(f"{s}.p1 > 10", 0.5), Selection(f"{s}.p2 = 'x'", 0.2)) for s in names}
    queries = tuple(_query(rng, f"q{i + 1}", k, names, joins, filters, nodes, p_filter, p_all_columns)
                    for i in range(n_queries))
    return QueryWorkload(Catalogue(cat), joins, filters, queries)


def _edges(rng: random.Random, names: list[str], extra: int) -> list[tuple[str, str]]:
    edges = [(names[rng.randrange(i)], names[i]) for i in range(1, len(names))]
    others = [(a, b) for i, a in enumerate(names) for b in names[i + 1:]
              if (a, b) not in edges and (b, a) not in edges]
    return edges + rng.sample(others, min(extra, len(others)))


def _query(rng: random.Random, name: str, k: int, names: list[str], joins: tuple[JoinPredicate, ...],
           filters: dict[str, tuple[Selection, ...]], nodes: tuple[str, ...], p_filter: float,
           p_all: float) -> ContinualQuery:
    chosen = {rng.choice(names)}
    while len(chosen) < k:
        frontier = sorted({s for p in joins if p.streams & chosen for s in p.streams} - chosen)
        chosen.add(rng.choice(frontier))
    streams = tuple(sorted(chosen, key=lambda s: int(s[1:])))
    preds = tuple(p for p in joins if p.streams <= chosen)
    sels = tuple(rng.choice(filters[s]) for s in streams if rng.random() < p_filter)
    cols = [f"{s}.{c}" for s in streams for c in ("p1", "p2", "p3")]
    if rng.random() >= p_all:
        cols = [c for c in cols if rng.random() < 0.5] or [cols[0]]
    return ContinualQuery(name, streams, preds, sels, tuple(cols), rng.choice(nodes))
