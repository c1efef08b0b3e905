"""The automatic re-partition's verdict (joinlib/pmjoin/repartition.py): a function fitted to rates that moved costs
more than one fitted to the current rates, by the rate model; one fitted to the current rates is never due."""
from __future__ import annotations

from typing import Any

import pytest

from joinlib.errors import PlanError
from joinlib.plan.logical import Plan
from joinlib.plan.partitioned import Partitioned, attribute_class, parse_spec
from joinlib.pmjoin.partitioned import function_from_stats
from joinlib.pmjoin.repartition import check_repartitionable, rates_of, verdict
from joinlib.query import parse_query

VALUES = [f"v{i}" for i in range(20)]
QUERY = parse_query({"name": "rp", "streams": {
    "S1": {"site": "a", "window": "2s", "rate": 100, "tuple_bytes": 200},
    "S2": {"site": "b", "window": "2s", "rate": 100, "tuple_bytes": 200}}, "join": ["S1.k = S2.k"]}, "rp")


def skewed(heavy_at_a: set[str], streams: tuple[str, ...] = ("S1", "S2")) -> dict[str, Any]:
    """Per-value rates where the values of ``heavy_at_a`` come mostly from S1 (site a), the others from S2."""
    rows = {"S1": [9.0 if v in heavy_at_a else 1.0 for v in VALUES],
            "S2": [1.0 if v in heavy_at_a else 9.0 for v in VALUES]}
    return {"by": [["S1", "k"], ["S2", "k"]], "streams": list(streams), "values": VALUES,
            "rates": [rows[s] for s in streams]}


FITTED_ON = skewed(set(VALUES[0:5] + VALUES[10:15]))
MOVED = skewed(set(VALUES[0:10]))


def running(spec: str, stats: dict[str, Any]) -> Partitioned:
    scheme, d = parse_spec(spec)
    fn = function_from_stats(QUERY, stats, scheme, d)
    return Partitioned(attribute_class(QUERY), fn, tuple(Plan(()) for _ in range(fn.d)))


@pytest.mark.parametrize("spec, now, due, min_gain", [
    ("pmjoin:rate:2", MOVED, True, 2.0),      # each group mixes values heavy at a and at b
    ("pmjoin:rate:4", MOVED, True, 2.0),
    ("pmjoin:site", MOVED, True, 2.0),        # each value at the site that held most of it: now the other one
    ("pmjoin:rate:2", FITTED_ON, False, 1.0),  # the rates it was fitted to: nothing to gain
    ("pmjoin:site", FITTED_ON, False, 1.0),
    ("pmjoin:range:2", MOVED, False, 1.0),    # range depends on the values only, which did not change
])
def test_verdict(spec: str, now: dict[str, Any], due: bool, min_gain: float) -> None:
    v = verdict(QUERY, running(spec, FITTED_ON), spec, now, 0.25)
    assert v.due is due
    assert v.gain >= min_gain
    if not due:
        assert v.gain <= 1.25
    assert v.to_json()["due"] is due


def test_threshold_decides() -> None:
    v = verdict(QUERY, running("pmjoin:rate:2", FITTED_ON), "pmjoin:rate:2", MOVED, 10.0)
    assert v.gain > 2 and not v.due   # 5x is less than the 11x asked for


def test_a_refit_of_the_current_rates_is_what_moves_run() -> None:
    v = verdict(QUERY, running("pmjoin:rate:2", FITTED_ON), "pmjoin:rate:2", MOVED, 0.25)
    again = verdict(QUERY, Partitioned(attribute_class(QUERY), v.function, (Plan(()), Plan(()))), "pmjoin:rate:2",
                    MOVED, 0.25)
    assert again.gain == pytest.approx(1.0) and not again.due   # no flapping once moved


def test_rates_of_fills_a_stream_not_reported_yet() -> None:
    r = rates_of(QUERY, skewed(set(), streams=("S2",)))
    assert r.streams == ("S1", "S2") and r.rates[0] == (0.0,) * len(VALUES)


@pytest.mark.parametrize("spec, threshold, match", [
    ("pmjoin:hash:2", 0.25, "pmjoin:rate|range|site"),
    ("reduce", 0.25, "pmjoin:rate|range|site"),
    ("pmjoin:rate:2", 0.0, "must be positive"),
    ("pmjoin:rate:2", -1.0, "must be positive"),
])
def test_what_cannot_be_repartitioned(spec: str, threshold: float, match: str) -> None:
    with pytest.raises(PlanError, match=match):
        check_repartitionable(QUERY, spec, threshold)


def test_malformed_statistics() -> None:
    with pytest.raises(PlanError, match="expected"):
        rates_of(QUERY, {"values": []})
    bad = skewed(set())
    bad["rates"][0] = bad["rates"][0][:3]
    with pytest.raises(PlanError, match="3 rates for 20 values"):
        rates_of(QUERY, bad)


# ------------------------------------------------------------------ the planner's repartitioner
class _Stats:
    def __init__(self, stats: dict[str, Any]) -> None:
        self.stats = stats

    def value_stats(self) -> dict[str, Any]:
        return self.stats


class _Planner:
    """The planner service's surface the repartitioner uses: its queries under a lock, a sensor and ``replan``."""

    def __init__(self, status: Any) -> None:
        import threading

        from prometheus_client import CollectorRegistry

        from joinlib.adapters.prometheus import PrometheusSensor
        self.lock = threading.Lock()
        self.queries = {status.name: status}
        self.registry = CollectorRegistry()
        self.sensor = PrometheusSensor(self.registry)
        self.replans: list[tuple[str, str, Any]] = []

    def replan(self, name: str, spec: str, values: Any = None) -> dict[str, Any]:
        self.replans.append((name, spec, values))
        return {"query": name, "run": "second", "replaces": self.queries[name].run, "switch_ms": 9_000}


def _status(now_stats: dict[str, Any], submitted_ms: float = 0.0) -> Any:
    from joinlib.control.messages import PlanMessage
    from joinlib.plan.logical import central
    from joinlib.query import query_to_dict
    from services.planner.service import QueryStatus
    fn = running("pmjoin:rate:2", FITTED_ON).function
    plan = Partitioned(attribute_class(QUERY), fn, tuple(central(QUERY) for _ in range(fn.d)))
    msg = PlanMessage(query_to_dict(QUERY), plan.to_json(), "first")
    return QueryStatus(QUERY.name, "first", plan.to_json(), "pmjoin:rate:2", submitted_ms=submitted_ms, query=QUERY,
                       live=True, stats=_Stats(now_stats), message=msg, repartition=0.25)  # type: ignore[arg-type]


def _metric(planner: _Planner, name: str) -> float:
    return sum(s.value for fam in planner.registry.collect() for s in fam.samples if s.name == name)


def test_the_repartitioner_moves_a_query_whose_rates_moved() -> None:
    from services.planner.repartition import Repartitioner
    planner = _Planner(_status(MOVED))
    part = Repartitioner.__new__(Repartitioner)   # its judgement without its thread
    part.service, part.every_s, part.settle_s = planner, 1.0, 30.0
    assert part.check(QUERY.name, now_ms=10_000) is None and not planner.replans   # not settled: 10 s < 30 s
    out = part.check(QUERY.name, now_ms=40_000)
    assert out is not None and planner.replans == [(QUERY.name, "pmjoin:rate:2", MOVED)]
    st = planner.queries[QUERY.name]
    assert [m["run"] for m in st.repartitions] == ["second"] and st.repartitions[0]["gain"] > 2
    assert _metric(planner, "joinlib_repartitions_total") == 1 and _metric(planner, "joinlib_repartition_gain") > 2


def test_the_repartitioner_leaves_a_fitting_or_switching_query_alone() -> None:
    from services.planner.repartition import Repartitioner
    planner = _Planner(_status(FITTED_ON))
    part = Repartitioner.__new__(Repartitioner)
    part.service, part.every_s, part.settle_s = planner, 1.0, 30.0
    assert part.check(QUERY.name, now_ms=40_000) is None and not planner.replans
    st = planner.queries[QUERY.name]
    assert st.repartition_check is not None and st.repartition_check["due"] is False
    assert _metric(planner, "joinlib_repartition_gain") == pytest.approx(1.0)
    moving = _Planner(_status(MOVED))
    moving.queries[QUERY.name].previous = _status(MOVED)   # a switch under way: its old run still runs
    part.service = moving
    assert part.check(QUERY.name, now_ms=40_000) is None and not moving.replans
