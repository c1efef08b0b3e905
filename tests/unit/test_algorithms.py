"""One record per algorithm (joinlib/algorithms): every layer reads the registry, and nothing is left out of
it -- the plan IR lowers a step into its record's flows and replica, the term models price its formula,
the runtime has phases for every algorithm and both ends for every replica kind."""
from __future__ import annotations

import pytest

from joinlib.algorithms import ALGORITHMS, REGISTRY, REPLICA_KINDS, at_source, get_algorithm
from joinlib.algorithms.reduce import KEY_SETS, REDUCED
from joinlib.algorithms.simple import CENTRAL
from joinlib.costs import DEFAULT_MODEL, MODELS, TERM_MODELS, get_model
from joinlib.costs.term_models import PaperModel
from joinlib.costs.unit_time import SeqState, step_params
from joinlib.errors import JoinlibError
from joinlib.plan import logical as plans
from joinlib.plan.ir import lower
from joinlib.query import parse_query
from joinlib.runtime.algorithms import ENDS, PHASES, has_sender

TWO = {
    "name": "two",
    "streams": {"S1": {"site": "r1", "window": "2s"}, "S2": {"site": "r2", "window": "2s"}},
    "join": ["S1.k = S2.k"],
}


def test_the_registry_names_the_six_algorithms_in_the_papers_order():
    assert ALGORITHMS == ("SP-S", "SP-D", "SM-S1", "SM-S2", "SM-D1", "SM-D2")
    assert {a for a in ALGORITHMS if at_source(a)} == {"SP-S", "SM-S1", "SM-S2"}
    assert not at_source("magic")
    with pytest.raises(JoinlibError, match="unknown algorithm 'magic'"):
        get_algorithm("magic")
    assert set(REPLICA_KINDS) == {"SP-S", "SM-S1", "SM-S2", "SM-D1", "RF"}
    assert CENTRAL.step is REGISTRY["SP-S"]


def test_the_runtime_runs_every_record():
    assert set(PHASES) == set(REGISTRY)
    assert set(ENDS) == set(REPLICA_KINDS)
    assert {name for name, ends in ENDS.items() if ends.sender is None} == {REDUCED.name}


@pytest.mark.parametrize("name", ALGORITHMS)
def test_a_step_lowers_to_its_records_flows_and_replica(name):
    q = parse_query(TWO, "two")
    rec = REGISTRY[name]
    ir = lower(q, plans.uniform(q, name))
    st = ir.steps_of("S1")[0]
    assert [(n, ir.flow(sig).kind) for n, sig in st.flows] == [(f.name, f.kind) for f in rec.flows]
    assert st.proc == ("r1" if rec.at_source else "r2")
    assert st.sites == (("r1", "r2") if rec.at_home else ("r1",))
    if rec.replica is None:
        assert st.replica is None
    else:
        assert st.replica is not None
        rep = ir.replica(st.replica)
        assert rep.kind == rec.replica.name and bool(rep.index) == rec.replica.keyed
        assert ir.update_flow(rep).kind == rec.replica.update and has_sender(rep)


def test_a_reductions_flows_are_its_records():
    q = parse_query(TWO, "two")
    ir = lower(q, plans.reduction(q, "r2"))
    assert {r.kind for r in ir.replicas} == {REDUCED.name}
    keyed = [f for f in ir.flows if f.owner.startswith("reduce:")]
    assert keyed and all(f.name.startswith(KEY_SETS.name + ":") and f.kind == KEY_SETS.kind for f in keyed)
    assert not any(has_sender(r) for r in ir.replicas)


@pytest.mark.parametrize("name", ALGORITHMS)
def test_the_term_models_price_the_records_formula(name):
    q = parse_query(TWO, "two")
    state = SeqState.start(q, "S1")
    labels = [t.label for t, _ in PaperModel().terms(q, state, "S2", name)]
    assert labels == [t[0] for t in REGISTRY[name].terms(step_params(q, state, "S2"))]


def test_one_registry_of_cost_models():
    assert MODELS == ("wire", "paper", "bytes", "calibrated") and DEFAULT_MODEL == "wire"
    assert TERM_MODELS == ("paper", "bytes", "calibrated")
    assert [get_model(m).name for m in MODELS if m != "calibrated"] == ["wire", "paper", "bytes"]
    with pytest.raises(JoinlibError, match="the bytes model takes no parameters"):
        get_model("bytes", c_p=1)
    with pytest.raises(JoinlibError, match=r"unknown cost model 'magic' \(choose from wire, paper, bytes"):
        get_model("magic")
