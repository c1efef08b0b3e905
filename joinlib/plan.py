"""Logical join plans (Definition 1 of the semijoin paper).

A plan gives, for every head stream, a *join sequence*: the other streams in the
order they are joined, each with the one-way algorithm that joins the running
intermediate stream to it.  Optionally a sequence starts at another site than the
head's own (``start``): the ``central`` plan uses that to run everything at one site,
as centralized engines do.

JSON form (the CLI's ``--plan FILE``)::

    {"S1": [["S2", "SM-S1"], ["S3", "SP-D"]], "S2": [...], ...}
    {"S1": {"start": "siteA", "steps": [["S2", "SP-S"]]}, ...}
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

from .errors import PlanError
from .model import Query

ALGORITHMS = ("SP-S", "SP-D", "SM-S1", "SM-S2", "SM-D1", "SM-D2")
SOURCE_ALGORITHMS = frozenset({"SP-S", "SM-S1", "SM-S2"})

StepsJSON = list[list[str]]  # [[stream, algorithm], ...]
#: the JSON form of a plan: head stream -> its steps, or {"start": site, "steps": steps}
PlanJSON = dict[str, Union[StepsJSON, dict[str, Union[str, StepsJSON]]]]


def at_source(algorithm: str) -> bool:
    """True if the algorithm produces its output at the source (intermediate) node."""
    return algorithm in SOURCE_ALGORITHMS


@dataclass(frozen=True)
class Step:
    stream: str
    algorithm: str


@dataclass(frozen=True)
class Sequence:
    head: str
    steps: tuple[Step, ...]
    start: Optional[str] = None  # site where the head batch is processed; None = head's site


@dataclass(frozen=True)
class Plan:
    sequences: tuple[Sequence, ...]

    def sequence(self, head: str) -> Sequence:
        for s in self.sequences:
            if s.head == head:
                return s
        raise KeyError(head)

    def to_json(self) -> PlanJSON:
        out: PlanJSON = {}
        for seq in self.sequences:
            steps: StepsJSON = [[st.stream, st.algorithm] for st in seq.steps]
            out[seq.head] = steps if seq.start is None else {"start": seq.start, "steps": steps}
        return out

    def describe(self) -> str:
        lines = []
        for seq in self.sequences:
            at = f" (at {seq.start})" if seq.start else ""
            chain = " -> ".join(f"{st.stream}[{st.algorithm}]" for st in seq.steps)
            lines.append(f"{seq.head}{at}: {chain}")
        return "\n".join(lines)


def validate(query: Query, plan: Plan) -> Plan:
    """Check the plan against the query; raise :class:`PlanError` naming the problem."""
    names = set(query.names)
    heads = [s.head for s in plan.sequences]
    if sorted(heads) != sorted(names):
        missing = sorted(names - set(heads))
        extra = sorted(set(heads) - names)
        raise PlanError(
            "the plan needs exactly one join sequence per stream"
            + (f"; missing: {', '.join(missing)}" if missing else "")
            + (f"; unknown or repeated: {', '.join(extra) or ', '.join(h for h in heads if heads.count(h) > 1)}"
               if extra or len(heads) != len(set(heads)) else "")
        )
    for seq in plan.sequences:
        if seq.start is not None and seq.start not in query.nodes:
            raise PlanError(f"sequence of {seq.head}: start site {seq.start!r} is not a node of the query "
                            f"(nodes: {', '.join(query.nodes)}; add processing-only nodes under network.nodes)")
        done = {seq.head}
        for st in seq.steps:
            if st.algorithm not in ALGORITHMS:
                raise PlanError(f"sequence of {seq.head}: unknown algorithm {st.algorithm!r} "
                                f"(choose from {', '.join(ALGORITHMS)})")
            if st.stream not in names:
                raise PlanError(f"sequence of {seq.head}: unknown stream {st.stream!r}")
            if st.stream in done:
                raise PlanError(f"sequence of {seq.head}: stream {st.stream} appears twice")
            if not any(query.predicates_between(st.stream, d) for d in done):
                raise PlanError(f"sequence of {seq.head}: {st.stream} shares no join predicate with "
                                f"{', '.join(sorted(done))} (a join sequence must follow the join graph)")
            done.add(st.stream)
        if done != names:
            raise PlanError(f"sequence of {seq.head} does not reach {', '.join(sorted(names - done))}")
    return plan


def from_json(query: Query, data: Union[dict[str, Any], str, Path]) -> Plan:
    """Parse the JSON plan form (a dict, a JSON string, or a file path) and validate it."""
    if isinstance(data, Path):
        try:
            data = json.loads(data.read_text())
        except FileNotFoundError:
            raise PlanError(f"plan file {data} not found") from None
        except json.JSONDecodeError as e:
            raise PlanError(f"plan file {data} is not valid JSON: {e}") from None
    elif isinstance(data, str):
        try:
            data = json.loads(data)
        except json.JSONDecodeError as e:
            raise PlanError(f"plan is not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise PlanError("a plan is a JSON object mapping each head stream to its join sequence")
    seqs = []
    for head, spec in data.items():
        start = None
        if isinstance(spec, dict):
            start = spec.get("start")
            spec = spec.get("steps")
        if not isinstance(spec, list) or not all(
            isinstance(s, (list, tuple)) and len(s) == 2 and all(isinstance(x, str) for x in s) for s in spec
        ):
            raise PlanError(f"sequence of {head}: expected a list of [stream, algorithm] pairs")
        seqs.append(Sequence(head, tuple(Step(s, a) for s, a in spec), start))
    order = {n: i for i, n in enumerate(query.names)}
    seqs.sort(key=lambda s: order.get(s.head, len(order)))
    return validate(query, Plan(tuple(seqs)))


def central(query: Query, site: Optional[str] = None) -> Plan:
    """Ship every stream to one site and join there (what centralized engines do).

    Every sequence starts at ``site`` (default: the site of the stream with the highest
    declared rate, else the first) and joins with SP-S: each stream's tuples cross
    the network once, to ``site``, where all windows are kept.
    """
    if site is None:
        rated = [(s.stats.rate, s) for s in query.streams if s.stats.rate is not None]
        site = max(rated, key=lambda r: r[0])[1].site if rated else query.streams[0].site
    seqs = []
    for s in query.streams:
        order = bfs_order(query, s.name)
        seqs.append(Sequence(s.name, tuple(Step(o, "SP-S") for o in order), site))
    return validate(query, Plan(tuple(seqs)))


def bfs_order(query: Query, head: str) -> list[str]:
    """A join-graph-consistent order of the other streams (breadth first, query order)."""
    done, order, frontier = {head}, [], [head]
    while frontier:
        nxt = []
        for f in frontier:
            for n in query.neighbours(f):
                if n not in done:
                    done.add(n)
                    order.append(n)
                    nxt.append(n)
        frontier = nxt
    return order


def uniform(query: Query, algorithm: str) -> Plan:
    """Every step of every (breadth-first) sequence uses ``algorithm``."""
    if algorithm not in ALGORITHMS:
        raise PlanError(f"unknown algorithm {algorithm!r}")
    seqs = [Sequence(s.name, tuple(Step(o, algorithm) for o in bfs_order(query, s.name)))
            for s in query.streams]
    return validate(query, Plan(tuple(seqs)))
