"""The planners: integrated (exhaustive / optimal), hierarchical (Top-Down, Bottom-Up, NPC) and the
plan-then-deploy baselines, in one small registry (:data:`PLANNERS`).

Every planner takes a :class:`Context` (topology, the query bound to its catalogue, the existing
deployments D, the hierarchy for the hierarchical ones) and returns a placed :class:`~.cost.OperatorPlan`
whose ``examined`` counts the (merge order × placement) combinations its searches covered, in
Lemma 1's units: a search over k inputs on m candidate nodes counts ``lemma1(k, m)``.

[PAPER] names Top-Down, Bottom-Up and NPC and says what each is for; their bodies are not in the
seed text.  What is here is **our reconstruction** (docs/multiquery.md, "Reconstruction"):

- **Top-Down**: at the top cluster, solve the whole query exactly among the cluster's members (each
  a coordinator standing for a child cluster), inputs and sink snapped to the member holding them;
  then, bottom-up over the resulting tree, each maximal group of joins assigned to one member is a
  sub-query for that child cluster: its inputs are the group's incoming streams (already refined
  sub-plans at their real nodes), its output goes to the parent group's coordinator (or the sink);
  the child re-plans order and placement among *its* members, recursively, down to level 1 where
  members are physical nodes.
- **Bottom-Up**: level by level from 1, each cluster joins the query inputs it holds that are
  connected in the join graph (exactly, among its members, the estimate including the shipping of the
  result towards the sink); the joined stream goes up as one input; the top cluster joins what is left and
  delivers to the sink.  Joins above level 1 sit on coordinators (no refinement: smaller search).
- **NPC** (net present cost): Bottom-Up, but a cluster commits its local join only if
  ``C_now ≤ γ · (1 − p_reuse) · C_later`` -- C_now: join here and ship the result to the parent
  coordinator; C_later: ship the inputs there unjoined; p_reuse: the share of the advertised streams
  this query could reuse that touch these inputs but reach beyond them (only a later, wider search can
  use them).  Otherwise the inputs go up unjoined and the decision is deferred.  At the top, what is
  left is planned Top-Down (refined down the hierarchy) rather than on coordinators: the hybrid commits
  cheap local joins early like Bottom-Up and plans the rest like Top-Down.  γ (``npc_discount``,
  default 1) discounts later costs.
- **Plan-then-deploy**: the join tree that minimises the sum of intermediate rates, chosen without the
  network, then placed optimally (tree DP; ``ptd-optimal`` with no reuse as in [PAPER]'s baselines,
  ``ptd-optimal+reuse`` reusing a subtree of that fixed tree when one is advertised) or by
  ``ptd-relaxation``: spring relaxation in a latency space (Pietzuch et al. 2006, which [PAPER] cites as
  [9]): nodes embedded by stress majorisation, each join at the rate-weighted mean of its neighbours,
  then snapped to the nearest node.

Why a registry here and not in :mod:`joinlib.planner.registry`: that table resolves *single-query*
Tran & Lee plans (join sequences per head stream, with semijoin algorithms) for the runtime; these
planners return operator trees with node placements and read the deployments of other queries --
another input, another output, and nothing in the runtime executes them yet.
"""
from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Optional

from joinlib.multiquery.cost import Deployments, OperatorPlan, PlanNode
from joinlib.multiquery.errors import MultiQueryError
from joinlib.multiquery.hierarchy import Cluster, Hierarchy
from joinlib.multiquery.search import (
    Atom,
    Problem,
    Reuse,
    SearchResult,
    Tree,
    TreeDP,
    exhaustive_search,
    lemma1,
    solve,
    tree_mask,
)
from joinlib.multiquery.streams import Bound
from joinlib.multiquery.topology import PhysicalNetwork

Snap = Callable[[int], int]


@dataclass(frozen=True)
class Context:
    """What a planner sees: the network, the query, the existing deployments D, the hierarchy."""

    top: PhysicalNetwork
    bound: Bound
    deployed: Deployments = field(default_factory=Deployments, compare=False)
    hierarchy: Optional[Hierarchy] = None
    npc_discount: float = 1.0


def _identity(node: int) -> int:
    return node


def base_plans(ctx: Context) -> list[PlanNode]:
    """The query's sources, at their nodes, with selections applied there."""
    b = ctx.bound
    return [PlanNode("source", frozenset((s,)), b.source_rate(s), b.source_node(s)) for s in b.query.streams]


def reuse_fn(ctx: Context, snap: Snap = _identity) -> Callable[[frozenset[str]], list[Reuse]]:
    """The advertised streams the query may reuse for a set of base streams (estimate positions snapped)."""
    def find(streams: frozenset[str]) -> list[Reuse]:
        return [Reuse(streams, a.node, snap(a.node), a.rate) for a in ctx.deployed.matches(ctx.bound, streams)]
    return find


def _problem(ctx: Context, plans: list[PlanNode], cands: list[int], target: Optional[int], snap: Snap = _identity,
             reuse: bool = True) -> Problem:
    atoms = [Atom(p, snap(p.node)) for p in plans]
    finder = reuse_fn(ctx, snap) if reuse else (lambda streams: [])
    return Problem(atoms, cands, None if target is None else snap(target), ctx.top.dist, ctx.bound.rate, finder)


def _plan(ctx: Context, name: str, res: SearchResult, examined: Optional[int] = None) -> OperatorPlan:
    return OperatorPlan(ctx.bound.query.name, res.root, ctx.bound.sink, name,
                res.examined if examined is None else examined, res.estimate)


def _need(ctx: Context) -> Hierarchy:
    if ctx.hierarchy is None:
        raise MultiQueryError("this planner needs a hierarchy (build_hierarchy(topology, maxcs))")
    return ctx.hierarchy


# --------------------------------------------------------------------------- integrated, exact

def plan_optimal(ctx: Context) -> OperatorPlan:
    """The integrated optimum with reuse (subset DP over all N nodes; equal to exhaustive)."""
    return _plan(ctx, "optimal", solve(_problem(ctx, base_plans(ctx), list(range(ctx.top.n)), ctx.bound.sink)))


def plan_exhaustive(ctx: Context) -> OperatorPlan:
    """All merge orders × placements: every tree, each placed by tree DP."""
    return _plan(ctx, "exhaustive",
                 exhaustive_search(_problem(ctx, base_plans(ctx), list(range(ctx.top.n)), ctx.bound.sink)))


def plan_optimal_noreuse(ctx: Context) -> OperatorPlan:
    """The integrated optimum ignoring D (order and placement together, no reuse): an ablation."""
    return _plan(ctx, "optimal-noreuse", solve(_problem(ctx, base_plans(ctx), list(range(ctx.top.n)),
                                                        ctx.bound.sink, reuse=False)))


# --------------------------------------------------------------------------- Top-Down [RECON]

def plan_top_down(ctx: Context) -> OperatorPlan:
    h = _need(ctx)
    count = [0]
    root = _td_solve(ctx, h.root, base_plans(ctx), ctx.bound.sink, count)
    return OperatorPlan(ctx.bound.query.name, root, ctx.bound.sink, "top-down", count[0])


def _td_solve(ctx: Context, cluster: Cluster, plans: list[PlanNode], target: int, count: list[int]) -> PlanNode:
    if len(plans) == 1:
        return plans[0]
    res = solve(_problem(ctx, plans, list(cluster.members), target, cluster.snap))
    count[0] += res.examined
    if not cluster.children:
        return res.root
    opaque = {id(p) for p in plans}  # inputs are already planned: never re-planned here
    return _td_refine(ctx, cluster, res.root, target, opaque, count)


def _td_refine(ctx: Context, cluster: Cluster, v: PlanNode, target: int, opaque: set[int],
               count: list[int]) -> PlanNode:
    """Re-plan the group of joins around ``v`` (same member) inside that member's child cluster."""
    if v.kind != "join" or id(v) in opaque:
        return v
    inputs: list[PlanNode] = []

    def collect(u: PlanNode) -> None:
        for c in u.children():
            if c.kind == "join" and c.node == v.node and id(c) not in opaque:
                collect(c)
            else:
                inputs.append(_td_refine(ctx, cluster, c, v.node, opaque, count))

    collect(v)
    child = cluster.children[cluster.members.index(v.node)]
    return _td_solve(ctx, child, inputs, target, count)


# --------------------------------------------------------------------------- Bottom-Up and NPC [RECON]

def plan_bottom_up(ctx: Context) -> OperatorPlan:
    return _bottom_up(ctx, npc=False)


def plan_npc(ctx: Context) -> OperatorPlan:
    return _bottom_up(ctx, npc=True)


def _bottom_up(ctx: Context, npc: bool) -> OperatorPlan:
    h = _need(ctx)
    count = [0]
    plans = base_plans(ctx)
    reusable = _reusable(ctx) if npc else []
    for lv, clusters in enumerate(h.levels[:-1]):
        parent = {v: c.coordinator for c in h.levels[lv + 1] for v in c.leaves}
        nxt: list[PlanNode] = []
        for c in clusters:
            local = [p for p in plans if p.node in c.leaves]
            for comp in _components(ctx.bound, local):
                nxt += _bu_local(ctx, c, comp, parent[c.coordinator], reusable if npc else None, count)
        plans = nxt
    if npc:  # what was deferred is planned top-down: refined level by level, not left on coordinators
        root = _td_solve(ctx, h.root, plans, ctx.bound.sink, count)
        return OperatorPlan(ctx.bound.query.name, root, ctx.bound.sink, "npc", count[0])
    res = solve(_problem(ctx, plans, list(h.root.members), ctx.bound.sink, h.root.snap))
    count[0] += res.examined
    return OperatorPlan(ctx.bound.query.name, res.root, ctx.bound.sink, "bottom-up", count[0])


def _bu_local(ctx: Context, c: Cluster, comp: list[PlanNode], up: int,
              reusable: Optional[list[frozenset[str]]], count: list[int]) -> list[PlanNode]:
    """Join ``comp`` inside cluster ``c`` (Bottom-Up), or decide whether to (NPC)."""
    if len(comp) == 1:
        return comp
    cands = list(c.members)
    if reusable is None:
        res = solve(_problem(ctx, comp, cands, ctx.bound.sink, c.snap))  # aimed at the sink, where it must go
        count[0] += res.examined
        return [res.root]
    res = solve(_problem(ctx, comp, cands, up, c.snap))
    count[0] += res.examined
    later = sum(p.rate * ctx.top.dist[c.snap(p.node)][up] for p in comp)
    streams = frozenset().union(*(p.streams for p in comp))
    touching = [t for t in reusable if t & streams]
    p_reuse = sum(1 for t in touching if not t <= streams) / len(touching) if touching else 0.0
    if res.estimate <= ctx.npc_discount * (1.0 - p_reuse) * later:
        return [res.root]
    return comp


def _reusable(ctx: Context) -> list[frozenset[str]]:
    """Sets of the query's streams (two or more) with a usable advertisement in D."""
    streams = ctx.bound.query.streams
    out = []
    for mask in range(1, 1 << len(streams)):
        if mask & (mask - 1):
            t = frozenset(s for i, s in enumerate(streams) if mask >> i & 1)
            if ctx.deployed.matches(ctx.bound, t):
                out.append(t)
    return out


def _components(bound: Bound, plans: list[PlanNode]) -> list[list[PlanNode]]:
    """Groups of ``plans`` connected by the query's join predicates (a cluster never joins unrelated inputs)."""
    groups: list[list[PlanNode]] = []
    for p in plans:
        linked = [g for g in groups if any(bound.connected(p.streams, q.streams) for q in g)]
        merged = [p] + [q for g in linked for q in g]
        groups = [g for g in groups if g not in linked] + [merged]
    return groups


# --------------------------------------------------------------------------- plan, then deploy

def rate_order(ctx: Context) -> Tree:
    """The network-oblivious join tree: least Σ of intermediate rates (DP over subsets; root excluded)."""
    k = len(ctx.bound.query.streams)
    p = _problem(ctx, base_plans(ctx), [0], None, reuse=False)
    best: dict[int, tuple[float, Tree]] = {1 << i: (0.0, i) for i in range(k)}
    full = (1 << k) - 1
    for mask in range(1, full + 1):
        if mask & (mask - 1) == 0:
            continue
        low = mask & -mask
        cands = []
        sub = (mask ^ low)
        while True:
            a = sub | low
            if a != mask:
                cands.append((best[a][0] + best[mask ^ a][0], (best[a][1], best[mask ^ a][1])))
            if sub == 0:
                break
            sub = (sub - 1) & (mask ^ low)
        c, t = min(cands, key=lambda x: x[0])
        best[mask] = (c + (p.mask_rate(mask) if mask != full else 0.0), t)
    return best[full][1]


def _ptd(ctx: Context, reuse: bool, name: str) -> OperatorPlan:
    prob = _problem(ctx, base_plans(ctx), list(range(ctx.top.n)), ctx.bound.sink, reuse=reuse)
    cost, root = TreeDP(prob).best(rate_order(ctx))
    k = len(prob.atoms)
    return OperatorPlan(ctx.bound.query.name, root, ctx.bound.sink, name, ctx.top.n ** (k - 1), cost)


def plan_ptd_optimal(ctx: Context) -> OperatorPlan:
    return _ptd(ctx, False, "ptd-optimal")


def plan_ptd_optimal_reuse(ctx: Context) -> OperatorPlan:
    return _ptd(ctx, True, "ptd-optimal+reuse")


def plan_ptd_relaxation(ctx: Context) -> OperatorPlan:
    """Fixed rate order, then spring relaxation in an embedded latency space, snapped to nodes."""
    top = ctx.top
    coords = embed(top)
    prob = _problem(ctx, base_plans(ctx), [0], None, reuse=False)
    tree = rate_order(ctx)
    joins: list[Tree] = []

    def collect(t: Tree) -> None:
        if not isinstance(t, int):
            collect(t[0])
            collect(t[1])
            joins.append(t)

    collect(tree)
    pos = _relax(prob, tree, joins, coords, ctx.bound.sink)
    where = {t: min(range(top.n), key=lambda v: _sq(coords[v], pos[t])) for t in joins}

    def build(t: Tree) -> PlanNode:
        if isinstance(t, int):
            return prob.atoms[t].plan
        m = tree_mask(t)
        return PlanNode("join", prob.union(m), prob.mask_rate(m), where[t], build(t[0]), build(t[1]))

    root = build(tree)
    return OperatorPlan(ctx.bound.query.name, root, ctx.bound.sink, "ptd-relaxation", len(joins) * top.n)


def _sq(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    return sum((x - y) ** 2 for x, y in zip(a, b, strict=True))


def _relax(prob: Problem, tree: Tree, joins: list[Tree], coords: list[tuple[float, ...]],
           sink: int, sweeps: int = 60) -> dict[Tree, tuple[float, ...]]:
    """Each join moves to the rate-weighted mean of its neighbours (children, parent or sink): the
    minimum of the springs' energy Σ rate·|x_u − x_v|²; sources and the sink are pinned."""
    parent: dict[Tree, Tree] = {}
    for t in joins:
        assert not isinstance(t, int)
        parent[t[0]] = t
        parent[t[1]] = t
    dim = len(coords[0])
    pos: dict[Tree, tuple[float, ...]] = {t: coords[sink] for t in joins}
    for i in range(len(prob.atoms)):
        pos[i] = coords[prob.atoms[i].plan.node]
    for _ in range(sweeps):
        for t in joins:
            assert not isinstance(t, int)
            nbrs = [(pos[t[0]], prob.mask_rate(tree_mask(t[0]))), (pos[t[1]], prob.mask_rate(tree_mask(t[1])))]
            up = pos[parent[t]] if t in parent else coords[sink]
            nbrs.append((up, prob.mask_rate(tree_mask(t))))
            w = sum(r for _, r in nbrs) or 1.0
            pos[t] = tuple(sum(p[d] * r for p, r in nbrs) / w for d in range(dim))
    return pos


@lru_cache(maxsize=8)
def embed(top: PhysicalNetwork, iterations: int = 80, seed: int = 1) -> list[tuple[float, ...]]:
    """3-D coordinates whose distances approximate the traversal costs (SMACOF stress majorisation)."""
    n = top.n
    rng = random.Random(seed)
    xs = [rng.uniform(-50, 50) for _ in range(n)]
    ys = [rng.uniform(-50, 50) for _ in range(n)]
    zs = [rng.uniform(-50, 50) for _ in range(n)]
    for _ in range(iterations):
        nx, ny, nz = [], [], []
        for i in range(n):
            xi, yi, zi, di = xs[i], ys[i], zs[i], top.dist[i]
            fs = [di[j] / (((xi - xs[j]) ** 2 + (yi - ys[j]) ** 2 + (zi - zs[j]) ** 2) ** 0.5 or 1e-9)
                  if j != i else 0.0 for j in range(n)]
            f_sum = sum(fs)
            nx.append((sum(xs) - xi + f_sum * xi - sum(f * v for f, v in zip(fs, xs, strict=True))) / n)
            ny.append((sum(ys) - yi + f_sum * yi - sum(f * v for f, v in zip(fs, ys, strict=True))) / n)
            nz.append((sum(zs) - zi + f_sum * zi - sum(f * v for f, v in zip(fs, zs, strict=True))) / n)
        xs, ys, zs = nx, ny, nz
    return list(zip(xs, ys, zs, strict=True))


# --------------------------------------------------------------------------- registry

@dataclass(frozen=True)
class PlannerSpec:
    """A planner by name: the function, whether it needs the hierarchy (``maxcs``), one line of help."""

    name: str
    run: Callable[[Context], OperatorPlan]
    hierarchical: bool
    help: str


PLANNERS: dict[str, PlannerSpec] = {s.name: s for s in (
    PlannerSpec("exhaustive", plan_exhaustive, False, "every tree x tree-DP placement, with reuse (the optimum)"),
    PlannerSpec("optimal", plan_optimal, False, "the same optimum by subset DP (faster)"),
    PlannerSpec("optimal-noreuse", plan_optimal_noreuse, False, "integrated order + placement, ignoring D"),
    PlannerSpec("top-down", plan_top_down, True, "[RECON] split down the hierarchy, exact at level 1"),
    PlannerSpec("bottom-up", plan_bottom_up, True, "[RECON] join local inputs level by level going up"),
    PlannerSpec("npc", plan_npc, True, "[RECON] bottom-up commits where cheaper than deferring, the rest top-down"),
    PlannerSpec("ptd-optimal", plan_ptd_optimal, False, "plan then deploy: rate order, optimal placement"),
    PlannerSpec("ptd-optimal+reuse", plan_ptd_optimal_reuse, False,
                "plan then deploy: rate order, optimal placement, reuse where the order allows"),
    PlannerSpec("ptd-relaxation", plan_ptd_relaxation, False, "plan then deploy: rate order, relaxation placement"),
)}


def get_planner(name: str) -> PlannerSpec:
    """The planner called ``name`` (:class:`MultiQueryError` listing the names otherwise)."""
    try:
        return PLANNERS[name]
    except KeyError:
        raise MultiQueryError(f"unknown multi-query planner {name!r} (choose from {', '.join(PLANNERS)})") from None


def search_fraction(plan: OperatorPlan, k: int, n: int) -> float:
    """``plan.examined`` over Lemma 1's count for the query (K streams, N nodes)."""
    return plan.examined / lemma1(k, n)
