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

How.  A :class:`LookAhead` -- what a reducer with that edge alone, no filters and no replica, would keep:
the window's (ts, seq, epoch) for its oldest epoch, and the tuples admitted since its last set -- admits the
same batches in its own lane and sends the set of each epoch as soon as the epoch is inserted.  The reducer's
own lane still makes the set at its place in the rounds (its state moves exactly as before: the tuples it
marks sent, what it forgets) but does not send it: it checks the keys and tags against the look-ahead's
(:class:`CheckedSends`), so a look-ahead that ever disagreed would stop the run instead of changing its
output.  Messages, bytes and results are the same; only when the sets leave changes.  The check compares
the sets before the keys-or-filter choice, so a filter is built once.

The look-ahead and its lane are part of the instance's snapshot (under ``<stream>><neighbour>`` among the
reducers, its lane ``ahead:<stream>:<neighbour>``); the sets it sent and the reducer has not checked yet
are not (after a restore they are not checked, only resent by the restored lane if it had not sent them).
A snapshot written when the look-ahead was a whole :class:`Reducer` restores too.
"""
from __future__ import annotations

from collections import deque
from operator import attrgetter
from typing import Any, NamedTuple, Optional, Sequence

from joinlib.model import Tup
from joinlib.plan.ir import ReducerOp
from joinlib.protocol.messages import KeyFilter
from joinlib.runtime.algorithms.base import Decode, Encode, Placed, StepContext
from joinlib.runtime.algorithms.keysets import Outgoing, key_filter, tups_outgoing
from joinlib.runtime.lanes import Phase, next_gate
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


class _Mark(NamedTuple):
    """A restored window entry: what the look-ahead reads of a tuple (its ts and seq)."""

    ts: int
    seq: int


class LookAhead:
    """What :meth:`Reducer.out_keys` toward ``nbr`` gives for a reducer whose only edge is ``nbr`` and that
    takes no sets: every tuple passes when admitted, so a set is the keys of the tuples admitted since the
    last one (less those the window's purge took first), tagged like the reducer's.

    The window is kept as the reducer's is (tuples leave from its front while below the lower bound, in arrival
    order) but by epoch blocks: (arrival epoch, the batch itself, the index of its first tuple still in, its largest
    ts and seq), so an admit costs no object per tuple and a block below the bound leaves whole.  ``pending`` is
    always the window's last ``len(pending)`` tuples (admitted since the last set, in order), so what the purge
    takes of it is a prefix, counted rather than looked up."""

    def __init__(self, op: ReducerOp, nbr: str, tau: int) -> None:
        self.mine, self.tau = tuple(op.edge(nbr).mine), tau
        self._blocks: deque[list[Any]] = deque()   # _block: [arrival epoch, tuples, first index in, max ts, max seq]
        self._size = 0                               # tuples in the window
        self.pending: list[Tup] = []

    @property
    def window(self) -> list[tuple[int, int, int]]:
        """(ts, seq, arrival epoch) of the window's tuples, oldest first: the reducer's form."""
        return [(t.ts, t.seq, b[0]) for b in self._blocks for t in b[1][b[2]:]]

    def _extend(self, entries: Sequence[tuple[int, Sequence[Any]]]) -> None:
        for e, marks in entries:
            if marks:
                self._blocks.append(_block(e, marks))
                self._size += len(marks)

    def start(self, tuples: Sequence[Tup], tau: int) -> None:
        """A generation starting mid-stream: the window as it is at the boundary."""
        self._extend(_by_epoch([(t.ts // tau, t) for t in tuples]))
        self.pending.extend(tuples)

    def admit(self, e: int, batch: Sequence[Tup], lower: tuple[str, int]) -> None:
        if batch:
            self._blocks.append(_block(e, batch))
            self._size += len(batch)
            self.pending += batch
        blocks, value, popped = self._blocks, lower[1], 0
        col = 3 if lower[0] == "ts" else 4
        while blocks:
            b = blocks[0]
            marks, i = b[1], b[2]
            if b[col] < value:   # every tuple of the block is below the bound: it goes whole
                popped += len(marks) - i
                blocks.popleft()
                continue
            # some tuple of the block stays, so the scan stops inside it
            if col == 3:
                while marks[i].ts < value:
                    i += 1
            else:
                while marks[i].seq < value:
                    i += 1
            popped += i - b[2]
            b[2] = i
            break
        if popped:
            # only tuples since the last set can be pending (a suffix of the window): what expired unsent is never sent
            older = self._size - len(self.pending)
            if popped > older:
                del self.pending[:popped - older]
            self._size -= popped

    def out_keys(self, e: int) -> Outgoing:
        newly, self.pending = self.pending, []
        oldest = self._blocks[0][0] if self._blocks else e + 1
        return tups_outgoing(newly, e, self.tau, self.mine, e - oldest)

    def snapshot(self, encode: Encode) -> dict[str, Any]:
        return {"v": "ahead", "window": self.window, "pending": [encode(t) for t in self.pending]}

    def restore(self, data: dict[str, Any], decode: Decode) -> None:
        """The inverse of :meth:`snapshot`, or a look-ahead :class:`Reducer`'s snapshot (whose pending
        tuples are the unsent ones: a sent tuple was done with, and the unsent ones are the latest admitted)."""
        self._blocks, self._size = deque(), 0
        self._extend(_by_epoch([(w[2], _Mark(w[0], w[1])) for w in data["window"]]))
        if data.get("v") == "ahead":
            self.pending = [decode(b) for b in data["pending"]]
        else:
            self.pending = [decode(p[0]) for p in data["pending"]]


def _block(e: int, marks: Sequence[Any]) -> list[Any]:
    """A window block: [arrival epoch, its tuples, the index of the first still in, the largest ts, the largest seq]."""
    return [e, tuple(marks), 0, max(map(_TS, marks)), max(map(_SEQ, marks))]


_TS, _SEQ = attrgetter("ts"), attrgetter("seq")


def _by_epoch(entries: Sequence[tuple[int, Any]]) -> list[tuple[int, list[Any]]]:
    """Runs of consecutive entries of one epoch, as (epoch, their items)."""
    out: list[tuple[int, list[Any]]] = []
    for e, x in entries:
        if out and out[-1][0] == e:
            out[-1][1].append(x)
        else:
            out.append((e, [x]))
    return out


class CheckedSends:
    """The look-ahead's sends and the reducer's checks of the same sets (see the module docstring); ``flows``:
    the flows whose sets go ahead."""

    def __init__(self, ctx: Any, flows: set[str]) -> None:
        self._ctx = ctx
        self.flows = flows
        self.sent: dict[tuple[str, int], Outgoing] = {}   # (flow, epoch) -> sent ahead, not checked yet
        self.made: dict[tuple[str, int], Outgoing] = {}   # (flow, epoch) -> the reducer's, not sent ahead yet

    def ahead(self, dst: str, flow: str, e: int, out: Outgoing, body: KeyFilter) -> None:
        """The look-ahead's send: out now, kept until the reducer makes the same set."""
        made = self.made.pop((flow, e), None)
        if made is None:
            self.sent[(flow, e)] = out
        else:
            _same(flow, e, out, made)
        self._ctx.send(dst, flow, e, body)

    def check(self, flow: str, e: int, out: Outgoing) -> None:
        """The reducer's set of ``flow`` for epoch e, made at its place in the rounds."""
        ahead: Optional[Outgoing] = self.sent.pop((flow, e), None)
        if ahead is None:   # the reducer's lane ran first: the look-ahead checks when it sends
            self.made[(flow, e)] = out
        else:
            _same(flow, e, ahead, out)


def _same(flow: str, e: int, ahead: Outgoing, made: Outgoing) -> None:
    if ahead != made:
        raise RuntimeError(f"the key set sent ahead on {flow} for epoch {e} differs from the reducer's "
                           f"({ahead!r} vs {made!r}): joinlib.runtime.ahead's premise does not hold here")


def ahead_phases(ctx: StepContext, checked: CheckedSends, op: ReducerOp, nbr: str, fp_cost: Optional[float],
                 stale: Optional[float], home: HomeWindow, reducers: dict[str, Any]) -> list[Placed]:
    """The look-ahead lane toward ``nbr``: admit B_e (the jump start before the instance's first epoch),
    then send the set of e, priced as the reducer prices its own (the query's false-positive rate, ``fp_cost``,
    ``stale``)."""
    tau, fpr = ctx.tau, ctx.q.execution.bloom_fpr or None
    look = reducers[f"{op.stream}>{nbr}"] = LookAhead(op, nbr, tau)
    edge = op.edge(nbr)
    flow, dst, start = edge.out_flow, edge.home, ctx.start
    assert flow is not None

    def admit(e: int) -> bool:
        if home.next <= e:
            return False
        if e < start:
            look.start(home.boundary(start), tau)
        else:
            look.admit(e, home.batches[e], home.lower(e))
        return True

    def send(e: int) -> bool:
        if e >= start:
            out = look.out_keys(e)
            checked.ahead(dst, flow, e, out, key_filter(out, fpr, fp_cost, stale))
        return True
    lane = (AHEAD, op.stream, nbr)
    return [Placed(op.home, lane, Phase((0,), "tick", admit, gates=(next_gate(home),)), ("home", op.stream)),
            Placed(op.home, lane, Phase((1,), "semijoin", send), ("home", op.stream))]
