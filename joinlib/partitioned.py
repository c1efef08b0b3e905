"""Partitioned plans (PMJoin, seed 002): every stream split by join value, a plan per partition.

When join values are spread differently over the sites, one plan for the whole stream is far
from the best: the tuples of value v are best joined where v's traffic is, and that differs per
value.  A :class:`Partitioned` plan routes each tuple by a **partition function**
(:mod:`joinlib.pmjoin.partition`: hash, range, rate-based) of one join attribute class (the
(stream, attribute) pairs that the equality predicates connect, so every tuple of a result has
the same value there) to one of D partitions, and runs an ordinary plan per partition, as the
runtime's instances (query, *partition*, generation): windows, flows, envelopes and result
batches are already keyed by partition.

**Exact by construction.**  A result's tuples of the class's streams carry one value v, so they
all are in partition p(v), and nowhere else; a stream without an attribute in the class is
*broadcast* (each of its tuples goes to every partition).  Every result is therefore produced
by exactly one partition's plan, which is exact on its own inputs.  Tuple-count windows do not
split by value (the last N tuples of a stream are not the last N of a partition): they are
refused with an error.

The plan of each partition is any plan ``--plan`` accepts; ``pmjoin[:hash|range|rate][:D]`` picks it
with ``auto`` on the partition's own data (so a partition whose values live at one site is joined
there).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Optional

from .errors import PlanError
from .model import Query, Tup, Value, equality_classes
from .plan import Plan
from .plan import from_json as plan_from_json
from .pmjoin.partition import HashPartition, PartitionFunction, RangePartition, canonical, order_key
from .pmjoin.partition import from_json as function_from_json
from .pmjoin.ratepart import rate_partition
from .pmjoin.rates import ValueRates

Streams = dict[str, list[Tup]]
SCHEMES = ("hash", "range", "rate")
DEFAULT_PARTS = 4
MAX_PARTS = 1024   # a plan instance per partition at each node it uses

RUN_HELP = """Partitioned plans (PMJoin, seed 002; time windows only; embedded or --cluster):
  pmjoin[:hash|range|rate][:D] split every stream by the value of one join attribute
                               class into D partitions (default rate, D = 4; rate: k-means
                               over the values' per-stream rates measured on the data; range:
                               equal counts of its distinct values), and run per partition
                               the plan 'auto' picks on that partition's data (docs/pmjoin.md)"""


def attribute_class(query: Query) -> tuple[tuple[str, str], ...]:
    """The join attribute class to partition by: the (stream, attribute) pairs connected by
    equality predicates, the class that covers the most streams (the first in query order on
    ties).  Streams outside it are broadcast."""
    find = equality_classes(query.predicates)
    classes: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for s in query.streams:  # query order, so ties go to the first stream's class
        for attr in s.join_attrs:
            classes.setdefault(find((s.name, attr)), []).append((s.name, attr))
    if not classes:
        raise PlanError("a partitioned plan needs a join predicate to partition by")
    best = max(classes.values(), key=lambda c: len({s for s, _ in c}))
    return tuple(best)


@dataclass(frozen=True)
class Partitioned:
    """Streams routed by ``function`` of the attribute class ``by`` ((stream, attribute) pairs;
    a stream not in it is broadcast); partition i runs ``plans[i]``."""

    by: tuple[tuple[str, str], ...]
    function: PartitionFunction
    plans: tuple[Plan, ...]

    def __post_init__(self) -> None:
        if not 1 <= self.function.d <= MAX_PARTS:
            raise PlanError(f"partitioned: {self.function.d} partitions (1 to {MAX_PARTS}: every partition is a "
                            "plan instance at every node it uses)")
        if len(self.plans) != self.function.d:
            raise PlanError(f"partitioned: {self.function.d} partitions but {len(self.plans)} plans")

    def router(self, query: Query) -> dict[str, Optional[Callable[[Tup], int]]]:
        """Per stream: tuple -> partition, or None (broadcast)."""
        out: dict[str, Optional[Callable[[Tup], int]]] = {s.name: None for s in query.streams}
        for stream, attr in self.by:
            if out[stream] is None:
                out[stream] = _route(self.function, query.stream(stream).attr_index(attr))
        return out

    def split(self, query: Query, streams: Streams) -> list[Streams]:
        """The input of each partition (broadcast streams whole in every one)."""
        parts: list[Streams] = [{s.name: [] for s in query.streams} for _ in self.plans]
        for name, route in self.router(query).items():
            tups = streams.get(name, [])
            if route is None:
                for p in parts:
                    p[name] = list(tups)
                continue
            for t in tups:
                parts[route(t)][name].append(t)
        return parts

    def to_json(self) -> dict[str, Any]:
        return {"partitioned": {"by": [list(x) for x in self.by], "function": self.function.to_json(),
                                "plans": [p.to_json() for p in self.plans]}}

    @staticmethod
    def from_json(query: Query, obj: Any) -> "Partitioned":
        """The inverse of :meth:`to_json` (a plan message's ``plan``), validated against ``query``."""
        body = obj.get("partitioned") if isinstance(obj, dict) else None
        if not (isinstance(body, dict) and isinstance(body.get("plans"), list) and isinstance(body.get("by"), list)):
            raise PlanError('a partitioned plan is {"partitioned": {"by": [[stream, attr], ...], '
                            '"function": {...}, "plans": [plan, ...]}}')
        return Partitioned(by_from_json(query, body["by"]), function_from_json(body.get("function")),
                           tuple(plan_from_json(query, p) for p in body["plans"]))

    def route(self, query: Query, host: Any) -> None:
        """Have ``host`` (:meth:`joinlib.runtime.host.Host.set_routes`) split the source tuples it is fed."""
        host.set_routes(query.name, len(self.plans), self.router(query))

    def describe(self) -> str:
        by = ", ".join(f"{s}.{a}" for s, a in self.by)
        lines = [f"partitioned by {by} ({self.function.to_json()['kind']}, {len(self.plans)} partitions)"]
        for i, p in enumerate(self.plans):
            lines.append(f"  partition {i}: " + p.describe().replace("\n", "\n    "))
        return "\n".join(lines)


def by_from_json(query: Query, raw: Any) -> tuple[tuple[str, str], ...]:
    """A partitioned plan's ``by`` ([[stream, attribute], ...]) checked against ``query`` (which must
    have time windows only)."""
    if not isinstance(raw, list):
        raise PlanError(f"partitioned: 'by' is a list of [stream, attribute] pairs, not {raw!r:.60}")
    by: list[tuple[str, str]] = []
    for x in raw:
        if not (isinstance(x, list) and len(x) == 2 and all(isinstance(v, str) for v in x)):
            raise PlanError(f"partitioned: 'by' holds [stream, attribute] pairs, not {x!r:.60}")
        if x[0] not in query.names or x[1] not in query.stream(x[0]).join_attrs:
            raise PlanError(f"partitioned: {x[0]}.{x[1]} is not a join attribute of query {query.name}")
        by.append((x[0], x[1]))
    check_partitionable(query)
    return tuple(by)


def _route(fn: PartitionFunction, i: int) -> Callable[[Tup], int]:
    return lambda t: fn(t.key[i])


def check_partitionable(query: Query) -> None:
    tuples = [s.name for s in query.streams if not s.window.is_time]
    if tuples:
        raise PlanError(f"a partitioned plan needs time windows: {', '.join(tuples)} "
                        "has a tuple-count window, whose last N tuples are not the last N of a "
                        "partition (use a time window, or an unpartitioned plan)")


def parse_spec(spec: str) -> tuple[str, int]:
    """``pmjoin[:hash|range|rate][:D]`` -> (scheme, D)."""
    scheme, parts = "rate", DEFAULT_PARTS
    for arg in spec.split(":")[1:]:
        if arg in SCHEMES:
            scheme = arg
        elif arg.isdigit() and 1 <= int(arg) <= MAX_PARTS:
            parts = int(arg)
        else:
            raise PlanError(f"pmjoin: unknown argument {arg!r} in {spec!r} "
                            f"(pmjoin[:{'|'.join(SCHEMES)}][:D], D a number of partitions from 1 to {MAX_PARTS})")
    return scheme, parts


def is_partitioned(spec: str) -> bool:
    return spec == "pmjoin" or spec.startswith("pmjoin:")


def is_partitioned_json(plan: Any) -> bool:
    """Is a plan message's ``plan`` a partitioned plan's JSON?"""
    return isinstance(plan, dict) and "partitioned" in plan


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
    return rate_partition(rates, parts)


def build_from_stats(query: Query, spec: str, stats: Any, choose: Callable[[Query], Plan]) -> Partitioned:
    """The partitioned plan ``spec`` without data (a continuous query): the function from per-value rates
    (:func:`value_stats`; ``hash`` needs none) and each partition's plan chosen by ``choose`` on the query
    with its streams' rates cut to the partition's share of the values (the whole rate / D without them)."""
    from .query import parse_query, query_to_dict
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
