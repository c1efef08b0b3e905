"""The experiments' baselines: Optimal (exhaustive) and Simple (seed 002, Sect. 4).

:func:`optimal` is a dynamic programme over the connected subsets of the streams and the nodes
(processing-only nodes included): best[G][n] = the least bytes/s to have G's result at node n, either
joined there from two connected, joinable parts (each brought to n at its own best) or joined
elsewhere and shipped once. It covers every bushy join tree with every placement, so it is a lower
bound for STREAMJOINOPT under the same rate model. Cost O(3^n · |nodes|): fine up to ~14 streams.

:func:`simple` ships every stream to the node of the fastest one; :func:`central` to a given node.
"""
from __future__ import annotations

from collections.abc import Iterator

from joinlib.errors import PlanError
from joinlib.pmjoin.rates import RateModel
from joinlib.pmjoin.tree import Leaf, MJoin, Tree, mjoin_node

MAX_STREAMS = 16


def _bits(mask: int) -> Iterator[int]:
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


def _members(mask: int) -> frozenset[int]:
    return frozenset(_bits(mask))


class _Search:
    """best[mask][n] with the choices to rebuild the tree."""

    def __init__(self, model: RateModel) -> None:
        self.model = model
        self.nodes = model.nodes
        self.best: dict[int, list[float]] = {}
        self.joined_at: dict[int, list[int]] = {}  # node index the result was joined at, per target node
        self.split: dict[int, list[int]] = {}  # per join node: the part holding the lowest stream
        self.joined: dict[int, list[float]] = {}

    def _connected_split(self, mask: int) -> Iterator[int]:
        low = mask & -mask
        rest = mask ^ low
        sub = rest
        while True:  # every part A containing the lowest stream, A != mask
            a = sub | low
            b = mask ^ a
            if b and a in self.best and b in self.best and \
                    self.model.joinable(_members(a), _members(b)):
                yield a
            if sub == 0:
                break
            sub = (sub - 1) & rest

    def singleton(self, i: int) -> None:
        m, home = 1 << i, self.model.node_of(i)
        cost = self.model.cost(frozenset({i}))
        self.best[m] = [0.0 if n == home else cost for n in self.nodes]
        self.joined_at[m] = [self.nodes.index(home)] * len(self.nodes)

    def combine(self, mask: int) -> None:
        k = len(self.nodes)
        joined, split = [float("inf")] * k, [0] * k
        for a in self._connected_split(mask):
            ba, bb = self.best[a], self.best[mask ^ a]
            for n in range(k):
                c = ba[n] + bb[n]
                if c < joined[n]:
                    joined[n], split[n] = c, a
        if joined[0] == float("inf"):
            return  # not connected
        ship = self.model.cost(_members(mask))
        src = min(range(k), key=lambda n: joined[n])
        self.joined[mask], self.split[mask] = joined, split
        self.best[mask] = [min(joined[n], joined[src] + ship) for n in range(k)]
        self.joined_at[mask] = [n if joined[n] <= joined[src] + ship else src for n in range(k)]

    def tree(self, mask: int, target: int) -> Tree:
        if mask & (mask - 1) == 0:
            i = mask.bit_length() - 1
            return Leaf(self.model.streams[i].name, self.model.node_of(i))
        at = self.joined_at[mask][target]
        a = self.split[mask][at]
        parts = [self.tree(a, at), self.tree(mask ^ a, at)]
        return mjoin_node(parts, self.nodes[at])


def optimal(model: RateModel) -> tuple[float, Tree]:
    """The least-cost plan over all bushy trees and placements: (bytes/s, tree)."""
    n = len(model.streams)
    if n > MAX_STREAMS:
        raise PlanError(f"the exhaustive search handles at most {MAX_STREAMS} streams, not {n}; use stream_join_opt")
    s = _Search(model)
    for i in range(n):
        s.singleton(i)
    full = (1 << n) - 1
    for mask in sorted(range(1, full + 1), key=lambda m: (bin(m).count("1"), m)):
        if mask & (mask - 1):
            s.combine(mask)
    if n == 1:
        return 0.0, s.tree(1, 0)
    if full not in s.joined:
        raise PlanError("the join graph is not connected: a cross product is not a join")
    at = min(range(len(s.nodes)), key=lambda k: s.joined[full][k])
    return s.joined[full][at], s.tree(full, at)


def central_tree(model: RateModel, node: str) -> Tree:
    """Every stream shipped to ``node`` (a site or a processing-only node), one MJoin there."""
    if node not in model.nodes:
        raise PlanError(f"unknown node {node!r} (nodes: {', '.join(model.nodes)})")
    leaves: list[Tree] = [Leaf(s.name, s.node) for s in model.streams]
    if len(leaves) == 1:
        return leaves[0]
    out = mjoin_node(leaves, node)
    return out if isinstance(out, MJoin) else leaves[0]


def simple(model: RateModel) -> Tree:
    """The paper's Simple: everything to the node of the fastest stream (ties: the first)."""
    fastest = max(range(len(model.streams)), key=lambda i: (model.cost(frozenset({i})), -i))
    return central_tree(model, model.node_of(fastest))
