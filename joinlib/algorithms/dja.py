"""Semijoins over distinct join values (DJA, Sect. 3.2.2): SM-S2 (the source keeps M_2, join values with
some of their tuples, and asks for the tuples of the others) and SM-D1 (the source keeps V_2, the join
values of the remote window, and ships only the rows whose key is among them).  Both copies are keyed by
the probing step's key and fed DJA updates (v_J, v_C, and SM-S2's s_F).  The runtime's side:
:mod:`joinlib.runtime.algorithms.dja`."""
from __future__ import annotations

from joinlib.algorithms.record import Algorithm, ReplicaKind
from joinlib.algorithms.semijoin import REQUEST
from joinlib.algorithms.simple import ROWS
from joinlib.algorithms.terms import RawTerm, StepParams, cpu_term, probe_term, ship_term

#: M_2@N_1 of SM-S2: partial entries (join values) and full entries (with their tuples)
MIXED = ReplicaKind("SM-S2", update="update", keyed=True)
#: V_2@N_1 of SM-D1: the distinct join values of the remote window, with counts
DJA = ReplicaKind("SM-D1", update="update", keyed=True)


def terms_sm_s2(p: StepParams) -> list[RawTerm]:
    n1 = n2 = 1.0 / p.tau
    dv = p.k2 * (1.0 - p.f12)       # |dV'2| per batch
    dj = p.m2 * (1.0 - p.f21)       # DJA vector entries per batch
    return [
        cpu_term("update W1", p.r1, "c_i"),
        cpu_term("probe M2 (semijoin)", p.r1, "c_h"),
        ship_term("ship dV'2", n1, "fwd", dv * p.P2),
        probe_term("probe W2 with dV'2", n1 * dv, p.w2, p.w2 * p.f2),
        ship_term("ship dW'2", n1, "back", dv * p.F2),
        probe_term("probe V2 with B2", p.r2, p.k2, 1.0),
        cpu_term("probe M2 (join)", p.r1, "c_h"),
        cpu_term("update W2", p.r2, "c_i"),
        cpu_term("update V2", n2 * dj, "c_i"),
        ship_term("ship vJ, vC, sF", n2, "back", dj * p.P2 + p.wp2 * p.f21 * p.F2),
        cpu_term("update M2", n2 * dj, "c_u"),
    ]


def terms_sm_d1(p: StepParams) -> list[RawTerm]:
    n1 = n2 = 1.0 / p.tau
    dj = p.m2 * (1.0 - p.f21)
    return [
        cpu_term("update W1", p.r1, "c_i"),
        probe_term("probe V2@N1 with B1", p.r1, p.k2, 1.0),
        ship_term("ship B'1", n1, "fwd", p.wp1 * p.f12 * p.F1),
        probe_term("probe W2 with B'1", p.r1 * p.f12, p.w2, p.w2 * p.rho),
        probe_term("probe V2 with B2", p.r2, p.k2, 1.0),
        cpu_term("update W2", p.r2, "c_i"),
        cpu_term("update V2 and V2@N1", 2.0 * n2 * dj, "c_i"),
        ship_term("ship vJ, vC", n2, "back", dj * p.P2),
    ]


SM_S2 = Algorithm("SM-S2", at_source=True, flows=REQUEST, replica=MIXED, terms=terms_sm_s2)
SM_D1 = Algorithm("SM-D1", at_source=False, flows=(ROWS,), replica=DJA, terms=terms_sm_d1)
