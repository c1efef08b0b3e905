"""FastHistogram exposes exactly what prometheus_client's Histogram exposes for the same observations."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from joinlib.adapters.prom_histogram import FastHistogram
from joinlib.adapters.prometheus import PROCESSING_BUCKETS, PrometheusSensor

LABELS = [("r1", "tick"), ("r1", "probe"), ("r2", "tick")]
# values on the bounds (le is inclusive), between them, below the first and above the last
VALUES = st.one_of(st.sampled_from([0.0, *PROCESSING_BUCKETS]),
                   st.floats(min_value=0.0, max_value=5.0, allow_nan=False))


def _exposition(reg: CollectorRegistry) -> list[str]:
    """The text exposition without the client's ``_created`` series (a creation time, not an observation)."""
    return [ln for ln in generate_latest(reg).decode().splitlines() if "_created" not in ln]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(LABELS), VALUES), max_size=60))
def test_same_exposition_as_the_clients_histogram(obs):
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    fast = FastHistogram("x_seconds", "help text", ["site", "operator"], PROCESSING_BUCKETS, ours)
    ref = Histogram("x_seconds", "help text", ["site", "operator"], buckets=PROCESSING_BUCKETS, registry=theirs)
    for labels in {lab for lab, _ in obs}:
        ref.labels(*labels)   # the client shows a series from its first labels() call: same set of series
    for labels, v in obs:
        fast.observe(labels, v)
        ref.labels(*labels).observe(v)
    assert sorted(_exposition(ours)) == sorted(_exposition(theirs))


def test_the_sensor_reports_phases_and_transmissions():
    reg = CollectorRegistry()
    sensor = PrometheusSensor(reg)
    sensor.on_phase("r1", "start", 0.0004)   # start belongs to the tick group
    sensor.on_phase("r1", "tick", 2.0)
    sensor.on_transmission("r1", "r2", "tuples", -0.5)   # clocks apart: counted at 0
    got = {(s.name, tuple(sorted(s.labels.items()))): s.value for fam in reg.collect() for s in fam.samples}
    assert got[("joinlib_processing_seconds_count", (("operator", "tick"), ("site", "r1")))] == 2
    assert got[("joinlib_processing_seconds_bucket", (("le", "0.0005"), ("operator", "tick"), ("site", "r1")))] == 1
    assert got[("joinlib_processing_seconds_sum", (("operator", "tick"), ("site", "r1")))] == pytest.approx(2.0004)
    assert got[("joinlib_transmission_seconds_bucket", (("dst", "r2"), ("kind", "tuples"), ("le", "0.0005"),
                                                         ("src", "r1")))] == 1


def test_bad_buckets_and_labels_are_refused():
    with pytest.raises(ValueError, match="increase strictly"):
        FastHistogram("y", "h", ["a"], [0.1, 0.1], CollectorRegistry())
    h = FastHistogram("z", "h", ["a", "b"], [0.1], CollectorRegistry())
    with pytest.raises(ValueError, match="expected 2 label values"):
        h.observe(("only",), 0.2)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(LABELS), st.integers(min_value=0, max_value=10**9)), max_size=60))
def test_fast_counter_same_exposition_as_the_clients_counter(obs):
    from prometheus_client import Counter

    from joinlib.adapters.prom_histogram import FastCounter
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    fast = FastCounter("x_bytes", "help text", ["site", "operator"], ours)
    ref = Counter("x_bytes", "help text", ["site", "operator"], registry=theirs)
    for labels, n in obs:
        fast.inc(labels, n)
        ref.labels(*labels).inc(n)
    assert _exposition(ours) == _exposition(theirs)
    for labels, _ in obs:
        assert fast.value(labels) == ref.labels(*labels)._value.get()
