"""``joinlib experiment pmjoin`` end to end at a tiny scale: files, JSON keys, errors."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from joinlib.cli.experiments import main
from joinlib.experiments import pmjoin as experiment

TINY = replace(experiment.QUICK, streams=4, seeds=1, ds=(1, 2, 5), data_range=20, ranges=(10, 1000))


def test_quick_writes_json_and_pngs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(experiment, "QUICK", TINY)
    assert main(["experiment", "pmjoin", "--quick", "--out", str(tmp_path / "out"), "--no-progress"]) == 0
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == ["fig5_heuristic.png", "fig8_pmjoin.png", "pmjoin.json"]
    doc = json.loads((out / "pmjoin.json").read_text())
    assert list(doc) == ["scale", "paper", "checks", "pmjoin", "heuristic", "pmjoin_runs", "heuristic_runs"]
    assert list(doc["pmjoin"]) == ["SD-CHS", "DD-CHS", "SD-RHS", "DD-RHS"]
    assert list(doc["heuristic"]) == ["LASW-SD", "LASW-DD", "HASW-SD", "HASW-DD"]
    for entry in doc["pmjoin"].values():
        assert set(entry) == {"hash", "range", "rate", "simple", "optimal"}
        assert list(entry["rate"]) == ["1", "2", "5"]
        for m in ("hash", "range", "rate"):  # D = 1 is the unpartitioned plan whatever the method
            assert entry[m]["1"]["cost"] == pytest.approx(entry["hash"]["1"]["cost"])
            assert entry[m]["1"]["relative"] == pytest.approx(1.0)
        assert entry["optimal"] <= entry["hash"]["1"]["cost"] + 1e-9 <= entry["simple"] + 2e-9
    for row in doc["heuristic_runs"]:
        assert row["optimal"] <= row["heuristic"] * (1 + 1e-9) + 1e-9
        assert row["optimal"] <= row["simple"] * (1 + 1e-9) + 1e-9
    assert doc["checks"]["simple_flat_over_ranges"] is True
    assert "PMJoin: mean cost relative to D = 1" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--jobs", "0"], "--jobs 0: must be >= 1"),
    (["--seeds", "0"], "--seeds 0: must be >= 1"),
])
def test_bad_options_are_one_error_line(tmp_path: Path, argv: list[str], message: str,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["experiment", "pmjoin", "--out", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
