"""A node's phase hook (joinlib.node.run_report.phase_hook) reports exactly what its sensors' own ``on_phase`` do."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest

from joinlib.adapters.prometheus import PROCESSING_BUCKETS, PrometheusSensor
from joinlib.node.run_report import QuerySensor, TeeSensor
from joinlib.runtime.sensor import TotalsSensor

PHASES = st.tuples(st.sampled_from(["n1", "n2"]), st.sampled_from(["tick", "start", "probe", "ship", "custom"]),
                   st.one_of(st.sampled_from([0.0, *PROCESSING_BUCKETS]),
                             st.floats(min_value=0.0, max_value=5.0, allow_nan=False)))


def _exposition(reg: CollectorRegistry) -> list[str]:
    return sorted(ln for ln in generate_latest(reg).decode().splitlines() if "_created" not in ln)


@settings(max_examples=100, deadline=None)
@given(st.lists(PHASES, max_size=40))
def test_a_nodes_tee_reports_what_its_sensors_do(phases):
    fast_reg, ref_reg = CollectorRegistry(), CollectorRegistry()
    fast_totals, ref_totals = TotalsSensor(), TotalsSensor()
    ref_prom = PrometheusSensor(ref_reg, "q")
    fast = TeeSensor(QuerySensor(PrometheusSensor(fast_reg, "q"), "q"), fast_totals)   # as node_run nests them
    for site, op, s in phases:
        fast.on_phase(site, op, s)
        ref_prom.on_phase(site, op, s)
        ref_totals.on_phase(site, op, s)
    assert _exposition(fast_reg) == _exposition(ref_reg)
    assert dict(fast_totals.processing) == dict(ref_totals.processing)


def test_other_mixes_call_each_sensor():
    class Logged(TotalsSensor):
        def __init__(self) -> None:
            super().__init__()
            self.calls: list[tuple[str, str, float]] = []

        def on_phase(self, site: str, operator: str, seconds: float) -> None:
            self.calls.append((site, operator, seconds))

    class OwnPhases(PrometheusSensor):   # observes phases otherwise: the hook must call it
        def on_phase(self, site: str, operator: str, seconds: float) -> None:
            self.seen = (site, operator, seconds)

    a, b, totals = Logged(), Logged(), TotalsSensor()
    TeeSensor(a, TeeSensor(b, totals)).on_phase("n1", "tick", 0.5)
    assert a.calls == b.calls == [("n1", "tick", 0.5)] and totals.processing[("n1", "tick")] == 0.5
    own = OwnPhases(CollectorRegistry())
    TeeSensor(own, TotalsSensor()).on_phase("n1", "probe", 0.25)
    assert own.seen == ("n1", "probe", 0.25)
