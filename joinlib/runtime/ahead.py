"""Key sets sent ahead: a reducer's sets that no round of the epoch can change go out as soon as their
epoch is inserted, so a reduction's epochs overlap instead of waiting a round trip each.

Why.  A reducer's lane runs its epoch's rounds in order -- admit B_e, take and send key sets in tree
order, ship -- and only then admits B_(e+1).  A leaf of the tree (S3 in S1 - S2 - S3, root S2) sends its
set up, then waits for its parent's set coming down, so its set of epoch e+1 leaves only after a round
trip of epoch e: on Kafka that round trip (two hops through the broker), not CPU, paced a backlog's drain.

Which sets.  :meth:`Reducer.out` for neighbour ``n`` sends the keys of the tuples that newly pass the
sets of every *other* tree neighbour.  A reducer whose only tree filter is ``n`` (a leaf sending up, or
one whose other directions are skipped) therefore passes every new tuple at once: the set of epoch e is
the keys of B_e, tagged by B_e's latest epoch and the window's oldest -- a function of the admitted
batches alone, never of a set it takes.  (Crossing edges' sets dirty the channel again, but only for
tuples already sent toward ``n``; they never count.)

How.  A second :class:`Reducer` (the *look-ahead*) with only that edge -- no filters, no replica, the
same stream, tau, false-positive rate and costs -- admits the same batches in its own lane and sends
the set of each epoch as soon as the epoch is inserted.  The reducer's own lane still computes the set at
its place in the rounds (its state moves exactly as before: the tuples it marks sent, what it forgets)
but does not send it: it checks it against the one the look-ahead sent, so a look-ahead that ever
disagreed would stop the run instead of changing its output.  Messages, bytes and results are the same;
only when the sets leave changes.

The look-ahead reducer and its lane are part of the instance's snapshot (its reducer under
``<stream>><neighbour>``, its lane ``ahead:<stream>:<neighbour>``); the sets it sent and the reducer has
not checked yet are not (after a restore they are not checked, only resent by the restored lane if it had
not sent them).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Optional

from joinlib.plan.ir import ReducerOp
from joinlib.protocol.messages import Body
from joinlib.runtime.algorithms import Reducer
from joinlib.runtime.algorithms.base import Placed
from joinlib.runtime.lanes import Phase
from joinlib.runtime.window import HomeWindow

#: the first element of a look-ahead lane's key (instances start such lanes early, for the jump start)
AHEAD = "ahead"


def ahead_targets(op: ReducerOp) -> list[str]:
    """The neighbours whose key sets ``op``'s reducer can send ahead: the only tree filter is the
    neighbour itself (or there is none), and the reducer's lane waits for some set (without an "in" round
    its lane never waits, and a look-ahead would only add work)."""
    if not any(way == "in" for way, _ in op.schedule):
        return []
    tree_filters = {e.stream for e in op.filters if not e.cross}
    return [nbr for way, nbr in op.schedule
            if way == "out" and not op.edge(nbr).cross and tree_filters <= {nbr}]


def ahead_op(op: ReducerOp, nbr: str) -> ReducerOp:
    """``op`` with its edge to ``nbr`` only, sending but filtering by nothing, shipping nothing."""
    edge = replace(op.edge(nbr), in_flow=None)
    return replace(op, edges=(edge,), parent=None, replica=None)


class CheckedSends:
    """The context a reducer's own phases run in when some of its sets go ahead: sends on those flows are
    compared with what the look-ahead sent (and dropped), every other call goes to the instance."""

    def __init__(self, ctx: Any, flows: set[str]) -> None:
        self._ctx = ctx
        self.flows = flows
        self.sent: dict[tuple[str, int], Body] = {}   # (flow, epoch) -> sent ahead, not checked yet
        self.made: dict[tuple[str, int], Body] = {}   # (flow, epoch) -> the reducer's, not sent ahead yet

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ctx, name)

    def ahead(self, dst: str, flow: str, e: int, body: Body) -> None:
        """The look-ahead's send: out now, kept until the reducer computes the same set."""
        made = self.made.pop((flow, e), None)
        if made is None:
            self.sent[(flow, e)] = body
        else:
            _same(flow, e, body, made)
        self._ctx.send(dst, flow, e, body)

    def send(self, dst: str, flow: str, e: int, body: Body) -> None:
        if flow not in self.flows:
            self._ctx.send(dst, flow, e, body)
            return
        ahead: Optional[Body] = self.sent.pop((flow, e), None)
        if ahead is None:   # the reducer's lane ran first: the look-ahead sends it and checks
            self.made[(flow, e)] = body
        else:
            _same(flow, e, ahead, body)


def _same(flow: str, e: int, ahead: Body, made: Body) -> None:
    if ahead != made:
        raise RuntimeError(f"the key set sent ahead on {flow} for epoch {e} differs from the reducer's "
                           f"({ahead!r} vs {made!r}): joinlib.runtime.ahead's premise does not hold here")


def ahead_phases(ctx: CheckedSends, op: ReducerOp, nbr: str, make: Any, home: HomeWindow,
                 reducers: dict[str, Reducer]) -> list[Placed]:
    """The look-ahead lane toward ``nbr``: admit B_e (the jump start before the instance's first epoch),
    then send the set of e.  ``make(op)`` builds a reducer as the instance builds its own."""
    red = reducers[f"{op.stream}>{nbr}"] = make(ahead_op(op, nbr))
    edge = op.edge(nbr)
    flow, dst, start, tau = edge.out_flow, edge.home, ctx.start, ctx.tau
    assert flow is not None

    def admit(e: int) -> bool:
        if home.next <= e:
            return False
        if e < start:
            red.start(home.boundary(start), tau)
        else:
            red.admit(e, home.batches[e], home.lower(e))
        return True

    def send(e: int) -> bool:
        if e >= start:
            ctx.ahead(dst, flow, e, red.out(nbr, e))
        return True
    lane = (AHEAD, op.stream, nbr)
    return [Placed(op.home, lane, Phase((0,), "tick", admit), ("home", op.stream)),
            Placed(op.home, lane, Phase((1,), "semijoin", send), ("home", op.stream))]
