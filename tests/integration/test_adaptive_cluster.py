"""Adaptive re-planning (seed 003) in cluster mode: node services on the real Kafka broker, windows in
the real Redis server (docs/adaptive.md, "Cluster mode").

The 4-way toggle workload of ``joinlib experiment adaptive`` (S4 at 50/s, 200/s from 1.5 s, 50/s again
from 3.5 s; 5.5 s of data), replayed at event-time pace: the nodes measure S4, re-plan (CNU at N1, or
DNU by relays) and migrate twice -- up and back to the initial plan -- while the data flows.  The output
is exactly the reference join, every node switched twice (``joinlib_plan_changes_total`` = 2 in every
node's registry) and the protocol's messages went over the node topics.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from joinlib.adaptive.config import AdaptiveConfig
from joinlib.adaptive.planner import algorithm1
from joinlib.adaptive.stats import with_stats
from joinlib.adaptive.workload import Toggle, write_toggle
from joinlib.data.files import load_streams
from joinlib.errors import ClusterError
from joinlib.model import Query
from joinlib.node.cluster import run_cluster
from joinlib.query import load_query, parse_query, query_to_dict
from joinlib.reference import reference_join
from joinlib.runtime.sink import CollectingSink

REPO = Path(__file__).resolve().parents[2]
DURATION_MS = 5500
TIMEOUT_S = 60


@pytest.fixture(scope="module")
def toggle4(tmp_path_factory):
    d = query_to_dict(load_query(REPO / "examples" / "toggle4.yaml"))
    d["name"] = "it_toggle4"
    query = parse_query(d, "toggle4 (integration)")
    out = tmp_path_factory.mktemp("toggle4")
    write_toggle(query, Toggle("S4"), out, DURATION_MS, 2)
    streams = load_streams(query, out)
    return query, streams, Counter(reference_join(query, streams))


def _samples(reg, name: str) -> dict:
    return {tuple(sorted(s.labels.items())): s.value for fam in reg.collect() for s in fam.samples if s.name == name}


@pytest.mark.parametrize("mode", ["cnu", "dnu"])
def test_adaptive_run_on_kafka_and_redis_is_exact_and_changes_plans(toggle4, kafka_bootstrap, redis_url,
                                                                     redis_client, mode):
    query, streams, want = toggle4
    cfg = AdaptiveConfig(mode)
    initial = algorithm1(with_stats(query, {}), cfg.model)
    sink = CollectingSink(query)
    registries: dict = {}
    report = run_cluster(query, streams, initial.to_plan(query), sink, bootstrap=kafka_bootstrap,
                         redis_url=redis_url, mode="thread", rate_scale=1.0, timeout_s=TIMEOUT_S,
                         registries=registries, adaptive=cfg)

    got = Counter((ids, ts) for ids, ts, _ in sink.results)
    missing, extra = want - got, got - want
    assert not missing and not extra, (f"{sum(missing.values())} missing, {sum(extra.values())} extra or "
                                       f"duplicated; e.g. missing {list(missing.items())[:3]}")
    assert report["results"] == sum(want.values()) > 0

    ad = report["adaptive"]
    assert ad["mode"] == mode and ad["initial_plan"] == initial.to_json()
    assert [t["stream"] for t in ad["triggers"]] == ["S4", "S4"]          # up at 1.5 s, down at 3.5 s
    assert len(ad["changes"]) == 2 and ad["changes"][0]["plan"] != ad["initial_plan"]
    assert ad["changes"][1]["plan"] == ad["initial_plan"]                 # back to the initial plan
    assert ad["plan_changes_per_node"] == {s: 2 for s in query.sites}
    assert [s["generation"] for s in report["switches"]] == [0, 1, 2]
    rnd = [r for r in ad["rounds"] if r["round"] is not None][0]
    assert rnd["synchronisation"] == 2 * 4 * 3                             # 2n(n-1): LOCAL_ and GLOBAL_READY
    if mode == "cnu":
        assert rnd["modification"] == 4                                   # one report, n - 1 updates
    assert {ln["kind"] for ln in report["links"]} >= {"full", "modification", "migration", "sync"}
    for ln in report["links"]:                                            # every message sent arrived
        assert ln["received_messages"] == ln["messages"], ln

    # the metrics: every node switched twice and is back at generation 2
    assert set(registries) == set(query.sites)
    for site, reg in registries.items():
        assert _samples(reg, "joinlib_plan_changes_total") == {(("query", query.name), ("site", site)): 2.0}
        assert set(_samples(reg, "joinlib_plan_generation").values()) == {2.0}
    # windows were in Redis, and the run's keys are gone
    assert not list(redis_client.scan_iter(match="{joinlib:%s:%s/*" % (query.name, report["run"]), count=1000))


def test_a_node_killed_during_the_first_migration_resumes_and_the_output_stays_exact(toggle4, kafka_bootstrap,
                                                                                     redis_url, monkeypatch):
    """SIGKILL the node process of N2 1.9 s into the replay -- S4 went up at 1.5 s, the first round is under
    way -- and start a new one: it resumes from its checkpoint (its node state, its Redis windows) and hands
    the inputs logged since over in the same order, so it repeats its decisions; the output is exact and every
    node made the same plan changes."""
    query, streams, want = toggle4
    monkeypatch.setenv("JOINLIB_CHECKPOINT_EVERY_S", "0.25")
    cfg = AdaptiveConfig("cnu")
    sink = CollectingSink(query)
    report = run_cluster(query, streams, algorithm1(with_stats(query, {}), cfg.model).to_plan(query), sink,
                         bootstrap=kafka_bootstrap, redis_url=redis_url, mode="process", rate_scale=1.0,
                         timeout_s=TIMEOUT_S, faults=[("N2", 1.9)], adaptive=cfg)
    got = Counter((ids, ts) for ids, ts, _ in sink.results)
    assert got == want, f"{sum((want - got).values())} missing, {sum((got - want).values())} extra or duplicated"
    assert [r["site"] for r in report["restarts"]] == ["N2"]
    assert report["sites"]["N2"]["resumed_from_epoch"] is not None, report["sites"]["N2"]
    ad = report["adaptive"]
    assert len(ad["changes"]) >= 1 and ad["plan_changes_per_node"] == {s: len(ad["changes"]) for s in query.sites}


def test_a_node_started_again_refuses_an_adaptive_run_it_already_ran(toggle4, kafka_bootstrap):
    """Without Redis there are no checkpoints: a node started for an adaptive run that it already ran (its
    status is on control, its done is not) refuses it with one error rather than start it over."""
    import uuid

    from prometheus_client import CollectorRegistry

    from joinlib.adapters.kafka import ensure_topics, make_admin, make_producer, produce_control_sync, query_topics
    from joinlib.control.run_plan import AdaptiveRun
    from joinlib.node.node_service import NodeService
    query = toggle4[0]
    cfg = AdaptiveConfig("cnu")
    plan = algorithm1(with_stats(query, {}), cfg.model).to_plan(query)
    run = uuid.uuid4().hex[:12]
    ensure_topics(make_admin(kafka_bootstrap), query_topics(query))
    producer = make_producer(kafka_bootstrap)
    produce_control_sync(producer, query.name, "plan", AdaptiveRun(cfg, plan).message(query, run, {}).to_json())
    produce_control_sync(producer, query.name, "status", {"site": "N2", "run": run, "epoch": 3})
    svc = NodeService("N2", kafka_bootstrap, query=query.name, run=run, registry=CollectorRegistry(),
                      plan_timeout_s=20, quiet=True)
    with pytest.raises(ClusterError, match="cannot be resumed after a crash"):
        svc.run()


# ----------------------------------------------------------------------------- continuous (live) queries


def _live_toggle(kind: str, make_topic, tmp_path: Path) -> tuple[list[str], Query, dict[str, list[dict]]]:
    """The toggle query with each stream read live from a JSON topic of its own at its own test-unique site
    (``kind`` tells one test's sites, topics and query from another's), and its rows by stream: the S4 toggle
    written under ``tmp_path``."""
    import json
    import uuid
    tag = uuid.uuid4().hex[:6]
    sites = [f"{kind}{i}{tag}" for i in range(1, 5)]
    topics = [make_topic(f"{kind}toggle-{i}", partitions=1) for i in range(1, 5)]
    d = query_to_dict(load_query(REPO / "examples" / "toggle4.yaml"))
    d["name"] = name = f"lv{kind}{tag}"
    d["network"].pop("nodes", None)
    for (_, spec), site, topic in zip(sorted(d["streams"].items()), sites, topics, strict=True):
        spec["site"] = site
        spec["source"] = {"topic": topic, "format": "json", "time": {"field": "ts", "unit": "ms"}, "id": "id"}
    d["execution"]["idle_timeout"] = "3s"
    q = parse_query(d, name)
    src = tmp_path / "data"
    write_toggle(q, Toggle("S4"), src, DURATION_MS, 3)
    rows = {s.name: [json.loads(x) for x in (src / f"{s.name}.jsonl").read_text().splitlines()] for s in q.streams}
    return sites, q, rows


def _produce_paced(bootstrap: str, query, rows: dict, rec) -> None:
    """The rows of every stream to its topic, epoch by epoch at event-time pace (tuples of one epoch at once)."""
    import json
    import time

    from joinlib.adapters.kafka import make_producer
    producer = make_producer(bootstrap)
    tau = query.execution.interval_ms
    last = max(r["ts"] for rs in rows.values() for r in rs) // tau
    t0 = time.monotonic()
    for e in range(last + 1):
        for s in query.streams:
            def delivered(_err, m, n=s.name) -> None:
                rec.add(n, m.partition(), m.offset(), m.value())
            for r in rows[s.name]:
                if r["ts"] // tau == e:
                    producer.produce(s.source.topic, json.dumps(r).encode(), partition=0, on_delivery=delivered)
        producer.poll(0)
        time.sleep(max(0.0, t0 + (e + 1) * tau / 1000.0 - time.monotonic()))
    producer.flush(30)


def test_live_adaptive_query_changes_plans_and_shows_them(kafka_bootstrap, redis_url, redis_client, make_topic,
                                                          tmp_path, capsys):
    """``joinlib submit --plan adaptive`` of a query over four JSON topics: the node services (one per site,
    serving) measure S4's rate toggling, re-plan and migrate; ``joinlib queries`` shows the plan changes;
    the results are exactly the live contract's (the reference join of the on-time records)."""
    import time

    from joinlib.cli.main import main as cli
    from tests.integration.test_live import Recorder, Services, submit, wait_exact
    sites, q, rows = _live_toggle("n", make_topic, tmp_path)
    services = Services(kafka_bootstrap)
    try:
        services.start_nodes(sites, redis_url=redis_url)   # windows in Redis
        out = submit(services, q, "adaptive", since="0")
        rec = Recorder()
        _produce_paced(kafka_bootstrap, q, rows, rec)
        wait_exact(services, q, out["run"], out["origin_ms"], rec, tmp_path, min_results=50)
        assert list(redis_client.scan_iter(match="{joinlib:%s:%s/*" % (q.name, out["run"]), count=1000)), \
            "the nodes kept no window in Redis"
        deadline = time.monotonic() + 30
        while True:
            sites_st = services.planner.status(q.name)["sites"]
            changes = [(st.get("adaptive") or {}).get("plan_changes", 0) for st in sites_st.values()]
            if len(changes) == 4 and min(changes) >= 1:
                break
            assert time.monotonic() < deadline, f"no plan change at every node: {sites_st}"
            time.sleep(0.5)
        capsys.readouterr()
        assert cli(["queries", q.name, "--url", services.url]) == 0
        text = capsys.readouterr().out
        assert "adaptive   CNU:" in text and "plan change(s)" in text, text
        services.planner.stop(q.name)
    finally:
        services.close()


def test_a_live_adaptive_node_killed_during_a_migration_resumes_and_the_output_stays_exact(
        kafka_bootstrap, redis_url, make_topic, tmp_path):
    """The live toggle query on node *processes* with Redis windows and checkpoints every 0.5 s: SIGKILL the
    node of S2's site 2 s into the paced production -- S4 went up at 1.5 s, the first round is under way -- and
    start it again.  It resumes from its checkpoint, hands the iterations it logged since over again (their
    messages, source records among them, and the watermarks its live sources handed it) and so repeats its
    decisions: the results are exactly the live contract's and every node changed plans."""
    import threading

    from tests.integration.test_live import (
        Recorder,
        Services,
        _node_process,
        _wait_for_text,
        kill_and_restart,
        stop_processes,
        submit,
        wait_exact,
    )
    sites, q, rows = _live_toggle("k", make_topic, tmp_path)
    logs = {s: tmp_path / f"node-{s}.log" for s in sites}
    procs = {s: _node_process(s, kafka_bootstrap, redis_url, logs[s]) for s in sites}
    services = Services(kafka_bootstrap)
    try:
        for site in sites:   # started (a loaded machine takes seconds): the kill must come while the data flows
            _wait_for_text(logs[site], "serving every query", timeout_s=60)
        out = submit(services, q, "adaptive", since="0")
        rec = Recorder()
        producing = threading.Thread(target=_produce_paced, args=(kafka_bootstrap, q, rows, rec))
        producing.start()
        victim = sites[1]
        kill_and_restart(procs, victim, logs[victim], f"running query {q.name}", 2.0, kafka_bootstrap, redis_url)
        producing.join()
        wait_exact(services, q, out["run"], out["origin_ms"], rec, tmp_path, min_results=50)
        text = logs[victim].read_text()
        assert "resumed from the checkpoint" in text and "logged iteration(s) over again" in text, text[-3000:]
        changes = {site: (st.get("adaptive") or {}).get("plan_changes", 0)
                   for site, st in services.planner.status(q.name)["sites"].items()}
        assert len(changes) == 4 and min(changes.values()) >= 1, changes
        services.planner.stop(q.name)
    finally:
        stop_processes(procs.values())
        services.close()
