"""How the runtime runs the algorithms of :data:`joinlib.algorithms.REGISTRY`: one family per module, behind
one step protocol.

The records say what each algorithm ships and keeps; this package binds each record's name to the code
that does it: :data:`PHASES` (a step across sites as phases placed at sites and lanes,
:class:`~.base.Placed`) and :data:`ENDS` (the sender at the home and the replica at the probing site
of each replica kind).  :func:`step_phases`, :func:`make_sender` and :func:`make_replica` are what the
instance calls.  A family that keeps state across epochs gives its sender and replica ``snapshot()`` /
``restore()``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Union

from joinlib.algorithms.dja import DJA, MIXED, SM_D1, SM_S2
from joinlib.algorithms.reduce import REDUCED
from joinlib.algorithms.semijoin import FIFO, SM_D2, SM_S1
from joinlib.algorithms.simple import FULL, SP_D, SP_S
from joinlib.model import Stream
from joinlib.plan.ir import ReplicaOp, StepOp
from joinlib.runtime.algorithms.base import Placed, Replica, Sender, StepContext
from joinlib.runtime.algorithms.dja import DjaReplica, DjaSender, MixedReplica, MixedSender, smd1_phases, sms2_phases
from joinlib.runtime.algorithms.reduce import ReducedReplica, Reducer, make_reducer, reducer_phases
from joinlib.runtime.algorithms.semijoin import FifoReplica, FifoSender, smd2_phases, sms1_phases
from joinlib.runtime.algorithms.simple import FullReplica, FullSender, local_phases, spd_phases, sps_phases
from joinlib.state.base import WindowStore

AnySender = Union[FullSender, FifoSender, DjaSender, MixedSender]
AnyReplica = Union[FullReplica, FifoReplica, DjaReplica, MixedReplica, ReducedReplica]
PhaseBuilder = Callable[[StepContext, StepOp], list[Placed]]
StoreFactory = Callable[[], WindowStore]

#: the phases of a step across sites, by the name of its algorithm's record
PHASES: dict[str, PhaseBuilder] = {
    SP_S.name: sps_phases,
    SP_D.name: spd_phases,
    SM_S1.name: sms1_phases,
    SM_S2.name: sms2_phases,
    SM_D1.name: smd1_phases,
    SM_D2.name: smd2_phases,
}


@dataclass(frozen=True)
class Ends:
    """How the runtime builds the two ends of a replica kind: ``sender(op, stream)`` at the stream's home
    (None: the kind has none; a reduction's reducer feeds its replicas) and ``replica(op, stream, store,
    tau)`` at the probing site (``store()`` makes its window store, called only by the kinds that keep
    tuples)."""

    sender: Optional[Callable[[ReplicaOp, Stream], AnySender]]
    replica: Callable[[ReplicaOp, Stream, StoreFactory, int], AnyReplica]


def _mixed_replica(op: ReplicaOp, stream: Stream, store: StoreFactory, tau: int) -> MixedReplica:
    s = store()
    s.add_index(op.index)
    return MixedReplica(stream, op.index, s)


#: the ends of each replica kind, by the kind's name (:data:`joinlib.algorithms.REPLICA_KINDS`)
ENDS: dict[str, Ends] = {
    FULL.name: Ends(lambda op, stream: FullSender(),
                    lambda op, stream, store, tau: FullReplica(stream, store(), tau)),
    FIFO.name: Ends(lambda op, stream: FifoSender(stream),
                    lambda op, stream, store, tau: FifoReplica(stream, store())),
    MIXED.name: Ends(lambda op, stream: MixedSender(stream, op.index), _mixed_replica),
    DJA.name: Ends(lambda op, stream: DjaSender(stream, op.index),
                   lambda op, stream, store, tau: DjaReplica(stream, op.index)),
    REDUCED.name: Ends(None, lambda op, stream, store, tau: ReducedReplica(stream, store(), tau)),
}


def step_phases(ctx: StepContext, st: StepOp) -> list[Placed]:
    """Every phase of ``st`` at every site (the caller keeps those at its own)."""
    if st.local:
        return local_phases(ctx, st)
    return PHASES[st.algorithm](ctx, st)


def has_sender(op: ReplicaOp) -> bool:
    """Whether the replica's home runs a sender for it (not for a reduction's: its reducer ships)."""
    return ENDS[op.kind].sender is not None


def make_sender(op: ReplicaOp, stream: Stream) -> AnySender:
    build = ENDS[op.kind].sender
    if build is None:
        raise ValueError(f"replica {op.sig}: a {op.kind} replica has no sender")
    return build(op, stream)


def make_replica(op: ReplicaOp, stream: Stream, store: StoreFactory, tau: int) -> AnyReplica:
    """The replica of kind ``op.kind``; ``store()`` makes its window store (not called for SM-D1,
    which keeps only join values)."""
    return ENDS[op.kind].replica(op, stream, store, tau)


__all__ = ["PHASES", "ENDS", "Ends", "Placed", "Replica", "Sender", "StepContext", "step_phases", "has_sender",
           "make_sender", "make_replica", "AnySender", "AnyReplica", "Reducer", "make_reducer",
           "reducer_phases"]
