"""Specifications of queries, streams, windows and tuples.

Everything here is a frozen value object: parsed once from the query file
(:mod:`joinlib.query`) and shared read-only by the planner, the runtime and the
reference join.  Times are integers in milliseconds.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable, Iterable, Optional

from joinlib.filter_spec import Condition
from joinlib.output_spec import Output
from joinlib.source_spec import SourceSpec

Value = Any  # a join-attribute value: str, int, float, bool or None


@dataclass(frozen=True)
class Window:
    """A sliding window: ``kind`` is ``"time"`` (size in ms) or ``"tuples"`` (a count)."""

    kind: str
    size: int

    def __post_init__(self) -> None:
        if self.kind not in ("time", "tuples"):
            raise ValueError(f"window kind must be 'time' or 'tuples', not {self.kind!r}")
        if self.size <= 0:
            raise ValueError("window size must be positive")

    @property
    def is_time(self) -> bool:
        return self.kind == "time"

    def __str__(self) -> str:
        return f"{self.size}ms" if self.is_time else f"{self.size} tuples"


@dataclass(frozen=True)
class StreamStats:
    """Optional statistics of a stream, used by the cost model and the generator.

    ``attributes`` is the tuple size as a number of non-key attributes (the paper's
    unit: 250 attributes = 1250 bytes); ``selectivity`` maps a join attribute to
    its selectivity factor f = 1 / (number of distinct values).
    """

    rate: Optional[float] = None              # tuples per second
    tuple_bytes: Optional[int] = None         # full tuple size on the wire
    attributes: Optional[int] = None          # number of payload attributes
    selectivity: tuple[tuple[str, float], ...] = ()

    def selectivity_of(self, attr: str) -> Optional[float]:
        for a, f in self.selectivity:
            if a == attr:
                return f
        return None


@dataclass(frozen=True)
class Stream:
    """A stream born at ``site``; ``pos`` is its position in the query's stream list.

    ``join_attrs`` lists, in a fixed order, the attributes this stream uses in any
    join predicate; tuples carry their values in that order (``Tup.key``).  ``source``: where
    its records come from (None: the replayer's ``src.<query>.<stream>`` topic); ``where``: the conditions a record
    must meet to be one of the stream's tuples (:mod:`joinlib.filter_spec`), applied where records enter.
    """

    name: str
    pos: int
    site: str
    window: Window
    join_attrs: tuple[str, ...]
    stats: StreamStats = field(default_factory=StreamStats)
    source: Optional[SourceSpec] = None
    where: tuple[Condition, ...] = ()

    def attr_index(self, attr: str) -> int:
        return self.join_attrs.index(attr)


@dataclass(frozen=True)
class Predicate:
    """An equi-join predicate ``left.left_attr = right.right_attr`` (stream names)."""

    left: str
    left_attr: str
    right: str
    right_attr: str

    def side(self, stream: str) -> Optional[str]:
        """The attribute of ``stream`` in this predicate, or None if not involved."""
        if self.left == stream:
            return self.left_attr
        if self.right == stream:
            return self.right_attr
        return None

    def other(self, stream: str) -> tuple[str, str]:
        """(stream, attr) on the other side of ``stream``."""
        if self.left == stream:
            return self.right, self.right_attr
        return self.left, self.left_attr

    def __str__(self) -> str:
        return f"{self.left}.{self.left_attr} = {self.right}.{self.right_attr}"


Attr = tuple[str, str]   # (stream, attribute)


def equality_classes(predicates: Iterable[Predicate]) -> Callable[[Attr], Attr]:
    """The classes of (stream, attribute) pairs that ``predicates`` make equal (equality is transitive):
    a function from a pair to its class's representative (a pair no predicate names is its own)."""
    parent: dict[Attr, Attr] = {}

    def find(x: Attr) -> Attr:
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x
    for p in predicates:
        a, b = find((p.left, p.left_attr)), find((p.right, p.right_attr))
        if a != b:
            parent[b] = a
    return find


@dataclass(frozen=True)
class Link:
    """A per-link override of the network model (directed: src -> dst)."""

    src: str
    dst: str
    latency_ms: float
    bandwidth_kbps: float


@dataclass(frozen=True)
class Network:
    """Latency and bandwidth between sites; transfer = latency + bytes / bandwidth.

    ``nodes`` names processing-only nodes: sites where no stream is born but where a plan
    may place operators (a central site, a data centre between routers)."""

    latency_ms: float = 25.0
    bandwidth_kbps: float = 1024.0
    links: tuple[Link, ...] = ()
    nodes: tuple[str, ...] = ()

    def link(self, src: str, dst: str) -> tuple[float, float]:
        """(latency ms, bandwidth kbps) of the directed link src -> dst."""
        for link in self.links:
            if link.src == src and link.dst == dst:
                return link.latency_ms, link.bandwidth_kbps
        return self.latency_ms, self.bandwidth_kbps

    def transfer_ms(self, src: str, dst: str, nbytes: int) -> float:
        """The paper's S(x): latency + x / bandwidth, in ms (kbps = 1000 bit/s)."""
        lat, bw = self.link(src, dst)
        return lat + nbytes * 8.0 / bw  # bytes*8 bits / (bw*1000 bit/s) * 1000 ms


@dataclass(frozen=True)
class Execution:
    """The processing model's parameters: batch interval tau and maximum delay delta (ms);
    ``idle_timeout_ms``: a live source partition whose watermark has not moved for this long (and
    that has nothing left to read) advances with processing time (docs/live.md)."""

    interval_ms: int = 100
    max_delay_ms: int = 80
    idle_timeout_ms: int = 5000
    #: false-positive rate of the Bloom filters semijoins ship instead of keys when shorter; 0: keys only
    bloom_fpr: float = 0.01

    def __post_init__(self) -> None:
        if self.interval_ms <= 0:
            raise ValueError("interval must be positive")
        if self.max_delay_ms < 0:
            raise ValueError("max_delay must not be negative")
        if not 0.0 <= self.bloom_fpr < 1.0:
            raise ValueError("bloom_fpr must be in [0, 1)")
        if self.idle_timeout_ms <= 0:
            raise ValueError("idle_timeout must be positive")


@dataclass(frozen=True)
class Query:
    """A multi-way sliding-window equi-join over streams at different sites.

    ``output``: the SELECT list and sink (:mod:`joinlib.output_spec`); kept so that an SQL query and its YAML
    say the same, not yet read by the runtime (results are the members' ids)."""

    name: str
    streams: tuple[Stream, ...]
    predicates: tuple[Predicate, ...]
    network: Network = field(default_factory=Network)
    execution: Execution = field(default_factory=Execution)
    output: Output = field(default_factory=Output)

    def stream(self, name: str) -> Stream:
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError(name) from None

    @cached_property
    def _by_name(self) -> dict[str, Stream]:
        """Streams by name, built once: results look their streams up per row (an MJoin root's rows)."""
        return {s.name: s for s in self.streams}

    # The join graph's look-ups are built once per query: the planners ask them millions of times.
    @cached_property
    def names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.streams)

    @cached_property
    def sites(self) -> tuple[str, ...]:
        """Distinct sites in order of first appearance."""
        seen: dict[str, None] = {}
        for s in self.streams:
            seen.setdefault(s.site, None)
        return tuple(seen)

    @cached_property
    def nodes(self) -> tuple[str, ...]:
        """Every node a plan of this query may use: the stream sites, then the processing-only
        nodes of the network section."""
        return self.sites + tuple(n for n in self.network.nodes if n not in self.sites)

    def predicates_between(self, a: str, b: str) -> tuple[Predicate, ...]:
        return self._pairs.get(frozenset((a, b)), ())

    @cached_property
    def _pairs(self) -> dict[frozenset[str], tuple[Predicate, ...]]:
        out: dict[frozenset[str], tuple[Predicate, ...]] = {}
        for p in self.predicates:
            key = frozenset((p.left, p.right))
            out[key] = out.get(key, ()) + (p,)
        return out

    def neighbours(self, name: str) -> tuple[str, ...]:
        """Streams sharing a predicate with ``name``, in query order."""
        hit = self._neighbours.get(name)
        if hit is None:
            out = {p.other(name)[0] for p in self.predicates if p.side(name) is not None}
            hit = self._neighbours[name] = tuple(n for n in self.names if n in out)
        return hit

    @cached_property
    def _neighbours(self) -> dict[str, tuple[str, ...]]:
        return {}


class Tup:
    """A base-stream tuple as the engine sees it.

    ``pos`` is the stream's position in the query, ``seq`` the tuple's rank in its
    stream (0-based, in (ts, id) order), ``key`` the values of the stream's
    ``join_attrs`` and ``rest`` the other attributes, already encoded (opaque bytes)
    so that shipping a tuple never re-encodes its payload.  A Tup is never changed
    after creation; ``wire`` caches its Avro encoding (:mod:`joinlib.protocol.avro`) so a tuple
    shipped to several sites, or in many intermediate results, is encoded once, and ``idb``
    its id's (a window tuple is in many results).
    """

    __slots__ = ("pos", "id", "ts", "seq", "key", "rest", "wire", "idb")

    def __init__(self, pos: int, id: int, ts: int, seq: int, key: tuple[Value, ...], rest: bytes = b"") -> None:
        self.pos = pos
        self.id = id
        self.ts = ts
        self.seq = seq
        self.key = key
        self.rest = rest
        self.wire: "bytes | None" = None
        self.idb: "bytes | None" = None  # Avro encoding of id, cached by avro.encode_ids

    def __reduce__(self) -> tuple[type[Tup], tuple[int, int, int, int, tuple[Value, ...], bytes]]:
        # pickled in node checkpoints: the fields, not the caches
        return (Tup, (self.pos, self.id, self.ts, self.seq, self.key, self.rest))

    def order(self) -> tuple[int, int, int]:
        """The project's total order on tuples: (ts, stream position, id)."""
        return (self.ts, self.pos, self.id)

    def __repr__(self) -> str:
        return f"Tup(pos={self.pos}, id={self.id}, ts={self.ts}, seq={self.seq}, key={self.key!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Tup) and (self.pos, self.id) == (other.pos, other.id)

    def __hash__(self) -> int:
        return hash((self.pos, self.id))


def precedes(a_ts: int, a_pos: int, a_id: int, b_ts: int, b_pos: int, b_id: int) -> bool:
    """a ≺ b in the total order (ts, stream position, id)."""
    return (a_ts, a_pos, a_id) < (b_ts, b_pos, b_id)
