"""Key sets carry each key's own age (issue 30): a tuple that passes late -- its partner arrived after it --
goes out in the same set as the epoch's new tuples, and without its age its key would stay live at the
receiver until the newest of them left the window.  ``bench/bytes_breakdown.py`` measured that as 39,561 of
chain4-f0.001's 158,239 non-contributing bytes."""
from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from joinlib.model import Tup
from joinlib.plan import logical as plans
from joinlib.plan.ir import lower
from joinlib.protocol.bloom import choose
from joinlib.protocol.messages import KeyFilter
from joinlib.protocol.wire import encode_body
from joinlib.query import load_query
from joinlib.runtime.algorithms.base import key_share, keys_bytes, pass_share, stale_key_bytes
from joinlib.runtime.algorithms.keysets import (
    Outgoing,
    age_runs,
    key_filter,
    key_filter_py,
    key_matchers,
    runs_bytes,
)
from joinlib.runtime.algorithms.reduce import Reducer

ROOT = Path(__file__).resolve().parents[2]


def test_age_runs_keep_each_keys_latest_tuple_and_none_for_one_age():
    keys = [("a",), ("b",), ("a",), ("c",)]
    order, runs = age_runs(keys, [20, 5, 0, 0])
    assert order == [("a",), ("c",), ("b",)] and runs == [0, 2, 5, 1]   # "a" at its latest tuple's age
    assert age_runs(keys, [3, 3, 3, 3]) == ([], [])
    assert age_runs([("a",), ("a",)], [4, 0]) == ([], [])   # one distinct key: one age, back says it


def test_key_filter_writes_ages_only_for_several_epochs_and_groups_invert_them():
    one = key_filter(Outgoing([("a",), ("b",)], 0, 30, [0, 0]), 0.01, 1e9)
    assert not one.ages
    body = key_filter(Outgoing([("a",), ("b",), ("c",)], 0, 30, [12, 0, 0]), 0.01, 1e9)
    assert body.ages == [0, 2, 12, 1] and not body.bits, "stale keys not priced: the ages, whatever the filter"
    groups = key_matchers(40, body)
    assert [(tag, m._set) for tag, m in groups] == [(40, {("b",), ("c",)}), (28, {("a",)})]
    with pytest.raises(ValueError, match="ages count"):
        key_matchers(40, KeyFilter(0, 30, [("a",)], ages=[0, 2]))


def test_a_late_passing_key_expires_with_its_own_tuple():
    """S2 (middle of S1 - S2 - S3) takes one set from S1 holding "old" (arrived 20 epochs back) and "new":
    once S1's window no longer holds epoch 10, "old" no longer passes S2's tuples, while "new" does."""
    q = load_query(ROOT / "examples" / "routers_selective.yaml")
    op = {r.stream: r for r in lower(q, plans.reduction(q, "r3")).reducers}["S2"]
    s2 = q.stream("S2")
    red = Reducer(op, s2, 100, None)
    red.take("S1", 30, KeyFilter(0, 25, [("new",), ("old",)], ages=[0, 1, 20, 1]))
    tags = sorted(tag for _, tag, _ in red.filters["S1"])
    assert tags == [10, 30]
    red.take("S1", 31, KeyFilter(0, 20, []))   # S1's oldest arrival is now epoch 11: "old"'s tuple is gone
    assert [tag for _, tag, _ in red.filters["S1"]] == [30]
    red.admit(31, [Tup(s2.pos, 0, 3100, 0, ("old",)), Tup(s2.pos, 1, 3101, 1, ("new",))], ("ts", 100))
    passing = red._passing(list(red.pending.values()), "S3", ("S1",))
    assert [x.t.key for x in passing] == [("new",)]


#: ten keys shaped like the grid's ("v0042": 7 bytes written out), nine passing at once and one late
TEN = [(f"v{i:04d}",) for i in range(10)]
#: stale bytes per key and epoch (stale_key_bytes, every pass shipping) at 100 tuples/s, τ = 100 ms, f = 0.001:
#: 50-byte tuples 0.5, 1250-byte ones 12.5; fp_cost: their 3 s windows
SMALL, LARGE = (0.5, 15_000.0), (12.5, 375_000.0)


@pytest.mark.parametrize("ages, fpr, prices, form", [
    # (i) one age: today's message, whatever the pricing (the filter at this fp_cost, the keys without a rate)
    ([4] * 10, 0.01, SMALL, "bloom"),
    ([4] * 10, None, SMALL, "keys"),
    ([0] * 10, 0.01, LARGE, "bloom"),
    # (ii) small tuples, one key late by 3 epochs: 1.5 stale bytes against the runs' 6 -- one tag
    ([0] * 9 + [3], 0.01, SMALL, "bloom"),
    ([0] * 9 + [3], None, SMALL, "keys"),
    ([0] * 5 + [1, 2, 3, 4, 5], None, SMALL, "keys"),   # 7.5 stale bytes against 12
    # (iii) large tuples: a key late by 5 epochs lets 62.5 bytes through, against the runs' 6 bytes and the
    # filter's saving (81 bytes of keys, 39.6 for the filter and its false positives): the ages
    ([0] * 9 + [5], 0.01, LARGE, "ages"),
    ([0] * 9 + [5], None, LARGE, "ages"),
    ([0] * 9 + [3], None, LARGE, "ages"),      # 37.5 against 6
    ([0] * 9 + [3], 0.01, LARGE, "bloom"),     # 37.5 + 39.6 < 81 + 6: the filter's saving outweighs them
    # the small tuples again, but a key late by 30 epochs (a 3 s window): 15 stale bytes are worth the runs
    ([0] * 9 + [30], None, SMALL, "ages"),
])
def test_the_cheapest_form_by_the_senders_estimate(ages: list[int], fpr: float, prices: tuple[float, float],
                                                  form: str) -> None:
    stale, fp_cost = prices
    out = Outgoing(TEN, min(ages), 30, ages)
    body = key_filter(out, fpr, fp_cost, stale)
    assert body == key_filter_py(out, fpr, fp_cost, stale)
    got = "ages" if body.ages else "bloom" if body.bits else "keys"
    assert got == form
    if form != "ages":   # one tag: the message of a set of one age, bloom.choose's
        ks, bloom = choose(TEN, fpr, keys_bytes, fp_cost)
        assert body == (KeyFilter(min(ages), 30, [], *bloom) if bloom else KeyFilter(min(ages), 30, list(ks)))
    assert bool(key_filter(out, fpr, fp_cost, None).ages) == (len(set(ages)) > 1), "not priced: the ages"


@pytest.mark.parametrize("ages", [[0, 3], [0, 0, 1, 70, 70, 9000], list(range(200))])
def test_the_runs_are_priced_at_what_they_add_on_the_wire(ages: list[int]) -> None:
    keys = [(f"k{i}",) for i in range(len(ages))]
    order, runs = age_runs(keys, ages)
    added = len(encode_body(KeyFilter(0, 30, order, ages=runs))) - len(encode_body(KeyFilter(0, 30, order)))
    assert runs_bytes(runs) == added


def test_stale_bytes_per_key_and_epoch_are_the_receivers_declared_ones():
    """stale_key_bytes: rate x τ x tuple bytes x f at the receiver (routers_selective: one key, so every pass
    ships); None when a statistic it needs is not declared."""
    q = load_query(ROOT / "examples" / "routers_selective.yaml")   # 100/s, 1250 B, f = 0.0002, 3 s windows
    s2 = {r.stream: r for r in lower(q, plans.reduction(q, "r3")).reducers}["S2"]
    assert pass_share(q, s2, "S1") == 1.0
    assert stale_key_bytes(q, s2, "S1", 100) == pytest.approx(2.5)
    bare = replace(q.stream("S2"), stats=replace(q.stream("S2").stats, selectivity=()))
    assert key_share(bare, (0,)) is None and key_share(q.stream("S2"), (0, 0)) == pytest.approx(0.0002 ** 2)
    no_rate = replace(q, streams=tuple(replace(s, stats=replace(s.stats, rate=None)) for s in q.streams))
    assert stale_key_bytes(no_rate, s2, "S1", 100) is None


def test_a_pass_on_other_attributes_ships_only_if_the_other_filters_pass_too():
    """A triangle with a key per edge: a stale key of S1 lets through S2 tuples that must still match S3 on
    their own key -- f = 0.01 over 50-tuple windows (about two of them): 1 - 0.99^100 of them."""
    q = load_query(ROOT / "examples" / "triangle_keys.yaml")
    s2 = {r.stream: r for r in lower(q, plans.reduction(q, "r1", cross=True)).reducers}["S2"]
    share = -math.expm1(100 * math.log1p(-0.01))
    assert pass_share(q, s2, "S1") == pytest.approx(share) == pytest.approx(0.634, abs=1e-3)
    assert stale_key_bytes(q, s2, "S1", 100) == pytest.approx(100 * 0.1 * 1250 * 0.01 * share)
