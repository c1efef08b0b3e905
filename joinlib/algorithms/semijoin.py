"""Semijoins with a key round trip: SM-S1 (the source ships its keys, the home answers with the matching
tuples it never shipped before, kept in a FIFO copy W'_2 at the source) and SM-D2 (keys to the home, the
matching keys back, then the rows with those keys to the home).  The runtime's side:
:mod:`joinlib.runtime.algorithms.semijoin`."""
from __future__ import annotations

from joinlib.algorithms.record import Algorithm, Flow, ReplicaKind
from joinlib.algorithms.simple import ROWS
from joinlib.algorithms.terms import RawTerm, StepParams, cpu_term, probe_term, ship_term

COUNT_BYTES = 8               # SM-S1's expiry count message (the paper's "c")

#: W'_2@N_1 of SM-S1: the tuples shipped in answers, expired by a count k per epoch (Algorithm 8)
FIFO = ReplicaKind("SM-S1", update="update")


def terms_sm_s1(p: StepParams) -> list[RawTerm]:
    n1 = n2 = 1.0 / p.tau
    return [
        cpu_term("update W1", p.r1, "c_i"),
        ship_term("ship K1", n1, "fwd", p.m1 * p.P1),
        probe_term("probe W2 with K1", n1 * p.m1, p.w2, p.w2 * p.f2),
        ship_term("ship dW'2", n1, "back", p.wp2 * p.f21 * p.F2),
        cpu_term("insert dW'2 into W'2", n1 * p.wp2 * p.f21, "c_i"),
        cpu_term("update W2", p.r2, "c_i"),
        probe_term("probe W'2 with B1", p.r1, p.w2 * p.f21, p.w2 * p.rho),
        ship_term("ship expiry count", n2, "back", COUNT_BYTES),
    ]


def terms_sm_d2(p: StepParams) -> list[RawTerm]:
    n1 = 1.0 / p.tau
    return [
        cpu_term("update W1", p.r1, "c_i"),
        ship_term("ship K1", n1, "fwd", p.m1 * p.P1),
        probe_term("probe W2 with K1", n1 * p.m1, p.w2, p.w2 * p.f2),
        ship_term("ship K'1", n1, "back", p.m1 * p.f12 * p.P1),
        probe_term("probe B1 with K'1", n1 * p.m1 * p.f12, p.wp1, p.wp1 * p.f1),
        ship_term("ship B'1", n1, "fwd", p.wp1 * p.f12 * p.F1),
        probe_term("probe Temp with B'1", n1 * p.wp1 * p.f12, p.w2, p.w2 * p.rho),
        cpu_term("update W2", p.r2, "c_u"),
    ]


#: the request and its answer (SM-S1, SM-S2): keys to the home, tuples back
REQUEST = (Flow("req", "fwd", "partial"), Flow("resp", "back", "full"))

SM_S1 = Algorithm("SM-S1", at_source=True, flows=REQUEST, replica=FIFO, terms=terms_sm_s1)
SM_D2 = Algorithm("SM-D2", at_source=False, replica=None, terms=terms_sm_d2, flows=(
    Flow("keys", "fwd", "partial"), Flow("match", "back", "partial"), ROWS))
