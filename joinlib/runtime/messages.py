"""Messages exchanged between nodes.

Every message travels in an :class:`Envelope` on a *flow*: a numbered, directed
channel of the compiled plan (see :mod:`joinlib.physical`).  Each flow carries exactly
one message per batch epoch, possibly empty, in epoch order; that is what lets a
receiver know an epoch is complete without trusting a latency bound.

The three kinds of the paper: ``full`` tuples (:class:`TupleBatch`), ``partial``
tuples, i.e. join-attribute values (:class:`KeyBatch`), and ``update`` messages
(:class:`ExpiryUpdate` for SM-S1's FIFO count, :class:`DjaUpdate` for the DJA
vectors v_J, v_C and the set s_F of SM-S2 / SM-D1).  Wire encoding: :mod:`joinlib.wire`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

from ..model import Tup

Key = tuple  # a composite join key: values of the probed attributes, in order


@dataclass(slots=True)
class TupleBatch:
    """Full tuples: each row is the tuple of base tuples of one (intermediate) result,
    ordered by stream position; a base-stream batch has one-element rows."""

    rows: list[tuple[Tup, ...]] = field(default_factory=list)
    kind = "full"


@dataclass(slots=True)
class KeyBatch:
    """Partial tuples: distinct join keys (K_1, ΔV'_2, K'_1)."""

    keys: list[Key] = field(default_factory=list)
    kind = "partial"


@dataclass(slots=True)
class ExpiryUpdate:
    """SM-S1's window update (Algorithm 8): ``expired`` = k, the number of tuples
    already shipped to the replica that left the window.  ``arrivals`` lists the
    timestamps of the epoch's new tuples, sent only for tuple-count windows, where
    the replica needs them to evaluate the count limit relative to a head tuple."""

    expired: int = 0
    arrivals: list[int] = field(default_factory=list)
    kind = "update"


@dataclass(slots=True)
class DjaUpdate:
    """SM-S2 / SM-D1 window update (Algorithm 9): DJA value vector v_J, DJA count
    vector v_C, and (SM-S2 only) the full-tuple set s_F; ``arrivals`` as above."""

    vj: list[Key] = field(default_factory=list)
    vc: list[int] = field(default_factory=list)
    sf: list[Tup] = field(default_factory=list)
    arrivals: list[int] = field(default_factory=list)
    kind = "update"


Body = Union[TupleBatch, KeyBatch, ExpiryUpdate, DjaUpdate]


@dataclass(slots=True)
class Envelope:
    """One message on flow ``flow`` for batch ``epoch``, sent by site ``src`` to ``dst``."""

    src: str
    dst: str
    flow: int
    epoch: int
    body: Body

    @property
    def kind(self) -> str:
        return self.body.kind
