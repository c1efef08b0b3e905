"""Security on the real servers (docs/security.md): a Kafka broker with SASL_SSL (SCRAM-SHA-512) and a
redis-server with TLS and ACL users, both started by the ``secure_cluster`` session fixture.

* a client without credentials, with wrong ones or without TLS is refused by Kafka, by Redis and by
  the planner's HTTP API (401);
* the whole deployed flow -- ``joinlib submit`` with the API token, the planner, three node services
  with Redis windows as the ``joinlib-node`` ACL user, the source service -- runs with credentials and
  gives exactly the reference join;
* no secret shows up in what the services and the CLI print.
"""
from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Optional

import pytest

from joinlib.cli.main import main as cli
from joinlib.data.files import load_streams
from joinlib.data.gen import generate
from joinlib.errors import JoinlibError
from joinlib.protocol import records
from joinlib.query import load_query
from joinlib.reference import reference_join

ROOT = Path(__file__).resolve().parents[2]
CLIENT_VARS = ("KAFKA_SECURITY_PROTOCOL", "KAFKA_SASL_MECHANISM", "KAFKA_SASL_USERNAME", "KAFKA_SASL_PASSWORD",
               "KAFKA_SASL_PASSWORD_FILE", "KAFKA_SSL_CA_FILE", "KAFKA_SSL_VERIFY_HOSTNAME", "REDIS_USERNAME",
               "REDIS_PASSWORD", "REDIS_PASSWORD_FILE", "REDIS_SSL_CA_FILE", "JOINLIB_PLANNER_TOKEN",
               "JOINLIB_PLANNER_TOKEN_FILE", "KAFKA_BOOTSTRAP_SERVERS", "REDIS_URL")


@pytest.fixture
def client_env(secure_cluster, monkeypatch):
    """Sets the environment of a client of the secure cluster; returns a function that replaces it."""
    def use(overrides: dict[str, str], kafka_user: str = "joinlib-node", redis_user: str = "joinlib-node") -> None:
        for k in CLIENT_VARS:
            monkeypatch.delenv(k, raising=False)
        env = {**secure_cluster.client_env(kafka_user, redis_user), **overrides}
        for k, v in env.items():
            if v is None:
                monkeypatch.delenv(k, raising=False)
            else:
                monkeypatch.setenv(k, v)
    use({})
    return use


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------------------------- Kafka

def test_kafka_refuses_clients_without_valid_credentials(secure_cluster, client_env):
    from joinlib.adapters.kafka import KafkaUnavailable, check_reachable
    bootstrap = secure_cluster.kafka_bootstrap
    wrong = "not-the-password"
    cases = {
        "no credentials, no TLS": {"KAFKA_SECURITY_PROTOCOL": None, "KAFKA_SASL_USERNAME": None,
                                   "KAFKA_SASL_PASSWORD_FILE": None},
        "TLS without SASL": {"KAFKA_SECURITY_PROTOCOL": "SSL", "KAFKA_SASL_USERNAME": None,
                             "KAFKA_SASL_PASSWORD_FILE": None},
        "wrong password": {"KAFKA_SASL_PASSWORD_FILE": None, "KAFKA_SASL_PASSWORD": wrong},
        "unknown user": {"KAFKA_SASL_USERNAME": "mallory"},
    }
    for name, overrides in cases.items():
        client_env(overrides)
        with pytest.raises(KafkaUnavailable) as e:
            check_reachable(bootstrap, timeout_s=3)
        assert wrong not in str(e.value), name
    client_env({})
    check_reachable(bootstrap, timeout_s=10)  # the right user and password


def test_kafka_wrong_password_is_an_authentication_error(secure_cluster):
    from confluent_kafka import KafkaError, Producer
    conf = {**secure_cluster.secrets.kafka_client_conf("joinlib-node"), "sasl.password": "wrong",
            "bootstrap.servers": secure_cluster.kafka_bootstrap, "log_level": 0}
    errors: list[KafkaError] = []
    p = Producer({**conf, "error_cb": errors.append})
    deadline = time.monotonic() + 10
    while not errors and time.monotonic() < deadline:
        p.poll(0.2)
    assert errors and errors[0].code() == KafkaError._AUTHENTICATION, errors


# ---------------------------------------------------------------------------------------------- Redis

def test_redis_refuses_clients_without_valid_credentials(secure_cluster, client_env):
    import redis

    from joinlib.adapters.redis_client import redis_client
    url = secure_cluster.redis_url
    plain = url.replace("rediss://", "redis://")
    with pytest.raises(redis.ConnectionError):  # no TLS: the server only speaks TLS
        redis.Redis.from_url(plain, socket_timeout=3, socket_connect_timeout=3).ping()
    with pytest.raises(redis.ConnectionError):  # TLS with a CA that did not sign the server's certificate
        redis.Redis.from_url(url, socket_timeout=3, ssl_ca_certs=str(ROOT / "infra" / "kafka" / "pom.xml")).ping()
    client_env({"REDIS_USERNAME": None, "REDIS_PASSWORD_FILE": None})
    with pytest.raises(redis.AuthenticationError):  # the default user is off
        redis_client(url, socket_timeout=3).ping()
    client_env({"REDIS_PASSWORD_FILE": None, "REDIS_PASSWORD": "not-the-password"})
    with pytest.raises(redis.AuthenticationError) as e:
        redis_client(url, socket_timeout=3).ping()
    assert "not-the-password" not in str(e.value)
    client_env({})
    node = redis_client(url, socket_timeout=3)
    assert node.ping()
    assert node.set("{joinlib:acl-test/r1}/k", b"1")  # the node user's keys
    with pytest.raises(redis.exceptions.NoPermissionError):
        node.set("someone-else:k", b"1")  # other keys: refused by the ACL
    with pytest.raises(redis.exceptions.NoPermissionError):
        node.flushall()
    node.delete("{joinlib:acl-test/r1}/k")
    node.close()


# ---------------------------------------------------------------------------------------------- planner

@pytest.fixture
def planner(secure_cluster, client_env):
    from prometheus_client import CollectorRegistry

    from joinlib.adapters.prometheus import PrometheusSensor
    from joinlib.settings import planner_token
    from services.planner.service import PlannerService, serve
    svc = PlannerService(secure_cluster.kafka_bootstrap, sensor=PrometheusSensor(CollectorRegistry()))
    port = _free_port()
    server = serve(svc, port, planner_token())
    yield f"http://127.0.0.1:{port}", svc
    server.shutdown()
    svc.close()


def _status(url: str, token: str | None = None, method: str = "GET", data: bytes | None = None) -> int:
    req = urllib.request.Request(url, data=data, method=method)
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_planner_api_needs_the_bearer_token(planner, secure_cluster, client_env, capsys):
    url, _ = planner
    token = secure_cluster.secrets.token_file.read_text().strip()
    assert _status(f"{url}/queries") == 401
    assert _status(f"{url}/queries", "wrong-token") == 401
    assert _status(f"{url}/queries", token[:-1]) == 401
    assert _status(f"{url}/queries", method="POST", data=b"name: x\n") == 401
    assert _status(f"{url}/queries/x/stop", method="POST", data=b"") == 401
    assert _status(f"{url}/queries/x", method="DELETE") == 401
    assert _status(f"{url}/healthz") == 200  # probes need no token
    assert _status(f"{url}/queries", token) == 200
    # the CLI sends the token from JOINLIB_PLANNER_TOKEN_FILE (set by client_env) ...
    assert cli(["queries", "--url", url]) == 0
    # ... or JOINLIB_PLANNER_TOKEN; without one it is refused with a hint
    client_env({"JOINLIB_PLANNER_TOKEN_FILE": None, "JOINLIB_PLANNER_TOKEN": token})
    assert cli(["status", "--url", url]) == 0
    client_env({"JOINLIB_PLANNER_TOKEN_FILE": None})
    assert cli(["queries", "--url", url]) == 2
    assert "unauthorized; set JOINLIB_PLANNER_TOKEN" in capsys.readouterr().err
    client_env({"JOINLIB_PLANNER_TOKEN_FILE": None, "JOINLIB_PLANNER_TOKEN": "wrong"})
    with pytest.raises(JoinlibError, match="the one set was refused"):
        from joinlib.cli.live import http_json
        http_json(f"{url}/queries")


# ---------------------------------------------------------------------------------------------- pipeline

def test_whole_pipeline_runs_with_credentials_and_is_exact(planner, secure_cluster, client_env, tmp_path, capsys):
    import redis
    from prometheus_client import CollectorRegistry

    from joinlib.node.node_service import NodeService
    from services.source.__main__ import main as source_main
    url, svc = planner
    bootstrap = secure_cluster.kafka_bootstrap
    text = (ROOT / "examples" / "routers.yaml").read_text().replace("name: routers", f"name: sec{int(time.time())}")
    qfile = tmp_path / "q.yaml"
    qfile.write_text(text)
    query = load_query(qfile)
    generate(query, tmp_path / "data", 1500, seed=5)
    streams = load_streams(query, tmp_path / "data")
    expected = reference_join(query, streams)

    secrets = secure_cluster.secrets
    admin = redis.Redis.from_url(secure_cluster.redis_url, ssl_ca_certs=str(secrets.ca), username="joinlib-admin",
                                 password=secrets.redis_password("joinlib-admin"))
    admin.config_resetstat()

    assert cli(["submit", str(qfile), "--plan", "SP-S", "--url", url]) == 0
    stop = threading.Event()
    nodes = [NodeService(site, bootstrap, query=query.name, redis_url=secure_cluster.redis_url,
                         registry=CollectorRegistry(), stop=stop, plan_timeout_s=60, quiet=True,
                         checkpoint_every_s=0.5)
             for site in query.sites]
    crashed: dict[str, BaseException] = {}

    def run(node) -> None:
        try:
            node.run()
        except BaseException as e:  # shown in the assertion below instead of a thread warning
            crashed[node.site] = e

    threads = [threading.Thread(target=run, args=(n,), daemon=True) for n in nodes]
    for t in threads:
        t.start()
    try:
        assert source_main(["--query", str(qfile), "--data", str(tmp_path / "data"), "--fast",
                            "--bootstrap", bootstrap, "--no-progress"]) == 0
        deadline = time.monotonic() + 120
        while svc.status(query.name)["state"] != "done" and time.monotonic() < deadline and not crashed:
            time.sleep(0.5)
        st = svc.status(query.name)
        assert not crashed, {site: repr(e) for site, e in crashed.items()}
        assert st["state"] == "done", st
    finally:
        stop.set()
        for t in threads:
            t.join(10)
    assert sum(s["results"] for s in st["sites"].values()) == sum(expected.values())
    assert _results(bootstrap, query) == Counter({(tuple(ids), ts): n for (ids, ts), n in expected.items()})
    # the windows were in Redis, over TLS, written by the joinlib-node ACL user
    stats = admin.info("commandstats")
    assert sum(v["calls"] for k, v in stats.items() if k in ("cmdstat_zadd", "cmdstat_evalsha", "cmdstat_eval")) > 0
    assert cli(["results", query.name, "--url", url, "--out", str(tmp_path / "out.jsonl")]) == 0
    got: Counter[tuple[tuple[int, ...], int]] = Counter()
    for line in (tmp_path / "out.jsonl").read_text().splitlines():
        r = json.loads(line)
        got[(tuple(r["ids"][s] for s in query.names), r["ts"])] += 1
    assert got == Counter({(tuple(ids), ts): n for (ids, ts), n in expected.items()})
    admin.close()
    # nothing printed carries a secret
    out = capsys.readouterr()
    s = secure_cluster.secrets
    for secret in [s.kafka_password("joinlib-node"), s.redis_password("joinlib-node"),
                   s.token_file.read_text().strip()]:
        assert secret not in out.out and secret not in out.err


def _results(bootstrap: str, query) -> Counter:
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition

    from joinlib.adapters.kafka import consume, end_offsets, make_consumer, out_topic
    consumer = make_consumer(bootstrap, f"check-{query.name}")
    topic = out_topic(query.name)
    end = end_offsets(consumer, [topic])[topic]
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    pos = {s.name: s.pos for s in query.streams}
    got: Counter[tuple[tuple[Optional[int], ...], int]] = Counter()
    seen, deadline = 0, time.monotonic() + 60
    while seen < end and time.monotonic() < deadline:
        for m in consume(consumer, 5000, 0.5):
            value, offset = m.value(), m.offset()
            assert value is not None and offset is not None   # a consumed message has both
            for r in records.decode_result_batch(value).results():
                ids: list[Optional[int]] = [None] * len(pos)
                for name, i in r.ids.items():
                    ids[pos[name]] = i
                got[(tuple(ids), r.head_ts)] += 1
            seen = offset + 1
    consumer.close()
    return got
