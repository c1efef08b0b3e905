"""What every one-way join algorithm is built from: the step context, the join, and the
sender / replica protocols with their snapshots.

A family module (:mod:`.simple`, :mod:`.semijoin`, :mod:`.dja`) turns a step of the lowered plan
into *phases* placed at sites and lanes (:class:`Placed`), and provides the sender (home side)
and replica (probing side) of the replica kind it owns.  Phases talk to the instance they belong
to through :class:`StepContext` only, so an algorithm never sees the host, the transport or the
clock.
"""
from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional, Protocol, Sequence

from joinlib.kernels import kernel
from joinlib.model import Query, Stream, Tup
from joinlib.plan.ir import ReducerOp, StepOp
from joinlib.protocol.bloom import Bloom, KeySet, Matcher, choose
from joinlib.protocol.messages import Body, Key, KeyBatch, KeyFilter, Row, WindowSnapshot
from joinlib.runtime.lanes import Gate, Phase
from joinlib.runtime.sink import Group
from joinlib.runtime.window import HomeWindow
from joinlib.runtime.windowing import Bound, Progress, valid_range
from joinlib.state.base import KeyList, WindowStore
from joinlib.state.memory import MemoryWindowStore

#: the Avro size kernel (``joinlib/protocol/_avroc.c``) for :func:`keys_bytes`, or None: the Python form
_c: Any = kernel("joinlib.protocol._avroc")
#: a step's probe in C (``joinlib/runtime/_rowsc.c``: ``by_key1``, ``time_groups``), or None: :func:`join`'s Python
#: loops, the definition (tests/property/test_join_c.py runs both)
_rows_c: Any = kernel("joinlib.runtime._rowsc")

Encode = Callable[[Tup], bytes]
Decode = Callable[[bytes], Tup]


class StepContext(Protocol):
    """What a phase may use of its plan instance at one site."""

    site: str
    q: Query
    tau: int
    m: int
    start: int

    def send(self, dst: str, flow: str, epoch: int, body: Body) -> None: ...
    def take(self, flow: str, epoch: int) -> Optional[Body]: ...
    def waits(self, flow: str) -> Optional[tuple[Any, tuple[Any, ...], int]]: ...
    def ready(self, st: StepOp, e: int) -> bool: ...
    def ready_gate(self, st: StepOp) -> Gate: ...
    def rows_in(self, st: StepOp, e: int) -> list[Row]: ...
    def output(self, st: StepOp, e: int, groups: list[Group], final: bool = True) -> None: ...
    def home(self, stream: str) -> HomeWindow: ...
    def sender(self, sig: str) -> Any: ...
    def replica(self, sig: str) -> Any: ...
    def hold(self, key: tuple[Any, ...], value: Any) -> None: ...
    def holds(self, key: tuple[Any, ...]) -> bool: ...
    def release(self, key: tuple[Any, ...]) -> Any: ...


@dataclass(frozen=True)
class Placed:
    """A phase of a step placed at ``site`` in lane ``lane`` (a tuple key: phases with the same
    key at a site share a lane).  ``uses``: the window it reads at its epoch, ``("home",
    stream)`` or ``("replica", sig)``, whose purges its lane holds back."""

    site: str
    lane: tuple[Any, ...]
    phase: Phase
    uses: Optional[tuple[str, str]] = None


class Sender(Protocol):
    """The home side of a replica: what the home node sends to keep it in step."""

    def jump(self, home: HomeWindow, start: int) -> WindowSnapshot:
        """The replica's initial state for a generation starting at epoch ``start``."""

    def tick(self, e: int, batch: Sequence[Tup], bound: Bound) -> Body:
        """The update message of epoch ``e`` (B_e arrived; tuples below ``bound`` left the window)."""

    def snapshot(self, encode: Encode) -> dict[str, Any]: ...
    def restore(self, data: dict[str, Any], decode: Decode) -> None: ...


class Replica(Protocol):
    """The probing side: a replica applies the home's messages in epoch order."""

    def apply(self, e: int, body: Body) -> None: ...
    def snapshot(self, encode: Encode) -> dict[str, Any]: ...
    def restore(self, data: dict[str, Any], decode: Decode) -> None: ...


# ----------------------------------------------------------------------------- key sets

def window_bytes(s: Stream) -> Optional[float]:
    """The bytes of ``s``'s full window by its declared statistics (``rate`` × window ×
    ``tuple_bytes``, or the window's count × ``tuple_bytes``); None when they are not declared."""
    tb = row_bytes_of(s)
    if not tb:
        return None
    if not s.window.is_time:
        return float(s.window.size * tb)
    return s.stats.rate * s.window.size / 1000 * tb if s.stats.rate else None


def stale_key_bytes(q: Query, receiver: ReducerOp, sender: str, tau_ms: int) -> Optional[float]:
    """What a key of ``sender``'s sets kept live an epoch too long costs at ``receiver``, by the declared
    statistics: the receiver's tuples of one key arriving in an epoch (``rate`` × τ × ``tuple_bytes`` × f, f the
    product of the key's attributes' selectivities: :func:`window_bytes`, a key set's ``fp_cost``, per key and
    epoch) times the share of them that also pass the receiver's other filters and so ship
    (:func:`pass_share`).  :func:`joinlib.runtime.algorithms.keysets.key_filter` prices stale keys with it;
    computed once per edge when the reducer is built, as ``fp_cost`` is, since the sender sees neither the
    receiver's rate nor its other neighbours.  None when the rate, the size or a selectivity is not declared."""
    s = q.stream(receiver.stream)
    tb, f = row_bytes_of(s), key_share(s, receiver.edge(sender).mine)
    if not tb or not s.stats.rate or f is None:
        return None
    return s.stats.rate * tau_ms / 1000 * tb * f * pass_share(q, receiver, sender)


def key_share(s: Stream, index: Sequence[int]) -> Optional[float]:
    """The declared share of ``s``'s tuples holding one key of its join values at ``index``: the product of
    their selectivities (taken as independent); None when one is not declared."""
    f = 1.0
    for i in index:
        fi = s.stats.selectivity_of(s.join_attrs[i])
        if fi is None:
            return None
        f *= fi
    return f


def pass_share(q: Query, receiver: ReducerOp, sender: str) -> float:
    """The share of ``receiver``'s tuples let through by ``sender``'s sets that pass its other filters too, by
    the declared statistics: per other neighbour whose sets it takes on other attributes (a tuple matching one
    on the same attributes is taken to match it too), the chance that the neighbour's tuples of about two
    windows (its window's past and the tuple's lifetime) hold the tuple's key, ``1 - (1 - f)^(2 w)``.  An upper
    bound (the neighbour's sets hold only its tuples that pass its own filters); 1 where a statistic is not
    declared."""
    mine, share = set(receiver.edge(sender).mine), 1.0
    for e in receiver.filters:
        if e.stream == sender or set(e.mine) == mine:
            continue
        n = q.stream(e.stream)
        f, wb, tb = key_share(n, e.theirs), window_bytes(n), row_bytes_of(n)
        if f is not None and wb and tb:
            share *= -math.expm1(2 * wb / tb * math.log1p(-f)) if f < 1 else 1.0
    return share


def keys_bytes(keys: Iterable[Key]) -> int:
    """About what ``keys`` take written out (an Avro array of keys): the side of the keys-or-filter
    choice both requests and reductions weigh a Bloom filter against (in C when the Avro size kernel is
    built: the same count, a tenth of the time)."""
    if _c is not None:
        size: int = _c.keys_bytes(keys)
        return size
    n = 1
    for k in keys:   # a loop, not nested sums: this runs for every key set a reduction sends (a cache per key
        n += 1       # cost more than it saved: most keys a request names are new)
        for v in k:
            if isinstance(v, str):   # ASCII, the usual join key: a character a byte (no encoding to count)
                n += (len(v) if v.isascii() else len(v.encode())) + 2
            else:
                n += 9 if isinstance(v, float) else 4
    return n


def row_bytes_of(*streams: Stream) -> Optional[float]:
    """The declared bytes of a row of ``streams`` (``tuple_bytes``, else 5 per attribute, the
    paper's unit); None when a stream's size is not declared."""
    total = 0.0
    for s in streams:
        tb = s.stats.tuple_bytes or (5 * s.stats.attributes if s.stats.attributes else None)
        if not tb:
            return None
        total += tb
    return total


def key_message(keys: list[Key], fpr: float, fp_cost: Optional[float]) -> Body:
    """The keys of a request (SM-S1, SM-S2, SM-D2): written out (a :class:`KeyBatch`), or as a
    Bloom filter (a :class:`KeyFilter` with bits) when that plus the expected cost of its false
    positives is shorter.  A false positive only brings back a tuple that the join then drops.
    ``fp_cost``: what the answer would cost if every candidate passed (:func:`window_bytes` of the
    answering stream); None (statistics not declared) or ``fpr`` 0: always the keys."""
    ks, bloom = choose(keys, fpr or None, keys_bytes, fp_cost)
    if bloom is not None:
        return KeyFilter(0, 0, [], *bloom)
    return KeyBatch(list(ks))


def request(ctx: "StepContext", st: StepOp, keys: list[Key]) -> Body:
    """The request of step ``st`` for ``keys``, answered with tuples of ``st.stream``."""
    return key_message(keys, ctx.q.execution.bloom_fpr, window_bytes(ctx.q.stream(st.stream)))


def key_set(body: Body) -> tuple[Optional[list[Key]], Matcher]:
    """(the keys when they were written out, else None; a membership test) of a request."""
    if isinstance(body, KeyBatch):
        return body.keys, KeySet(keys=tuple(body.keys)).matcher()
    assert isinstance(body, KeyFilter)
    if body.bits:
        return None, KeySet(bloom=Bloom(body.bits, body.hashes, body.n)).matcher()
    return body.keys, KeySet(keys=tuple(body.keys)).matcher()


# ----------------------------------------------------------------------------- rows and joins

def parts(row: Row) -> tuple[Tup, ...]:
    """The base tuples of a row (its non-empty slots), for shipping (a Tup is always truthy, so
    ``filter(None, ...)`` drops exactly the empty slots, in C)."""
    return tuple(filter(None, row))


def row_maker(m: int, st: StepOp, q: Query) -> Callable[[tuple[Tup, ...]], Row]:
    """Rows back from the parts shipped for step ``st`` (in stream position order, one per stream of
    its input): a template per step instead of a loop per row, on the hot path of SP-D / SM-D*."""
    positions = sorted(q.stream(n).pos for n in st.input.streams)
    k = len(positions)
    if positions == list(range(k)):
        pad = (None,) * (m - k)
        return lambda p: p + pad
    if k == 1:
        pre, post = (None,) * positions[0], (None,) * (m - positions[0] - 1)
        return lambda p: pre + p + post
    return lambda p: make_row(m, p)


def make_row(m: int, tups: Iterable[Tup]) -> Row:
    row: list[Optional[Tup]] = [None] * m
    for t in tups:
        row[t.pos] = t
    return tuple(row)


def by_key(st: StepOp, rows: list[Row]) -> dict[Key, list[Row]]:
    """Rows grouped by the key they probe ``st``'s stream with (rows whose own values disagree
    with a second predicate on the same attribute are dropped: they cannot match)."""
    out: dict[Key, list[Row]] = {}
    pk = st.key.probe_key
    for row in rows:
        k = pk(row)
        if k is not None:
            out.setdefault(k, []).append(row)
    return out


def join(ctx: StepContext, st: StepOp, rows: list[Row], lookup: Callable[[list[Key]], dict[Key, KeyList]],
         progress: Optional[Progress]) -> list[Group]:
    """The T-limit join of ``rows`` with the probed stream's tuples found by ``lookup``: for each
    row, the contiguous range of its key's list that lies in the window as seen by the row's
    head tuple (two bisections).  Rows with the same key and head time get the same range, as one
    list object (groups are read, never changed): a later step of a chain probes once per head for
    all of its rows, and the sink encodes the list's ids once."""
    bykey = by_key(st, rows)
    if not bykey:
        return []
    stream, hp = ctx.q.streams[st.pos], st.head_pos
    groups: list[Group] = []
    found = lookup(list(bykey))
    if not stream.window.is_time:
        for k, kl in found.items():
            for row in bykey[k]:
                lo, hi = valid_range(kl, stream, row[hp], progress, ctx.tau)
                if lo < hi:
                    groups.append((row, kl.tups[lo:hi]))
        return groups
    # a time window (the hot path): the same two bisections as valid_range
    return time_groups(bykey, found, hp, stream.window.size, stream.pos < st.head_pos)


def time_groups(bykey: dict[Key, list[Row]], found: dict[Key, KeyList], hp: int, size: int,
                right: bool) -> list[Group]:
    """:func:`join`'s groups for a time window of ``size``: for each key found and each of its rows, the key's
    tuples in the window the row's head (slot ``hp``) sees -- ``right``: the probed stream precedes the head on
    equal ts (what ``_rowsc.time_groups`` does in C)."""
    groups: list[Group] = []
    upper = bisect_right if right else bisect_left
    for k, kl in found.items():
        ts, tups, first = kl.ts, kl.tups, kl.lo
        seen, got = None, None
        for row in bykey[k]:
            h = row[hp].ts
            if h != seen:   # rows of one head come together (a later step's rows): one range, one list, shared
                seen = h
                hi = upper(ts, h, first)
                lo = bisect_left(ts, h - size, first, hi)
                got = tups[lo:hi] if lo < hi else None
            if got is not None:
                groups.append((row, got))
    return groups


def store_join(ctx: StepContext, st: StepOp, rows: list[Row], store: WindowStore,
               progress: Optional[Progress]) -> list[Group]:
    index = st.key.index
    mem = getattr(store, "mem", store)   # a store that reads from a memory mirror (the Redis stores) reads there
    if _rows_c is not None and type(mem) is MemoryWindowStore and not st.key.checks and len(st.key.sources) == 1:
        stream = ctx.q.streams[st.pos]
        if stream.window.is_time and rows:   # the whole of join's time-window path, in one call
            p, i = st.key.sources[0]
            got = _rows_c.time_join(rows, p, i, mem.table(index), st.head_pos, stream.window.size,
                                    stream.pos < st.head_pos)
            if got is not None:
                return got  # type: ignore[no-any-return]
    return join(ctx, st, rows, lambda keys: store.lookup_many(index, keys), progress)


def own_lane(st: StepOp, phase: str) -> tuple[str, str, str]:
    return ("step", st.sig, phase)
