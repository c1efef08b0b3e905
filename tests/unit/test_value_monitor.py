"""The live monitor of per-value rates (joinlib/pmjoin/value_monitor.py): the nodes' reports, merged, give the
rates and the partition functions a data directory gives; the horizon and the cap hold; status messages
with malformed reports are refused."""
from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from joinlib.control.check import check_control
from joinlib.data.files import load_streams
from joinlib.model import Tup
from joinlib.pmjoin import partitioned as choose_pm
from joinlib.pmjoin.value_monitor import BUCKET_MS, ValueMonitor, is_report, merge_reports
from joinlib.query import load_query
from tests.unit.test_pmjoin_stats import write_data


def _reports(query, streams, **kw) -> list[dict]:
    out = []
    for site in query.sites:
        mon = ValueMonitor.of(query, site)
        if mon is None:
            continue
        mon.horizon, mon.cap = kw.get("horizon_ms", mon.horizon), kw.get("cap", mon.cap)
        for s in query.streams:
            if s.site == site:
                mon.add(s.name, streams[s.name])
        rep = mon.report()
        assert rep is not None and is_report(rep)
        out.append(rep)
    return out


def test_merged_reports_are_the_data_directory_s_value_stats(tmp_path: Path) -> None:
    qpath, data = write_data(tmp_path)   # three sites, 10 s of data each
    query = load_query(qpath)
    streams = load_streams(query, data)
    merged = merge_reports(query, _reports(query, streams))
    expected = choose_pm.value_stats(query, streams)
    for key in ("by", "streams", "values"):
        assert merged[key] == expected[key]
    for got, want in zip(merged["rates"], expected["rates"], strict=True):
        assert got == pytest.approx(want)
    for scheme, parts in (("rate", 3), ("range", 2)):
        assert choose_pm.function_from_stats(query, merged, scheme, parts).to_json() == \
            choose_pm.function_from_stats(query, expected, scheme, parts).to_json()


def test_the_cap_keeps_the_most_frequent_values(tmp_path: Path) -> None:
    qpath, data = write_data(tmp_path)
    query = load_query(qpath)
    streams = load_streams(query, data)
    for rep in _reports(query, streams, cap=1):
        for s, pairs in rep["streams"].items():
            counts: dict = {}
            for t in streams[s]:
                counts[t.key[0]] = counts.get(t.key[0], 0) + 1
            assert pairs == [[max(counts, key=lambda v: (counts[v], [-ord(c) for c in v])), max(counts.values())]]


def test_tuples_past_the_horizon_are_forgotten(tmp_path: Path) -> None:
    qpath, _ = write_data(tmp_path)
    query = load_query(qpath)
    mon = ValueMonitor(query, query.stream("S1").site, horizon_ms=5_000)
    mon.add("S1", [Tup(0, 1, ts, 0, ("old",)) for ts in range(0, 4000, 100)])
    mon.add("S1", [Tup(0, 2, ts, 0, ("new",)) for ts in range(10_000, 12_000, 100)])
    rep = mon.report()
    assert rep == {"span_ms": 11_900 - 7_000 + 1, "streams": {"S1": [["new", 20]]}}
    assert set(mon.seen) <= {b"snew", b"sold"}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30_000), st.sampled_from(["a", "b", 1, 2.5, None])), min_size=1,
                max_size=80),
       st.integers(BUCKET_MS, 12_000))
def test_a_report_counts_the_buckets_of_the_last_horizon(tmp_path_factory, tuples, horizon: int) -> None:
    """Whatever the arrival order: the counts of the one-second buckets after (last ts - horizon), and the
    span from the first ts seen (or the oldest kept bucket's start, if later) to the last."""
    qpath, _ = write_data(tmp_path_factory.mktemp("vm"))
    query = load_query(qpath)
    mon = ValueMonitor(query, query.stream("S1").site, horizon_ms=horizon)
    for i in range(0, len(tuples), 7):   # arrival in batches
        mon.add("S1", [Tup(0, k, ts, 0, (v,)) for k, (ts, v) in enumerate(tuples[i:i + 7])])
    last = max(ts for ts, _ in tuples)
    lo = (last - horizon) // BUCKET_MS + 1
    kept = [(ts, v) for ts, v in tuples if ts // BUCKET_MS >= lo]
    counts: dict = {}
    for _, v in kept:
        counts[v] = counts.get(v, 0) + 1
    rep = mon.report()
    assert rep is not None
    assert rep["span_ms"] == last - max(min(ts for ts, _ in tuples), lo * BUCKET_MS) + 1
    assert {(v, n) for v, n in rep["streams"]["S1"]} == set(counts.items())


def test_no_monitor_without_a_partitionable_stream_here(tmp_path: Path) -> None:
    qpath, _ = write_data(tmp_path)
    query = load_query(qpath)
    assert ValueMonitor.of(query, "nowhere") is None


@pytest.mark.parametrize("values,ok", [
    ({"span_ms": 1000, "streams": {"S1": [["a", 3], [1, 2], [None, 0]]}}, True),
    ({"span_ms": 0, "streams": {}}, False),
    ({"span_ms": 1000, "streams": {"S1": [["a"]]}}, False),
    ({"span_ms": 1000, "streams": {"S1": [[["a"], 1]]}}, False),
    ({"span_ms": 1000, "streams": {"S1": [["a", -1]]}}, False),
    ({"span_ms": "1", "streams": {}}, False),
    ([], False),
])
def test_status_messages_with_malformed_reports_are_refused(values, ok: bool) -> None:
    err = check_control("q", "status", {"site": "n1", "run": "r", "values": values})
    assert (err is None) == ok, err
    if not ok:
        assert err is not None and "status.values has the wrong type or value" in err


@pytest.mark.parametrize("args,message", [
    ([], "--data DIR is required (or --live"),
    (["--live"], "joinlib stats --live takes --values FILE"),
    (["--live", "--values", "v.json", "--write", "q2.yaml"], "not --data, --write or --json"),
    (["--live", "--values", "v.json", "--url", "http://127.0.0.1:9"], "cannot reach the planner service"),
])
def test_stats_command_mistakes_are_one_clear_line(tmp_path: Path, capsys, args: list[str], message: str) -> None:
    from joinlib.cli.main import main
    qpath, _ = write_data(tmp_path)
    assert main(["stats", str(qpath), *[str(tmp_path / a) if a.endswith((".json", ".yaml")) else a for a in args]]) != 0
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(-3_000, 30_000),
                                   st.sampled_from(["a", "b", 1, 1.0, True, 2.5, None, float("nan")])),
                         max_size=30), min_size=1, max_size=8),
       st.integers(BUCKET_MS, 12_000), st.booleans())
@example([[(5_000, "a")], [(4_000, "b"), (4_001, "c")]], 1_000, True)   # a tuple at last - horizon is not counted
def test_a_sorted_batch_counts_as_tuple_by_tuple(tmp_path_factory, batches, horizon: int, sort: bool) -> None:
    """``add``'s bucket-at-a-time count of a batch in ts order (a node's release) leaves exactly the state the
    tuple-by-tuple count does (``_add_each``): buckets, counts, the values kept, in the same order."""
    qpath, _ = write_data(tmp_path_factory.mktemp("vm"))
    query = load_query(qpath)
    site = query.stream("S1").site
    fast, slow = ValueMonitor(query, site, horizon_ms=horizon), ValueMonitor(query, site, horizon_ms=horizon)
    for batch in batches:
        rows = sorted(batch, key=lambda x: x[0]) if sort else batch
        tups = [Tup(0, k, ts, 0, (v,)) for k, (ts, v) in enumerate(rows)]
        fast.add("S1", tups)
        slow._add_each("S1", slow.attrs["S1"], tups)
        assert (fast.first, fast.last) == (slow.first, slow.last)
        assert [(b, s, list(c.items())) for b, per in fast.buckets.items() for s, c in per.items()] == \
            [(b, s, list(c.items())) for b, per in slow.buckets.items() for s, c in per.items()]
        assert list(fast.seen) == list(slow.seen)
        assert [repr(v) for v in fast.seen.values()] == [repr(v) for v in slow.seen.values()]
