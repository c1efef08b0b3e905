"""The search engines every planner uses: Lemma 1, tree enumeration, tree DP, subset DP, brute force.

A :class:`Problem` is "join these inputs (atoms) on these candidate nodes and deliver the result to
``target``": the exhaustive planner poses it once on all N nodes; the hierarchical planners pose it
per cluster, on the cluster's members, with inputs snapped to estimate positions.

- :func:`place_tree`: for a *fixed* tree, the optimal placement by tree DP in O(K·m²) (the digest):
  ``deliver(v, x)`` = cheapest way to have v's output at x = min over y of ``place(v, y) + rate_v·d(y, x)``,
  or ``rate_v·d(x0, x)`` if an advertised stream at x0 matches v (reuse), and
  ``place(v, y) = Σ_children deliver(c, y)``.  Exact because the cost is a sum over tree edges and a
  subtree meets the rest of the plan only through where its output goes.
- :func:`exhaustive`: every distinct tree × :func:`place_tree` -- "all merge orders × placements".
- :func:`solve`: the same optimum by DP over subsets of inputs (``place(S, y)`` = min over splits of S);
  it enumerates the same trees implicitly, ~5x faster for K = 5.  Tests check solve = exhaustive = brute force.
- :func:`lemma1`: [PAPER] Lemma 1, K!(K−1)!/2^(K−1) · N^(K−1), the denominator of "fraction of the
  search space examined".  It counts merge *sequences* (180 for K = 5), not distinct trees (105).

The paper says dynamic programming does not prune without losing optimality (no optimal substructure);
that is true of DP over join orders alone.  Conditioning each subproblem on the node its output is
delivered to restores it for this additive cost -- the DP here is exact, as the brute-force tests show.
"""
from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Optional, Union

from joinlib.multiquery.cost import PlanNode

INF = float("inf")
Tree = Union[int, tuple["Tree", "Tree"]]


def merge_orders(k: int) -> int:
    """K!(K−1)!/2^(K−1) = Π_{i=2..K} C(i, 2): the merge sequences of Lemma 1 (1, 3, 18, 180, ...)."""
    out = 1
    for i in range(2, k + 1):
        out *= i * (i - 1) // 2
    return out


def lemma1(k: int, n: int) -> int:
    """[PAPER] Lemma 1: size of the exhaustive space for K sources on N nodes (K=5, N=64: 3,019,898,880)."""
    return merge_orders(k) * int(n ** (k - 1))


@dataclass(frozen=True)
class Atom:
    """An input of a problem: ``plan`` (a source, a reuse or an already planned subtree, at its actual
    node) and ``est``, the node the search assumes it is at."""

    plan: PlanNode
    est: int


@dataclass(frozen=True)
class Reuse:
    """An advertised stream usable for the join of ``streams``: produced at ``node``, assumed at ``est``."""

    streams: frozenset[str]
    node: int
    est: int
    rate: float


@dataclass
class Problem:
    """Join ``atoms`` on ``cands`` (physical node indices) and deliver to ``target`` (None: the output
    stays where it is made).  ``rate`` gives rate(T); ``reuse`` the advertised streams for T."""

    atoms: list[Atom]
    cands: list[int]
    target: Optional[int]
    dist: list[list[float]]
    rate: Callable[[frozenset[str]], float]
    reuse: Callable[[frozenset[str]], list[Reuse]] = field(default=lambda streams: [])
    dc: list[list[float]] = field(init=False, repr=False)
    dct: list[list[float]] = field(init=False, repr=False)
    _union: dict[int, frozenset[str]] = field(default_factory=dict, repr=False)
    _reuse: dict[int, list[Reuse]] = field(default_factory=dict, repr=False)
    _rate: dict[int, float] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.dc = [[self.dist[a][b] for b in self.cands] for a in self.cands]
        self.dct = [list(col) for col in zip(*self.dc, strict=True)]  # dct[x][y] = d(y, x)

    def union(self, mask: int) -> frozenset[str]:
        u = self._union.get(mask)
        if u is None:
            u = frozenset().union(*(a.plan.streams for i, a in enumerate(self.atoms) if mask >> i & 1))
            self._union[mask] = u
        return u

    def mask_rate(self, mask: int) -> float:
        r = self._rate.get(mask)
        if r is None:
            r = self._rate[mask] = (self.atoms[mask.bit_length() - 1].plan.rate if mask & (mask - 1) == 0
                                    else self.rate(self.union(mask)))
        return r

    def reuses(self, mask: int) -> list[Reuse]:
        if mask & (mask - 1) == 0:
            return []
        found = self._reuse.get(mask)
        if found is None:
            found = self._reuse[mask] = self.reuse(self.union(mask))
        return found

    def leaf(self, i: int) -> list[float]:
        a = self.atoms[i]
        return [a.plan.rate * self.dist[a.est][c] for c in self.cands]

    def deliver(self, mask: int, place: list[float]) -> list[float]:
        """Cheapest cost of having the join of ``mask`` at each candidate, given its ``place`` vector.

        min over y of place[y] + r·d(y, x), scanning y by increasing place[y] and stopping once
        place[y] alone reaches the best found (r·d ≥ 0): the same minimum, ~8x fewer steps."""
        r = self.mask_rate(mask)
        order = sorted(range(len(place)), key=place.__getitem__)
        ps = [place[y] for y in order]
        out = []
        for col in self.dct:
            best = INF
            for p, y in zip(ps, order, strict=True):
                if p >= best:
                    break
                v = p + r * col[y]
                if v < best:
                    best = v
            out.append(best)
        for ro in self.reuses(mask):
            out = [min(o, r * self.dist[ro.est][c]) for o, c in zip(out, self.cands, strict=True)]
        return out

    def final(self, mask: int, place: list[float]) -> tuple[float, int, Optional[Reuse]]:
        """(cost, best candidate position or -1, reuse or None) for delivering the full join to the target."""
        r = self.mask_rate(mask)
        t = self.target
        best = min(((p + (r * self.dist[c][t] if t is not None else 0.0), y)
                    for y, (p, c) in enumerate(zip(place, self.cands, strict=True))), default=(INF, -1))
        out: tuple[float, int, Optional[Reuse]] = (best[0], best[1], None)
        for ro in self.reuses(mask):
            c = r * self.dist[ro.est][t] if t is not None else 0.0
            if c < out[0]:
                out = (c, -1, ro)
        return out


@dataclass(frozen=True)
class SearchResult:
    """A search's best plan root (placed), its estimated cost and the combinations covered (Lemma 1 units);
    not a join result (:class:`joinlib.protocol.records.Result`)."""

    root: PlanNode
    estimate: float
    examined: int


def _reuse_node(p: Problem, mask: int, ro: Reuse) -> PlanNode:
    return PlanNode("reuse", p.union(mask), p.mask_rate(mask), ro.node)


def _join(p: Problem, mask: int, y: int, left: PlanNode, right: PlanNode) -> PlanNode:
    return PlanNode("join", p.union(mask), p.mask_rate(mask), p.cands[y], left, right)


# --------------------------------------------------------------------------- subset DP

def _splits(mask: int) -> Iterator[int]:
    """Submasks a of mask holding its lowest bit, a != mask (each unordered split once)."""
    low = mask & -mask
    rest = mask ^ low
    sub = rest
    while True:
        a = sub | low
        if a != mask:
            yield a
        if sub == 0:
            return
        sub = (sub - 1) & rest


def solve(p: Problem) -> SearchResult:
    """The optimum over every tree and placement, by DP over subsets of the atoms."""
    k = len(p.atoms)
    full = (1 << k) - 1
    if k == 1:
        a = p.atoms[0]
        return SearchResult(a.plan, a.plan.rate * p.dist[a.est][p.target] if p.target is not None else 0.0, 0)
    deliver: dict[int, list[float]] = {1 << i: p.leaf(i) for i in range(k)}
    place: dict[int, list[float]] = {}
    for mask in range(1, full + 1):
        if mask & (mask - 1) == 0:
            continue
        best = [INF] * len(p.cands)
        for sub in _splits(mask):
            best = [min(x, u + v) for x, u, v in zip(best, deliver[sub], deliver[mask ^ sub], strict=True)]
        place[mask] = best
        if mask != full:
            deliver[mask] = p.deliver(mask, best)
    cost, y, ro = p.final(full, place[full])
    root = _reuse_node(p, full, ro) if ro is not None else _dp_place(p, deliver, place, full, y)
    return SearchResult(root, cost, lemma1(k, len(p.cands)))


def _dp_place(p: Problem, deliver: dict[int, list[float]], place: dict[int, list[float]], mask: int,
              y: int) -> PlanNode:
    target = place[mask][y]
    for a in _splits(mask):
        if deliver[a][y] + deliver[mask ^ a][y] <= target + 1e-9 * max(1.0, abs(target)):
            return _join(p, mask, y, _dp_deliver(p, deliver, place, a, y),
                         _dp_deliver(p, deliver, place, mask ^ a, y))
    raise AssertionError("subset DP reconstruction lost its split")


def _dp_deliver(p: Problem, deliver: dict[int, list[float]], place: dict[int, list[float]], mask: int,
                x: int) -> PlanNode:
    if mask & (mask - 1) == 0:
        return p.atoms[mask.bit_length() - 1].plan
    r = p.mask_rate(mask)
    want = deliver[mask][x]
    for ro in p.reuses(mask):
        if r * p.dist[ro.est][p.cands[x]] <= want + 1e-9 * max(1.0, abs(want)):
            return _reuse_node(p, mask, ro)
    y = min(range(len(p.cands)), key=lambda y: place[mask][y] + r * p.dc[y][x])
    return _dp_place(p, deliver, place, mask, y)


# --------------------------------------------------------------------------- trees and tree DP

def trees(mask: int) -> Iterator[Tree]:
    """Every distinct unordered binary tree over the atoms in ``mask`` ((2K−3)!! of them)."""
    if mask & (mask - 1) == 0:
        yield mask.bit_length() - 1
        return
    for a in _splits(mask):
        for left in trees(a):
            for right in trees(mask ^ a):
                yield (left, right)


def tree_mask(t: Tree) -> int:
    return 1 << t if isinstance(t, int) else tree_mask(t[0]) | tree_mask(t[1])


class TreeDP:
    """Tree DP placement for fixed trees of one problem, memoised per subtree across trees."""

    def __init__(self, p: Problem) -> None:
        self.p = p
        self.memo: dict[Tree, tuple[list[float], list[float]]] = {}

    def vectors(self, t: Tree) -> tuple[list[float], list[float]]:
        """(place, deliver) vectors of subtree ``t`` (place is empty for a leaf)."""
        got = self.memo.get(t)
        if got is not None:
            return got
        p = self.p
        if isinstance(t, int):
            got = ([], p.leaf(t))
        else:
            dl, dr = self.vectors(t[0])[1], self.vectors(t[1])[1]
            place = [u + v for u, v in zip(dl, dr, strict=True)]
            got = (place, p.deliver(tree_mask(t), place))
        self.memo[t] = got
        return got

    def best(self, t: Tree) -> tuple[float, PlanNode]:
        """The optimal placement of tree ``t``: (estimated cost, placed root)."""
        p = self.p
        if isinstance(t, int):
            a = p.atoms[t]
            return (a.plan.rate * p.dist[a.est][p.target] if p.target is not None else 0.0), a.plan
        cost, y, ro = p.final(tree_mask(t), self.vectors(t)[0])
        return cost, (_reuse_node(p, tree_mask(t), ro) if ro is not None else self._place(t, y))

    def _place(self, t: Tree, y: int) -> PlanNode:
        assert not isinstance(t, int)
        return _join(self.p, tree_mask(t), y, self._deliver(t[0], y), self._deliver(t[1], y))

    def _deliver(self, t: Tree, x: int) -> PlanNode:
        p = self.p
        if isinstance(t, int):
            return p.atoms[t].plan
        mask = tree_mask(t)
        r = p.mask_rate(mask)
        place, deliver = self.vectors(t)
        for ro in p.reuses(mask):
            if r * p.dist[ro.est][p.cands[x]] <= deliver[x] + 1e-9 * max(1.0, abs(deliver[x])):
                return _reuse_node(p, mask, ro)
        y = min(range(len(p.cands)), key=lambda y: place[y] + r * p.dc[y][x])
        return self._place(t, y)


def place_tree(p: Problem, t: Tree) -> tuple[float, PlanNode]:
    """Optimal placement of one fixed tree (tree DP)."""
    return TreeDP(p).best(t)


def exhaustive_search(p: Problem) -> SearchResult:
    """Every distinct tree, each placed optimally by tree DP; the best overall."""
    dp = TreeDP(p)
    full = (1 << len(p.atoms)) - 1
    best: Optional[tuple[float, PlanNode]] = None
    for t in trees(full):
        cost, root = dp.best(t)
        if best is None or cost < best[0] - 1e-9 * max(1.0, abs(cost)):
            best = (cost, root)
    assert best is not None
    return SearchResult(best[1], best[0], lemma1(len(p.atoms), len(p.cands)))


def brute_force_tree(p: Problem, t: Tree) -> float:
    """Cost of the best placement of fixed tree ``t`` by trying every assignment of a candidate (or of
    an advertised stream, where one matches) to every join: (m + R)^(K−1) combinations.  For tests."""
    internal: list[Tree] = []

    def collect(s: Tree) -> None:
        if not isinstance(s, int):
            collect(s[0])
            collect(s[1])
            internal.append(s)

    collect(t)
    options = [[("at", c) for c in p.cands] + [("reuse", ro.est) for ro in p.reuses(tree_mask(s))]
               for s in internal]
    best = INF
    for choice in itertools.product(*options):
        where = dict(zip(internal, choice, strict=True))
        best = min(best, _bf_cost(p, t, where, p.target))
    return best


def _bf_cost(p: Problem, t: Tree, where: dict[Tree, tuple[str, int]], dest: Optional[int]) -> float:
    if isinstance(t, int):
        a = p.atoms[t]
        return a.plan.rate * p.dist[a.est][dest] if dest is not None else 0.0
    kind, node = where[t]
    out = p.mask_rate(tree_mask(t)) * p.dist[node][dest] if dest is not None else 0.0
    if kind == "reuse":
        return out
    return out + _bf_cost(p, t[0], where, node) + _bf_cost(p, t[1], where, node)
