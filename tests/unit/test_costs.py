"""The plan-level byte model (joinlib.costs): message sizes from the runtime's encoder, each
shipment charged once, the semijoin pass-through fraction, and estimates close to measurement."""
from __future__ import annotations

from pathlib import Path

import pytest

from joinlib.costs import WireModel, estimate, from_data, from_query, get_model
from joinlib.costs.flows import distinct, presence
from joinlib.data.files import load_streams
from joinlib.data.gen import generate
from joinlib.plan.logical import central, uniform
from joinlib.planner.measure import central_bytes
from joinlib.protocol.messages import Envelope, KeyBatch, TupleBatch
from joinlib.protocol.wire import envelope_size
from joinlib.query import load_query
from joinlib.runtime.sink import CountingSink
from joinlib.sim.engine import run_embedded

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def selective(tmp_path_factory):
    q = load_query(ROOT / "examples" / "routers_selective.yaml")
    d = tmp_path_factory.mktemp("sel")
    generate(q, d, 8000, seed=3)
    return q, load_streams(q, d)


def test_message_sizes_are_the_runtime_encoders():
    q = load_query(ROOT / "examples" / "routers_selective.yaml")
    enc = from_query(q).encoding()
    assert enc.rows("r1", "r2", ("S1",), 0) == envelope_size(Envelope("r1", "r2", 1, enc._epoch, TupleBatch([])))
    t = enc.tup("S1")
    three = Envelope("r1", "r2", 1, enc._epoch, TupleBatch([(t,)] * 3))
    assert enc.rows("r1", "r2", ("S1",), 3) == envelope_size(three)
    k = enc.key("S1", (0,))
    assert enc.keys("r1", "r2", "S1", (0,), 2) == envelope_size(Envelope("r1", "r2", 1, enc._epoch, KeyBatch([k] * 2)))
    # a row of S1's tuple adds the declared tuple_bytes
    assert enc.rows("r1", "r2", ("S1",), 2) - enc.rows("r1", "r2", ("S1",), 1) == 1250
    # fractional counts interpolate; large ones scale
    one, two = enc.rows("r1", "r2", ("S1",), 1), enc.rows("r1", "r2", ("S1",), 2)
    assert enc.rows("r1", "r2", ("S1",), 1.5) == pytest.approx((one + two) / 2)
    assert enc.rows("r1", "r2", ("S1",), 1000) == pytest.approx(one + 999 * 1250, rel=1e-3)


def test_pass_through_fraction_and_distinct_keys():
    assert presence(0.0001, 300) == pytest.approx(1 - (1 - 0.0001) ** 300)
    assert presence(1.0, 5) == 1.0 and presence(0.5, 0) == 0.0
    assert distinct(10, 1e9) == pytest.approx(10, rel=1e-6)
    assert distinct(1e6, 50) == pytest.approx(50)


def test_each_shipment_is_charged_once():
    q = load_query(ROOT / "examples" / "routers_selective.yaml")
    c = estimate(q, central(q, "r1"))
    sps = estimate(q, uniform(q, "SP-S"))
    # central: 2 streams shipped once; all-SP-S: each stream to each other site, 6 shipments
    assert len(c.flows) == 2 and len(sps.flows) == 6
    assert sps.bytes_per_s == pytest.approx(3 * c.bytes_per_s, rel=1e-9)
    assert WireModel().plan_cost(q, central(q, "r2")) == pytest.approx(c.bytes_per_s)


def test_estimates_follow_measurement(selective):
    q, streams = selective
    inputs = from_data(q, streams)
    dur = (max(t.ts for v in streams.values() for t in v) + 1) / 1000
    for plan, tol in ((central(q, "r2"), 0.01), (uniform(q, "SM-S1"), 0.35), (uniform(q, "SM-D2"), 0.35)):
        est = estimate(q, plan, inputs).bytes(dur)
        got = run_embedded(q, streams, plan, CountingSink()).bytes
        assert est == pytest.approx(got, rel=tol)
    assert central_bytes(q, streams, "r3") == run_embedded(q, streams, central(q, "r3"), CountingSink()).bytes


def test_semijoins_are_cheaper_than_central_when_selective():
    q = load_query(ROOT / "examples" / "routers_selective.yaml")
    c = estimate(q, central(q, "r1")).bytes_per_s
    assert estimate(q, uniform(q, "SM-S1")).bytes_per_s < c / 5
    assert estimate(q, uniform(q, "SP-S")).bytes_per_s > 2 * c


def test_get_model_names():
    assert isinstance(get_model(), WireModel)
    assert get_model("paper").name == "paper"
    with pytest.raises(Exception, match="unknown cost model"):
        get_model("magic")
