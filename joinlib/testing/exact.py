"""The check every exactness test makes: a plan run embedded emits the reference join's results, each once.

Why a library function: users testing their own plans (or planners) need the same check the project's property
tests make, with a message that says which results are missing or extra.
"""
from __future__ import annotations

from collections import Counter
from typing import Any

from joinlib.model import Query, Tup
from joinlib.plan.logical import Plan
from joinlib.plan.partitioned import Partitioned
from joinlib.reference import Result, reference_join
from joinlib.runtime.deploy import Plans
from joinlib.sim.engine import run_embedded
from joinlib.testing.sink import TestingSink

SHOWN = 5  # missing or extra results a failure message lists


def run_plan(query: Query, streams: dict[str, list[Tup]], plan: Plans, *, roundtrip: bool = False) -> Counter[Result]:
    """The results of ``plan`` (or generations of plans, or a partitioned plan) run embedded over ``streams`` on
    the simulated network; ``roundtrip``: every message Avro-encoded and decoded on the way, as on Kafka.

    >>> from joinlib.plan.logical import uniform
    >>> from joinlib.query import parse_query
    >>> from joinlib.testing import TestingSource
    >>> q = parse_query({"name": "q", "join": ["A.k = B.k"], "streams": {
    ...     "A": {"site": "n1", "window": "100ms"}, "B": {"site": "n2", "window": "100ms"}}})
    >>> streams = TestingSource(q, {"A": [{"ts": 5, "k": "x"}], "B": [{"ts": 9, "k": "x"}, {"ts": 9, "k": "y"}]})
    >>> run_plan(q, streams.streams(), uniform(q, "SP-D"))
    Counter({((0, 0), 9): 1})
    """
    sink = TestingSink(query)
    run_embedded(query, streams, plan, sink, roundtrip=roundtrip)
    return sink.counts()


def assert_same(got: Counter[Result], want: Counter[Result], what: str) -> None:
    """Raise AssertionError unless ``got`` and ``want`` are the same multiset; the message starts with ``what``
    and lists up to :data:`SHOWN` missing and extra results (with their counts).

    >>> assert_same(Counter({((0, 1), 5): 1}), Counter({((0, 1), 5): 1}), "same")
    >>> assert_same(Counter({((0, 1), 5): 2}), Counter({((0, 1), 5): 1}), "my plan")
    Traceback (most recent call last):
    AssertionError: my plan
    missing []
    extra [(((0, 1), 5), 1)]
    """
    missing, extra = want - got, got - want
    if missing or extra:
        raise AssertionError(f"{what}\nmissing {list(missing.items())[:SHOWN]}\nextra {list(extra.items())[:SHOWN]}")


def assert_exact(query: Query, streams: dict[str, list[Tup]], plan: Plans, *, roundtrip: bool = False) -> None:
    """Raise AssertionError unless ``plan`` run embedded over ``streams`` (see :func:`run_plan`) emits exactly
    the reference join's results: each once, none missing, none extra. The message shows the plan.

    >>> from joinlib.plan.logical import central, uniform
    >>> from joinlib.query import parse_query
    >>> from joinlib.testing import TestingSource
    >>> q = parse_query({"name": "q", "join": ["A.k = B.k"], "streams": {
    ...     "A": {"site": "n1", "window": "100ms"}, "B": {"site": "n2", "window": "2 tuples"}}})
    >>> streams = TestingSource(q, {"A": [{"ts": t, "k": t % 3} for t in range(0, 300, 7)],
    ...                             "B": [{"ts": t, "k": t % 2} for t in range(0, 300, 5)]}).streams()
    >>> assert_exact(q, streams, uniform(q, "SP-D"))
    >>> assert_exact(q, streams, [(0, central(q, "n1")), (2, central(q, "n2"))])  # a switch at epoch 2
    """
    assert_same(run_plan(query, streams, plan, roundtrip=roundtrip), reference_join(query, streams),
                f"plan {_plan_text(plan)}")


def _plan_text(plan: Plans) -> Any:
    """The plan's JSON, or per generation its first epoch and plan's JSON."""
    if isinstance(plan, (Plan, Partitioned)):
        return plan.to_json()
    return [(e, p.to_json()) for e, p in plan]
