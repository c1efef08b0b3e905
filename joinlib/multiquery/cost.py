"""Plans, deployments, stream advertisements and network usage.

Network usage ([PAPER] Sect. 2.2) = Σ over physical links l of λ(l) · latency(l), λ(l) the data rate
on l.  Every stream a plan ships from node a to node b follows the lowest-latency path, so it adds
rate · d(a, b); co-located operators cost 0 and there is no multicast: each consumer pays its own
transfer (digest pitfalls 1 and 3).

- :meth:`OperatorPlan.cost` is a query's *marginal* cost given the existing deployments D: reused streams
  cost only their transfer from the advertised node (their producing operators are already paid for).
- :class:`Deployments` is D: every deployed operator, every transfer, and the advertisements;
  :meth:`Deployments.total_cost` sums the transfers of all queries (shared operators once) and
  :meth:`Deployments.link_usage` the same per physical link (equal totals: a test checks it).
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal, Optional

from joinlib.multiquery.streams import Bound, Signature
from joinlib.multiquery.topology import PhysicalNetwork

Kind = Literal["source", "join", "reuse"]


@dataclass(frozen=True)
class PlanNode:
    """A node of an operator tree: a base ``source`` at its node, a ``join`` placed at ``node``, or a
    ``reuse`` of an advertised stream produced at ``node``.  ``streams`` is the set of base streams."""

    kind: Kind
    streams: frozenset[str]
    rate: float
    node: int
    left: Optional[PlanNode] = None
    right: Optional[PlanNode] = None

    def children(self) -> tuple[PlanNode, ...]:
        return tuple(c for c in (self.left, self.right) if c is not None)

    def walk(self) -> Iterator[PlanNode]:
        """Every node, children before parents."""
        for c in self.children():
            yield from c.walk()
        yield self

    def edges(self) -> Iterator[tuple[PlanNode, PlanNode]]:
        """(child, parent) pairs: the streams shipped inside the tree."""
        for p in self.walk():
            for c in p.children():
                yield c, p

    def text(self, top: PhysicalNetwork) -> str:
        """``((S1 ⋈ S2)@n3 ⋈ S4)@n7``-style rendering, reuse marked ``reuse(...)``."""
        if self.kind == "source":
            return next(iter(self.streams))
        if self.kind == "reuse":
            return f"reuse({'⋈'.join(sorted(self.streams))})@{top.nodes[self.node]}"
        assert self.left is not None and self.right is not None
        return f"({self.left.text(top)} ⋈ {self.right.text(top)})@{top.nodes[self.node]}"


@dataclass(frozen=True)
class OperatorPlan:
    """A query's operator tree with its placement, the planner that made it and how many
    (merge order × placement) combinations its searches covered (Lemma 1 units).

    Not :class:`joinlib.plan.logical.Plan` (a join sequence per head stream, Definition 1): one tree of
    binary join operators, each placed on a node, that later queries may reuse."""

    query: str
    root: PlanNode
    sink: int
    planner: str = ""
    examined: int = 0
    estimate: float = 0.0

    def transfers(self) -> Iterator[tuple[int, int, float]]:
        """(from, to, rate) of every stream the plan ships: tree edges and root -> sink."""
        for c, p in self.root.edges():
            yield c.node, p.node, c.rate
        yield self.root.node, self.sink, self.root.rate

    def cost(self, top: PhysicalNetwork) -> float:
        """Marginal network usage Σ rate · d(from, to)."""
        return sum(r * top.dist[a][b] for a, b, r in self.transfers())

    def joins(self) -> list[PlanNode]:
        return [v for v in self.root.walk() if v.kind == "join"]

    def reused(self) -> list[PlanNode]:
        return [v for v in self.root.walk() if v.kind == "reuse"]


@dataclass(frozen=True)
class Advertisement:
    """A deployed intermediate stream others may subscribe to: what it is, where, how fast, which columns."""

    signature: Signature
    node: int
    rate: float
    columns: frozenset[str]
    query: str


@dataclass
class Deployments:
    """D: the operators and transfers of every deployed query, and the advertisements they publish.

    Mutable on purpose -- queries arrive one by one and each planner run owns its own D; existing
    deployments are never modified ([PAPER] scope), only added to."""

    adverts: dict[Signature, list[Advertisement]] = field(default_factory=dict)
    transfers: list[tuple[int, int, float, str]] = field(default_factory=list)
    operators: int = 0
    reuses: int = 0

    def matches(self, bound: Bound, streams: frozenset[str]) -> list[Advertisement]:
        """Advertisements the query ``bound`` may reuse for the join of ``streams``: same signature and
        every needed column carried."""
        found = self.adverts.get(bound.signature(streams), [])
        if not found:
            return []
        need = bound.needed_columns(streams)
        return [a for a in found if need <= a.columns]

    def deploy(self, plan: OperatorPlan, bound: Bound) -> None:
        """Add ``plan``'s new operators and transfers and advertise its joins."""
        for a, b, r in plan.transfers():
            self.transfers.append((a, b, r, plan.query))
        for v in plan.joins():
            self.operators += 1
            ad = Advertisement(bound.signature(v.streams), v.node, v.rate, bound.needed_columns(v.streams),
                               plan.query)
            self.adverts.setdefault(ad.signature, []).append(ad)
        self.reuses += len(plan.reused())

    def total_cost(self, top: PhysicalNetwork) -> float:
        """Total network usage of everything deployed."""
        return sum(r * top.dist[a][b] for a, b, r, _ in self.transfers)

    def link_usage(self, top: PhysicalNetwork) -> dict[tuple[str, str], float]:
        """Network usage per physical link (rate · latency summed over the streams crossing it)."""
        out: dict[tuple[str, str], float] = {}
        for a, b, r, _ in self.transfers:
            for u, v in top.path(a, b):
                key = (top.nodes[min(u, v)], top.nodes[max(u, v)])
                out[key] = out.get(key, 0.0) + r * top.link_latency(u, v)
        return out
