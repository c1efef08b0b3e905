"""A window's insert loop in C (``joinlib/runtime/_rowsc.c`` ``take_below``) against its Python form in
:meth:`joinlib.runtime.window.HomeWindow.insert`: the same batch, the same late count and the same tuples left on
the source, for sources in any ts order (a disordered source stops at the first tuple at or past the epoch's end)."""
from __future__ import annotations

from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import joinlib.runtime.window as window
from joinlib.model import Tup

_c = window._c
assert _c is not None, "joinlib.runtime._rowsc is not built (python setup.py build_ext --inplace)"


take_below_py = window._take_below   # the Python form


@settings(deadline=None)   # a loaded machine runs an example past the default 200 ms
@given(st.lists(st.integers(-50, 400), max_size=60), st.integers(-60, 400), st.integers(-60, 400))
def test_take_below_is_the_python_loop(stamps, end, start):
    tups = [Tup(0, i, ts, i, (i % 7,)) for i, ts in enumerate(stamps)]
    a, b = deque(tups), deque(tups)
    got, late = _c.take_below(a, end, start)
    want, want_late = take_below_py(b, end, start)
    assert [t.seq for t in got] == [t.seq for t in want]
    assert all(x is y for x, y in zip(got, want, strict=True))
    assert late == want_late
    assert list(a) == list(b)


def test_a_ts_past_a_long_long_raises_and_takes_nothing():
    src = deque([Tup(0, 0, 2**70, 0, (1,))])
    with pytest.raises(OverflowError):
        _c.take_below(src, 10, 0)
    assert len(src) == 1
