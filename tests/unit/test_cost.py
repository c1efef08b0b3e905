"""The cost model: the six Appendix B formulas against hand computations, the
intermediate-stream state, defaults, and model selection.

The two-stream case used throughout (``_two``):

    τ = 100 ms (1/τ = 10 batches/s); latency 20 ms, bandwidth 800 kbps = 100 000 B/s,
    so S(x) = 0.02 + x / 100000 seconds.
    S1@N1: r1 = 100/s, F1 = 1000 B, T1 = 2 s          wp1 = 10
    S2@N2: r2 = 50/s,  F2 = 500 B,  T2 = 4 s, w2 = 200, wp2 = 5
    P = 8 B (one join attribute J).
    c_p = 1e-6, c_u = 2e-6, c_h = 3e-6, c_i = 4e-6.

Case A: f1 = 0.05, f2 = 0.1 → f12 = min(1, 0.5) = 0.5, f21 = 1,
        k2 = min(10, 200) = 10, m1 = min(20, 10) = 10, m2 = min(10, 5) = 5.
Case B: f1 = 0.1, f2 = 0.05 → f12 = 1, f21 = 0.5,
        k2 = min(20, 200) = 20, m1 = min(10, 10) = 10, m2 = min(20, 5) = 5.
"""
from __future__ import annotations

import json
import math
from typing import Any

import pytest

from joinlib.algorithms import ALGORITHMS
from joinlib.costs import get_model
from joinlib.costs.term_models import BytesModel, CalibratedModel, PaperModel
from joinlib.costs.unit_time import (
    SeqState,
    explain,
    full_bytes,
    plan_cost,
    sequence_cost,
    step_params,
    window_tuples,
)
from joinlib.errors import JoinlibError
from joinlib.model import (
    Execution,
    Link,
    Network,
    Predicate,
    Query,
    Stream,
    StreamStats,
    Window,
)
from joinlib.plan.logical import Plan, Sequence, Step, central, uniform

C: dict[str, Any] = dict(c_p=1e-6, c_u=2e-6, c_h=3e-6, c_i=4e-6)


def _two(f1=0.05, f2=0.1, site2="N2", links=()):
    s1 = Stream("S1", 0, "N1", Window("time", 2000), ("J",),
                StreamStats(rate=100, tuple_bytes=1000, selectivity=(("J", f1),)))
    s2 = Stream("S2", 1, site2, Window("time", 4000), ("J",),
                StreamStats(rate=50, tuple_bytes=500, selectivity=(("J", f2),)))
    return Query("two", (s1, s2), (Predicate("S1", "J", "S2", "J"),),
                 Network(latency_ms=20, bandwidth_kbps=800, links=tuple(links)), Execution(100, 80))


def _cost(q, alg, model=None):
    model = model or PaperModel(**C)
    return model.step_cost(q, SeqState.start(q, "S1"), "S2", alg)


def test_parameters_case_a():
    q = _two()
    p = step_params(q, SeqState.start(q, "S1"), "S2")
    assert (p.r1, p.r2, p.wp1, p.wp2, p.w2) == pytest.approx((100, 50, 10, 5, 200))
    assert (p.f1, p.f2, p.f12, p.f21) == pytest.approx((0.05, 0.1, 0.5, 1.0))
    assert (p.k2, p.m1, p.m2) == pytest.approx((10, 10, 5))
    assert (p.F1, p.F2, p.P1, p.P2) == (1000, 500, 8, 8)
    assert p.rho == pytest.approx(0.05)  # min(f1, f2): nested domains


# --- the six formulas, case A -------------------------------------------------------
def test_sp_s():
    # r1 c_u + r1 c_p w2 + (r2/wp2) S(wp2 F2) + r2 c_u
    # = 100*2e-6 + 100*1e-6*200 + 10*(0.02 + 5*500/1e5) + 50*2e-6
    # = 0.0002 + 0.02 + 0.45 + 0.0001
    assert _cost(_two(), "SP-S") == pytest.approx(0.4703)


def test_sp_d():
    # r1 c_i + (r1/wp1) S(wp1 F1) + r1 c_p w2 + r2 c_u
    # = 100*4e-6 + 10*(0.02 + 10*1000/1e5) + 100*1e-6*200 + 50*2e-6
    # = 0.0004 + 1.2 + 0.02 + 0.0001
    assert _cost(_two(), "SP-D") == pytest.approx(1.2205)


def test_sm_s1():
    # r1 c_i + (r1/wp1) S(m1 P1) + (r1/wp1) m1 c_p w2 + (r1/wp1) S(wp2 f21 F2)
    #   + (r1/wp1) wp2 f21 c_i + r2 c_i + r1 c_p w2 f21 + (r2/wp2) S(c)
    # = 0.0004 + 10*(0.02 + 80/1e5) + 10*10*1e-6*200 + 10*(0.02 + 5*1*500/1e5)
    #   + 10*5*1*4e-6 + 50*4e-6 + 100*1e-6*200*1 + 10*(0.02 + 8/1e5)
    # = 0.0004 + 0.208 + 0.02 + 0.45 + 0.0002 + 0.0002 + 0.02 + 0.2008
    assert _cost(_two(), "SM-S1") == pytest.approx(0.8996)


def test_sm_s2_case_a():
    # r1 c_i + r1 c_h + (r1/wp1) S(k2(1-f12) P2) + (r1/wp1) k2(1-f12) c_p w2
    #   + (r1/wp1) S(k2(1-f12) F2) + r2 c_p k2 + r1 c_h + r2 c_i
    #   + (r2/wp2) m2(1-f21) c_i + (r2/wp2) S(m2(1-f21) P2 + wp2 f21 F2) + (r2/wp2) m2(1-f21) c_u
    # k2(1-f12) = 10*0.5 = 5; m2(1-f21) = 0
    # = 0.0004 + 0.0003 + 10*(0.02 + 5*8/1e5) + 10*5*1e-6*200 + 10*(0.02 + 5*500/1e5)
    #   + 50*1e-6*10 + 0.0003 + 50*4e-6 + 0 + 10*(0.02 + (0 + 5*1*500)/1e5) + 0
    # = 0.0004 + 0.0003 + 0.204 + 0.01 + 0.45 + 0.0005 + 0.0003 + 0.0002 + 0.45
    assert _cost(_two(), "SM-S2") == pytest.approx(1.1157)


def test_sm_d1_case_a():
    # r1 c_i + r1 c_p k2 + (r1/wp1) S(wp1 f12 F1) + r1 f12 c_p w2 + r2 c_p k2 + r2 c_i
    #   + 2 (r2/wp2) m2(1-f21) c_i + (r2/wp2) S(m2(1-f21) P2)
    # = 0.0004 + 100*1e-6*10 + 10*(0.02 + 10*0.5*1000/1e5) + 100*0.5*1e-6*200
    #   + 50*1e-6*10 + 50*4e-6 + 0 + 10*(0.02 + 0)
    # = 0.0004 + 0.001 + 0.7 + 0.01 + 0.0005 + 0.0002 + 0.2
    assert _cost(_two(), "SM-D1") == pytest.approx(0.9121)


def test_sm_d2():
    # r1 c_i + (r1/wp1) S(m1 P1) + (r1/wp1) m1 c_p w2 + (r1/wp1) S(m1 f12 P1)
    #   + (r1/wp1) m1 f12 c_p wp1 + (r1/wp1) S(wp1 f12 F1) + (r1/wp1) wp1 f12 c_p w2 + r2 c_u
    # = 0.0004 + 10*(0.02 + 10*8/1e5) + 10*10*1e-6*200 + 10*(0.02 + 10*0.5*8/1e5)
    #   + 10*10*0.5*1e-6*10 + 10*(0.02 + 10*0.5*1000/1e5) + 10*10*0.5*1e-6*200 + 50*2e-6
    # = 0.0004 + 0.208 + 0.02 + 0.204 + 0.0005 + 0.7 + 0.01 + 0.0001
    assert _cost(_two(), "SM-D2") == pytest.approx(1.1430)


# --- case B: the (1 - f21) synchronisation terms of SM-S2 and SM-D1 -----------------------
def test_sm_s2_case_b():
    # k2(1-f12) = 20*0 = 0; m2(1-f21) = 5*0.5 = 2.5
    # = 0.0004 + 0.0003 + 10*(0.02 + 0) + 0 + 10*(0.02 + 0) + 50*1e-6*20 + 0.0003 + 0.0002
    #   + 10*2.5*4e-6 + 10*(0.02 + (2.5*8 + 5*0.5*500)/1e5) + 10*2.5*2e-6
    # = 0.0004 + 0.0003 + 0.2 + 0.2 + 0.001 + 0.0003 + 0.0002 + 0.0001 + 0.327 + 0.00005
    assert _cost(_two(0.1, 0.05), "SM-S2") == pytest.approx(0.72935)


def test_sm_d1_case_b():
    # = 0.0004 + 100*1e-6*20 + 10*(0.02 + 10*1*1000/1e5) + 100*1*1e-6*200 + 50*1e-6*20
    #   + 50*4e-6 + 2*10*2.5*4e-6 + 10*(0.02 + 2.5*8/1e5)
    # = 0.0004 + 0.002 + 1.2 + 0.02 + 0.001 + 0.0002 + 0.0002 + 0.202
    assert _cost(_two(0.1, 0.05), "SM-D1") == pytest.approx(1.4258)


# --- transmission: same site, per-link overrides, bytes ------------------------------------
def test_same_site_has_no_transmission():
    q = _two(site2="N1")
    # SP-S without the S(.) term: 0.0002 + 0.02 + 0.0001
    assert _cost(q, "SP-S") == pytest.approx(0.0203)
    # SM-S1 without its three S(.) terms: 0.0004 + 0.02 + 0.0002 + 0.0002 + 0.02
    assert _cost(q, "SM-S1") == pytest.approx(0.0408)
    assert all(_cost(q, a, BytesModel()) == 0 for a in ALGORITHMS)


def test_link_direction():
    # N2 -> N1 latency 50 ms: SP-S ships B2 back: 10*(0.05 + 0.025) = 0.75 instead of 0.45
    q = _two(links=[Link("N2", "N1", 50, 800)])
    assert _cost(q, "SP-S") == pytest.approx(0.4703 - 0.45 + 0.75)
    assert _cost(q, "SP-D") == pytest.approx(1.2205)  # ships N1 -> N2 only


def test_bytes_model():
    q = _two()
    assert _cost(q, "SP-S", BytesModel()) == pytest.approx(10 * 5 * 500)
    assert _cost(q, "SP-D", BytesModel()) == pytest.approx(10 * 10 * 1000)
    # K1 (10 keys) + dW'2 (5 tuples) + expiry count, 10 times a second
    assert _cost(q, "SM-S1", BytesModel()) == pytest.approx(10 * (80 + 2500 + 8))


# --- state ------------------------------------------------------------------------------
def _stream(name, pos, f, rate=100, window=1000, attrs=("J",), **stats):
    sel = tuple((a, f) for a in attrs) if f is not None else ()
    return Stream(name, pos, f"N{pos + 1}", Window("time", window), attrs,
                  StreamStats(rate=rate, selectivity=sel, **stats))


def test_advance_rate_and_location():
    q = _two()
    s0 = SeqState.start(q, "S1")
    for alg in ALGORITHMS:
        s1 = s0.advance(q, "S2", alg)
        # r_new = r_old * w_next * rho = 100 * 200 * min(0.05, 0.1)
        assert s1.rate == pytest.approx(1000)
        assert s1.full_bytes == 1500
        assert s1.location == ("N1" if alg in ("SP-S", "SM-S1", "SM-S2") else "N2")
        assert s1.class_of("S1", "J").f == pytest.approx(0.1)  # max of the class
        assert s1.joined == ("S1", "S2")


def test_rate_is_order_independent_and_classes_merge():
    # complete graph on J: P(all three equal) = product of the f except the largest
    streams = (_stream("A", 0, 0.05), _stream("B", 1, 0.1), _stream("C", 2, 0.02))
    preds = (Predicate("A", "J", "B", "J"), Predicate("B", "J", "C", "J"), Predicate("A", "J", "C", "J"))
    q = Query("q", streams, preds)
    w = 100.0  # 100/s * 1 s
    s0 = SeqState.start(q, "A")
    ab = s0.advance(q, "B", "SP-S")
    abc = ab.advance(q, "C", "SP-S")
    acb = s0.advance(q, "C", "SP-S").advance(q, "B", "SP-S")
    assert ab.rate == pytest.approx(100 * w * 0.05)
    assert abc.rate == pytest.approx(100 * w * w * 0.05 * 0.02)
    assert acb.rate == pytest.approx(abc.rate)
    assert abc.classes == acb.classes and len(abc.classes) == 1
    assert abc.classes[0].f == pytest.approx(0.1)


def test_two_attribute_step():
    # cycle with one attribute per edge: the last stream closes two predicates at once
    A = _stream("A", 0, 0.1, attrs=("x", "z"))
    B = _stream("B", 1, 0.1, attrs=("x", "y"))
    Cs = _stream("C", 2, 0.05, attrs=("y", "z"))
    q = Query("q", (A, B, Cs), (Predicate("A", "x", "B", "x"), Predicate("B", "y", "C", "y"),
                                 Predicate("C", "z", "A", "z")))
    ab = SeqState.start(q, "A").advance(q, "B", "SP-D")
    p = step_params(q, ab, "C")
    assert p.rho == pytest.approx(0.05 * 0.05)  # min(0.1, 0.05) per predicate, independent
    assert p.f1 == pytest.approx(0.1 * 0.1) and p.f2 == pytest.approx(0.05 * 0.05)
    assert p.P1 == 16
    assert p.src == "N2" and p.dst == "N3"


def test_tuple_window_and_defaults():
    s = Stream("S", 0, "N1", Window("tuples", 42), ("J", "K"), StreamStats())
    assert window_tuples(s) == 42
    assert full_bytes(s) == 100 * 5 + 16 + 8 * 2
    q = Query("q", (s, _stream("T", 1, None, attrs=("J",))), (Predicate("S", "J", "T", "J"),))
    st = SeqState.start(q, "S")
    assert st.rate == 100.0
    assert st.class_of("S", "J").f == 0.1
    assert st.join_selectivity(q, "T") == pytest.approx(0.1)


def test_cannot_advance_off_graph():
    streams = (_stream("A", 0, 0.1), _stream("B", 1, 0.1), _stream("C", 2, 0.1))
    q = Query("q", streams, (Predicate("A", "J", "B", "J"), Predicate("B", "J", "C", "J")))
    with pytest.raises(ValueError):
        SeqState.start(q, "A").advance(q, "C", "SP-S")
    with pytest.raises(JoinlibError):
        SeqState.start(q, "A").advance(q, "B", "HASH")


# --- plan costs and explain -------------------------------------------------------------------
def _three():
    streams = (_stream("A", 0, 0.1), _stream("B", 1, 0.05), _stream("C", 2, 0.02))
    return Query("q", streams, (Predicate("A", "J", "B", "J"), Predicate("B", "J", "C", "J")))


def test_plan_cost_is_sum_of_steps():
    q = _three()
    m = PaperModel()
    plan = uniform(q, "SM-D2")
    rows = explain(q, plan, m)
    assert len(rows) == 3 * 2
    assert sum(r["cost"] for r in rows) == pytest.approx(plan_cost(q, plan, m))
    assert plan_cost(q, plan, m) == pytest.approx(sum(sequence_cost(q, s, m) for s in plan.sequences))
    for r in rows:
        assert r["processing"] + r["transmission"] == pytest.approx(r["cost"])
        assert r["rate_out"] == pytest.approx(r["rate"] * window_tuples(q.stream(r["stream"])) * r["rho"])
    assert rows[0]["site"] == "N1" and rows[0]["site_out"] == "N2" and rows[0]["step"] == 1


def test_start_site_costs_shipping_the_head():
    q = _three()
    m = PaperModel()
    plan = central(q, "N1")
    seq_b = plan.sequence("B")
    moved = sequence_cost(q, seq_b, m)
    stay = sequence_cost(q, Sequence("B", seq_b.steps), m)
    # B's batches to N1 (10 per second, 10 tuples of 524 B) minus what the steps save
    lat, bw = 25 / 1000, 1024 * 1000 / 8
    ship_head = 10 * (lat + 10 * full_bytes(q.stream("B")) / bw)
    at_n1 = SeqState.start(q, "B", "N1")
    steps_at_n1 = m.step_cost(q, at_n1, "A", "SP-S") + m.step_cost(q, at_n1.advance(q, "A", "SP-S"), "C", "SP-S")
    assert moved == pytest.approx(ship_head + steps_at_n1)
    assert moved != stay


# --- models --------------------------------------------------------------------------------
def test_get_model():
    assert isinstance(get_model("paper"), PaperModel)
    paper = get_model("paper", c_p=2e-6)
    assert isinstance(paper, PaperModel) and paper.c_p == 2e-6
    assert isinstance(get_model("bytes"), BytesModel)
    with pytest.raises(JoinlibError, match="unknown cost model"):
        get_model("magic")
    with pytest.raises(JoinlibError):
        get_model("paper", c_p=-1)


def test_calibrated_from_json(tmp_path):
    path = tmp_path / "cal.json"
    path.write_text(json.dumps({**C, "c_byte": 0.0, "probe": "nested", "meta": {"host": "x"}}))
    cal = get_model("calibrated", path=str(path))
    assert isinstance(cal, CalibratedModel)
    q = _two()
    for alg in ALGORITHMS:
        assert _cost(q, alg, cal) == pytest.approx(_cost(q, alg))
    assert cal.meta == {"host": "x"}
    path.write_text(json.dumps({"c_q": 1}))
    with pytest.raises(JoinlibError, match="unknown keys"):
        CalibratedModel.from_json(path)
    with pytest.raises(JoinlibError, match="not found"):
        CalibratedModel.from_json(tmp_path / "missing.json")


def test_calibrated_hash_probe_and_byte_cost():
    q = _two()
    cal = CalibratedModel(**C, probe="hash", c_match=5e-7, c_byte=1e-7)
    # SP-S: probe W2@N1 with B1 becomes r1 (c_p + c_match w2 rho) = 100 (1e-6 + 5e-7 * 200 * 0.05)
    #       shipping B2 adds (1/tau) wp2 F2 c_byte = 10 * 2500 * 1e-7
    expected = 0.0002 + 100 * (1e-6 + 5e-7 * 10) + 0.45 + 10 * 2500 * 1e-7 + 0.0001
    assert _cost(q, "SP-S", cal) == pytest.approx(expected)
    assert cal.to_json()["probe"] == "hash"


def test_costs_are_non_negative_and_finite():
    q = _three()
    for model in (PaperModel(), BytesModel()):
        s = SeqState.start(q, "B")
        for nxt in ("A", "C"):
            for alg in ALGORITHMS:
                c = model.step_cost(q, s, nxt, alg)
                assert c >= 0 and math.isfinite(c)


def test_explain_validates():
    q = _three()
    bad = Plan((Sequence("A", (Step("C", "SP-S"), Step("B", "SP-S"))),
                Sequence("B", (Step("A", "SP-S"), Step("C", "SP-S"))),
                Sequence("C", (Step("B", "SP-S"), Step("A", "SP-S")))))
    from joinlib.errors import PlanError
    with pytest.raises(PlanError):
        explain(q, bad, PaperModel())


def test_a_live_source_s_tuples_are_priced_by_what_they_carry(tmp_path):
    """Only the attributes the SELECT list needs travel from a live source (docs/sql.md "What is carried"): the
    byte model prices k of the declared payload attributes, none for a source that carries only its join values;
    a source carrying everything, and data files, keep the declared size."""
    from joinlib.sql import load_query_file
    text = """
    CREATE STREAM S1 (id BIGINT, ts BIGINT, dest VARCHAR, a VARCHAR, b VARCHAR)
      WITH (site = 'r1', rate = 10, attributes = 4, tuple_bytes = 416, topic = 'e1', timestamp = 'ts');
    CREATE STREAM S2 (id BIGINT, ts BIGINT, dest VARCHAR, a VARCHAR)
      WITH (site = 'r2', rate = 10, attributes = 4, tuple_bytes = 416, topic = 'e2', timestamp = 'ts');
    CREATE STREAM S3 (id BIGINT, ts BIGINT, dest VARCHAR)
      WITH (site = 'r3', rate = 10, attributes = 4, tuple_bytes = 416, topic = 'e3', timestamp = 'ts', carry = 'all');
    CREATE STREAM q WITH (topic = 'rows.q') AS SELECT S1.dest, S1.a, S1.b, S2.id AS i2, S3.id AS i3
      FROM S1 JOIN S2 WITHIN 1 SECONDS ON S1.dest = S2.dest JOIN S3 WITHIN 1 SECONDS ON S2.dest = S3.dest;
    """
    (tmp_path / "q.sql").write_text(text)
    q = load_query_file(tmp_path / "q.sql")
    s1, s2, s3 = q.streams
    assert s1.source is not None and s1.source.attributes == ("a", "b")
    head = 16 + 8 * len(s1.join_attrs)
    assert full_bytes(s1) == pytest.approx(head + (416 - head) * 2 / 4)
    assert full_bytes(s2) == head                      # the join value only: no payload travels
    assert full_bytes(s3) == 416                       # carry = 'all'
