"""MJoin trees placed on nodes: the plans STREAMJOINOPT and the exhaustive search produce.

A leaf is a source stream at its node. An :class:`MJoin` runs at one node; every input whose
node differs is shipped there, and its result stream lives at that node. The paper orders the
inputs so that the right-most one is at the operator's node (nothing shipped); an MJoin on a
processing-only node has no such input. :func:`plan_cost` is the cost of a tree under a rate model:
the bytes per second of every shipped input (the final result's delivery to the sink is not counted,
as in the paper). The JSON form is what a runtime would read to build the operators.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Union

from joinlib.errors import PlanError
from joinlib.pmjoin.rates import Members, RateModel


@dataclass(frozen=True)
class Leaf:
    """A source stream (or substream) at the node it is born at."""

    stream: str
    node: str


@dataclass(frozen=True)
class MJoin:
    """A multi-way join at ``node`` over two or more inputs (the right-most one local, if any is)."""

    inputs: tuple[Tree, ...]
    node: str

    def __post_init__(self) -> None:
        if len(self.inputs) < 2:
            raise PlanError(f"an MJoin needs at least two inputs, got {len(self.inputs)}")


Tree = Union[Leaf, MJoin]


def mjoin_node(inputs: Sequence[Tree], node: str) -> MJoin:
    """One MJoin at ``node`` over ``inputs``; an input MJoin already at ``node`` is flattened into it
    (its inputs meet there anyway, nothing is shipped between them), local inputs go right-most."""
    flat: list[Tree] = []
    for t in inputs:
        flat.extend(t.inputs if isinstance(t, MJoin) and t.node == node else (t,))
    return MJoin(tuple([t for t in flat if t.node != node] + [t for t in flat if t.node == node]), node)


def streams_of(tree: Tree) -> tuple[str, ...]:
    """The source streams below ``tree``, left to right."""
    if isinstance(tree, Leaf):
        return (tree.stream,)
    return tuple(s for t in tree.inputs for s in streams_of(t))


def members(tree: Tree, model: RateModel) -> Members:
    return frozenset(model.index(s) for s in streams_of(tree))


def operators(tree: Tree) -> Iterator[MJoin]:
    """Every MJoin of the tree, children before parents (post-order)."""
    if isinstance(tree, MJoin):
        for t in tree.inputs:
            yield from operators(t)
        yield tree


def shipments(tree: Tree, model: RateModel) -> list[tuple[tuple[str, ...], str, str, float]]:
    """(streams of the shipped stream, from node, to node, bytes/s) of every shipped input."""
    out = []
    for op in operators(tree):
        for t in op.inputs:
            if t.node != op.node:
                out.append((streams_of(t), t.node, op.node, model.cost(members(t, model))))
    return out


def tree_cost(tree: Tree, model: RateModel) -> float:
    """Bytes per second shipped between nodes by ``tree`` under ``model``."""
    return sum(c for *_, c in shipments(tree, model))


def placements(tree: Tree) -> list[str]:
    """The node of every MJoin, children before parents."""
    return [op.node for op in operators(tree)]


def to_json(tree: Tree) -> dict[str, Any]:
    if isinstance(tree, Leaf):
        return {"stream": tree.stream, "node": tree.node}
    return {"mjoin": tree.node, "inputs": [to_json(t) for t in tree.inputs]}


def from_json(obj: Any) -> Tree:
    """The inverse of :func:`to_json`; a malformed object is a :class:`PlanError`."""
    if isinstance(obj, dict) and set(obj) == {"stream", "node"}:
        return Leaf(str(obj["stream"]), str(obj["node"]))
    if isinstance(obj, dict) and set(obj) == {"mjoin", "inputs"} and isinstance(obj["inputs"], list):
        return MJoin(tuple(from_json(t) for t in obj["inputs"]), str(obj["mjoin"]))
    raise PlanError(f"not an MJoin tree: {obj!r:.80} (expected {{'stream', 'node'}} or {{'mjoin', 'inputs'}})")


def describe(tree: Tree) -> str:
    """One line: ``MJoin@n1(S2@n2 -> n1, S1)``; a shipped input is marked with its route."""
    if isinstance(tree, Leaf):
        return f"{tree.stream}@{tree.node}"
    parts = []
    for t in tree.inputs:
        label = describe(t) if isinstance(t, MJoin) else t.stream
        if t.node != tree.node:
            label = (f"{t.stream}@{t.node}" if isinstance(t, Leaf) else label) + f" -> {tree.node}"
        parts.append(label)
    return f"MJoin@{tree.node}({', '.join(parts)})"
