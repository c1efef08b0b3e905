"""The statistics the byte model reads: from the query file, or measured from data.

:class:`Inputs` holds the query (whose ``stats`` give rates, tuple sizes and key selectivities)
and a representative value of every join attribute, and the query as declared: the runtime sizes
its Bloom filters by the *declared* statistics, so the model does too.  :func:`from_query` takes the declared
statistics (defaults as in ``docs/cost-model.md``); :func:`from_data` measures them first
(:mod:`joinlib.data.stats`: rate, tuple bytes as the wire encodes them, f = 1 / distinct values) and
takes the key values from the data.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from joinlib.costs.encoding import Encoding, default_key_value
from joinlib.costs.unit_time import full_bytes, selectivity
from joinlib.data.stats import stream_stats, with_measured
from joinlib.model import Query, Tup, Value


@dataclass(frozen=True)
class Inputs:
    """What the byte model is computed from (see the module docstring)."""

    query: Query
    key_values: dict[str, tuple[Value, ...]]
    measured: bool = False
    declared: Optional[Query] = None  # the query as the runtime sees it (default: ``query``)

    def encoding(self, horizon_s: float = 15.0) -> Encoding:
        return Encoding(self.query, {s.name: full_bytes(s) for s in self.query.streams}, self.key_values, horizon_s,
                        self.declared or self.query)


def from_query(query: Query) -> Inputs:
    """The declared statistics, with generator-shaped key values."""
    keys = {s.name: tuple(default_key_value(round(1 / selectivity(s, a))) for a in s.join_attrs)
            for s in query.streams}
    return Inputs(query, keys)


def domain_size(n: int, seen: int) -> float:
    """The number d of equally likely values that ``n`` draws most likely came from, given that
    ``seen`` distinct values were drawn: the d solving d·(1 − (1 − 1/d)^n) = seen.  (1 / distinct,
    the paper's f, is far off while the domain is not exhausted: 800 draws over 5,000 values show
    ~750 distinct.)  No repeat at all gives no upper bound: then n²."""
    if seen <= 1:
        return 1.0
    if seen >= n:
        return float(max(n, 1)) ** 2
    lo, hi = float(seen), float(seen)
    while hi * -math.expm1(n * math.log1p(-1.0 / hi)) < seen and hi < 1e12:
        hi *= 2
    for _ in range(60):
        mid = (lo + hi) / 2
        if mid * -math.expm1(n * math.log1p(-1.0 / mid)) < seen:
            lo = mid
        else:
            hi = mid
    return hi


def from_data(query: Query, streams: dict[str, list[Tup]]) -> Inputs:
    """Statistics measured on ``streams`` (declared ones where a stream has no data); the key
    selectivity is 1 / :func:`domain_size` of each join attribute."""
    measured = [stream_stats(s, streams.get(s.name, [])) for s in query.streams]
    for m in measured:
        n = m["tuples"]
        for v in m["join_attributes"].values():
            if n and v["distinct"]:
                v["selectivity"] = 1.0 / domain_size(n, v["distinct"])
    q = with_measured(query, measured)
    base = from_query(q)
    keys = dict(base.key_values)
    for s in q.streams:
        tups = streams.get(s.name) or []
        if tups:
            keys[s.name] = tuple(tups[len(tups) // 2].key)
    return Inputs(q, keys, measured=True, declared=query)


def inputs_for(query: Query, streams: Optional[dict[str, list[Tup]]] = None) -> Inputs:
    """:func:`from_data` when there is data, else :func:`from_query`."""
    return from_data(query, streams) if streams else from_query(query)
