"""The six one-way join algorithms, one family per module, behind one step protocol.

:func:`step_phases` turns a step of the lowered plan into its phases (:class:`~.base.Placed`),
:func:`make_sender` / :func:`make_replica` build the two ends of a replica of a given kind.
Adding an algorithm means a family function here and, if it keeps state across epochs, a
sender/replica pair with ``snapshot()`` / ``restore()``.
"""
from __future__ import annotations

from typing import Callable, Union

from joinlib.model import Stream
from joinlib.plan.ir import ReplicaOp, StepOp
from joinlib.runtime.algorithms.base import Placed, Replica, Sender, StepContext
from joinlib.runtime.algorithms.dja import DjaReplica, DjaSender, MixedReplica, MixedSender, smd1_phases, sms2_phases
from joinlib.runtime.algorithms.reduce import ReducedReplica, Reducer, reducer_phases
from joinlib.runtime.algorithms.semijoin import FifoReplica, FifoSender, smd2_phases, sms1_phases
from joinlib.runtime.algorithms.simple import FullReplica, FullSender, local_phases, spd_phases, sps_phases
from joinlib.state.base import WindowStore

FAMILIES: dict[str, Callable[[StepContext, StepOp], list[Placed]]] = {
    "SP-S": sps_phases,
    "SP-D": spd_phases,
    "SM-S1": sms1_phases,
    "SM-S2": sms2_phases,
    "SM-D1": smd1_phases,
    "SM-D2": smd2_phases,
}

AnySender = Union[FullSender, FifoSender, DjaSender, MixedSender]
AnyReplica = Union[FullReplica, FifoReplica, DjaReplica, MixedReplica, ReducedReplica]


def step_phases(ctx: StepContext, st: StepOp) -> list[Placed]:
    """Every phase of ``st`` at every site (the caller keeps those at its own)."""
    if st.local:
        return local_phases(ctx, st)
    return FAMILIES[st.algorithm](ctx, st)


def make_sender(op: ReplicaOp, stream: Stream) -> AnySender:
    if op.kind == "SP-S":
        return FullSender()
    if op.kind == "SM-S1":
        return FifoSender(stream)
    if op.kind == "SM-S2":
        return MixedSender(stream, op.index)
    return DjaSender(stream, op.index)


def make_replica(op: ReplicaOp, stream: Stream, store: Callable[[], WindowStore], tau: int) -> AnyReplica:
    """The replica of kind ``op.kind``; ``store()`` makes its window store (not called for SM-D1,
    which keeps only join values)."""
    if op.kind == "SP-S":
        return FullReplica(stream, store(), tau)
    if op.kind == "RF":
        return ReducedReplica(stream, store(), tau)
    if op.kind == "SM-S1":
        return FifoReplica(stream, store())
    if op.kind == "SM-S2":
        s = store()
        s.add_index(op.index)
        return MixedReplica(stream, op.index, s)
    return DjaReplica(stream, op.index)


__all__ = ["FAMILIES", "Placed", "Replica", "Sender", "StepContext", "step_phases", "make_sender", "make_replica",
           "AnySender", "AnyReplica", "Reducer", "reducer_phases"]
