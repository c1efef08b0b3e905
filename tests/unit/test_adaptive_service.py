"""What the node services need to run adaptive plans (joinlib.adaptive.service), without a broker: the
plan message's ``adaptive`` object, the termination check, the merged report, and the control check
of plan messages that carry an ``adaptive`` object."""
from __future__ import annotations

from pathlib import Path

import pytest

from joinlib.adaptive.config import AdaptiveConfig
from joinlib.adaptive.planner import algorithm1
from joinlib.adaptive.protocol import Message, PlanUpdate, Ready
from joinlib.adaptive.service import Tally, config_json, config_of, initial_jep, merge, quiescent
from joinlib.adaptive.stats import MonitorConfig, with_stats
from joinlib.control.check import check_control
from joinlib.errors import JoinlibError, PlanError
from joinlib.query import load_query, query_to_dict

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def q():
    return load_query(ROOT / "examples" / "toggle4.yaml")


def test_config_goes_through_the_plan_message_unchanged(q):
    cfg = AdaptiveConfig("dnu", MonitorConfig(300, 0.7, 3, 3000), 2, "N2")
    back = config_of(config_json(cfg), q)
    assert back == cfg
    assert config_of(config_json(AdaptiveConfig()), q) == AdaptiveConfig()


@pytest.mark.parametrize("change,message", [
    ({"mode": "fast"}, "unknown mode"),
    ({"planner": "N9"}, "not a site"),
    ({"monitor": {"threshold": "high"}}, "wrong type"),
    ({"monitor": {"interval_ms": 2.5}}, "wrong type"),
    ({"monitor": {"persistence": 0}}, "persistence"),
    ({"monitor": {"soon": 1}}, "unknown key"),
    ({"margin": -1}, "fence margin"),
    ({"model": "Magic"}, "not a cost model"),
    ({"model": "config_of"}, "not a cost model"),
    ({"extra": 1}, "unknown key"),
])
def test_malformed_adaptive_objects_are_refused(q, change, message):
    good = config_json(AdaptiveConfig())
    if "monitor" in change:
        change = {"monitor": {**good["monitor"], **change["monitor"]}}
    with pytest.raises(JoinlibError, match=message):
        config_of({**good, **change}, q)


def test_initial_plan_must_be_seed_003s(q):
    jep = algorithm1(with_stats(q, {}))
    assert initial_jep(q, jep.to_plan(q).to_json()) == jep
    with pytest.raises(PlanError, match="SP-S"):
        initial_jep(q, {"S1": [["S2", "SM-S1"], ["S3", "SP-S"], ["S4", "SP-S"]], "S2": [["S1", "SP-S"],
                        ["S3", "SP-S"], ["S4", "SP-S"]], "S3": [["S1", "SP-S"], ["S2", "SP-S"], ["S4", "SP-S"]],
                        "S4": [["S1", "SP-S"], ["S2", "SP-S"], ["S3", "SP-S"]]})


def test_control_check_validates_the_adaptive_object(q):
    plan = algorithm1(with_stats(q, {})).to_plan(q).to_json()
    good = {"query": query_to_dict(q), "plan": plan, "adaptive": config_json(AdaptiveConfig())}
    assert check_control(q.name, "plan", good) is None
    assert "unknown mode" in (check_control(q.name, "plan", {**good, "adaptive": {**good["adaptive"],
                                                                                    "mode": "x"}}) or "")
    assert "wrong type" in (check_control(q.name, "plan", {**good, "adaptive": 3}) or "")


def _done(idle, sent, received):
    return {"adaptive": {"idle": idle, "sent": sent, "received": received}}


def test_quiescent_needs_every_node_idle_and_every_link_drained():
    sites = ["A", "B"]
    assert not quiescent({"A": _done(True, {}, {})}, sites)                            # B has not said
    assert quiescent({"A": _done(True, {"B": 2}, {"B": 1}), "B": _done(True, {"A": 1}, {"A": 2})}, sites)
    # a message from A to B that B has not counted: in flight, B may get busy
    assert not quiescent({"A": _done(True, {"B": 3}, {"B": 1}), "B": _done(True, {"A": 1}, {"A": 2})}, sites)
    assert not quiescent({"A": _done(False, {}, {}), "B": _done(True, {}, {})}, sites)


def test_merge_sums_the_nodes_rounds_and_keeps_each_change_once(q):
    jep = algorithm1(with_stats(q, {}))
    dones = {}
    for site in ("N1", "N2"):
        t = Tally(q, 200)
        for dst in ("N1", "N2", "N3"):
            if dst != site:
                t.on_send(Message(site, dst, q.name, 1, Ready(False, 0, "d", triggers=(18435,))), 40)
        t.on_send(Message(site, "N3", q.name, 1, PlanUpdate(1, True, jep)), 60)
        change = {"generation": 1, "from_epoch": 20, "plan": jep.to_json(), "triggers": [18435]}
        dones[site] = {"adaptive": {"mode": "cnu", "interval_ms": 200, "changes": [change],
                                    "triggers": [{"site": "N4", "epoch": 17, "stream": "S4"}], "tally": t.data()}}
    ad = merge(q, dones, jep.to_json())
    assert len(ad["changes"]) == 1 and len(ad["triggers"]) == 1
    assert ad["plan_changes_per_node"] == {"N1": 1, "N2": 1}
    (rnd,) = ad["rounds"]
    assert (rnd["round"], rnd["synchronisation"], rnd["migration"], rnd["bytes"]) == (1, 4, 6, 4 * 40 + 2 * 60)
    assert rnd["triggers"] == [18435]


def test_cli_kill_with_adaptive_cluster_runs_needs_redis(tmp_path, capsys, monkeypatch):
    """``--kill`` works with ``--plan adaptive --cluster`` as with any plan: it needs Redis windows (checkpoints)."""
    from joinlib.adaptive.workload import Toggle, write_toggle
    from joinlib.cli.main import main
    monkeypatch.delenv("REDIS_URL", raising=False)
    toggle4 = ROOT / "examples" / "toggle4.yaml"
    write_toggle(load_query(toggle4), Toggle("S4"), tmp_path, 500, 1)
    rc = main(["run", str(toggle4), "--data", str(tmp_path), "--plan", "adaptive", "--cluster", "127.0.0.1:1",
               "--kill", "N2@1", "--no-progress"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "killing nodes needs Redis windows" in err and "Traceback" not in err
