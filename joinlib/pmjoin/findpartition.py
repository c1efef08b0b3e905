"""FINDPARTITION (seed 002, Algorithm 2) and the selection heuristic: where a plan of a join on
different attributes can use PMJoins.

An MJoin is *partitionable* on an attribute class if every predicate between two of its inputs
is an equality of that class (implied equalities included: the classes are transitively closed).
Step 1 walks the plan from the root: a partitionable operator that is not the right-most input of
its parent becomes a PMJoin candidate, and absorbs its children partitionable on the same class
(their inputs become its inputs, and are checked in turn). Step 2 keeps candidates by decreasing
total input rate (they have the most to gain), dropping the neighbours of each one kept, because
a PMJoin's output is spread over several nodes: (1) a PMJoin cannot be the child of a PMJoin, and
(2) the right child of an MJoin cannot be one (step 1 already skips right children).

The paper says to drop the *parent* PMJoin of each one kept; a child PMJoin conflicts in the same
way (constraint 1 is symmetric), so both are dropped here ([impl]).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from joinlib.pmjoin.rates import SelectivityModel
from joinlib.pmjoin.tree import MJoin, Tree, members

Path = tuple[int, ...]  # child indices from the root of the plan


@dataclass(frozen=True)
class PMJoinCandidate:
    """An operator (with its absorbed children) that can be run as a PMJoin on ``attribute``."""

    path: Path
    attribute: str
    inputs: tuple[Tree, ...]
    node: str
    input_rate: float
    parent: Optional[Path]  # the candidate this one is a direct child of, if any


def partition_class(inputs: tuple[Tree, ...], model: SelectivityModel) -> Optional[str]:
    """The one attribute class joining the inputs, or None (no predicate, or several classes)."""
    parts = [members(t, model) for t in inputs]
    used = set()
    for c in model.classes:
        touched = [p for p in parts if p & c.streams()]
        if len(touched) >= 2:
            used.add(c.name)
    return used.pop() if len(used) == 1 else None


def _absorb(inputs: list[Tree], attr: str, model: SelectivityModel) -> list[Tree]:
    i = 0
    while i < len(inputs):
        child = inputs[i]
        if isinstance(child, MJoin) and partition_class(child.inputs, model) == attr:
            inputs[i:i + 1] = list(child.inputs)  # its children are checked at the same index
        else:
            i += 1
    return inputs


def _walk(op: MJoin, is_right: bool, path: Path, parent: Optional[Path], model: SelectivityModel,
          out: list[PMJoinCandidate]) -> None:
    inputs = list(op.inputs)
    attr = partition_class(op.inputs, model)
    mine: Optional[Path] = None
    if not is_right and attr is not None:
        inputs = _absorb(inputs, attr, model)
        rate = sum(model.rate(members(t, model)) for t in inputs)
        out.append(PMJoinCandidate(path, attr, tuple(inputs), op.node, rate, parent))
        mine = path
    for j, child in enumerate(inputs):
        if isinstance(child, MJoin):
            _walk(child, j == len(inputs) - 1, path + (j,), mine, model, out)


def find_partitions(tree: Tree, model: SelectivityModel) -> list[PMJoinCandidate]:
    """Step 1 (Algorithm 2 from the root): every PMJoin candidate, parents before children."""
    out: list[PMJoinCandidate] = []
    if isinstance(tree, MJoin):
        _walk(tree, False, (), None, model, out)
    return out


def select_pmjoins(candidates: list[PMJoinCandidate]) -> list[PMJoinCandidate]:
    """Step 2: the largest total input rate first; drop its parent and child candidates; repeat."""
    remaining = sorted(candidates, key=lambda c: (-c.input_rate, c.path))
    chosen: list[PMJoinCandidate] = []
    while remaining:
        top = remaining.pop(0)
        chosen.append(top)
        remaining = [c for c in remaining if c.path != top.parent and c.parent != top.path]
    return chosen
