"""A reduction: every result at one site R, as with ``central``, but each stream ships there only the tuples
that pass the key sets of its neighbours along a spanning tree of the join graph (a semijoin program run
every epoch; with ``Reduce.cross`` also along the off-tree edges of a cyclic graph, which filter only what
ships).  The plan: :class:`joinlib.plan.logical.Reduce`; the runtime's side:
:mod:`joinlib.runtime.algorithms.reduce`; the byte model: :func:`joinlib.costs.flows.reduction_flows`."""
from __future__ import annotations

from joinlib.algorithms.record import Flow, ReplicaKind, Shape
from joinlib.algorithms.simple import SP_S

#: a stream's copy at R: the tuples its reducer shipped (the reducer feeds it; no sender)
REDUCED = ReplicaKind("RF", update="full")
#: a reducer's key set for one neighbour each epoch, on a tree edge or (cross) an off-tree one: flow
#: ``to:NEIGHBOUR`` of the reducer, keys or a Bloom filter
KEY_SETS = Flow("to", "fwd", "partial")

REDUCE = Shape("reduce", step=SP_S, replica=REDUCED, key_sets=KEY_SETS)


def key_set_flow(neighbour: str) -> str:
    """The name, within its reducer, of the flow carrying the key sets for ``neighbour``."""
    return f"{KEY_SETS.name}:{neighbour}"
