"""Compile a logical plan into what each node runs: steps, replicas and flows.

Every node compiles the same plan the same way, so flow ids and replica ids agree
everywhere without coordination.  A *replica* is a remote copy of (part of) a window
kept at the node that probes it (W_2@N_1 of SP-S, W'_2 of SM-S1, M_2 of SM-S2, V_2@N_1
of SM-D1); it is shared by all steps at that node that use the same algorithm on the
same stream (and, for the DJA structures, the same key), so no tuple crosses a link
twice for the same purpose.  A *flow* is a directed channel carrying one message per
epoch.  The node operator set of a site (seed 003's NOS) is :meth:`PhysicalPlan.share`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from .model import Query
from .plan import Plan, at_source

Slot = tuple[int, int]  # (stream position in a result row, index into that stream's key)


@dataclass(frozen=True)
class KeySpec:
    """How a step matches a result row with tuples of the probed stream.

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
            object.__setattr__(self, "probe_key", lambda row: (row[p].key[i],))

    def probe_key(self, row: tuple) -> Optional[tuple]:
        """The key to look up for ``row``, or None if the row's own values disagree."""
        for (p1, i1), (p2, i2) in self.checks:
            if row[p1].key[i1] != row[p2].key[i2]:
                return None
        return tuple(row[p].key[i] for p, i in self.sources)


@dataclass(frozen=True)
class ReplicaSpec:
    id: int
    kind: str           # "SP-S" | "SM-S1" | "SM-S2" | "SM-D1"
    stream: str
    pos: int
    home: str           # site of the stream
    loc: str            # site holding the replica
    index: tuple[int, ...]  # DJA key for SM-S2 / SM-D1; () otherwise
    flow: int           # the home -> loc update flow


@dataclass(frozen=True)
class FlowSpec:
    id: int
    src: str
    dst: str
    kind: str           # full | partial | update
    what: str           # human description, for reports


@dataclass(frozen=True)
class StepSpec:
    head: str
    head_pos: int
    seq_index: int      # index of the head's sequence in query order
    j: int              # 0-based step index in the sequence
    stream: str
    pos: int
    algorithm: str
    loc: str            # where the input (intermediate) stream is
    home: str           # site of the probed stream
    proc: str           # where this step's output is produced
    key: KeySpec
    last: bool
    replica: Optional[int] = None
    flows: tuple[tuple[str, int], ...] = ()

    @property
    def local(self) -> bool:
        return self.loc == self.home

    def flow(self, name: str) -> int:
        return dict(self.flows)[name]


@dataclass
class PhysicalPlan:
    query: Query
    plan: Plan
    steps: list[StepSpec] = field(default_factory=list)
    replicas: list[ReplicaSpec] = field(default_factory=list)
    flows: list[FlowSpec] = field(default_factory=list)
    starts: dict[str, str] = field(default_factory=dict)  # head -> site where its sequence starts

    def steps_of(self, head: str) -> list[StepSpec]:
        return [s for s in self.steps if s.head == head]

    def share(self, site: str) -> dict:
        """The node operator set of ``site``: what it stores, probes, ships and receives."""
        return {
            "site": site,
            "home_streams": [s.name for s in self.query.streams if s.site == site],
            "replicas": [r for r in self.replicas if r.loc == site],
            "replicas_served": [r for r in self.replicas if r.home == site],
            "steps": [s for s in self.steps if site in (s.loc, s.home, s.proc)],
            "starts": [h for h, at in self.starts.items() if at == site],
        }


# Flow names per algorithm when the step crosses sites: (name, direction, kind).
_FLOWS = {
    "SP-S": (),
    "SP-D": (("data", "fwd", "full"),),
    "SM-S1": (("req", "fwd", "partial"), ("resp", "back", "full")),
    "SM-S2": (("req", "fwd", "partial"), ("resp", "back", "full")),
    "SM-D1": (("data", "fwd", "full"),),
    "SM-D2": (("keys", "fwd", "partial"), ("match", "back", "partial"), ("data", "fwd", "full")),
}
_REPLICA_KIND = {"SP-S": "SP-S", "SM-S1": "SM-S1", "SM-S2": "SM-S2", "SM-D1": "SM-D1"}
_UPDATE_KIND = {"SP-S": "full", "SM-S1": "update", "SM-S2": "update", "SM-D1": "update"}


def compile_plan(query: Query, plan: Plan) -> PhysicalPlan:
    pp = PhysicalPlan(query, plan)
    replica_ids: dict[tuple, int] = {}

    def new_flow(src: str, dst: str, kind: str, what: str) -> int:
        pp.flows.append(FlowSpec(len(pp.flows), src, dst, kind, what))
        return len(pp.flows) - 1

    def replica(kind: str, stream: str, loc: str, index: tuple[int, ...]) -> int:
        rk = (kind, stream, loc, index)
        if rk not in replica_ids:
            s = query.stream(stream)
            flow = new_flow(s.site, loc, _UPDATE_KIND[kind], f"{kind} window update {stream}@{s.site}->{loc}")
            replica_ids[rk] = len(pp.replicas)
            pp.replicas.append(ReplicaSpec(len(pp.replicas), kind, stream, s.pos, s.site, loc, index, flow))
        return replica_ids[rk]

    for seq_index, seq in enumerate(plan.sequences):
        head = query.stream(seq.head)
        start = seq.start or head.site
        pp.starts[seq.head] = start
        if start != head.site:
            replica("SP-S", seq.head, start, ())
        loc, joined = start, [seq.head]
        for j, st in enumerate(seq.steps):
            s = query.stream(st.stream)
            key = _key_spec(query, st.stream, joined)
            proc = loc if (at_source(st.algorithm) or loc == s.site) else s.site
            rep, flows = None, []
            if loc != s.site:
                if st.algorithm in _REPLICA_KIND:
                    idx = key.index if st.algorithm in ("SM-S2", "SM-D1") else ()
                    rep = replica(_REPLICA_KIND[st.algorithm], st.stream, loc, idx)
                for name, direction, kind in _FLOWS[st.algorithm]:
                    src, dst = (loc, s.site) if direction == "fwd" else (s.site, loc)
                    flows.append((name, new_flow(src, dst, kind, f"{seq.head} step {j + 1} {st.algorithm} {name}")))
            pp.steps.append(StepSpec(seq.head, head.pos, seq_index, j, st.stream, s.pos, st.algorithm,
                                     loc, s.site, proc, key, j == len(seq.steps) - 1, rep, tuple(flows)))
            loc = proc
            joined.append(st.stream)
    return pp


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
