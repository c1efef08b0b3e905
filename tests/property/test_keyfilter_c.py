"""A key set's message made by the Bloom kernel (``key_filter`` in joinlib/protocol/_bloomc.c) is the Python form's
(issue 27): for random key sets -- keys of strings (some not ASCII) and ints, one or several values, repeated,
equal across types (``1 == 1.0 == True``), with their ages in one epoch or several -- and every pricing (no rate or
no cost: the keys; cheap and dear false positives: the keys or a filter; stale keys unpriced, cheap or dear: the
ages or one tag, issue 30), the same KeyFilter field by field, with the same types, and the same bytes on the
wire.  What the kernel declines (keys that are not tuples, ages that are not ints, keys and ages of different
lengths, unhashable keys, strings that are not UTF-8) comes out of the Python form, answered or raised as
before."""
from __future__ import annotations

from dataclasses import fields
from typing import Any, Optional

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from joinlib.protocol import bloom, wire
from joinlib.protocol.messages import KeyFilter
from joinlib.runtime.algorithms import keysets
from joinlib.runtime.algorithms.keysets import Outgoing, key_filter, key_filter_py
from tests.kernels import kernels

pytestmark = pytest.mark.skipif(keysets._c is None, reason="the Bloom kernels are not built")

VALUES = st.one_of(st.text(max_size=5), st.text(alphabet="ab\u00e9\u4e2d", max_size=4), st.integers(-3, 3),
                   st.integers(-(1 << 40), 1 << 40))
KEYS = st.lists(st.tuples(VALUES) | st.tuples(VALUES, VALUES) | st.tuples(VALUES, VALUES, VALUES),
                min_size=1, max_size=30, unique=True)
FPR = st.sampled_from([None, 0.3, 0.05, 0.01, 1e-4, 1e-9])
FP_COST = st.sampled_from([None, 0, 10, 300.0, 375000.0, 1e6, 10 ** 9])
#: bytes per key and epoch a stale key lets through (None: not declared, the ages always)
STALE = st.sampled_from([None, 0, 0.05, 0.5, 1.5, 3, 37.5, 1e4]) | st.floats(0, 50)

Case = tuple[Outgoing, Optional[float], Optional[float], Optional[float]]


@st.composite
def _sets(draw: Any) -> Case:
    """A set as a reducer makes it: keys drawn with repeats from a pool, their ages in one or several epochs."""
    pool = draw(KEYS)
    keys = draw(st.lists(st.sampled_from(pool), max_size=40))
    if draw(st.booleans()):
        ages = [draw(st.integers(0, 5))] * len(keys)
    else:
        ages = draw(st.lists(st.integers(0, 5), min_size=len(keys), max_size=len(keys)))
    back, live = min(ages, default=0), draw(st.integers(0, 9))
    return Outgoing(keys, back, live, ages), draw(FPR), draw(FP_COST), draw(STALE)


def _same(c: KeyFilter, py: KeyFilter) -> None:
    """Field by field, types included, and the encoded bytes."""
    assert type(c) is KeyFilter and type(py) is KeyFilter
    for f in fields(KeyFilter):
        a, b = getattr(c, f.name), getattr(py, f.name)
        assert type(a) is type(b), f.name
        assert a == b, f.name
        if f.name == "keys":
            assert [type(v) for k in a for v in k] == [type(v) for k in b for v in k]
    assert _encoded(c) == _encoded(py)


def _encoded(body: KeyFilter) -> Any:
    """The message's bytes, or the error writing it raises (a hand-made odd set may not fit the wire)."""
    try:
        return wire.encode_body(body)
    except Exception as e:   # noqa: BLE001 - compared: the same error either way
        return type(e)


@settings(max_examples=400, deadline=None)
@given(_sets())
def test_the_kernels_message_is_the_python_forms(case: Case) -> None:
    out, fpr, fp_cost, stale = case
    made = keysets._c.key_filter(out, fpr, fp_cost, stale, KeyFilter, bloom.filter_cost, bloom._DIGESTS,
                                 bloom._remember)
    assert made is not None   # such a set is never declined: the comparison below is the kernel's
    assert isinstance(_encoded(made), bytes)
    _same(made, key_filter_py(out, fpr, fp_cost, stale))
    with kernels(keysets, False):
        _same(key_filter(out, fpr, fp_cost, stale), made)


@settings(max_examples=100, deadline=None)
@given(_sets(), st.integers(1, 4))
def test_digests_not_remembered_yet_are_the_same(case: Case, keep: int) -> None:
    """Keys whose digests bloom.py has not remembered (or forgot, its dictionary full) get the same bits."""
    out, fpr, fp_cost, stale = case
    for k in list(bloom._DIGESTS)[keep:]:
        del bloom._DIGESTS[k]
    made = key_filter(out, fpr, fp_cost, stale)
    bloom._DIGESTS.clear()
    _same(made, key_filter_py(out, fpr, fp_cost, stale))


def test_keys_equal_across_types_are_one_key_as_the_first_of_them() -> None:
    out = Outgoing([(1,), (1.0,), (True,), ("a", 2), ("a", 2.0)], 0, 3, [2, 0, 1, 0, 3])
    for fpr, cost, stale in ((None, None, None), (0.01, 1e9, None), (0.01, 1.0, None), (0.01, 1.0, 0.1),
                             (None, None, 1e3)):
        c, py = key_filter(out, fpr, cost, stale), key_filter_py(out, fpr, cost, stale)
        assert c == py and [type(k[-1]) for k in c.keys] == [type(k[-1]) for k in py.keys]


def test_a_filter_costing_what_the_keys_take_is_not_chosen() -> None:
    """A tie (no false positives to price: the filter's bytes alone, a whole number) keeps the keys."""
    assert bloom.filter_cost(1, 0.3, 0)[2] == 7.0
    tie, dearer = Outgoing([("abc",)], 0, 1, [0]), Outgoing([("abcd",)], 0, 1, [0])
    assert key_filter(tie, 0.3, 0).keys == [("abc",)] == key_filter_py(tie, 0.3, 0).keys
    _same(key_filter(dearer, 0.3, 0), key_filter_py(dearer, 0.3, 0))
    assert key_filter(dearer, 0.3, 0).bits


BAD: list[tuple[Any, Any]] = [
    ([["a"], ["b"]], [0, 0]),                    # unhashable keys (a dictionary cannot hold them)
    ([("a",), ("b",)], [0, 1, 2]),               # ages of several epochs, more of them than keys
    ([("\ud800",), ("b",)], [0, 0]),             # a lone surrogate: not UTF-8
    ([("a",), ("b",)], [0.0, 1]),                # an age that is not an int
    ([("a",), ("b",)], [True, 0]),
    ([("a",), ("b",)], [1 << 70, 0]),            # an age beyond 64 bits
    (["ab", "cd"], [0, 0]),                      # keys that are not tuples
    ((("a",), ("b",)), (1, 0)),                  # tuples, not lists: taken
    ([("a",), ("b",)], [0, 0]),
]


def test_a_plain_tuple_is_not_a_key_set() -> None:
    plain: Any = ([("a",)], 0, 1, [0])
    for f in (key_filter, key_filter_py):
        with pytest.raises(AttributeError):
            f(plain, 0.01, 1e9)


@pytest.mark.parametrize("keys, ages", BAD)
@pytest.mark.parametrize("fpr, cost, stale", [(None, None, None), (0.01, 1e9, None), (0.01, 1.0, None),
                                               (0.01, 1.0, 0.5), (None, None, 10 ** 3), (0.01, 1e9, True)])
def test_what_the_kernel_declines_the_python_form_answers_or_raises(keys: Any, ages: Any, fpr: Any,
                                                                     cost: Any, stale: Any) -> None:
    out = Outgoing(keys, 0, 4, ages)
    try:
        py: Any = key_filter_py(out, fpr, cost, stale)
    except Exception as e:   # noqa: BLE001 - the kernel's path must raise the same
        py = type(e)
    try:
        c: Any = key_filter(out, fpr, cost, stale)
    except Exception as e:   # noqa: BLE001
        c = type(e)
    if isinstance(py, KeyFilter):
        _same(c, py)
    else:
        assert c is py
