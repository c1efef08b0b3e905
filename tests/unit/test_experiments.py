"""Experiments (Fig. 7, Table 3, Fig. 9, accuracy), ``joinlib stats`` and ``joinlib calibrate``:
each command in --quick mode on tiny inputs, with checks of what its output must satisfy."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from joinlib.algorithms import ALGORITHMS
from joinlib.cli.experiments import main
from joinlib.costs import get_model
from joinlib.costs.term_models import CalibratedModel
from joinlib.costs.unit_time import plan_cost
from joinlib.data.synthetic import SyntheticStats, build_query
from joinlib.experiments.common import DataCache, warmup_for
from joinlib.experiments.estimates import accuracy, pearson, spearman, summarize
from joinlib.experiments.measure import measure
from joinlib.experiments.table3 import query_of
from joinlib.model import Execution, Network
from joinlib.plan.logical import from_json, uniform

PNG = b"\x89PNG\r\n\x1a\n"
ROOT = Path(__file__).resolve().parents[2]


def is_png(path: Path) -> bool:
    return path.is_file() and path.read_bytes()[:8] == PNG and path.stat().st_size > 1000


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> Path:
    """One directory holding a quick fig7 and a quick fig9 (shared by several tests)."""
    d = tmp_path_factory.mktemp("experiments")
    assert main(["experiment", "fig7", "--out", str(d / "fig7"), "--quick", "--no-progress"]) == 0
    assert main(["experiment", "fig9", "--out", str(d / "fig9"), "--quick", "--sweep", "window",
                 "--topologies", "star,cycle", "--no-progress"]) == 0
    return d


# ----------------------------------------------------------------------------- Fig. 7

def test_fig7_has_every_sweep_and_algorithm(outputs, capsys):
    doc = json.loads((outputs / "fig7" / "fig7.json").read_text())
    assert set(doc["sweeps"]) == set("abcdefg") and len(doc["runs"]) == 7 * 2 * 6
    assert doc["algorithms"] == list(ALGORITHMS)
    for key, sw in doc["sweeps"].items():
        assert is_png(outputs / "fig7" / f"fig7{key}.png")
        assert len(sw["values"]) == 2
        runs = [r for r in doc["runs"] if r["sweep"] == key]
        points = {(r["value"], r["algorithm"]) for r in runs}
        assert points == {(v, a) for v in sw["values"] for a in ALGORITHMS}
        for r in runs:
            m = r["measured"]
            assert m["execution_s_per_s"] == pytest.approx(m["processing_s_per_s"] + m["transmission_s_per_s"],
                                                           rel=1e-4)
            assert m["transmission_s_per_s"] > 0 and m["bytes_per_s"] > 0 and m["results"] > 0
            assert r["estimated"]["paper"] > 0 and r["estimated"]["bytes"] > 0
            # the one-way S1 -> S2 share is part of the whole
            assert 0 < r["one_way"]["measured"]["bytes_per_s"] < m["bytes_per_s"]
            assert r["one_way"]["estimated"]["paper"] < r["estimated"]["paper"]
    assert {"paper", "bytes", "choice"} <= set(doc["accuracy"])


def test_fig7_one_way_shares_follow_the_algorithms(outputs):
    doc = json.loads((outputs / "fig7" / "fig7.json").read_text())
    runs = {(r["value"], r["algorithm"]): r for r in doc["runs"] if r["sweep"] == "c"}
    low, high = doc["sweeps"]["c"]["values"]  # f2 = 0.025 and 0.4; f1 = 0.1
    kinds = lambda a: {(ln["src"], ln["dst"], ln["kind"]) for ln in runs[(low, a)]["one_way"]["measured"]["links"]}  # noqa: E731
    assert kinds("SP-S") == {("n2", "n1", "full")}          # W2 replicated at n1
    assert kinds("SP-D") == {("n1", "n2", "full")}          # B1 shipped to n2
    assert ("n1", "n2", "partial") in kinds("SM-S1") and ("n2", "n1", "full") in kinds("SM-S1")
    assert ("n2", "n1", "partial") in kinds("SM-D2")
    one_way = lambda f, a: runs[(f, a)]["one_way"]["measured"]["bytes_per_s"]  # noqa: E731
    # S2 has 40 join values, S1 10 of them: 3/4 of S2 never matches, every S1 tuple does
    assert one_way(low, "SM-S1") < 0.5 * one_way(low, "SP-S")
    assert one_way(low, "SM-D1") > 0.95 * one_way(low, "SP-D")
    # S2 has 3 values: only 3/10 of S1 matches, so SM-D1 ships few S1 tuples
    assert one_way(high, "SM-D1") < 0.5 * one_way(high, "SP-D")


def test_fig7_bandwidth_sweep_and_summary(outputs):
    doc = json.loads((outputs / "fig7" / "fig7.json").read_text())
    sw = doc["sweeps"]["f"]
    lo, hi = sw["values"]
    assert (lo, hi) == (256, 4096)
    by = {(r["value"], r["algorithm"]): r["measured"]["transmission_s_per_s"] for r in doc["runs"] if r["sweep"] == "f"}
    for a in ALGORITHMS:  # more bandwidth, less transmission time
        assert by[(hi, a)] < by[(lo, a)]


# ----------------------------------------------------------------------------- Table 3

@pytest.mark.parametrize("model", ["bytes", "paper"])
def test_table3_quick(tmp_path, model, capsys):
    assert main(["experiment", "table3", "--out", str(tmp_path), "--quick", "--queries", "1",
                 "--model", model, "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "1.14" in printed and "Fully-connected" in printed  # the paper's numbers beside ours
    table = json.loads((tmp_path / "table3.json").read_text())
    assert set(table) == {"star", "chain", "cycle", "complete"}
    for per in table.values():
        assert set(per) == {"greedy", "exhaustive", "beam"}
        for s in per.values():
            assert set(s) == {"mean", "median", "sd", "max", "n"} and s["n"] == 1
        assert per["exhaustive"]["mean"] == 1.0
    assert is_png(tmp_path / "table3.png")
    details = json.loads((tmp_path / "table3_runs.json").read_text())
    assert len(details["queries"]) == 4
    for rec in details["queries"]:
        est = rec["estimated_planning"]
        # exhaustive is optimal under the planning model; beam never worse than greedy
        assert est["exhaustive"] <= est["greedy"] * (1 + 1e-9)
        assert est["beam"] <= est["greedy"] * (1 + 1e-9)
        assert rec["ratios"]["estimated"]["greedy"] >= 1 - 1e-9
        if model == "bytes":
            assert rec["ratios"]["bytes_estimated"]["greedy"] >= 1 - 1e-9
            assert rec["ratios"]["bytes_estimated"]["beam"] >= 1 - 1e-9
        for p, twin in rec["same_plan_as"].items():  # identical plans share one measurement
            assert p not in rec["plans"] and rec["ratios"]["measured"][p] == rec["ratios"]["measured"][twin]
        q = query_of(rec)
        for p, plan in rec["plans"].items():  # the record rebuilds: same query, same estimate
            cost = plan_cost(q, from_json(q, plan), get_model(model))
            assert cost == pytest.approx(rec["estimated_planning"][p], rel=1e-6)
            assert rec["sharing"][p]["replicas"] <= rec["sharing"][p]["replica_uses"]
        assert rec["ratios"]["measured"]["exhaustive"] == 1.0


# ----------------------------------------------------------------------------- Fig. 9

def test_fig9_identical_parameters_make_greedy_optimal(outputs):
    doc = json.loads((outputs / "fig9" / "fig9.json").read_text())
    assert is_png(outputs / "fig9" / "fig9.png")
    assert len(doc["points"]) == 2 * 2
    for p in doc["points"]:
        assert p["ratio_estimated"] == pytest.approx(1.0, abs=1e-9)
        assert p["measured"]["greedy"]["execution_s_per_s"] > 0
        if p["same_plan"]:
            assert p["ratio_measured"] == 1.0


# ----------------------------------------------------------------------------- accuracy

def test_accuracy_report_from_directory(outputs, tmp_path, capsys):
    out = tmp_path / "acc.json"
    assert main(["experiment", "accuracy", "--from", str(outputs), "--out", str(out)]) == 0
    assert "Pearson" in capsys.readouterr().out
    rep = json.loads(out.read_text())
    assert len(rep["sources"]) == 2
    for model in ("paper", "bytes"):
        a = rep["all"][model]
        assert a["n"] == 6 * 14 + 4  # fig7 runs + fig9 distinct plans (same plans here)
        assert -1 <= a["pearson"] <= 1 and -1 <= a["spearman"] <= 1
        assert a["worst"] and all(w["ratio"] > 0 for w in a["worst"])


def test_correlations_and_summary():
    assert pearson([1, 2, 3], [2, 4, 6]) == pytest.approx(1.0)
    assert pearson([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert pearson([1, 1, 1], [1, 2, 3]) is None
    assert spearman([1, 2, 3, 4], [1, 8, 27, 64]) == pytest.approx(1.0)  # monotone, not linear
    assert spearman([1, 2, 2, 3], [1, 2, 2, 3]) == pytest.approx(1.0)    # ties averaged
    s = summarize([1.0, 1.0, 1.5, 2.5])
    assert (s["mean"], s["median"], s["max"], s["n"]) == (1.5, 1.25, 2.5, 4)
    assert s["sd"] == pytest.approx(math.sqrt(0.5))
    acc = accuracy([{"estimated": 1.0, "measured": 2.0, "label": "a"},
                    {"estimated": 2.0, "measured": 2.1, "label": "b"}])
    assert acc["n"] == 2 and acc["worst"][0]["label"] == "a"


# ----------------------------------------------------------------------------- measurement

def _two_way(rate=200, attrs=20, window_ms=500):
    stats: SyntheticStats = {"rate": rate, "attributes": attrs, "selectivity": 0.1, "window_ms": window_ms}
    return build_query("t", [{**stats}, {**stats}], [(0, 1)], sites=["n1", "n2"],
                       network=Network(25.0, 1024.0), execution=Execution(100, 80))


def test_measure_without_warmup_equals_the_engine_report():
    from joinlib.runtime.sink import CountingSink
    from joinlib.sim.engine import run_embedded
    q = _two_way()
    with DataCache() as data:
        streams = data.streams(q, 1500, 3)
        for alg in ("SP-S", "SM-S2", "SM-D2"):
            plan = uniform(q, alg)
            m = measure(q, streams, plan, warmup_ms=0)
            rep = run_embedded(q, streams, plan, CountingSink())
            assert m.bytes_per_s * m.span_s == pytest.approx(rep.bytes)
            assert m.transmission_s_per_s * m.span_s * 1000 == pytest.approx(rep.transmission_ms)
            assert m.results == rep.results
            assert sum(h["bytes_per_s"] for h in m.by_head.values()) == pytest.approx(m.bytes_per_s, rel=1e-4)
            w = measure(q, streams, plan, warmup_ms=warmup_for(q), repeat=2)
            assert len(w.processing_runs) == 2 and w.span_s == pytest.approx(1.0)
            assert 0 < w.bytes_per_s * w.span_s < rep.bytes  # the warm-up is not counted


# ----------------------------------------------------------------------------- stats

def test_stats_recovers_the_generators_parameters(tmp_path, capsys):
    from joinlib.cli.main import main as joinlib_main
    from joinlib.data.files import load_streams
    from joinlib.query import dump_query, load_query
    from joinlib.runtime.sink import CountingSink
    from joinlib.sim.engine import run_embedded
    q = build_query("s", [{"rate": 250, "attributes": 40, "selectivity": 0.05, "window_ms": 800},
                          {"rate": 80, "attributes": 120, "selectivity": 0.125, "window_ms": 2000}],
                    [(0, 1)], sites=["n1", "n2"])
    qfile, data, out = tmp_path / "q.yaml", tmp_path / "data", tmp_path / "measured.yaml"
    dump_query(q, qfile)
    assert joinlib_main(["gen", str(qfile), "--out", str(data), "--duration", "10s", "--seed", "5",
                         "--no-progress"]) == 0
    assert main(["stats", str(qfile), "--data", str(data), "--write", str(out),
                 "--json", str(tmp_path / "s.json")]) == 0
    assert "S1.J" in capsys.readouterr().out
    stats = {s["stream"]: s for s in json.loads((tmp_path / "s.json").read_text())}
    for s in q.streams:
        m = stats[s.name]
        assert m["rate"] == pytest.approx(s.stats.rate, rel=0.1)
        assert m["join_attributes"]["J"]["selectivity"] == pytest.approx(s.stats.selectivity_of("J"))
        assert m["join_attributes"]["J"]["collision"] == pytest.approx(s.stats.selectivity_of("J"), rel=0.15)
        assert m["attributes"] == s.stats.attributes
        assert s.stats.rate is not None
        assert m["window_tuples"] == pytest.approx(s.stats.rate * s.window.size / 1000, rel=0.12)
    measured = load_query(out)
    assert measured.stream("S2").stats.tuple_bytes == round(stats["S2"]["tuple_bytes"])
    assert measured.stream("S1").stats.selectivity_of("J") == pytest.approx(0.05)
    # F is what a full tuple really costs on the wire: SP-D ships every S1 tuple once to n2
    streams = load_streams(q, data)
    rep = run_embedded(q, streams, uniform(q, "SP-D"), CountingSink())
    shipped = sum(ln["bytes"] for ln in rep.links if (ln["src"], ln["dst"], ln["kind"]) == ("n1", "n2", "full"))
    epochs = streams["S1"][-1].ts // 100 + 1
    n1 = len(streams["S1"])
    assert abs(shipped - n1 * stats["S1"]["tuple_bytes"]) <= 16 * epochs  # envelope overhead per message


# ----------------------------------------------------------------------------- calibrate

def test_calibrate_writes_positive_constants(tmp_path, capsys):
    out = tmp_path / "cal.json"
    assert main(["calibrate", "--out", str(out), "--quick", "--repeat", "1", "--no-progress"]) == 0
    doc = json.loads(out.read_text())
    for k in ("c_p", "c_u", "c_h", "c_i", "c_byte", "c_match"):
        assert doc[k] > 0 and math.isfinite(doc[k]), k
        assert doc[k] < 1e-3, k  # a per-operation cost, not a whole run
    assert doc["probe"] == "hash" and doc["meta"]["command"].startswith("joinlib calibrate")
    model = get_model("calibrated", path=out)
    assert isinstance(model, CalibratedModel) and model.c_p == doc["c_p"] and model.probe == "hash"
    assert "c_p" in capsys.readouterr().out


# ----------------------------------------------------------------------------- CLI

@pytest.mark.parametrize("argv, message", [
    (["experiment", "table3", "--out", "OUT", "--queries", "0"], "--queries must be at least 1"),
    (["experiment", "table3", "--out", "OUT", "--topologies", "ring"], "unknown 'ring'"),
    (["experiment", "table3", "--out", "OUT", "--model", "nope"], "unknown cost model"),
    (["experiment", "table3", "--out", "OUT", "--model", "calibrated", "--quick"], "needs --calibration"),
    (["experiment", "fig7", "--out", "OUT", "--sweeps", "xz"], "choose letters from abcdefg"),
    (["experiment", "fig7", "--out", "OUT", "--duration", "ten"], "bad duration"),
    (["experiment", "fig7", "--out", "OUT", "--repeat", "0"], "--repeat must be at least 1"),
    (["experiment", "fig7", "--out", "OUT", "--calibration", "/no/such.json"], "file not found"),
    (["experiment", "fig9", "--out", "OUT", "--sweep", "height"], "unknown 'height'"),
    (["experiment", "fig9", "--out", "FILE"], "exists and is not a directory"),
    (["experiment", "accuracy", "--from", "/no/such/dir"], "no such directory"),
    (["experiment", "accuracy", "--from", "EMPTY"], "no experiment output found"),
    (["stats", "/no/such.yaml", "--data", "."], "query file not found"),
    (["stats", str(ROOT / "examples" / "fig7.yaml"), "--data", "/no/such/dir"], "no such directory"),
    (["calibrate", "--out", "EMPTY"], "is a directory"),
])
def test_user_mistakes_give_one_error_line(argv, message, tmp_path, capsys):
    (tmp_path / "FILE").write_text("x")
    (tmp_path / "EMPTY").mkdir()
    subst = {"OUT": str(tmp_path / "out"), "FILE": str(tmp_path / "FILE"), "EMPTY": str(tmp_path / "EMPTY")}
    assert main([subst.get(a, a) for a in argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err


@pytest.mark.parametrize("argv, words", [
    (["experiment", "--help"], ["fig7", "table3", "fig9", "accuracy"]),
    (["experiment", "fig7", "--help"], ["--quick", "bandwidth", "fig7.json"]),
    (["experiment", "table3", "--help"], ["--queries", "--repeat", "table3.json", "Table 2"]),
    (["experiment", "fig9", "--help"], ["identical", "--sweep"]),
    (["experiment", "accuracy", "--help"], ["Pearson", "--from"]),
    (["stats", "--help"], ["--write", "selectivity"]),
    (["calibrate", "--help"], ["--out", "c_p"]),
])
def test_help_explains(argv, words, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 0
    text = capsys.readouterr().out
    for w in words:
        assert w in text, w


def test_registered_in_the_main_cli(capsys):
    from joinlib.cli import main as cli
    try:
        cli.main(["experiment", "accuracy", "--help"])
    except SystemExit as e:
        if e.code != 0:
            pytest.skip("joinlib.cli.main does not register the experiment commands yet")
    assert "--from" in capsys.readouterr().out
