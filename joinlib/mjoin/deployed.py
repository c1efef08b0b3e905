"""Operators deployed for continuous queries, and a new query's tree split into what it reuses and what
it deploys (seed 001's operator reuse on the running system; docs/multiquery.md "Shared operators").

Each inner MJoin of a submitted tree is an *operator deployment* of its own: a query in the control log
(``op-<key>-<run>``) whose plan runs that one operator and publishes its results, as a derived stream,
on ``derived.<producer>`` for any reader.  The query's own deployment runs the root and reads its
derived inputs from those topics.  So an operator lives apart from the query that deployed it: the
planner service stops it once no running query uses it (a reference count, :func:`users`), and a later
query whose tree has an operator of the same :func:`operator_key` subscribes to the running one instead
of deploying it again -- the whole subtree below it included.

Two operators are the same when they compute the same derived stream from the same ingest: the same
base streams (site, window, join attributes *and* source: topic, format, fields), the same equalities
among them (:func:`joinlib.mjoin.derived.signatures`), the same input partition and node, and the same
execution settings (epoch length, delay, idle timeout: they decide which records are on time).  A
reader moves the derived tuples from the operator's origin to its own; results of a reusing query have
their latest tuple at or after its origin, and its operator's inputs count from the operator's start.

Pure: no Kafka.  The planner service (``services/planner``) publishes what :func:`split` returns.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Optional

from joinlib.errors import PlanError
from joinlib.mjoin.derived import TreeProgram, lower_tree, signatures
from joinlib.model import Query
from joinlib.pmjoin.rates import RateModel
from joinlib.pmjoin.tree import Leaf, MJoin, Tree, from_json, members, operators, to_json


@dataclass(frozen=True)
class RunningOp:
    """An operator deployment: its control-log name and run, the operator query publishing its derived
    stream (``derived.<producer>``), its origin, :func:`operator_key`, and every deployment it reads
    (itself included: what a query using it holds a reference to)."""

    name: str
    producer: str
    run: str
    origin_ms: int
    key: str
    uses: tuple[str, ...]
    node: str = ""
    streams: tuple[str, ...] = ()
    tree: Optional[dict[str, Any]] = None   # its subtree (JSON of joinlib.pmjoin.tree): a later tree can be built on it

    def external(self) -> dict[str, Any]:
        """How a reader's plan names it (``plan.external``, :func:`joinlib.control.check.tree_scope`)."""
        return {"op": self.producer, "run": self.run, "origin_ms": self.origin_ms}

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "producer": self.producer, "uses": list(self.uses), "node": self.node,
                "streams": list(self.streams), "tree": self.tree}

    @staticmethod
    def from_json(name: str, run: str, origin_ms: int, obj: Mapping[str, Any]) -> "RunningOp":
        return RunningOp(name, str(obj["producer"]), run, origin_ms, str(obj["key"]),
                         tuple(str(u) for u in obj.get("uses") or ()), str(obj.get("node") or ""),
                         tuple(str(s) for s in obj.get("streams") or ()),
                         obj["tree"] if isinstance(obj.get("tree"), dict) else None)


@dataclass(frozen=True)
class NewOp:
    """An operator deployment to publish: its :class:`RunningOp`, its plan (``only`` its operator) and the
    operator's index in the tree program."""

    op: RunningOp
    plan: dict[str, Any]
    index: int


@dataclass(frozen=True)
class Split:
    """A submitted tree as deployments: the new operator deployments (children first), the query's own
    plan (its root), the deployments it reuses, and every deployment it reads directly or not."""

    new: tuple[NewOp, ...]
    plan: dict[str, Any]
    reused: tuple[str, ...]
    uses: tuple[str, ...]


def operator_key(prog: TreeProgram, i: int) -> str:
    """What makes operator ``i`` of ``prog`` the same as another query's (see the module docstring)."""
    op, base = prog.ops[i], prog.base
    sig = signatures(prog)[i]
    sources = [repr(base.stream(n).source) for n in op.bases]
    ex = base.execution
    doc = [repr(sig), op.node, sorted(op.parts), sources, [ex.interval_ms, ex.max_delay_ms, ex.idle_timeout_ms]]
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=repr).encode()).hexdigest()[:16]


def split(prog: TreeProgram, running: Mapping[str, RunningOp], new_run: Callable[[], str],
          origin_ms: int) -> Split:
    """``prog``'s inner operators as deployments: each one whose :func:`operator_key` is in ``running``
    reused (with everything below it), the others new (runs from ``new_run``, origin ``origin_ms``)."""
    new: list[NewOp] = []
    reused: dict[str, None] = {}
    tree = to_json(prog.tree)
    subtrees = list(operators(prog.tree))   # in the order of prog.ops (lower_tree's)
    children = {i: [j for j, o in enumerate(prog.ops) if o.parent == i] for i in range(len(prog.ops))}

    def resolve(i: int) -> RunningOp:
        key = operator_key(prog, i)
        if key in running:
            reused[running[key].name] = None
            return running[key]
        below = [resolve(j) for j in children[i]]
        run = new_run()
        name = f"op-{key[:10]}-{run[:6]}"
        op = prog.ops[i]
        uses = tuple(dict.fromkeys([name, *(u for b in below for u in b.uses)]))
        ref = RunningOp(name, f"{name}.mj{i}", run, origin_ms, key, uses, op.node, op.bases, to_json(subtrees[i]))
        ext = {prog.ops[j].output: b.external() for j, b in zip(children[i], below, strict=True)}
        new.append(NewOp(ref, {"mjoin_tree": tree, "only": op.output, "external": ext}, i))
        return ref

    root = len(prog.ops) - 1
    inputs = [(j, resolve(j)) for j in children[root]]
    uses = tuple(dict.fromkeys(u for _, r in inputs for u in r.uses))
    plan = {"mjoin_tree": tree, "external": {prog.ops[j].output: r.external() for j, r in inputs}}
    return Split(tuple(new), plan, tuple(reused), uses)


def marginal_cost(query: Query, tree: Tree, keys: frozenset[str], model: RateModel) -> float:
    """Bytes/s ``tree`` would ship that no running operator (by key) already ships: every shipped input
    (:func:`joinlib.pmjoin.tree.plan_cost`) but those below a reused operator.  Seed 001's marginal cost,
    on the rate model of seed 002's trees."""
    prog = lower_tree(query, tree)
    key_of = {id(t): operator_key(prog, i) for i, t in enumerate(operators(tree))}

    def walk(t: Tree) -> float:
        if isinstance(t, Leaf) or key_of[id(t)] in keys and t is not tree:
            return 0.0   # a reused operator's output ships from its node, counted by its reader
        return sum(walk(c) + (model.cost(members(c, model)) if c.node != t.node else 0.0) for c in t.inputs)
    return walk(tree)


def reuse_candidates(query: Query, base: Tree, running: Iterable[RunningOp]) -> list[Tree]:
    """``base`` and, per running operator over some of ``query``'s streams, trees built on it: its subtree
    joined with the other streams at one node (its own, or a stream's site), where lowered over ``query``
    it is the same operator (same key)."""
    out = [base]
    sites = {s.name: s.site for s in query.streams}
    for r in running:
        if r.tree is None or not set(r.streams) < set(sites):
            continue
        sub = from_json(r.tree)
        rest = [Leaf(n, sites[n]) for n in query.names if n not in r.streams]
        for node in dict.fromkeys([r.node, *(leaf.node for leaf in rest)]):
            cand = MJoin((sub, *rest), node)
            try:
                prog = lower_tree(query, cand)
            except PlanError:
                continue   # its streams are not where the operator read them, or not joined as it joined them
            if operator_key(prog, len(prog.ops) - 2) == r.key and cand not in out:
                out.append(cand)
    return out


def choose_tree(query: Query, base: Tree, running: Iterable[RunningOp], model: RateModel) -> tuple[Tree, float]:
    """The candidate (:func:`candidates`) with the least :func:`marginal_cost` (``base`` on a tie), and its cost."""
    ops = list(running)
    keys = frozenset(r.key for r in ops)
    scored = [(marginal_cost(query, t, keys, model), k, t) for k, t in enumerate(reuse_candidates(query, base, ops))]
    cost, _, tree = min(scored, key=lambda x: (x[0], x[1]))
    return tree, cost


def users(op: str, queries: Iterable[tuple[str, Iterable[str]]], leaving: Optional[str] = None) -> list[str]:
    """The running queries (name, the deployments it uses) that use deployment ``op``, but ``leaving``:
    its reference count is their number."""
    return sorted(q for q, uses in queries if q != leaving and op in set(uses))
