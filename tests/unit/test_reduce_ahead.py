"""Key sets sent ahead (``joinlib.runtime.ahead``): which reducers send ahead, and that every message --
flow, epoch, bytes -- and every result is the same as when each set waits for its epoch's rounds; with
skipped directions, crossing edges of a cyclic graph, plan switches (the jump start) and a checkpoint
restored mid-run (exactness with random crashes: tests/property/test_checkpoint.py)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from joinlib.data.files import load_streams
from joinlib.data.gen import generate
from joinlib.data.synthetic import SyntheticStats, build_query, topology_edges
from joinlib.model import Execution, Network
from joinlib.plan import logical as plans
from joinlib.plan.ir import lower
from joinlib.protocol import wire
from joinlib.protocol.messages import Envelope
from joinlib.query import load_query
from joinlib.runtime import ahead, instance
from joinlib.runtime.algorithms.keysets import Outgoing
from joinlib.runtime.sink import CollectingSink
from joinlib.sim.engine import run_embedded

SELECTIVE = Path(__file__).resolve().parents[2] / "examples" / "routers_selective.yaml"   # S1 - S2 - S3
TREE = [["S1", "S2"], ["S2", "S3"]]


@pytest.fixture(scope="module")
def selective(tmp_path_factory):
    q = load_query(SELECTIVE)
    d = tmp_path_factory.mktemp("sel")
    generate(q, d, 4000, seed=5)
    return q, load_streams(q, d)


def _clique3(tmp_path_factory):
    stats: list[SyntheticStats] = [{"rate": 100.0, "attributes": 4, "tuple_bytes": 20, "selectivity": 0.05,
                                    "window_ms": 500} for _ in range(3)]
    q = build_query("clique3ahead", stats, topology_edges(3, "complete"), per_edge_attrs=True,
                    network=Network(25.0, 1024.0), execution=Execution(100, 80))
    d = tmp_path_factory.mktemp("clq")
    generate(q, d, 4000, seed=2)
    return q, load_streams(q, d)


def _run(q, streams, plan: Any, monkeypatch, on: bool) -> tuple[list, list]:
    """Every message as (src, dst, flow, epoch, bytes) and the results (ids, head ts), with or without the
    look-ahead."""
    with monkeypatch.context() as m:
        if not on:
            m.setattr(instance, "ahead_targets", lambda op: [])
        sent: list[tuple[str, str, int, int, bytes]] = []

        def size_of(env: Envelope) -> int:
            b = wire.encode_envelope(env)
            sent.append((env.src, env.dst, env.flow, env.epoch, b))
            return len(b)
        sink = CollectingSink(q)
        run_embedded(q, streams, plan, sink, size_of=size_of)
    return sorted(sent), sorted((ids, ts) for ids, ts, _ in sink.results)   # emit times: earlier, if anything


def test_which_reducers_send_ahead(selective):
    q, _ = selective
    ops = {r.stream: r for r in lower(q, plans.reduction(q, "r3")).reducers}
    # the leaves take only their parent's sets: their sets up go ahead; the root's depend on its children's
    assert ahead.ahead_targets(ops["S1"]) == ["S2"] and ahead.ahead_targets(ops["S3"]) == ["S2"]
    assert ahead.ahead_targets(ops["S2"]) == []
    # a leaf that takes no set never waits: nothing to send ahead
    skipped = plans.reduction(q, "r3", skip=[("S2", "S1")])
    ops = {r.stream: r for r in lower(q, skipped).reducers}
    assert ahead.ahead_targets(ops["S1"]) == [] and ahead.ahead_targets(ops["S3"]) == ["S2"]
    # the root, S1's sets skipped: its only filter is S3's, so its sets toward S3 go ahead
    ops = {r.stream: r for r in lower(q, plans.reduction(q, "r3", skip=[("S1", "S2")])).reducers}
    assert ahead.ahead_targets(ops["S2"]) == ["S3"]


@pytest.mark.parametrize("skip", [[], [("S2", "S1")], [("S1", "S2")], [("S2", "S3"), ("S3", "S2")]])
def test_the_same_messages_and_results_as_without(selective, monkeypatch, skip):
    q, streams = selective
    plan = plans.reduction(q, "r3", skip=skip)
    sent, results = _run(q, streams, plan, monkeypatch, on=True)
    assert results and (sent, results) == _run(q, streams, plan, monkeypatch, on=False)


def test_the_same_with_crossing_edges(tmp_path_factory, monkeypatch):
    q, streams = _clique3(tmp_path_factory)
    plan = plans.reduction(q, q.sites[0], None, None, (), cross=True)
    assert any(ahead.ahead_targets(r) for r in lower(q, plan).reducers)
    assert _run(q, streams, plan, monkeypatch, on=True) == _run(q, streams, plan, monkeypatch, on=False)


def test_the_same_across_plan_switches(selective, monkeypatch):
    q, streams = selective
    gens = [(0, plans.reduction(q, "r3")), (40, plans.central(q, "r2")),
            (80, plans.reduction(q, "r1", skip=[("S2", "S1")])), (120, plans.reduction(q, "r2"))]
    sent, results = _run(q, streams, gens, monkeypatch, on=True)
    assert results and (sent, results) == _run(q, streams, gens, monkeypatch, on=False)


def test_a_set_that_differs_stops_the_run():
    checked = ahead.CheckedSends(object(), {"f"})
    checked.sent[("f", 3)] = Outgoing([("a",)], 0, 2)
    with pytest.raises(RuntimeError, match="differs from the reducer's"):
        checked.check("f", 3, Outgoing([("b",)], 0, 2))
    checked.sent[("f", 4)] = Outgoing([("a",)], 0, 2)
    with pytest.raises(RuntimeError, match="differs from the reducer's"):
        checked.check("f", 4, Outgoing([("a",)], 1, 2))   # the same keys, another tag


def test_a_look_ahead_restores_its_own_snapshot_and_a_whole_reducer_s(selective):
    """A checkpoint written when the look-ahead was a whole Reducer (pending tuples: the unsent ones, with their
    edges and shipped flag) restores into a LookAhead with the same window and pending tuples."""
    from joinlib.protocol.avro import decode_tuple, encode_tuple
    q, streams = selective
    op = {r.stream: r for r in lower(q, plans.reduction(q, "r3")).reducers}["S1"]
    look = ahead.LookAhead(op, "S2", q.execution.interval_ms)
    tups = streams["S1"][:5]
    look.admit(0, tups, ("ts", -1))
    want = (list(look.window), look.pending)
    back = ahead.LookAhead(op, "S2", q.execution.interval_ms)
    back.restore(look.snapshot(encode_tuple), decode_tuple)
    assert (list(back.window), back.pending) == want
    old = {"v": 2, "window": [list(w) for w in look.window], "pending": [(encode_tuple(t), [], False) for t in tups],
           "filters": {}, "received": {}, "live_from": {}}
    back.restore(old, decode_tuple)
    assert (list(back.window), back.pending) == want
    assert back.out_keys(0) == look.out_keys(0)
