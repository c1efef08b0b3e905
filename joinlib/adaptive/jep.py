"""Seed 003's join execution plans (JEP) and node operator sets (NOS), on the project's plan IR.

A JEP is one *per-stream execution plan* SEP_i = (O_i, P_i) per head stream S_i: the order O_i in
which the other streams are joined and, per position, the *join placement* p ∈ {0, 1} -- 0 runs
the one-way join where the intermediate stream is (the *source*: the next stream's tuples are
shipped there and its window kept there, joinlib's SP-S), 1 runs it at the next stream's node (the
*destination*: the intermediate's tuples are shipped there, SP-D).  So a JEP is a joinlib
:class:`~joinlib.plan.logical.Plan` whose steps are all SP-S or SP-D (:meth:`JEP.to_plan`,
:func:`from_plan`), and it lowers into the runtime's IR like any plan.

The paper's NOS_k -- ``join(S_a, S_b)``, ``update(S_b)``, ``ship(S_a, N_k)`` at node N_k -- is not
built a second time here: :func:`paper_nos` *reads* it off the IR (:class:`~joinlib.plan.ir.PlanIR`),
whose per-node operator sets (:meth:`~joinlib.plan.ir.PlanIR.nos`) and diffs
(:meth:`~joinlib.plan.ir.PlanIR.diff`) are what the runtime migrates.  The paper's names are only a
rendering: a derived stream is S^i_k, "head S_i after the join to S_k" -- ambiguous across plans
(S^1_2 is S1⋈S2 in one order and S1⋈S3⋈S2 in another), which is why the IR names derived streams
by content (``S1(S2,S3)``) and the migration compares IR signatures, never paper labels.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Optional

from joinlib.errors import PlanError
from joinlib.model import Query
from joinlib.plan.ir import PlanIR, StepOp
from joinlib.plan.logical import Plan, Sequence, Step, validate

#: the placement values of the paper and the algorithm each one is in joinlib
SOURCE, DESTINATION = 0, 1
ALGORITHM = {SOURCE: "SP-S", DESTINATION: "SP-D"}
PLACEMENT = {"SP-S": SOURCE, "SP-D": DESTINATION}
#: the node results are shipped to (the paper's query node N_0)
QUERY_NODE = "N0"


@dataclass(frozen=True)
class SEP:
    """SEP_i = (O_i, P_i): the streams joined to head ``head`` in ``order``, each with its
    placement (0 source, 1 destination)."""

    head: str
    order: tuple[str, ...]
    placement: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.order) != len(self.placement):
            raise ValueError(f"SEP of {self.head}: {len(self.order)} streams but {len(self.placement)} placements")
        if any(p not in (SOURCE, DESTINATION) for p in self.placement):
            raise ValueError(f"SEP of {self.head}: placements are 0 (source) or 1 (destination)")

    def position(self, stream: str) -> int:
        """1-based position of ``stream`` in O_i (0 for the head itself), as in the paper."""
        return 0 if stream == self.head else self.order.index(stream) + 1

    def sequence(self) -> Sequence:
        return Sequence(self.head, tuple(Step(s, ALGORITHM[p]) for s, p in zip(self.order, self.placement,
                                                                                   strict=True)))

    def describe(self) -> str:
        return f"SEP_{self.head} = ([{', '.join(self.order)}], [{', '.join(map(str, self.placement))}])"


@dataclass(frozen=True)
class JEP:
    """Definition 1 of seed 003: one SEP per head stream, in query order."""

    seps: tuple[SEP, ...]

    def sep(self, head: str) -> SEP:
        for s in self.seps:
            if s.head == head:
                return s
        raise KeyError(head)

    def replace(self, sep: SEP) -> "JEP":
        return JEP(tuple(sep if s.head == sep.head else s for s in self.seps))

    def to_plan(self, query: Query) -> Plan:
        """The joinlib plan: SP-S for source placements, SP-D for destination ones."""
        order = {n: i for i, n in enumerate(query.names)}
        seqs = sorted((s.sequence() for s in self.seps), key=lambda s: order[s.head])
        return validate(query, Plan(tuple(seqs)))

    def to_json(self) -> dict[str, list[list[object]]]:
        """``{head: [[stream, p], ...]}``: what protocol messages and reports carry."""
        return {s.head: [[o, p] for o, p in zip(s.order, s.placement, strict=True)] for s in self.seps}

    @classmethod
    def from_json(cls, data: Mapping[str, Iterable[Iterable[object]]]) -> "JEP":
        seps = []
        for head, steps in data.items():
            pairs = [tuple(x) for x in steps]
            seps.append(SEP(head, tuple(str(o) for o, _ in pairs), tuple(int(str(p)) for _, p in pairs)))
        return cls(tuple(seps))

    def describe(self) -> str:
        return "; ".join(s.describe() for s in self.seps)


def from_plan(plan: Plan) -> JEP:
    """The JEP of a plan whose steps are all SP-S or SP-D and whose sequences start at their
    heads' sites; :class:`PlanError` for any other plan (the adaptive framework re-plans and
    migrates only these, as the paper does)."""
    if plan.reduce is not None:
        raise PlanError("a reduction is not a join execution plan of seed 003 (SP-S / SP-D steps only)")
    seps = []
    for seq in plan.sequences:
        if seq.start is not None:
            raise PlanError(f"sequence of {seq.head} starts at {seq.start}: seed 003's plans start at the head's site")
        bad = [st.algorithm for st in seq.steps if st.algorithm not in PLACEMENT]
        if bad:
            raise PlanError(f"sequence of {seq.head} uses {bad[0]}: seed 003's plans join with SP-S (source "
                            f"placement) or SP-D (destination placement) only")
        seps.append(SEP(seq.head, tuple(st.stream for st in seq.steps),
                        tuple(PLACEMENT[st.algorithm] for st in seq.steps)))
    return JEP(tuple(seps))


# ----------------------------------------------------------------------------- the paper's NOS

@dataclass(frozen=True, order=True)
class Op:
    """One atomic operator of Table 2: ``join(a, b)`` (arrivals of stream a probe W_b),
    ``update(a)`` (keep W_a here), ``ship(a, b)`` (send stream a to node b)."""

    kind: str
    a: str
    b: str = ""

    def __str__(self) -> str:
        return f"{self.kind}({self.a})" if self.kind == "update" else f"{self.kind}({self.a},{self.b})"


def label(step_order: tuple[str, ...], head: str, joined: int) -> str:
    """The paper's name of a stream of SEP_head after ``joined`` joins: S_head, then S^head_last."""
    return head if joined == 0 else f"{head}^{step_order[joined - 1]}"


def paper_nos(ir: PlanIR, node_name: Optional[Mapping[str, str]] = None) -> dict[str, dict[str, frozenset[Op]]]:
    """NOS^i_k of every node k and head i, read off the IR (Sect. 4.1, Fig. 2):

    * source placement (SP-S) of the join to S_k, the intermediate at N_p: ``ship(S_k, N_p)`` at
      N_k; ``join(S^i_prev, S_k)`` and ``update(S_k)`` at N_p;
    * destination placement (SP-D): ``ship(S^i_prev, N_k)`` at N_p; ``join`` and ``update`` at N_k;
    * a join where both are at one node: ``join`` and ``update`` there;
    * after the last join: ``ship(S^i_last, N_0)`` where it ran.

    Derived streams are labelled ``S1^S3`` for the paper's S^1_3.  ``node_name`` renames sites
    (default: as they are); the query node is ``N0``."""
    name = dict(node_name or {})
    out: dict[str, dict[str, set[Op]]] = {}

    def add(site: str, head: str, op: Op) -> None:
        out.setdefault(site, {}).setdefault(head, set()).add(op)
    for head, _ in ir.starts:
        steps = ir.steps_of(head)
        order = tuple(st.stream for st in steps)
        for st in steps:
            _step_ops(st, order, add, lambda s: name.get(s, s))
    sites = dict.fromkeys(list(ir.topology.nodes) + list(out))
    return {s: {h: frozenset(ops) for h, ops in out.get(s, {}).items()} for s in sites}


def _step_ops(st: StepOp, order: tuple[str, ...], add: Callable[[str, str, Op], None],
              node: Callable[[str], str]) -> None:
    inp, outp = label(order, st.head, st.j), label(order, st.head, st.j + 1)
    if st.algorithm not in PLACEMENT:
        raise PlanError(f"step {st.sig}: seed 003's NOS has SP-S and SP-D joins only")
    if st.loc == st.home:
        add(st.loc, st.head, Op("join", inp, st.stream))
        add(st.loc, st.head, Op("update", st.stream))
    elif st.algorithm == "SP-S":
        add(st.home, st.head, Op("ship", st.stream, node(st.loc)))
        add(st.loc, st.head, Op("join", inp, st.stream))
        add(st.loc, st.head, Op("update", st.stream))
    else:
        add(st.loc, st.head, Op("ship", inp, node(st.home)))
        add(st.home, st.head, Op("join", inp, st.stream))
        add(st.home, st.head, Op("update", st.stream))
    if st.last:
        add(st.proc, st.head, Op("ship", outp, QUERY_NODE))


def node_nos(per_head: Mapping[str, frozenset[Op]]) -> frozenset[Op]:
    """NOS_k = NOS^1_k ∪ ... ∪ NOS^m_k (Definition 2): shipments and windows shared by several
    sequences appear once."""
    out: set[Op] = set()
    for ops in per_head.values():
        out |= ops
    return frozenset(out)


@dataclass(frozen=True)
class NosChange:
    """What a new plan changes at one node, in the paper's terms and in the IR's.

    ``paper_removed`` / ``paper_added``: the node's operators of Table 2 (NOS_k); the node is
    *affected* (Algorithm 2 sends it the new NOS) when they change.  ``windows``: the streams
    whose window the node newly keeps (an ``update`` it did not have), each to be copied there
    (the paper's "move W_j to N_k"); ``accessible``: windows it keeps in both plans (the paper's
    "make W_j accessible").  ``removed`` / ``added``: IR operator signatures, which change also
    where only an input's link does (a join whose input now comes from another node): the
    runtime switches every node of the query to the new plan generation anyway."""

    site: str
    windows: tuple[str, ...]
    accessible: tuple[str, ...]
    paper_removed: frozenset[Op]
    paper_added: frozenset[Op]
    removed: frozenset[str]
    added: frozenset[str]

    @property
    def affected(self) -> bool:
        return bool(self.paper_removed or self.paper_added)


def nos_changes(old: PlanIR, new: PlanIR) -> dict[str, NosChange]:
    """Per node of either plan, what switching from ``old`` to ``new`` changes there (Algorithm 2's
    "if the new NOS_i is different from the old NOS_i" and the window tracking of Sect. 4.3)."""
    diff = old.diff(new)
    p_old, p_new = paper_nos(old), paper_nos(new)
    held_old = {(r.loc, r.stream) for r in old.replicas}
    held_new = {(r.loc, r.stream) for r in new.replicas}
    out = {}
    for site, removed, added in diff.by_node:
        a, b = node_nos(p_old.get(site, {})), node_nos(p_new.get(site, {}))
        news = tuple(sorted(s for loc, s in held_new if loc == site and (loc, s) not in held_old))
        kept = tuple(sorted(s for loc, s in held_new if loc == site and (loc, s) in held_old))
        out[site] = NosChange(site, news, kept, a - b, b - a, removed, added)
    return out
