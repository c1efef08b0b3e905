"""Hierarchical network clusters ([PAPER] Sect. 3.1.1, Fig. 4).

Level 1 groups the physical nodes by traversal cost into clusters of at most ``maxcs`` nodes; one
node of each cluster, its *coordinator*, is promoted to level 2, where the coordinators are clustered
again on the *average* traversal cost between the clusters they stand for, still at most ``maxcs``
per cluster; and so on until one cluster is left.  The planners search inside one cluster at a time,
which is what keeps their search small; ``maxcs`` trades search size against suboptimality.

What the paper leaves open and is chosen here [RECON]:

- the clustering: agglomerative, average linkage, merging the closest pair of groups whose sizes
  add up to at most ``maxcs`` until no pair fits (deterministic: ties by lowest member);
- the coordinator: the medoid of the cluster (least summed traversal cost to the other members),
  one of the "nodes that qualify" -- with a metric cost it keeps every node within ``d_i`` of its
  coordinator, which is what the estimate bound below needs.

Estimated cost at level l between two nodes = traversal cost between their level-l
representatives (:meth:`Hierarchy.rep`).  With shortest-path (metric) costs the triangle inequality
gives |actual − estimate| ≤ 2·Σ_{i<l} d_i, d_i the largest member-to-coordinator cost at level i.
This is our bound, checked by a property test; the paper's Theorem 1 is truncated in the seed text.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from joinlib.multiquery.errors import TopologyError
from joinlib.multiquery.topology import PhysicalNetwork


@dataclass(frozen=True)
class Cluster:
    """One cluster at ``level``: ``members`` are physical node indices -- the nodes themselves at
    level 1, the coordinators of ``children`` (same order) above; ``leaves`` every physical node below."""

    level: int
    members: tuple[int, ...]
    children: tuple[Cluster, ...]
    coordinator: int
    leaves: frozenset[int]

    def member_of(self, node: int) -> int:
        """Position in ``members`` of the member whose subtree holds physical ``node`` (-1: outside)."""
        if node not in self.leaves:
            return -1
        if not self.children:
            return self.members.index(node)
        return next(i for i, c in enumerate(self.children) if node in c.leaves)

    def snap(self, node: int) -> int:
        """The estimate position of ``node`` seen from this cluster: its member's coordinator if it is
        inside, the node itself if outside (an external input or sink keeps its physical node)."""
        i = self.member_of(node)
        return node if i < 0 else self.members[i]


@dataclass(frozen=True)
class Hierarchy:
    """The clusters of every level; ``levels[0]`` is level 1, ``root`` the single top cluster."""

    maxcs: int
    levels: tuple[tuple[Cluster, ...], ...]

    @property
    def root(self) -> Cluster:
        return self.levels[-1][0]

    @cached_property
    def _leaf_cluster(self) -> dict[int, Cluster]:
        return {v: c for c in self.levels[0] for v in c.leaves}

    def rep(self, node: int, level: int) -> int:
        """The representative of physical ``node`` at ``level``: itself at 1, at l the coordinator of its
        level-(l-1) cluster."""
        r = node
        for lv in self.levels[:level - 1]:
            r = next(c.coordinator for c in lv if node in c.leaves)
        return r

    def radius(self, top: PhysicalNetwork, level: int) -> float:
        """d_level: the largest traversal cost between a member of a level cluster and its coordinator."""
        return max((top.dist[m][c.coordinator] for c in self.levels[level - 1] for m in c.members), default=0.0)


def build_hierarchy(top: PhysicalNetwork, maxcs: int) -> Hierarchy:
    """Cluster ``top`` level by level into clusters of at most ``maxcs`` members."""
    if maxcs < 2:
        raise TopologyError(f"maxcs {maxcs}: a cluster needs room for at least 2 nodes")
    items: list[Cluster] = [Cluster(0, (v,), (), v, frozenset((v,))) for v in range(top.n)]
    levels: list[tuple[Cluster, ...]] = []
    level = 1
    while True:
        groups = _agglomerate(top, items, maxcs, average=level > 1)
        clusters = tuple(_make(top, level, [items[i] for i in g]) for g in groups)
        levels.append(clusters)
        if len(clusters) == 1:
            return Hierarchy(maxcs, tuple(levels))
        items = list(clusters)
        level += 1


def _make(top: PhysicalNetwork, level: int, items: list[Cluster]) -> Cluster:
    members = tuple(it.coordinator for it in items)
    coordinator = min(members, key=lambda m: (sum(top.dist[m][o] for o in members), m))
    children = tuple(items) if level > 1 else ()
    return Cluster(level, members, children, coordinator, frozenset().union(*(it.leaves for it in items)))


def _item_dist(top: PhysicalNetwork, a: Cluster, b: Cluster, average: bool) -> float:
    if not average:
        return top.dist[a.coordinator][b.coordinator]
    return sum(top.dist[u][v] for u in a.leaves for v in b.leaves) / (len(a.leaves) * len(b.leaves))


def _agglomerate(top: PhysicalNetwork, items: list[Cluster], maxcs: int, average: bool) -> list[list[int]]:
    """Average-linkage agglomeration of ``items`` into groups of at most ``maxcs`` (lists of item indices)."""
    n = len(items)
    base = [[_item_dist(top, items[i], items[j], average) for j in range(n)] for i in range(n)]
    groups: dict[int, list[int]] = {i: [i] for i in range(n)}
    link = {(i, j): base[i][j] for i in range(n) for j in range(i + 1, n)}
    while True:
        best = min(((d, k) for k, d in link.items() if len(groups[k[0]]) + len(groups[k[1]]) <= maxcs),
                   default=None)
        if best is None:
            return sorted(groups.values())
        _, (a, b) = best
        groups[a] = sorted(groups[a] + groups.pop(b))
        for k in [k for k in link if b in k or a in k]:
            del link[k]
        for c in groups:
            if c != a:
                link[(min(a, c), max(a, c))] = _group_dist(base, groups[a], groups[c])


def _group_dist(base: list[list[float]], ga: list[int], gb: list[int]) -> float:
    return sum(base[i][j] for i in ga for j in gb) / (len(ga) * len(gb))
