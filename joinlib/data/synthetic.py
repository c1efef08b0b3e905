"""Synthetic queries for experiments, planner studies and tests: streams S1..Sm from
per-stream statistics, joined along the edges of a join-graph topology (paper Fig. 6)."""
from __future__ import annotations

import random
from typing import Optional, Sequence, TypedDict

from joinlib.errors import QueryError
from joinlib.model import Execution, Network, Predicate, Query, Stream, StreamStats, Window

TOPOLOGIES = ("star", "chain", "cycle", "complete")


class SyntheticStats(TypedDict, total=False):
    """The statistics of one synthetic stream (every key optional): a query file's ``stats`` as a dict, not the
    rate model's stream (:class:`joinlib.pmjoin.rates.StreamSpec`)."""

    rate: float
    attributes: int
    tuple_bytes: int
    selectivity: float  # of every join attribute of the stream
    window_ms: int
    window_tuples: int


class QueryOptions(TypedDict, total=False):
    """The keyword options of :func:`build_query`."""

    network: Network
    execution: Execution
    per_edge_attrs: bool
    sites: Optional[Sequence[str]]


class Table2(TypedDict):
    attributes: tuple[int, ...]
    selectivity: tuple[float, ...]
    rate: tuple[int, ...]
    window_ms: tuple[int, ...]


#: the parameter values of the paper's Table 2 (random queries of Table 3 / Fig. 8)
TABLE2: Table2 = {
    "attributes": (10, 50, 100, 150, 200),
    "selectivity": (0.02, 0.04, 0.06, 0.08, 0.1),
    "rate": (10, 50, 100, 150, 200),
    "window_ms": (400, 800, 1200, 1600, 2000),
}


def table2_stream(rng: random.Random) -> SyntheticStats:
    """One stream's statistics drawn uniformly from :data:`TABLE2`."""
    return {"attributes": rng.choice(TABLE2["attributes"]),
            "selectivity": rng.choice(TABLE2["selectivity"]),
            "rate": rng.choice(TABLE2["rate"]),
            "window_ms": rng.choice(TABLE2["window_ms"])}


class UnknownTopology(QueryError, ValueError):
    """A topology name that is none of :data:`TOPOLOGIES` (or ``random``)."""


def topology_edges(m: int, topology: str, rng: Optional[random.Random] = None) -> list[tuple[int, int]]:
    """Edges (i, j), i < j, of the join graph over streams 0..m−1 (Fig. 6; ``random``:
    a random spanning tree plus random extra edges)."""
    if topology == "chain":
        return [(i, i + 1) for i in range(m - 1)]
    if topology == "star":
        return [(0, i) for i in range(1, m)]
    if topology == "cycle":
        return [(i, i + 1) for i in range(m - 1)] + ([(0, m - 1)] if m >= 3 else [])
    if topology == "complete":
        return [(i, j) for i in range(m) for j in range(i + 1, m)]
    if topology == "random":
        rng = rng or random.Random(0)
        edges = {(rng.randrange(i), i) for i in range(1, m)}  # a random spanning tree
        for i in range(m):
            for j in range(i + 1, m):
                if rng.random() < 0.3:
                    edges.add((i, j))
        return sorted(edges)
    raise UnknownTopology(f"unknown topology {topology!r} (choose from {', '.join(TOPOLOGIES)})")


def build_query(name: str, stats: Sequence[SyntheticStats], edges: Sequence[tuple[int, int]], *,
                network: Network = Network(), execution: Execution = Execution(),
                per_edge_attrs: bool = False, sites: Optional[Sequence[str]] = None) -> Query:
    """Streams ``S1..Sm`` at sites ``N1..Nm`` (or ``sites``) joined along ``edges``.

    ``stats[i]``: ``rate``, ``attributes``, ``selectivity`` (of every join attribute of
    the stream), ``window_ms`` (or ``window_tuples``), optional ``tuple_bytes``.  One
    join attribute ``J`` shared by all predicates, or (``per_edge_attrs``) one
    attribute ``a<i>_<j>`` per edge.
    """
    m = len(stats)
    names = [f"S{i + 1}" for i in range(m)]
    sites = list(sites) if sites is not None else [f"N{i + 1}" for i in range(m)]
    attrs: list[list[str]] = [[] for _ in range(m)]
    preds = []
    for i, j in edges:
        a = f"a{i + 1}_{j + 1}" if per_edge_attrs else "J"
        for k in (i, j):
            if a not in attrs[k]:
                attrs[k].append(a)
        preds.append(Predicate(names[i], a, names[j], a))
    streams = []
    for i, st in enumerate(stats):
        window = (Window("tuples", int(st["window_tuples"])) if "window_tuples" in st
                  else Window("time", int(st.get("window_ms", 1000))))
        sel = tuple((a, float(st["selectivity"])) for a in attrs[i]) if "selectivity" in st else ()
        streams.append(Stream(names[i], i, sites[i], window, tuple(attrs[i]),
                              StreamStats(rate=st.get("rate"), tuple_bytes=st.get("tuple_bytes"),
                                          attributes=st.get("attributes"), selectivity=sel)))
    return Query(name, tuple(streams), tuple(preds), network, execution)
