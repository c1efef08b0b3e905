"""Hypothesis-written SQL with projections and filters, run through the Python API (:func:`joinlib.run_embedded`
on the SQL text), gives exactly the reference join's rows: the random filtered queries of
:mod:`tests.property.test_where_rows`, rendered to SQL (:func:`joinlib.sql.query_to_sql`), on random data files."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import joinlib
from joinlib.data.files import load_rows
from joinlib.reference import reference_join, tuples_of_rows
from joinlib.rows import reference_rows
from joinlib.sql import query_to_sql
from tests.property.test_where_rows import _write, data_rows, filtered_queries


def _key(row: dict[str, Any]) -> bytes:
    return orjson.dumps(row, option=orjson.OPT_SORT_KEYS)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(st.data())
def test_sql_text_through_the_api_gives_the_reference_rows(tmp_path: Path, data: st.DataObject) -> None:
    q = data.draw(filtered_queries())
    rows = data.draw(data_rows(q))
    _write(tmp_path, q, rows)
    sql = query_to_sql(q)
    assert joinlib.load(sql) == q
    plan = data.draw(st.sampled_from(["auto", "SM-S1", "SP-D", "central", "reduce"]))
    got = joinlib.run_embedded(sql, tmp_path, plan)
    want = reference_join(q, tuples_of_rows(q, load_rows(q, tmp_path)))
    expected = reference_rows(q, load_rows(q, tmp_path), [r for r, n in want.items() for _ in range(n)])
    assert sorted(map(_key, got.rows)) == sorted(map(_key, expected))
    assert got.query == q.name and got.report["results"] == len(expected)
