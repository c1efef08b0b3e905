"""The vocabulary of Appendix B's formulas (Tran & Lee 2010): Table 4's symbols and the terms a formula is
made of.

Each algorithm's record holds its formula (:data:`Formula`): the terms of one step in the symbols of
:class:`StepParams`.  The cost models compute the symbols from a query's statistics
(:func:`joinlib.costs.unit_time.step_params`) and price the terms (:mod:`joinlib.costs.term_models`);
``docs/cost-model.md`` lists the formulas and the readings chosen where the paper is garbled or silent.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple, Union


@dataclass(frozen=True)
class StepParams:
    """Symbols of Table 4 for the one-way join (intermediate "1") -> (next stream "2")."""

    r1: float
    r2: float
    w2: float
    wp1: float
    wp2: float
    f1: float
    f2: float
    f12: float
    f21: float
    F1: float
    F2: float
    P1: float
    P2: float
    k2: float
    m1: float
    m2: float
    tau: float
    rho: float
    src: str  # N_1: where the intermediate lives
    dst: str  # N_2: the next stream's site


class Term(NamedTuple):
    """One term of a formula.

    kind ``cpu``:   ``qty`` operations per second, each costing constant ``arg`` (name);
    kind ``probe``: ``qty`` probes per second into a structure of ``arg`` entries,
                    each finding ``arg2`` matches (nested loop: qty × arg × c_p);
    kind ``ship``:  ``qty`` messages per second in direction ``arg`` ("fwd" = N_1 -> N_2,
                    "back" = N_2 -> N_1) of ``arg2`` bytes each.
    """

    label: str
    kind: str
    qty: float
    arg: Union[str, float]
    arg2: float = 0.0


# Terms are built as plain tuples (label, kind, qty, arg, arg2) — several times faster
# than NamedTuple construction on the planners' hot path; the models' ``terms()`` wraps them.
RawTerm = tuple[str, str, float, Union[str, float], float]
#: an algorithm's formula: the terms of one step
Formula = Callable[[StepParams], list[RawTerm]]


def cpu_term(label: str, qty: float, const: str) -> RawTerm:
    return (label, "cpu", qty, const, 0.0)


def probe_term(label: str, qty: float, size: float, matches: float) -> RawTerm:
    return (label, "probe", qty, size, matches)


def ship_term(label: str, qty: float, direction: str, nbytes: float) -> RawTerm:
    return (label, "ship", qty, direction, nbytes)
