"""The plan IR: what runs where, with every stream and operator named by what it is.

A logical :class:`~joinlib.plan.logical.Plan` (one join sequence per head stream) *lowers* into a
:class:`PlanIR`: windows, replicas, one-way join steps and the flows between nodes.  Each of them
has a **signature** derived from its content, never from a counter in plan order, so that

* two plans can be diffed operator by operator (:meth:`PlanIR.diff`: plan migration, seed 003);
* two queries that compute the same intermediate stream share its signature (operator reuse,
  seed 001);
* a partition of a stream has a name of its own (:class:`Part`, seed 002).

Streams: :class:`Base` (a query stream), :class:`Derived` (the rows of one head stream joined with
a set of other streams, whatever the order they were joined in) and :class:`Part` (one partition of
a stream under a named partition function).

The :class:`Topology` (nodes and links) is separate from the query: a plan may place operators
on processing-only nodes that no stream is born at (``network.nodes`` in the query file).

Flows carry one message per batch epoch.  On the wire a flow is a small integer: its rank among
the sorted flow signatures of the plan (:attr:`PlanIR.flow_ids`), the same at every node because
it is a function of the plan's content.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable, Optional, Union

from joinlib.algorithms import REGISTRY
from joinlib.algorithms.record import ReplicaKind
from joinlib.algorithms.reduce import KEY_SETS, REDUCE, key_set_flow
from joinlib.algorithms.simple import FULL
from joinlib.errors import PlanError
from joinlib.model import Network, Query
from joinlib.plan.logical import Plan, Sequence

Slot = tuple[int, int]  # (stream position in a result row, index into that stream's key)


# ----------------------------------------------------------------------------- topology

@dataclass(frozen=True)
class Topology:
    """The nodes a plan may use and the links between them (``network``: latency, bandwidth)."""

    nodes: tuple[str, ...]
    network: Network = field(default_factory=Network)

    @classmethod
    def of(cls, query: Query) -> "Topology":
        """The query's stream sites plus the processing-only nodes of its network section."""
        return cls(query.nodes, query.network)

    def transfer_ms(self, src: str, dst: str, nbytes: int) -> float:
        return self.network.transfer_ms(src, dst, nbytes)


# ----------------------------------------------------------------------------- streams

@dataclass(frozen=True)
class Base:
    """A stream of the query, as born at its site."""

    name: str

    @cached_property
    def sig(self) -> str:
        return self.name


@dataclass(frozen=True)
class Derived:
    """The rows of head stream ``head`` joined with every stream of ``streams`` (head included):
    combinations that satisfy every predicate among them, each tuple in its window as seen by the
    head tuple.  The order the streams were joined in does not change the content, so it is not
    part of the identity."""

    head: str
    streams: frozenset[str]

    @cached_property
    def sig(self) -> str:
        return f"{self.head}({','.join(sorted(self.streams - {self.head}))})"


@dataclass(frozen=True)
class Part:
    """Partition ``pid`` of ``stream`` under partition function ``fn`` (e.g. ``hash/8``)."""

    stream: Union[Base, Derived]
    fn: str
    pid: int

    @cached_property
    def sig(self) -> str:
        return f"{self.stream.sig}#{self.fn}:{self.pid}"


StreamRef = Union[Base, Derived, Part]


# ----------------------------------------------------------------------------- operators

def _probe_one(p: int, i: int) -> Callable[[tuple[Any, ...]], Optional[tuple[Any, ...]]]:
    return lambda row: (row[p].key[i],)


@dataclass(frozen=True)
class KeySpec:
    """How a step matches a row with tuples of the probed stream.

    ``index``: positions in the probed stream's join_attrs forming the window key;
    ``sources``: for each, the row slot holding the value to probe with;
    ``checks``: pairs of row slots that must be equal (a probed attribute that appears
    in several predicates: all of them must agree before a probe can match).
    """

    index: tuple[int, ...]
    sources: tuple[Slot, ...]
    checks: tuple[tuple[Slot, Slot], ...] = ()

    def __post_init__(self) -> None:
        if not self.checks and len(self.sources) == 1:  # the common case, on the hot path
            (p, i), = self.sources
            object.__setattr__(self, "probe_key", _probe_one(p, i))

    def probe_key(self, row: tuple) -> Optional[tuple]:  # type: ignore[type-arg]  # rows of Tup | None
        """The key to look up for ``row``, or None if the row's own values disagree."""
        for (p1, i1), (p2, i2) in self.checks:
            if row[p1].key[i1] != row[p2].key[i2]:
                return None
        return tuple(row[p].key[i] for p, i in self.sources)


@dataclass(frozen=True)
class ReplicaOp:
    """A copy of (part of) the window of ``stream`` kept at ``loc`` for the steps probing it there:
    W_2@N_1 of SP-S (``kind`` SP-S), W'_2 of SM-S1, M_2 of SM-S2, V_2@N_1 of SM-D1.  Shared by every
    step at ``loc`` with the same kind, stream and DJA key ``index``."""

    kind: str
    stream: str
    pos: int
    home: str
    loc: str
    index: tuple[int, ...]

    @cached_property
    def sig(self) -> str:
        idx = f"[{','.join(map(str, self.index))}]" if self.index else ""
        return f"{self.kind}:{self.stream}{idx}@{self.home}>{self.loc}"


@dataclass(frozen=True)
class FlowOp:
    """A directed channel carrying one message per epoch from ``src`` to ``dst``."""

    owner: str          # signature of the replica or step that owns the flow
    name: str           # update | data | req | resp | keys | match
    src: str
    dst: str
    kind: str           # full | partial | update

    @cached_property
    def sig(self) -> str:
        return f"{self.owner}/{self.name}"


@dataclass(frozen=True)
class StepOp:
    """One one-way join of a join sequence: the rows of ``input`` (at ``loc``) probe the window of
    ``stream`` (born at ``home``) with ``algorithm``; the output, ``output``, is produced at ``proc``.
    ``flows`` maps a flow name of the algorithm to its flow signature."""

    head: str
    head_pos: int
    seq_index: int      # index of the head's sequence in query order
    j: int              # 0-based step index in the sequence
    stream: str
    pos: int
    algorithm: str
    loc: str
    home: str
    proc: str
    key: KeySpec
    last: bool
    input: Derived
    output: Derived
    replica: Optional[str] = None       # signature of the ReplicaOp it probes
    flows: tuple[tuple[str, str], ...] = ()

    @cached_property
    def sig(self) -> str:
        return f"{self.algorithm}:{self.input.sig}@{self.loc}+{self.stream}"

    @property
    def local(self) -> bool:
        return self.loc == self.home

    @property
    def sites(self) -> tuple[str, ...]:
        """Where the step has a phase: its input's site, and the probed stream's site unless the step
        only probes a replica there (SP-S across sites: :attr:`~joinlib.algorithms.record.Algorithm.at_home`)."""
        if self.local or not REGISTRY[self.algorithm].at_home:
            return (self.loc,)
        return (self.loc, self.home)

    def flow(self, name: str) -> str:
        for n, sig in self.flows:
            if n == name:
                return sig
        raise KeyError(f"step {self.sig} has no flow {name!r}")


@dataclass(frozen=True)
class Edge:
    """One neighbour of a reducer in the reduction's tree: the neighbour stream and its home, the
    positions in each side's join attributes that form the edge's key (every predicate between
    the two, in one canonical order), and the flows of key sets to and from the neighbour (None:
    that direction is skipped, ``Reduce.skip`` -- no key sets go that way, and the receiver does
    not filter by the sender)."""

    stream: str
    home: str
    mine: tuple[int, ...]
    theirs: tuple[int, ...]
    out_flow: Optional[str]     # signature of the flow to the neighbour (None: skipped)
    in_flow: Optional[str]      # signature of the flow from it (None: skipped, it passes everything)
    cross: bool = False         # an edge off the tree (Reduce.cross): its sets filter only what ships


@dataclass(frozen=True)
class ReducerOp:
    """The semijoin-program state of one stream of a reduction, at its home: it filters the stream
    by its tree neighbours' key sets, sends its own on to them, and ships what passes to the
    result site ``site`` (unless the stream is born there).  ``schedule``: the neighbours as the
    reducer talks to them each epoch -- children in, parent out, parent in, children out (an
    up pass then a down pass of the tree), then the crossing edges out and in, without the skipped
    directions.  ``filters``: the neighbours it filters by (those whose key sets it takes);
    ``sends``: those it sends to."""

    stream: str
    pos: int
    home: str
    site: str
    edges: tuple[Edge, ...]
    parent: Optional[str]
    replica: Optional[str]  # the RF replica at the result site (None: the stream is born there)

    @property
    def sig(self) -> str:
        return f"reduce:{self.stream}@{self.home}>{self.site}"

    def edge(self, stream: str) -> Edge:
        return next(e for e in self.edges if e.stream == stream)

    @property
    def filters(self) -> tuple[Edge, ...]:
        return tuple(e for e in self.edges if e.in_flow is not None)

    @property
    def sends(self) -> tuple[Edge, ...]:
        return tuple(e for e in self.edges if e.out_flow is not None)

    @property
    def schedule(self) -> tuple[tuple[str, str], ...]:
        """(in | out, neighbour) in the order of the epoch's rounds.  A skipped direction is simply
        left out on both sides: every remaining wait (an "in" for the neighbour's "out") was one of
        the full schedule's, whose up-then-down order has no cycle, so none can deadlock."""
        tree = [e for e in self.edges if not e.cross]
        children = [e for e in tree if e.stream != self.parent]
        parent = [e for e in tree if e.stream == self.parent]
        up = [("in", e.stream) for e in children if e.in_flow] + [("out", e.stream) for e in parent if e.out_flow]
        down = [("in", e.stream) for e in parent if e.in_flow] + [("out", e.stream) for e in children if e.out_flow]
        # crossing edges after the tree's rounds: their sets depend on the tree's only, so no wait is circular
        cross = [e for e in self.edges if e.cross]
        return tuple(up + down + [("out", e.stream) for e in cross if e.out_flow]
                     + [("in", e.stream) for e in cross if e.in_flow])

    @property
    def content(self) -> str:
        """The reducer named by all it does (for operator sets, diffs and digests): ``sig``, its
        parent, its rounds in order and its tree neighbours -- so that two reductions with other
        trees, roots or skipped directions differ."""
        rounds = " ".join(f"{way}:{n}" for way, n in self.schedule)
        nbrs = ",".join(("~" if e.cross else "") + e.stream for e in self.edges)   # ~: a crossing edge
        return f"{self.sig}^{self.parent or ''}[{rounds}|{nbrs}]"


@dataclass(frozen=True)
class NodeOperatorSet:
    """What one node runs of a plan (seed 003's NOS): windows it keeps, replicas it holds and
    serves, the steps with a phase there and the sequences that start there."""

    site: str
    windows: tuple[str, ...]
    held: tuple[str, ...]
    served: tuple[str, ...]
    steps: tuple[str, ...]
    starts: tuple[str, ...]

    def signatures(self) -> frozenset[str]:
        return frozenset((*(f"window:{w}" for w in self.windows), *self.held, *(f"serve:{r}" for r in self.served),
                          *self.steps, *(f"start:{h}" for h in self.starts)))


@dataclass(frozen=True)
class PlanDiff:
    """Operator signatures only in the old plan, in both, only in the new one (per node and in all)."""

    removed: frozenset[str]
    kept: frozenset[str]
    added: frozenset[str]
    by_node: tuple[tuple[str, frozenset[str], frozenset[str]], ...] = ()  # (site, removed, added)

    @property
    def affected(self) -> tuple[str, ...]:
        """Nodes whose operator set changes."""
        return tuple(site for site, rem, add in self.by_node if rem or add)


@dataclass(frozen=True)
class PlanIR:
    """A plan lowered for execution (see the module docstring)."""

    query: Query
    topology: Topology
    plan: Plan
    steps: tuple[StepOp, ...]
    replicas: tuple[ReplicaOp, ...]
    flows: tuple[FlowOp, ...]
    starts: tuple[tuple[str, str], ...]      # (head, site where its sequence starts)
    reducers: tuple[ReducerOp, ...] = ()

    def __post_init__(self) -> None:
        ranked = sorted(f.sig for f in self.flows)
        object.__setattr__(self, "flow_ids", {sig: i for i, sig in enumerate(ranked)})
        object.__setattr__(self, "_replicas", {r.sig: r for r in self.replicas})
        object.__setattr__(self, "_flows", {f.sig: f for f in self.flows})
        object.__setattr__(self, "_reducers", {r.stream: r for r in self.reducers})

    flow_ids: dict[str, int] = field(init=False, repr=False, compare=False)
    _replicas: dict[str, ReplicaOp] = field(init=False, repr=False, compare=False)
    _flows: dict[str, FlowOp] = field(init=False, repr=False, compare=False)
    _reducers: dict[str, ReducerOp] = field(init=False, repr=False, compare=False)

    # -------------------------------------------------------------- lookups
    def replica(self, sig: str) -> ReplicaOp:
        return self._replicas[sig]

    def flow(self, sig: str) -> FlowOp:
        return self._flows[sig]

    def reducer(self, stream: str) -> ReducerOp:
        return self._reducers[stream]

    def update_flow(self, replica: ReplicaOp) -> FlowOp:
        return self._flows[f"{replica.sig}/update"]

    def start_of(self, head: str) -> str:
        return dict(self.starts)[head]

    def steps_of(self, head: str) -> list[StepOp]:
        return [s for s in self.steps if s.head == head]

    @property
    def nodes(self) -> tuple[str, ...]:
        """The nodes with something to do in this plan, in topology order."""
        used = {s.site for s in self.query.streams} | {at for _, at in self.starts}
        used |= {r.loc for r in self.replicas} | {s.proc for s in self.steps}
        return tuple(n for n in self.topology.nodes if n in used)

    # -------------------------------------------------------------- operator sets and diffs
    def nos(self, site: str) -> NodeOperatorSet:
        return NodeOperatorSet(
            site,
            tuple(s.name for s in self.query.streams if s.site == site),
            tuple(r.sig for r in self.replicas if r.loc == site),
            tuple(r.sig for r in self.replicas if r.home == site),
            tuple(st.sig for st in self.steps if site in st.sites),
            tuple(h for h, at in self.starts if at == site) + tuple(
                r.content for r in self.reducers if r.home == site),
        )

    def signatures(self) -> frozenset[str]:
        out: set[str] = set()
        for site in self.topology.nodes:
            out |= {f"{site}:{sig}" for sig in self.nos(site).signatures()}
        return frozenset(out)

    def diff(self, new: "PlanIR") -> PlanDiff:
        """What changes from this plan to ``new``, by operator signature."""
        old_s, new_s = self.signatures(), new.signatures()
        by_node = []
        for site in dict.fromkeys(self.topology.nodes + new.topology.nodes):
            a, b = self.nos(site).signatures(), new.nos(site).signatures()
            by_node.append((site, frozenset(a - b), frozenset(b - a)))
        return PlanDiff(frozenset(old_s - new_s), frozenset(old_s & new_s), frozenset(new_s - old_s), tuple(by_node))

    def digest(self) -> str:
        """A short hash of the plan's content (query, topology, operators)."""
        text = "|".join(sorted(self.signatures())) + "|" + repr(self.query) + repr(self.topology)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def round_trip_chain_ms(self, hop: Optional[Callable[[FlowOp], float]] = None) -> float:
        """The longest chain of network hops one epoch's results wait for, in ms: per sequence, the
        head batch reaching a remote start, then each step's own hops (a request and its answer,
        rows shipped, ...), a step waiting also for its replica's update of the epoch; the maximum
        over sequences.  ``hop(flow)``: the time of one message on a flow (default: the link's
        latency; a benchmark adds the measured mean transfer time)."""
        net = self.query.network
        cost = hop or (lambda f: net.link(f.src, f.dst)[0])
        worst = 0.0
        for head, at in self.starts:
            t = 0.0
            if at != self.query.stream(head).site:
                t = cost(self.update_flow(self.replica(f"{FULL.name}:{head}@{self.query.stream(head).site}>{at}")))
            for st in self.steps_of(head):
                if st.replica is not None:
                    t = max(t, cost(self.update_flow(self.replica(st.replica))))
                t += sum(cost(self.flow(sig)) for _, sig in st.flows)
            worst = max(worst, t)
        return worst


# ----------------------------------------------------------------------------- lowering

class _Lowering:
    """The operators of a plan as they are found, each shipment once (by signature)."""

    def __init__(self, query: Query, plan: Plan) -> None:
        self.query = query
        self.full = REDUCE.replica if plan.reduce is not None else FULL   # a reduction's copies: what passed
        self.replicas: dict[str, ReplicaOp] = {}
        self.flows: dict[str, FlowOp] = {}
        self.steps: list[StepOp] = []

    def replica(self, kind: ReplicaKind, stream: str, loc: str, index: tuple[int, ...]) -> str:
        if kind == FULL:
            kind = self.full
        s = self.query.stream(stream)
        r = ReplicaOp(kind.name, stream, s.pos, s.site, loc, index)
        if r.sig not in self.replicas:
            self.replicas[r.sig] = r
            update = kind.update_flow
            f = FlowOp(r.sig, update.name, s.site, loc, update.kind)
            self.flows[f.sig] = f
        return r.sig

    def sequence(self, seq_index: int, seq: Sequence, start: str) -> None:
        query, head = self.query, self.query.stream(seq.head)
        if start != head.site:
            self.replica(FULL, seq.head, start, ())
        loc, joined = start, [seq.head]
        for j, st in enumerate(seq.steps):
            s = query.stream(st.stream)
            key = key_spec(query, st.stream, joined)
            proc = loc if (REGISTRY[st.algorithm].at_source or loc == s.site) else s.site
            inp = Derived(seq.head, frozenset(joined))
            out = Derived(seq.head, frozenset(joined + [st.stream]))
            rep, flows = self._crossing(st.algorithm, st.stream, key, inp, loc) if loc != s.site else (None, ())
            self.steps.append(StepOp(seq.head, head.pos, seq_index, j, st.stream, s.pos, st.algorithm, loc, s.site,
                                     proc, key, j == len(seq.steps) - 1, inp, out, rep, flows))
            loc = proc
            joined.append(st.stream)

    def _crossing(self, algorithm: str, stream: str, key: KeySpec, inp: Derived,
                  loc: str) -> tuple[Optional[str], tuple[tuple[str, str], ...]]:
        """The replica and the flows of a step whose input is not at the probed stream's site."""
        home, rec = self.query.stream(stream).site, REGISTRY[algorithm]
        rep = None
        if rec.replica is not None:
            rep = self.replica(rec.replica, stream, loc, key.index if rec.replica.keyed else ())
        owner, out = f"{algorithm}:{inp.sig}@{loc}+{stream}", []
        for flow in rec.flows:
            src, dst = (loc, home) if flow.direction == "fwd" else (home, loc)
            f = FlowOp(owner, flow.name, src, dst, flow.kind)
            self.flows[f.sig] = f
            out.append((flow.name, f.sig))
        return rep, tuple(out)


def lower(query: Query, plan: Plan, topology: Optional[Topology] = None) -> PlanIR:
    """The IR of ``plan`` (already validated against ``query``) on ``topology``."""
    topo = topology or Topology.of(query)
    low = _Lowering(query, plan)
    starts: list[tuple[str, str]] = []
    for seq_index, seq in enumerate(plan.sequences):
        start = seq.start or query.stream(seq.head).site
        if start not in topo.nodes:
            raise PlanError(f"sequence of {seq.head} starts at {start!r}, which is not a node "
                            f"(nodes: {', '.join(topo.nodes)})")
        starts.append((seq.head, start))
        low.sequence(seq_index, seq, start)
    reducers = _reducers(query, plan, low.replicas, low.flows)
    return PlanIR(query, topo, plan, tuple(low.steps), tuple(low.replicas.values()), tuple(low.flows.values()),
                  tuple(starts), reducers)


def _reducers(query: Query, plan: Plan, replicas: dict[str, ReplicaOp], flows: dict[str, FlowOp]) -> tuple[
        ReducerOp, ...]:
    """The reducers of a reduction plan (none for other plans) and their key-set flows."""
    red = plan.reduce
    if red is None:
        return ()
    parent = _parents(red.tree, red.root)
    skip = set(red.skip)
    out = []
    keyed, n_tree = red.edges(query), len(red.tree)   # the tree's edges, then the crossing ones
    for s in query.streams:
        sig = f"reduce:{s.name}@{s.site}>{red.site}"
        edges = []
        for i, (a, b) in enumerate(keyed):
            if s.name not in (a, b):
                continue
            other = query.stream(b if a == s.name else a)
            preds = sorted(query.predicates_between(s.name, other.name), key=str)
            mine = tuple(s.attr_index(p.side(s.name) or "") for p in preds)
            theirs = tuple(other.attr_index(p.side(other.name) or "") for p in preds)
            fout: Optional[str] = None
            if (s.name, other.name) not in skip:
                fo = FlowOp(sig, key_set_flow(other.name), s.site, other.site, KEY_SETS.kind)
                flows[fo.sig] = fo
                fout = fo.sig
            fin = None if (other.name, s.name) in skip else \
                f"reduce:{other.name}@{other.site}>{red.site}/{key_set_flow(s.name)}"
            edges.append(Edge(other.name, other.site, mine, theirs, fout, fin, i >= n_tree))
        rep = f"{REDUCE.replica.name}:{s.name}@{s.site}>{red.site}"
        out.append(ReducerOp(s.name, s.pos, s.site, red.site, tuple(edges), parent.get(s.name),
                             rep if rep in replicas else None))
    return tuple(out)


def _parents(tree: tuple[tuple[str, str], ...], root: str) -> dict[str, str]:
    parent: dict[str, str] = {}
    todo = [root]
    while todo:
        x = todo.pop()
        for a, b in tree:
            for u, v in ((a, b), (b, a)):
                if u == x and v != root and v not in parent:
                    parent[v] = x
                    todo.append(v)
    return parent


#: :func:`key_spec`'s memo: id(query) -> (the query, (stream, joined set) -> spec)
_KEY_SPECS: dict[int, tuple[Query, dict[tuple[str, frozenset[str]], KeySpec]]] = {}


def key_spec(query: Query, stream: str, joined: list[str]) -> KeySpec:
    """How rows over ``joined`` probe ``stream``: every predicate between them, grouped by the
    probed attribute (a function of the joined *set*; memoised per query: the planners lower
    thousands of sequences of one query, and a spec is immutable)."""
    memo = _KEY_SPECS.get(id(query))
    if memo is None or memo[0] is not query:
        if len(_KEY_SPECS) > 64:
            _KEY_SPECS.clear()
        memo = _KEY_SPECS[id(query)] = (query, {})
    key = (stream, frozenset(joined))
    hit = memo[1].get(key)
    if hit is None:
        hit = memo[1][key] = _key_spec(query, stream, joined)
    return hit


def _key_spec(query: Query, stream: str, joined: list[str]) -> KeySpec:
    s = query.stream(stream)
    by_attr: dict[int, list[Slot]] = {}
    for p in query.predicates:
        mine = p.side(stream)
        if mine is None:
            continue
        other, oattr = p.other(stream)
        if other in joined:
            o = query.stream(other)
            by_attr.setdefault(s.attr_index(mine), []).append((o.pos, o.attr_index(oattr)))
    index = tuple(sorted(by_attr))
    sources = tuple(by_attr[i][0] for i in index)
    checks = tuple((by_attr[i][0], extra) for i in index for extra in by_attr[i][1:])
    return KeySpec(index, sources, checks)
