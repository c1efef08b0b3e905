"""What a record says about an algorithm: the shape of one entry of :data:`joinlib.algorithms.REGISTRY`.

Every layer reads the same record: the plan IR lowers a step into the record's flows and replica
(:mod:`joinlib.plan.ir`), the cost models price the record's formula and messages
(:mod:`joinlib.costs`), the runtime builds the record's phases, sender and replica, bound to the
record's name (:mod:`joinlib.runtime.algorithms`).  The records are plain data and formulas, with no
import from those layers, so that all three can read them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from joinlib.algorithms.terms import Formula


@dataclass(frozen=True)
class Flow:
    """A channel a step (or a reducer) uses once per epoch when it crosses sites: ``name`` within its owner,
    ``direction`` (``fwd``: from the intermediate's site to the probed stream's home; ``back``: the other way)
    and ``kind``, the traffic class a run reports it under (``full`` tuples, ``partial`` keys, ``update``
    counts and DJA vectors)."""

    name: str
    direction: str
    kind: str


@dataclass(frozen=True)
class ReplicaKind:
    """A copy of (part of) a remote window kept at the probing site across epochs, fed by its home on one
    ``update`` flow.  ``name`` is the kind in the replica's signature (``SM-S1:S2@r2>r1``); ``update`` the
    kind of the messages on its update flow; ``keyed``: the copy is indexed by the probing step's key (the
    DJA replicas keep join values), so steps probing other keys keep other copies."""

    name: str
    update: str
    keyed: bool = False

    @property
    def update_flow(self) -> Flow:
        """The home's message to the replica every epoch (home -> probing site)."""
        return Flow("update", "back", self.update)


@dataclass(frozen=True)
class Algorithm:
    """One one-way join algorithm: the rows of an intermediate stream at the *source* probe the window of
    the next stream, born at its *home*.

    ``at_source``: the output is produced at the source (else at the home); ``flows``: the messages of
    each epoch when source and home differ; ``replica``: what the source keeps of the home's window
    across epochs (None: nothing); ``terms``: its Appendix B formula (unit-time cost terms in Table 4's
    symbols, :mod:`joinlib.algorithms.terms`)."""

    name: str
    at_source: bool
    flows: tuple[Flow, ...]
    replica: Optional[ReplicaKind]
    terms: Formula

    def flow(self, name: str) -> Flow:
        for f in self.flows:
            if f.name == name:
                return f
        raise KeyError(f"{self.name} has no flow {name!r}")

    @property
    def at_home(self) -> bool:
        """Whether a step across sites has work at the home: it does unless it only probes its replica at the
        source (no flow of its own)."""
        return bool(self.flows)


@dataclass(frozen=True)
class Shape:
    """A plan shape that is not a per-step choice: every sequence starts at one site and joins there with
    ``step``, over copies of kind ``replica`` of the other streams; ``key_sets``: the flow a reduction's
    reducers exchange their key sets on (None: no reduction)."""

    name: str
    step: Algorithm
    replica: ReplicaKind
    key_sets: Optional[Flow] = None
