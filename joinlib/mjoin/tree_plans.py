"""Which MJoin trees to run: ``--plan mjoin``, ``mjoin:FILE.json`` and ``pmjoin[...]:mjoin``.

``mjoin`` is STREAMJOINOPT (seed 002's Algorithm 1) over the query's statistics, measured from the
data where the query file has none. ``pmjoin[:hash|range|rate][:D]:mjoin`` is the paper's PMJoin
itself: the partition function of :mod:`joinlib.plan.partitioned`, and per partition group the tree
STREAMJOINOPT places under the per-value rate model restricted to the group's values
(:func:`joinlib.pmjoin.plan.plan_pmjoin`'s trees), each run as its own operators
(:mod:`joinlib.sim.tree_engine`).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Optional

from joinlib.data.stats import stream_stats, with_measured
from joinlib.errors import JoinlibError, PlanError
from joinlib.mjoin.derived import TreeProgram, lower_tree
from joinlib.model import Query, StreamStats, Tup
from joinlib.plan import partitioned as pm
from joinlib.plan.logical import Plan
from joinlib.plan.partition import from_json as function_from_json
from joinlib.plan.partitioned import Partitioned, by_from_json
from joinlib.pmjoin import partitioned as choose_pm
from joinlib.pmjoin.plan import group_columns
from joinlib.pmjoin.stats import selectivity_model, single_class, value_model
from joinlib.pmjoin.streamjoinopt import stream_join_opt
from joinlib.pmjoin.tree import Tree, from_json, to_json
from joinlib.query import parse_query, query_to_dict

Streams = dict[str, list[Tup]]

RUN_HELP = """MJoin trees (seed 002's STREAMJOINOPT; time windows only; embedded or --cluster):
  mjoin                        the tree STREAMJOINOPT places over the query's statistics
                               (measured from --data where the file has none): one MJoin per
                               node, each input shipped to it once, intermediate results kept
                               in windows that expire with their earliest tuple
  mjoin:FILE.json              a tree of your own: {"mjoin": NODE, "inputs": [...]} with leaves
                               {"stream": S, "node": SITE}
  pmjoin[:hash|range|rate][:D]:mjoin
                               PMJoin as the paper runs it: per partition group the tree
                               STREAMJOINOPT places for that group's values (docs/pmjoin.md)"""


def is_tree(spec: str) -> bool:
    return spec == "mjoin" or spec.startswith("mjoin:") or (spec.startswith("pmjoin") and spec.endswith(":mjoin"))


def measured(query: Query, streams: Streams) -> Query:
    """``query`` with rates, tuple sizes and selectivities measured on ``streams`` (over the data's
    whole span: a substream's rate is its share of the time, not of its own span); a stream without
    tuples gets a tiny rate and selectivity 1."""
    q = with_measured(query, [stream_stats(s, streams.get(s.name, [])) for s in query.streams])
    tss = [t.ts for tups in streams.values() for t in tups]
    span = max(1, max(tss) - min(tss) + 1) / 1000.0 if tss else 1.0
    out = []
    for s in q.streams:
        sel = tuple((a, s.stats.selectivity_of(a) or 1.0) for a in s.join_attrs)
        st = StreamStats(rate=max(len(streams.get(s.name, [])) / span, 1e-6), tuple_bytes=s.stats.tuple_bytes,
                         attributes=s.stats.attributes, selectivity=sel)
        out.append(replace(s, stats=st))
    return replace(q, streams=tuple(out))


def streamjoinopt(query: Query) -> Tree:
    return stream_join_opt(selectivity_model(query))


def plan_tree(query: Query, spec: str, streams: Optional[Streams] = None) -> TreeProgram:
    """``mjoin`` or ``mjoin:FILE.json`` (a tree in the JSON of :func:`joinlib.pmjoin.tree.to_json`, or
    ``{"mjoin_tree": ...}``) lowered over ``query``."""
    _, sep, arg = spec.partition(":")
    if not sep:
        if streams is None:
            return lower_tree(query, streamjoinopt(query))
        return lower_tree(query, _measured_tree(query, streams))
    try:
        obj = json.loads(Path(arg).read_text())
    except OSError as e:
        raise JoinlibError(f"--plan {spec}: cannot read {arg}: {e.strerror}") from None
    except ValueError as e:
        raise JoinlibError(f"--plan {spec}: {arg} is not JSON: {e}") from None
    if isinstance(obj, dict) and set(obj) == {"mjoin_tree"}:
        obj = obj["mjoin_tree"]
    try:
        return lower_tree(query, from_json(obj))
    except PlanError as e:
        raise PlanError(f"--plan {spec}: {e}") from None


def _measured_tree(query: Query, streams: Streams) -> Tree:
    """STREAMJOINOPT on data: under the per-value rate model where one attribute class joins every
    stream (the paper's model: it sees which values meet where), else on measured selectivities."""
    try:
        members = single_class(query)
    except PlanError:
        return streamjoinopt(measured(query, streams))
    rates = choose_pm.value_rates_of(query, streams, tuple(sorted(members, key=lambda m: query.stream(m[0]).pos)))
    return stream_join_opt(value_model(measured(query, streams), rates))


@dataclass(frozen=True)
class PartitionedTrees:
    """``pmjoin[...]:mjoin``: the source tuples routed as ``split`` routes them (its plans are unused), and
    partition ``p`` running ``programs[p]`` (its base query named ``QUERY.pP``) on those routed to it."""

    split: Partitioned
    programs: tuple[TreeProgram, ...]

    def to_json(self) -> dict[str, Any]:
        body = self.split.to_json()["partitioned"]
        return {"mjoin_trees": [to_json(p.tree) for p in self.programs], "by": body["by"],
                "function": body["function"]}

    @staticmethod
    def from_json(query: Query, obj: Any) -> "PartitionedTrees":
        """The inverse of :meth:`to_json` against ``query``; a mistake is a :class:`PlanError`."""
        trees = obj.get("mjoin_trees") if isinstance(obj, dict) else None
        if not isinstance(trees, list) or not trees:
            raise PlanError('partitioned MJoin trees are {"mjoin_trees": [tree, ...], "by": [[stream, attr], ...], '
                            '"function": {...}}')
        assert isinstance(obj, dict)
        split = Partitioned(by_from_json(query, obj.get("by")), function_from_json(obj.get("function")),
                            tuple(Plan(()) for _ in trees))
        return PartitionedTrees(split, tuple(lower_tree(part_query(query, p), from_json(t))
                                             for p, t in enumerate(trees)))


@dataclass(frozen=True)
class SharedTrees:
    """Several queries' trees deployed together (seed 001's reuse, :func:`joinlib.mjoin.derived.deploy`): an operator
    their trees share runs once. ``base`` has every stream of theirs once (a stream name is one stream: the same
    site, window and tuples in every query) and their predicates: on Kafka the sources are replayed to its
    topics, and each query's results go to its own ``out.<query>``."""

    base: Query
    programs: tuple[TreeProgram, ...]

    def to_json(self) -> dict[str, Any]:
        return {"mjoin_trees_of": [{"query": query_to_dict(p.base), "mjoin_tree": to_json(p.tree)}
                                   for p in self.programs]}

    @staticmethod
    def from_json(base: Query, obj: Any) -> "SharedTrees":
        """The inverse of :meth:`to_json` against ``base`` (:func:`union_query` of the queries)."""
        items = obj.get("mjoin_trees_of") if isinstance(obj, dict) else None
        if not isinstance(items, list) or not items or not all(isinstance(x, dict) for x in items):
            raise PlanError('shared MJoin trees are {"mjoin_trees_of": [{"query": ..., "mjoin_tree": ...}, ...]}')
        programs = tuple(lower_tree(parse_query(x.get("query"), "mjoin_trees_of"), from_json(x.get("mjoin_tree")))
                         for x in items)
        want = union_query(base.name, [p.base for p in programs])
        if want != base:
            raise PlanError(f"the query of shared MJoin trees must be the union of their queries' streams and "
                            f"predicates ({', '.join(p.base.name for p in programs)})")
        return SharedTrees(base, programs)


def union_query(name: str, queries: list[Query]) -> Query:
    """One query with every stream of ``queries`` once and all their predicates (the first one's network and
    execution); streams of one name must agree on site, window and join attributes."""
    streams: dict[str, Any] = {}
    preds: dict[Any, None] = {}
    for q in queries:
        for st in q.streams:
            old = streams.setdefault(st.name, st)
            if (old.site, old.window, old.join_attrs) != (st.site, st.window, st.join_attrs):
                raise PlanError(f"stream {st.name} differs between the queries (site, window or join attributes); "
                                "queries deployed together must mean one stream by one name")
        preds.update(dict.fromkeys(q.predicates))
    first = queries[0]
    nodes = tuple(dict.fromkeys(n for q in queries for n in q.nodes if n not in {s.site for s in streams.values()}))
    return Query(name, tuple(replace(st, pos=i) for i, st in enumerate(streams.values())), tuple(preds),
                 replace(first.network, nodes=nodes), first.execution)


def part_query(query: Query, p: int) -> Query:
    """Partition ``p``'s copy of ``query`` (its operators are named after it)."""
    return replace(query, name=f"{query.name}.p{p}")


def plan_partitioned_trees(query: Query, streams: Streams, spec: str) -> tuple[PartitionedTrees, list[Streams]]:
    """``pmjoin[:hash|range|rate][:D]:mjoin``: per partition its tree and its input."""
    pm.check_partitionable(query)
    scheme, parts = pm.parse_spec(spec.removesuffix(":mjoin"))
    by = pm.attribute_class(query)
    fn = choose_pm.function_for(query, streams, by, scheme, parts)
    skeleton = pm.Partitioned(by, fn, tuple(Plan(()) for _ in range(fn.d)))
    inputs = skeleton.split(query, streams)
    stats = measured(query, streams)
    try:  # one attribute class over every stream: the paper's per-value rate model, a group per partition
        single_class(query)
    except PlanError:  # joins on several attributes: STREAMJOINOPT on each partition's own measurements
        trees = [streamjoinopt(measured(query, part)) for part in inputs]
    else:
        rates = choose_pm.value_rates_of(query, streams, tuple(sorted(by, key=lambda m: query.stream(m[0]).pos)))
        model = value_model(stats, rates)
        whole = stream_join_opt(model)
        trees = [stream_join_opt(model.group(cols)) if cols else whole
                 for cols in group_columns(model, rates.values, fn)]
    programs = tuple(lower_tree(part_query(query, p), t) for p, t in enumerate(trees))
    return PartitionedTrees(skeleton, programs), inputs
