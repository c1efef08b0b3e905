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


def test_live_partitioned_queries_submitted_with_and_without_value_rates(kafka_bootstrap, make_topic, tmp_path):
    """Continuous queries: ``pmjoin:hash:2`` (no statistics) and ``pmjoin:rate:3`` with per-value rates sent
    with the query (``joinlib submit --values``: here a third of the values hot at each site, the others
    unseen, to the default hash) on the same node services: each gives the live contract's results."""
    from joinlib.ingest.events import _dest
    from tests.integration.test_live import (
        Recorder,
        Services,
        _sites,
        generator,
        live_query,
        make_topics,
        submit,
        wait_exact,
    )
    services = Services(kafka_bootstrap)
    try:
        sites = _sites()
        services.start_nodes(sites)
        topics = make_topics(make_topic, 3, partitions=2)
        # idle 5 s: no partition may advance by processing time while the second query is being planned
        qa = live_query(f"pma{sites[0]}", sites, topics, idle="5s")
        qb = live_query(f"pmb{sites[0]}", sites, topics, window="2s", idle="5s")
        ra = submit(services, qa, "pmjoin:hash:2")
        values = [_dest(k) for k in range(30)]
        stats = {"streams": ["S1", "S2", "S3"], "values": values,
                 "rates": [[10.0 if k % 3 == i else 0.5 for k in range(30)] for i in range(3)]}
        import yaml

        from joinlib.query import query_to_dict
        rb = services.planner.submit(yaml.safe_dump({**query_to_dict(qb), "partition_values": stats}),
                                     "pmjoin:rate:3", None, "0")
        assert len(ra["plan"]["partitioned"]["plans"]) == 2 and len(rb["plan"]["partitioned"]["plans"]) == 3
        assert rb["plan"]["partitioned"]["function"]["kind"] == "map"
        rec = Recorder()
        generator(services.bootstrap, qa, rec, distinct=40, time_base_ms=0).burst(250)
        wait_exact(services, qa, ra["run"], 0, rec, tmp_path, min_results=50)
        wait_exact(services, qb, rb["run"], 0, rec, tmp_path, min_results=50)
        for q in (qa, qb):
            services.planner.stop(q.name)
    finally:
        services.close()


def test_submitting_rate_partitioning_without_value_rates_is_a_clear_error(kafka_bootstrap, make_topic):
    from joinlib.errors import JoinlibError
    from tests.integration.test_live import Services, _sites, live_query, make_topics, submit
    services = Services(kafka_bootstrap)
    try:
        sites = _sites()
        q = live_query(f"pmc{sites[0]}", sites, make_topics(make_topic, 3, partitions=1))
        with pytest.raises(JoinlibError, match="needs per-value rates"):
            submit(services, q, "pmjoin:rate:2")
    finally:
        services.close()
