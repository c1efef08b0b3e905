"""The plan-level byte model, priced one sequence at a time: for searches that try many plans
which differ in one head's sequence (``auto``'s coordinate descent).

:func:`~joinlib.costs.model.estimate_ir` lowers the whole plan and walks every sequence for each
plan it prices: at 8 streams that is a few ms, and the descent prices thousands of plans.  But
steps are never shared between sequences (a step's operator is named by its head's intermediate),
only replicas are.  So a plan of sequences (no reduction) costs

    Σ_sequences (its cross-site steps that probe no replica)
    + Σ_replicas (the replica's update + the flows of every step probing it, with its share)

where a sequence contributes the first term alone (:class:`SeqParts`, computed once per sequence)
and a replica's term depends only on which steps use it (:meth:`PlanPricer.group`, memoised on
their signatures).  Replacing one head's sequence changes only the replicas it or its replacement
touch (:meth:`PlanPricer.delta`).  The sums are the same terms as :func:`estimate_ir`'s, added in
another order (equal up to rounding); :meth:`PlanPricer.plan_cost` adds them in its order (equal).
"""
from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Optional

from joinlib.costs.encoding import Encoding
from joinlib.costs.flows import Msg, Probe, replica_flows, step_flows
from joinlib.costs.inputs import Inputs
from joinlib.costs.model import Walks, price, walk
from joinlib.costs.unit_time import interval_s
from joinlib.plan.ir import lower
from joinlib.plan.logical import Plan, Sequence

Link = tuple[str, str]


@dataclass(frozen=True)
class Use:
    """A cross-site step probing a replica: what its flows need."""

    sig: str                              # the step's operator signature (head, joined set, location, stream)
    algorithm: str
    probe: Probe
    links: tuple[tuple[str, Link], ...]   # flow name -> (src, dst)


@dataclass(frozen=True)
class Replica:
    """A replica a sequence needs, and the link of its update flow."""

    sig: str
    kind: str
    stream: str
    index: tuple[int, ...]
    link: Link


@dataclass(frozen=True)
class SeqParts:
    """One sequence's share of the model: its replica-free steps' bytes per second, the replicas it
    creates (its start's and its steps'), and per replica the steps that probe it, in step order;
    ``steps``: every cross-site step in order, with the replica it probes (None: none)."""

    fixed: float
    replicas: dict[str, Replica]
    uses: dict[str, tuple[Use, ...]]
    steps: tuple[tuple[Use, Optional[str]], ...] = ()


class PlanPricer:
    """Bytes per second of plans of sequences (no reduction), from :class:`SeqParts` and memoised
    replica groups: equal to :meth:`~joinlib.costs.model.WireModel.plan_cost` up to rounding."""

    def __init__(self, inputs: Inputs, enc: Encoding) -> None:
        self.inputs, self.enc = inputs, enc
        self.query = inputs.query
        self.tau = interval_s(self.query)
        self._parts: dict[Sequence, SeqParts] = {}
        self._groups: dict[tuple[str, tuple[str, ...]], float] = {}
        self._walks: Walks = {}
        self._terms: dict[tuple[str, tuple[int, ...]], tuple[float, tuple[SeqParts, ...]]] = {}

    def parts(self, seq: Sequence) -> SeqParts:
        hit = self._parts.get(seq)
        if hit is None:
            hit = self._parts[seq] = self._lower(seq)
        return hit

    def _lower(self, seq: Sequence) -> SeqParts:
        q = self.query
        ir = lower(q, Plan((seq,)))
        fixed, uses = 0.0, dict[str, tuple[Use, ...]]()
        steps = []
        for sig, (st, pr) in walk(q, ir, self._walks).items():
            links = tuple((name, (ir.flow(f).src, ir.flow(f).dst)) for name, f in st.flows)
            use = Use(sig, st.algorithm, pr, links)
            steps.append((use, st.replica))
            if st.replica is None:
                fixed += self._flows(use, 0.0)
            else:
                uses[st.replica] = uses.get(st.replica, ()) + (use,)
        reps: dict[str, Replica] = {}
        for r in ir.replicas:
            f = ir.update_flow(r)
            reps[r.sig] = Replica(r.sig, r.kind, r.stream, r.index, (f.src, f.dst))
        return SeqParts(fixed, reps, uses, tuple(steps))

    def _flows(self, use: Use, share: float) -> float:
        total = 0.0
        for m in self._messages(use, share):
            total += price(self.enc, *m)
        return total / self.tau

    def _messages(self, use: Use, share: float) -> list[tuple[str, str, Msg]]:
        """The step's messages, each with its link (src, dst, message)."""
        links = dict(use.links)
        return [(*links[m.name], m) for m in step_flows(self.query, use.algorithm, use.probe, share, self.enc)]

    def plan_cost(self, seqs: Iterable[Sequence]) -> float:
        """:meth:`~joinlib.costs.model.WireModel.plan_cost` of the plan of ``seqs`` (validated, no reduction): the
        flows :func:`~joinlib.costs.model.estimate_ir` finds, priced and added in its order (replicas' updates
        in the order the sequences create them, then every cross-site step's flows in plan order), so the
        same float -- from the sequences' parts, which the descent shares, instead of lowering the plan."""
        parts = [self.parts(s) for s in seqs]
        reps: dict[str, Replica] = {}
        users: dict[str, list[Use]] = {}
        for p in parts:
            for sig, rep in p.replicas.items():
                reps.setdefault(sig, rep)
            for use, probed in p.steps:
                if probed is not None:
                    users.setdefault(probed, []).append(use)
        flows: list[float] = []
        shares: dict[str, float] = {}
        for sig, rep in reps.items():
            mine = users.get(sig, [])
            msg, split = replica_flows(self.query, rep.kind, rep.stream, rep.index, [u.probe for u in mine],
                                       self.enc)
            shares.update(zip((u.sig for u in mine), split, strict=True))
            flows.append(price(self.enc, *rep.link, msg) / self.tau)
        for p in parts:
            for use, _ in p.steps:
                flows.extend(price(self.enc, *m) / self.tau for m in self._messages(use, shares.get(use.sig, 0.0)))
        return sum(flows)

    def group(self, rep: Replica, users: tuple[Use, ...]) -> float:
        """A replica's update and the flows of the steps probing it (in plan order)."""
        key = (rep.sig, tuple(u.sig for u in users))
        hit = self._groups.get(key)
        if hit is None:
            msg, shares = replica_flows(self.query, rep.kind, rep.stream, rep.index, [u.probe for u in users],
                                        self.enc)
            hit = price(self.enc, *rep.link, msg) / self.tau
            hit += sum(self._flows(u, s) for u, s in zip(users, shares, strict=True))
            if len(self._groups) > 200_000:
                self._groups.clear()
            self._groups[key] = hit
        return hit

    def term(self, sig: str, parts: list[SeqParts]) -> float:
        """The replica ``sig``'s term in a plan whose sequences that create or probe it are ``parts``, in
        plan order (0: none creates it).  Memoised on the parts' identities (they stay alive with their
        entry): the descent prices the same replica with the same sequences in many trials."""
        key = (sig, tuple(map(id, parts)))
        hit = self._terms.get(key)
        if hit is None:
            rep: Optional[Replica] = None
            users: tuple[Use, ...] = ()
            for p in parts:
                rep = rep or p.replicas.get(sig)   # the first sequence to create it, in plan order
                users += p.uses.get(sig, ())
            if len(self._terms) > 200_000:
                self._terms.clear()
            hit = self._terms[key] = (self.group(rep, users) if rep is not None else 0.0, tuple(parts))
        return hit[0]

    def cost(self, seqs: Iterable[Sequence]) -> float:
        """Bytes per second of the plan of ``seqs`` (in plan order)."""
        return Ensemble(self, [self.parts(s) for s in seqs]).cost()


class Ensemble:
    """A plan under change, one head at a time: which sequences create and probe each replica, so
    that the cost of replacing one sequence is the change in the replicas it touches (:meth:`delta`)."""

    def __init__(self, pricer: PlanPricer, parts: list[SeqParts]) -> None:
        self.pricer = pricer
        self.parts = list(parts)
        # the plan as it stands, kept until it changes (the descent tries many replacements between two
        # changes): each replica's term, and which sequences create or probe each replica
        self._terms: dict[str, float] = {}
        self._holders: Optional[dict[str, list[int]]] = None
        #: each trial's delta, (i, id(new)) -> (new, delta): a descent round that changes nothing after a head
        #: tries the same replacements again in the next round (a third of its trials at 8 streams)
        self._deltas: dict[tuple[int, int], tuple[SeqParts, float]] = {}

    def _group(self, sig: str, swap: int = -1, new: Optional[SeqParts] = None) -> float:
        """The replica ``sig``'s term, sequence ``swap`` replaced by ``new`` (0: no sequence creates it).
        Only the sequences that create or probe it contribute, taken in plan order."""
        if new is None or swap < 0:
            hit = self._terms.get(sig)
            if hit is None:
                hit = self._terms[sig] = self.pricer.term(sig, [self.parts[j] for j in self._holding(sig)])
            return hit
        holders = self._holding(sig)
        parts = [self.parts[j] for j in holders if j != swap]
        parts.insert(bisect_left(holders, swap), new)   # the holders are in plan order
        return self.pricer.term(sig, parts)

    def _holding(self, sig: str) -> list[int]:
        """The sequences that create or probe replica ``sig``, in plan order."""
        if self._holders is None:
            self._holders = {}
            for j, p in enumerate(self.parts):
                for s in dict.fromkeys([*p.replicas, *p.uses]):
                    self._holders.setdefault(s, []).append(j)
        return self._holders.get(sig, [])

    def cost(self) -> float:
        sigs = dict.fromkeys(sig for p in self.parts for sig in p.replicas)
        return sum(p.fixed for p in self.parts) + sum(self._group(sig) for sig in sigs)

    def delta(self, i: int, new: SeqParts) -> float:
        """The change in cost when sequence ``i`` is replaced by ``new``."""
        hit = self._deltas.get((i, id(new)))
        if hit is not None and hit[0] is new:
            return hit[1]
        old = self.parts[i]
        d = new.fixed - old.fixed
        for sig in dict.fromkeys([*old.replicas, *new.replicas]):
            d += self._group(sig, i, new) - self._group(sig)
        self._deltas[(i, id(new))] = (new, d)
        return d

    def replace(self, i: int, new: SeqParts) -> None:
        self.parts[i] = new
        self._terms.clear()
        self._deltas.clear()
        self._holders = None


__all__ = ["PlanPricer", "Ensemble", "SeqParts", "Use", "Replica"]
