"""A live source's decoder reads rows by the layout of the row before when they have the same fields (issue 27:
no per-field getters, no sort per record); that fast path must give exactly what the field-by-field path gives,
events and malformed records alike, in any order of rows with changing fields, bad values, big ints, missing
ids, nulls, a named payload or one of listed attributes."""
from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from joinlib.ingest.records import Decoder
from joinlib.model import Stream, Window
from joinlib.source_spec import SourceSpec

ORIGIN = 1_000_000
_VALUES = st.one_of(
    st.none(), st.booleans(), st.text(max_size=4), st.floats(allow_nan=False, allow_infinity=False),
    st.integers(-2**63, 2**63 - 1), st.sampled_from([2**63, -2**63 - 1, 2**70]),
    st.lists(st.integers(0, 3), max_size=2), st.dictionaries(st.sampled_from("ab"), st.integers(0, 3), max_size=1))
_TIMES = st.one_of(st.integers(ORIGIN, ORIGIN + 10_000), st.floats(ORIGIN, ORIGIN + 10_000), st.text(max_size=3),
                   st.booleans(), st.sampled_from([2**64]))
_IDS = st.one_of(st.integers(0, 50), st.booleans(), st.text(max_size=2), st.sampled_from([2**63]))


@st.composite
def _rows(draw) -> list[dict[str, Any]]:
    """Rows that mostly share their fields (so the fast path runs), sometimes lose or gain one."""
    extra = draw(st.lists(st.sampled_from(["p", "q", "r"]), unique=True, max_size=3))
    out = []
    for _ in range(draw(st.integers(1, 30))):
        row: dict[str, Any] = {}
        if draw(st.integers(0, 9)):
            row["ts"] = draw(_TIMES) if not draw(st.integers(0, 4)) else ORIGIN + draw(st.integers(0, 9999))
        if draw(st.integers(0, 9)):
            row["id"] = draw(_IDS) if not draw(st.integers(0, 4)) else draw(st.integers(0, 99))
        for a in ("J", "K"):
            if draw(st.integers(0, 12)):
                row[a] = draw(_VALUES) if not draw(st.integers(0, 3)) else draw(st.text(max_size=3))
        fields = extra if draw(st.integers(0, 5)) else draw(st.lists(st.sampled_from(["p", "q", "r", "s"]),
                                                                      unique=True, max_size=4))
        for a in fields:
            row[a] = draw(_VALUES) if not draw(st.integers(0, 3)) else draw(st.text(max_size=3))
        out.append(row)
    return out


def _stream(id_field: str | None, attributes: tuple[str, ...] | None) -> Stream:
    src = SourceSpec("t", "json", "ts", "ms", id_field, attributes)
    return Stream("S", 0, "a", Window("time", 3000), ("J", "K"), source=src)


@settings(max_examples=200, deadline=None)
@given(rows=_rows(), id_field=st.sampled_from(["id", None]),
       attributes=st.sampled_from([None, ("p",), ("p", "q")]), named=st.booleans())
def test_the_fast_path_decodes_as_the_slow_one(rows, id_field, attributes, named):
    s = _stream(id_field, attributes)
    assert s.source is not None
    fast, slow = Decoder(s, s.source, ORIGIN, named=named), Decoder(s, s.source, ORIGIN, named=named)
    slow._can_fast = False
    for offset, row in enumerate(rows):
        value = json.dumps(row).encode()   # ints past 64 bits too (orjson cannot write them)
        assert fast.decode(value, 1, offset) == slow.decode(value, 1, offset), row
