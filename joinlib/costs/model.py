"""The plan-level byte model: expected bytes per second on every link, by flow.

A plan is priced from its IR (:func:`joinlib.plan.ir.lower`), where every shipment is an operator
named by content: a replica (a copy of a stream's window kept at another site, shared by every
step probing it there) and the flows of cross-site steps.  So a stream shipped to a site is
charged once however many sequences use it, ``central`` costs its m − 1 streams shipped once,
and a sequence started away from its head's site pays for its head's batches there (the IR's
start replica, shared with any SP-S step probing the head there).

Each flow carries one message per epoch; its expected content comes from :mod:`.flows`, its size
from :class:`~joinlib.costs.encoding.Encoding` (the runtime's own encoder on representative
bodies).  :class:`WireModel` is also a step-level :class:`~joinlib.costs.unit_time.CostModel` (the same
flows, each step with its own replica) for the per-head searches of ``greedy``, ``exhaustive``
and ``beam``; its :meth:`WireModel.plan_cost` is the plan-level estimate.

A reduction (``Plan.reduce``) lowers to ``central``'s sequences at its result site, whose replicas
(kind ``RF``) hold only shipped tuples, and one reducer per stream: its key sets on every tree edge
in both directions but the skipped ones (free between two streams of one site) and its
ShippedBatch to the result site (none for a stream born there), priced by
:func:`~.flows.reduction_flows`.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Optional

from joinlib.algorithms import ALGORITHMS, REGISTRY
from joinlib.algorithms.reduce import KEY_SETS, REDUCED
from joinlib.algorithms.simple import SP_S
from joinlib.costs.encoding import Encoding
from joinlib.costs.flows import (
    Inter,
    Msg,
    Probe,
    TreeMemo,
    TreeMsg,
    advance_intermediate,
    probe,
    reduction_flows,
    replica_flows,
    step_flows,
)
from joinlib.costs.inputs import Inputs, from_query
from joinlib.costs.unit_time import SeqState, _graph, interval_s, stream_rate, window_tuples
from joinlib.model import Query
from joinlib.plan.ir import FlowOp, PlanIR, ReducerOp, StepOp, lower
from joinlib.plan.logical import Plan, Reduce, Sequence, central, validate


@dataclass(frozen=True)
class FlowCost:
    """One flow of a plan: its signature, the operator it belongs to, its link and kind, the
    expected items per message and bytes per second."""

    sig: str
    owner: str
    name: str
    src: str
    dst: str
    kind: str
    items: float
    bytes_per_s: float


@dataclass
class PlanEstimate:
    """The byte model's estimate of a plan (bytes per second of stream time)."""

    flows: list[FlowCost] = field(default_factory=list)

    @property
    def bytes_per_s(self) -> float:
        return sum(f.bytes_per_s for f in self.flows)

    def bytes(self, duration_s: float) -> float:
        """Expected bytes of a run over ``duration_s`` of stream time (windows full)."""
        return self.bytes_per_s * duration_s

    def by_link(self) -> dict[tuple[str, str, str], float]:
        """Bytes per second per (src, dst, kind), like a run's report."""
        out: dict[tuple[str, str, str], float] = {}
        for f in self.flows:
            key = (f.src, f.dst, f.kind)
            out[key] = out.get(key, 0.0) + f.bytes_per_s
        return dict(sorted(out.items()))


def price(enc: Encoding, src: str, dst: str, m: Msg) -> float:
    """Expected bytes of one message ``m`` from ``src`` to ``dst`` (memoised: the searches price the
    same message on the same link in many steps and plans)."""
    src, dst = enc.link(src, dst)
    key = (src, dst, m)
    hit = enc.priced.get(key)
    if hit is None:
        if len(enc.priced) > 500_000:
            enc.priced.clear()
        hit = enc.priced[key] = _price(enc, src, dst, m)
    return hit


def _price(enc: Encoding, src: str, dst: str, m: Msg) -> float:
    if m.what == "rows":
        return enc.rows(src, dst, m.parts, m.n)
    if m.what == "keys":
        return enc.keys(src, dst, m.stream, m.index, m.n)
    if m.what == "request":
        return enc.request(src, dst, m.stream, m.index, m.n, m.fp_cost)
    if m.what == "filter":
        return enc.key_filter(src, dst, m.stream, m.index, m.n, m.fp_cost)
    if m.what == "shipped":
        return enc.shipped(src, dst, m.stream, m.n, m.extra[0])
    if m.what == "expiry":
        return enc.expiry(src, dst, m.n, m.extra[0])
    touched, gap, count, full, arrivals = m.extra
    return enc.dja(src, dst, m.stream, m.index, m.n, touched, gap, count, full, arrivals)


#: :func:`walk`'s memo for the plans of one query: (head, the streams it joins in order, up to one) -> what
#: the last step probes and the intermediate after it -- neither depends on the algorithms or the start
Walks = dict[tuple[str, tuple[str, ...]], tuple[Probe, Inter]]


def walk(query: Query, ir: PlanIR, walks: Optional[Walks] = None) -> dict[str, tuple[StepOp, Probe]]:
    """Every cross-site step of the plan with what it probes (``walks``: a memo kept by a caller that
    prices many plans of ``query``, whose sequences share join orders)."""
    out: dict[str, tuple[StepOp, Probe]] = {}
    walks = {} if walks is None else walks
    for seq in ir.plan.sequences:
        inter = Inter.start(query, seq.head, seq.start)
        order: tuple[str, ...] = ()
        for st in ir.steps_of(seq.head):
            order += (st.stream,)
            hit = walks.get((seq.head, order))
            if hit is None:
                pr = probe(query, inter, st.stream)
                hit = walks[(seq.head, order)] = (pr, advance_intermediate(query, inter, st.stream, st.algorithm, pr))
            pr, inter = hit
            if not st.local:
                out[st.sig] = (st, pr)
    return out


def estimate_ir(inputs: Inputs, ir: PlanIR, enc: Optional[Encoding] = None,
                walks: Optional[Walks] = None) -> PlanEstimate:
    """The byte model's estimate of a lowered plan (``walks``: see :func:`walk`)."""
    query = inputs.query
    enc = enc or inputs.encoding()
    tau = interval_s(query)
    steps = walk(query, ir, walks)
    users: dict[str, list[str]] = {}
    for sig, (st, _) in steps.items():
        if st.replica is not None:
            users.setdefault(st.replica, []).append(sig)
    shares: dict[str, float] = {}
    est = PlanEstimate()
    for rep in ir.replicas:
        if rep.kind == REDUCED.name:  # a reduction's replica: its reducer's ShippedBatch, below
            continue
        mine = users.get(rep.sig, [])
        msg, parts = replica_flows(query, rep.kind, rep.stream, rep.index, [steps[s][1] for s in mine], enc)
        shares.update(zip(mine, parts, strict=True))
        f = ir.update_flow(rep)
        est.flows.append(FlowCost(f.sig, rep.sig, "update", f.src, f.dst, f.kind, msg.n,
                                  price(enc, f.src, f.dst, msg) / tau))
    for sig, (st, pr) in steps.items():
        for m in step_flows(query, st.algorithm, pr, shares.get(sig, 0.0), enc):
            f = ir.flow(st.flow(m.name))
            est.flows.append(FlowCost(f.sig, st.sig, m.name, f.src, f.dst, f.kind, m.n,
                                      price(enc, f.src, f.dst, m) / tau))
    if ir.reducers:
        _reduction(query, ir, enc, est)
    return est


def _reduction(query: Query, ir: PlanIR, enc: Encoding, est: PlanEstimate) -> None:
    """The flows of a reduction's reducers: key sets on the tree's edges, tuples shipped."""
    tau = interval_s(query)
    edges, shipped = reduction_flows(query, ir.reducers, enc)
    est.flows += _key_sets(query, ir, enc, edges)
    for op in ir.reducers:
        if op.replica is not None:
            f = ir.update_flow(ir.replica(op.replica))
            m = _shipped_msg(query, op.stream, shipped[op.stream])
            est.flows.append(FlowCost(f.sig, op.sig, "ship", f.src, f.dst, f.kind, m.n,
                                      price(enc, f.src, f.dst, m) / tau))


def _key_sets(query: Query, ir: PlanIR, enc: Encoding, edges: dict[tuple[str, str], TreeMsg]) -> list[FlowCost]:
    """The key-set flows of a reduction's reducers (none between two streams of one site)."""
    return [FlowCost(f.sig, op.sig, f.name, f.src, f.dst, f.kind, t.keys, b)
            for f, op, t, b in _key_set_flows(query, ir, enc, edges)]


def _key_set_flows(query: Query, ir: PlanIR, enc: Encoding, edges: dict[tuple[str, str], TreeMsg],
                   skip: frozenset[tuple[str, str]] = frozenset(),
                   ) -> Iterator[tuple[FlowOp, ReducerOp, TreeMsg, float]]:
    """Each key-set flow with its reducer, its message and its bytes per second; ``skip``: directions skipped
    besides the reducers' own (see :func:`~.flows.reduction_flows`)."""
    tau = interval_s(query)
    for op in ir.reducers:
        for e in op.sends:
            assert e.out_flow is not None
            f = ir.flow(e.out_flow)
            if f.src == f.dst or (op.stream, e.stream) in skip:  # two streams of one site: no network
                continue
            t = edges[(op.stream, e.stream)]
            m = Msg(f.name, KEY_SETS.direction, KEY_SETS.kind, "filter", t.keys, op.stream, t.index,
                    fp_cost=enc.window_fp_cost(e.stream))
            yield f, op, t, price(enc, f.src, f.dst, m) / tau


def _shipped_msg(query: Query, stream: str, n: float) -> Msg:
    """A reducer's ShippedBatch of ``n`` tuples per epoch (and, for a tuple window, the arrivals)."""
    s = query.stream(stream)
    arrivals = 0.0 if s.window.is_time else stream_rate(s) * interval_s(query)
    return Msg.on(_SHIPPED, "shipped", n, stream, extra=(arrivals,))


_SHIPPED = REDUCED.update_flow   # (its record builds a new one on each access)


@dataclass(frozen=True)
class ReductionShape:
    """What a reduction costs wherever its results go: its key sets (bytes per second) and each
    stream's ShippedBatch message.  The key sets and the tuples that pass them do not depend on the
    result site, only where the ShippedBatches go does, so ``auto``'s search prices a shape once for
    every node and every greedy ``skip`` trial (:meth:`WireModel.plan_cost`)."""

    key_sets: float
    shipped: dict[str, Msg]

    def cost(self, query: Query, enc: Encoding, site: str) -> float:
        """Bytes per second of the reduction with its results at ``site``."""
        tau = interval_s(query)
        total = self.key_sets
        for s in query.streams:
            if s.site != site:
                total += price(enc, s.site, site, self.shipped[s.name]) / tau
        return total


def reduction_shape(inputs: Inputs, red: Reduce, enc: Encoding,
                    rhos: Optional[dict[tuple[str, str], float]] = None,
                    trees: Optional[TreeMemo] = None, unskipped: Optional[PlanIR] = None) -> ReductionShape:
    """The :class:`ReductionShape` of ``red`` (its ``site`` is ignored; ``rhos``, ``trees``: see
    :func:`~.flows.reduction_flows`; ``unskipped``: ``red`` without its skipped directions, lowered --
    the skip search prices many skip sets of one reduction, and a skipped direction is only a flow less)."""
    query = inputs.query
    if unskipped is None:
        unskipped = lower(query, Plan((), replace(red, skip=())))   # no sequences: the reducers and their key sets
    skip = frozenset(red.skip)
    edges, shipped = reduction_flows(query, unskipped.reducers, enc, rhos, trees, skip)
    keys = sum(b for _, _, _, b in _key_set_flows(query, unskipped, enc, edges, skip))
    return ReductionShape(keys, {n: _shipped_msg(query, n, v) for n, v in shipped.items()})


def estimate(query: Query, plan: Plan, inputs: Optional[Inputs] = None) -> PlanEstimate:
    """The byte model's estimate of ``plan`` (statistics from ``inputs``, else the query's)."""
    inputs = inputs or from_query(query)
    return estimate_ir(inputs, lower(inputs.query, validate(inputs.query, plan)))


class WireModel:
    """Bytes per second as the runtime encodes them (see the module docstring).

    As a step-level :class:`~joinlib.costs.unit_time.CostModel` (``step_cost``): the flows of one step and
    of a replica of its own, without sharing; :meth:`plan_cost`: the plan-level estimate, each
    shipment once.  ``inputs``: statistics (default: the query's declared ones).
    """

    name = "wire"

    def __init__(self, inputs: Optional[Inputs] = None, horizon_s: float = 15.0) -> None:
        self.inputs = inputs
        self.horizon_s = horizon_s
        self._enc: dict[int, tuple[Query, Encoding, Inputs]] = {}
        self._heads: dict[tuple[int, str, frozenset[str]], float] = {}
        self._chains: dict[tuple[int, str, frozenset[str]], Inter] = {}
        self._walks: dict[int, Walks] = {}
        self._plans: dict[tuple[int, str], float] = {}
        self._probes: dict[tuple[int, str, frozenset[str], str], Probe] = {}
        self._shapes: dict[tuple[object, ...], ReductionShape] = {}
        self._central: dict[tuple[int, str], Plan] = {}
        self._checked: dict[tuple[int, str], tuple[Sequence, ...]] = {}   # the last sequences found central's
        self._costs: dict[tuple[object, ...], dict[str, float]] = {}
        self._by_probe: dict[tuple[object, ...], dict[str, float]] = {}
        self._rhos: dict[int, dict[tuple[str, str], float]] = {}
        self._trees: dict[int, TreeMemo] = {}
        self._lowered: dict[tuple[object, ...], PlanIR] = {}

    def __repr__(self) -> str:
        return f"WireModel(measured={bool(self.inputs and self.inputs.measured)})"

    def _ctx(self, query: Query) -> tuple[Encoding, Inputs]:
        hit = self._enc.get(id(query))
        if hit is None or hit[0] is not query:
            if hit is not None:   # another query under a reused id: nothing memoised for the old one holds
                for name, memo in vars(self).items():   # every memo, so that a new one cannot be missed here
                    if name != "_enc" and isinstance(memo, dict):
                        memo.clear()
            inputs = self.inputs if self.inputs is not None and self.inputs.query.names == query.names \
                else from_query(query)
            if len(self._enc) > 16:
                self._enc.clear()
            hit = self._enc[id(query)] = (query, inputs.encoding(self.horizon_s), inputs)
        return hit[1], hit[2]

    def context(self, query: Query) -> tuple[Encoding, Inputs]:
        """The encoding and the statistics the model prices ``query`` with."""
        return self._ctx(query)

    def stats_query(self, query: Query) -> Query:
        """The query whose statistics the model uses (measured ones when it has data)."""
        return self._ctx(query)[1].query

    # ---------------------------------------------------------------- plan level
    def estimate(self, query: Query, plan: Plan) -> PlanEstimate:
        enc, inputs = self._ctx(query)
        q = inputs.query
        walks = self._walks.setdefault(id(query), {})
        if len(walks) > 100_000:
            walks.clear()
        return estimate_ir(inputs, lower(q, validate(q, plan)), enc, walks)

    def plan_cost(self, query: Query, plan: Plan) -> float:
        """Expected bytes per second of ``plan``, each shipment counted once."""
        fast = self._reduction_cost(query, plan)   # priced by shape, in less time than the key below takes
        if fast is not None:
            return fast
        key = (id(query), repr(plan.to_json()))
        hit = self._plans.get(key)
        if hit is None:
            if len(self._plans) > 50_000:
                self._plans.clear()
            hit = self._plans[key] = self.estimate(query, plan).bytes_per_s
        return hit

    def _reduction_cost(self, query: Query, plan: Plan) -> Optional[float]:
        """A reduction's cost from its :class:`ReductionShape` (None: not a reduction of ``central``'s
        sequences, priced in full)."""
        red = plan.reduce
        if red is None:
            return None
        enc, inputs = self._ctx(query)
        q = inputs.query
        base = self._central.get((id(query), red.site))
        if base is None:
            base = self._central[(id(query), red.site)] = central(q, red.site)
        if plan.sequences is not self._checked.get((id(query), red.site)):   # a skip search's trials share one
            if plan.sequences != base.sequences:
                return None
            self._checked[(id(query), red.site)] = plan.sequences
        key = (id(query), red.tree, red.root, red.skip, red.cross)
        shape = self._shapes.get(key)
        if shape is None:
            if len(self._shapes) > 50_000:
                self._shapes.clear()
            rhos = self._rhos.setdefault(id(query), {})
            trees = self._trees.setdefault(id(query), TreeMemo())
            bare = key[:3] + ((), red.cross)
            base_ir = self._lowered.get(bare)
            if base_ir is None:
                base_ir = self._lowered[bare] = lower(q, Plan((), replace(red, skip=())))
            shape = self._shapes[key] = reduction_shape(inputs, red, enc, rhos, trees, base_ir)
        return shape.cost(q, enc, red.site)

    # ---------------------------------------------------------------- step level (CostModel)
    def _inter(self, query: Query, q: Query, state: SeqState) -> Inter:
        key = (id(query), state.head, state.joined_set)
        heads = self._heads.get(key)
        if heads is None:
            heads = self._heads[key] = self._chain(query, q, state.head, key[2]).heads
        rows = state.rate * interval_s(query)
        return Inter(state, rows, min(heads, rows))

    def _chain(self, query: Query, q: Query, head: str, joined: frozenset[str]) -> Inter:
        """The intermediate of ``head`` over ``joined`` in its canonical order, SP-S all along.  A prefix of a
        set's canonical order is its own set's canonical order, so each set extends its prefix's memoised
        chain by one step instead of walking from the head (the same steps, the same floats)."""
        order = _canonical_order(q, head, joined)
        k, chains = len(order), self._chains
        it = None
        while k:
            it = chains.get((id(query), head, frozenset((head, *order[:k]))))
            if it is not None:
                break
            k -= 1
        it = it or Inter.start(q, head)
        for i in range(k, len(order)):
            it = advance_intermediate(q, it, order[i], SP_S.name)
            chains[(id(query), head, frozenset((head, *order[:i + 1])))] = it
        return it

    def step_cost(self, query: Query, state: SeqState, stream: str, algorithm: str) -> float:
        return self.step_costs(query, state, stream, (algorithm,))[algorithm]

    def step_costs(self, query: Query, state: SeqState, stream: str,
                   algorithms: tuple[str, ...] = ALGORITHMS) -> dict[str, float]:
        hit = self.step_costs_shared(query, state, stream)
        if hit is None:
            return dict.fromkeys(algorithms, 0.0)
        if algorithms == ALGORITHMS:
            return dict(hit)
        return {a: hit.get(a, 0.0) for a in algorithms}   # an algorithm without a record ships nothing

    def location_free(self, query: Query) -> bool:
        """A step between two sites costs the same wherever its intermediate is (the sizes do not depend on the
        link: :attr:`~joinlib.costs.encoding.Encoding.sites_free`)."""
        return self._ctx(query)[0].sites_free

    def step_costs_shared(self, query: Query, state: SeqState, stream: str) -> Optional[dict[str, float]]:
        """:meth:`step_costs` of every algorithm as kept (the caller must not change it; one instance for every
        location the step is priced the same at), or None for a step within one site (it ships nothing)."""
        enc, inputs = self._ctx(query)
        q = inputs.query
        src, dst = state.location, q.stream(stream).site
        if src == dst:
            return None
        ckey = (id(query), state.head, state.joined_set, stream, enc.link(src, dst))
        hit = self._costs.get(ckey)   # one computation for every location when sizes are the same on every link
        if hit is None:
            if len(self._costs) > 200_000:
                self._costs.clear()
                self._probes.clear()
            hit = self._costs[ckey] = self._priced(query, q, enc, state, stream)
        return hit

    def _priced(self, query: Query, q: Query, enc: Encoding, state: SeqState, stream: str) -> dict[str, float]:
        """Every algorithm's bytes per second for one step with a replica of its own: its replica's update
        (``stream``'s site to the intermediate's) then its flows, each priced on its link.  The messages
        are a function of (head, joined set, stream) only, through one probe for all six."""
        src, dst = state.location, q.stream(stream).site
        pkey = (id(query), state.head, state.joined_set, stream)
        pr = self._probes.get(pkey)
        if pr is None:
            pr = self._probes[pkey] = probe(q, self._inter(query, q, state), stream)
        # the costs are a function of the probe and the links: steps of other heads (or orders) that ask the same
        # of the same stream cost the same (a row's size does not depend on the order of its streams when the
        # encoding says so), so each is priced once (the row's streams as a set: the state's, kept)
        okey = (id(query), pr[:-1], state.joined_set, enc.link(src, dst), enc.link(dst, src)) \
            if enc.rows_order_free else None
        if okey is not None:
            hit = self._by_probe.get(okey)
            if hit is not None:
                return hit
        tau = interval_s(q)
        out = {}
        for algorithm, rec in REGISTRY.items():
            total, share = 0.0, 0.0
            if rec.replica is not None:
                msg, shares = replica_flows(q, rec.replica.name, stream, pr.index if rec.replica.keyed else (),
                                            [pr], enc)
                total += price(enc, dst, src, msg)
                share = shares[0]
            for m in step_flows(q, algorithm, pr, share, enc):
                total += price(enc, src, dst, m) if m.direction == "fwd" else price(enc, dst, src, m)
            out[algorithm] = total / tau
        if okey is not None:
            if len(self._by_probe) > 200_000:
                self._by_probe.clear()
            self._by_probe[okey] = out
        return out

    def start_cost(self, query: Query, head: str, site: str) -> float:
        """A sequence started at ``site``: its head's batches shipped there."""
        enc, inputs = self._ctx(query)
        q = inputs.query
        h = q.stream(head)
        if site == h.site:
            return 0.0
        b = stream_rate(h) * interval_s(q)
        return enc.rows(h.site, site, (head,), b) / interval_s(q)

    def sequence_cost(self, query: Query, seq: Sequence) -> float:
        """Step-level cost of one sequence (its start included)."""
        state = SeqState.start(query, seq.head, seq.start)
        total = self.start_cost(query, seq.head, seq.start) if seq.start else 0.0
        for st in seq.steps:
            total += self.step_cost(query, state, st.stream, st.algorithm)
            state = state.advance(query, st.stream, st.algorithm)
        return total


def _canonical_order(q: Query, head: str, joined: frozenset[str]) -> list[str]:
    """The streams of ``joined`` but the head in a join-graph order (breadth first, query order)."""
    done, order = {head}, []
    adj = _graph(q).adj
    while len(done) < len(joined):
        for n in q.names:
            if n in joined and n not in done and not adj[n].isdisjoint(done):
                done.add(n)
                order.append(n)
                break
        else:
            break
    return order


__all__ = ["FlowCost", "PlanEstimate", "ReductionShape", "WireModel", "estimate", "estimate_ir", "price",
           "reduction_shape", "walk", "Walks", "window_tuples"]
