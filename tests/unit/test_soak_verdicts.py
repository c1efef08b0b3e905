"""The soak's verdicts (bench/soak.py ``verdicts``), table-driven on synthetic samples: memory is judged by its
per-minute medians and their growth (a single sample inside a lag burst reads glibc's high-water mark and is
recorded, not decisive); lag and p99 latency must stay bounded; and a run whose results were not checked, or
not exact, never passes (issue 29: "it checks every result against the reference")."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import soak  # type: ignore[import-not-found]  # noqa: E402

WARMUP_S, EVERY_S, MINUTES, RATE = 60.0, 5.0, 6.0, 1000.0


def _run(rss=lambda t: 200.0, p99=lambda t: 300.0, lag=lambda t: 50.0, exact: Optional[bool] = True) -> dict:
    samples: list[dict[str, Any]] = []
    t = 0.0
    while t <= MINUTES * 60:
        samples.append({"t_s": t, "rss_mb": {"s1": rss(t), "s2": 150.0}, "redis": {"used_mb": 100.0},
                        "lag": {"s1": lag(t), "s2": 10.0}, "latency_ms": {"p50": 100.0, "p99": p99(t)}})
        t += EVERY_S
    return {"samples": samples, "minutes": MINUTES, "rate_per_site": RATE,
            "check": None if exact is None else {"exact": exact}}


CASES = [
    ("steady", _run(), True),
    ("one burst sample +17 % (per minute flat)", _run(rss=lambda t: 234.0 if t == 200 else 200.0), True),
    ("memory grows 20 % over the run", _run(rss=lambda t: 200.0 * (1 + 0.2 * t / (MINUTES * 60))), False),
    ("lag grows without bound", _run(lag=lambda t: 20.0 * t), False),
    ("p99 above the bound for minutes", _run(p99=lambda t: 5000.0 if t > 180 else 300.0), False),
    ("results not exact", _run(exact=False), False),
    ("results never checked", _run(exact=None), False),
]


@pytest.mark.parametrize("name,run,ok", CASES, ids=[c[0] for c in CASES])
def test_verdicts(name: str, run: dict, ok: bool) -> None:
    v = soak.verdicts(run, WARMUP_S, 5.0)
    assert v["ok"] is ok, (name, v)


def test_a_burst_sample_is_recorded_though_it_does_not_decide() -> None:
    v = soak.verdicts(_run(rss=lambda t: 234.0 if t == 200 else 200.0), WARMUP_S, 5.0)
    assert v["memory_flat_every_sample"] is False and v["memory_flat_per_minute"] is True
    assert v["rss_flat"]["s1"]["max"] == 234.0


def test_the_p99_bound_is_a_parameter() -> None:
    run = _run(p99=lambda t: 1500.0)
    assert soak.verdicts(run, WARMUP_S, 5.0)["ok"] is True
    assert soak.verdicts(run, WARMUP_S, 5.0, p99_bound_ms=1000.0)["ok"] is False
