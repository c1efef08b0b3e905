"""Scale-out within a site (issue 14, must-have 4): a partitioned plan's source and node topics have a Kafka
partition per plan partition, and several node instances of a site share the site's partitions as a consumer
group; a partition moves between instances with its windows (checkpoint, then resume).  Every run here is held
to the reference join (each result once) and to the simulator's bytes per link."""
from __future__ import annotations

import threading
import time
import uuid
from collections import Counter

import pytest
import yaml
from confluent_kafka import TopicPartition
from prometheus_client import CollectorRegistry

from joinlib.adapters.kafka import (
    consume,
    end_offsets,
    ensure_topics,
    is_control_topic,
    make_consumer,
    make_producer,
    produce_control_sync,
    query_topics,
    status_topic,
)
from joinlib.control.run_plan import PartitionedRun
from joinlib.errors import ClusterError
from joinlib.node.cluster import run_cluster
from joinlib.node.node_service import NodeService
from joinlib.node.scale_out import scale_message, scaled_topics, wanted
from joinlib.plan import logical as plans
from joinlib.plan import partitioned
from joinlib.protocol import records
from joinlib.query import parse_query, query_to_dict
from joinlib.runtime.deploy import generations
from services.source.__main__ import main as source_main
from tests.integration.test_cluster import (  # noqa: F401  (module fixtures)
    REPO,
    _dataset,
    _run_and_check,
    routers,
    routers_dc,
    triangle,
)
from tests.integration.test_planner_service import _results
from tests.integration.test_pmjoin_cluster import _pmjoin


@pytest.fixture(scope="module")
def routers_long(tmp_path_factory):
    # examples/routers.yaml at 0.3 of its rates for 12 s (~60k results): long enough to change owners mid-stream
    return _dataset(tmp_path_factory, REPO / "examples" / "routers.yaml", 0.3, 12_000, seed=23)


def _partitions(admin, topic: str) -> int:
    return len(admin.list_topics(topic, timeout=10).topics[topic].partitions)


@pytest.mark.parametrize("spec,instances", [("pmjoin:hash:4", {"r1": 2, "r2": 2}), ("pmjoin:rate:3", {"r3": 3})])
def test_instances_sharing_a_sites_partitions_are_exact(routers, kafka_bootstrap, kafka_admin,  # noqa: F811
                                                        redis_url, redis_client, spec, instances):
    """Node threads, several per site, each running the partitions its group gives it: the reference output,
    the simulator's bytes per link, a done per (site, partition), topics with a partition per plan partition,
    and no Redis key left."""
    query = routers[0]
    plan = _pmjoin(routers, spec)
    d = len(plan.plans)
    report = _run_and_check(routers, plan, kafka_bootstrap, mode="thread", redis_url=redis_url,
                            instances=instances)
    for site in query.sites:
        parts = report["sites"][site]["parts"]
        assert sorted(p["part"] for p in parts) == list(range(d))
        assert sum(p["results"] for p in parts) == report["sites"][site]["results"]
    assert _partitions(kafka_admin, f"src.{query.name}.S1") >= d
    assert _partitions(kafka_admin, f"node.{query.name}.r2.from.r1") >= d
    assert not list(redis_client.scan_iter(match="{joinlib:%s:%s*" % (query.name, report["run"]), count=1000))


def test_broadcast_streams_and_a_processing_only_node_scale_out(triangle, routers_dc, kafka_bootstrap,  # noqa: F811
                                                                redis_url):
    """A stream outside the partition class goes whole to every partition (the triangle's S3), and a
    processing-only node serves only the partitions whose plan uses it (dc, partition 0 here)."""
    from joinlib.plan.partition import HashPartition
    plan = _pmjoin(triangle, "pmjoin:hash:3")
    assert len(plan.by) < len(triangle[0].streams)   # a broadcast stream
    _run_and_check(triangle, plan, kafka_bootstrap, mode="thread", redis_url=redis_url, instances={"r1": 2, "r3": 2})
    query = routers_dc[0]
    dc_first = partitioned.Partitioned(partitioned.attribute_class(query), HashPartition(3),
                                       (plans.central(query, "dc"), plans.central(query, "r1"),
                                        plans.uniform(query, "SP-S")))
    report = _run_and_check(routers_dc, dc_first, kafka_bootstrap, mode="thread", redis_url=redis_url,
                            instances={"dc": 2})
    assert [p["part"] for p in report["sites"]["dc"]["parts"]] == [0]


def test_an_instance_joins_then_one_is_killed_mid_stream(routers_long, kafka_bootstrap, redis_url,
                                                         redis_client, monkeypatch):
    """Issue 14's drill: two node processes for r1 on 4 partitions; 2.5 s into a paced replay a third
    joins (the group moves a partition to it: checkpoint, then resume), 6 s in one of the first two is
    SIGKILLed (its partitions go to the others when its session expires, and resume from its last
    checkpoint).  The output stays exact and the bytes are the simulator's."""
    monkeypatch.setenv("JOINLIB_CHECKPOINT_EVERY_S", "0.5")
    query = routers_long[0]
    plan = _pmjoin(routers_long, "pmjoin:hash:4")
    report = _run_and_check(routers_long, plan, kafka_bootstrap, mode="process", redis_url=redis_url,
                            rate_scale=1.0, instances={"r1": 2}, faults=[("r1", 2.5, "join"), ("r1", 6.0, "kill")])
    assert [(r["site"], r["action"]) for r in report["restarts"]] == [("r1", "join"), ("r1", "kill")]
    assert report["restarts"][1]["successor"] is False
    parts = report["sites"]["r1"]["parts"]
    assert sorted(p["part"] for p in parts) == [0, 1, 2, 3]
    # partitions finished elsewhere than they started resumed from a checkpoint (handed over or taken over)
    assert any(p["resumed_from_epoch"] is not None and p["resumed_from_epoch"] > 0 for p in parts), parts
    assert len({p["instance"] for p in parts}) >= 2, parts
    assert not list(redis_client.scan_iter(match="{joinlib:%s:%s*" % (query.name, report["run"]), count=1000))


def test_scaling_out_is_refused_with_one_line_without_a_partitioned_plan_or_redis(routers, kafka_bootstrap,  # noqa: F811
                                                                                  redis_url):
    query, _, streams, _ = routers
    with pytest.raises(ClusterError, match="needs a partitioned plan"):
        run_cluster(query, streams, plans.uniform(query, "SP-S"), None, bootstrap=kafka_bootstrap,
                    redis_url=redis_url, instances={"r1": 2})
    with pytest.raises(ClusterError, match=r"needs Redis windows \(REDIS_URL\)"):
        run_cluster(query, streams, _pmjoin(routers, "pmjoin:hash:2"), None, bootstrap=kafka_bootstrap,
                    instances={})
    with pytest.raises(ClusterError, match="needs a scaled-out plan"):
        run_cluster(query, streams, _pmjoin(routers, "pmjoin:hash:2"), None, bootstrap=kafka_bootstrap,
                    redis_url=redis_url, faults=[("r1", 1.0, "join")])


def test_shared_serving_nodes_take_a_scaled_plan_replayed_by_the_source_service(routers, kafka_bootstrap,  # noqa: F811
                                                                               kafka_admin, redis_url):
    """What ``docker compose``/Helm replicas do: two serving node services of r1 started ``--shared``, one each
    of r2 and r3; a scaled-out plan on ``control``; ``python -m services.source`` replays the data split by
    the plan's partition function.  Every (site, partition) reports done and out.<query> holds exactly the
    reference join."""
    base, out, streams, want = routers
    doc = query_to_dict(base)
    doc["name"] = f"it_shared_{uuid.uuid4().hex[:6]}"
    query = parse_query(doc, "shared")
    plan = _pmjoin((query, out, streams, want), "pmjoin:hash:3")
    (out / "q.yaml").write_text(yaml.safe_dump(doc))
    stop = threading.Event()
    nodes = [NodeService(site, kafka_bootstrap, registry=CollectorRegistry(), stop=stop, serve=True, quiet=True,
                         redis_url=redis_url, shared=site == "r1") for site in ["r1", "r1", "r2", "r3"]]
    threads = [threading.Thread(target=n.run, daemon=True) for n in nodes]
    for t in threads:
        t.start()
    consumer = make_consumer(kafka_bootstrap, f"check-{query.name}")
    try:
        topics = scaled_topics(query, plan, kafka_admin, plan)
        ensure_topics(kafka_admin, query_topics(query))
        run = uuid.uuid4().hex[:12]
        specs = generations(query, plan)
        msg = PartitionedRun(plan).message(query, run, end_offsets(consumer, [t for t in query_topics(query)
                                                                              if not is_control_topic(t)]))
        msg = scale_message(msg, consumer, plan, topics)
        status_start = end_offsets(consumer, [status_topic(site) for site in query.nodes])
        produce_control_sync(make_producer(kafka_bootstrap), query.name, "plan", msg.to_json())
        assert source_main(["--query", str(out / "q.yaml"), "--data", str(out), "--fast", "--run", run,
                            "--bootstrap", kafka_bootstrap, "--no-progress"]) == 0
        consumer.assign([TopicPartition(t, 0, off) for t, off in status_start.items()])   # the dones
        done: dict[str, dict] = {}
        deadline = time.monotonic() + 90
        every = wanted(specs, plan)
        assert every is not None   # a scaled-out plan: every (site, partition)
        while not every <= set(done) and time.monotonic() < deadline:
            for m in consume(consumer, 1000, 0.5):
                value = m.value()
                assert value is not None   # a consumed control message has a value
                c = records.decode_control(value)
                p = c.payload if isinstance(c.payload, dict) else {}
                if c.query == query.name and c.kind == "done" and p.get("run") == run:
                    done[f"{p['site']}/p{p['part']}"] = p
        assert every <= set(done), sorted(done)
        assert _results(kafka_bootstrap, query) == Counter({(tuple(ids), ts): n for (ids, ts), n in want.items()})
    finally:
        consumer.close()
        stop.set()
        for t in threads:
            t.join(20)
