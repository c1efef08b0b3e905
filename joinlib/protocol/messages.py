"""Messages exchanged between nodes.

Every message travels in an :class:`Envelope` on a *flow* of one plan instance: a directed
channel of the lowered plan (:mod:`joinlib.plan.ir`) carrying exactly one message per batch epoch,
possibly empty, in epoch order; that is what lets a receiver know an epoch is complete without
trusting a latency bound.  An instance is (query, partition, generation): two generations of a
query's plan run side by side during a switch, each on its own flows.

The three kinds of the paper: ``full`` tuples (:class:`TupleBatch`), ``partial`` tuples, i.e.
join-attribute values (:class:`KeyBatch`), and ``update`` messages (:class:`ExpiryUpdate` for
SM-S1's FIFO count, :class:`DjaUpdate` for the DJA vectors v_J, v_C and the set s_F of SM-S2 /
SM-D1).  A fourth, ``snapshot`` (:class:`WindowSnapshot`), jump-starts a replica of a generation
installed mid-stream with the window state it would have had.  Wire encoding: :mod:`joinlib.protocol.wire`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Union

from joinlib.model import Tup

Key = tuple[Any, ...]  # a composite join key: values of the probed attributes, in order
Row = tuple[Any, ...]  # one (intermediate) result: a Tup or None per stream position


@dataclass(slots=True)
class TupleBatch:
    """Full tuples: each row is the tuple of base tuples of one (intermediate) result,
    ordered by stream position; a base-stream batch has one-element rows."""

    rows: list[tuple[Tup, ...]] = field(default_factory=list)
    kind: ClassVar[str] = "full"


@dataclass(slots=True)
class KeyBatch:
    """Partial tuples: distinct join keys (K_1, ΔV'_2, K'_1)."""

    keys: list[Key] = field(default_factory=list)
    kind: ClassVar[str] = "partial"


@dataclass(slots=True)
class ExpiryUpdate:
    """SM-S1's window update (Algorithm 8): ``expired`` = k, the number of tuples
    already shipped to the replica that left the window.  ``arrivals`` lists the
    timestamps of the epoch's new tuples, sent only for tuple-count windows, where
    the replica needs them to evaluate the count limit relative to a head tuple."""

    expired: int = 0
    arrivals: list[int] = field(default_factory=list)
    kind: ClassVar[str] = "update"


@dataclass(slots=True)
class DjaUpdate:
    """SM-S2 / SM-D1 window update (Algorithm 9): DJA value vector v_J (the new values), the
    count changes ``vc`` -- unlike the paper's whole v_C, only the entries that gained or lost
    tuples, as flattened (gap, count) pairs over V order (``dja.count_changes``) -- and (SM-S2
    only) the full-tuple set s_F; ``arrivals`` as above."""

    vj: list[Key] = field(default_factory=list)
    vc: list[int] = field(default_factory=list)
    sf: list[Tup] = field(default_factory=list)
    arrivals: list[int] = field(default_factory=list)
    kind: ClassVar[str] = "update"


@dataclass(slots=True)
class WindowSnapshot:
    """The state a replica of a generation starting at epoch E would have had at the end of
    epoch E - 1 (sent on the replica's update flow with epoch E - 1): ``base`` = the number of
    tuples of the stream before epoch E (the count limit of tuple windows), ``tuples`` = the
    window tuples still alive at E (SP-S), ``keys`` / ``counts`` = the distinct join values of
    the window and their counts, in V_2 order (SM-S2, SM-D1)."""

    base: int = 0
    tuples: list[Tup] = field(default_factory=list)
    keys: list[Key] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    kind: ClassVar[str] = "snapshot"


@dataclass(slots=True)
class KeyFilter:
    """A key set (kind ``partial``): a reduction's on one edge of its tree -- the keys, on the
    edge's attributes, of the sender's tuples that newly pass every filter but the receiver's --
    or a semijoin's key request; written out (``keys``) or as a Bloom filter (``bits``,
    ``hashes``, ``n`` keys) when that is shorter.  Epochs count back from the envelope's epoch e
    (a byte each, however long the stream runs): ``back`` to the latest arrival epoch of the keys
    (0 when there are none), ``live`` to the oldest arrival epoch still in the sender's window --
    a receiver forgets the sets older than that.  ``ages``: written-out keys of several arrival epochs
    as runs ``[age, count, age, count, ...]`` over ``keys`` in order, age = e - the arrival epoch of the
    latest tuple with that key; a receiver forgets each run when its tuples leave the sender's window,
    not when the set's latest does (empty: every key is at ``back``)."""

    back: int = 0
    live: int = 0
    keys: list[Key] = field(default_factory=list)
    bits: bytes = b""
    hashes: int = 0
    n: int = 0
    ages: list[int] = field(default_factory=list)
    kind: ClassVar[str] = "partial"


@dataclass(slots=True)
class ShippedBatch:
    """A reduction's tuples for the result site (kind ``full``): the sender's tuples that newly
    pass every filter (new ones and older ones), and, for tuple-count windows, the arrival
    timestamps of all of the epoch's tuples (the count limit needs every tuple, shipped or not)."""

    tuples: list[Tup] = field(default_factory=list)
    arrivals: list[int] = field(default_factory=list)
    kind: ClassVar[str] = "full"


Body = Union[TupleBatch, KeyBatch, ExpiryUpdate, DjaUpdate, WindowSnapshot, KeyFilter, ShippedBatch]

#: an instance of a query's plan: (query, partition, generation)
InstanceKey = tuple[str, int, int]


@dataclass(slots=True)
class Envelope:
    """One message on flow ``flow`` of instance (``query``, ``part``, ``gen``) for batch
    ``epoch``, sent by site ``src`` to ``dst``.  ``query`` is not on the wire: the topic
    (``node.<query>.<dst>.from.<src>``) names it."""

    src: str
    dst: str
    flow: int
    epoch: int
    body: Body
    part: int = 0
    gen: int = 0
    query: str = ""

    @property
    def kind(self) -> str:
        return self.body.kind

    @property
    def instance(self) -> InstanceKey:
        return (self.query, self.part, self.gen)
