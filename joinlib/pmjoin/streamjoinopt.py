"""STREAMJOINOPT (seed 002, Algorithm 1): place the joins of a query on nodes in O(n²).

Phase 1 (lines 2-9) joins, at each node, co-located streams whose join is slower than the slower
input: evaluating them locally can only shrink what leaves the node. Phase 2 (lines 10-28) grows a
set Σ_p from the slowest remaining stream, adding each time the joinable stream S_j of least Eq. (4)

    C(Σ_p + S_j) = min{ Σ_{i∈Σ_p} λ_i + λ_j,                              (case 2: a third site)
                        Σ_{i∈Σ_p} λ_i·col_{i,j} + λ(Σ_p ⋈ S_j) }           (case 1: ship to S_j's node)

(λ weighted by tuple size, so costs are bytes/s). Case 1 places every pending join at S_j's node as
one MJoin whose right-most input is S_j; case 2 leaves the joins pending. Fixes of the paper's slips
(digest): Eq. (4)'s second term is λ of Σ_p ⋈ S_j, lines 20/22 mean S_k, the chosen stream.

Choices the paper leaves open ([impl]), all deterministic:
* ties (equal rates, equal costs) go to the stream that comes first in the model's order; between
  the two cases a tie goes to case 1 (it allocates the join);
* case 1's second term is 0 when Σ_p + S_j is the whole query: the final result goes to the sink,
  which the model does not charge (Example 2: S_1 joins S_{0,2,3} and S_4 by case 1 at n_0);
* if Σ runs empty while Σ_p still holds pending streams, their MJoin goes to the node, processing-only
  nodes included, that minimises the bytes shipped to it; ties go to the fastest member's node.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from joinlib.errors import PlanError
from joinlib.pmjoin.rates import Members, RateModel
from joinlib.pmjoin.tree import Leaf, Tree, mjoin_node


@dataclass(frozen=True)
class Item:
    """A stream of the algorithm's Σ: a source stream or the result of joins placed so far."""

    tree: Tree
    members: Members

    @property
    def node(self) -> str:
        return self.tree.node


def _leaf(model: RateModel, i: int) -> Item:
    s = model.streams[i]
    return Item(Leaf(s.name, s.node), frozenset({i}))


def _key(model: RateModel, item: Item) -> tuple[float, int]:
    return model.rate(item.members), min(item.members)


def _join(inputs: Sequence[Item], node: str) -> Item:
    return Item(mjoin_node([it.tree for it in inputs], node), frozenset().union(*(it.members for it in inputs)))


def local_joins(model: RateModel) -> list[Item]:
    """Phase 1: per node, merge co-located joinable pairs that reduce the rate."""
    out: list[Item] = []
    for node in model.nodes:
        here = sorted((_leaf(model, i) for i in range(len(model.streams)) if model.node_of(i) == node),
                      key=lambda it: _key(model, it))
        j = 0
        while j < len(here):
            k = j + 1
            while k < len(here):
                a, b = here[j], here[k]
                joined = a.members | b.members
                if model.joinable(a.members, b.members) and \
                        model.rate(joined) < min(model.rate(a.members), model.rate(b.members)):
                    here[j] = _join([a, b], node)
                    del here[k]
                else:
                    k += 1
            j += 1
        out.extend(here)
    return out


def _case_costs(model: RateModel, pending: Sequence[Item], shipped: float, cand: Item,
                everything: Members) -> tuple[float, float]:
    """Eq. (4)'s two terms: (case 1: ship Σ_p to S_j's node, case 2: to a third site); ``shipped`` is
    Σ_{i∈Σ_p} λ_i (bytes/s)."""
    moved = shipped - sum(model.cost(p.members) for p in pending if p.node == cand.node)
    joined = frozenset().union(cand.members, *(p.members for p in pending))
    result = 0.0 if joined == everything else model.cost(joined)
    return moved + result, shipped + model.cost(cand.members)


def _place_pending(model: RateModel, pending: Sequence[Item]) -> Item:
    """Σ ran empty with joins pending: the node receiving the fewest bytes (ties: the fastest member's)."""
    fastest = max(pending, key=lambda p: (model.cost(p.members), -min(p.members))).node

    def inbound(node: str) -> tuple[float, bool, int]:
        return (sum(model.cost(p.members) for p in pending if p.node != node), node != fastest,
                model.nodes.index(node))

    return _join(pending, min(model.nodes, key=inbound))


def _grow(model: RateModel, sigma: list[Item], everything: Members) -> Item:
    """One outer iteration of phase 2: from the slowest stream until one stream remains."""
    pending = [sigma.pop(0)]
    while True:
        cands = [c for c in sigma if any(model.joinable(p.members, c.members) for p in pending)]
        if not cands:
            if len(pending) > 1 and not sigma:
                return _place_pending(model, pending)
            raise PlanError("the join graph is not connected: a cross product is not a join; add a predicate "
                            "linking " + ", ".join(sorted(model.streams[i].name for p in pending for i in p.members)))
        best, case1 = cands[0], True
        best_cost = float("inf")
        shipped = sum(model.cost(p.members) for p in pending)
        for c in cands:
            c1, c2 = _case_costs(model, pending, shipped, c, everything)
            if min(c1, c2) < best_cost:
                best, best_cost, case1 = c, min(c1, c2), c1 <= c2
        sigma.remove(best)
        if case1:
            return _join([*pending, best], best.node)
        pending.append(best)


def stream_join_opt(model: RateModel) -> Tree:
    """Algorithm 1: an MJoin tree over every stream of ``model``, each operator placed on a node."""
    sigma = sorted(local_joins(model), key=lambda it: _key(model, it))
    everything = model.all
    while len(sigma) > 1:
        item = _grow(model, sigma, everything)
        sigma.append(item)
        sigma.sort(key=lambda it: _key(model, it))
    return sigma[0].tree
