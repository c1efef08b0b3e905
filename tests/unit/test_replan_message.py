"""A replanned run's plan message (docs/live.md "Replan"): it round-trips, validates, compiles into instances that
serve the head epochs from the switch on with generations numbered after the replaced run's, and the shapes a
replan cannot have are rejected with a sentence; the control log finds a run's successor and predecessor."""
from __future__ import annotations

from pathlib import Path

from joinlib.control.check import accept_control, check_control
from joinlib.control.messages import LiveStart, PlanMessage, Replan
from joinlib.node.control import ControlLog, ControlRecord
from joinlib.plan import logical as plans
from joinlib.plan import partitioned as pm
from joinlib.plan.partition import HashPartition
from joinlib.plan.partitioned import Partitioned
from joinlib.query import load_query, query_to_dict

REPO = Path(__file__).resolve().parents[2]
Q = load_query(REPO / "examples" / "routers.yaml")
LIVE = {"origin_ms": 1_000, "sources": {"S1": {"0": 4}}}
RP = {"replaces": "old", "switch_ms": 3_000, "gen": 2, "handover": {"S1": {"0": 40}}}


def _msg(plan, **extra):
    return {"query": query_to_dict(Q), "plan": plan, "run": "new", "nodes": list(Q.sites), "live": LIVE, **extra}


def test_round_trip_and_switch_epoch():
    rp = Replan("old", 3_050, 2, {"S1": {"0": 40}})
    msg = PlanMessage(query_to_dict(Q), plans.central(Q).to_json(), "new", live=LiveStart(1_000), replan=rp)
    assert PlanMessage.from_json(msg.to_json()) == msg
    assert rp.handover_at() == {"S1": {0: 40}}
    assert rp.switch_epoch(1_000, 100) == 21   # a switch between boundaries: the next one
    assert Replan("old", 3_000).switch_epoch(1_000, 100) == 20


def test_a_replanned_run_serves_the_epochs_from_the_switch_with_later_generations():
    tau = Q.execution.interval_ms
    got = accept_control(Q.name, "plan", _msg(plans.reduction(Q, None).to_json(), replan=RP))
    assert not isinstance(got, str) and got.compiled is not None, got
    specs = got.compiled.lowered().specs
    assert [(s.gen, s.start, s.stop) for s in specs] == [(2, (3_000 - 1_000) // tau, None)]
    part = Partitioned(pm.attribute_class(Q), HashPartition(2), (plans.central(Q),) * 2)
    got = accept_control(Q.name, "plan", _msg(part.to_json(), replan=RP))
    assert not isinstance(got, str) and got.compiled is not None, got
    assert sorted((s.part, s.gen, s.start) for s in got.compiled.lowered().specs) == [(0, 2, 20), (1, 2, 20)]


def _why(payload: dict) -> str:
    return check_control(Q.name, "plan", payload) or ""


def test_what_a_replan_cannot_be():
    central = plans.central(Q).to_json()
    no_live = {k: v for k, v in _msg(central, replan=RP).items() if k != "live"}
    assert "needs 'live'" in _why(no_live)
    assert "must lie after" in _why(_msg(central, replan={**RP, "switch_ms": 1_000}))
    assert "wrong type" in _why(_msg(central, replan={**RP, "switch_ms": "soon"}))
    assert "wrong type" in _why(_msg(central, replan={**RP, "handover": {"S1": {"x": 1}}}))
    adaptive = _msg(central, replan=RP, adaptive={"mode": "cnu"})
    assert check_control(Q.name, "plan", adaptive) is not None


def test_the_control_log_links_a_run_to_the_run_replacing_it():
    central = plans.central(Q).to_json()
    old = PlanMessage(query_to_dict(Q), central, "old", live=LiveStart(1_000))
    new = PlanMessage(query_to_dict(Q), central, "new", live=LiveStart(1_000), replan=Replan("old", 3_000))
    other = PlanMessage({**query_to_dict(Q), "name": "other"}, central, "x")
    log = ControlLog()
    for i, m in enumerate((old, other, new)):
        log.add(ControlRecord(i, str(m.query["name"]), "plan", m))
    assert log.successor(log.plans[0]) is log.plans[2]
    assert log.predecessor(log.plans[2]) is log.plans[0]
    assert log.successor(log.plans[1]) is None and log.predecessor(log.plans[0]) is None


def test_a_repartition_threshold_round_trips_and_is_checked():
    """``repartition`` (joinlib submit --repartition) rides in the plan message for the planner: a restarted planner
    reads it back from ``control``."""
    rp = {"threshold": 0.25, "plan": "pmjoin:rate:2"}
    msg = PlanMessage(query_to_dict(Q), plans.central(Q).to_json(), "new", live=LiveStart(1_000), repartition=rp)
    assert PlanMessage.from_json(msg.to_json()) == msg
    assert msg.to_json()["repartition"] == rp
    assert "repartition" not in PlanMessage(query_to_dict(Q), plans.central(Q).to_json()).to_json()
    assert check_control(Q.name, "plan", _msg(plans.central(Q).to_json(), repartition=rp)) is None
    for bad in (0.25, {"threshold": 0, "plan": "pmjoin"}, {"threshold": -1.0, "plan": "pmjoin"},
                {"threshold": "often", "plan": "pmjoin"}, {"threshold": 0.25}):
        assert "repartition" in _why(_msg(plans.central(Q).to_json(), repartition=bad))
