"""joinlib.control.check: what nodes and the planner accept from topics anyone can write.

Every message joinlib itself writes must pass (plans of every kind, status and done payloads, every
envelope of every algorithm, reductions and plan switches on the simulator); garbage must not, and
checking garbage never raises."""
from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from joinlib.control.check import CONTROL_KINDS, InboundFlows, check_control
from joinlib.data.files import load_streams
from joinlib.data.gen import generate
from joinlib.plan import logical as plans
from joinlib.query import load_query, query_to_dict
from joinlib.runtime.deploy import Plans, generations
from joinlib.runtime.host import Host
from joinlib.runtime.sink import CountingSink
from joinlib.sim.engine import run_embedded

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def routers(tmp_path_factory):
    q = load_query(REPO / "examples" / "routers.yaml")
    out = tmp_path_factory.mktemp("routers")
    generate(q, out, 1500, 3)
    return q, load_streams(q, out)


def _plan_message(q, p, **extra):
    return {"query": query_to_dict(q), "plan": p.to_json(), "run": "r1", "offsets": {"out.x": 0, "control": None},
            "nodes": list(q.sites), **extra}


def test_joinlibs_own_control_messages_pass(routers):
    q, _ = routers
    for p in (plans.uniform(q, "SM-S1"), plans.reduction(q, None), plans.central(q)):
        assert check_control(q.name, "plan", _plan_message(q, p)) is None
    sw = {"switches": [{"from_epoch": 5, "plan": plans.uniform(q, "SP-D").to_json()}], "last_epoch": 14,
          "live": {"origin_ms": 1000, "sources": {"S1": {"0": 4, "1": 0}}}}
    assert check_control(q.name, "plan", _plan_message(q, plans.uniform(q, "SM-S2"), **sw)) is None
    assert check_control(q.name, "end", {"last_epoch": 14}) is None
    assert check_control(q.name, "stop", {"run": "r1"}) is None
    status = {"site": "r1", "run": "r1", "epoch": 3, "epochs": {"g0": 3}, "last_epoch": None, "t_ms": 17.5,
              "results": 4, "sent_bytes": 100, "inputs": {"S1": 9}, "naive": [["r1", "r2", 40]], "live": True,
              "dead_letters": {"S1": {"late": 2}}, "watermarks_ms": {"S1": 1200}, "latency_ms": None}
    assert check_control(q.name, "status", status) is None
    assert check_control(q.name, "status", {**status, "latency_ms": {"p50": 1.5, "p99": 3, "groups": 2}}) is None
    link = {"src": "r1", "dst": "r2", "kind": "full", "messages": 3, "bytes": 300, "transfer_ms": 1.5}
    done = {"site": "r1", "run": None, "results": 4, "links": [link], "received": [link],
            "naive": [{"src": "r1", "dst": "r2", "bytes": 40}], "input_tuples": 9, "late_messages": 0,
            "last_epoch": 14, "resumed_from": None, "stopped": True}
    assert check_control(q.name, "done", done) is None


def test_invalid_control_messages_are_named(routers):
    q, _ = routers
    good = _plan_message(q, plans.uniform(q, "SM-S1"))
    bad = [
        ("plan", {**good, "plan": "/etc/passwd"}),              # a plan is a JSON object, never a path
        ("plan", {**good, "plan": {"S1": [["S9", "SP-S"]]}}),   # does not compile
        ("plan", {**good, "query": {**good["query"], "streams": 3}}),
        ("plan", {**good, "switches": [{"from_epoch": 0, "plan": good["plan"]}]}),
        ("plan", {**good, "live": {"origin_ms": "now", "sources": {}}}),
        ("end", {"last_epoch": "7"}), ("end", {}), ("stop", {"run": 5}), ("stop", []),
        ("status", {"site": ["r1"], "run": "r1"}), ("status", {"site": "r1", "run": "r1", "t_ms": "soon"}),
        ("status", {"site": "r1", "run": "r1", "naive": [["r1", "r2"]]}),
        ("done", {"site": "r1", "run": "r1", "results": -1}),
        ("done", {"site": "r1", "run": "r1", "results": 1, "links": [{"src": "r1"}]}),
        ("launch", {"run": "r1"}),
    ]
    for kind, payload in bad:
        assert check_control(q.name, kind, payload), (kind, payload)
    assert check_control("other", "plan", good)   # the payload's query is another one
    assert check_control("", "stop", {"run": "r1"})


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                           lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
                           max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(query=st.text(max_size=5), kind=st.sampled_from(CONTROL_KINDS + ("x",)), payload=json_values)
def test_checking_garbage_never_raises(query, kind, payload):
    check_control(query, kind, payload)


@pytest.mark.parametrize("plan", ["SP-S", "SP-D", "SM-S1", "SM-S2", "SM-D1", "SM-D2", "reduce", "switch"])
def test_every_envelope_of_a_run_passes_the_inbound_check(routers, plan, monkeypatch):
    q, streams = routers
    p: Plans
    if plan == "reduce":
        p = plans.reduction(q, None)
    elif plan == "switch":  # snapshots jump-start the replicas of the second generation
        p = [(0, plans.uniform(q, "SM-S2")), (6, plans.uniform(q, "SP-S")), (11, plans.reduction(q, None))]
    else:
        p = plans.uniform(q, plan)
    specs = {spec.gen: spec for spec in generations(q, p)}
    inbound: dict = {}
    real = Host.on_message
    seen = []

    def on_message(self, env, now=None, sent=None):
        key = (env.gen, self.site)
        if key not in inbound:
            inbound[key] = InboundFlows(specs[env.gen].ir, self.site)
        why = inbound[key].check(env.src, env.flow, env.epoch, env.body)
        assert why is None, f"{plan}: {env.src}->{self.site} flow {env.flow} epoch {env.epoch}: {why}"
        seen.append(type(env.body).__name__)
        return real(self, env, now, sent)

    monkeypatch.setattr(Host, "on_message", on_message)
    run_embedded(q, streams, p, CountingSink())
    assert seen
    if plan == "switch":
        assert "WindowSnapshot" in seen


def test_inbound_check_rejects_wrong_flows_and_bodies(routers):
    from joinlib.protocol.messages import ExpiryUpdate, KeyBatch, TupleBatch
    q, _ = routers
    spec = generations(q, plans.uniform(q, "SM-S1"))[0]
    site = q.sites[1]
    flows = InboundFlows(spec.ir, site)
    mine = [(r, f) for r, (f, _) in flows.flows.items() if f.dst == site]
    assert mine
    rank, f = mine[0]
    bodies = [TupleBatch([]), KeyBatch([]), ExpiryUpdate(0, [])]
    ok = [b for b in bodies if flows.check(f.src, rank, 3, b) is None]
    assert len(ok) == 1
    wrong = next(b for b in bodies if b is not ok[0])
    assert "carries" in (flows.check(f.src, rank, 3, wrong) or "")
    assert flows.check(f.src, rank, -1, ok[0])
    assert flows.check("elsewhere", rank, 3, ok[0])
    assert flows.check(f.src, 10_000, 3, ok[0])
    rng = random.Random(1)
    for _ in range(200):   # random ranks never raise
        flows.check(rng.choice(q.sites), rng.randrange(-5, 50), rng.randrange(-5, 50), rng.choice(bodies))


def test_typed_messages_write_what_joinlib_always_wrote_and_a_version_only_when_not_1(routers):
    """``joinlib.control.messages``: a payload as joinlib's producers write it parses and writes back key for key
    (so the bytes on the wire are unchanged); version 1 is not written, a message without it is version 1, and
    a version this reader does not know is rejected."""
    from joinlib.control.messages import CONTROL_VERSION, StopMessage, parse

    q, _ = routers
    link = {"src": "r1", "dst": "r2", "kind": "full", "messages": 3, "bytes": 300, "transfer_ms": 1.5}
    payloads = {
        "plan": _plan_message(q, plans.uniform(q, "SM-S1"), switches=[]),
        "end": {"last_epoch": 14, "run": "r1"},
        "stop": {"run": "r1"},
        "status": {"site": "r1", "run": "r1", "epoch": 3, "epochs": {"g0": 3}, "last_epoch": None, "t_ms": 17,
                   "results": 4, "sent_bytes": 100, "inputs": {"S1": 9}, "naive": [["r1", "r2", 40]], "live": True,
                   "dead_letters": {}, "watermarks_ms": {"S1": 1200}, "latency_ms": None},
        "done": {"site": "r1", "run": "r1", "results": 4, "links": [link], "received": [link],
                 "naive": [{"src": "r1", "dst": "r2", "bytes": 40}], "input_tuples": 9, "processing_s": {"tick": 0.5},
                 "late_messages": 0, "last_epoch": 14, "wall_s": 1.0, "cpu_s": 0.5, "resumed_from": None,
                 "resumed_from_epoch": None, "startup_s": 0.1, "checkpoints": 2, "generations": [0]},
    }
    for kind, payload in payloads.items():
        assert check_control(q.name, kind, payload) is None, kind
        written = parse(kind, payload).to_json()
        assert list(written) == list(payload) and written == payload, kind
    assert CONTROL_VERSION == 1 and StopMessage("r1").version == 1
    assert StopMessage("r1", version=2).to_json() == {"run": "r1", "version": 2}
    assert check_control(q.name, "stop", {"run": "r1", "version": 1}) is None
    assert "knows versions 1 to 1" in (check_control(q.name, "stop", {"run": "r1", "version": 2}) or "")
    assert "knows versions" in (check_control(q.name, "plan", {**payloads["plan"], "version": "1"}) or "")
