"""A reducer's key set as it travels: the keys of the tuples that newly pass, and the message that carries them.

:class:`Outgoing` is a key set as a reducer makes it; :func:`key_filter` chooses between written-out keys with
their ages (:func:`age_runs`), written-out keys and a Bloom filter, whichever the sender prices lowest;
:func:`key_matchers` reads a received one back as (tag, matcher) groups.  Kept apart from the reducer's
bookkeeping (:mod:`.reduce`) because the look-ahead sets (:mod:`joinlib.runtime.ahead`) make and send the same
messages.
"""
from __future__ import annotations

from operator import itemgetter
from typing import Any, NamedTuple, Optional, Sequence

from joinlib.kernels import kernel
from joinlib.model import Tup
from joinlib.protocol import bloom
from joinlib.protocol.avro import encode_long
from joinlib.protocol.bloom import Bloom, Matcher, choose, filter_cost
from joinlib.protocol.messages import Key, KeyFilter
from joinlib.runtime.algorithms.base import keys_bytes

#: The Bloom kernels (``joinlib/protocol/_bloomc.c``) for :func:`key_filter` -- the whole choice in one call, on
#: bloom.py's digest dictionary and filter prices -- or None: :func:`key_filter_py` (the same messages;
#: tests/property/test_keyfilter_c.py compares them).
_c: Any = kernel("joinlib.protocol._bloomc")
#: :func:`tups_outgoing` in C (``_reducerc.c``), or None: its Python form
_red_c: Any = kernel("joinlib.runtime.algorithms._reducerc")


class Outgoing(NamedTuple):
    """A key set as a reducer makes it, before :func:`key_filter` chooses between keys and a filter: the keys
    of the tuples that newly pass (window order, repeats kept), the epochs back from the message's to the
    latest arrival among them and to the oldest arrival in the window, and per key the epochs back to its
    own tuple's arrival."""

    keys: list[Key]
    back: int
    live: int
    ages: list[int] = []


def key_filter(out: Outgoing, fpr: Optional[float], fp_cost: Optional[float],
               stale: Optional[float] = None) -> KeyFilter:
    """The message of a key set: of its three forms, the one the sender prices lowest.  Written-out keys of
    several arrival epochs may carry their ages (:func:`age_runs`): each key then lives at the receiver as long
    as its own tuple is in the sender's window.  Under one tag (``back``, the youngest age) -- written-out keys
    or a Bloom filter, :func:`joinlib.protocol.bloom.choose`'s choice as for a set of one epoch -- a key of age
    a stays live a - back epochs longer than its tuple, and lets through the receiver's tuples of that key
    arriving then: :func:`stale_bytes` prices that, ``stale`` (what the receiver's tuples of one key arriving in
    an epoch ship, by the declared statistics: :func:`joinlib.runtime.algorithms.base.stale_key_bytes`) per key
    and epoch too long.  The ages are sent when they cost no more than the cheaper one-tag form plus its stale
    passes; ``stale`` None (not declared): always, as the exact liveness is then not priced.  A set of one epoch
    is as it was before ages (the runs cost bytes and save nothing).  In one kernel call when the Bloom kernels
    are built (a reduction sends a set on every edge every epoch: about 2 us for ten keys, against 10-14 in
    Python); what the kernel declines, :func:`key_filter_py` makes."""
    if _c is not None:
        body: Optional[KeyFilter] = _c.key_filter(out, fpr, fp_cost, stale, KeyFilter, bloom.filter_cost,
                                                  bloom._DIGESTS, bloom._remember)
        if body is not None:
            return body
    return key_filter_py(out, fpr, fp_cost, stale)


def key_filter_py(out: Outgoing, fpr: Optional[float], fp_cost: Optional[float],
                  stale: Optional[float] = None) -> KeyFilter:
    """:func:`key_filter` in Python: the ages' runs when they are priced lowest, else
    :func:`joinlib.protocol.bloom.choose`'s keys or filter."""
    keys, runs = age_runs(out.keys, out.ages)
    if runs:
        exact = keys_bytes(keys)
        one_tag: float = exact
        if fpr is not None and fp_cost is not None:
            one_tag = min(exact, filter_cost(len(keys), fpr, fp_cost)[2])
        if stale is None or exact + runs_bytes(runs) <= one_tag + stale_bytes(runs, out.back, float(stale)):
            return KeyFilter(out.back, out.live, keys, ages=runs)
    ks, bloom = choose(out.keys, fpr, keys_bytes, fp_cost)
    if bloom is not None:
        return KeyFilter(out.back, out.live, [], *bloom)
    return KeyFilter(out.back, out.live, list(ks))


def runs_bytes(runs: Sequence[int]) -> int:
    """What the runs add to a set written out: their array of longs (the ``bloom`` union's branch byte is there
    either way)."""
    return 1 + len(encode_long(len(runs))) + sum(len(encode_long(x)) for x in runs)


def stale_bytes(runs: Sequence[int], back: int, stale: float) -> float:
    """The receiver's bytes that the keys of ``runs`` let through when sent under one tag, ``back``: each key of
    age a is live a - back epochs longer than its tuple, at ``stale`` bytes per key and epoch."""
    late = sum((a - back) * n for a, n in zip(runs[::2], runs[1::2], strict=True))
    return late * stale


def age_runs(keys: Sequence[Key], ages: Sequence[int]) -> tuple[list[Key], list[int]]:
    """The distinct keys ordered by age, each at the age of its latest tuple (the smallest), and the runs
    ``[age, count, ...]`` over them; no runs when every key has the same age (``back`` says it)."""
    if len(set(ages)) < 2:
        return [], []
    youngest: dict[Key, int] = {}
    for k, a in zip(keys, ages, strict=True):
        if a < youngest.get(k, a + 1):
            youngest[k] = a
    order = sorted(youngest, key=youngest.__getitem__)   # stable: window order within an age
    runs: list[int] = []
    for k in order:
        a = youngest[k]
        if runs and runs[-2] == a:
            runs[-1] += 1
        else:
            runs += [a, 1]
    return (order, runs) if len(runs) > 2 else ([], [])


def key_matchers(e: int, body: KeyFilter) -> list[tuple[int, Matcher]]:
    """A received key set as (tag, matcher) groups: one, tagged ``e - back``, or one per run of ages."""
    if body.bits:
        return [(e - body.back, Matcher.of(bloom=Bloom(body.bits, body.hashes, body.n)))]
    if not body.ages:
        return [(e - body.back, Matcher.of(body.keys))]
    out, i, runs = [], 0, body.ages
    for a, n in zip(runs[::2], runs[1::2], strict=True):
        out.append((e - a, Matcher.of(body.keys[i:i + n])))
        i += n
    if i != len(body.keys):
        raise ValueError(f"a key set's ages count {i} keys, it has {len(body.keys)}")
    return out


def tups_outgoing(tups: list[Tup], e: int, tau: int, positions: tuple[int, ...], live: int) -> Outgoing:
    """The set of tuples that all pass at once (a look-ahead's, a pass-through reducer's): their keys at
    ``positions``, their ages at epoch e (least: 0 when there are none) and ``live``, the epochs back to the
    window's oldest arrival."""
    if _red_c is not None:
        return _red_c.tups_outgoing(tups, e, tau, positions, live, Outgoing)  # type: ignore[no-any-return]
    ages = [e - t.ts // tau for t in tups]
    return Outgoing(keys_at(positions, tups), min(ages, default=0), live, ages)


def keys_at(positions: Sequence[int], tups: Sequence[Tup]) -> list[Key]:
    """The tuples' keys at ``positions`` of their join values (one look-up per tuple)."""
    if len(positions) == 1:
        i = positions[0]
        return [(t.key[i],) for t in tups]
    get = itemgetter(*positions)
    return [get(t.key) for t in tups]
