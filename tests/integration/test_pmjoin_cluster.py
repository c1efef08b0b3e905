"""Partitioned plans (PMJoin, seed 002) on the real broker: the node services route each source tuple to
its partition's windows (``Host.set_routes``) and run a plan per partition; the output is exactly the
reference join and the bytes per link and kind are the simulator's (issue 14, must-have 3).
"""
from __future__ import annotations

import pytest

from joinlib import partitioned
from joinlib.planner import resolve_plan
from tests.integration.test_cluster import _run_and_check, routers  # noqa: F401  (a module fixture)


def _pmjoin(dataset, spec: str) -> partitioned.Partitioned:
    query, _, streams, _ = dataset
    return partitioned.build(query, streams, spec, lambda q, s: resolve_plan(q, "auto", streams=s))


@pytest.mark.parametrize("spec", ["pmjoin:hash:3", "pmjoin:range:2", "pmjoin:rate:5"])
def test_partitioned_plan_is_exact_and_ships_the_simulated_bytes(routers, kafka_bootstrap, spec):  # noqa: F811
    plan = _pmjoin(routers, spec)
    assert len(plan.plans) == int(spec.rsplit(":", 1)[1])
    report = _run_and_check(routers, plan, kafka_bootstrap, mode="thread")
    assert report["plan"] == plan.to_json()


def test_partitioned_plan_with_redis_windows_and_a_killed_node(routers, kafka_bootstrap, redis_url,  # noqa: F811
                                                               monkeypatch):
    """Node processes with Redis windows; one is SIGKILLed mid-run and resumes from its checkpoint, every
    partition's windows rolled back with it: still exact, still the simulator's bytes."""
    monkeypatch.setenv("JOINLIB_CHECKPOINT_EVERY_S", "0.25")
    plan = _pmjoin(routers, "pmjoin:hash:2")
    report = _run_and_check(routers, plan, kafka_bootstrap, mode="process", redis_url=redis_url, rate_scale=1.0,
                            faults=[("r2", 0.8)])
    assert [r["site"] for r in report["restarts"]] == ["r2"]
    assert report["sites"]["r2"]["resumed_from_epoch"] is not None
