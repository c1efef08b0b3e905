"""Key sets carry each key's own age (issue 30): a tuple that passes late -- its partner arrived after it --
goes out in the same set as the epoch's new tuples, and without its age its key would stay live at the
receiver until the newest of them left the window.  ``bench/bytes_breakdown.py`` measured that as 39,561 of
chain4-f0.001's 158,239 non-contributing bytes."""
from __future__ import annotations

from pathlib import Path

import pytest

from joinlib.model import Tup
from joinlib.plan import logical as plans
from joinlib.plan.ir import lower
from joinlib.protocol.messages import KeyFilter
from joinlib.query import load_query
from joinlib.runtime.algorithms.keysets import Outgoing, age_runs, key_filter, key_matchers
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
    assert body.ages == [0, 2, 12, 1] and not body.bits, "several ages: written-out keys, whatever the filter"
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
