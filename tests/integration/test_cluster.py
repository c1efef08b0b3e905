"""Cluster mode on a real Kafka broker: the same Node code as embedded mode, on real topics.

For every plan: the results written to ``out.<query>`` are exactly the reference join's
(multiset of (ids by stream position, head ts)), and the messages and bytes per link and
kind equal those of :func:`joinlib.sim.engine.run_embedded` on the simulated network (the node
is deterministic, and both count the Avro value bytes of each envelope).

Most runs use node threads (``mode="thread"``: same service code from Kafka on, no
interpreter start-up); ``test_mixed_plan_with_node_processes`` runs real
``python -m services.node`` subprocesses, the deployment shape.
"""
from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from joinlib.algorithms import ALGORITHMS
from joinlib.data.files import load_streams
from joinlib.data.gen import generate
from joinlib.node.cluster import run_cluster
from joinlib.plan import logical as plans
from joinlib.query import load_query, parse_query, query_to_dict
from joinlib.reference import reference_join
from joinlib.runtime.sink import CollectingSink, CountingSink
from joinlib.sim.engine import run_embedded

REPO = Path(__file__).resolve().parents[2]
TIMEOUT_S = 90


def _scaled(path: Path, factor: float, name: str):
    d = query_to_dict(load_query(path))
    for spec in d["streams"].values():
        spec["rate"] = spec["rate"] * factor
    d["name"] = name
    return parse_query(d, f"{path.name} (rates x{factor})")


def _dataset(tmp_path_factory, path: Path, factor: float, duration_ms: int, seed: int):
    query = _scaled(path, factor, f"it_{path.stem}")
    out = tmp_path_factory.mktemp(path.stem)
    generate(query, out, duration_ms, seed)
    streams = load_streams(query, out)
    return query, out, streams, reference_join(query, streams)


@pytest.fixture(scope="module")
def routers(tmp_path_factory):
    # examples/routers.yaml at half its rates: 2 s, ~100 tuples per stream, ~10k results
    return _dataset(tmp_path_factory, REPO / "examples" / "routers.yaml", 0.5, 2000, seed=11)


@pytest.fixture(scope="module")
def star4(tmp_path_factory):
    # 4 sites, time and tuple windows, a slow link; rates / 4 for 2 s
    return _dataset(tmp_path_factory, REPO / "examples" / "star4.yaml", 0.25, 2000, seed=5)


@pytest.fixture(scope="module")
def triangle(tmp_path_factory):
    # a cyclic 3-way join with a key per edge (one edge off any spanning tree), f = 0.2 for results, 2 s
    d = query_to_dict(load_query(REPO / "examples" / "triangle_keys.yaml"))
    for spec in d["streams"].values():
        spec["selectivity"], spec["attributes"], spec["tuple_bytes"] = 0.2, 10, 60
    d["name"] = "it_triangle"
    query = parse_query(d, "triangle_keys.yaml (f = 0.2)")
    out = tmp_path_factory.mktemp("triangle")
    generate(query, out, 2000, 7)
    streams = load_streams(query, out)
    return query, out, streams, reference_join(query, streams)


def _links(report: dict) -> list[tuple]:
    return [(ln["src"], ln["dst"], ln["kind"], ln["messages"], ln["bytes"]) for ln in report["links"]]


def _run_and_check(dataset, plan, bootstrap, embedded=None, **kw) -> dict:
    """Run ``plan`` on Kafka: exactly the reference join, and the simulator's messages and bytes per link
    (``embedded``: a callable giving the embedded run's report dict, default ``run_embedded``'s)."""
    query, _, streams, want = dataset
    sink = CollectingSink(query)
    report = run_cluster(query, streams, plan, sink, bootstrap=bootstrap, timeout_s=TIMEOUT_S, **kw)
    got = Counter((ids, ts) for ids, ts, _ in sink.results)
    missing, extra = want - got, got - want
    text = plan.to_json() if hasattr(plan, "to_json") else [(e, p.to_json()) for e, p in plan]
    assert not missing and not extra, (
        f"plan {text}: {sum(missing.values())} missing, {sum(extra.values())} extra or duplicated; "
        f"e.g. missing {list(missing.items())[:3]}, extra {list(extra.items())[:3]}")
    assert report["results"] == sum(want.values()) > 0
    embedded = embedded() if embedded is not None else run_embedded(query, streams, plan, CountingSink()).to_dict()
    assert _links(report) == _links(embedded), "per-link message/byte counts differ from the simulator's"
    assert report["bytes"] == embedded["bytes"] and report["messages"] == embedded["messages"]
    assert report["input_tuples"] == embedded["input_tuples"]
    for ln in report["links"]:  # every message sent was received by its destination node
        assert ln["received_messages"] == ln["messages"], ln
    return report


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_uniform_plan_is_exact_and_ships_the_simulated_bytes(routers, kafka_bootstrap, algorithm):
    query = routers[0]
    _run_and_check(routers, plans.uniform(query, algorithm), kafka_bootstrap, mode="thread")


@pytest.mark.parametrize("dataset,site,skip,cross", [
    ("routers", None, (), False), ("star4", "hub", (), False),
    # one-way edges: the hub's S1 sends S2 and S3 no key sets, S4 sends S1 none
    ("star4", "b", (("S1", "S2"), ("S1", "S3"), ("S4", "S1")), False),
    # a cyclic graph with key sets along the off-tree edges too, one of their directions skipped
    ("triangle", "r2", (), True), ("triangle", "r3", (("S2", "S3"), ("S2", "S1")), True),
])
def test_reduction_plan_is_exact_and_ships_the_simulated_bytes(request, kafka_bootstrap, dataset, site, skip,
                                                               cross):
    """The reduction's key sets (keys or Bloom filters) and shipped batches over Kafka: exact
    results, the simulator's bytes per link (with some directions skipped, and off-tree edges, too)."""
    data = request.getfixturevalue(dataset)
    query = data[0]
    plan = plans.reduction(query, site, skip=skip, cross=cross)
    assert plan.reduce is not None and len(plan.reduce.skip) == len(skip) and plan.reduce.cross == cross
    _run_and_check(data, plan, kafka_bootstrap, mode="thread")


MIXED_ROUTERS = {
    "S1": [["S2", "SM-S1"], ["S3", "SP-D"]],
    "S2": [["S1", "SM-D2"], ["S3", "SM-S2"]],
    "S3": [["S2", "SP-S"], ["S1", "SM-D1"]],
}

MIXED_STAR4 = {
    "S1": [["S2", "SM-S2"], ["S3", "SM-D1"], ["S4", "SP-D"]],
    "S2": [["S1", "SM-S1"], ["S3", "SM-D2"], ["S4", "SP-S"]],
    "S3": {"start": "hub", "steps": [["S1", "SP-S"], ["S2", "SP-S"], ["S4", "SP-S"]]},
    "S4": [["S1", "SM-D2"], ["S3", "SM-S1"], ["S2", "SP-D"]],
}


def test_mixed_plan_with_node_processes(routers, kafka_bootstrap):
    """Real `python -m services.node` subprocesses, one per site."""
    query = routers[0]
    report = _run_and_check(routers, plans.from_json(query, MIXED_ROUTERS), kafka_bootstrap, mode="process")
    assert report["node_mode"] == "process"
    assert set(report["sites"]) == set(query.sites)


def test_mixed_four_way_plan(star4, kafka_bootstrap):
    query = star4[0]
    report = _run_and_check(star4, plans.from_json(query, MIXED_STAR4), kafka_bootstrap, mode="thread")
    assert {ln["src"] for ln in report["links"]} == set(query.sites)


def test_paced_replay_reports_latency_and_metrics(routers, kafka_bootstrap):
    """Replay at 4x event time; Prometheus metrics of every node agree with the report."""
    from prometheus_client import generate_latest

    query = routers[0]
    registries: dict = {}
    report = _run_and_check(routers, plans.uniform(query, "SM-S2"), kafka_bootstrap, mode="thread",
                            rate_scale=4.0, registries=registries)
    lat = report["latency_ms"]
    # the percentiles are consistent (how fast is the benchmarks' business, not a test's: a loaded
    # machine may take seconds)
    assert lat and 0 < lat["p50"] <= lat["p99"] <= lat["max"]
    assert set(registries) == set(query.sites)
    shipped: Counter[tuple[str, ...]] = Counter()
    received: Counter[tuple[str, ...]] = Counter()
    catalogue = _catalogued_labels()
    for site, reg in registries.items():
        text = generate_latest(reg).decode()
        for name in _catalogued_metrics():  # what the Grafana dashboards may query
            assert f"\n{name}" in text or f"# TYPE {name}" in text, f"{name} missing from node {site}'s metrics"
        lagged: set[str] = set()
        for fam in reg.collect():
            name = f"{fam.name}_total" if fam.type == "counter" else fam.name
            for s in fam.samples:
                assert set(s.labels) - {"le"} == set(catalogue[name]), (s.name, s.labels)   # what rules group by
                if s.name == "joinlib_consumer_lag_messages":
                    assert s.labels["site"] == site and s.labels["query"] == query.name, s.labels
                    lagged.add(s.labels["topic"])
                elif s.name == "joinlib_shipped_bytes_total":
                    shipped[(s.labels["src"], s.labels["dst"], s.labels["kind"])] += s.value
                elif s.name == "joinlib_transmission_seconds_count":
                    received[(s.labels["src"], s.labels["dst"], s.labels["kind"])] += s.value
                elif s.name == "joinlib_processing_seconds_count":
                    assert s.labels["operator"] in {"tick", "probe", "semijoin", "sync", "ship"}
                elif s.name == "joinlib_results_total":
                    assert s.labels == {"site": site, "query": query.name}
                    assert s.value == report["sites"][site]["results"]
        assert "control" in lagged, lagged   # the run's consumer reads control besides its sources and flows
    assert shipped == Counter({(ln["src"], ln["dst"], ln["kind"]): ln["bytes"] for ln in report["links"]})
    assert received == Counter({(ln["src"], ln["dst"], ln["kind"]): ln["messages"] for ln in report["links"]})


def test_redis_windows(routers, kafka_bootstrap, redis_url, redis_client, monkeypatch):
    """Windows and replicas in Redis: same results, same bytes; the run's keys are gone afterwards.  The
    nodes (threads here) keep their windows in block stores, which write their blocks (HSET) behind: at each
    checkpoint, and about a second after a change -- a run this short (2 s of data, unpaced) may end before
    either."""
    from joinlib.adapters.redis_store import RedisBlockStore, RedisStoreFactory
    query = routers[0]
    made: list = []
    make = RedisStoreFactory.__call__

    def spy(self, name: str):
        store = make(self, name)
        made.append(store)
        return store
    monkeypatch.setattr(RedisStoreFactory, "__call__", spy)

    def hset_calls() -> int:
        return int(redis_client.info("commandstats").get("cmdstat_hset", {}).get("calls", 0))

    before = hset_calls()
    report = _run_and_check(routers, plans.from_json(query, MIXED_ROUTERS), kafka_bootstrap, mode="thread",
                            redis_url=redis_url)
    assert made and all(isinstance(s, RedisBlockStore) for s in made), "the nodes did not use Redis windows"
    if any(report["sites"][site]["checkpoints"] for site in report["sites"]):
        assert hset_calls() > before, "a node checkpointed without writing its windows"
    assert not list(redis_client.scan_iter(match="{joinlib:%s:%s/*" % (query.name, report["run"]), count=1000))


def test_killed_nodes_resume_from_their_checkpoints(routers, kafka_bootstrap, redis_url, redis_client, monkeypatch):
    """SIGKILL two node processes mid-run: their successors roll the Redis windows back to the
    last checkpoint, re-read their inputs from its offsets and skip the result batches already
    delivered -- the output is still exactly the reference join, bytes per link still the
    simulator's, and the run's keys (checkpoints included) are gone afterwards."""
    query = routers[0]
    monkeypatch.setenv("JOINLIB_CHECKPOINT_EVERY_S", "0.25")
    report = _run_and_check(routers, plans.from_json(query, MIXED_ROUTERS), kafka_bootstrap, mode="process",
                            redis_url=redis_url, rate_scale=1.0, faults=[("r2", 0.7), ("r1", 1.4)])
    assert [r["site"] for r in report["restarts"]] == ["r2", "r1"]
    for site in ("r1", "r2"):
        assert report["sites"][site]["resumed_from_epoch"] is not None, report["sites"][site]
    assert not list(redis_client.scan_iter(match="{joinlib:%s:%s/*" % (query.name, report["run"]), count=1000))


@pytest.fixture(scope="module")
def routers_dc(routers):
    """The routers data with a processing-only node ``dc`` in the network (no stream is born there)."""
    query, out, streams, want = routers
    d = query_to_dict(query)
    d["name"], d["network"]["nodes"] = "it_routers_dc", ["dc"]
    q = parse_query(d, "routers with a dc node")
    return q, out, load_streams(q, out), want


def test_plan_switches_with_a_node_killed_between_them(routers_dc, kafka_bootstrap, redis_url, redis_client,
                                                       monkeypatch):
    """Three plan generations -- a mixed plan, everything shipped to the processing-only node dc
    from epoch 6, SM-S1 everywhere from epoch 13 -- on node processes with Redis windows, and r2
    SIGKILLed between the two switches: every result exactly once, bytes per link (snapshots
    jump-starting the new generations' replicas included) equal to the simulator's, and the run's
    keys gone afterwards."""
    query = routers_dc[0]
    monkeypatch.setenv("JOINLIB_CHECKPOINT_EVERY_S", "0.25")
    gens = [(0, plans.from_json(query, MIXED_ROUTERS)), (6, plans.central(query, "dc")),
            (13, plans.uniform(query, "SM-S1"))]
    report = _run_and_check(routers_dc, gens, kafka_bootstrap, mode="process", redis_url=redis_url,
                            rate_scale=1.0, faults=[("r2", 1.0)])
    assert [r["site"] for r in report["restarts"]] == ["r2"]
    assert report["sites"]["r2"]["resumed_from_epoch"] is not None, report["sites"]["r2"]
    assert report["sites"]["dc"]["generations"] == [1] and report["sites"]["r1"]["generations"] == [0, 1, 2]
    assert {ln["kind"] for ln in report["links"]} >= {"snapshot"}, "no replica was jump-started"
    assert not list(redis_client.scan_iter(match="{joinlib:%s:%s/*" % (query.name, report["run"]), count=1000))


def test_services_fail_with_one_error_line_when_kafka_is_unreachable(tmp_path):
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1", "METRICS_PORT": "0",
           "PYTHONPATH": str(REPO)}
    node = subprocess.run([sys.executable, "-m", "services.node", "--site", "r1", "--connect-timeout", "2"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert node.returncode == 2
    assert node.stderr.startswith("error: ") and "Traceback" not in node.stderr
    assert "127.0.0.1:1" in node.stderr and "unreachable" in node.stderr
    src = subprocess.run([sys.executable, "-m", "services.source", "--query", str(REPO / "examples" / "routers.yaml"),
                          "--data", str(tmp_path), "--fast"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert src.returncode == 2 and src.stderr.startswith("error: ") and "Traceback" not in src.stderr


def test_timeout_names_the_sites_that_did_not_finish(routers, kafka_bootstrap):
    """A node that never starts (its site's process is missing) is named in the error."""
    from joinlib.errors import ClusterError

    query, _, streams, _ = routers
    # drop the plan of one site by running a query copy whose r3 node is never started
    import joinlib.node.cluster_nodes as cluster

    real = cluster._start_thread

    def start(site, *a, **kw):
        if site == "r3":
            return _Absent(site)
        return real(site, *a, **kw)

    cluster._start_thread = start
    try:
        with pytest.raises(ClusterError, match=r"site r3 did not finish \(no status message"):
            run_cluster(query, streams, plans.uniform(query, "SP-S"), None, bootstrap=kafka_bootstrap,
                        mode="thread", timeout_s=6)
    finally:
        cluster._start_thread = real


class _Absent:
    log = None

    def __init__(self, site):
        self.site = site

    def failure(self):
        return None

    def stop(self):
        pass

    def finish(self, grace):
        pass


def _catalogued_labels() -> dict[str, list[str]]:
    """The labels of every metric of monitoring/metrics.yaml, by name."""
    import yaml
    catalogue = yaml.safe_load((Path(__file__).resolve().parents[2] / "monitoring" / "metrics.yaml").read_text())
    return {m["name"]: m["labels"] for m in catalogue["metrics"]}


def _catalogued_metrics() -> list[str]:
    """Every joinlib metric of monitoring/metrics.yaml (the dashboards are tested against it)."""
    import yaml
    catalogue = yaml.safe_load((Path(__file__).resolve().parents[2] / "monitoring" / "metrics.yaml").read_text())
    return [m["name"] for m in catalogue["metrics"] if m["name"].startswith("joinlib_")]
