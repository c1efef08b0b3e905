"""The distributed NOS update (DNU, Algorithm 3 of seed 003): re-planning by messages between
the nodes, each knowing only the statistics of its own streams.

**Invariant (Eq. 4).**  Each position of SEP_i holds the joinable stream of least one-way cost
given the prefix before it (ties: the earlier stream of the query) -- what Algorithm 1 builds, so
the centralised update (:mod:`.cnu`) and this one reach the same plan.

**Messages** (:class:`~.protocol.Relay`, category *modification*), for one SEP of head h:

* ``TRIGGER`` -- the node of a stream x whose statistics changed tells every head (x is in every
  SEP).  ``check`` is set when one of x's r, t, w went down: x may now win an earlier position.
  (The cost of joining x, Eq. 1/2, never falls when r, t or w rise, and f_x does not enter it, so
  without a decrease no earlier position can change.)  The head serialises the triggers of its
  SEP: one modification at a time, each raising the SEP's *version*.
* ``CHECK`` -- (x got cheaper) from the head along positions 1, 2, ...: the node at position j
  compares x with itself given the prefix; at the first j where x is better the fix starts
  (``FIND_MIN`` from j: with simultaneous triggers the incumbent need not be the least of the
  others any more, so the paper's direct swap of x into j could break Eq. 4).  If there is no such
  j, the fix starts at x's own position.
* ``GO`` -- (x got dearer) the head lets x's node start the fix at x's position, from the prefix
  state it keeps (the paper's per-node metadata r^i_{k-1}, t^i_{k-1}).
* ``FIND_MIN`` -- the fix of position j: relayed through the nodes at positions j, j+1, ..., each
  computing its own cost given the prefix state carried along (r^i, t^i, f^i, where the
  intermediate is) and keeping the least; the last node sends ``RESULT`` to the winner.
* ``SWAP`` / ``SWAPPED`` -- the winner and the incumbent of position j exchange their parts of the
  SEP (two messages); each tells its new predecessor and successor (``NEIGHBOUR``).
* ``PLACE`` -- the join of position j moves between the intermediate's node and the stream's node
  (its placement changed): the node settling the position tells the other one.
* The settled node passes the fix on to position j+1 (``FIND_MIN`` again: the paper's Stage 2,
  "repeat for j = k+1 to m-1"); at the last position it sends ``DONE`` to the head.

The head's own stream changing (the paper leaves it open) re-fixes its SEP from position 1.

**With the plan-level pricing** (:class:`~.planner.PlanLevel`, the default) there are no relays: a
plan-level SEP depends on the windows the *other* SEPs keep (a replica shared is shipped once),
which no relay along one SEP can see.  The ``TRIGGER`` a changed stream's node sends to every head
carries its statistics, so every node holds the same reported statistics as the centralised
planner, and each head takes its SEP from :func:`~.planner.plan_level` on them -- the function the
centralised planner runs, so both reach the same plan (the messages: one ``TRIGGER`` per head).
The relays below run with the paper's pricing (:class:`~.planner.Eq12`).

Each node computes costs with a view of the query in which every other stream's statistics are
*poisoned* (absurd values): that a DNU run still reaches Algorithm 1's plan is the test that no
node used another node's statistics.  What the relays do to the runtime -- windows copied, the
two-phase switch -- is the migration's (:mod:`.migration`); the final SEPs travel in LOCAL_READY.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Optional

from joinlib.adaptive.jep import JEP, SEP
from joinlib.adaptive.planner import Choice, Eq12, PlanLevel, advance_sequence, better, choose, eq4_plan, plan_level
from joinlib.adaptive.protocol import Message, Relay, seq_state_data, seq_state_of
from joinlib.adaptive.stats import StreamStatistics, declared, stats_data, stats_of, with_stats
from joinlib.costs.unit_time import SeqState
from joinlib.model import Query, StreamStats

POISON = StreamStats(rate=1e12, tuple_bytes=10**9, selectivity=())


@dataclass
class Head:
    """The SEP a node heads: the one it announces (``sep``), the one the relays keep at Eq. 4
    (``relay``: the same unless the plan-level pass chose another), version, the triggers waiting
    their turn and the triggers done, in the order done."""

    sep: SEP
    relay: SEP
    version: int = 0
    queue: list[tuple[int, str, StreamStatistics, bool]] = field(default_factory=list)
    active: Optional[int] = None
    done: list[int] = field(default_factory=list)

    @property
    def idle(self) -> bool:
        return self.active is None and not self.queue


class DnuNode:
    """One node's part of the distributed update (see the module docstring).  Handlers return the
    messages to send; messages to the node itself are handled at once."""

    def __init__(self, site: str, query: Query, jep: JEP, model: Optional[Eq12] = None) -> None:
        self.site, self.q, self.model = site, query, model or Eq12()
        self.site_of = {s.name: s.site for s in query.streams}
        self.mine = tuple(s.name for s in query.streams if s.site == site)
        self.stats = {n: declared(query.stream(n)) for n in self.mine}
        self._poisoned = query.__class__(query.name, tuple(replace(s, stats=POISON) for s in query.streams),
                                         query.predicates, query.network, query.execution)
        # the relays keep Eq. 4: with the plan-level pass, from Algorithm 1's Eq. 1/2 plan
        relay = eq4_plan(query, self.model) if isinstance(self.model, PlanLevel) else jep
        self.heads = {h: Head(jep.sep(h), relay.sep(h)) for h in self.mine}
        self.reported: dict[str, tuple[int, StreamStatistics]] = {}   # stream -> (trigger, stats), the latest
        self.meta: dict[tuple[str, str], tuple[int, SeqState]] = {}   # (head, my stream) -> (position, prefix)
        self._init_meta(relay)

    def _init_meta(self, jep: JEP) -> None:
        """Prefix states of my streams in every SEP, from the declared statistics the first plan
        was made from (every node has them)."""
        for sep in jep.seps:
            state = SeqState.start(self.q, sep.head)
            for k, (s, p) in enumerate(zip(sep.order, sep.placement, strict=True), 1):
                if s in self.mine:
                    self.meta[(sep.head, s)] = (k, state)
                state = advance_sequence(self.q, state, s, p)

    # ------------------------------------------------------------------ views
    def view(self, extra: Optional[StreamStatistics] = None) -> Query:
        """The query as this node knows it: its own streams' statistics (and ``extra``, a
        triggering stream's, carried by a message); every other stream's poisoned."""
        known = dict(self.stats)
        if extra is not None:
            known[extra.stream] = extra
        return with_stats(self._poisoned, known)

    def _choice(self, state: SeqState, stream: str, extra: Optional[StreamStatistics] = None) -> Optional[Choice]:
        q = self.view(extra)
        return choose(self.model, q, state, stream) if state.can_join(q, stream) else None

    # ------------------------------------------------------------------ entry points
    def trigger(self, mid: int, stream: str, stats: StreamStatistics) -> list[Message]:
        """My stream's statistics changed past the threshold: tell every head."""
        old = self.stats[stream]
        self.stats[stream] = stats
        self._report(mid, stats)
        check = stats.rate < old.rate or stats.tuple_bytes < old.tuple_bytes or stats.window < old.window
        out: list[Message] = []
        for h in self.q.names:
            out += self._send(mid, self.site_of[h], Relay("TRIGGER", h, 0, 0, (), (), stream=stream, stats=stats,
                                                          check=check))
        return out

    def _report(self, mid: int, stats: StreamStatistics) -> None:
        """Keep the latest statistics a trigger brought (every head hears of every trigger)."""
        if mid > self.reported.get(stats.stream, (-1, stats))[0]:
            self.reported[stats.stream] = (mid, stats)

    def plan_query(self) -> Query:
        """The query with the statistics the triggers reported (the declared ones elsewhere): what
        the centralised planner plans with, once it has the same reports."""
        known = {s.name: declared(s) for s in self.q.streams}
        known.update({n: s for n, (_, s) in self.reported.items()})
        return with_stats(self.q, known)

    def _announce(self, h: str) -> None:
        """The SEP head ``h`` announces: the relays' (Eq. 4), or with the plan-level model the one
        :func:`~.planner.plan_level` gives it from the reported statistics -- windows shared
        between SEPs are a property of the whole plan, which no relay along one SEP can see."""
        head = self.heads[h]
        head.sep = plan_level(self.plan_query(), self.model).sep(h) if isinstance(self.model, PlanLevel) \
            else head.relay

    def on_relay(self, msg: Message) -> list[Message]:
        b = msg.body
        assert isinstance(b, Relay)
        handler = getattr(self, f"_on_{b.op.lower()}")
        out: list[Message] = handler(msg.mid, b)
        return out

    def known(self) -> set[int]:
        """Every trigger this node's heads have seen (done, active or waiting)."""
        out: set[int] = set()
        for head in self.heads.values():
            out.update(head.done)
            out.update(m for m, *_ in head.queue)
            if head.active is not None:
                out.add(head.active)
        return out

    def settled(self, mids: set[int]) -> bool:
        """Have my heads processed every trigger of ``mids`` and nothing is under way?"""
        return all(h.idle and mids <= set(h.done) for h in self.heads.values())

    def seps(self) -> list[tuple[SEP, int]]:
        """The SEPs this node heads and their versions."""
        return [(self.heads[h].sep, self.heads[h].version) for h in self.mine]

    def _send(self, mid: int, dst: str, body: Relay) -> list[Message]:
        msg = Message(self.site, dst, self.q.name, mid, body)
        return self.on_relay(msg) if dst == self.site else [msg]

    def _node(self, order: tuple[str, ...], position: int) -> str:
        """The node of the stream at ``position`` (1-based)."""
        return self.site_of[order[position - 1]]

    # ------------------------------------------------------------------ the head
    def _on_trigger(self, mid: int, b: Relay) -> list[Message]:
        head = self.heads[b.head]
        if mid in head.done or mid == head.active or any(t[0] == mid for t in head.queue):
            return []
        assert b.stream is not None and b.stats is not None
        self._report(mid, b.stats)
        if isinstance(self.model, PlanLevel):
            # no relays: the plan-level SEP is a function of every SEP's windows, which a relay
            # along one SEP cannot see; the head re-plans from the statistics the trigger brought
            head.done.append(mid)
            head.version += 1
            self._announce(b.head)
            return []
        head.queue.append((mid, b.stream, b.stats, b.check))
        return self._next(b.head) if head.active is None else []

    def _next(self, h: str) -> list[Message]:
        head = self.heads[h]
        if not head.queue:
            return []
        mid, x, stats, check = head.queue.pop(0)
        head.active, head.version = mid, head.version + 1
        sep, v = head.relay, head.version
        prefix = SeqState.start(self.view(), h)
        first = self._node(sep.order, 1)
        if x == h or sep.position(x) == 1:
            return self._send(mid, first, Relay("FIND_MIN", h, v, 1, sep.order, sep.placement, prefix, at=1))
        if check:
            return self._send(mid, first, Relay("CHECK", h, v, 1, sep.order, sep.placement, prefix, stream=x,
                                                stats=stats, at=1))
        return self._send(mid, self.site_of[x], Relay("GO", h, v, sep.position(x), sep.order, sep.placement, stream=x))

    def _on_done(self, mid: int, b: Relay) -> list[Message]:
        head = self.heads[b.head]
        if head.active != mid or b.version != head.version:
            return []  # a copy
        head.relay = SEP(b.head, b.order, b.placement)
        head.done.append(mid)
        head.active = None
        self._announce(b.head)
        return self._next(b.head)

    # ------------------------------------------------------------------ positions
    def _on_go(self, mid: int, b: Relay) -> list[Message]:
        assert b.stream is not None
        k, prefix = self.meta[(b.head, b.stream)]
        if k != b.position:
            raise AssertionError(f"DNU at {self.site}: {b.stream} keeps position {k} of SEP {b.head}, "
                                 f"the head says {b.position}")
        return self._on_find_min(mid, replace(b, op="FIND_MIN", at=k, state=prefix, stream=None))

    def _on_check(self, mid: int, b: Relay) -> list[Message]:
        assert b.state is not None and b.stream is not None and b.stats is not None
        j, x = b.position, b.stream
        s = b.order[j - 1]
        mine, theirs = self._choice(b.state, s), self._choice(b.state, x, b.stats)
        if theirs is not None and better(theirs, mine):
            # x would take position j.  Another stream may have changed too (a trigger still
            # queued at the head): the incumbent need not be the least of the others any more,
            # so position j is fixed by a full FIND_MIN rather than by swapping x in.
            return self._on_find_min(mid, replace(b, op="FIND_MIN", at=j, stream=None, stats=None))
        nxt = advance_sequence(self.view(), b.state, s, b.placement[j - 1])
        if b.order[j] == x:  # no earlier position for x: fix from its own
            return self._send(mid, self.site_of[x], replace(b, op="FIND_MIN", position=j + 1, at=j + 1, state=nxt,
                                                           stream=None, stats=None))
        return self._send(mid, self._node(b.order, j + 1), replace(b, position=j + 1, at=j + 1, state=nxt))

    def _on_find_min(self, mid: int, b: Relay) -> list[Message]:
        assert b.state is not None
        r = b.at
        s = b.order[r - 1]
        c = self._choice(b.state, s)
        best = b.best
        if c is not None and (best is None or better(c, Choice(best[0], best[1], best[2],
                                                                  self.q.names.index(best[0])))):
            best = (c.stream, c.cost, c.placement)
        if r < len(b.order):
            return self._send(mid, self._node(b.order, r + 1), replace(b, at=r + 1, best=best))
        assert best is not None, f"DNU: nothing joinable at position {b.position} of SEP {b.head}"
        return self._send(mid, self.site_of[best[0]], replace(b, op="RESULT", best=best))

    def _on_result(self, mid: int, b: Relay) -> list[Message]:
        assert b.best is not None
        j, winner = b.position, b.best[0]
        incumbent = b.order[j - 1]
        if winner == incumbent:
            return self._settle(mid, b)
        r = b.order.index(winner) + 1
        order = list(b.order)
        order[j - 1], order[r - 1] = winner, incumbent
        # the two exchange their parts of the SEP: each position keeps its placement until the
        # winner settles position j (a change there moves the join: PLACE)
        return self._send(mid, self.site_of[incumbent], replace(b, op="SWAP", order=tuple(order), at=r, stats=None))

    def _on_swap(self, mid: int, b: Relay) -> list[Message]:
        """I am the old incumbent of position ``position``, now at ``at``: acknowledge the
        exchange and tell my new neighbours."""
        j, r = b.position, b.at
        out = self._send(mid, self._node(b.order, j), replace(b, op="SWAPPED"))
        return out + self._neighbours(mid, b, r, partner=j)

    def _on_swapped(self, mid: int, b: Relay) -> list[Message]:
        """I won position ``position``: tell my new neighbours, then settle it."""
        j, r = b.position, b.at
        return self._neighbours(mid, b, j, partner=r) + self._settle(mid, b)

    def _neighbours(self, mid: int, b: Relay, pos: int, partner: int) -> list[Message]:
        out: list[Message] = []
        pred = self.site_of[b.head] if pos == 1 else self._node(b.order, pos - 1)
        cands = [(pos - 1, pred)] + ([(pos + 1, self._node(b.order, pos + 1))] if pos < len(b.order) else [])
        for p, node in cands:
            if p != partner and node != self.site:
                out += self._send(mid, node, replace(b, op="NEIGHBOUR", at=p))
        return out

    def _on_neighbour(self, mid: int, b: Relay) -> list[Message]:
        return []  # the paper renames stream ids in the operators; the IR names streams by content

    def _on_place(self, mid: int, b: Relay) -> list[Message]:
        return []  # the operators move; the migration copies the windows (nothing to compute here)

    def _settle(self, mid: int, b: Relay) -> list[Message]:
        """My stream holds position j with the placement computed for it: record my prefix, move
        the join if its placement changed, and pass the fix on (or finish the SEP)."""
        assert b.state is not None and b.best is not None
        j, p = b.position, b.best[2]
        s = b.order[j - 1]
        out: list[Message] = []
        placement = list(b.placement)
        if placement[j - 1] != p:
            placement[j - 1] = p
            where = b.state.location
            if where != self.site:
                out += self._send(mid, where, replace(b, op="PLACE", placement=tuple(placement)))
        self.meta[(b.head, s)] = (j, b.state)
        nxt = advance_sequence(self.view(), b.state, s, p)
        done = replace(b, placement=tuple(placement), best=None)
        if j == len(b.order):
            return out + self._send(mid, self.site_of[b.head], replace(done, op="DONE", state=None))
        return out + self._send(mid, self._node(b.order, j + 1),
                                replace(done, op="FIND_MIN", position=j + 1, at=j + 1, state=nxt))

    # ------------------------------------------------------------------ checkpoints
    def snapshot(self) -> dict[str, Any]:
        return {
            "stats": {n: stats_data(s) for n, s in self.stats.items()},
            "heads": {h: {"sep": [list(x.sep.order), list(x.sep.placement)],
                          "relay": [list(x.relay.order), list(x.relay.placement)], "version": x.version,
                          "queue": [[m, s, stats_data(st), c] for m, s, st, c in x.queue], "active": x.active,
                          "done": list(x.done)} for h, x in self.heads.items()},
            "meta": [[h, s, k, seq_state_data(st)] for (h, s), (k, st) in self.meta.items()],
            "reported": [[m, stats_data(st)] for m, st in self.reported.values()],
        }

    def restore(self, data: dict[str, Any]) -> None:
        self.stats = {n: stats_of(s) for n, s in data["stats"].items()}
        for h, x in data["heads"].items():
            head = self.heads[h]
            head.sep = SEP(h, tuple(x["sep"][0]), tuple(x["sep"][1]))
            head.relay = SEP(h, tuple(x["relay"][0]), tuple(x["relay"][1]))
            head.version, head.active = x["version"], x["active"]
            head.queue = [(m, s, stats_of(st), c) for m, s, st, c in x["queue"]]
            head.done = list(x["done"])
        self.meta = {(h, s): (k, seq_state_of(st)) for h, s, k, st in data["meta"]}
        self.reported = {st.stream: (m, st) for m, st in ((m, stats_of(d)) for m, d in data["reported"])}
