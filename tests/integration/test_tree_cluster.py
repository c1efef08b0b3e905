"""MJoin trees (seed 002's STREAMJOINOPT plans) on the real broker: every MJoin an operator query run by the
node services, derived streams handed over on Kafka at their producer's site; the output is exactly the
reference join and the bytes per link and kind are the embedded tree run's (issue 14)."""
from __future__ import annotations

from collections import Counter

import pytest

from joinlib.errors import ClusterError, PlanError
from joinlib.mjoin.derived import deploy, lower_tree
from joinlib.mjoin.tree_plans import PartitionedTrees, plan_partitioned_trees
from joinlib.node.cluster import run_cluster
from joinlib.pmjoin.tree import Leaf, MJoin
from joinlib.runtime.sink import CollectingSink, CountingSink
from joinlib.sim.tree_engine import run_deployment, run_tree
from tests.integration.test_cluster import TIMEOUT_S, _links, _run_and_check, routers, routers_dc  # noqa: F401  (module fixtures)

S1, S2, S3 = Leaf("S1", "r1"), Leaf("S2", "r2"), Leaf("S3", "r3")
TREES = {
    "left-deep at r3": MJoin((MJoin((S1, S2), "r2"), S3), "r3"),
    "right-deep at r1": MJoin((S1, MJoin((S2, S3), "r3")), "r1"),
    "one MJoin of three at r2": MJoin((S1, S2, S3), "r2"),
}


def _tree_check(dataset, program, bootstrap, **kw) -> dict:
    """Run ``program`` (a lowered tree, or partitioned trees) on Kafka: exact, and the embedded bytes."""
    query, _, streams, _ = dataset

    def embedded() -> dict:
        if isinstance(program, PartitionedTrees):
            progs = list(program.programs)
            return run_deployment(deploy(progs, share=False),
                                  {p.base.name: s for p, s in zip(progs, program.split.split(query, streams),
                                                                  strict=True)},
                                  {p.base.name: CountingSink() for p in progs}).to_dict()
        return run_tree(program, streams, CountingSink()).to_dict()
    report = _run_and_check(dataset, program, bootstrap, embedded, **kw)
    assert report["bytes"] > 0 and report["plan"] == program.to_json()
    return report


@pytest.mark.parametrize("name", sorted(TREES))
def test_mjoin_tree_on_kafka_is_exact_and_ships_the_embedded_bytes(routers, kafka_bootstrap, name):  # noqa: F811
    report = _tree_check(routers, lower_tree(routers[0], TREES[name]), kafka_bootstrap, mode="thread")
    kinds = {ln["kind"] for ln in report["links"]}
    assert kinds == {"full"}  # each operator ships its inputs to its node


def test_mjoin_tree_with_a_processing_only_node_as_node_processes(routers_dc, kafka_bootstrap,  # noqa: F811
                                                                   redis_url):
    """Both MJoins at the processing-only node dc, as ``python -m services.node`` processes with their windows
    in Redis (derived tuples too); the derived stream S1+S2 is born at dc and read there, so no link carries it."""
    tree = MJoin((MJoin((S1, S2), "dc"), S3), "dc")
    report = _tree_check(routers_dc, lower_tree(routers_dc[0], tree), kafka_bootstrap, mode="process",
                         redis_url=redis_url)
    assert {(ln["src"], ln["dst"]) for ln in report["links"]} == {("r1", "dc"), ("r2", "dc"), ("r3", "dc")}
    assert set(report["sites"]) == {"r1", "r2", "r3", "dc"}


@pytest.mark.parametrize("spec", ["pmjoin:hash:2:mjoin", "pmjoin:rate:3:mjoin"])
def test_partitioned_mjoin_trees_on_kafka(routers, kafka_bootstrap, spec):  # noqa: F811
    """PMJoin as the paper runs it: each node routes its source tuples by the partition function to the
    operators of their partition's tree; exact, and the embedded run's bytes per link."""
    query, _, streams, _ = routers
    plan, _ = plan_partitioned_trees(query, streams, spec)
    assert len(plan.programs) == int(spec.split(":")[2])
    _tree_check(routers, plan, kafka_bootstrap, mode="thread")


def test_tree_operators_resume_from_checkpoints_after_their_nodes_are_killed(routers, kafka_bootstrap,  # noqa: F811
                                                                             redis_url, redis_client, monkeypatch):
    """Node processes with Redis windows run the left-deep tree; r2 (the inner MJoin, and the reader of its
    derived stream S1+S2 for the root's input) is SIGKILLed 0.6 s into a paced replay and r3 (the root) at
    1.2 s.  Each successor resumes every operator from its checkpoint, with the results not handed over yet:
    the output is still exactly the reference join, the bytes the embedded run's, and no Redis key is left."""
    monkeypatch.setenv("JOINLIB_CHECKPOINT_EVERY_S", "0.25")
    query = routers[0]
    report = _tree_check(routers, lower_tree(query, TREES["left-deep at r3"]), kafka_bootstrap, mode="process",
                         redis_url=redis_url, rate_scale=1.0, faults=[("r2", 0.6), ("r3", 1.2)])
    assert [r["site"] for r in report["restarts"]] == ["r2", "r3"]
    # both successors resume from their predecessors' checkpoints (taken every 0.25 s from the start: r2 dies at
    # 0.6 s, r3 at 1.2 s); what a successor checkpoints itself depends on how soon it catches up, not asserted
    for site in ("r2", "r3"):
        assert report["sites"][site]["resumed_from_epoch"] is not None, report["sites"][site]
    assert not list(redis_client.scan_iter(match="{joinlib:%s*:%s/*" % (query.name, report["run"]), count=1000))


def test_partitioned_trees_with_a_killed_root_node(routers, kafka_bootstrap, redis_url, monkeypatch):  # noqa: F811
    monkeypatch.setenv("JOINLIB_CHECKPOINT_EVERY_S", "0.25")
    query, _, streams, _ = routers
    plan, _ = plan_partitioned_trees(query, streams, "pmjoin:rate:3:mjoin")
    report = _tree_check(routers, plan, kafka_bootstrap, mode="process", redis_url=redis_url, rate_scale=1.0,
                         faults=[("r3", 0.8)])
    assert [r["site"] for r in report["restarts"]] == ["r3"]


CATALOGUE = {
    "streams": {f"S{i}": {"site": f"r{i}", "window": "1s", "rate": 60, "attributes": 25, "tuple_bytes": 200,
                          "selectivity": 0.04} for i in range(1, 5)},
    "join": ["S1.dest = S2.dest", "S2.dest = S3.dest", "S2.dest = S4.dest"],
    "network": {"latency": "25ms", "bandwidth": "1024kbps"},
    "execution": {"interval": "100ms", "max_delay": "80ms"},
}


class _ByQuery(CountingSink):
    """Each query's results to its own collecting sink (the instance key names the query)."""

    def __init__(self, queries) -> None:
        super().__init__()
        self.sinks = {q.name: CollectingSink(q) for q in queries}

    def emit(self, inst, head_pos, pos, groups, now) -> None:
        self.sinks[inst[0]].emit(inst, head_pos, pos, groups, now)


def test_two_queries_share_an_operator_on_kafka(tmp_path, kafka_bootstrap):
    """Seed 001's reuse on the real broker: Q1 = S1 x S2 x S3 and Q2 = S1 x S2 x S4, both as
    ((S1 x S2)@r2 x S_k)@r_k, deployed together: the S1 x S2 operator runs once and its derived stream feeds
    both roots. Each query's output is its reference join, the bytes per link are the embedded deployment's,
    and fewer than the two queries run apart ship."""
    import json

    from joinlib.data.files import load_streams
    from joinlib.data.gen import generate
    from joinlib.mjoin.tree_plans import SharedTrees, union_query
    from joinlib.query import parse_query
    from joinlib.reference import reference_join
    queries = {}
    for name, other in (("it_share_q1", "S3"), ("it_share_q2", "S4")):
        d = json.loads(json.dumps(CATALOGUE))
        d["name"] = name
        d["streams"] = {k: v for k, v in d["streams"].items() if k in ("S1", "S2", other)}
        d["join"] = ["S1.dest = S2.dest", f"S2.dest = {other}.dest"]
        queries[name] = parse_query(d, name)
    base = union_query("it_share", list(queries.values()))
    generate(base, tmp_path, 2500, 3)
    data = {n: load_streams(q, tmp_path) for n, q in queries.items()}
    s12 = MJoin((S1, Leaf("S2", "r2")), "r2")
    programs = tuple(lower_tree(q, MJoin((s12, Leaf(o, f"r{o[1]}")), f"r{o[1]}"))
                     for q, o in zip(queries.values(), ("S3", "S4"), strict=True))
    shared = SharedTrees(base, programs)
    assert SharedTrees.from_json(base, json.loads(json.dumps(shared.to_json()))) == shared
    sink = _ByQuery(queries.values())
    report = run_cluster(base, load_streams(base, tmp_path), shared,  # type: ignore[arg-type]  # run_cluster runs trees too (its docstring), annotated Plans only
                         sink, bootstrap=kafka_bootstrap, timeout_s=TIMEOUT_S, mode="thread")
    for n, q in queries.items():
        want = Counter(reference_join(q, data[n]))
        got = Counter((ids, ts) for ids, ts, _ in sink.sinks[n].results)
        assert got == want and sum(want.values()) > 0, n
    dep = deploy(list(programs))
    assert len(dep.ops) == 3  # S1 x S2 once, and the two roots
    embedded = run_deployment(dep, data, {n: CountingSink() for n in queries}).to_dict()
    assert _links(report) == _links(embedded)
    alone = [run_tree(p, data[p.base.name], CountingSink()).to_dict() for p in programs]
    assert report["bytes"] < sum(r["bytes"] for r in alone)

    def s1_to_r2(rep: dict) -> int:  # S1 shipped to the shared operator: once, not once per query
        return sum(ln["bytes"] for ln in rep["links"] if (ln["src"], ln["dst"]) == ("r1", "r2"))
    assert s1_to_r2(report) == s1_to_r2(alone[0]) == s1_to_r2(alone[1]) > 0


def test_serving_nodes_take_a_tree_and_then_a_plain_plan(routers, kafka_bootstrap):  # noqa: F811
    """Node services already serving their sites (``--serve``, as docker compose runs them) take a tree plan
    from control, and the next plan of the query (a plain one) once it has ended: ``--nodes serving``."""
    import threading
    import uuid

    from prometheus_client import CollectorRegistry

    from joinlib.data.files import load_streams
    from joinlib.node.node_service import NodeService
    from joinlib.plan.logical import central
    from joinlib.query import parse_query, query_to_dict
    from tests.integration.test_cluster import _run_and_check
    query, out, _, want = routers
    tag = uuid.uuid4().hex[:6]
    d = query_to_dict(query)
    d["name"] = f"it_serving_{tag}"
    for spec in d["streams"].values():
        spec["site"] = f"{spec['site']}{tag}"
    q = parse_query(d, "routers on serving nodes")
    dataset = (q, out, load_streams(q, out), want)
    s1, s2, s3 = (q.stream(n).site for n in ("S1", "S2", "S3"))
    stop = threading.Event()
    threads = []
    for site in q.sites:
        svc = NodeService(site, kafka_bootstrap, registry=CollectorRegistry(), stop=stop, serve=True, quiet=True)
        threads.append(threading.Thread(target=svc.run, daemon=True, name=f"serving-{site}"))
        threads[-1].start()
    try:
        tree = MJoin((MJoin((Leaf("S1", s1), Leaf("S2", s2)), s2), Leaf("S3", s3)), s3)
        _tree_check(dataset, lower_tree(q, tree), kafka_bootstrap, mode="serving")
        _run_and_check(dataset, central(q, s2), kafka_bootstrap, mode="serving")
    finally:
        stop.set()
        for t in threads:
            t.join(20)


def test_tree_runs_refuse_what_they_do_not_support(routers, kafka_bootstrap):  # noqa: F811
    query, _, streams, _ = routers
    program = lower_tree(query, TREES["left-deep at r3"])
    with pytest.raises(ClusterError, match="an MJoin tree is not adaptive"):
        run_cluster(query, streams, program,  # type: ignore[arg-type]  # run_cluster runs trees too (its docstring), annotated Plans only
                    bootstrap=kafka_bootstrap, adaptive=object())
    with pytest.raises(ClusterError, match="scaling out needs a partitioned plan"):
        run_cluster(query, streams, program,  # type: ignore[arg-type]  # run_cluster runs trees too (its docstring), annotated Plans only
                    bootstrap=kafka_bootstrap, instances={}, redis_url="redis://unused")
    with pytest.raises(PlanError, match="no node"):
        lower_tree(query, MJoin((S1, S2, S3), "nowhere"))
