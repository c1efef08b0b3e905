"""``auto``'s candidates of the run kinds that are not one plan of sequences: partitioned plans
(``pmjoin[:hash|range|rate][:D]``), MJoin trees (``mjoin``) and a tree per partition
(``pmjoin[...]:mjoin``), priced with the same byte model as every other candidate (issue 30).

Where keys are skewed differently at each site, a value's tuples are cheapest to join at the site
that holds most of them, and no single plan for the whole stream can do that: a partitioned plan can.
These candidates need per-value statistics, so they are generated only from data (``--data``).

**Pricing.**  Every candidate is priced by :class:`~joinlib.costs.WireModel`, the model that prices
``central``, sequences and reductions:

* a partitioned plan is the sum over its partitions of each partition's plan under the statistics
  measured on that partition's tuples (:func:`part_inputs`: rates over the data's whole span, so a
  partition's rate is its share).  Each partition's plan is the model's cheapest ``central`` or
  reduction over the partition (:func:`part_plan`: the plans that put a value's tuples at the site
  holding most of them; the full ``auto`` search per partition would cost seconds per candidate);
* an MJoin tree runs one operator query per MJoin, ``central`` at its node: each is priced as such,
  with the derived (intermediate) streams' rates from seed 002's selectivity model over the measured
  statistics and tuples as large as their components together (:func:`tree_cost`);
* a tree per partition is the sum of each partition's tree, priced as above on its own statistics.

:func:`price` prices a candidate from per-part statistics; the measurement on a sample
(:mod:`joinlib.planner.auto`) uses it to put each candidate's sample on the whole data's scale.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from joinlib.costs import Inputs, WireModel, from_data
from joinlib.errors import PlanError
from joinlib.mjoin.derived import TreeProgram
from joinlib.mjoin.tree_plans import PartitionedTrees, plan_partitioned_trees, plan_tree
from joinlib.model import Query, StreamStats, Tup
from joinlib.plan import logical as plans
from joinlib.plan.logical import Plan, validate
from joinlib.plan.partitioned import SCHEMES, Partitioned, attribute_class, check_partitionable
from joinlib.planner.measure import Runnable
from joinlib.pmjoin.partitioned import function_for
from joinlib.pmjoin.stats import selectivity_model

Streams = dict[str, list[Tup]]
#: what ``auto`` may choose: a plan of sequences, a plan per partition, a tree, a tree per partition
Candidate = Runnable

PARTS = (2, 4, 8)   # the D of every partitioned candidate
TINY_RATE = 1e-6    # a partition's stream without tuples (the model needs a positive rate)


def kind_of(cand: Candidate) -> str:
    """The run kind of a candidate: plan | pmjoin | mjoin | pmjoin:mjoin."""
    if isinstance(cand, Plan):
        return "plan"
    if isinstance(cand, Partitioned):
        return "pmjoin"
    return "mjoin" if isinstance(cand, TreeProgram) else "pmjoin:mjoin"


# ------------------------------------------------------------------ statistics per part
def span_s(streams: Streams) -> float:
    ts = [t.ts for tups in streams.values() for t in tups]
    return (max(ts) - min(ts) + 1) / 1000.0 if ts else 1.0


def with_rates(inputs: Inputs, rates: dict[str, float]) -> Inputs:
    """``inputs`` with the streams' rates replaced (a stream missing from ``rates`` keeps its own)."""
    q = inputs.query
    ss = tuple(replace(s, stats=replace(s.stats, rate=max(rates[s.name], TINY_RATE))) if s.name in rates else s
               for s in q.streams)
    return replace(inputs, query=replace(q, streams=ss))


def part_inputs(query: Query, part: Streams, span: float) -> Inputs:
    """The byte model's statistics of one partition's tuples, their rates over the whole data's
    ``span`` (a partition's stream is a share of the stream, not a stream of its own span)."""
    return with_rates(from_data(query, part), {s.name: len(part.get(s.name, [])) / span for s in query.streams})


def parts_of(query: Query, cand: Candidate, streams: Streams) -> list[Streams]:
    """The input of each part of ``cand``: the partitions' for a partitioned candidate, else the data."""
    if isinstance(cand, Partitioned):
        return cand.split(query, streams)
    if isinstance(cand, PartitionedTrees):
        return cand.split.split(query, streams)
    return [streams]


def price(query: Query, cand: Candidate, inputs: list[Inputs]) -> float:
    """Bytes per second of ``cand`` under the byte model, ``inputs[i]`` the statistics of part i."""
    if isinstance(cand, Plan):
        return WireModel(inputs[0]).plan_cost(query, cand)
    if isinstance(cand, Partitioned):
        return sum(WireModel(i).plan_cost(query, p) for p, i in zip(cand.plans, inputs, strict=True))
    if isinstance(cand, TreeProgram):
        return tree_cost(cand, inputs[0])
    return sum(tree_cost(p, i) for p, i in zip(cand.programs, inputs, strict=True))


# ------------------------------------------------------------------ partitioned plans
def part_plan(query: Query, inputs: Inputs) -> tuple[Plan, float]:
    """The model's cheapest ``central`` or reduction (default tree) over one partition's statistics."""
    model = WireModel(inputs)
    q = inputs.query
    options = [plans.central(q, n) for n in q.nodes] + [plans.reduction(q, n) for n in q.nodes]
    best = min(((p, model.plan_cost(q, p)) for p in options), key=lambda pc: pc[1])
    return validate(query, best[0]), best[1]


def gen_partitioned(query: Query, streams: Streams) -> Iterable[tuple[str, Candidate, float]]:
    """``pmjoin:SCHEME:D`` for every scheme and D of :data:`PARTS` (and ``pmjoin:site``, one partition per site),
    each partition's plan by
    :func:`part_plan`; nothing for a query that cannot be partitioned (tuple windows, no key)."""
    try:
        check_partitionable(query)
        by = attribute_class(query)
    except PlanError:
        return
    span = span_s(streams)
    for scheme in SCHEMES:
        for d in ((0,) if scheme == "site" else PARTS):   # site: one partition per site
            fn = function_for(query, streams, by, scheme, d)
            skeleton = Partitioned(by, fn, tuple(Plan(()) for _ in range(fn.d)))
            chosen = [part_plan(query, part_inputs(query, part, span)) for part in skeleton.split(query, streams)]
            yield (f"pmjoin:{scheme}" + (f":{d}" if d else ""), Partitioned(by, fn, tuple(p for p, _ in chosen)),
                   sum(c for _, c in chosen))


# ------------------------------------------------------------------ MJoin trees
def tree_cost(program: TreeProgram, inputs: Inputs) -> float:
    """Bytes per second of an MJoin tree: each operator ``central`` at its node, a derived input
    at the rate seed 002's selectivity model gives its streams' join over ``inputs``' statistics and
    with its components' tuple sizes and keys together."""
    stats = {s.name: s for s in inputs.query.streams}
    rates = selectivity_model(inputs.query)
    total = 0.0
    for op in program.ops:
        streams, keys = [], {}
        for s, part in zip(op.query.streams, op.parts, strict=True):
            comps = [stats[p] for p in part]
            keys[s.name] = tuple(v for p in part for v in inputs.key_values[p])
            if len(part) == 1:
                streams.append(replace(s, stats=comps[0].stats))
                continue
            size = sum(c.stats.tuple_bytes or 0 for c in comps) or None
            sel = tuple((f"{c.name}.{a}", c.stats.selectivity_of(a) or 1.0) for c in comps for a in c.join_attrs)
            rate = rates.rate(frozenset(rates.index(p) for p in part))
            streams.append(replace(s, stats=StreamStats(rate=max(rate, TINY_RATE), tuple_bytes=size,
                                                        selectivity=sel)))
        q = replace(op.query, streams=tuple(streams))
        total += WireModel(Inputs(q, keys, measured=True)).plan_cost(q, plans.central(q, op.node))
    return total


def gen_trees(query: Query, streams: Streams, inputs: Inputs) -> Iterable[tuple[str, Candidate, float]]:
    """``mjoin`` (STREAMJOINOPT on the data) and ``pmjoin:SCHEME:D:mjoin`` for every scheme and D (``site``: no D);
    nothing for a query whose trees cannot run (tuple windows, an MJoin that would be a cross product)."""
    try:
        program = plan_tree(query, "mjoin", streams)
    except PlanError:
        return
    try:
        yield "mjoin", program, tree_cost(program, inputs)
    except PlanError:   # a statistic the rate model needs is missing
        return
    span = span_s(streams)
    for scheme in SCHEMES:
        for d in ((0,) if scheme == "site" else PARTS):
            name = f"pmjoin:{scheme}" + (f":{d}" if d else "") + ":mjoin"
            try:
                trees, parts = plan_partitioned_trees(query, streams, name)
                cost = sum(tree_cost(p, part_inputs(query, s, span))
                           for p, s in zip(trees.programs, parts, strict=True))
            except PlanError:
                continue
            yield name, trees, cost


def gen_kinds(query: Query, streams: Streams, inputs: Inputs) -> list[tuple[str, Candidate, float]]:
    """Every candidate of this module, priced (name, candidate, model bytes per second)."""
    return [*gen_partitioned(query, streams), *gen_trees(query, streams, inputs)]
