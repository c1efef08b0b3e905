"""Site partitioning: each join value to the site that holds most of its tuples (issue 30, item 2).

Why: where keys are skewed differently at each site, a value's tuples are cheapest to join where most of them
are born -- only the other sites' tuples of that value have to travel there.  A partitioned plan (PMJoin, seed
002) whose partition p holds the values most frequent at site p, with a plan per partition (its result site
chosen for the partition's own statistics: a reduction or ``central`` there, as a rule), produces each result at
a site chosen for its value: a *rate-partitioned reduction*.  Exact by the partitioned plan's construction
(:mod:`joinlib.plan.partitioned`: every result's tuples share its partition attribute's value, so one partition
makes it), whatever the function.

The function: partition i is the i-th site (in the query's site order) that holds a stream of the partition
attribute class; a value goes to the site whose class streams have the highest total rate for it, ties to the
earlier site.  Values the statistics never saw go to a hash partition (as every map partition's default).
"""
from __future__ import annotations

import numpy as np

from joinlib.errors import PlanError
from joinlib.model import Query
from joinlib.plan.partition import HashPartition, MapPartition
from joinlib.pmjoin.rates import ValueRates


def class_sites(query: Query, streams: tuple[str, ...]) -> list[str]:
    """The sites holding one of ``streams``, in the query's site order: the partitions of a site partition."""
    born = {query.stream(s).site for s in streams}
    return [s for s in query.sites if s in born]


def site_partition(query: Query, stats: ValueRates) -> MapPartition:
    """The site partition function of ``stats`` (see the module docstring)."""
    sites = class_sites(query, stats.streams)
    if not sites:
        raise PlanError("pmjoin:site: the value statistics name no stream of the query")
    d = len(sites)
    lam = stats.matrix()
    per_site = np.zeros((d, len(stats.values)))
    for i, name in enumerate(stats.streams):
        per_site[sites.index(query.stream(name).site)] += lam[i]
    best = per_site.argmax(axis=0) if stats.values else np.zeros(0, dtype=np.int64)
    assignment = tuple((v, int(best[j])) for j, v in enumerate(stats.values))
    return MapPartition(d, assignment, HashPartition(d, 0))
