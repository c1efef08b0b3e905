"""Adaptive re-planning with live plan migration gives exactly the reference join.

Random queries (2-4 streams, chain / star / cycle / complete, time and tuple windows, shared
sites), data whose rates and key distributions change from phase to phase, a monitor made touchy
(short intervals, low threshold, little persistence, often no noise test) so that plans change
often, CNU and DNU, any fence margin -- and nodes crashed and restarted from checkpoints in the
middle of migrations."""
from __future__ import annotations

import os
from collections import Counter

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from joinlib.adaptive.config import AdaptiveConfig
from joinlib.adaptive.embedded import AdaptiveReport, Restart, run_adaptive
from joinlib.adaptive.stats import MonitorConfig
from joinlib.model import Query, Tup
from joinlib.reference import reference_join
from joinlib.testing import TestingSink, assert_same
from joinlib.testing.strategies import queries

# ADAPTIVE_EXAMPLES=2000 python -m pytest tests/property/test_adaptive_exactness.py: a longer hunt
EXAMPLES = int(os.environ.get("ADAPTIVE_EXAMPLES", "60"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def changing_data(draw, query: Query, max_phases: int = 4) -> dict[str, list[Tup]]:
    """Per stream, phases of random length, each with its own rate (tuples per phase, bursts
    allowed) and key domain (1 to 6 values): statistics that change over time."""
    out = {}
    for s in query.streams:
        t0 = 0
        tups: list[Tup] = []
        for _ in range(draw(st.integers(1, max_phases))):
            span = draw(st.integers(5, 120))
            n = draw(st.integers(0, 14))
            nvals = draw(st.integers(1, 6))
            ts = sorted(draw(st.lists(st.integers(t0, t0 + span - 1), min_size=n, max_size=n)))
            for t in ts:
                key = tuple(draw(st.sampled_from([f"v{v}" for v in range(nvals)])) for _ in s.join_attrs)
                i = len(tups)
                tups.append(Tup(s.pos, i, t, i, key, b"r" * draw(st.integers(0, 3))))
            t0 += span
        out[s.name] = tups
    return out


@st.composite
def configs(draw, query: Query) -> AdaptiveConfig:
    tau = query.execution.interval_ms
    interval = tau * draw(st.integers(1, 3))
    monitor = MonitorConfig(interval, draw(st.sampled_from([0.1, 0.3, 0.6])), draw(st.integers(1, 2)),
                            interval * draw(st.integers(1, 3)), draw(st.sampled_from([0.0, 0.0, 1.0, 3.0])))
    return AdaptiveConfig(draw(st.sampled_from(["cnu", "dnu"])), monitor, draw(st.integers(1, 3)),
                          draw(st.sampled_from(query.sites)))


def run(query, data, config, restarts=()) -> tuple[Counter, AdaptiveReport]:
    sink = TestingSink(query)
    rep = run_adaptive(query, data, config, sink, restarts=restarts, checkpoint_ms=query.execution.interval_ms * 2)
    return sink.counts(), rep


def assert_exact(query, data, config, restarts=()) -> None:
    got, rep = run(query, data, config, restarts)
    event(f"plan changes: {min(len(rep.changes), 3)}{'+' if len(rep.changes) >= 3 else ''}")
    assert_same(got, reference_join(query, data),
                f"{config.mode}: changes {[(c['from_epoch'], c['plan']) for c in rep.changes]}")


@SETTINGS
@given(st.data())
def test_adaptive_runs_are_exact(data):
    query = data.draw(queries())
    streams = data.draw(changing_data(query))
    assert_exact(query, streams, data.draw(configs(query)))


@settings(SETTINGS, max_examples=max(1, EXAMPLES * 2 // 3))
@given(st.data())
def test_adaptive_runs_with_a_node_restarted_are_exact(data):
    """A node crashes at a random time -- often in a migration: shadow windows half copied, a
    fence up, LOCAL_READY sent -- and restarts from its last checkpoint, replaying its inputs; its
    messages go out again (receivers drop the copies) and its results since the checkpoint are
    dropped and produced again."""
    query = data.draw(queries())
    streams = data.draw(changing_data(query))
    config = data.draw(configs(query))
    span = max([t.ts for v in streams.values() for t in v] or [0]) + 3 * query.execution.interval_ms
    restarts = [Restart(data.draw(st.sampled_from(query.sites)), data.draw(st.floats(1, span)))
                for _ in range(data.draw(st.integers(1, 2)))]
    assert_exact(query, streams, config, restarts)
