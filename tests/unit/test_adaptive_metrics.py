"""Plan changes as Prometheus metrics and log lines: an adaptive run with the Prometheus adapter's
sensor (``run_adaptive(..., sensor=...)``) exposes the catalogued adaptive metrics with the values
of the run's report, and the log sensor writes one line per trigger and per node switch."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import yaml

pytest.importorskip("prometheus_client")
from prometheus_client import CollectorRegistry, generate_latest  # noqa: E402

from joinlib.adapters.prometheus import PrometheusSensor  # noqa: E402
from joinlib.adaptive.config import AdaptiveConfig, LogSensor  # noqa: E402
from joinlib.adaptive.embedded import run_adaptive  # noqa: E402
from joinlib.adaptive.workload import Toggle, write_toggle  # noqa: E402
from joinlib.data.files import load_streams  # noqa: E402
from joinlib.query import load_query  # noqa: E402
from joinlib.runtime.sink import CountingSink  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
ADAPTIVE_METRICS = ("joinlib_plan_changes_total", "joinlib_plan_generation", "joinlib_adaptive_triggers_total",
                    "joinlib_measured_rate", "joinlib_measured_tuple_bytes", "joinlib_measured_selectivity",
                    "joinlib_adaptive_messages_total")


@pytest.fixture(scope="module")
def toggled(tmp_path_factory):
    """The 4-way toggle query, S4 up at 1.5 s and down at 3.5 s (4.5 s of data)."""
    q = load_query(str(ROOT / "examples" / "toggle4.yaml"))
    d = tmp_path_factory.mktemp("toggle4m")
    write_toggle(q, Toggle("S4"), d, 4500, 2)
    return q, load_streams(q, d)


def samples(reg: CollectorRegistry, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {tuple(sorted(s.labels.items())): s.value for fam in reg.collect() for s in fam.samples
            if s.name == name}


@pytest.mark.parametrize("mode", ["cnu", "dnu"])
def test_prometheus_sensor_shows_plan_changes(toggled, mode):
    q, streams = toggled
    reg = CollectorRegistry()
    lines: list[str] = []
    rep = run_adaptive(q, streams, AdaptiveConfig(mode), CountingSink(),
                       sensor=PrometheusSensor(reg, q.name, log=lines.append))
    assert rep.initial is not None
    assert len(rep.changes) == 2 and rep.changes[1]["plan"] == rep.initial.to_json()   # up, then back

    changes = samples(reg, "joinlib_plan_changes_total")
    assert changes == {(("query", q.name), ("site", s)): 2.0 for s in q.sites}          # every node switched twice
    assert set(samples(reg, "joinlib_plan_generation").values()) == {2.0}
    triggers = samples(reg, "joinlib_adaptive_triggers_total")
    assert sum(triggers.values()) == len(rep.triggers) == 2
    assert triggers[(("query", q.name), ("site", "N4"), ("stream", "S4"))] == 2.0
    # the current plan is the last change's (the initial one again), one series per head
    info = samples(reg, "joinlib_plan_info")
    want = {h: ",".join(f"{o}:{'SP-D' if p else 'SP-S'}" for o, p in steps)
            for h, steps in rep.changes[-1]["plan"].items()}
    assert {dict(k)["head"]: dict(k)["sequence"] for k in info} == want
    rates = samples(reg, "joinlib_measured_rate")
    assert {dict(k)["stream"] for k in rates} == set(q.names)
    assert 20 <= rates[(("query", q.name), ("site", "N4"), ("stream", "S4"))] <= 120    # back at 50/s
    assert all(0 < v < 1 for v in samples(reg, "joinlib_measured_selectivity").values())
    msgs: Counter[str] = Counter()
    for k, v in samples(reg, "joinlib_adaptive_messages_total").items():
        msgs[dict(k)["category"]] += v  # type: ignore[assignment]  # counts as Prometheus floats
    assert set(msgs) == {"modification", "migration", "sync"}
    # every node sends LOCAL_READY and GLOBAL_READY to every other node, per round (plus one to itself)
    assert msgs["sync"] == 2 * 2 * len(q.sites) ** 2

    # the catalogue's names and label sets
    catalogue = {m["name"]: m for m in yaml.safe_load((ROOT / "monitoring" / "metrics.yaml").read_text())["metrics"]}
    text = generate_latest(reg).decode()
    for name in ADAPTIVE_METRICS:
        assert name in catalogue and f"# TYPE {name.removesuffix('_total')}" in text
        for k in samples(reg, name):
            assert [lb for lb, _ in k] == sorted(catalogue[name]["labels"]), name

    # the log: one line per trigger and one per node and plan switch
    assert sum("changed past the threshold" in ln for ln in lines) == 2
    switched = [ln for ln in lines if "switched to plan generation" in ln]
    assert len(switched) == 2 * len(q.sites)
    assert any(ln.startswith(f"adaptive {q.name}: N1 switched to plan generation 2 from head epoch ")
               for ln in switched)


def test_log_sensor_alone(toggled):
    q, streams = toggled
    lines: list[str] = []
    rep = run_adaptive(q, streams, AdaptiveConfig("cnu"), CountingSink(), sensor=LogSensor(lines.append))
    first = rep.changes[0]
    assert any(f"switched to plan generation 1 from head epoch {first['from_epoch']}" in ln for ln in lines)
    assert any("S4 at N4 changed past the threshold" in ln and "-> re-planning" in ln for ln in lines)


@pytest.mark.parametrize("site,at_ms", [("N2", 2050.0), ("N4", 1950.0)])
def test_a_restarted_node_counts_each_trigger_and_switch_once(toggled, site, at_ms):
    """A node restarted from its checkpoint replays its inputs: it triggers and switches again."""
    from joinlib.adaptive.embedded import Restart
    q, streams = toggled
    reg = CollectorRegistry()
    rep = run_adaptive(q, streams, AdaptiveConfig("cnu"), CountingSink(), restarts=[Restart(site, at_ms)],
                       sensor=PrometheusSensor(reg, q.name))
    assert rep.restarts and len(rep.changes) == 2 and len(rep.triggers) == 2
    assert set(samples(reg, "joinlib_plan_changes_total").values()) == {2.0}
    assert sum(samples(reg, "joinlib_adaptive_triggers_total").values()) == 2
