"""``auto``: search the whole plan space with the plan-level byte model, then (with data) measure.

The search is a set of **candidate generators** and one **model** (:class:`~joinlib.costs.WireModel`,
bytes per second with every shipment counted once):

* ``central``: every stream shipped to one node, for every node (processing-only ones included);
* ``uniform``: each of the six algorithms on every step;
* ``per-head``: for every head, the model-optimal sequence (order and algorithm per step, DP of
  :mod:`.exhaustive`) starting at every node, the cheapest start kept;
* ``reduce``: a reduction (semijoin program over a spanning tree, every result at one node) to
  every node, over the default tree (breadth first from the most central stream) and over the
  breadth-first tree from every other stream where that is a different tree (cyclic join graphs),
  on a cyclic graph also with key sets along the edges off the tree (``Reduce.cross``); each with
  the directions whose key sets cost more than they save skipped (:func:`skip_directions`: greedy
  on the model, deterministic);
* ``descent``: coordinate descent over heads from the best plans so far: each head's sequence
  replaced in turn by the one from its pool (the per-head optimum at every start, SP-S to every
  node, each algorithm) that lowers the *plan*'s cost most, until nothing improves.  This finds
  mixed plans the others cannot, e.g. heads that share the replicas of a ``central`` node while
  one selective head reduces by semijoins.  (Reductions are whole-plan shapes: not descent seeds.)

A new plan shape plugs in as one more generator (``GENERATORS``) plus its pricing in the model.
The generators share one :class:`Search` (the per-head DP's table and step costs, each head's best
sequence per start); reductions are priced by shape and the descent incrementally, so an 8-stream chain,
star or cycle plans in about half a second, the fully connected query in about 1.1 s (docs/cost-model.md,
"How auto searches fast"; ``bench/plan_time.py``).

Without data, ``auto`` returns the model's best plan over the query file's statistics.  With data,
it measures the statistics first (:func:`joinlib.costs.from_data`), ranks the candidates, and runs a
short list — the :data:`SHORT_LIST` best distinct candidates, the best reduction when none of them
is one, and ``central`` at every node — on a sample long enough for every window to fill
(:func:`sample_ms`), and keeps the plan shipping the fewest bytes per second once the windows are
full (messages of the epochs after the fill, put on the whole data's scale by the model's
estimates at the sample's and the data's stream rates).
Measurement on the deterministic simulator charges the bytes Kafka carries, so the choice never
ships more than the best ``central`` on the sample.
"""
from __future__ import annotations

import gc
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Generic, Optional, TypeVar

from joinlib.algorithms import ALGORITHMS
from joinlib.costs import Inputs, WireModel, inputs_for
from joinlib.costs.incremental import Ensemble, PlanPricer
from joinlib.costs.unit_time import StepCache
from joinlib.model import Query, Tup
from joinlib.plan import logical as plans
from joinlib.plan.logical import Plan, Sequence, Step, validate
from joinlib.planner.exhaustive import Memo, exhaustive_sequence
from joinlib.planner.kinds import Candidate, gen_kinds, kind_of, part_inputs, parts_of, price, span_s, with_rates
from joinlib.planner.measure import central_bytes, fill_ms, sample_ms, sample_of, steady_bytes

Streams = dict[str, list[Tup]]
#: a candidate generator: named plans for a query under a model (a :class:`Search`)
Generator = Callable[["Search"], Iterable[tuple[str, Plan]]]

SHORT_LIST = 3          # model candidates measured besides central at every node
DESCENT_SEEDS = 4       # plans the coordinate descent starts from
DESCENT_ROUNDS = 4
#: another run kind is chosen over the best measured plan of sequences only when it measures at most this
#: share of it: on selective uniform workloads a sample's bytes mis-rank candidates within ~10 % (a partition
#: function fitted on few tuples per value), while skewed keys make partitioned plans win by 2x
KIND_MARGIN = 0.9


C = TypeVar("C", bound=Candidate, covariant=True)


@dataclass(frozen=True)
class Ranked(Generic[C]):
    """A candidate: its name, the byte model's estimate and, if it was run on a sample, its measurement."""

    name: str
    plan: C                             # a plan of sequences, or (every kind, with data) another run kind
    estimate: float                     # model bytes per second
    measured: Optional[float] = None    # measured bytes per second, windows full
    measured_bytes: Optional[int] = None  # measured bytes of the whole sample

    @property
    def kind(self) -> str:
        """plan | pmjoin | mjoin | pmjoin:mjoin (:func:`~.kinds.kind_of`)."""
        return kind_of(self.plan)

    @property
    def is_reduction(self) -> bool:
        return isinstance(self.plan, Plan) and self.plan.reduce is not None


# ------------------------------------------------------------------ the search's shared work
@dataclass(frozen=True)
class Search:
    """One search of a query under a model, and the work its generators share: the per-head DP's
    step costs and table (one per head, shared by every start node: a state's best completion does
    not depend on where its sequence started) and each head's best sequence per start, which both
    ``per-head`` and the descent's pools use.  Computed once each, on first use."""

    query: Query
    model: WireModel
    cache: StepCache
    pricer: PlanPricer
    memo: dict[str, Memo] = field(default_factory=dict)
    per_start: dict[str, dict[str, tuple[Sequence, float]]] = field(default_factory=dict)

    @classmethod
    def of(cls, query: Query, model: WireModel) -> "Search":
        enc, inputs = model.context(query)
        return cls(query, model, StepCache(query, model), PlanPricer(inputs, enc))

    def best_sequences(self, head: str) -> dict[str, tuple[Sequence, float]]:
        """Per start node, the model-optimal sequence of ``head`` and its step-level cost."""
        hit = self.per_start.get(head)
        if hit is not None:
            return hit
        query, model = self.query, self.model
        memo = self.memo.setdefault(head, {})
        out = {}
        home = query.stream(head).site
        for node in query.nodes:
            start = None if node == home else node
            seq, cost = exhaustive_sequence(query, model, head, start, self.cache, memo)
            out[node] = (seq, cost + (model.start_cost(query, head, node) if start else 0.0))
        self.per_start[head] = out
        return out


# ------------------------------------------------------------------ generators
def gen_central(search: Search) -> Iterable[tuple[str, Plan]]:
    for node in search.query.nodes:
        yield f"central:{node}", plans.central(search.query, node)


def gen_uniform(search: Search) -> Iterable[tuple[str, Plan]]:
    for a in ALGORITHMS:
        yield a, plans.uniform(search.query, a)


def gen_per_head(search: Search) -> Iterable[tuple[str, Plan]]:
    seqs = []
    for s in search.query.streams:
        options = search.best_sequences(s.name)
        seqs.append(min(options.values(), key=lambda v: v[1])[0])
    yield "per-head", validate(search.query, Plan(tuple(seqs)))


def gen_reduce(search: Search) -> Iterable[tuple[str, Plan]]:
    """A reduction to every node: over the default tree, and over the breadth-first tree from each
    other stream when that is another tree (a cyclic join graph has several)."""
    query, model = search.query, search.model
    default = plans.center(query)
    trees = {frozenset(map(frozenset, plans.spanning_tree(query, default))): default}
    for root in query.names:
        trees.setdefault(frozenset(map(frozenset, plans.spanning_tree(query, root))), root)
    cyclic = bool(plans.off_tree(query, tuple(plans.spanning_tree(query, default))))
    for node in query.nodes:
        for root in trees.values():
            tree = plans.spanning_tree(query, root)
            name = f"reduce:{node}" + (f"/tree:{root}" if root != default else "")
            for cross in (False, True) if cyclic else (False,):   # a cyclic graph: off-tree edges filter too?
                yield _skipped(query, model, name + ("/cross" if cross else ""),
                               plans.reduction(query, node, tree, root, (), cross))


def _skipped(query: Query, model: WireModel, name: str, plan: Plan) -> tuple[str, Plan]:
    plan = skip_directions(query, model, plan)
    assert plan.reduce is not None
    if plan.reduce.skip:
        name += "/skip:" + ",".join(f"{a}>{b}" for a, b in plan.reduce.skip)
    return name, plan


def skip_directions(query: Query, model: WireModel, plan: Plan) -> Plan:
    """The reduction ``plan`` with the tree directions whose key sets cost more than they save
    skipped (``Reduce.skip``): greedily, the direction whose skipping lowers the plan's estimated
    bytes most (the first in tree order on ties), while one does.  Skipping u -> v saves u's key
    sets to v and lets through (toward v's other neighbours and to the result site) the tuples of
    v that u's sets would have stopped; the model prices both."""
    red = plan.reduce
    if red is None:
        return plan
    directed = [d for a, b in red.edges(query) for d in ((a, b), (b, a))]
    best = model.plan_cost(query, plan)
    while True:
        trials = []
        for d in directed:
            if d not in red.skip:
                trial = plans.with_skip(query, plan, red.skip + (d,))
                trials.append((model.plan_cost(query, trial), trial))
        if not trials:
            return plan
        cost, trial = min(trials, key=lambda t: tie_key(t[0]))
        if cost >= best * (1 - 1e-9):
            return plan
        best, plan = cost, trial
        assert plan.reduce is not None
        red = plan.reduce


GENERATORS: dict[str, Generator] = {"central": gen_central, "uniform": gen_uniform, "per-head": gen_per_head,
                                    "reduce": gen_reduce}


def pools(search: Search) -> dict[str, list[Sequence]]:
    """Per head, the sequences the descent may give it."""
    query = search.query
    out: dict[str, list[Sequence]] = {}
    centrals = [plans.central(query, node) for node in query.nodes]
    for s in query.streams:
        pool: dict[Sequence, None] = {}
        for seq, _ in search.best_sequences(s.name).values():
            pool.setdefault(seq)
        for c in centrals:
            pool.setdefault(c.sequence(s.name))
        for a in ALGORITHMS:
            pool.setdefault(Sequence(s.name, tuple(Step(o, a) for o in plans.bfs_order(query, s.name))))
        out[s.name] = list(pool)
    return out


def descent(search: Search, seed: Plan, pool: dict[str, list[Sequence]]) -> Plan:
    """Coordinate descent over heads from ``seed`` (see the module docstring).  Each trial is priced
    by how it changes the replicas it touches (:class:`~joinlib.costs.incremental.Ensemble`), not by
    lowering the whole plan: the same costs, a few µs instead of a few ms at 8 streams."""
    query, pricer = search.query, search.pricer
    names = query.names
    current = [seed.sequence(n) for n in names]
    plan = Ensemble(pricer, [pricer.parts(s) for s in current])
    best = plan.cost()
    for _ in range(DESCENT_ROUNDS):
        improved = False
        for i, head in enumerate(names):
            for seq in pool[head]:
                if seq == current[i]:
                    continue
                new = pricer.parts(seq)
                cost = best + plan.delta(i, new)
                if cost < best * (1 - 1e-9):
                    plan.replace(i, new)
                    current[i], improved = seq, True
                    best = plan.cost()   # exact again: no drift from the deltas
        if not improved:
            break
    return validate(query, Plan(tuple(current)))


def rank(query: Query, model: WireModel) -> list[Ranked[Plan]]:
    """Every candidate, cheapest by the model first, duplicates removed (first name kept)."""
    with _collector_paused():
        return _rank(query, model)


@contextmanager
def _collector_paused() -> Iterator[None]:
    """The cyclic garbage collector paused, as for a measured run (``joinlib.experiments.measure``): the
    search builds its tables -- a few hundred thousand small objects, all alive until it returns -- and
    collections scanning them over and over took a fifth of its time.  It makes next to no cyclic
    garbage; what it makes waits for the first collection after it."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _rank(query: Query, model: WireModel) -> list[Ranked[Plan]]:
    seen: dict[str, Ranked[Plan]] = {}
    search = Search.of(query, model)

    def add(name: str, plan: Plan) -> None:
        key = repr(plan.to_json())
        if key not in seen:   # a plan of sequences priced from the descent's parts (the same float)
            cost = model.plan_cost(query, plan) if plan.reduce else search.pricer.plan_cost(plan.sequences)
            seen[key] = Ranked(name, plan, cost)
    for gen in GENERATORS.values():
        for name, plan in gen(search):
            add(name, plan)
    pool = pools(search)
    seeds = sorted((r for r in seen.values() if not r.is_reduction), key=lambda r: r.estimate)[:DESCENT_SEEDS]
    for r in seeds:
        assert isinstance(r.plan, Plan)
        add(f"descent({r.name})", descent(search, r.plan, pool))
    return sorted(seen.values(), key=lambda r: tie_key(r.estimate))


def tie_key(cost: float) -> float:
    """``cost`` to 12 significant digits: candidates whose estimates differ only by rounding (the
    same bytes summed in another order, mirror-image plans) tie, and ties keep the generators' order."""
    return float(f"{cost:.12g}")


# ------------------------------------------------------------------ measurement
def measure_short_list(query: Query, streams: Streams, cands: Iterable[Ranked[Candidate]],
                       length_ms: Optional[int] = None, inputs: Optional[Inputs] = None) -> list[Ranked[Candidate]]:
    """Measure ``cands``; cheapest first (ties: the model's order).  ``central:NODE`` is priced
    exactly over all of ``streams`` (:func:`~.measure.central_bytes`, no run needed); every other
    candidate runs on the sample, and its bytes per second once the windows are full are put on the
    whole data's scale by the model: × (its estimate at each stream's tuple rate over the data) /
    (its estimate at the rates of the sample's measured epochs), per partition for a partitioned
    candidate.  A sample's streams run above or below their mean rates by several per cent, and by
    different amounts: scaling every plan by the total tuple rate made a plan that ships another
    stream than the best ``central`` look a few per cent cheaper or dearer than it is."""
    length = length_ms or sample_ms(query, streams)
    span = span_s(streams)
    scale = _rate(streams, span) / max(1e-9, _rate(sample_of(streams, length), None))
    rescale = _rescaler(query, streams, length, inputs)
    out: list[Ranked[Candidate]] = []
    results = set()
    for r in cands:
        if r.name.startswith("central:") and r.name[8:] in query.nodes:
            total = central_bytes(query, streams, r.name[8:])
            out.append(Ranked(r.name, r.plan, r.estimate, total / span, total))
            continue
        m = steady_bytes(query, streams, r.plan, length)
        results.add(m.results)
        factor = rescale(r.plan) if rescale is not None else None
        out.append(Ranked(r.name, r.plan, r.estimate, m.steady_bytes_per_s * (factor or scale), m.bytes))
    if len(results) > 1:  # every plan is exact: a difference is a bug
        raise RuntimeError(f"candidate plans disagree on the sample's results: {sorted(results)}")
    order = {id(r): i for i, r in enumerate(out)}
    return sorted(out, key=lambda r: (r.measured or 0.0, order[id(r)]))


def _rescaler(query: Query, streams: Streams, length: int,
              inputs: Optional[Inputs]) -> Optional[Callable[[Candidate], Optional[float]]]:
    """candidate -> (model estimate at the data's stream rates) / (at the rates of the sample's
    measured epochs, those :func:`~.measure.steady_bytes` counts), each part of a partitioned
    candidate at its own rates; None when the sample has no such epochs."""
    tau = query.execution.interval_ms
    starts = [ts[0].ts for ts in streams.values() if ts]
    if not starts:
        return None
    start, sample = min(starts), sample_of(streams, length)
    e0 = (start + fill_ms(query, streams)) // tau + 1
    last = max(t.ts for ts in sample.values() for t in ts) // tau
    if last < e0:
        return None
    dur, span, end = (last - e0 + 1) * tau / 1000.0, span_s(streams), start + length
    base = inputs or inputs_for(query, streams)

    def factor(cand: Candidate) -> Optional[float]:
        parts = parts_of(query, cand, streams)
        bases = [base] if len(parts) == 1 else [part_inputs(query, p, span) for p in parts]
        full = [with_rates(b, {n: len(ts) / span for n, ts in p.items()}) for b, p in zip(bases, parts, strict=True)]
        late = [with_rates(b, {n: sum(1 for t in ts if e0 * tau <= t.ts < end) / dur for n, ts in p.items()})
                for b, p in zip(bases, parts, strict=True)]
        a, b = price(query, cand, full), price(query, cand, late)
        return a / b if a > 0 and b > 0 else None
    return factor


def _rate(streams: Streams, span: Optional[float]) -> float:
    n = sum(len(t) for t in streams.values())
    return n / (span if span is not None else span_s(streams))


def short_list(query: Query, candidates: Iterable[Ranked[Candidate]],
               k: int = SHORT_LIST) -> list[Ranked[Candidate]]:
    """The ``k`` best model candidates other than ``central``, the best reduction if none of them is
    one (the model's pass-through estimates are least sure where reductions win most), plus
    ``central`` at every node; with every kind, also the best partitioned plan and the best tree if
    none of them is one."""
    ranked = list(candidates)
    others = [r for r in ranked if not r.name.startswith("central:")][:k]
    if not any(r.is_reduction for r in others):
        others += [r for r in ranked if r.is_reduction][:1]
    for kinds in (("pmjoin",), ("mjoin", "pmjoin:mjoin")):   # the best partitioned plan, the best tree
        if not any(r.kind in kinds for r in others):
            others += [r for r in ranked if r.kind in kinds][:1]
    return others + [r for r in ranked if r.name.startswith("central:")]


def auto_ranked(query: Query, streams: Optional[Streams] = None, inputs: Optional[Inputs] = None,
                every_kind: bool = False) -> tuple[list[Ranked[Candidate]], list[Ranked[Candidate]]]:
    """(every candidate ranked by the model, the short list measured on the data — empty without
    data).  ``every_kind`` (with data): partitioned plans, MJoin trees and a tree per partition too
    (:mod:`.kinds`); without it, plans of sequences only (what a partition's plan or a ``--switch``
    generation must be)."""
    inputs = inputs or inputs_for(query, streams)
    with _collector_paused():   # the model's tables are freed (reference counts) before the collector would scan them
        ranked: list[Ranked[Candidate]] = [Ranked(r.name, validate(query, r.plan), r.estimate)
                                           for r in rank(inputs.query, WireModel(inputs))]
    if not streams:
        return ranked, []
    if every_kind:
        ranked = sorted(ranked + [Ranked(n, c, e) for n, c, e in gen_kinds(query, streams, inputs)],
                        key=lambda r: r.estimate)
    return ranked, prefer_plans(measure_short_list(query, streams, short_list(query, ranked), inputs=inputs))


def prefer_plans(measured: list[Ranked[Candidate]]) -> list[Ranked[Candidate]]:
    """``measured`` with the best plan of sequences first unless another kind measures at most
    :data:`KIND_MARGIN` of it."""
    plans_only = [r for r in measured if isinstance(r.plan, Plan)]
    if not measured or not plans_only or isinstance(measured[0].plan, Plan):
        return measured
    best = plans_only[0]
    if (measured[0].measured or 0.0) <= KIND_MARGIN * (best.measured or 0.0):
        return measured
    return [best] + [r for r in measured if r is not best]


def auto(query: Query, streams: Optional[Streams] = None) -> Plan:
    """The ``auto`` plan of sequences (see the module docstring): what a partition of a partitioned
    plan runs, and a ``--switch`` generation."""
    ranked, measured = auto_ranked(query, streams)
    best = (measured or ranked)[0].plan
    assert isinstance(best, Plan)
    return best


def auto_any(query: Query, streams: Optional[Streams] = None, trees: bool = True) -> Ranked[Candidate]:
    """The ``auto`` choice among every run kind (with data; without, :func:`auto`'s); not ``trees``: no MJoin
    tree (a running query's replan cannot move it to one)."""
    ranked, measured = auto_ranked(query, streams, every_kind=True)
    if trees:
        return (measured or ranked)[0]
    return next(r for r in (*measured, *ranked) if r.kind not in ("mjoin", "pmjoin:mjoin"))   # central is one
