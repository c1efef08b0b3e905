"""Simple joins: SP-S (the home ships every batch to a full copy at the source, which probes it) and SP-D
(the source ships its rows to the home, which probes its window); and ``central``, SP-S everywhere at one
site.  The runtime's side: :mod:`joinlib.runtime.algorithms.simple`."""
from __future__ import annotations

from joinlib.algorithms.record import Algorithm, Flow, ReplicaKind, Shape
from joinlib.algorithms.terms import RawTerm, StepParams, cpu_term, probe_term, ship_term

#: W_2@N_1 of SP-S: a complete copy of the remote window, fed every batch B_2
FULL = ReplicaKind("SP-S", update="full")


def terms_sp_s(p: StepParams) -> list[RawTerm]:
    n2 = 1.0 / p.tau  # r_2 / wp_2
    return [
        cpu_term("update W1", p.r1, "c_u"),
        probe_term("probe W2@N1 with B1", p.r1, p.w2, p.w2 * p.rho),
        ship_term("ship B2 to N1", n2, "back", p.wp2 * p.F2),
        cpu_term("update W2@N1", p.r2, "c_u"),
    ]


def terms_sp_d(p: StepParams) -> list[RawTerm]:
    n1 = 1.0 / p.tau  # r_1 / wp_1
    return [
        cpu_term("update W1", p.r1, "c_i"),
        ship_term("ship B1 to N2", n1, "fwd", p.wp1 * p.F1),
        probe_term("probe W2 with B1", p.r1, p.w2, p.w2 * p.rho),
        cpu_term("update W2", p.r2, "c_u"),
    ]


#: the source's rows shipped to the home, which probes its window with them (SP-D, SM-D1, SM-D2's last leg)
ROWS = Flow("data", "fwd", "full")

SP_S = Algorithm("SP-S", at_source=True, flows=(), replica=FULL, terms=terms_sp_s)
SP_D = Algorithm("SP-D", at_source=False, flows=(ROWS,), replica=None, terms=terms_sp_d)

#: ship every stream to one site and join there with SP-S (what centralized engines do)
CENTRAL = Shape("central", step=SP_S, replica=FULL)
