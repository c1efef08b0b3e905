"""Choosing a partitioned plan (PMJoin, seed 002) from data or statistics: the partition function
(hash, range, or rate-based over the values' measured per-stream rates) and a plan per partition.

The plan itself, and how tuples are routed, is :mod:`joinlib.plan.partitioned`: the runtime needs that
and nothing here.
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Callable, Optional

from joinlib.errors import PlanError
from joinlib.model import Query, Value
from joinlib.plan.logical import Plan
from joinlib.plan.partition import HashPartition, PartitionFunction, RangePartition, canonical, order_key
from joinlib.plan.partitioned import Partitioned, Streams, attribute_class, check_partitionable, parse_spec
from joinlib.pmjoin.ratepart import rate_partition
from joinlib.pmjoin.rates import ValueRates
from joinlib.pmjoin.sitepart import site_partition
from joinlib.query import parse_query, query_to_dict


def function_for(query: Query, streams: Streams, by: tuple[tuple[str, str], ...], scheme: str,
                 parts: int) -> PartitionFunction:
    """The partition function ``scheme`` of the class ``by`` measured on ``streams``."""
    return function_from_stats(query, value_stats(query, streams, by), scheme, parts)


def value_rates_of(query: Query, streams: Streams, by: tuple[tuple[str, str], ...]) -> ValueRates:
    """Per-value rates (tuples/s over the data's span) of the class's streams: the input of
    rate-based partitioning (seed 002's FStream rate vectors)."""
    counts: dict[str, Counter[bytes]] = {}
    seen: dict[bytes, Value] = {}
    tss = [t.ts for tups in streams.values() for t in tups]
    span = max(1, max(tss) - min(tss) + 1) / 1000.0 if tss else 1.0
    for stream, attr in dict(by).items():
        i, c = query.stream(stream).attr_index(attr), Counter[bytes]()
        for t in streams.get(stream, []):
            k = canonical(t.key[i])
            seen.setdefault(k, t.key[i])
            c[k] += 1
        counts[stream] = c
    keys = sorted(seen, key=lambda k: order_key(seen[k]))
    return ValueRates(tuple(counts), tuple(seen[k] for k in keys),
                      tuple(tuple(c[k] / span for k in keys) for c in counts.values()))


def value_stats(query: Query, streams: Streams, by: Optional[tuple[tuple[str, str], ...]] = None) -> dict[str, Any]:
    """The per-value rates of the attribute class ``by`` (default the query's partition class) as JSON
    (``joinlib stats --values``): what a partitioned plan needs to choose its function when there is
    no data at hand, e.g. for a continuous query (``joinlib submit --plan pmjoin:rate --values FILE``)."""
    by = by or attribute_class(query)
    vr = value_rates_of(query, streams, by)
    return {"by": [list(x) for x in by], "streams": list(vr.streams), "values": list(vr.values),
            "rates": [list(row) for row in vr.rates]}


def function_from_stats(query: Query, stats: Any, scheme: str, parts: int) -> PartitionFunction:
    """The partition function ``scheme`` into ``parts`` partitions from :func:`value_stats`'s JSON."""
    if scheme == "hash":
        return HashPartition(parts)
    if not isinstance(stats, dict) or not all(isinstance(stats.get(k), list) for k in ("streams", "values", "rates")):
        raise PlanError(f"pmjoin:{scheme} needs per-value rates: the JSON 'joinlib stats QUERY --data DIR --values "
                        "FILE' writes ({\"streams\": [...], \"values\": [...], \"rates\": [[...], ...]})")
    for x in stats.get("by") or []:
        if not (isinstance(x, list) and len(x) == 2 and x[0] in query.names
                and x[1] in query.stream(x[0]).join_attrs):
            raise PlanError(f"value statistics: {x!r:.60} is not a [stream, join attribute] of query {query.name}")
    if scheme == "range":
        return RangePartition.from_values(stats["values"], parts)
    try:
        rates = ValueRates(tuple(stats["streams"]), tuple(stats["values"]),
                           tuple(tuple(float(r) for r in row) for row in stats["rates"]))
    except (TypeError, ValueError) as e:
        raise PlanError(f"value statistics: malformed rates ({e})") from None
    for name in rates.streams:
        if name not in query.names:
            raise PlanError(f"value statistics: {name!r} is not a stream of query {query.name}")
    if scheme == "site":
        return site_partition(query, rates)
    return rate_partition(rates, parts)


def build_from_stats(query: Query, spec: str, stats: Any, choose: Callable[[Query], Plan]) -> Partitioned:
    """The partitioned plan ``spec`` without data (a continuous query): the function from per-value rates
    (:func:`value_stats`; ``hash`` needs none) and each partition's plan chosen by ``choose`` on the query
    with its streams' rates cut to the partition's share of the values (the whole rate / D without them)."""
    check_partitionable(query)
    scheme, parts = parse_spec(spec)
    by = attribute_class(query)
    fn = function_from_stats(query, stats, scheme, parts)
    in_class = {s for s, _ in by}
    plans = []
    for p in range(fn.d):
        d = query_to_dict(query)
        for name, spec_ in d["streams"].items():
            if name not in in_class or spec_.get("rate") is None:
                continue
            if stats is None:
                spec_["rate"] = spec_["rate"] / fn.d
            else:
                row = stats["rates"][stats["streams"].index(name)] if name in stats["streams"] else []
                share = sum(r for v, r in zip(stats["values"], row, strict=False) if fn(v) == p)
                spec_["rate"] = max(share, 1e-6)
        plans.append(choose(parse_query(d, f"{query.name} partition {p}")))
    return Partitioned(by, fn, tuple(plans))


def build(query: Query, streams: Streams, spec: str,
          choose: Callable[[Query, Streams], Plan]) -> Partitioned:
    """The partitioned plan ``spec`` names, each partition's plan by ``choose`` on its own data."""
    check_partitionable(query)
    scheme, parts = parse_spec(spec)
    by = attribute_class(query)
    fn = function_for(query, streams, by, scheme, parts)
    skeleton = Partitioned(by, fn, tuple(Plan(()) for _ in range(fn.d)))
    return Partitioned(by, fn, tuple(choose(query, s) for s in skeleton.split(query, streams)))
