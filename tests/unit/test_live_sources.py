"""Live sources without a broker: the query file's ``source``, record decoding, the origin, the
figures of ``joinlib queries``, the contract helper and the command-line checks."""
from __future__ import annotations

import io
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import fastavro
import orjson
import pytest
import yaml

from joinlib.cli.live import format_query
from joinlib.cli.main import main as cli
from joinlib.control.messages import DoneMessage
from joinlib.errors import JoinlibError, QueryError
from joinlib.ingest import Bad, Decoder, Event, StreamIngest, derived_id
from joinlib.ingest.contract import Written, classify_partition, expected_output
from joinlib.ingest.events import EventGen, EventProfile
from joinlib.ingest.lifecycle import DEFAULT_LOOKBACK_MS, QueryStats, origin_for
from joinlib.query import load_query, parse_query, query_to_dict

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

DOC = """
name: live
streams:
  S1: {site: r1, window: 3s, source: {topic: events.r1, format: json, time: {field: ts, unit: ms}, id: id}}
  S2: {site: r2, window: 3s, source: {topic: events.r2, time: ts}}
join:
  - S1.dest = S2.dest
execution: {interval: 100ms, max_delay: 80ms, idle_timeout: 2s}
"""


def doc() -> dict:
    return yaml.safe_load(DOC)


def _set(path: str, value) -> dict:
    d = doc()
    cur = d
    keys = path.split("/")
    for k in keys[:-1]:
        cur = cur[k]
    cur[keys[-1]] = value
    return d


# ----------------------------------------------------------------------------- the query file


def test_issue_example_parses_and_round_trips() -> None:
    q = parse_query(doc(), "q.yaml")
    s1, s2 = q.streams
    assert s1.source is not None and s2.source is not None
    assert s1.source.topic == "events.r1" and s1.source.id_field == "id" and s1.source.live
    assert s2.source.time_field == "ts" and s2.source.time_unit == "ms" and s2.source.id_field is None
    assert s2.source.start == "latest" and s2.source.attributes == ()
    assert q.execution.idle_timeout_ms == 2000
    assert parse_query(query_to_dict(q), "again") == q
    assert parse_query(query_to_dict(load_query(EXAMPLES / "routers_live.yaml")), "x") == load_query(
        EXAMPLES / "routers_live.yaml")


@dataclass
class Case:
    name: str
    data: dict
    expect: tuple[str, ...]


CASES = [
    Case("unknown source key", _set("streams/S1/source/topik", "x"),
         ("streams.S1.source.topik", "did you mean 'topic'")),
    Case("no topic", _set("streams/S1/source", {"format": "json", "time": "ts"}), ("streams.S1.source.topic",)),
    Case("bad topic", _set("streams/S1/source/topic", "a topic"), ("streams.S1.source.topic", "Kafka topic name")),
    Case("bad format", _set("streams/S1/source/format", "jsn"), ("streams.S1.source.format", "did you mean 'json'")),
    Case("no time", _set("streams/S1/source", {"topic": "t"}), ("streams.S1.source.time", "event-time field")),
    Case("bad unit", _set("streams/S1/source/time", {"field": "ts", "unit": "sec"}),
         ("streams.S1.source.time.unit", "choose from ms, s, us, ns, iso")),
    Case("time is a join attribute", _set("streams/S1/source/time", "dest"), ("streams.S1.source.time", "join")),
    Case("bad attributes", _set("streams/S1/source/attributes", "some"), ("streams.S1.source.attributes",)),
    Case("avro without schema", _set("streams/S1/source/format", "avro"), ("streams.S1.source", "registry")),
    Case("schema on json", _set("streams/S1/source/schema", {"type": "record"}), ("streams.S1.source.schema",
                                                                                  "avro sources only")),
    Case("time on sourcebatch", _set("streams/S1/source/format", "sourcebatch"), ("streams.S1.source.time",
                                                                                  "sourcebatch")),
    Case("bad start", _set("streams/S1/source/start", "now"), ("streams.S1.source.start", "latest, earliest")),
    Case("bad idle timeout", _set("execution/idle_timeout", "0s"), ("execution.idle_timeout", "positive")),
    Case("bad registry", _set("streams/S1/source", {"topic": "t", "time": "ts", "format": "avro", "registry": "host"}),
         ("streams.S1.source.registry", "URL")),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_source_mistakes_name_the_key(case: Case) -> None:
    with pytest.raises(QueryError) as e:
        parse_query(case.data, "q.yaml")
    for part in case.expect:
        assert part in str(e.value), str(e.value)


def test_avro_schema_file_is_read_inlined_and_checked(tmp_path: Path) -> None:
    schema = {"type": "record", "name": "P", "fields": [{"name": "ts", "type": "long"},
                                                        {"name": "dest", "type": "string"}]}
    (tmp_path / "p.avsc").write_text(json.dumps(schema))
    d = doc()
    d["streams"]["S2"]["source"] = {"topic": "t", "format": "avro", "time": "ts", "schema": "p.avsc"}
    (tmp_path / "q.yaml").write_text(yaml.safe_dump(d))
    q = load_query(tmp_path / "q.yaml")
    source = q.streams[1].source
    assert source is not None and source.schema is not None
    assert json.loads(source.schema) == schema
    assert parse_query(query_to_dict(q), "again") == q          # inline from now on
    d["streams"]["S2"]["source"]["id"] = "pid"
    (tmp_path / "q.yaml").write_text(yaml.safe_dump(d))
    with pytest.raises(QueryError, match="has no field 'pid'"):
        load_query(tmp_path / "q.yaml")
    d["streams"]["S2"]["source"]["schema"] = "missing.avsc"
    (tmp_path / "q.yaml").write_text(yaml.safe_dump(d))
    with pytest.raises(QueryError, match="cannot read the schema file"):
        load_query(tmp_path / "q.yaml")


# ----------------------------------------------------------------------------- decoding


def _decoder(source: dict, origin: int = 0, attrs=("dest",)):
    d = doc()
    d["streams"]["S1"]["source"] = {"topic": "t", **source}
    q = parse_query(d, "q")
    assert q.streams[0].source is not None
    return Decoder(q.streams[0], q.streams[0].source, origin)


@pytest.mark.parametrize("unit,value,ms", [
    ("ms", 1714000000123, 1714000000123), ("ms", 12.9, 12), ("s", 1714000000, 1714000000000),
    ("s", 1714000000.1234, 1714000000123), ("us", 1714000000123456, 1714000000123),
    ("ns", 1714000000123456789, 1714000000123), ("iso", "2024-04-24T23:06:40.123Z", 1714000000123),
    ("iso", "2024-04-24T23:06:40.123", 1714000000123), ("iso", "2024-04-25T01:06:40.123+02:00", 1714000000123),
])
def test_event_time_units(unit: str, value, ms: int) -> None:
    ev = _decoder({"time": {"field": "ts", "unit": unit}, "id": "id"}, origin=1714000000000).decode(
        orjson.dumps({"id": 1, "ts": value, "dest": "a"}), 0, 0)
    assert ev == Event(ms - 1714000000000, 1, ("a",), b"\x00")


@pytest.mark.parametrize("record,reason,words", [
    (b'{"id": 1, "ts": 5, "dest"', "bad_json", "not valid JSON"),
    (b'[1, 2]', "wrong_type", "JSON object"),
    (b'{"id": 1, "dest": "a"}', "missing_field", "'ts'"),
    (b'{"id": 1, "ts": null, "dest": "a"}', "missing_field", "null"),
    (b'{"id": 1, "ts": "5", "dest": "a"}', "wrong_type", "'ts' must be a number"),
    (b'{"id": 1, "ts": true, "dest": "a"}', "wrong_type", "'ts'"),
    (b'{"ts": 5, "dest": "a"}', "missing_field", "id field"),
    (b'{"id": "7", "ts": 5, "dest": "a"}', "wrong_type", "64-bit integer"),
    (b'{"id": 1, "ts": 5}', "missing_field", "join attribute 'dest'"),
    (b'{"id": 1, "ts": 5, "dest": {"a": 1}}', "wrong_type", "'dest'"),
    (b'{"id": 1.5, "ts": 5, "dest": "a"}', "wrong_type", "64-bit integer"),
    (None, "no_value", "tombstone"),
])
def test_malformed_records_say_why(record, reason: str, words: str) -> None:
    bad = _decoder({"time": "ts", "id": "id"}).decode(record, 0, 0)
    assert isinstance(bad, Bad) and bad.reason == reason and words in bad.detail, bad


def test_ids_nested_fields_and_attributes() -> None:
    ev = _decoder({"time": "meta.ts"}).decode(b'{"meta": {"ts": 7}, "dest": "a"}', 3, 41)
    assert ev.id == derived_id(3, 41) == 3 * 2 ** 48 + 41 and ev.ts == 7
    every = _decoder({"time": "ts", "id": "id", "attributes": "all"}).decode(
        b'{"id": 1, "ts": 5, "dest": "a", "z": 1, "b": "x"}', 0, 0)
    some = _decoder({"time": "ts", "id": "id", "attributes": ["z", "b"]}).decode(
        b'{"id": 1, "ts": 5, "dest": "a", "z": 1, "b": "x"}', 0, 0)
    assert every.rest == some.rest != b"\x00"          # sorted by name either way
    assert _decoder({"time": "ts", "id": "id", "attributes": ["q"]}).decode(
        b'{"id": 1, "ts": 5, "dest": "a"}', 0, 0).reason == "missing_field"


def test_avro_confluent_wire_format() -> None:
    schema = {"type": "record", "name": "P", "fields": [
        {"name": "id", "type": "long"}, {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "dest", "type": "string"}]}
    dec = _decoder({"format": "avro", "time": "ts", "id": "id", "schema": schema})
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), {"id": 4, "ts": 1714000000123, "dest": "a"})
    assert dec.decode(b"\x00\x00\x00\x00\x05" + buf.getvalue(), 0, 0) == Event(1714000000123, 4, ("a",), b"\x00")
    assert dec.decode(buf.getvalue(), 0, 0).reason == "bad_avro"                       # no header
    assert dec.decode(b"\x00\x00\x00\x00\x05\xff", 0, 0).reason == "bad_avro"         # truncated body


# ----------------------------------------------------------------------------- watermarks and ranks


def test_idle_advances_need_time_caught_up_partitions_and_no_replay() -> None:
    q = parse_query(doc(), "q")
    s = StreamIngest(q.streams[0], {0: 0, 1: 0}, tau=100, delta=80, idle_timeout=1000, now=0)
    assert s.offer(0, 0, Event(1000, 1, ("a",), b""), now=0) is None
    assert s.watermark == 0                                 # partition 1 has seen nothing
    assert s.idle_advances(900, lambda p: True) == []      # not idle for long enough
    advs = s.idle_advances(1550, lambda p: p == 1)
    assert [(a.part, a.at, a.wm) for a in advs] == [(1, 0, 500)]    # 550 ms of idleness, rounded to tau
    s.advance(advs[0])
    assert s.watermark == 500 and s.release() == []         # the event at 1000 is not final yet
    s.replay([type(advs[0])(0, 5, 2000)])                   # a logged advance still to come at offset 5
    assert s.idle_advances(9000, lambda p: True) == [type(advs[0])(1, 0, 8000)]   # from the last anchor


def test_the_contract_helper_classifies_per_partition() -> None:
    ev = {o: Event(ts, o, ("a",), b"") for o, ts in enumerate([100, 500, 300, 50, 520, 520])}
    rows = [(0, ev[0]), (1, ev[1]), (2, ev[2]), (3, ev[3]), (4, Bad("bad_json", "")), (5, ev[5])]
    assert classify_partition(rows, [(3, 600)], 80, 1000) == {0: None, 1: None, 2: "late", 3: "late",
                                                              4: "bad_json", 5: "late"}


def test_expected_output_of_generated_events() -> None:
    q = parse_query(doc(), "q")
    written = {}
    for s in q.streams:
        gen = EventGen(s, EventProfile(rate=50, distinct=5, payload_bytes=3, late_every=10, malformed_every=13))
        written[s.name] = [Written(i % 2, i // 2, r.value) for i, r in enumerate(gen.take(60))]
    want = expected_output(q, written, 0)
    kinds = Counter(want.dead.values())
    assert want.count > 0 and kinds["late"] > 0 and sum(kinds.values()) - kinds["late"] >= 8
    assert sum(len(v) for v in want.on_time.values()) + len(want.dead) == 120
    assert all(t.seq == i for v in want.on_time.values() for i, t in enumerate(v))


# ----------------------------------------------------------------------------- lifecycle


def test_origin_for_since() -> None:
    now = 1_714_000_000_555
    assert origin_for(None, now, 100) == (now - DEFAULT_LOOKBACK_MS) // 100 * 100
    assert origin_for("now-5min", now, 100) == (now - 300_000) // 100 * 100
    assert origin_for("0", now, 100) == 0
    assert origin_for("2024-04-24T23:06:40.123Z", now, 100) == 1714000000100
    with pytest.raises(JoinlibError, match="--since"):
        origin_for("yesterday", now, 100)


def test_query_stats_rates_bytes_against_central_and_latency() -> None:
    q = parse_query(doc(), "q")
    st = QueryStats(q, "r1")
    st.on_status({"site": "r1", "t_ms": 0, "inputs": {"S1": 0}, "results": 0, "sent_bytes": 0, "naive": []})
    st.on_status({"site": "r1", "t_ms": 2000, "inputs": {"S1": 200}, "results": 40, "sent_bytes": 500,
                  "naive": [["r1", "r2", 900]], "latency_ms": {"p50": 120.0, "p99": 300.0, "groups": 3},
                  "dead_letters": {"S1": {"late": 2}}})
    st.on_status({"site": "r2", "t_ms": 2000, "inputs": {"S2": 10}, "results": 5, "sent_bytes": 300,
                  "naive": [["r2", "r1", 1000]]})
    s = st.summary()
    assert s["input_per_s"] == {"S1": 100.0, "S2": None} and s["results_per_s"] == 20.0
    assert (s["bytes"], s["central_bytes"], s["bytes_vs_central"]) == (800, 1000, 0.8)
    assert s["p99_latency_ms"] == 300.0 and s["dead_letters"] == {"late": 2} and s["results"] == 45
    text = format_query({"query": "q", "state": "running", "run": "r", "planner": "auto", "live": True, "stats": s})
    assert "S1 100.0" in text and "80%" in text and "late 2" in text


def test_query_stats_of_a_scaled_out_live_query_add_up_its_partitions_and_re_keyer() -> None:
    """Each partition's run reports its results and bytes, the site's re-keyer (part D) the inputs, dead letters
    and naive baseline: the figures are per (site, partition), added up."""
    q = parse_query(doc(), "q")
    st = QueryStats(q, "r1")
    for t, n in ((0, 0), (2000, 1)):
        for part in (0, 1):
            st.on_status({"site": "r1", "part": part, "t_ms": t, "inputs": {}, "results": 10 * n * (part + 1),
                          "sent_bytes": 100 * n, "naive": []})
        st.on_status({"site": "r1", "part": 2, "t_ms": t, "inputs": {"S1": 300 * n}, "results": 0,
                      "sent_bytes": 0, "naive": [["r1", "r2", 700 * n]], "dead_letters": {"S1": {"late": n}}})
        st.on_status({"site": "r2", "t_ms": t, "inputs": {"S2": 0}, "results": 0, "sent_bytes": 0,
                      "naive": [["r2", "r1", 1000 * n]]})
    s = st.summary()
    assert s["input_per_s"] == {"S1": 150.0, "S2": 0.0} and s["results_per_s"] == 15.0 and s["results"] == 30
    assert (s["bytes"], s["central_bytes"], s["dead_letters"]) == (200, 1000, {"late": 1})
    st.on_done(DoneMessage("r1", "x", 12, part=0))   # a partition's done replaces its latest status
    assert st.summary()["results"] == 32


def test_results_flags_need_follow(capsys) -> None:
    assert cli(["results", "q", "--idle-exit", "3", "--url", "http://127.0.0.1:9"]) == 2
    assert "go with --follow" in capsys.readouterr().err
    assert cli(["queries", "--url", "http://127.0.0.1:9"]) == 2
    assert "cannot reach the planner service" in capsys.readouterr().err


def test_a_record_years_ahead_is_a_dead_letter_not_a_stall() -> None:
    """--since 0 with wall-clock event times (or ns read as ms) would mean billions of empty epochs."""
    q = parse_query(doc(), "q")
    s = StreamIngest(q.streams[0], {0: 0}, tau=100, delta=80, idle_timeout=1000)
    bad = s.offer(0, 0, Event(1_714_000_000_000, 1, ("a",), b""), 0)
    assert bad is not None and bad.reason == "too_far_ahead" and "days ahead" in bad.detail
    assert s.offer(0, 1, Event(5_000, 2, ("a",), b""), 0) is None and s.watermark == 4_920
