"""The pieces of scale-out within a site that need no broker (joinlib.node.scale_out; the runs themselves:
tests/integration/test_scale_out.py): the replayer's split per Kafka partition, whose ``done`` a run waits
for, the per-site report, the control messages, and the drill's join and kill actions."""
from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from joinlib.control.check import check_control
from joinlib.control.messages import DoneMessage, PlanMessage
from joinlib.model import Tup
from joinlib.node import cluster
from joinlib.node.cluster_nodes import Faults
from joinlib.node.control import ControlLog, ControlRecord
from joinlib.node.replay import _parts
from joinlib.node.scale_out import done_key, naive_of, part_sites, per_site, split_of, wanted
from joinlib.plan import partitioned
from joinlib.plan.logical import central, uniform
from joinlib.plan.partition import HashPartition
from joinlib.query import load_query, query_to_dict
from joinlib.runtime.deploy import generations

ROUTERS = Path(__file__).resolve().parents[2] / "examples" / "routers.yaml"


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 30), max_size=40), st.integers(1, 6))
def test_the_replayer_sends_each_tuple_to_its_partition_and_every_partition_a_batch(keys, d):
    tups = [Tup(0, i, i, k, ()) for i, k in enumerate(keys)]   # seq: the value to route by
    batches = _parts(tups, d, lambda t: t.seq % d)
    assert [p for p, _ in batches] == list(range(d))    # every partition a batch (its watermark), empty or not
    assert sorted((t for _, b in batches for t in b), key=lambda t: t.id) == tups   # each once
    assert all(t.seq % d == p for p, b in batches for t in b)
    assert _parts(tups, d, None) == [(p, tups) for p in range(d)]   # not partitioned: whole, to every partition
    assert _parts(tups, 0, None) == [(0, tups)]                      # not scaled out: partition 0


def _hash_plan(d: int, query):
    return partitioned.Partitioned(partitioned.attribute_class(query), HashPartition(d),
                                   tuple(central(query, "r2") for _ in range(d)))


def test_a_run_waits_for_a_done_of_every_site_and_partition():
    query = load_query(ROUTERS)
    specs = generations(query, _hash_plan(3, query))
    assert part_sites(specs) == {p: ["r1", "r2", "r3"] for p in range(3)}
    assert wanted(specs, _hash_plan(3, query)) == {done_key(s, p) for s in ("r1", "r2", "r3") for p in range(3)}
    assert wanted(specs, None) is None and done_key("r1", None) == "r1"


def test_partition_dones_add_up_per_site_and_are_valid_control_messages():
    part = {"site": "r1", "run": "x", "results": 3, "part": 0, "instance": "h:1:ab", "checkpoints": 2,
            "resumed_from_epoch": None, "links": [{"src": "r1", "dst": "r2", "kind": "full", "messages": 2,
                                                   "bytes": 10, "transfer_ms": 1.0}],
            "naive": [{"src": "r1", "dst": "r2", "bytes": 7}], "wall_s": 2.0, "cpu_s": 1.0}
    other = {**part, "part": 1, "results": 4, "resumed_from_epoch": 12, "instance": "h:2:cd"}
    assert check_control("Q", "done", part) is None and check_control("Q", "status", other) is None
    assert "wrong type" in (check_control("Q", "done", {**part, "part": -1}) or "")
    merged = per_site({"r1/p0": DoneMessage.from_json(part), "r1/p1": DoneMessage.from_json(other)},
                      {"r1": [{"src": "r1", "dst": "r2", "bytes": 9}]})
    r1 = merged["r1"].to_json()
    assert r1["results"] == 7 and r1["checkpoints"] == 4 and r1["resumed_from_epoch"] == 12
    assert r1["links"][0]["bytes"] == 20 and r1["naive"] == [{"src": "r1", "dst": "r2", "bytes": 9}]
    assert [p["part"] for p in r1["parts"]] == [0, 1] and r1["wall_s"] == 2.0
    assert r1["cpu_s"] == 2.0   # two instances; a third partition on the first would not count its CPU again
    again = {**part, "part": 2, "cpu_s": 1.5}
    three = per_site({k: DoneMessage.from_json(d) for k, d in (("r1/p0", part), ("r1/p1", other), ("r1/p2", again))})
    assert three["r1"].to_json()["cpu_s"] == 2.5
    plain = {"r1": DoneMessage.from_json({"site": "r1", "results": 1})}
    assert per_site(plain) is plain


def test_the_naive_baseline_prices_each_replayed_batch_whole():
    """A partition sees only its share of a batch; the runner prices the batches as a plain run's nodes do."""
    from joinlib.protocol import wire
    query = load_query(ROUTERS)
    tau = query.execution.interval_ms
    s1 = [Tup(0, i, i * 37, i, (i % 5,)) for i in range(40)]
    naive = naive_of(query, {"S1": s1, "S2": [], "S3": []})
    epochs: dict[int, list[Tup]] = {}
    for t in s1:
        epochs.setdefault(t.ts // tau, []).append(t)
    cost = sum(wire.naive_batch_size(e, b) for e, b in epochs.items())
    assert naive == {"r1": [{"src": "r1", "dst": "r2", "bytes": cost}, {"src": "r1", "dst": "r3", "bytes": cost}]}


def test_a_partitions_done_is_not_the_sites_done():
    log = ControlLog()
    log.add(ControlRecord(3, "Q", "done", DoneMessage.from_json({"site": "r1", "run": "x", "results": 1, "part": 2})))
    assert log.done == set() and log.parts_done == {("x", "r1", 2)}
    log.add(ControlRecord(4, "Q", "done", DoneMessage.from_json({"site": "r1", "run": "x", "results": 1})))
    assert log.done == {("x", "r1")} and log.copy().parts_done == {("x", "r1", 2)}


def test_plan_messages_scale_out_only_partitioned_plans_replayed_or_live():
    query = load_query(ROUTERS)
    msg = {"query": query_to_dict(query), "run": "x", "nodes": ["r1", "r2", "r3"], "scale_out": True}
    ok = {**msg, "plan": _hash_plan(2, query).to_json(), "part_offsets": {"src.routers.S1": [0, 5]}}
    assert check_control(query.name, "plan", ok) is None
    assert "needs a partitioned plan" in (check_control(query.name, "plan",
                                                         {**msg, "plan": uniform(query, "SP-S").to_json()}) or "")
    live = {**ok, "live": {"origin_ms": 0, "sources": {}}}
    assert check_control(query.name, "plan", live) is None   # re-keyed at each site (joinlib.node.rekey)
    tree = {**msg, "plan": {"mjoin_tree": {}}}
    assert "MJoin tree plans do not scale out" in (check_control(query.name, "plan", tree) or "")
    assert "wrong type" in (check_control(query.name, "plan", {**ok, "part_offsets": {"t": [-1]}}) or "")


class _Handle:
    def __init__(self, name: str) -> None:
        self.name, self.killed, self.log = name, False, None

    def kill(self) -> None:
        self.killed = True


def test_the_drill_joins_an_instance_and_kills_one_the_others_cover():
    started: list[tuple[str, int]] = []

    def start(site: str, instance: int = 0) -> _Handle:
        started.append((site, instance))
        return _Handle(f"{site}/{instance}")
    first, second = _Handle("r1/0"), _Handle("r1/1")
    nodes = {"r1": first, "r1#2": second, "r2": _Handle("r2/0")}
    faults = Faults([("r1", 0.0, "join"), ("r1", 0.0, "kill"), ("r2", 0.0)], start, nodes)
    faults.tick(0.0)
    assert started == [("r1", 2), ("r2", 0)]           # the third r1 instance; r2's successor
    assert first.killed and "r1" not in nodes and set(nodes) == {"r1#2", "r1#3", "r2"}
    assert [(f["site"], f["action"], f.get("successor")) for f in faults.done] == [
        ("r1", "join", None), ("r1", "kill", False), ("r2", "kill", True)]


def test_bad_instance_counts_and_actions_are_refused():
    query = load_query(ROUTERS)
    with pytest.raises(Exception, match="not a positive number"):
        split_of(_hash_plan(2, query), {"r1": 0}, "redis://x", None)
    with pytest.raises(Exception, match="unknown fault 'explode'"):
        cluster._check_options(query, "thread", [("r1", 1.0, "explode")], "redis://x")


def test_a_shared_node_runs_only_scaled_out_plans():
    """``services.node --shared`` (Helm replicas > 1): a plain plan would run whole at every instance."""
    from joinlib.errors import PlanError
    from joinlib.node.node_service import NodeService
    query = load_query(ROUTERS)
    svc = NodeService("r1", "127.0.0.1:1", shared=True, quiet=True)
    plain = {"query": query_to_dict(query), "plan": uniform(query, "SP-S").to_json()}
    with pytest.raises(PlanError, match=r"runs only scaled-out plans .*\(each instance would run it whole\)"):
        svc.execute_plan(ControlRecord(7, query.name, "plan", PlanMessage.from_json(plain)), None, ControlLog())


def test_the_session_timeout_is_configurable_and_checked(monkeypatch):
    from joinlib.errors import ClusterError
    from joinlib.settings import SESSION_TIMEOUT_ENV, session_timeout_ms
    monkeypatch.delenv(SESSION_TIMEOUT_ENV, raising=False)
    assert session_timeout_ms() == 6000
    monkeypatch.setenv(SESSION_TIMEOUT_ENV, "3000")
    assert session_timeout_ms() == 3000
    for bad in ("3s", "500"):
        monkeypatch.setenv(SESSION_TIMEOUT_ENV, bad)
        with pytest.raises(ClusterError, match="expected milliseconds, at least 1000"):
            session_timeout_ms()


def test_a_partition_drops_source_tuples_below_what_its_window_was_fed():
    """Copies of epochs fed already (a re-keyer that lost its role writing them again) are dropped; another
    partition's tuples still reject the batch."""
    from types import SimpleNamespace

    from joinlib.node.scale_out import PartReader
    from joinlib.protocol.records import SourceBatch
    query = load_query(ROUTERS)
    s1 = query.stream("S1")
    reader = PartReader({"S1": lambda t: t.key[0] % 2}, part=0)
    window = SimpleNamespace(watermark=300)
    run = SimpleNamespace(q=query, host=SimpleNamespace(windows={(query.name, 0, "S1"): window}))
    tups = [Tup(s1.pos, i, ts, i, (k,)) for i, (ts, k) in enumerate([(250, 0), (299, 2), (300, 4), (350, 0)])]
    assert reader.tuples(run, SourceBatch("S1", tups, 400), s1) == tups[2:]
    assert reader.tuples(run, SourceBatch("S1", tups[:2], 300), s1) == []
    window.watermark = 200
    assert reader.tuples(run, SourceBatch("S1", tups, 400), s1) == tups
    assert reader.tuples(run, SourceBatch("S1", [Tup(s1.pos, 9, 350, 9, (1,))], 400), s1) is None
