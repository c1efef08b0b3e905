"""The synthetic data generator: determinism, rates, value domains, ties, bursts."""
from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import pytest

from joinlib.data.files import iter_rows, load_rows, load_streams
from joinlib.data.gen import generate, payload_attributes
from joinlib.errors import JoinlibError
from joinlib.protocol.values import decode_values
from joinlib.query import load_query, parse_query

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

QUERY = parse_query({
    "name": "g",
    "streams": {
        "S1": {"site": "a", "window": "1s", "rate": 200, "attributes": 3, "selectivity": {"k": 0.02, "u": 1}},
        "S2": {"site": "b", "window": "1s", "rate": 50, "tuple_bytes": 40, "selectivity": 0.25},
        "S3": {"site": "c", "window": "5 tuples"},
    },
    "join": ["S1.k = S2.k", "S1.u = S3.u", "S2.a1 = S3.k"],
}, "g.yaml")


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, int]]:
    out = tmp_path_factory.mktemp("gen")
    return out, generate(QUERY, out, duration_ms=60_000, seed=7)


def read(path: Path) -> bytes:
    return path.read_bytes()


def test_counts_match_files(data: tuple[Path, dict[str, int]]) -> None:
    out, counts = data
    rows = load_rows(QUERY, out)
    assert counts == {name: len(r) for name, r in rows.items()}


@pytest.mark.parametrize("stream, rate", [("S1", 200), ("S2", 50), ("S3", 100)])  # S3: the default rate
def test_rate_within_tolerance(data: tuple[Path, dict[str, int]], stream: str, rate: float) -> None:
    _, counts = data
    expected = rate * 60
    assert abs(counts[stream] - expected) < 5 * math.sqrt(expected), (counts[stream], expected)


def test_rows_shape_ids_and_order(data: tuple[Path, dict[str, int]]) -> None:
    out, _ = data
    for s in QUERY.streams:
        rows = list(iter_rows(out / f"{s.name}.jsonl"))
        assert [r["id"] for r in rows] == list(range(len(rows)))
        assert all(0 <= r["ts"] < 60_000 for r in rows)
        assert all(a in rows[0] for a in s.join_attrs)
        payload = [k for k in rows[0] if k not in ("id", "ts") and k not in s.join_attrs]
        assert len(payload) == payload_attributes(s)
        assert all(len(rows[0][k]) == 4 for k in payload)


def test_payload_names_skip_join_attributes(data: tuple[Path, dict[str, int]]) -> None:
    out, _ = data
    first = next(iter_rows(out / "S2.jsonl"))  # joins on k and a1; tuple_bytes 40 -> 8 payload attributes
    assert payload_attributes(QUERY.stream("S2")) == 8
    assert list(first) == ["id", "ts", "k", "a1", "a0", "a2", "a3", "a4", "a5", "a6", "a7", "a8"]
    assert first["a1"].startswith("v")


def test_distinct_values_follow_selectivity(data: tuple[Path, dict[str, int]]) -> None:
    out, _ = data
    rows = load_rows(QUERY, out)
    s1_k = Counter(r["k"] for r in rows["S1"])
    assert set(s1_k) == {f"v{i:04d}" for i in range(50)}  # f = 0.02
    assert {r["u"] for r in rows["S1"]} == {"v0000"}  # f = 1
    assert len({r["k"] for r in rows["S2"]}) == 4  # scalar f = 0.25
    assert len({r["u"] for r in rows["S3"]}) == 10  # default f = 0.1
    # uniform: no value is far from its expected share
    expected = len(rows["S1"]) / 50
    assert max(s1_k.values()) < expected * 1.6 and min(s1_k.values()) > expected * 0.4


def test_timestamp_ties_occur(data: tuple[Path, dict[str, int]]) -> None:
    out, _ = data
    ts = [r["ts"] for r in iter_rows(out / "S1.jsonl")]  # 0.2 tuples per ms
    assert len(set(ts)) < len(ts)


def test_deterministic_for_a_seed(tmp_path: Path, data: tuple[Path, dict[str, int]]) -> None:
    out, counts = data
    again = generate(QUERY, tmp_path / "again", duration_ms=60_000, seed=7)
    assert again == counts
    for s in QUERY.names:
        assert read(tmp_path / "again" / f"{s}.jsonl") == read(out / f"{s}.jsonl")


def test_different_seed_gives_different_data(tmp_path: Path, data: tuple[Path, dict[str, int]]) -> None:
    out, _ = data
    generate(QUERY, tmp_path, duration_ms=60_000, seed=8)
    assert read(tmp_path / "S1.jsonl") != read(out / "S1.jsonl")


def test_stream_data_depends_only_on_seed_and_name(tmp_path: Path, data: tuple[Path, dict[str, int]]) -> None:
    """Reordering the streams (or changing another stream) does not change a stream's data."""
    out, _ = data
    reordered = parse_query({
        "name": "g",
        "streams": {"S3": {"site": "c", "window": "5 tuples"},
                    "S1": {"site": "a", "window": "1s", "rate": 200, "attributes": 3,
                           "selectivity": {"k": 0.02, "u": 1}},
                    "S2": {"site": "b", "window": "1s", "rate": 999}},
        "join": ["S1.k = S2.k", "S1.u = S3.u", "S2.a1 = S3.k"],
    }, "g.yaml")
    generate(reordered, tmp_path, duration_ms=60_000, seed=7)
    assert read(tmp_path / "S1.jsonl") == read(out / "S1.jsonl")


def test_bursts_emit_same_ts_groups_and_keep_the_rate(tmp_path: Path) -> None:
    q = parse_query({"streams": {"A": {"site": "a", "window": "1s", "rate": 20},
                                 "B": {"site": "b", "window": "1s", "rate": 20}},
                     "join": ["A.k = B.k"]}, "b.yaml")
    counts = generate(q, tmp_path, duration_ms=300_000, seed=1, bursts=True)
    ts = Counter(r["ts"] for r in iter_rows(tmp_path / "A.jsonl"))
    assert max(ts.values()) >= 4  # at 0.02 tuples/ms, plain Poisson almost never gives 4 in one ms
    assert sum(1 for n in ts.values() if n > 1) > 100
    assert abs(counts["A"] - 6000) < 5 * math.sqrt(6000) * 2  # bursts add variance


def test_generated_data_loads_as_tuples(data: tuple[Path, dict[str, int]]) -> None:
    out, counts = data
    tups = load_streams(QUERY, out)
    assert {n: len(t) for n, t in tups.items()} == counts
    t = tups["S1"][0]
    assert t.key[0].startswith("v") and len(decode_values(t.rest)) == 3


def test_fig7_tuple_is_about_1250_bytes(tmp_path: Path) -> None:
    q = load_query(EXAMPLES / "fig7.yaml")
    generate(q, tmp_path, duration_ms=200, seed=3)
    tups = load_streams(q, tmp_path)["S1"]
    assert tups and all(len(decode_values(t.rest)) == 250 for t in tups)
    assert 1250 <= len(tups[0].rest) <= 1600  # Avro: 6 bytes per 4-character string


def test_progress_bar(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    counts = generate(QUERY, tmp_path, duration_ms=3000, seed=1, progress=True)
    assert sum(counts.values()) > 0


@pytest.mark.parametrize("duration", [0, -5, 1.5, "10s", True])
def test_bad_duration(tmp_path: Path, duration: object) -> None:
    with pytest.raises(JoinlibError, match="positive whole number of ms"):
        generate(QUERY, tmp_path, duration_ms=duration, seed=1)  # type: ignore[arg-type]
