"""OrderedEntries keeps a dict's order and gives the same positions as a walk of it (DJA's V, issue 27)."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from joinlib.runtime.algorithms.ordered import OrderedEntries

ops = st.lists(st.tuples(st.sampled_from(["add", "del"]), st.integers(0, 40)), max_size=300)


@settings(max_examples=300, deadline=None)
@given(ops)
def test_positions_match_a_walk_of_the_dict(steps) -> None:
    oe, ref = OrderedEntries(), {}
    for op, v in steps:
        key = (v,)
        if op == "add" and key not in ref:
            oe[key] = ref[key] = [v, False]
        elif op == "del" and key in ref:
            del oe[key], ref[key]
        assert list(oe) == list(ref) and len(oe) == len(ref)
    order = list(ref)
    for i, k in enumerate(order):
        assert oe.position(k) == i and oe.at(i) == k and oe[k] is ref[k]
    for bad in (-1, len(order)):
        try:
            oe.at(bad)
        except IndexError:
            continue
        raise AssertionError(f"at({bad}) did not raise")
    rebuilt = OrderedEntries(ref.items())
    assert [rebuilt.position(k) for k in order] == list(range(len(order)))
