"""Logical join plans (Definition 1 of the semijoin paper).

A plan gives, for every head stream, a *join sequence*: the other streams in the
order they are joined, each with the one-way algorithm that joins the running
intermediate stream to it.  Optionally a sequence starts at another site than the
head's own (``start``): the ``central`` plan uses that to run everything at one site,
as centralized engines do.

A *reduction* (``reduce``) is the other shape: every result is produced at one node R, as
with ``central``, but a stream ships to R only its tuples that can still take part in a result.
Its home learns that from its neighbours' keys along a spanning tree of the join graph, in a
semijoin program run every epoch (each stream is filtered by the keys of all its neighbours,
which are themselves filtered by theirs: a full reducer for acyclic joins, after Bernstein and
Chiu's semijoin programs and Yannakakis; ``docs/bytes.md``).  Its sequences are those of
``central`` at R; ``Plan.reduce`` names R and the tree.  A direction of a tree edge may be
*skipped* (``skip``: (sender, receiver) pairs): the sender sends that neighbour no key sets, and
the receiver does not filter by the sender (its tuples pass toward its other neighbours and ship
to R as if the sender had every key) -- where filtering costs more than it saves.

JSON form (the CLI's ``--plan FILE``)::

    {"S1": [["S2", "SM-S1"], ["S3", "SP-D"]], "S2": [...], ...}
    {"S1": {"start": "siteA", "steps": [["S2", "SP-S"]]}, ...}
    {"reduce": {"site": "r2", "tree": [["S1", "S2"], ["S2", "S3"]]}}
    {"reduce": {"site": "r2", "tree": [["S1", "S2"], ["S2", "S3"]], "skip": [["S1", "S2"]]}}
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Optional, Union

from joinlib.algorithms import ALGORITHMS
from joinlib.algorithms.simple import CENTRAL
from joinlib.errors import PlanError
from joinlib.model import Query, equality_classes

StepsJSON = list[list[str]]  # [[stream, algorithm], ...]
#: the JSON form of a plan: head stream -> its steps, or {"start": site, "steps": steps}
PlanJSON = dict[str, Union[StepsJSON, dict[str, Union[str, StepsJSON]]]]


@dataclass(frozen=True)
class Step:
    stream: str
    algorithm: str


@dataclass(frozen=True)
class Sequence:
    head: str
    steps: tuple[Step, ...]
    start: Optional[str] = None  # site where the head batch is processed; None = head's site


@dataclass(frozen=True)
class Reduce:
    """A reduction to ``site``: the semijoin program runs along ``tree`` (spanning tree edges of
    the join graph, as pairs of stream names) rooted at ``root``.  ``cross``: the join graph's
    edges off the tree (a cyclic graph) exchange key sets too, after the tree's rounds, and filter
    only what ships to ``site`` (:func:`off_tree`).  ``skip``: directed edges (sender, receiver),
    of the tree or crossing, whose key sets are not sent; the receiver treats the sender as passing
    everything (fewer tuples filtered, never a result lost)."""

    site: str
    tree: tuple[tuple[str, str], ...]
    root: str
    skip: tuple[tuple[str, str], ...] = ()
    cross: bool = False

    def edges(self, query: "Query") -> tuple[tuple[str, str], ...]:
        """The edges that carry key sets: the tree's, then (``cross``) the others of the join graph."""
        return self.tree + (off_tree(query, self.tree) if self.cross else ())


@dataclass(frozen=True)
class Plan:
    sequences: tuple[Sequence, ...]
    reduce: Optional[Reduce] = None

    def sequence(self, head: str) -> Sequence:
        for s in self.sequences:
            if s.head == head:
                return s
        raise KeyError(head)

    def to_json(self) -> PlanJSON:
        if self.reduce is not None:
            r = self.reduce
            spec: dict[str, Any] = {"site": r.site, "tree": [list(e) for e in r.tree], "root": r.root}
            if r.cross:
                spec["cross"] = True
            if r.skip:
                spec["skip"] = [list(e) for e in r.skip]
            return {"reduce": spec}
        out: PlanJSON = {}
        for seq in self.sequences:
            steps: StepsJSON = [[st.stream, st.algorithm] for st in seq.steps]
            out[seq.head] = steps if seq.start is None else {"start": seq.start, "steps": steps}
        return out

    def describe(self) -> str:
        if self.reduce is not None:
            r = self.reduce
            tree = ", ".join(f"{a}-{b}" for a, b in r.tree)
            skip = f"; no key sets {', '.join(f'{a}->{b}' for a, b in r.skip)}" if r.skip else ""
            cross = "; off-tree edges cross-checked" if r.cross else ""
            return f"reduce to {r.site} (tree {tree}, root {r.root}{cross}{skip})"
        lines = []
        for seq in self.sequences:
            at = f" (at {seq.start})" if seq.start else ""
            chain = " -> ".join(f"{st.stream}[{st.algorithm}]" for st in seq.steps)
            lines.append(f"{seq.head}{at}: {chain}")
        return "\n".join(lines)


def validate(query: Query, plan: Plan) -> Plan:
    """Check the plan against the query; raise :class:`PlanError` naming the problem."""
    names = set(query.names)
    heads = [s.head for s in plan.sequences]
    if sorted(heads) != sorted(names):
        missing = sorted(names - set(heads))
        extra = sorted(set(heads) - names)
        raise PlanError(
            "the plan needs exactly one join sequence per stream"
            + (f"; missing: {', '.join(missing)}" if missing else "")
            + (f"; unknown or repeated: {', '.join(extra) or ', '.join(h for h in heads if heads.count(h) > 1)}"
               if extra or len(heads) != len(set(heads)) else "")
        )
    for seq in plan.sequences:
        if seq.start is not None and seq.start not in query.nodes:
            raise PlanError(f"sequence of {seq.head}: start site {seq.start!r} is not a node of the query "
                            f"(nodes: {', '.join(query.nodes)}; add processing-only nodes under network.nodes)")
        done = {seq.head}
        for st in seq.steps:
            if st.algorithm not in ALGORITHMS:
                raise PlanError(f"sequence of {seq.head}: unknown algorithm {st.algorithm!r} "
                                f"(choose from {', '.join(ALGORITHMS)})")
            if st.stream not in names:
                raise PlanError(f"sequence of {seq.head}: unknown stream {st.stream!r}")
            if st.stream in done:
                raise PlanError(f"sequence of {seq.head}: stream {st.stream} appears twice")
            if done.isdisjoint(query.neighbours(st.stream)):   # no predicate shared with a joined stream
                raise PlanError(f"sequence of {seq.head}: {st.stream} shares no join predicate with "
                                f"{', '.join(sorted(done))} (a join sequence must follow the join graph)")
            done.add(st.stream)
        if done != names:
            raise PlanError(f"sequence of {seq.head} does not reach {', '.join(sorted(names - done))}")
    return plan


def from_json(query: Query, data: Union[dict[str, Any], str, Path]) -> Plan:
    """Parse the JSON plan form (a dict, a JSON string, or a file path) and validate it."""
    data = _load(data)
    if "reduce" in data:
        return _reduce_from_json(query, data)
    seqs = []
    for head, spec in data.items():
        start = None
        if isinstance(spec, dict):
            start = spec.get("start")
            spec = spec.get("steps")
        if not isinstance(spec, list) or not all(
            isinstance(s, (list, tuple)) and len(s) == 2 and all(isinstance(x, str) for x in s) for s in spec
        ):
            raise PlanError(f"sequence of {head}: expected a list of [stream, algorithm] pairs")
        seqs.append(Sequence(head, tuple(Step(s, a) for s, a in spec), start))
    order = {n: i for i, n in enumerate(query.names)}
    seqs.sort(key=lambda s: order.get(s.head, len(order)))
    return validate(query, Plan(tuple(seqs)))


def _load(data: Union[dict[str, Any], str, Path]) -> dict[str, Any]:
    if isinstance(data, Path):
        try:
            data = json.loads(data.read_text())
        except FileNotFoundError:
            raise PlanError(f"plan file {data} not found") from None
        except json.JSONDecodeError as e:
            raise PlanError(f"plan file {data} is not valid JSON: {e}") from None
    elif isinstance(data, str):
        try:
            data = json.loads(data)
        except json.JSONDecodeError as e:
            raise PlanError(f"plan is not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise PlanError("a plan is a JSON object mapping each head stream to its join sequence")
    return data


def _reduce_from_json(query: Query, data: dict[str, Any]) -> Plan:
    spec = data["reduce"]
    if len(data) != 1 or not isinstance(spec, dict) or not isinstance(spec.get("site"), str):
        raise PlanError('a reduction is {"reduce": {"site": NODE, "tree"?: [[A, B], ...], "root"?: STREAM, '
                        '"cross"?: BOOL, "skip"?: [[SENDER, RECEIVER], ...]}}')
    unknown = sorted(set(spec) - {"site", "tree", "root", "skip", "cross"})
    if unknown:
        raise PlanError(f"reduce: unknown field {', '.join(map(repr, unknown))} "
                        "(fields: site, tree, root, cross, skip)")
    cross = spec.get("cross", False)
    if not isinstance(cross, bool):
        raise PlanError("reduce.cross: expected true or false (key sets also along the join graph's off-tree edges)")
    tree = spec.get("tree")
    if tree is not None and not _pairs(tree):
        raise PlanError("reduce.tree: expected a list of [stream, stream] edges")
    root = spec.get("root")
    if root is not None and not isinstance(root, str):
        raise PlanError("reduce.root: expected a stream name")
    skip = spec.get("skip", [])
    if not _pairs(skip):
        raise PlanError("reduce.skip: expected a list of [sender, receiver] pairs (edges whose key sets "
                        "are not sent in that direction)")
    return reduction(query, spec["site"], None if tree is None else [tuple(e) for e in tree], root,
                     [tuple(e) for e in skip], cross)


def _pairs(data: Any) -> bool:
    return isinstance(data, list) and all(
        isinstance(e, (list, tuple)) and len(e) == 2 and all(isinstance(x, str) for x in e) for e in data)


def reduction(query: Query, site: Optional[str] = None, tree: Optional[list[tuple[str, str]]] = None,
              root: Optional[str] = None, skip: Iterable[tuple[str, str]] = (), cross: bool = False) -> Plan:
    """Produce every result at ``site`` (default as for :func:`central`) after a semijoin program
    along ``tree`` (default: a breadth-first spanning tree from the most central stream), rooted at
    ``root`` (default: that stream), has filtered what every stream ships there; ``skip``: directed
    edges (sender, receiver) whose key sets are not sent; ``cross``: the off-tree edges of a cyclic
    join graph filter too (see :class:`Reduce`)."""
    base = central(query, site)
    at = base.sequences[0].start
    assert at is not None
    if tree is None:
        root = root or center(query)
        tree = spanning_tree(query, root)
    else:
        _check_tree(query, tree)
        root = root or tree_center(query.names, tree)
    if root not in query.names:
        raise PlanError(f"reduce.root: unknown stream {root!r}")
    edges = tuple((a, b) for a, b in (sorted(e, key=query.names.index) for e in tree))
    cross = cross and bool(off_tree(query, edges))   # an acyclic graph has no edge off its tree
    used = edges + (off_tree(query, edges) if cross else ())
    return Plan(base.sequences, Reduce(at, edges, root, _check_skip(query, used, skip), cross))


def with_skip(query: Query, plan: Plan, skip: Iterable[tuple[str, str]]) -> Plan:
    """The reduction ``plan`` with ``skip`` as its skipped directions (validated and ordered as
    :func:`reduction` does), its sequences kept: what a search over skips builds per trial."""
    red = plan.reduce
    if red is None:
        raise PlanError("with_skip: not a reduction")
    return Plan(plan.sequences, replace(red, skip=_check_skip(query, red.edges(query), skip)))


def off_tree(query: Query, tree: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """The join graph's edges (stream pairs with a predicate, in query order) that ``tree`` leaves out and
    whose predicates the tree's do not imply.  Equality is transitive: with one shared key
    (S1.J = S2.J = S3.J) the tree's filters already carry S2.J = S3.J, and an off-tree set would only
    repeat them; with a key per edge (S2.c = S3.c) it stops what the tree cannot."""
    find = equality_classes(p for a, b in tree for p in query.predicates_between(a, b))
    on = {frozenset(e) for e in tree}
    names = query.names
    return tuple((a, b) for i, a in enumerate(names) for b in names[i + 1:] if frozenset((a, b)) not in on
                 and any(find((p.left, p.left_attr)) != find((p.right, p.right_attr))
                         for p in query.predicates_between(a, b)))


def _check_skip(query: Query, tree: tuple[tuple[str, str], ...],
                skip: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """``skip`` validated against the edges with key sets (``tree``: the tree's, and the crossing ones
    if used), without repeats, in query order (sender, then receiver)."""
    names, edges = set(query.names), {frozenset(e) for e in tree}
    out: set[tuple[str, str]] = set()
    for a, b in skip:
        for x in (a, b):
            if x not in names:
                raise PlanError(f"reduce.skip: unknown stream {x!r} in {a}->{b} (streams: {', '.join(query.names)})")
        if a == b or frozenset((a, b)) not in edges:
            tree_text = ", ".join("-".join(e) for e in tree)
            what = "a tree edge (tree" if len(edges) == len(names) - 1 else "a tree or off-tree edge (edges"
            raise PlanError(f"reduce.skip: {a}->{b} is not a direction of {what}: {tree_text})")
        out.add((a, b))
    return tuple(sorted(out, key=lambda e: (query.names.index(e[0]), query.names.index(e[1]))))


def _check_tree(query: Query, tree: list[tuple[str, str]]) -> None:
    names = set(query.names)
    for a, b in tree:
        if a not in names or b not in names:
            raise PlanError(f"reduce.tree: unknown stream in edge {a}-{b}")
        if not query.predicates_between(a, b):
            raise PlanError(f"reduce.tree: {a} and {b} share no join predicate")
    if len(tree) != len(names) - 1:
        raise PlanError(f"reduce.tree: a spanning tree of {len(names)} streams has {len(names) - 1} edges, "
                        f"not {len(tree)}")
    seen, todo = {query.names[0]}, [query.names[0]]
    while todo:
        x = todo.pop()
        for a, b in tree:
            for u, v in ((a, b), (b, a)):
                if u == x and v not in seen:
                    seen.add(v)
                    todo.append(v)
    if seen != names:
        raise PlanError(f"reduce.tree does not connect {', '.join(sorted(names - seen))}")


def spanning_tree(query: Query, root: str) -> list[tuple[str, str]]:
    """Breadth-first spanning tree of the join graph from ``root`` (neighbours in query order)."""
    done, frontier, edges = {root}, [root], []
    while frontier:
        nxt = []
        for f in frontier:
            for n in query.neighbours(f):
                if n not in done:
                    done.add(n)
                    edges.append((f, n))
                    nxt.append(n)
        frontier = nxt
    return edges


def center(query: Query) -> str:
    """The stream whose breadth-first tree is shallowest (first in query order on ties): a
    semijoin program rooted there takes the fewest rounds of messages per epoch."""
    return min(query.names, key=lambda n: (_height(spanning_tree(query, n), n), query.names.index(n)))


def tree_center(names: tuple[str, ...], tree: list[tuple[str, str]]) -> str:
    return min(names, key=lambda n: (_height(tree, n), names.index(n)))


def _height(tree: list[tuple[str, str]], root: str) -> int:
    depth, todo = {root: 0}, [root]
    while todo:
        x = todo.pop()
        for a, b in tree:
            for u, v in ((a, b), (b, a)):
                if u == x and v not in depth:
                    depth[v] = depth[x] + 1
                    todo.append(v)
    return max(depth.values())


def central(query: Query, site: Optional[str] = None) -> Plan:
    """Ship every stream to one site and join there (what centralized engines do).

    Every sequence starts at ``site`` (default: the site of the stream with the highest
    declared rate, else the first) and joins with SP-S: each stream's tuples cross
    the network once, to ``site``, where all windows are kept.
    """
    if site is None:
        rated = [(s.stats.rate, s) for s in query.streams if s.stats.rate is not None]
        site = max(rated, key=lambda r: r[0])[1].site if rated else query.streams[0].site
    seqs = []
    for s in query.streams:
        order = bfs_order(query, s.name)
        seqs.append(Sequence(s.name, tuple(Step(o, CENTRAL.step.name) for o in order), site))
    return validate(query, Plan(tuple(seqs)))


def bfs_order(query: Query, head: str) -> list[str]:
    """A join-graph-consistent order of the other streams (breadth first, query order)."""
    done, order, frontier = {head}, [], [head]
    while frontier:
        nxt = []
        for f in frontier:
            for n in query.neighbours(f):
                if n not in done:
                    done.add(n)
                    order.append(n)
                    nxt.append(n)
        frontier = nxt
    return order


def uniform(query: Query, algorithm: str) -> Plan:
    """Every step of every (breadth-first) sequence uses ``algorithm``."""
    if algorithm not in ALGORITHMS:
        raise PlanError(f"unknown algorithm {algorithm!r}")
    seqs = [Sequence(s.name, tuple(Step(o, algorithm) for o in bfs_order(query, s.name)))
            for s in query.streams]
    return validate(query, Plan(tuple(seqs)))
