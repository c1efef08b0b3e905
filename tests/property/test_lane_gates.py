"""Phase gates (``Phase.gates``) skip only calls that would have done nothing.

A gate is a phase's own first test (a window or replica applied through the epoch, the watermark past its end,
the previous step done) read by the scheduler without calling the phase.  With ``lanes.CHECK_GATES`` the Python
scheduler calls a phase anyway whenever one of its gates is shut and fails unless the phase answers False, so every
plan kind run here checks each gate it shuts against the phase it guards; the output stays exact.
"""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import joinlib.runtime.lanes as lanes_mod
from joinlib.algorithms import ALGORITHMS
from joinlib.data.files import load_streams
from joinlib.data.gen import generate
from joinlib.plan import logical as plans_mod
from joinlib.planner.auto import auto
from joinlib.query import load_query
from joinlib.testing import assert_exact
from joinlib.testing.strategies import plans, queries, reductions, stream_data

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@pytest.fixture
def checked(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, int]]:
    """Gates checked against their phases, and a count of the gates found shut."""
    count = {"shut": 0}
    shut = lanes_mod.shut

    def counting(gates: Any, e: int) -> bool:
        out = shut(gates, e)
        count["shut"] += out
        return out
    monkeypatch.setattr(lanes_mod, "CHECK_GATES", True)
    monkeypatch.setattr(lanes_mod, "shut", counting)
    yield count


@SETTINGS
@given(st.data())
def test_gates_hold_for_every_plan_kind(checked: dict[str, int], data: st.DataObject) -> None:
    query = data.draw(queries(max_streams=3))
    streams = data.draw(stream_data(query))
    kind = data.draw(st.sampled_from(["plan", "reduction", "uniform", "central"]))
    if kind == "plan":
        plan = data.draw(plans(query))
    elif kind == "reduction":
        plan = data.draw(reductions(query))
    elif kind == "uniform":
        plan = plans_mod.uniform(query, data.draw(st.sampled_from(ALGORITHMS)))
    else:
        plan = plans_mod.central(query, data.draw(st.sampled_from(query.sites)))
    assert_exact(query, streams, plan)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    """The demo's query (a 3-way chain), over 3 s of its data."""
    q = load_query(Path(__file__).resolve().parents[2] / "examples" / "routers_selective.yaml")
    d = tmp_path_factory.mktemp("demo")
    generate(q, d, 3000, seed=5)
    return q, load_streams(q, d)


@pytest.mark.parametrize("plan", [*ALGORITHMS, "central", "auto"])
def test_gates_are_shut_and_hold_on_the_demo(checked: dict[str, int], demo: tuple[Any, Any], plan: str) -> None:
    """Each plan kind of the demo's query finds gates shut (the scheduler polls ahead of the data), and every
    shut gate's phase answers False."""
    query, streams = demo
    if plan == "central":
        chosen = plans_mod.central(query, query.sites[0])
    elif plan == "auto":
        chosen = auto(query, streams)
    else:
        chosen = plans_mod.uniform(query, plan)
    assert_exact(query, streams, chosen)
    assert checked["shut"] > 0
