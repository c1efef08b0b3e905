"""An SM-S2 home's answer to a request sent as a Bloom filter: :meth:`OrderedEntries.held_unflagged` (the slots'
digests kept end to end, extended as slots are added, dropped with them at a rebuild) gives what the walk of V it
replaced gave -- ``held_keys(m, [k for k, x in entries.items() if not x[1]])`` -- after any sequence of keys added,
flagged and removed, with the kernels (``_fenwickc.c``, ``_bloomc.c``) on and off."""
from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from joinlib.protocol import bloom
from joinlib.protocol.bloom import Bloom, KeySet, Matcher
from joinlib.runtime.algorithms import ordered
from joinlib.runtime.algorithms.keyindex import held_keys
from joinlib.runtime.algorithms.ordered import OrderedEntries
from tests.kernels import BOTH, kernels

keys = st.tuples(st.integers(0, 60)) | st.tuples(st.integers(0, 5), st.sampled_from(["x", "y", 2.0]))
ops = st.lists(st.one_of(
    st.tuples(st.just("add"), st.lists(keys, max_size=12)),
    st.tuples(st.just("del"), st.lists(st.integers(0, 200), max_size=8)),
    st.tuples(st.just("flag"), st.lists(st.integers(0, 200), max_size=4)),
    st.tuples(st.just("ask"), st.lists(keys, max_size=20), st.sampled_from([0.5, 0.1, 0.01]), st.booleans()),
), min_size=1, max_size=60)


def _run(plan: list[Any]) -> list[list[Any]]:
    oe, out = OrderedEntries(), []
    for op in plan:
        if op[0] == "add":
            for k in op[1]:
                oe.add(k)
        elif op[0] in ("del", "flag") and len(oe):
            live = list(oe)
            for i in op[1]:
                k = live[i % len(live)]
                if k not in oe:
                    continue
                if op[0] == "del":
                    del oe[k]
                else:
                    oe[k][1] = True
        elif op[0] == "ask":
            _, asked, fpr, exact = op
            m = Matcher(KeySet(keys=tuple(asked))) if exact else Matcher(KeySet(bloom=Bloom.of(asked, fpr)))
            got = oe.held_unflagged(m)
            assert got == held_keys(m, [k for k, x in oe.items() if not x[1]])
            out.append(got)
    return out


@settings(max_examples=300, deadline=None)
@given(plan=ops)
def test_held_unflagged_is_the_walk_of_v(plan: list[Any]) -> None:
    runs = []
    for c in (True, False):
        with kernels(ordered, c), kernels(bloom, c):
            runs.append(_run(plan))
    assert runs[0] == runs[1]


@BOTH
def test_held_unflagged_across_rebuilds(c: bool) -> None:
    """Thousands of keys through V (many rebuilds), asked between them: the digests follow the slots."""
    with kernels(ordered, c), kernels(bloom, c):
        oe = OrderedEntries()
        for e in range(300):
            for i in range(10):
                oe.add((e * 10 + i,))
            for k in list(oe)[:9 if e % 3 else 11]:
                del oe[k]
            if e % 4 == 0:
                live = list(oe)
                for k in live[::5]:
                    oe[k][1] = True
                m = Matcher(KeySet(bloom=Bloom.of(live[::2] + [(-1,), (-2,)], 0.2)))
                assert oe.held_unflagged(m) == held_keys(m, [k for k, x in oe.items() if not x[1]])
