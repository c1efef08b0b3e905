"""Byte counters agree with a hand computation of the Avro encoding, per algorithm.

Two streams, one tuple each, both with join value "v1": S1@a (id 0, ts 5) and
S2@b (id 0, ts 3); τ = 10 ms, so everything happens in epoch 0.  Sizes by the Avro
rules (zigzag varints; a string is its length then its bytes; an array is a block
count, the items, then 0; a union is its branch index then the value):

  Envelope header  part (1) + gen (1) + flow (1) + epoch (1) + body branch (1) = 5 (the sites
                   are the Kafka key and topic, not part of the value)
  BaseTuple        pos 1 + id 1 + ts 1 + seq 1 + key [string "v1"] (1+1+1+2+1 = 6) + rest b"" (1) = 11
  TupleBatch[1]    1 + (1 + 11 + 1) + 1 = 15   -> message 20
  KeyBatch[1 key]  1 + 6 + 1 = 8              -> message 13
  ExpiryUpdate     k=0 (1) + arrivals [] (1) = 2 -> message 7
  DjaUpdate        v_J [key] (8) + count changes [gap 0, count 1] (4) + s_F [] (1) + arrivals [] (1)
                   = 14 -> message 19
"""
from __future__ import annotations

import pytest

from joinlib.model import Execution, Network, Predicate, Query, Stream, Tup, Window
from joinlib.plan.logical import uniform
from joinlib.runtime.sink import CollectingSink
from joinlib.sim.engine import run_embedded

FULL, KEYS, EXPIRY, DJA = 20, 13, 7, 19

QUERY = Query("bytes", (Stream("S1", 0, "a", Window("time", 100), ("k",)),
                        Stream("S2", 1, "b", Window("time", 100), ("k",))),
              (Predicate("S1", "k", "S2", "k"),), Network(10, 1000), Execution(10, 5))
DATA = {"S1": [Tup(0, 0, 5, 0, ("v1",), b"")], "S2": [Tup(1, 0, 3, 0, ("v1",), b"")]}

EXPECTED = {  # (src, dst, kind) -> bytes, from the message flows of each algorithm
    "SP-S": {("b", "a", "full"): FULL, ("a", "b", "full"): FULL},               # B_2 -> N_1, B_1 -> N_2
    "SP-D": {("a", "b", "full"): FULL, ("b", "a", "full"): FULL},               # B_1 -> N_2, B_2 -> N_1
    "SM-S1": {("a", "b", "partial"): KEYS, ("b", "a", "full"): FULL, ("b", "a", "update"): EXPIRY,
              ("b", "a", "partial"): KEYS, ("a", "b", "full"): FULL, ("a", "b", "update"): EXPIRY},
    "SM-S2": {("b", "a", "update"): DJA, ("a", "b", "partial"): KEYS, ("b", "a", "full"): FULL,
              ("a", "b", "update"): DJA, ("b", "a", "partial"): KEYS, ("a", "b", "full"): FULL},
    "SM-D1": {("b", "a", "update"): DJA, ("a", "b", "full"): FULL,
              ("a", "b", "update"): DJA, ("b", "a", "full"): FULL},
    "SM-D2": {("a", "b", "partial"): 2 * KEYS, ("b", "a", "partial"): 2 * KEYS,   # K_1 and K'_1 each way
              ("a", "b", "full"): FULL, ("b", "a", "full"): FULL},
}


@pytest.mark.parametrize("algorithm", sorted(EXPECTED))
def test_bytes_per_link_and_kind_match_hand_computation(algorithm):
    sink = CollectingSink(QUERY)
    report = run_embedded(QUERY, DATA, uniform(QUERY, algorithm), sink)
    got = {(ln["src"], ln["dst"], ln["kind"]): ln["bytes"] for ln in report.links}
    assert got == EXPECTED[algorithm]
    assert report.results == 1 and sink.results[0][:2] == ((0, 0), 5)


def test_transfer_time_is_latency_plus_bytes_over_bandwidth():
    report = run_embedded(QUERY, DATA, uniform(QUERY, "SP-D"), CollectingSink(QUERY))
    for link in report.links:  # 10 ms + 20 B * 8 bit / 1000 kbit/s = 10.16 ms
        assert link["transfer_ms"] == pytest.approx(10 + FULL * 8 / 1000)
