"""``joinlib experiment adaptive``: the quick version runs, writes the JSON and the PNG, and its
checks hold (exact output, equal costs before the first toggle, the plan reverts, CNU's message
counts as the paper states them)."""
from __future__ import annotations

import json

from joinlib.cli.main import main


def test_quick_adaptive_experiment_writes_json_png_and_passes_its_checks(tmp_path, capsys):
    out = tmp_path / "ad"
    assert main(["experiment", "adaptive", "--quick", "--ways", "4", "--repeats", "1", "--out", str(out),
                 "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "Table 3 cnu/inc" in text and "DNU/CNU overhead" in text
    result = json.loads((out / "adaptive.json").read_text())
    assert set(result) == {"command", "scale", "toggle", "ways"}
    assert result["command"] == f"joinlib experiment adaptive --quick --repeats 1 --ways 4 --out {out}"
    a = result["ways"]["4"]
    assert set(a) >= {"cost_ms_per_interval", "bytes_per_interval", "high_phase_ratio", "checks", "table3",
                      "dnu_cnu_overhead", "plan_changes"}
    assert set(a["cost_ms_per_interval"]) == {"static", "cnu", "dnu"}
    checks = a["checks"]
    for name in ("exact", "equal_before_first_change", "reverts", "cnu_modification_is_n", "cnu_sync_is_2n(n-1)"):
        assert checks[name], name
    assert a["table3"]["cnu/inc"]["ours"][0] == 4 and a["table3"]["cnu/inc"]["paper"] == [4, 34, 24]
    assert a["high_phase_ratio"]["cnu"]["from_the_switch"]["mean"] > 1.0
    assert (out / "adaptive.png").stat().st_size > 10_000
    assert (out / "data" / "4way" / "S4.jsonl").exists()


def test_experiment_mistakes(tmp_path, capsys):
    assert main(["experiment", "adaptive", "--out", str(tmp_path), "--ways", "four"]) == 2
    assert "--ways 'four'" in capsys.readouterr().err
    assert main(["experiment", "adaptive", "--out", str(tmp_path), "--repeats", "0"]) == 2
    assert "--repeats 0" in capsys.readouterr().err
