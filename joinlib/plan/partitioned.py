"""Partitioned plans (PMJoin, seed 002): every stream split by join value, a plan per partition.

When join values are spread differently over the sites, one plan for the whole stream is far
from the best: the tuples of value v are best joined where v's traffic is, and that differs per
value.  A :class:`Partitioned` plan routes each tuple by a **partition function**
(:mod:`joinlib.plan.partition`: hash, range, rate-based) of one join attribute class (the
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

from dataclasses import dataclass
from typing import Any, Callable, Optional

from joinlib.errors import PlanError
from joinlib.model import Query, Tup, equality_classes
from joinlib.plan.logical import Plan
from joinlib.plan.logical import from_json as plan_from_json
from joinlib.plan.partition import PartitionFunction
from joinlib.plan.partition import from_json as function_from_json

Streams = dict[str, list[Tup]]
SCHEMES = ("hash", "range", "rate", "site")
DEFAULT_PARTS = 4
MAX_PARTS = 1024   # a plan instance per partition at each node it uses

RUN_HELP = """Partitioned plans (PMJoin, seed 002; time windows only; embedded or --cluster):
  pmjoin[:hash|range|rate][:D] split every stream by the value of one join attribute
                               class into D partitions (default rate, D = 4; rate: k-means
                               over the values' per-stream rates measured on the data; range:
                               equal counts of its distinct values), and run per partition
                               the plan 'auto' picks on that partition's data (docs/pmjoin.md)
  pmjoin:site                  one partition per site: each value to the site that holds most
                               of its tuples (results where a value's tuples are born)"""


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
    """``pmjoin[:hash|range|rate][:D]`` or ``pmjoin:site`` -> (scheme, D); ``site``'s D is its number of sites
    (0 here: the function knows it)."""
    scheme, parts, given = "rate", DEFAULT_PARTS, False
    for arg in spec.split(":")[1:]:
        if arg in SCHEMES:
            scheme = arg
        elif arg.isdigit() and 1 <= int(arg) <= MAX_PARTS:
            parts, given = int(arg), True
        else:
            raise PlanError(f"pmjoin: unknown argument {arg!r} in {spec!r} (pmjoin[:hash|range|rate][:D], D a "
                            f"number of partitions from 1 to {MAX_PARTS}, or pmjoin:site: one partition per site)")
    if scheme == "site":
        if given:
            raise PlanError(f"pmjoin:site takes no D ({spec!r}): it has one partition per site")
        parts = 0
    return scheme, parts


def is_partitioned(spec: str) -> bool:
    return spec == "pmjoin" or spec.startswith("pmjoin:")


def is_partitioned_json(plan: Any) -> bool:
    """Is a plan message's ``plan`` a partitioned plan's JSON?"""
    return isinstance(plan, dict) and "partitioned" in plan
