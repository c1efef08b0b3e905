"""Partitioned plans (PMJoin, seed 002) on the real broker: the node services route each source tuple to
its partition's windows (``Host.set_routes``) and run a plan per partition; the output is exactly the
reference join and the bytes per link and kind are the simulator's (issue 14, must-have 3).
"""
from __future__ import annotations

import pytest

from joinlib.plan import partitioned
from joinlib.planner import resolve_plan
from joinlib.pmjoin import partitioned as choose_pm
from tests.integration.test_cluster import _run_and_check, routers  # noqa: F401  (a module fixture)
from tests.integration.test_live import (
    Recorder,
    Services,
    _sites,
    cli,
    generator,
    live_query,
    make_topics,
    submit,
    wait_exact,
)


def _pmjoin(dataset, spec: str) -> partitioned.Partitioned:
    query, _, streams, _ = dataset
    return choose_pm.build(query, streams, spec, lambda q, s: resolve_plan(q, "auto", streams=s))


@pytest.mark.parametrize("spec", ["pmjoin:hash:3", "pmjoin:range:2", "pmjoin:rate:5", "pmjoin:site"])
def test_partitioned_plan_is_exact_and_ships_the_simulated_bytes(routers, kafka_bootstrap, spec):  # noqa: F811
    """``pmjoin:site`` is issue 30's results at a site chosen per join value (one partition per site, each value's
    results where most of its tuples are): on Kafka too, bytes per link and kind equal the simulator's."""
    plan = _pmjoin(routers, spec)
    query = routers[0]
    assert len(plan.plans) == (len(query.sites) if spec == "pmjoin:site" else int(spec.rsplit(":", 1)[1]))
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
    services = Services(kafka_bootstrap)
    try:
        sites = _sites()
        q = live_query(f"pmc{sites[0]}", sites, make_topics(make_topic, 3, partitions=1))
        with pytest.raises(JoinlibError, match="needs per-value rates"):
            submit(services, q, "pmjoin:rate:2")
    finally:
        services.close()


def test_live_value_rates_re_partition_a_running_query(kafka_bootstrap, make_topic, tmp_path, capsys):
    """The live monitor: a query runs with ``pmjoin:hash:2``; its nodes' per-value counts (``joinlib stats NAME
    --live --values FILE``) equal the records' own; the query re-submitted with ``pmjoin:rate:3`` and that file
    partitions every value seen and gives the live contract's results."""
    import json
    import time
    from collections import Counter

    import yaml

    from joinlib.query import query_to_dict
    services = Services(kafka_bootstrap)
    try:
        sites = _sites()
        services.start_nodes(sites)
        topics = make_topics(make_topic, 3, partitions=2)
        qa = live_query(f"pmv{sites[0]}", sites, topics, idle="2s")
        ra = submit(services, qa, "pmjoin:hash:2")
        rec = Recorder()
        generator(services.bootstrap, qa, rec, distinct=12, time_base_ms=0).burst(150)  # 1.5 s of event time
        exp = wait_exact(services, qa, ra["run"], 0, rec, tmp_path, min_results=20)
        want = {s: Counter(t.key[0] for t in exp.on_time[s]) for s in ("S1", "S2", "S3")}   # late ones are not
        vfile, deadline, got = tmp_path / "values.json", time.monotonic() + 45, {}
        while True:   # the nodes report every 10 s: until a report has counted every record
            if cli(["stats", qa.name, "--live", "--url", services.url, "--values", str(vfile)]) == 0:
                stats = json.loads(vfile.read_text())
                got = {s: Counter({v: round(r * stats["span_ms"][s] / 1000) for v, r in zip(stats["values"], row,
                                                                                          strict=True) if r})
                       for s, row in zip(stats["streams"], stats["rates"], strict=True)}
                if got == want:
                    break
            assert time.monotonic() < deadline, f"the live per-value counts never matched the records: {got} != {want}"
            time.sleep(1)
        assert f"wrote the live rates of {len(stats['values'])} values of S1.dest" in capsys.readouterr().out
        assert cli(["stop", qa.name, "--url", services.url]) == 0

        # the same records again, from the beginning of the topics
        qb = live_query(f"pmw{sites[0]}", sites, topics, idle="2s", formats=[{"start": "earliest"}] * 3)
        qfile = tmp_path / "qb.yaml"
        qfile.write_text(yaml.safe_dump(query_to_dict(qb)))
        assert cli(["submit", str(qfile), "--plan", "pmjoin:rate:3", "--values", str(vfile), "--since", "0",
                    "--url", services.url]) == 0
        plan = services.planner.status(qb.name)["plan"]["partitioned"]
        assert len(plan["plans"]) == 3 and plan["function"]["kind"] == "map"
        assert sorted(str(v) for v, _ in plan["function"]["map"]) == sorted(map(str, stats["values"]))
        wait_exact(services, qb, services.planner.status(qb.name)["run"], 0, rec, tmp_path, min_results=20)
        services.planner.stop(qb.name)
    finally:
        services.close()
