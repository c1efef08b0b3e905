"""A restartable local broker (issue 29, item 4): the broker of ``infra/local_cluster.py`` and of
``scripts/cluster.sh`` stops and starts again on its data -- topics, records and consumer-group offsets are
still there, and a group member continues from its committed offset.  Each test runs a broker of its own (free
ports, its own data dir), so that restarting it does not disturb the session's broker."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from infra import local_cluster as lc
from joinlib.adapters.kafka import make_consumer, partition_ends
from tests.cluster_fixtures import create_topics

REPO = Path(__file__).resolve().parents[2]
N = 120


def _produce(bootstrap: str, topic: str, values: range) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in values:
        p.produce(topic, key=str(i % 3).encode(), value=str(i).encode(), partition=i % 3)
    assert p.flush(30) == 0


def _group_consumer(bootstrap: str, group: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                     "enable.auto.commit": False})


def _read(c: Consumer, want: int, timeout_s: float = 60.0) -> list[int]:
    import time
    out: list[int] = []
    deadline = time.monotonic() + timeout_s
    while len(out) < want and time.monotonic() < deadline:
        for m in c.consume(500, 0.5):
            value = m.value()
            assert m.error() is None and value is not None, m.error()
            out.append(int(value))
    return out


def _all_records(bootstrap: str, topic: str) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "check-all", "enable.auto.commit": False})
    try:
        ends = [c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(3)]
        c.assign([TopicPartition(topic, p, 0) for p in range(3)])
        return sorted(_read(c, sum(ends)))
    finally:
        c.close()


def _ends_across_the_restart(kafka: lc.KafkaProcess, bootstrap: str, topic: str) -> list[int]:
    """A client that was connected asks for a topic's end offsets (as a re-keyer's checkpoint does) while the
    broker, frozen, holds the request, and then crashes (SIGKILL; the records are in the files it wrote): the
    request fails on the dead connection (``Local: Broker transport failure``), and is retried until the broker,
    started again on its data, answers -- docs/reliability.md chaos finding 6, where it failed the query."""
    import signal
    import threading
    import time
    w = make_consumer(bootstrap, "ends")   # its librdkafka log goes to a logger, not stderr
    try:
        assert partition_ends(w, topic, 3) == [N // 3] * 3
        kafka.proc.send_signal(signal.SIGSTOP)
        got: list = []
        asking = threading.Thread(target=lambda: got.append(_try(partition_ends, w, topic, 3, timeout_s=120)))
        asking.start()
        time.sleep(1.0)   # the request is in flight
        kafka.proc.kill()
        kafka.proc.wait(30)
        seconds = kafka.start_again()
        print(f"broker started again on its data in {seconds:.1f} s")
        asking.join(150)
        assert got, "the request for the ends did not return"
        if isinstance(got[0], Exception):
            raise got[0]
        return got[0]
    finally:
        w.close()


def _try(f, *args, **kw):
    try:
        return f(*args, **kw)
    except Exception as e:   # handed to the test's thread, which raises it
        return e


def test_local_cluster_broker_keeps_topics_records_and_group_offsets_across_a_restart(tmp_path):
    kafka = lc.start_kafka(tmp_path / "k")
    try:
        bootstrap, topic = kafka.bootstrap, "restart-me"
        create_topics(AdminClient({"bootstrap.servers": bootstrap}), [topic], partitions=3)
        _produce(bootstrap, topic, range(N))
        c = _group_consumer(bootstrap, "g1")
        c.subscribe([topic])
        first = _read(c, 45)
        c.commit(asynchronous=False)
        c.close()
        ends = _ends_across_the_restart(kafka, bootstrap, topic)
        assert ends == [N // 3] * 3, ends
        assert kafka.bootstrap == bootstrap
        md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
        assert len(md.topics[topic].partitions) == 3
        assert _all_records(bootstrap, topic) == list(range(N))
        _produce(bootstrap, topic, range(N, N + 30))   # writes go on after the restart
        c = _group_consumer(bootstrap, "g1")
        c.subscribe([topic])
        rest = _read(c, N + 30 - len(first))
        c.close()
        assert sorted(first + rest) == list(range(N + 30)), "the group did not continue from its offsets"
    finally:
        kafka.stop()
    with pytest.raises(lc.LocalClusterError, match="no formatted KRaft data"):
        lc.KafkaProcess(kafka.port, kafka.controller_port, tmp_path / "nothing", kafka.proc).start_again(5)


def _sh(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(REPO / "scripts" / "cluster.sh"), *args], env=env, capture_output=True,
                          text=True, timeout=180)


def test_cluster_sh_stop_and_start_keep_the_brokers_data(tmp_path):
    kport, cport, rport = lc._distinct_free_ports(3)
    env = {**os.environ, "JOINLIB_RUN_DIR": str(tmp_path / "run"), "KAFKA_PORT": str(kport),
           "KAFKA_CONTROLLER_PORT": str(cport), "REDIS_PORT": str(rport)}
    bootstrap = f"127.0.0.1:{kport}"
    up = _sh(env, "up")
    try:
        assert up.returncode == 0, up.stderr
        create_topics(AdminClient({"bootstrap.servers": bootstrap}), ["kept"], partitions=3)
        _produce(bootstrap, "kept", range(N))
        stop = _sh(env, "stop")
        assert stop.returncode == 0, stop.stderr
        status = _sh(env, "status")
        assert status.returncode == 1 and "data kept" in status.stdout, status.stdout
        start = _sh(env, "start")
        assert start.returncode == 0, start.stderr
        assert f"KAFKA_BOOTSTRAP_SERVERS={bootstrap}" in start.stdout
        assert _all_records(bootstrap, "kept") == list(range(N))
        again = _sh(env, "restart-kafka")
        assert again.returncode == 0, again.stderr
        assert _all_records(bootstrap, "kept") == list(range(N))
        bad = _sh(env, "stop", "zookeeper")
        assert bad.returncode == 1 and "expected kafka or redis" in bad.stderr
    finally:
        _sh(env, "down")
    fresh = _sh({**env, "JOINLIB_RUN_DIR": str(tmp_path / "none")}, "start")
    assert fresh.returncode == 1 and "run 'bash scripts/cluster.sh up'" in fresh.stderr
