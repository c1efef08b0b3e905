"""The automatic re-partition on the real broker (issue 29 item 2; services/planner/repartition.py): a live
``pmjoin:rate:2`` query submitted with per-value rates that no longer hold -- each value's tuples now come mostly
from the other site -- is moved by the planner, unasked, to a function fitted to the rates its nodes report, with a
replan; its output stays exact across the switch (every result of the reference join once, none missing)."""
from __future__ import annotations

import json
import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

import joinlib.node.run_report as run_report
from joinlib.adapters.kafka import make_producer
from joinlib.cli.main import main as cli
from joinlib.query import query_to_dict
from services.planner.service import PlannerService
from tests.integration.test_live import (
    WAIT_S,
    Recorder,
    _sites,
    live_query,
    make_topics,
    services,  # noqa: F401  (a module fixture)
    wait_exact,
)
from tests.integration.test_live_replan import _switched

VALUES = [f"10.0.0.{i}" for i in range(20)]


def stats_where_heavy_at_first(heavy: set[str], streams: list[str]) -> dict[str, Any]:
    """Per-value rates (the JSON of ``joinlib stats --values``): the values of ``heavy`` mostly from the first
    stream, the others from the second."""
    rows = [[9.0 if v in heavy else 1.0 for v in VALUES], [1.0 if v in heavy else 9.0 for v in VALUES]]
    return {"by": [[s, "dest"] for s in streams], "streams": streams, "values": VALUES, "rates": rows}


def write_skewed(bootstrap: str, topics: list[str], rec: Recorder, seconds: float, rate: float = 50.0,
                 first_id: int = 0) -> None:
    """``rate`` records/s per topic for ``seconds``: the first topic draws 90 % of its values from VALUES[:10],
    the second 90 % from VALUES[10:] (event time: the wall clock)."""
    rng = random.Random(7)
    out = make_producer(bootstrap, **{"linger.ms": 5, "enable.idempotence": True, "acks": "all"})
    start, sent = time.monotonic(), 0
    while time.monotonic() - start < seconds:
        due = int((time.monotonic() - start) * rate)
        while sent < due:
            for i, topic in enumerate(topics):
                home, other = (VALUES[:10], VALUES[10:]) if i == 0 else (VALUES[10:], VALUES[:10])
                dest = rng.choice(home if rng.random() < 0.9 else other)
                value = json.dumps({"id": first_id + sent, "ts": int(time.time() * 1000), "dest": dest}).encode()

                def cb(err: Any, msg: Any, stream: str = f"S{i + 1}", value: bytes = value) -> None:
                    if err is None:
                        rec.add(stream, msg.partition(), msg.offset(), value)
                out.produce(topic, value, None, on_delivery=cb)
            sent += 1
        out.poll(0)
        time.sleep(0.01)
    out.flush(30)


def test_a_stale_rate_partition_is_repartitioned_exactly(services, make_topic, tmp_path: Path, monkeypatch,  # noqa: F811
                                                         capsys):
    monkeypatch.setattr(run_report, "VALUES_EVERY_S", 1.0)   # the nodes report per-value rates every second
    part = services.planner.repartitioner
    monkeypatch.setattr(part, "every_s", 1.0)
    monkeypatch.setattr(part, "settle_s", 7.0)   # a replan's warm-up window must lie after the query's start
    sites = _sites(2)
    services.start_nodes(sites)
    topics = make_topics(make_topic, 2, partitions=1)
    q = live_query(f"lvrep{sites[0]}", sites, topics)
    doc = query_to_dict(q)
    # fitted to rates where half of each site's heavy values are the other site's now: each group mixes both kinds
    doc["partition_values"] = stats_where_heavy_at_first(set(VALUES[0:5] + VALUES[10:15]), ["S1", "S2"])
    first = services.planner.submit(yaml.safe_dump(doc), "pmjoin:rate:2", None, "now", repartition=0.25)
    rec = Recorder()
    flowing = threading.Thread(target=write_skewed, args=(services.bootstrap, topics, rec, 22.0))
    flowing.start()
    try:
        deadline = time.monotonic() + WAIT_S
        while not (services.planner.status(q.name).get("repartition") or {}).get("moves"):
            assert time.monotonic() < deadline, f"no re-partition: {services.planner.status(q.name).get('repartition')}"
            time.sleep(0.5)
        st = services.planner.status(q.name)
        move = st["repartition"]["moves"][0]
        assert move["from_run"] == first["run"] and move["gain"] > 1.25, move
        assert st["run"] == move["run"] and st["planner"] == "pmjoin:rate:2"
        _switched(services, q.name, move["run"])
        assert services.planner.repartitioner.check(q.name) is None, "the refit is judged as fitting: no second move"
    finally:
        flowing.join()
    want = wait_exact(services, q, move["run"], first["origin_ms"], rec, tmp_path, min_results=200,
                      replaced=(first["run"],))
    assert want.count > 0
    last = services.planner.status(q.name)["repartition"]
    assert len(last["moves"]) == 1 and last["last_check"]["due"] is False, last
    assert cli(["queries", q.name, "--url", services.url]) == 0
    assert "repartition at 1.25x; last check: running function" in capsys.readouterr().out
    restarted = PlannerService(services.bootstrap)   # reads control back: the threshold rides in the plan message
    try:
        deadline = time.monotonic() + WAIT_S
        while (restarted.status(q.name) or {}).get("run") != move["run"]:
            assert time.monotonic() < deadline, restarted.status(q.name)
            time.sleep(0.3)
        st = restarted.status(q.name)
        assert st["planner"] == "pmjoin:rate:2" and st["repartition"]["threshold"] == 0.25, st
    finally:
        restarted.close()
    services.planner.stop(q.name)


def test_repartition_needs_a_fitted_live_partitioned_plan(services, make_topic):  # noqa: F811
    sites = _sites(2)
    q = live_query(f"lvrepe{sites[0]}", sites, make_topics(make_topic, 2, partitions=1))
    text = yaml.safe_dump(query_to_dict(q))
    for plan, match in (("pmjoin:hash:2", "pmjoin:rate|range|site"), ("reduce", "pmjoin:rate|range|site")):
        with pytest.raises(Exception, match=match):
            services.planner.submit(text, plan, None, "now", repartition=0.25)
    with pytest.raises(Exception, match="must be positive"):
        services.planner.submit(text, "pmjoin:rate:2", None, "now", repartition=0.0)


def test_replan_to_auto_weighs_every_kind_on_a_sample_of_the_sources(services, make_topic, tmp_path: Path):  # noqa: F811
    """``joinlib replan NAME --plan auto`` on a running live query plans as ``--data`` does (issue 30 item 1): on a
    sample of its sources' newest records, every run kind.  Each value's tuples come mostly from one site, so a
    plan per partition -- each value joined where most of its tuples are -- wins over the running reduction; the
    move is exact."""
    sites = _sites(2)
    services.start_nodes(sites)
    topics = make_topics(make_topic, 2, partitions=1)
    q = live_query(f"lvauto{sites[0]}", sites, topics)
    first = services.planner.submit(yaml.safe_dump(query_to_dict(q)), "reduce", None, "now")
    rec = Recorder()
    flowing = threading.Thread(target=write_skewed, args=(services.bootstrap, topics, rec, 20.0))
    flowing.start()
    try:
        time.sleep(8.0)   # more than a window, δ and the replan's 5 s slack; a sample of several windows
        new = services.planner.replan(q.name, "auto")
        assert "partitioned" in new["plan"], new["plan"]
        _switched(services, q.name, new["run"])
    finally:
        flowing.join()
    wait_exact(services, q, new["run"], first["origin_ms"], rec, tmp_path, min_results=200, replaced=(first["run"],))
    services.planner.stop(q.name)


def test_submit_auto_with_a_sample_plans_on_the_topics_newest_records(services, make_topic, tmp_path: Path):  # noqa: F811
    """``joinlib submit --plan auto --sample``: a new live query over topics that already hold records is planned on
    them as ``--data`` plans -- here the per-value partitioning their per-site skew calls for -- and runs exactly on
    what comes after its start; ``--sample`` with another plan is one clear error."""
    sites = _sites(2)
    services.start_nodes(sites)
    topics = make_topics(make_topic, 2, partitions=1)
    q = live_query(f"lvsmp{sites[0]}", sites, topics)
    text = yaml.safe_dump(query_to_dict(q))
    write_skewed(services.bootstrap, topics, Recorder(), 8.0)   # the topics' history: before the query starts
    with pytest.raises(Exception, match="--sample goes with --plan auto"):
        services.planner.submit(text, "reduce", None, "now", sample=True)
    out = services.planner.submit(text, "auto", None, "now", sample=True)
    assert "partitioned" in out["plan"], out["plan"]
    rec = Recorder()
    write_skewed(services.bootstrap, topics, rec, 10.0, first_id=10**6)
    wait_exact(services, q, out["run"], out["origin_ms"], rec, tmp_path, min_results=200)
    services.planner.stop(q.name)
