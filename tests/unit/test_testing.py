"""joinlib.testing, the toolkit users test their own plans with: the testing source builds what the file loader
would, the sink and run_plan give the reference join's form, assert_exact catches a wrong plan, the strategies
draw valid queries, data and plans, the docstrings' examples run, and the package imports without hypothesis."""
from __future__ import annotations

import doctest
import importlib
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import joinlib.testing
from joinlib.algorithms import ALGORITHMS
from joinlib.data.files import load_stream, write_stream
from joinlib.errors import DataError
from joinlib.plan import logical as plans
from joinlib.plan.ir import lower
from joinlib.query import parse_query
from joinlib.runtime.deploy import generations
from joinlib.sim.engine import run_embedded
from joinlib.testing import Result, TestingSink, TestingSource, assert_exact, assert_same, reference_join, run_plan
from joinlib.testing.strategies import any_plans, queries, reductions, stream_data, switched_plans
from joinlib.testing.strategies import plans as plan_st

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
Q = parse_query({"name": "q", "join": ["A.k = B.k", "B.j = C.j"], "streams": {
    "A": {"site": "n1", "window": "100ms"}, "B": {"site": "n2", "window": "3 tuples"},
    "C": {"site": "n3", "window": "50ms"}}})


def _rows() -> dict[str, list[dict]]:
    return {"A": [{"ts": t, "k": t % 3, "note": f"a{t}"} for t in range(0, 400, 9)],
            "B": [{"id": 100 + t, "ts": t, "k": t % 3, "j": t % 2} for t in range(0, 400, 13)],
            "C": [{"ts": t, "j": t % 2} for t in range(0, 400, 11)]}


# ----------------------------------------------------------------------------- the source

def test_source_builds_what_the_file_loader_loads(tmp_path: Path) -> None:
    rows = _rows()
    streams = TestingSource(Q, rows).streams()
    for s in Q.streams:
        want = [{"id": i, **r} if "id" not in r else r for i, r in enumerate(rows[s.name])]
        write_stream(tmp_path / f"{s.name}.jsonl", want)
        loaded = load_stream(s, tmp_path / f"{s.name}.jsonl")
        assert [(t.pos, t.id, t.ts, t.seq, t.key, t.rest) for t in streams[s.name]] == \
            [(t.pos, t.id, t.ts, t.seq, t.key, t.rest) for t in loaded]


def test_source_orders_by_ts_then_id_and_leaves_missing_streams_empty() -> None:
    src = TestingSource(Q, {"B": [{"id": 5, "ts": 9, "k": 1, "j": 0}, {"id": 2, "ts": 9, "k": 1, "j": 0},
                                  {"id": 7, "ts": 3, "k": 1, "j": 0}]})
    got = src.streams()
    assert [(t.id, t.seq) for t in got["B"]] == [(7, 0), (2, 1), (5, 2)]
    assert got["A"] == [] and got["C"] == []
    got["A"].append(got["B"][0])
    assert src.streams()["A"] == []        # fresh lists each time


@pytest.mark.parametrize(("rows", "words"), [
    ({"D": []}, "has no stream D"),
    ({"A": [{"k": 1}]}, "row 0: 'id' and 'ts' must be integers"),
    ({"A": [{"ts": -1, "k": 1}]}, "ts not negative"),
    ({"A": [{"ts": 1.5, "k": 1}]}, "must be integers"),
    ({"A": [{"id": "x", "ts": 1, "k": 1}]}, "must be integers"),
    ({"A": [{"ts": 1}]}, "missing join attribute 'k'"),
    ({"A": [{"id": 3, "ts": 1, "k": 1}, {"id": 3, "ts": 2, "k": 1}]}, "row 1: id 3 repeats the id of row 0"),
])
def test_source_refuses_bad_rows(rows: dict, words: str) -> None:
    with pytest.raises(DataError, match=words):
        TestingSource(Q, rows)


# ----------------------------------------------------------------------------- the sink and the checks

def test_sink_and_run_plan_give_the_reference_joins_form() -> None:
    streams = TestingSource(Q, _rows()).streams()
    want = reference_join(Q, streams)
    assert sum(want.values()) > 10
    sink = TestingSink(Q)
    run_embedded(Q, streams, plans.uniform(Q, "SP-D"), sink)
    assert sink.counts() == want == run_plan(Q, streams, plans.uniform(Q, "SP-D"))
    assert len(sink.results) == sum(want.values()) and len(sink.records()) == len(sink.results)


def test_assert_exact_passes_every_kind_of_plan() -> None:
    streams = TestingSource(Q, _rows()).streams()
    for algorithm in ALGORITHMS:
        assert_exact(Q, streams, plans.uniform(Q, algorithm), roundtrip=True)
    assert_exact(Q, streams, plans.reduction(Q, "n2"))
    assert_exact(Q, streams, [(0, plans.central(Q, "n1")), (3, plans.uniform(Q, "SM-S2"))])


def test_assert_same_names_what_is_missing_and_extra() -> None:
    want: Counter[Result] = Counter({((0, 1), 5): 1, ((2, 3), 9): 1})
    assert_same(Counter(want), want, "equal")
    with pytest.raises(AssertionError) as e:
        assert_same(Counter({((0, 1), 5): 2}), want, "plan X")
    assert str(e.value) == "plan X\nmissing [(((2, 3), 9), 1)]\nextra [(((0, 1), 5), 1)]"


def test_assert_exact_catches_a_plan_that_loses_results(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sink that drops every other result stands in for a broken plan: the check fails and shows the plan."""
    streams = TestingSource(Q, _rows()).streams()

    def lossy(self: TestingSink) -> Counter:
        return Counter(dict(list(reference_join(Q, streams).items())[::2]))
    monkeypatch.setattr(TestingSink, "counts", lossy)
    with pytest.raises(AssertionError, match=r"(?s)^plan \{.*\}\nmissing \[\(\(\(.*\nextra \[\]$"):
        assert_exact(Q, streams, plans.uniform(Q, "SP-S"))


# ----------------------------------------------------------------------------- the strategies

@SETTINGS
@given(st.data())
def test_strategies_draw_valid_queries_data_and_plans(data: st.DataObject) -> None:
    q = data.draw(queries(max_streams=3))
    assert 2 <= len(q.streams) <= 3
    streams = data.draw(stream_data(q, max_tuples=5))
    assert sorted(streams) == sorted(q.names) and all(len(v) <= 5 for v in streams.values())
    for tups in streams.values():
        assert [t.seq for t in tups] == list(range(len(tups))) and tups == sorted(tups, key=lambda t: (t.ts, t.id))
    for strategy in (plan_st(q), reductions(q), any_plans(q)):
        plan = data.draw(strategy)
        plans.validate(q, plan)
        lower(q, plan)
    switched = data.draw(switched_plans(q, streams))
    assert switched[0][0] == 0 and [e for e, _ in switched] == sorted({e for e, _ in switched})
    assert len(generations(q, switched)) == len(switched)


# ----------------------------------------------------------------------------- docs and imports

@pytest.mark.parametrize("module", ["joinlib.testing", "joinlib.testing.source", "joinlib.testing.sink",
                                    "joinlib.testing.exact", "joinlib.testing.strategies"])
def test_docstring_examples_run(module: str) -> None:
    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0, result


def test_the_docs_example_runs() -> None:
    """docs/testing.md's code blocks, run as the user would: the fixed-rows test and the property test."""
    text = (ROOT / "docs" / "testing.md").read_text()
    scope: dict[str, Any] = {}
    exec(compile("\n\n".join(re.findall(r"```python\n(.*?)```", text, re.S)), "docs/testing.md", "exec"), scope)
    scope["test_my_plan_on_a_few_rows"]()
    scope["test_my_plan_is_exact"]()


def test_package_imports_without_hypothesis() -> None:
    """hypothesis is a test dependency: only joinlib.testing.strategies needs it."""
    code = ("import sys; sys.modules['hypothesis'] = None; import joinlib.testing as t; t.TestingSource\n"
            "try:\n    import joinlib.testing.strategies\nexcept ImportError:\n    print('strategies need hypothesis')")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "strategies need hypothesis"
    assert "hypothesis" not in joinlib.testing.__all__
