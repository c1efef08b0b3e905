"""Running multi-query plans: a planner's operator tree as an MJoin tree over a runtime query.

A :class:`~joinlib.multiquery.cost.OperatorPlan` is a binary tree of joins placed at topology nodes, with
*reuses* of streams that earlier queries advertised. :func:`to_tree` turns it into a
:mod:`joinlib.pmjoin.tree` tree (one two-input MJoin per join, at its node). A reuse becomes the
advertising plan's subtree: the join of the same streams at the same node. Given to
:func:`joinlib.mjoin.derived.deploy` together with that plan's tree, it is one operator that runs once,
because reuse requires equal signatures (the same streams and predicates). Selections would make two
operators of one signature compute different streams in the runtime, which does not execute them:
:func:`runtime_query` refuses queries that have any.

:func:`runtime_query` is the :class:`~joinlib.model.Query` that a plan's query runs as. Its streams
are at their topology nodes with one time window, its equi-joins are as written, and the topology
nodes named in ``nodes`` are processing-only nodes. The runtime charges one latency and one
bandwidth per link, not the topology's shortest paths. Where the results go (the query's sink) is
not modelled: they stay at the root operator's node.
"""
from __future__ import annotations

from collections.abc import Sequence

from joinlib.errors import PlanError
from joinlib.model import Execution, Network, Predicate, Query, Stream, StreamStats, Window
from joinlib.multiquery.cost import OperatorPlan, PlanNode
from joinlib.multiquery.streams import Catalogue, ContinualQuery, JoinPredicate
from joinlib.multiquery.topology import PhysicalNetwork
from joinlib.pmjoin.tree import Leaf, MJoin, Tree


def to_tree(plan: OperatorPlan, top: PhysicalNetwork, deployed: Sequence[OperatorPlan] = ()) -> Tree:
    """``plan``'s operator tree as an MJoin tree; a reuse is replaced by the subtree of the plan in
    ``deployed`` (deployed before it) that joins the same streams at the advertised node."""
    return _tree(plan.root, top, deployed)


def _tree(v: PlanNode, top: PhysicalNetwork, deployed: Sequence[OperatorPlan]) -> Tree:
    if v.kind == "source":
        (stream,) = v.streams
        return Leaf(stream, top.nodes[v.node])
    if v.kind == "reuse":
        return _tree(_advertised(v, deployed, top), top, deployed)
    assert v.left is not None and v.right is not None
    return MJoin((_tree(v.left, top, deployed), _tree(v.right, top, deployed)), top.nodes[v.node])


def _advertised(v: PlanNode, deployed: Sequence[OperatorPlan], top: PhysicalNetwork) -> PlanNode:
    for p in deployed:
        for w in p.joins():
            if w.streams == v.streams and w.node == v.node:
                return w
    raise PlanError(f"plan reuses {'⋈'.join(sorted(v.streams))} at {top.nodes[v.node]}, but no deployed plan "
                    "joins those streams there (pass the plans deployed before it)")


def runtime_query(q: ContinualQuery, catalogue: Catalogue, window_ms: int, nodes: Sequence[str] = (),
                  layout: Sequence[JoinPredicate] = (), network: Network = Network(),
                  execution: Execution = Execution()) -> Query:
    """The runtime query ``q`` runs as (see the module docstring); ``nodes``: processing-only nodes the
    plans place joins at. A stream's tuples carry its attributes of ``q``'s joins and of ``layout`` (give
    every query the catalogue's joins, so that a stream is one stream, with one key, in all of them: the
    condition for running an operator once for several queries). Each join attribute's selectivity is
    its predicate's."""
    if q.selections:
        raise PlanError(f"query {q.name}: selections ({', '.join(s.text for s in q.selections)}) are not executed "
                        "by the runtime; plan and run the query without them")
    attrs: dict[str, dict[str, float]] = {s: {} for s in q.streams}
    preds = []
    for p in (*q.joins, *layout):
        for stream, attr in (a.split(".", 1) for a in p.attrs):
            if stream in attrs:
                attrs[stream].setdefault(attr, p.selectivity)
    for p in q.joins:
        (ls, la), (rs, ra) = (a.split(".", 1) for a in p.attrs)
        preds.append(Predicate(ls, la, rs, ra))
    streams = []
    for i, name in enumerate(q.streams):
        base = catalogue.streams[name]
        stats = StreamStats(rate=base.rate, selectivity=tuple(sorted(attrs[name].items())))
        streams.append(Stream(name, i, base.node, Window("time", window_ms), tuple(sorted(attrs[name])), stats))
    sites = {s.site for s in streams}
    extra = tuple(dict.fromkeys(n for n in nodes if n not in sites))
    return Query(q.name, tuple(streams), tuple(preds), Network(network.latency_ms, network.bandwidth_kbps,
                                                                network.links, extra), execution)
