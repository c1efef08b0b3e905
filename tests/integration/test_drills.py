"""Fault drills (issue 16, item 1): a continuous 3-site live query with Redis windows and checkpoints, node
services as processes, while the broker, Redis or a node fails mid-stream.

Every drill holds the run to the contract (joinlib.ingest.contract.expected_output, as in test_live.py):
the results are the reference join of the on-time records, each once; and since the generator writes no
late and no malformed records (disorder 60 ms < delta 80 ms), every record must be on time -- a fault
may not turn a record into a dead letter ("nothing lost").

The broker drill and the Redis drill run on a broker / redis-server of their own (free ports, started and
stopped here), so that stopping them does not disturb the other tests that share the session's broker.

(a) the broker is stopped for 10 s mid-stream and started again (same data dir, same port);
(b) Redis (AOF, appendfsync always: infra/redis/redis-durable.conf) is killed mid-stream and restarted;
(c) one node is paused (SIGSTOP) for longer than the idle timeout, then resumed (SIGCONT);
(d) a node is killed during a checkpoint (a test hook pauses its 4th checkpoint after the producer flush
    and before the Redis save: ``JOINLIB_TEST_CHECKPOINT_PAUSE``).
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any, Optional

import pytest

from tests.cluster_fixtures import create_topics
from tests.integration.test_live import (
    REPO,
    Recorder,
    Services,
    dead_letters,
    generator,
    live_query,
    submit,
    wait_exact,
)

REDIS_DURABLE_CONF = REPO / "infra" / "redis" / "redis-durable.conf"
RATE = 100.0          # events/s per stream
IDLE_S = 2.0          # the query's idle timeout


# ----------------------------------------------------------------------------- processes


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Node:
    """A node service process (``--serve``), restartable, with its metrics on a port of its own."""

    def __init__(self, site: str, bootstrap: str, redis_url: str, log: Path, **env: str) -> None:
        self.site, self.bootstrap, self.redis_url, self.log = site, bootstrap, redis_url, log
        self.metrics_port = _free_port()
        self.proc = self._start(env)

    def _start(self, extra: dict[str, str]) -> subprocess.Popen:
        env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": self.bootstrap, "REDIS_URL": self.redis_url,
               "METRICS_PORT": str(self.metrics_port), "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1",
               "JOINLIB_CHECKPOINT_EVERY_S": "0.5", **extra}
        with open(self.log, "ab") as fh:
            return subprocess.Popen([sys.executable, "-m", "services.node", "--site", self.site, "--serve"],
                                    cwd=REPO, env=env, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def restart(self, **env: str) -> None:
        self.proc = self._start(env)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def source_lag(self, topics: list[str]) -> Optional[float]:
        """joinlib_consumer_lag_messages summed over ``topics`` (None: no answer)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=2) as r:
                lines = r.read().decode().splitlines()
        except OSError:
            return None
        return sum(float(x.rsplit(" ", 1)[1]) for x in lines if x.startswith("joinlib_consumer_lag_messages{")
                   and any(f'topic="{t}"' in x for t in topics))

    def stop(self) -> None:
        p = self.proc
        if p.poll() is None:
            with _suppress():
                p.send_signal(signal.SIGCONT)  # a paused node cannot act on SIGTERM
            p.terminate()
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)


class _suppress:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> bool:
        return True


class OwnKafka:
    """A single-node KRaft broker of this drill (infra.local_cluster), stoppable and restartable on the same
    data dir and port."""

    def __init__(self, workdir: Path) -> None:
        from infra import local_cluster as lc
        self.k = lc.start_kafka(workdir)

    @property
    def bootstrap(self) -> str:
        return self.k.bootstrap

    def stop(self) -> None:
        self.k.stop(grace=30)

    def start_again(self, timeout_s: float = 90.0) -> float:
        return self.k.start_again(timeout_s)


class OwnRedis:
    """A redis-server of this drill with the durable settings (AOF, appendfsync always), restartable on the
    same dir and port."""

    def __init__(self, workdir: Path) -> None:
        self.dir = workdir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = _free_port()
        self.proc = self._start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _start(self, timeout_s: float = 30.0) -> subprocess.Popen:
        server = shutil.which("redis-server")
        assert server, "redis-server not found (apt-get install -y redis-server)"
        proc = subprocess.Popen([server, str(REDIS_DURABLE_CONF), "--port", str(self.port), "--bind", "127.0.0.1",
                                 "--dir", str(self.dir), "--daemonize", "no", "--logfile", str(self.dir / "redis.log")],
                                cwd=self.dir, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
        import redis
        deadline = time.monotonic() + timeout_s
        while True:
            assert proc.poll() is None, (self.dir / "redis.log").read_text()[-2000:]
            try:
                if redis.Redis(port=self.port, socket_timeout=1).ping():
                    return proc
            except redis.exceptions.RedisError:
                pass
            assert time.monotonic() < deadline, "redis-server did not answer"
            time.sleep(0.05)

    def config(self, key: str) -> str:
        import redis
        value = redis.Redis(port=self.port, decode_responses=True).config_get(key)[key]
        assert value is not None, f"redis has no config {key}"
        return value

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)

    def start_again(self) -> None:
        self.proc = self._start()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


@pytest.fixture
def own_kafka(tmp_path):
    k = OwnKafka(tmp_path / "own-kafka")
    yield k
    k.stop()


@pytest.fixture
def own_redis(tmp_path):
    r = OwnRedis(tmp_path / "own-redis")
    yield r
    r.stop()


# ----------------------------------------------------------------------------- the drill's run


class Drill:
    """Planner (in this process, on ``bootstrap``), a node process per site, topics, the query, a
    generator writing real-time-paced records with event times from 1 s (origin 0: none is late)."""

    def __init__(self, bootstrap: str, redis_url: str, tmp_path: Path, name: str, plan: str = "SM-S1",
                 node_env: Optional[dict[int, dict[str, str]]] = None) -> None:
        from confluent_kafka.admin import AdminClient
        tag = uuid.uuid4().hex[:6]
        self.sites = [f"{c}{tag}" for c in "xyz"]
        self.bootstrap, self.tmp = bootstrap, tmp_path
        self.topics = [f"drill-{name}-{tag}-{i}" for i in range(3)]
        create_topics(AdminClient({"bootstrap.servers": bootstrap}), self.topics, partitions=2)
        self.services = Services(bootstrap)
        self.nodes: dict[str, Node] = {}
        try:
            for i, s in enumerate(self.sites):
                self.nodes[s] = Node(s, bootstrap, redis_url, tmp_path / f"node-{s}.log", **(node_env or {}).get(i, {}))
            self.q = live_query(f"dr{name}{tag}", self.sites, self.topics, window="2s", idle=f"{IDLE_S:g}s")
            self.out = submit(self.services, self.q, plan)
            self.rec = Recorder()
            self.gen = generator(bootstrap, self.q, self.rec, rate=RATE, time_base_ms=1000)  # none before the origin
        except BaseException:
            self.close()
            raise
        self.thread: Optional[threading.Thread] = None

    def start(self, seconds: float) -> None:
        """Once every node runs the query (so that the fault hits a running query), write for ``seconds``."""
        deadline = time.monotonic() + 60
        for n in self.nodes.values():
            while f"running query {self.q.name}" not in n.text():
                assert n.proc.poll() is None and "error" not in n.text(), n.text()[-3000:]
                assert time.monotonic() < deadline, f"node {n.site} does not run the query\n{n.text()[-3000:]}"
                time.sleep(0.1)
        self.thread = threading.Thread(target=self.gen.run, args=(seconds,), daemon=True)
        self.thread.start()

    def join(self) -> None:
        assert self.thread is not None
        self.thread.join(120)
        assert not self.thread.is_alive(), "the generator did not finish"

    def check(self, min_results: int = 300, timeout_s: float = 90.0) -> Any:
        """The contract, and no record a dead letter: every record written is on time."""
        want = wait_exact(self.services, self.q, self.out["run"], 0, self.rec, self.tmp, timeout_s=timeout_s,
                          min_results=min_results)
        dead = dead_letters(self.bootstrap, self.q, self.out["run"])
        assert not dead, f"{len(dead)} records became dead letters, e.g. {[d[:2] for d in dead[:5]]}"
        assert self.rec.count() == sum(self.gen.sent.values()), "the generator lost records"
        return want

    def close(self) -> None:
        try:
            self.services.planner.stop(self.q.name)
        except Exception:
            pass
        for n in self.nodes.values():
            n.stop()
        self.services.close()


@pytest.fixture
def drills():
    made: list[Drill] = []

    def make(*a: Any, **kw: Any) -> Drill:
        d = Drill(*a, **kw)
        made.append(d)
        return d
    yield make
    for d in made:
        d.close()


# ----------------------------------------------------------------------------- the drills


def test_a_broker_stopped_for_10s_mid_stream(own_kafka, redis_url, tmp_path, drills):
    """(a) The broker is stopped for 10 s while the sources write and the nodes join, then started again
    on the same data dir and port: the output is still exactly the reference, no record is late."""
    d = drills(own_kafka.bootstrap, redis_url, tmp_path, "a")
    d.start(20.0)
    time.sleep(5.0)
    own_kafka.stop()
    time.sleep(10.0)
    took = own_kafka.start_again()
    d.join()
    d.check(timeout_s=120)
    for n in d.nodes.values():
        assert n.proc.poll() is None, f"node {n.site} exited\n{n.text()[-3000:]}"
        assert "error" not in n.text(), n.text()[-3000:]
    print(f"broker back in {took:.1f} s")


def test_b_redis_killed_and_restarted_mid_stream(kafka_bootstrap, own_redis, tmp_path, drills):
    """(b) Redis with AOF and appendfsync always (infra/redis/redis-durable.conf) is killed (SIGKILL) mid-stream
    and started again on its data dir 5 s later: the nodes carry on -- each restarts its run from its last
    checkpoint in process (joinlib.adapters.redis_outage) -- and the output is exactly the reference."""
    assert own_redis.config("appendonly") == "yes" and own_redis.config("appendfsync") == "always"
    d = drills(kafka_bootstrap, own_redis.url, tmp_path, "b")
    d.start(12.0)
    time.sleep(4.0)
    own_redis.kill()
    time.sleep(5.0)   # longer than redis-py's default retries (~4 s) last
    own_redis.start_again()
    d.join()
    d.check()
    for n in d.nodes.values():
        assert n.proc.poll() is None, f"node {n.site} exited\n{n.text()[-3000:]}"
        assert "error" not in n.text(), n.text()[-3000:]
    restarted = [n.site for n in d.nodes.values() if "Redis answers again" in n.text()]
    assert restarted, "no node noticed the Redis restart (was Redis killed while the nodes used it?)"


def test_c_a_node_paused_longer_than_the_idle_timeout(kafka_bootstrap, redis_url, tmp_path, drills):
    """(c) One node is stopped with SIGSTOP for 2.5 x the idle timeout, then continued: it catches up (none
    of its records is classified late), the other nodes keep reading their sources meanwhile, and the
    output is exactly the reference."""
    d = drills(kafka_bootstrap, redis_url, tmp_path, "c")
    d.start(14.0)
    time.sleep(4.0)
    victim = d.nodes[d.sites[1]]
    others = [n for n in d.nodes.values() if n is not victim]
    own = {n.site: [d.topics[d.sites.index(n.site)]] for n in others}
    victim.proc.send_signal(signal.SIGSTOP)
    lags: dict[str, list[float]] = {n.site: [] for n in others}
    t_end = time.monotonic() + 2.5 * IDLE_S
    try:
        while time.monotonic() < t_end:
            time.sleep(0.5)
            for n in others:
                lag = n.source_lag(own[n.site])
                assert lag is not None, f"node {n.site} does not answer while {victim.site} is paused"
                lags[n.site].append(lag)
    finally:
        victim.proc.send_signal(signal.SIGCONT)
    d.join()
    d.check()
    # the others kept reading their own sources: never more than ~1.5 s of input behind
    for site, xs in lags.items():
        assert max(xs) <= 1.5 * RATE, f"node {site} fell behind on its source while another was paused: {xs}"


def test_d_a_node_killed_during_a_checkpoint(kafka_bootstrap, redis_url, tmp_path, drills):
    """(d) A node is killed (SIGKILL) in the middle of a checkpoint -- its producer flushed, the Redis save
    not done (a test hook holds its 4th checkpoint there) -- and restarted: it resumes from the previous
    checkpoint and the output is exactly the reference."""
    d = drills(kafka_bootstrap, redis_url, tmp_path, "d", node_env={1: {"JOINLIB_TEST_CHECKPOINT_PAUSE": "4:5"}})
    victim = d.nodes[d.sites[1]]
    d.start(10.0)
    deadline = time.monotonic() + 30
    while "checkpoint hook: pausing" not in victim.text():
        assert time.monotonic() < deadline, f"the hook never fired\n{victim.text()[-2000:]}"
        assert victim.proc.poll() is None, victim.text()[-3000:]
        time.sleep(0.05)
    time.sleep(0.2)
    victim.proc.send_signal(signal.SIGKILL)
    victim.proc.wait(10)
    before = len(victim.text())
    victim.restart()
    d.join()
    d.check()
    text = victim.text()[before:]
    assert "resumed from the checkpoint" in text, text[-3000:]
