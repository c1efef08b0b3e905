"""``joinlib replan`` on the real broker (docs/live.md "Replan"): a running live query moves from a reduction to
``pmjoin:hash:2`` and back while events flow, and its output stays exact -- every result of the reference join
of all the records once, none missing, each malformed record in ``dlq.<query>`` once -- with results from every
run of the switches; and the planner's clear errors for what cannot be replanned.
"""
from __future__ import annotations

import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from joinlib.adaptive.migration import ADAPTIVE_GENERATIONS
from joinlib.cli.main import main as cli
from joinlib.model import Query
from joinlib.protocol import records
from joinlib.query import parse_query, query_to_dict
from services.planner.service import Conflict, NotFound
from tests.integration.test_live import (
    WAIT_S,
    Recorder,
    Services,
    _node_process,
    _sites,
    _wait_for_text,
    generator,
    live_query,
    make_topics,
    read_topic,
    services,  # noqa: F401  (a module fixture)
    stop_processes,
    submit,
    wait_exact,
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
    assert "note:" not in out, "wall-clock sources: the Kafka timestamps locate the window, no re-read from the start"
    return svc.planner.status(name)["run"]


@contextmanager
def _flowing(bootstrap: str, q: Query, seconds: float, settle_s: float) -> Iterator[Recorder]:
    """Events flow for ``seconds`` (60/s a source, every 70th record malformed, disorder below 40 ms); the block
    runs after ``settle_s`` -- more than a window, δ and the 5 s slack, so that a new run starts reading after the
    query's start -- and its end waits for the generator's."""
    rec = Recorder()
    gen = generator(bootstrap, q, rec, rate=60.0, malformed_every=70, disorder_ms=40)
    flowing = threading.Thread(target=gen.run, args=(seconds,))
    flowing.start()
    try:
        time.sleep(settle_s)
        yield rec
    finally:
        flowing.join()


def test_reduction_to_pmjoin_and_back_is_exact(services, make_topic, tmp_path: Path, capsys):  # noqa: F811
    sites = _sites()
    services.start_nodes(sites)
    q = live_query(f"lvrp{sites[0]}", sites, make_topics(make_topic, 3, partitions=2))
    first = submit(services, q, "reduce", since="now")
    origin = first["origin_ms"]
    with _flowing(services.bootstrap, q, 16.0, 7.0) as rec:
        mid = _replan(services, q.name, "pmjoin:hash:2", capsys)
        assert services.planner.status(q.name)["replan"]["from_run"] == first["run"]
        with pytest.raises(Conflict, match="switching already"):
            services.planner.replan(q.name, "reduce")
        assert cli(["queries", q.name, "--url", services.url]) == 0
        assert "replan     switch" in capsys.readouterr().out
        _switched(services, q.name, mid)
        last = _replan(services, q.name, "reduce", capsys)
        _switched(services, q.name, last)
    runs = [first["run"], mid, last]
    # every result of the reference join of all the records, once, whichever run made it; each bad record's dead
    # letter, whichever run wrote it -- once, or as byte-identical copies of one place (a bad record the old run read
    # after the handover offset, before it read the switch: docs/live.md "Replan"), which a reader drops by place
    want = wait_exact(services, q, last, origin, rec, tmp_path, min_results=200, zombie=True,
                      replaced=(first["run"], mid))
    assert want.dead, "the test data has no malformed record"
    made = Counter({run: sum(sum(1 for _ in records.decode_result_batch(m.value()).results())
                             for m in read_topic(services.bootstrap, f"out.{q.name}", run)) for run in runs})
    assert all(made[r] > 0 for r in runs), f"every run serves part of the results: {made}"
    assert sum(made.values()) == want.count
    services.planner.stop(q.name)


def test_reduction_to_adaptive_and_back_is_exact(services, make_topic, tmp_path: Path, capsys):  # noqa: F811
    """A replan to an adaptive plan and back (docs/live.md "Replan"): the adaptive run starts its first generation at
    the switch, numbered in a block of its own; the static run after it is numbered past that block; the output is
    exact across both switches, each run serving part of it."""
    sites = _sites()
    services.start_nodes(sites)
    q = live_query(f"lvra{sites[0]}", sites, make_topics(make_topic, 3, partitions=2))
    first = submit(services, q, "reduce", since="now")
    with _flowing(services.bootstrap, q, 16.0, 7.0) as rec:
        mid = _replan(services, q.name, "adaptive", capsys)
        _switched(services, q.name, mid)
        last = _replan(services, q.name, "reduce", capsys)
        _switched(services, q.name, last)
    runs = [first["run"], mid, last]
    want = wait_exact(services, q, last, first["origin_ms"], rec, tmp_path, min_results=200, zombie=True,
                      replaced=(first["run"], mid))
    gens = {run: {records.decode_result_batch(m.value()).gen for m in read_topic(services.bootstrap, f"out.{q.name}",
                                                                                   run)} for run in runs}
    assert all(gens[r] for r in runs), f"every run serves part of the results: {gens}"
    # the adaptive run from 1 (it may change plans: 2, 3, ...), the run after it from the next block
    assert gens[first["run"]] == {0} and min(gens[mid]) == 1 and max(gens[mid]) < ADAPTIVE_GENERATIONS \
        and gens[last] == {ADAPTIVE_GENERATIONS}, gens
    assert sum(sum(1 for _ in records.decode_result_batch(m.value()).results())
               for r in runs for m in read_topic(services.bootstrap, f"out.{q.name}", r)) == want.count
    services.planner.stop(q.name)


def test_mjoin_tree_to_reduction_is_exact(services, make_topic, tmp_path: Path, capsys):  # noqa: F811
    """A replan from an MJoin tree (its operators end at the switch as at an 'end') to a reduction: exact."""
    sites = _sites()
    services.start_nodes(sites)
    q = live_query(f"lvrt{sites[0]}", sites, make_topics(make_topic, 3, partitions=2))
    d = query_to_dict(q)
    for spec in d["streams"].values():   # what the tree planner weighs (the generator's keys: about 1 in 40)
        spec["rate"], spec["selectivity"] = 60, {"dest": 0.025}
    q = parse_query(d, q.name)
    first = submit(services, q, "mjoin", since="now")
    with _flowing(services.bootstrap, q, 14.0, 7.0) as rec:
        last = _replan(services, q.name, "reduce", capsys)
        _switched(services, q.name, last)
    want = wait_exact(services, q, last, first["origin_ms"], rec, tmp_path, min_results=200, zombie=True,
                      replaced=(first["run"],))
    made = Counter({run: sum(sum(1 for _ in records.decode_result_batch(m.value()).results())
                             for m in read_topic(services.bootstrap, f"out.{q.name}", run))
                    for run in (first["run"], last)})
    assert all(made.values()) and sum(made.values()) == want.count, made
    services.planner.stop(q.name)


def test_replan_errors(services, make_topic):  # noqa: F811
    with pytest.raises(NotFound):
        services.planner.replan("no-such-query", "reduce")
    sites = _sites(2)
    services.start_nodes(sites)
    q = live_query(f"lvrpe{sites[0]}", sites, make_topics(make_topic, 2, partitions=1))
    submit(services, q, "SP-S", since="now")
    with pytest.raises(Exception, match="not to an MJoin tree plan"):
        services.planner.replan(q.name, "mjoin")
    with pytest.raises(Exception, match="no such|unknown|plan"):
        services.planner.replan(q.name, "no-such-plan")
    deadline = time.monotonic() + WAIT_S
    while len(services.planner.status(q.name)["sites"]) < len(sites):   # every node runs it (a stop read before
        assert time.monotonic() < deadline                               # a node started would never be done)
        time.sleep(0.3)
    services.planner.stop(q.name)
    while services.planner.status(q.name)["state"] != "stopped":
        assert time.monotonic() < deadline
        time.sleep(0.3)
    with pytest.raises(Conflict, match="not a running live query"):
        services.planner.replan(q.name, "reduce")


def test_a_node_killed_during_the_switch_keeps_the_replan_exact(services, make_topic, kafka_bootstrap,  # noqa: F811
                                                                redis_url, tmp_path: Path):
    """Node services as processes with Redis checkpoints (docs/reliability.md): a replan from a reduction to
    ``pmjoin:hash:2``, and a second later, while both runs work (the new one warming its windows, the old one
    draining to the switch), one node is SIGKILLed and started again.  Both of its runs resume from their
    checkpoints, and the query's output is still exact: every result of the reference join once, whichever run
    made it."""
    sites = _sites()
    logs = {s: tmp_path / f"node-{s}.log" for s in sites}
    procs = {s: _node_process(s, kafka_bootstrap, redis_url, logs[s]) for s in sites}
    try:
        q = live_query(f"lvrk{sites[0]}", sites, make_topics(make_topic, 3, partitions=2), window="2s", idle="2s")
        for s in sites:
            _wait_for_text(logs[s], "serving every query", timeout_s=60)
        first = submit(services, q, "reduce", since="now")
        with _flowing(kafka_bootstrap, q, 18.0, 8.0) as rec:
            new = services.planner.replan(q.name, "pmjoin:hash:2", margin_ms=2000)
            victim = sites[1]
            time.sleep(1.0)   # both runs have checkpointed (every 0.5 s); the old one's watermark is before the switch
            procs[victim].send_signal(signal.SIGKILL)
            procs[victim].wait(10)
            procs[victim] = _node_process(victim, kafka_bootstrap, redis_url, logs[victim])
            _switched(services, q.name, new["run"])
        want = wait_exact(services, q, new["run"], first["origin_ms"], rec, tmp_path, timeout_s=90, min_results=100,
                          zombie=True, replaced=(first["run"],))
        assert want.dead, "the test data has no malformed record"
        assert "resumed from the checkpoint" in logs[victim].read_text(), logs[victim].read_text()[-2000:]
        services.planner.stop(q.name)
    finally:
        stop_processes(procs.values())
