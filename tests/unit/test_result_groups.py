"""The groups of result batches as a node writes them (avro.result_group_runs, the C kernel and its Python form)
are exactly the groups records.encode_result_batch writes: decoded, each is the result group it stands for."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from joinlib.model import Tup
from joinlib.protocol import avro, records
from joinlib.protocol.avro import encode_long
from tests.kernels import BOTH, kernels

NAMES = ["S1", "Strøm2", "S3"]
long_st = st.one_of(st.integers(-(1 << 63), (1 << 63) - 1), st.integers(-3, 1 << 40))
tup_st = st.builds(Tup, pos=st.integers(0, 2), id=long_st, ts=long_st, seq=st.integers(0, 9), key=st.just(("k",)))


@st.composite
def groups_st(draw: st.DrawFn) -> tuple[list, int, int]:
    head_pos, last = draw(st.integers(0, 1)), 2
    shared = draw(st.lists(tup_st, max_size=4))
    groups = []
    for _ in range(draw(st.integers(0, 8))):
        row = (draw(tup_st), draw(st.one_of(st.none(), tup_st)), None)
        if row[head_pos] is None:
            continue
        tups = shared if draw(st.booleans()) else draw(st.lists(tup_st, max_size=4))
        groups.append((row, tups))
    return groups, head_pos, last


def _string(s: str) -> bytes:
    b = s.encode()
    return encode_long(len(b)) + b


@BOTH
@settings(max_examples=300, deadline=None)
@given(groups_st(), st.integers(1, 6))
def test_result_group_runs_decode_to_their_groups(c, drawn, limit) -> None:
    groups, head_pos, last = drawn
    names = [_string(n) for n in NAMES]
    with kernels(avro, c):
        runs = avro.result_group_runs(groups, head_pos, names, names[last], limit)
    assert runs == avro._result_group_runs(groups, head_pos, names, names[last], limit)
    want = [records.ResultGroup(NAMES[head_pos], row[head_pos].ts,
                                {NAMES[i]: t.id for i, t in enumerate(row) if t is not None}, NAMES[last],
                                [t.id for t in tups])
            for row, tups in groups if tups]
    got = []
    for n, (part, ngroups, nresults) in enumerate(runs):
        value = b"".join([_string("q"), _string("site"), encode_long(0), encode_long(1), encode_long(n),
                          encode_long(5), encode_long(ngroups), part, b"\x00"])
        batch = records.decode_result_batch(value)
        assert len(batch.groups) == ngroups and sum(len(g.last_ids) for g in batch.groups) == nresults
        assert n == len(runs) - 1 or nresults >= limit   # runs are cut once they reach the limit
        got += batch.groups
    assert got == want


@BOTH
@settings(max_examples=200, deadline=None)
@given(groups_st(), st.integers(0, 2))
def test_expanded_rows_are_the_rows_with_each_tuple(c, drawn, pos) -> None:
    """Instance.output's rows for the next step: the C kernel and the Python form give row[:pos] + (t,) +
    row[pos + 1:] per tuple, in order, after what ``out`` held."""
    import importlib
    instance = importlib.import_module("joinlib.runtime.instance")   # the module (the package exports a name too)
    groups, _, _ = drawn
    out: list = ["before"]
    with kernels(instance, c):
        instance.expand_rows(out, groups, pos)
    assert out == ["before"] + [row[:pos] + (t,) + row[pos + 1:] for row, tups in groups for t in tups]


def test_the_kernels_are_built() -> None:
    import importlib
    assert avro._c is not None and importlib.import_module("joinlib.runtime.instance")._c is not None, \
        "joinlib/protocol/_avroc.c or joinlib/runtime/_rowsc.c is not built: run `pip install -e .` with a C compiler"
