"""The physical network: nodes, undirected links with latency and bandwidth, traversal costs.

The paper's cost is *network usage*: Σ over the physical links a stream crosses of rate × latency
(the bandwidth-delay product, [PAPER] Sect. 2.2).  A stream sent from node a to node b follows the
lowest-latency path, so its usage is rate × d(a, b) with d the all-pairs shortest-path latency
(the "traversal cost" the hierarchy clusters on).  Bandwidth is kept (the YAML format has it and
reports show it) but, as in the paper's metric, it does not enter the cost.

Three ways to get a topology: :class:`PhysicalNetwork` directly, :func:`transit_stub` (seeded generator:
``stubs`` stubs of ``per_stub`` nodes, cheap links inside a stub, expensive ones between stub
gateways -- the digest's small reproduction), and :func:`load_topology` (YAML, validated: every
mistake is a :class:`~.errors.TopologyError` naming the file and key).
"""
from __future__ import annotations

import heapq
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from joinlib.multiquery.errors import TopologyError

INF = float("inf")


@dataclass(frozen=True)
class PhysicalLink:
    """An undirected physical link: ``latency`` in ms, ``bandwidth`` in kbps (unlike
    :class:`joinlib.model.Link`, a directed per-link override of a query's network model)."""

    a: str
    b: str
    latency: float
    bandwidth: float = 100_000.0


@dataclass(frozen=True)
class PhysicalNetwork:
    """Nodes and links; ``dist[i][j]`` is the shortest-path latency (traversal cost) between node
    indices i and j, ``hop[i][j]`` the next node on that path (for per-link accounting).

    Not :class:`joinlib.plan.ir.Topology` (a plan's operator sets per node): the physical network the
    planners place operators on, with its shortest paths.

    Nodes are addressed by index everywhere in the planners (lists, not dicts, in the hot loops);
    ``index`` maps names to indices.  Validation raises :class:`TopologyError`.
    """

    nodes: tuple[str, ...]
    links: tuple[PhysicalLink, ...]
    index: dict[str, int] = field(init=False, repr=False, compare=False)
    dist: list[list[float]] = field(init=False, repr=False, compare=False)
    hop: list[list[int]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _validate(self.nodes, self.links)
        object.__setattr__(self, "index", {n: i for i, n in enumerate(self.nodes)})
        adj: list[list[tuple[int, float]]] = [[] for _ in self.nodes]
        for link in self.links:
            a, b = self.index[link.a], self.index[link.b]
            adj[a].append((b, link.latency))
            adj[b].append((a, link.latency))
        rows = [_dijkstra(adj, s) for s in range(len(self.nodes))]
        object.__setattr__(self, "dist", [r[0] for r in rows])
        object.__setattr__(self, "hop", [r[1] for r in rows])
        unreachable = [self.nodes[j] for j, d in enumerate(self.dist[0]) if d == INF]
        if unreachable:
            raise TopologyError(f"the network is not connected: {', '.join(unreachable[:5])}"
                                f"{' ...' if len(unreachable) > 5 else ''} cannot be reached from "
                                f"{self.nodes[0]}; add links")

    @property
    def n(self) -> int:
        return len(self.nodes)

    def path(self, a: int, b: int) -> list[tuple[int, int]]:
        """The physical links (as node-index pairs) of the lowest-latency path from a to b."""
        out: list[tuple[int, int]] = []
        while a != b:
            nxt = self.hop[a][b]
            out.append((a, nxt))
            a = nxt
        return out

    def link_latency(self, a: int, b: int) -> float:
        """Latency of the direct link between node indices a and b (the cheapest if parallel)."""
        names = {self.nodes[a], self.nodes[b]}
        return min(lk.latency for lk in self.links if {lk.a, lk.b} == names)


def _validate(nodes: Sequence[str], links: Sequence[PhysicalLink]) -> None:
    if not nodes:
        raise TopologyError("a topology needs at least one node")
    known = set(nodes)
    if len(known) != len(nodes):
        dup = sorted({n for n in nodes if list(nodes).count(n) > 1})
        raise TopologyError(f"node {dup[0]!r} is listed twice")
    seen: set[frozenset[str]] = set()
    for i, link in enumerate(links):
        where = f"links[{i}] ({link.a} - {link.b})"
        for end in (link.a, link.b):
            if end not in known:
                raise TopologyError(f"{where}: unknown node {end!r} (known: {', '.join(list(nodes)[:8])} ...)")
        if link.a == link.b:
            raise TopologyError(f"{where}: a link must join two different nodes")
        if not link.latency > 0 or link.latency == INF:
            raise TopologyError(f"{where}: latency must be a positive number of ms, got {link.latency!r}")
        if not link.bandwidth > 0:
            raise TopologyError(f"{where}: bandwidth must be positive, got {link.bandwidth!r}")
        key = frozenset((link.a, link.b))
        if key in seen:
            raise TopologyError(f"{where}: a second link between the same two nodes; keep one")
        seen.add(key)


def _dijkstra(adj: list[list[tuple[int, float]]], src: int) -> tuple[list[float], list[int]]:
    """Shortest latencies from src and, per destination, the first hop from src (ties: lower index)."""
    n = len(adj)
    dist = [INF] * n
    first = [-1] * n
    dist[src], first[src] = 0.0, src
    heap: list[tuple[float, int]] = [(0.0, src)]
    while heap:
        d, u = heapq.heappop(heap)
        if d > dist[u]:
            continue
        for v, w in adj[u]:
            nd = d + w
            if nd < dist[v] - 1e-12:
                dist[v] = nd
                first[v] = v if u == src else first[u]
                heapq.heappush(heap, (nd, v))
    return dist, first


# --------------------------------------------------------------------------- generator

def transit_stub(stubs: int = 8, per_stub: int = 8, seed: int = 1, intra: tuple[float, float] = (1.0, 5.0),
                 inter: tuple[float, float] = (20.0, 50.0), extra_intra: float = 0.3,
                 extra_inter: float = 0.3) -> PhysicalNetwork:
    """A seeded transit-stub style network (GT-ITM's shape, the digest's small reproduction).

    Each stub is a random tree of ``per_stub`` nodes plus extra links (each remaining pair with
    probability ``extra_intra``), latencies U``intra`` ms, 100 Mbps; node 0 of each stub is its
    gateway.  Gateways form a ring plus random chords (probability ``extra_inter``), latencies
    U``inter`` ms, 10-45 Mbps.  Nodes are named ``s<stub>n<i>``.
    """
    if stubs < 1 or per_stub < 1:
        raise TopologyError(f"transit_stub: stubs and per_stub must be >= 1 (got {stubs}, {per_stub})")
    rng = random.Random(seed)
    names = [f"s{s}n{i}" for s in range(stubs) for i in range(per_stub)]
    links: list[PhysicalLink] = []
    for s in range(stubs):
        members = [f"s{s}n{i}" for i in range(per_stub)]
        links += _random_connected(rng, members, intra, extra_intra, (100_000.0, 100_000.0))
    gateways = [f"s{s}n0" for s in range(stubs)]
    links += _random_connected(rng, gateways, inter, extra_inter, (10_000.0, 45_000.0), ring=True)
    return PhysicalNetwork(tuple(names), tuple(links))


def _random_connected(rng: random.Random, members: list[str], lat: tuple[float, float], extra: float,
                      bw: tuple[float, float], ring: bool = False) -> list[PhysicalLink]:
    pairs: set[frozenset[str]] = set()
    out: list[PhysicalLink] = []

    def add(a: str, b: str) -> None:
        if a != b and frozenset((a, b)) not in pairs:
            pairs.add(frozenset((a, b)))
            out.append(PhysicalLink(a, b, round(rng.uniform(*lat), 2), round(rng.uniform(*bw), -2)))

    for i in range(1, len(members)):
        add(members[i], members[i - 1] if ring else members[rng.randrange(i)])
    if ring and len(members) > 2:
        add(members[-1], members[0])
    for i, a in enumerate(members):
        for b in members[i + 1:]:
            if rng.random() < extra:
                add(a, b)
    return out


# --------------------------------------------------------------------------- YAML

TOP_KEYS = ("nodes", "links", "bandwidth")
LINK_KEYS = ("from", "to", "latency", "bandwidth")
_LAT = re.compile(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(us|ms|s)?\s*")
_LAT_UNIT = {"us": 0.001, "ms": 1.0, "s": 1000.0, None: 1.0}
_BW = re.compile(r"\s*([0-9]*\.?[0-9]+)\s*(bps|kbps|mbps|gbps)?\s*", re.IGNORECASE)
_BW_UNIT = {"bps": 0.001, "kbps": 1.0, "mbps": 1000.0, "gbps": 1_000_000.0}
FORMAT_HELP = """A topology file:
  nodes: [a, b, c, d]          # optional; if given, every link end must be listed (catches typos)
  bandwidth: 100mbps           # optional default for links without one
  links:
    - {from: a, to: b, latency: 5ms, bandwidth: 10mbps}
    - {from: b, to: c, latency: 20ms}
Links are undirected; latency in us / ms / s (bare number: ms), bandwidth in bps / kbps / mbps /
gbps (bare number: kbps).  Every node must be reachable."""


def load_topology(path: Path) -> PhysicalNetwork:
    """Read and validate a YAML topology file (see :data:`FORMAT_HELP`)."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        raise TopologyError(f"{path}: no such topology file") from None
    except OSError as e:
        raise TopologyError(f"{path}: cannot read ({e.strerror or e})") from None
    return parse_topology(text, str(path))


def parse_topology(text: str, where: str = "topology") -> PhysicalNetwork:
    """Parse the YAML text of a topology (``where`` prefixes every error message)."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" (line {mark.line + 1})" if mark is not None else ""
        raise TopologyError(f"{where}: not valid YAML{at}") from None
    if not isinstance(data, dict):
        raise TopologyError(f"{where}: expected a mapping with 'links' (and optional 'nodes')\n{FORMAT_HELP}")
    unknown = [k for k in data if k not in TOP_KEYS]
    if unknown:
        raise TopologyError(f"{where}: unknown key {unknown[0]!r} (allowed: {', '.join(TOP_KEYS)})")
    default_bw = _bandwidth(where, "bandwidth", data.get("bandwidth", 100_000))
    links = _links(where, data.get("links"), default_bw)
    nodes = _nodes(where, data.get("nodes"), links)
    try:
        return PhysicalNetwork(tuple(nodes), tuple(links))
    except TopologyError as e:
        raise TopologyError(f"{where}: {e}") from None


def _nodes(where: str, raw: Any, links: list[PhysicalLink]) -> list[str]:
    if raw is None:
        raw = []
    if not isinstance(raw, list) or not all(isinstance(n, (str, int)) for n in raw):
        raise TopologyError(f"{where}: 'nodes' must be a list of node names")
    nodes = [str(n) for n in raw]
    if not raw:  # no list: the nodes are the link ends, in order of appearance
        for end in (e for link in links for e in (link.a, link.b)):
            if end not in nodes:
                nodes.append(end)
    return nodes


def _links(where: str, raw: Any, default_bw: float) -> list[PhysicalLink]:
    if not isinstance(raw, list) or not raw:
        raise TopologyError(f"{where}: 'links' must be a non-empty list of {{from, to, latency[, bandwidth]}}")
    out: list[PhysicalLink] = []
    for i, item in enumerate(raw):
        key = f"links[{i}]"
        if not isinstance(item, dict):
            raise TopologyError(f"{where}: {key}: expected a mapping {{from, to, latency[, bandwidth]}}")
        unknown = [k for k in item if k not in LINK_KEYS]
        if unknown:
            raise TopologyError(f"{where}: {key}: unknown key {unknown[0]!r} (allowed: {', '.join(LINK_KEYS)})")
        for k in ("from", "to", "latency"):
            if k not in item:
                raise TopologyError(f"{where}: {key}: missing {k!r}")
        lat = _latency(where, f"{key}.latency", item["latency"])
        bw = _bandwidth(where, f"{key}.bandwidth", item.get("bandwidth", default_bw))
        out.append(PhysicalLink(str(item["from"]), str(item["to"]), lat, bw))
    return out


def _latency(where: str, key: str, value: Any) -> float:
    m = _LAT.fullmatch(str(value)) if not isinstance(value, bool) else None
    if m is None or float(m.group(1)) <= 0:
        raise TopologyError(f"{where}: {key}: {value!r} is not a positive latency; write e.g. 5ms, 250us, 0.02s")
    return float(m.group(1)) * _LAT_UNIT[m.group(2)]


def _bandwidth(where: str, key: str, value: Any) -> float:
    m = _BW.fullmatch(str(value)) if not isinstance(value, bool) else None
    if m is None or float(m.group(1)) <= 0:
        raise TopologyError(f"{where}: {key}: {value!r} is not a positive bandwidth; write e.g. 10mbps, 512kbps")
    return float(m.group(1)) * _BW_UNIT[(m.group(2) or "kbps").lower()]


def to_yaml(top: PhysicalNetwork) -> str:
    """The YAML text of a topology (what :func:`parse_topology` reads back)."""
    doc = {"nodes": list(top.nodes),
           "links": [{"from": lk.a, "to": lk.b, "latency": f"{lk.latency:g}ms",
                      "bandwidth": f"{lk.bandwidth:g}kbps"} for lk in top.links]}
    return str(yaml.safe_dump(doc, sort_keys=False, default_flow_style=None))
