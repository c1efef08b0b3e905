"""The soak's options that decide what it measures (bench/soak.py): with the check after the input the source
topics keep every record until it has read them; --node-env reaches the node processes' environment."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import soak  # type: ignore[import-not-found]  # noqa: E402


@pytest.mark.parametrize("minutes", [0.75, 10, 30])
def test_the_sources_keep_the_whole_run_when_the_check_reads_them_after_it(minutes: float) -> None:
    after = soak.source_topic_config(minutes, "after")
    assert int(after["retention.ms"]) >= minutes * 60_000 + soak.DRAIN_AND_CHECK_S * 1000
    live = soak.source_topic_config(minutes, "live")
    assert int(live["retention.ms"]) == soak.SOURCE_RETENTION_LIVE_MS
    assert after["segment.bytes"] == live["segment.bytes"]


def test_node_env_pairs() -> None:
    assert soak.node_env(["MALLOC_ARENA_MAX=4", "X=a=b", "EMPTY="]) == {"MALLOC_ARENA_MAX": "4", "X": "a=b",
                                                                         "EMPTY": ""}
    for bad in ("NOEQUALS", "=v"):
        with pytest.raises(SystemExit):
            soak.node_env([bad])
