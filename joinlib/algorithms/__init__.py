"""One record per join algorithm, and the registry every layer reads.

Each of the six one-way join algorithms of the semijoin paper is described once, in the module of its
family: its name, whether its output is produced at the source or at the destination, the flows it ships
when it crosses sites, the replica it keeps and the kind of that replica's updates, and its Appendix B
formula (:class:`~joinlib.algorithms.record.Algorithm`).  The two plan shapes that are not a per-step
choice, ``central`` and the reduction (with its key sets, on tree and off-tree edges), are records too
(:class:`~joinlib.algorithms.record.Shape`).

Who reads them: :mod:`joinlib.plan.logical` (names, at_source), :mod:`joinlib.plan.ir` (flows, replica
kinds), :mod:`joinlib.costs` (formulas, flows, replica kinds) and :mod:`joinlib.runtime.algorithms`, which
binds each record's name to the phases, sender and replica that run it.  This package imports none of
them, so all of them can import it.  Adding an algorithm: ``docs/runtime.md`` ("Where an algorithm is
described").
"""
from __future__ import annotations

from joinlib.algorithms.dja import DJA, MIXED, SM_D1, SM_S2
from joinlib.algorithms.record import Algorithm, ReplicaKind
from joinlib.algorithms.reduce import REDUCED
from joinlib.algorithms.semijoin import FIFO, SM_D2, SM_S1
from joinlib.algorithms.simple import FULL, SP_D, SP_S
from joinlib.errors import JoinlibError

#: every one-way join algorithm by name, in the paper's order (the planners break ties toward the earlier)
REGISTRY: dict[str, Algorithm] = {a.name: a for a in (SP_S, SP_D, SM_S1, SM_S2, SM_D1, SM_D2)}
ALGORITHMS = tuple(REGISTRY)
#: every kind of replica by name (the kind in a replica's signature)
REPLICA_KINDS: dict[str, ReplicaKind] = {k.name: k for k in (FULL, FIFO, MIXED, DJA, REDUCED)}


def get_algorithm(name: str) -> Algorithm:
    """The record named ``name``; an unknown name is the caller's error."""
    rec = REGISTRY.get(name)
    if rec is None:
        raise JoinlibError(f"unknown algorithm {name!r} (choose from {', '.join(ALGORITHMS)})")
    return rec


def at_source(algorithm: str) -> bool:
    """True if the algorithm produces its output at the source (intermediate) node."""
    rec = REGISTRY.get(algorithm)
    return rec is not None and rec.at_source


__all__ = ["REGISTRY", "ALGORITHMS", "REPLICA_KINDS", "get_algorithm", "at_source"]
