"""``joinlib replan`` on the real broker (docs/live.md "Replan"): a running live query moves from a reduction to
``pmjoin:hash:2`` and back while events flow, and its output stays exact -- every result of the reference join
of all the records once, none missing, each malformed record in ``dlq.<query>`` once -- with results from every
run of the switches; and the planner's clear errors for what cannot be replanned.
"""
from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from joinlib.cli.main import main as cli
from joinlib.ingest.contract import expected_output
from joinlib.protocol import records
from services.planner.service import Conflict, NotFound
from tests.integration.test_live import (
    WAIT_S,
    Recorder,
    Services,
    _sites,
    advances,
    generator,
    live_query,
    make_topics,
    read_topic,
    results_via_cli,
    services,  # noqa: F401  (a module fixture)
    submit,
)


def _switched(svc: Services, name: str, run: str) -> None:
    """Wait until ``run`` is the query's and the run it replaced has ended at every node."""
    deadline = time.monotonic() + WAIT_S
    while True:
        st = svc.planner.status(name)
        if st["run"] == run and (st.get("replan") or {}).get("state") == "switched":
            return
        assert time.monotonic() < deadline, f"{name}: the switch to run {run} did not finish: {st.get('replan')}"
        time.sleep(0.3)


def _replan(svc: Services, name: str, plan: str, capsys: pytest.CaptureFixture[str]) -> str:
    """``joinlib replan NAME --plan PLAN``; the new run's id."""
    assert cli(["replan", name, "--plan", plan, "--margin", "1.5", "--url", svc.url]) == 0
    out = capsys.readouterr().out
    assert f"(plan {plan}) takes run" in out, out
    return svc.planner.status(name)["run"]


def test_reduction_to_pmjoin_and_back_is_exact(services, make_topic, tmp_path: Path, capsys):  # noqa: F811
    sites = _sites()
    services.start_nodes(sites)
    q = live_query(f"lvrp{sites[0]}", sites, make_topics(make_topic, 3, partitions=2))
    first = submit(services, q, "reduce", since="now")
    origin = first["origin_ms"]
    rec = Recorder()
    gen = generator(services.bootstrap, q, rec, rate=60.0, malformed_every=70, disorder_ms=40)
    flowing = threading.Thread(target=gen.run, args=(13.0,))
    flowing.start()
    try:
        time.sleep(2.5)
        mid = _replan(services, q.name, "pmjoin:hash:2", capsys)
        assert services.planner.status(q.name)["replan"]["from_run"] == first["run"]
        with pytest.raises(Conflict, match="switching already"):
            services.planner.replan(q.name, "reduce")
        assert cli(["queries", q.name, "--url", services.url]) == 0
        assert "replan     switch" in capsys.readouterr().out
        _switched(services, q.name, mid)
        last = _replan(services, q.name, "reduce", capsys)
        _switched(services, q.name, last)
    finally:
        flowing.join()
    runs = [first["run"], mid, last]
    deadline = time.monotonic() + WAIT_S
    while True:   # every result of the reference join of all the records, once, whichever run made it
        want = expected_output(q, rec.written, origin, advances(services.bootstrap, q, last))
        got = results_via_cli(services, q, origin, tmp_path)
        if got == want.results:
            break
        if time.monotonic() > deadline:
            missing, extra = want.results - got, got - want.results
            raise AssertionError(f"{q.name}: {sum(missing.values())} missing, {sum(extra.values())} extra or "
                                 f"duplicated (of {want.count}); e.g. missing {list(missing)[:3]} extra "
                                 f"{list(extra)[:3]}")
        time.sleep(1.0)
    assert want.count >= 200, f"only {want.count} results: the test data is too thin"
    made = Counter({run: sum(sum(1 for _ in records.decode_result_batch(m.value()).results())
                             for m in read_topic(services.bootstrap, f"out.{q.name}", run)) for run in runs})
    assert all(made[r] > 0 for r in runs), f"every run serves part of the results: {made}"
    assert sum(made.values()) == want.count
    dead = [m for run in runs for m in read_topic(services.bootstrap, f"dlq.{q.name}", run)]
    places = [tuple(dict(m.headers())[k] for k in ("dlq.topic", "dlq.partition", "dlq.offset")) for m in dead]
    assert len(places) == len(set(places)), "a malformed record is in the dead-letter topic twice"
    assert len(places) == len(want.dead) and want.dead, (len(places), len(want.dead))
    services.planner.stop(q.name)


def test_replan_errors(services, make_topic):  # noqa: F811
    with pytest.raises(NotFound):
        services.planner.replan("no-such-query", "reduce")
    sites = _sites(2)
    services.start_nodes(sites)
    q = live_query(f"lvrpe{sites[0]}", sites, make_topics(make_topic, 2, partitions=1))
    submit(services, q, "SP-S", since="now")
    with pytest.raises(Exception, match="adaptive and MJoin tree plans are not replanned"):
        services.planner.replan(q.name, "adaptive")
    with pytest.raises(Exception, match="no such|unknown|plan"):
        services.planner.replan(q.name, "no-such-plan")
    services.planner.stop(q.name)
    deadline = time.monotonic() + WAIT_S
    while services.planner.status(q.name)["state"] != "stopped":
        assert time.monotonic() < deadline
        time.sleep(0.3)
    with pytest.raises(Conflict, match="not a running live query"):
        services.planner.replan(q.name, "reduce")
