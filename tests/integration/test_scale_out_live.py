"""Scale-out with live sources (issue 27 item 4, issue 29 item 1): a live query submitted with a partitioned plan
and ``scale_out``, JSON records on users' topics at three sites, one site served by two node instances.  Each
site's re-keyer (joinlib.node.rekey, a role of the site's group) writes its streams to ``src.<query>.<stream>``
split by the partition function; the instances run the plan's partitions on them unchanged.  The output must be
the live contract's (docs/live.md: the reference join of the on-time records, each result once, every other
record a dead letter) -- also after the instance running a re-keyer is SIGKILLed mid-stream."""
from __future__ import annotations

import re
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from joinlib.cli.main import main as cli
from joinlib.node.node_service import NodeService
from joinlib.query import dump_query, query_to_dict
from tests.integration.test_live import (  # noqa: F401  (the module's fixture)
    REPO,
    Recorder,
    _wait_for_text,
    generator,
    live_query,
    make_topics,
    services,
    stop_processes,
    wait_exact,
)


def _sites() -> list[str]:
    tag = uuid.uuid4().hex[:6]
    return [f"{c}{tag}" for c in "xyz"]


def _submit(services: Any, query: Any, plan: str = "pmjoin:hash:3") -> dict:  # noqa: F811
    return services.planner.submit(yaml.safe_dump(query_to_dict(query)), plan, None, "0", scale_out=True)


def _node_threads(services: Any, sites: list[str], redis_url: str, stop: threading.Event) -> list[NodeService]:  # noqa: F811
    """Two shared instances of the first site, one of each other site (threads)."""
    nodes = [NodeService(site, services.bootstrap, registry=CollectorRegistry(), stop=stop, serve=True, quiet=True,
                         redis_url=redis_url, shared=site == sites[0]) for site in [sites[0], *sites]]
    for n in nodes:
        threading.Thread(target=n.run, daemon=True, name=f"node-{n.site}").start()
    return nodes


def test_a_scaled_out_live_query_equals_the_contract(services, make_topic, redis_url, kafka_admin,  # noqa: F811
                                                     tmp_path):
    """Three sites, 3-partition JSON topics with disorder, late and malformed records; pmjoin:hash:3 scaled out
    with two instances at the first site: the contract's results and dead letters, each once."""
    sites = _sites()
    stop = threading.Event()
    _node_threads(services, sites, redis_url, stop)
    try:
        q = live_query(f"lvso{sites[0]}", sites, make_topics(make_topic, 3))
        qfile = tmp_path / "q.yaml"
        dump_query(q, qfile)
        # as a user submits it: the command line, the planner's HTTP API
        assert cli(["submit", str(qfile), "--plan", "pmjoin:hash:3", "--scale-out", "--since", "0",
                    "--url", services.url]) == 0
        out = services.planner.status(q.name)
        assert "partitioned" in out["plan"]
        topic = f"src.{q.name}.S1"
        assert len(kafka_admin.list_topics(topic, timeout=10).topics[topic].partitions) >= 3
        rec = Recorder()
        generator(services.bootstrap, q, rec, late_every=40, late_by_ms=600, malformed_every=45,
                  time_base_ms=0).burst(300)
        want = wait_exact(services, q, out["run"], out["origin_ms"], rec, tmp_path, timeout_s=90, min_results=200)
        # what 'joinlib queries' shows: the partitions' results added up, the re-keyers' dead letters and naive
        # baseline (bytes against central); statuses come every 2 s
        deadline, stats = time.monotonic() + 20, {}
        while time.monotonic() < deadline:
            stats = services.planner.status(q.name)["stats"]
            if stats["results"] == want.count and sum(stats["dead_letters"].values()) == len(want.dead):
                break
            time.sleep(0.5)
        assert stats["results"] == want.count and sum(stats["dead_letters"].values()) == len(want.dead), stats
        assert stats["central_bytes"] > 0 and stats["bytes"] > 0, stats
        services.planner.stop(q.name)
    finally:
        stop.set()


def test_scale_out_without_a_partitioned_plan_is_refused_with_one_line(services, make_topic, tmp_path,  # noqa: F811
                                                                      capsys):
    sites = _sites()
    q = live_query(f"lvsr{sites[0]}", sites, make_topics(make_topic, 3))
    qfile = tmp_path / "q.yaml"
    dump_query(q, qfile)
    assert cli(["submit", str(qfile), "--plan", "SP-S", "--scale-out", "--url", services.url]) != 0
    err = capsys.readouterr().err
    assert "--scale-out needs a partitioned plan" in err and "Traceback" not in err, err


def _node_process(site: str, bootstrap: str, redis_url: str, log: Path, shared: bool, **env: str) -> subprocess.Popen:
    import os
    import sys
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap, "REDIS_URL": redis_url, "METRICS_PORT": "0",
           "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1", "JOINLIB_CHECKPOINT_EVERY_S": "0.5", **env}
    cmd = [sys.executable, "-m", "services.node", "--site", site, "--serve"] + (["--shared"] if shared else [])
    with open(log, "ab") as fh:
        return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("fault", ["kill", "pause"])
def test_the_instance_that_re_keys_killed_or_paused_keeps_the_output_exact(services, make_topic,  # noqa: F811
                                                                          kafka_bootstrap, redis_url, tmp_path,
                                                                          fault):
    """Node processes, two shared instances of the first site.  Mid-stream the one running that site's re-keyer
    is SIGKILLed (and not restarted), or SIGSTOPped for 5 s -- past its 2 s group session -- and then resumed, a
    zombie.  The other instance takes over the re-keyer and the partitions from their checkpoints; the zombie
    must write nothing more (fenced, or told that its session is lost).  The output stays the contract's."""
    sites = _sites()
    logs = [tmp_path / f"node-{i}.log" for i in range(4)]
    env = {"JOINLIB_SESSION_TIMEOUT_MS": "2000"} if fault == "pause" else {}
    procs = [_node_process(site, kafka_bootstrap, redis_url, logs[i], i < 2, **env)
             for i, site in enumerate([sites[0], *sites])]
    try:
        q = live_query(f"lvs{fault[0]}{sites[0]}", sites, make_topics(make_topic, 3, partitions=2), window="2s",
                       idle="2s")
        out = _submit(services, q)
        rec = Recorder()
        gen = generator(kafka_bootstrap, q, rec, rate=150.0, late_every=60, malformed_every=70, time_base_ms=0)
        t = threading.Thread(target=gen.run, args=(10.0,))
        t.start()
        deadline = time.monotonic() + 60
        victim = None
        while victim is None and time.monotonic() < deadline:
            victim = next((i for i in (0, 1)
                           if logs[i].exists() and f"re-keying S1 of {sites[0]}" in logs[i].read_text()), None)
            time.sleep(0.1)
        assert victim is not None, "no instance of the first site started its re-keyer"
        time.sleep(2.5)   # a few checkpoints (every 0.5 s), then the fault
        if fault == "kill":
            procs[victim].send_signal(signal.SIGKILL)
            procs[victim].wait(10)
        else:
            procs[victim].send_signal(signal.SIGSTOP)
            time.sleep(5.0)
            procs[victim].send_signal(signal.SIGCONT)
        t.join()
        wait_exact(services, q, out["run"], 0, rec, tmp_path, timeout_s=90, min_results=300, zombie=fault == "pause")
        _wait_for_text(logs[1 - victim], "re-keyer resumed from its checkpoint", timeout_s=5)
        assert f"the re-keyer of {sites[0]} runs here" in logs[1 - victim].read_text()
        if fault == "pause":
            zombie = logs[victim].read_text(errors="replace")
            assert re.search(r"fenced, stopping without writing|session lost: no checkpoint", zombie), zombie[-3000:]
        services.planner.stop(q.name)
    finally:
        stop_processes(procs)


def test_a_restarted_re_keyer_finds_the_epochs_already_written(kafka_bootstrap, make_topic):
    """What a re-keyer scans on resuming: per partition, the last epoch of its run's batches after the given
    offsets (other runs' batches and those before the offsets do not count)."""
    from joinlib.adapters.kafka import make_producer
    from joinlib.node.rekey import EPOCH_HEADER, written_epochs
    topic = make_topic("src", partitions=3)
    p = make_producer(kafka_bootstrap)
    for part, epoch, run in [(0, 3, "a"), (0, 5, "a"), (1, 9, "b"), (1, 2, "a"), (2, 7, "a")]:
        p.produce(topic, b"x", b"S1", partition=part,
                  headers=[("run", run.encode()), (EPOCH_HEADER, str(epoch).encode())])
    p.flush(30)
    assert written_epochs(kafka_bootstrap, topic, [None, None, None], "a") == {0: 5, 1: 2, 2: 7}
    assert written_epochs(kafka_bootstrap, topic, [1, 0, 1], "a") == {0: 5, 1: 2}
    assert written_epochs(kafka_bootstrap, topic, [2, 2, 1], "a") == {}
