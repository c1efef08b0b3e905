"""The soak's search for a sustainable rate (bench/soak_ramp.py), against probes whose limit the test knows: the
rate found kept up, and it is within one bisection step of the limit whatever the limit and the start."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from soak_ramp import find_sustainable  # type: ignore[import-not-found]  # noqa: E402


def _probe(limit: float, calls: list[float]):
    def probe(rate: float) -> dict:
        calls.append(rate)
        return {"kept_up": rate <= limit, "why": "test"}
    return probe


@settings(max_examples=200, deadline=None)
@given(limit=st.floats(50, 20_000), start=st.floats(50, 20_000), probes=st.integers(1, 8))
def test_the_rate_found_kept_up_and_the_rates_tried_are_the_probes(limit: float, start: float, probes: int) -> None:
    calls: list[float] = []
    got = find_sustainable(_probe(limit, calls), round(start, -1), probes, say=lambda _: None)
    assert [p["rate_per_site"] for p in got["probes"]] == calls and len(calls) == probes
    if got["kept_up"]:
        assert got["sustainable_per_site"] <= limit
        assert got["sustainable_per_site"] == max(r for r in calls if r <= limit)
    else:
        assert all(r > limit for r in calls)
        assert got["sustainable_per_site"] < min(calls)


@pytest.mark.parametrize("limit", [1_100.0, 1_500.0, 2_600.0, 3_900.0])
def test_four_probes_from_half_a_burst_rate_land_near_the_limit(limit: float) -> None:
    """The soak's default: four probes from half the drain's rate (here 2,000 events/s per site) end within the
    last bracket: the rate found is at least limit / 1.4 when the limit is within two steps of the start."""
    got = find_sustainable(_probe(limit, []), 2_000.0, 4, say=lambda _: None)
    assert got["kept_up"] and limit / 1.4 <= got["sustainable_per_site"] <= limit
