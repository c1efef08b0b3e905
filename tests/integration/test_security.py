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
import os
import subprocess
import sys
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
               "JOINLIB_PLANNER_TOKEN_FILE", "KAFKA_BOOTSTRAP_SERVERS", "REDIS_URL", "KAFKA_SSL_CERT_FILE",
               "KAFKA_SSL_KEY_FILE", "JOINLIB_PLANNER_CA_FILE", "JOINLIB_TLS_CERT_FILE", "JOINLIB_TLS_KEY_FILE",
               "JOINLIB_METRICS_TOKEN", "JOINLIB_METRICS_TOKEN_FILE", "JOINLIB_PLAN_SIGNING_KEY_FILE",
               "JOINLIB_PLAN_VERIFY_KEY_FILE")


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


# ---------------------------------------------------------------------------------------------- Kafka ACLs

def _produce(secure_cluster, user: str, topic: str, key: bytes = b"r2"):
    """Produce one message as ``user``: None when the broker took it, else the KafkaError it answered."""
    from confluent_kafka import Producer
    box: dict = {}
    p = Producer({"bootstrap.servers": secure_cluster.kafka_bootstrap, **secure_cluster.secrets.kafka_client_conf(user),
                  "message.timeout.ms": 10000, "log_level": 0})
    p.produce(topic, b"forged", key, on_delivery=lambda err, msg: box.setdefault("err", err))
    p.flush(15)
    assert "err" in box, f"no delivery report for {user} -> {topic}"
    return box["err"]


def _admin(secure_cluster, user: str):
    from confluent_kafka.admin import AdminClient
    return AdminClient({"bootstrap.servers": secure_cluster.kafka_bootstrap,
                        **secure_cluster.secrets.kafka_client_conf(user), "log_level": 0})


def test_acls_let_each_service_write_only_its_own_topics(secure_cluster):
    """The matrix of infra/kafka_acls.py on the real broker: a forged flow, result or source batch under the
    wrong service's credentials is refused with TOPIC_AUTHORIZATION_FAILED; what the service needs is not."""
    from confluent_kafka import KafkaError

    from joinlib.adapters.kafka import ENDS_TOPIC, status_topic
    q = f"acl{int(time.time())}"
    flow = f"node.{q}.r2.from.r1"
    allowed = [("joinlib-source", f"src.{q}.S1"), ("joinlib-node", flow), ("joinlib-node", f"out.{q}"),
               ("joinlib-node", f"derived.{q}.mj0"), ("joinlib-planner", "control"),
               ("joinlib-node", status_topic("r1")), ("joinlib-source", ENDS_TOPIC)]
    refused = [("joinlib-node", f"src.{q}.S1"),      # a node forging a source's tuples
               ("joinlib-node", "control"),          # ... or a plan: the planner alone writes control
               ("joinlib-node", ENDS_TOPIC),         # ... or a source's end
               ("joinlib-source", "control"),
               ("joinlib-source", flow),             # a source forging a flow into a node
               ("joinlib-source", f"out.{q}"),       # ... or results
               ("joinlib-source", status_topic("r1")),   # ... or a node's status or done
               ("joinlib-planner", flow),            # the planner only plans
               ("joinlib-planner", f"src.{q}.S1"),
               ("joinlib-planner", status_topic("r1")),  # ... and reports neither as a node
               ("joinlib-planner", ENDS_TOPIC),          # ... nor as a source
               ("joinlib-spark", f"out.{q}"),        # the Spark jobs read only
               ("joinlib-spark", f"src.{q}.S1"),
               ("joinlib-spark", "control")]
    for user, topic in allowed:
        assert _produce(secure_cluster, user, topic) is None, (user, topic)
    for user, topic in refused:
        err = _produce(secure_cluster, user, topic)
        assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, (user, topic, err)
    # the Spark jobs' user still reads them
    assert {f"src.{q}.S1", f"out.{q}", "control"} <= set(_admin(secure_cluster, "joinlib-spark").list_topics(
        timeout=10).topics)


def test_per_site_node_users_write_and_read_only_their_own_flows(secure_cluster):
    """``grant-query --per-site --plan mjoin``: site r1's user writes only the flows r1 sends (the query's and
    its MJoin operator's) and reads only those it receives -- so r1's credentials cannot forge r2's flow to r3
    (or to r1 itself), read the flows r2 receives, or publish a plan on ``control``; its reports go to its own
    ``status.node.r1``, and it cannot write r2's status topic (a forged status or done) nor the sources' ends.
    It writes its query's results, dead letters, idle advances and derived streams, and not another query's."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    from infra.kafka_acls import admin_client, grant_query, mjoin_operators, site_user
    from joinlib.adapters.kafka import (
        CONTROL_TOPIC,
        ENDS_TOPIC,
        ensure_topics,
        flow_topics,
        node_topic,
        report_topics,
        status_topic,
    )
    query = load_query(ROOT / "examples" / "routers.yaml")
    from dataclasses import replace
    query = replace(query, name=f"site{int(time.time())}")
    s = secure_cluster.secrets
    admin = admin_client(secure_cluster.kafka_bootstrap, s.dir)
    ops = mjoin_operators(query, "mjoin")
    assert [name for name, _ in ops] == [f"{query.name}.mj0"]
    other = f"other{int(time.time())}"   # another query's results and dead letters
    ensure_topics(admin, [*flow_topics(query.name, query.nodes), CONTROL_TOPIC, *report_topics(query.nodes),
                          *(t for name, nodes in ops for t in flow_topics(name, nodes)),   # as planning does
                          f"out.{query.name}", f"dlq.{query.name}", f"wm.{query.name}", f"derived.{ops[0][0]}",
                          f"out.{other}", f"dlq.{other}", f"wm.{other}", f"derived.{other}.mj0"])
    assert grant_query(admin, query, s.dir, per_site=True, operators=ops) > 0
    r1 = site_user("r1")
    for dst, src in (("r1", "r2"), ("r2", "r3")):   # something to read, written by the real senders
        assert _produce(secure_cluster, site_user(src), node_topic(query.name, dst, src), src.encode()) is None

    def read(topic: str):
        c = Consumer({"bootstrap.servers": secure_cluster.kafka_bootstrap, **s.kafka_client_conf(r1),
                      "group.id": f"t-{r1}", "enable.auto.commit": False, "log_level": 0})
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        try:
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                m = c.poll(0.5)
                if m is not None:
                    return m.error()
            return "nothing read"
        finally:
            c.close()
    assert read(node_topic(query.name, "r1", "r2")) is None          # r1 receives r2's flow
    err = read(node_topic(query.name, "r2", "r3"))                    # ... not the flows r2 receives
    assert isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err
    mj0 = ops[0][0]
    assert _produce(secure_cluster, r1, node_topic(query.name, "r3", "r1"), b"r1") is None    # r1's own flow
    assert _produce(secure_cluster, r1, node_topic(mj0, "r3", "r1"), b"r1") is None           # ... its operator's
    assert _produce(secure_cluster, r1, status_topic("r1"), b"r1") is None                    # its reports
    for topic in (f"out.{query.name}", f"dlq.{query.name}", f"wm.{query.name}", f"derived.{mj0}"):
        assert _produce(secure_cluster, r1, topic, b"r1") is None, topic   # its query's results, letters, marks
    forged = [f"out.{other}", f"dlq.{other}", f"wm.{other}",   # another query's results, dead letters, marks
              f"derived.{other}.mj0",                # ... and derived stream
              node_topic(query.name, "r3", "r2"),    # r2's flow to r3, under r1's credentials
              node_topic(query.name, "r1", "r2"),    # r2's flow to r1 itself
              node_topic(mj0, "r3", "r2"),           # r2's flow of the MJoin operator
              status_topic("r2"),                    # r2's status or done
              ENDS_TOPIC,                            # a source's end
              "control"]                             # a plan
    for topic in forged:
        err = _produce(secure_cluster, r1, topic, b"r2")
        assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, (topic, err)


def test_acls_keep_topics_and_acls_to_the_admin(secure_cluster):
    """No service may delete a topic or change an ACL; only the super user ``admin`` may."""
    from confluent_kafka import KafkaError, KafkaException

    from infra.kafka_acls import Grant, W, apply
    for user in ("joinlib-node", "joinlib-planner", "joinlib-cli"):
        admin = _admin(secure_cluster, user)   # kept alive until the answer (its futures die with it)
        with pytest.raises(KafkaException) as e:
            admin.delete_topics(["control"], operation_timeout=10)["control"].result()
        assert e.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, (user, e.value)
    with pytest.raises(RuntimeError, match="CLUSTER_AUTHORIZATION_FAILED|Cluster authorization failed"):
        apply(_admin(secure_cluster, "joinlib-node"), [Grant("joinlib-node", "src.", (W,))])
    assert "control" in _admin(secure_cluster, "admin").list_topics(timeout=10).topics


def test_a_user_without_grants_gets_nothing(secure_cluster):
    """Valid credentials alone give nothing: a SCRAM user with no ACL sees no topic and writes none."""
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported, not in __all__
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )
    password = "nobody-" + secure_cluster.secrets.kafka_password("joinlib-spark")[:8]
    up = UserScramCredentialUpsertion("joinlib-nobody", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
                                      password.encode())
    admin = _admin(secure_cluster, "admin")
    for fut in admin.alter_user_scram_credentials([up]).values():
        fut.result()
    conf = {**secure_cluster.secrets.kafka_client_conf("joinlib-spark"), "sasl.username": "joinlib-nobody",
            "sasl.password": password}
    from confluent_kafka.admin import AdminClient
    deadline = time.monotonic() + 20   # the new credential reaches the broker through the metadata log
    while True:
        try:
            md = AdminClient({"bootstrap.servers": secure_cluster.kafka_bootstrap, **conf, "log_level": 0}
                             ).list_topics(timeout=5)
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    assert md.brokers and not md.topics   # authenticated, but no topic is visible
    from confluent_kafka import Producer
    box: dict = {}
    p = Producer({"bootstrap.servers": secure_cluster.kafka_bootstrap, **conf, "message.timeout.ms": 10000,
                  "log_level": 0})
    p.produce("control", b"forged plan", on_delivery=lambda err, msg: box.setdefault("err", err))
    p.flush(15)
    assert box["err"] is not None and box["err"].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, box


# ---------------------------------------------------------------------------------------------- mutual TLS

def test_mutual_tls_is_an_alternative_to_scram_with_the_same_acls(secure_cluster, client_env, tmp_path):
    """The broker's SSL listener wants a client certificate of its CA; the certificate's CN is the Kafka user,
    so the ACLs of SCRAM users apply unchanged.  Without a certificate, or with one of another CA: nothing."""
    from confluent_kafka import KafkaError

    from joinlib.adapters.kafka import KafkaUnavailable, check_reachable
    from joinlib.settings import KafkaSecurity
    s = secure_cluster.secrets
    mtls = secure_cluster.kafka_mtls_bootstrap
    client_env(secure_cluster.mtls_env("joinlib-node"))
    check_reachable(mtls, timeout_s=10)   # the services' settings: KAFKA_SSL_CERT_FILE / KAFKA_SSL_KEY_FILE
    assert "client certificate" in KafkaSecurity.from_env().describe()

    def produce(conf: dict, topic: str):
        from confluent_kafka import Producer
        box: dict = {}
        p = Producer({"bootstrap.servers": mtls, **conf, "message.timeout.ms": 10000, "log_level": 0})
        p.produce(topic, b"x", on_delivery=lambda err, msg: box.setdefault("err", err))
        p.flush(15)
        return box.get("err", "no delivery report")
    q = f"mtls{int(time.time())}"
    assert produce(s.kafka_mtls_conf("joinlib-node"), f"node.{q}.r2.from.r1") is None
    err = produce(s.kafka_mtls_conf("joinlib-node"), f"src.{q}.S1")    # the node's ACLs, by certificate
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err
    assert produce(s.kafka_mtls_conf("joinlib-source"), f"src.{q}.S1") is None

    client_env({**secure_cluster.mtls_env("joinlib-node"), "KAFKA_SSL_CERT_FILE": None, "KAFKA_SSL_KEY_FILE": None})
    with pytest.raises(KafkaUnavailable):   # TLS without a client certificate: the handshake fails
        check_reachable(mtls, timeout_s=3)
    other = tmp_path / "other-ca"
    res = subprocess.run(["bash", str(ROOT / "scripts" / "gen-certs.sh"), str(other)], capture_output=True, text=True,
                         env={**os.environ, "CLIENTS": "joinlib-node"})
    assert res.returncode == 0, res.stderr
    client_env({**secure_cluster.mtls_env("joinlib-node"),
                "KAFKA_SSL_CERT_FILE": str(other / "client-joinlib-node.crt"),
                "KAFKA_SSL_KEY_FILE": str(other / "client-joinlib-node.key")})
    with pytest.raises(KafkaUnavailable):   # a certificate the broker's CA did not sign
        check_reachable(mtls, timeout_s=3)
    client_env({})
    with pytest.raises(KafkaUnavailable):   # SCRAM credentials are no certificate
        check_reachable(mtls, timeout_s=3)


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
    """The planner service in this process, as the Kafka user ``joinlib-planner`` (the environment keeps that
    user for the test: clients the planner opens later get it too)."""
    from prometheus_client import CollectorRegistry

    from joinlib.adapters.prometheus import PrometheusSensor
    from joinlib.settings import planner_token
    from services.planner.service import PlannerService, serve
    client_env({}, kafka_user="joinlib-planner")
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


# ---------------------------------------------------------------------------------------------- signed plans

def test_nodes_reject_a_plan_the_planner_did_not_sign(planner, secure_cluster, client_env, tmp_path):
    """The broker refuses a plan written under a node's credentials (the planner alone writes ``control``);
    under credentials that may write it (the CLI's, which plays the planner in ``joinlib run --cluster``) the
    broker takes a forged plan, and the nodes, with JOINLIB_PLAN_VERIFY_KEY_FILE, act only on plans the
    planner's key signed."""
    from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

    from joinlib.adapters.kafka import consume, end_offsets, make_consumer
    from joinlib.node.control import decode_control_message
    url, _ = planner
    text = (ROOT / "examples" / "routers.yaml").read_text().replace("name: routers", f"name: sig{int(time.time())}")
    (tmp_path / "q.yaml").write_text(text)
    name = load_query(tmp_path / "q.yaml").name
    assert cli(["submit", str(tmp_path / "q.yaml"), "--plan", "SP-S", "--url", url]) == 0   # signed by the planner
    client_env({"JOINLIB_PLAN_SIGNING_KEY_FILE": None})   # from here on: a node's environment
    consumer = make_consumer(secure_cluster.kafka_bootstrap, "sig-test")
    end = end_offsets(consumer, ["control"])["control"]
    consumer.assign([TopicPartition("control", 0, OFFSET_BEGINNING)])
    msgs: list = []
    while not msgs or msgs[-1].offset() < end - 1:
        msgs += consume(consumer, 1000, 1.0)
    genuine = [m for m in msgs if m.key() == name.encode() and dict(m.headers() or []).get("sig")]
    assert len(genuine) == 1
    value, sig = genuine[0].value(), dict(genuine[0].headers())["sig"]
    err = _forge(secure_cluster, value, [("sig", sig)], "joinlib-node")   # a node replaying the genuine plan
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err
    # forgeries under credentials that may write control: the broker takes them ...
    for headers in (None, [("sig", b"\0" * 64)], [("sig", sig)]):
        forged = value if headers != [("sig", sig)] else value.replace(name.encode(), name[:-1].encode() + b"X")
        assert _forge(secure_cluster, forged, headers, "joinlib-cli") is None
    consumer.assign([TopicPartition("control", 0, genuine[0].offset())])
    later: list = []
    while len(later) < 4:
        later += consume(consumer, 1000, 1.0)
    consumer.close()
    # ... and a node drops them: unsigned, a bad signature, a signature of another message
    reasons: list[str] = []
    recs = [decode_control_message(m, lambda off, why, detail, *_: reasons.append(detail)) for m in later[:4]]
    assert recs[0] is not None and recs[0].kind == "plan" and recs[1:] == [None, None, None], recs
    assert "unsigned plan message" in reasons[0] and "does not verify" in reasons[1], reasons
    assert len(reasons) == 3


def _forge(secure_cluster, value: bytes, headers, user: str):
    from confluent_kafka import Producer
    box: dict = {}
    p = Producer({"bootstrap.servers": secure_cluster.kafka_bootstrap, "message.timeout.ms": 10000,
                  **secure_cluster.secrets.kafka_client_conf(user), "log_level": 0})
    p.produce("control", value, b"forged", headers=headers, on_delivery=lambda err, msg: box.setdefault("err", err))
    p.flush(15)
    return box.get("err", "no delivery report")


# ---------------------------------------------------------------------------------------------- HTTPS

def _https(url: str, token: Optional[str] = None, ca: Optional[Path] = None) -> tuple[int, bytes]:
    import ssl
    req = urllib.request.Request(url)
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    ctx = ssl.create_default_context(cafile=str(ca)) if ca is not None else None
    try:
        with urllib.request.urlopen(req, timeout=10, context=ctx) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_planner_api_and_metrics_over_https_with_tokens(secure_cluster, client_env, tmp_path, capsys):
    """``python -m services.planner`` with JOINLIB_TLS_CERT_FILE/KEY_FILE serves its API and /metrics over
    HTTPS only; /metrics wants JOINLIB_METRICS_TOKEN, the API the planner token; the CLI trusts the planner
    through JOINLIB_PLANNER_CA_FILE.  (Node services serve /metrics the same way: serve_metrics.)"""
    import http.client
    s = secure_cluster.secrets
    api_port, metrics_port = _free_port(), _free_port()
    metrics_token = "metrics-" + s.token_file.read_text().strip()[:12]
    env = {**{k: v for k, v in os.environ.items() if k not in CLIENT_VARS},
           **secure_cluster.client_env("joinlib-planner"), "PLANNER_PORT": str(api_port),
           "METRICS_PORT": str(metrics_port), "JOINLIB_TLS_CERT_FILE": str(s.dir / "server.crt"),
           "JOINLIB_TLS_KEY_FILE": str(s.dir / "server.key"), "JOINLIB_METRICS_TOKEN": metrics_token}
    with open(tmp_path / "planner.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "services.planner"], cwd=ROOT, env=env, stdout=log,
                                stderr=subprocess.STDOUT)
    api, metrics = f"https://127.0.0.1:{api_port}", f"https://127.0.0.1:{metrics_port}/metrics"
    token = s.token_file.read_text().strip()
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if _https(f"{api}/healthz", ca=s.ca)[0] == 200:
                    break
            except (urllib.error.URLError, OSError):
                pass
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "planner.log").read_text()
            time.sleep(0.3)
        assert _https(f"{api}/queries", token, s.ca)[0] == 200
        assert _https(f"{api}/queries", None, s.ca)[0] == 401
        status, body = _https(metrics, metrics_token, s.ca)
        assert status == 200 and b"# TYPE" in body
        assert _https(metrics, None, s.ca)[0] == 401
        assert _https(metrics, "wrong", s.ca)[0] == 401
        assert _https(metrics, token, s.ca)[0] == 401   # the API's token is not the metrics token
        for url in (metrics, f"{api}/healthz"):
            with pytest.raises((urllib.error.URLError, ssl_error())):   # a CA that did not sign it
                _https(url, metrics_token, ROOT / "infra" / "kafka" / "pom.xml")
            with pytest.raises((urllib.error.URLError, http.client.HTTPException, ConnectionError)):   # plain HTTP
                urllib.request.urlopen(url.replace("https:", "http:"), timeout=10).read()
        # the CLI: trusts the planner's certificate through JOINLIB_PLANNER_CA_FILE, else refuses it
        client_env({"JOINLIB_PLANNER_CA_FILE": str(s.ca)})
        assert cli(["queries", "--url", api]) == 0
        client_env({})
        assert cli(["queries", "--url", api]) == 2
        assert "CERTIFICATE_VERIFY_FAILED" in capsys.readouterr().err
    finally:
        proc.terminate()
        proc.wait(30)
    printed = (tmp_path / "planner.log").read_text()
    assert f"https://:{api_port}" in printed and "bearer token" in printed
    assert metrics_token not in printed and token not in printed


def ssl_error() -> type:
    import ssl
    return ssl.SSLError


# ---------------------------------------------------------------------------------------------- pipeline

def _service(module: str, args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    """``python -m module args`` with only ``env``'s identity (the test's own credentials removed)."""
    base = {k: v for k, v in os.environ.items() if k not in CLIENT_VARS}
    with open(log, "wb") as out:
        return subprocess.Popen([sys.executable, "-m", module, *args], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                env={**base, **env, "METRICS_PORT": "0"})


@pytest.mark.parametrize("plan", ["SP-S", "mjoin"])
def test_whole_pipeline_runs_with_credentials_and_is_exact(planner, secure_cluster, client_env, tmp_path, capsys, plan):
    """Each service under its own Kafka user and ACLs: the planner (here, as ``joinlib-planner``), three
    node services (each as its site's ``joinlib-node-<site>``, Redis windows as the node ACL user), the
    source (``joinlib-source``); with ``mjoin``, an MJoin tree whose operators' flows, derived streams and results
    the per-site users are granted by ``grant-query --per-site --plan mjoin``."""
    import redis
    url, svc = planner
    bootstrap = secure_cluster.kafka_bootstrap
    name = f"sec{plan.replace('-', '').lower()}{int(time.time())}"
    text = (ROOT / "examples" / "routers.yaml").read_text().replace("name: routers", f"name: {name}")
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

    from infra.kafka_acls import admin_client, grant_query, mjoin_operators, site_user
    grant_query(admin_client(bootstrap, secrets.dir), query, secrets.dir, per_site=True,   # joinlib-node-<site>
                operators=mjoin_operators(query, plan if plan == "mjoin" else None))
    assert cli(["submit", str(qfile), "--plan", plan, "--url", url]) == 0
    logs = {site: tmp_path / f"node-{site}.log" for site in query.sites}
    nodes = {site: _service("services.node", ["--site", site, "--query", query.name, "--plan-timeout", "60",
                                              "--checkpoint-every", "0.5", "--quiet"],
                            {**secure_cluster.client_env(site_user(site), "joinlib-node"),
                             "JOINLIB_PLAN_SIGNING_KEY_FILE": ""}, logs[site])   # nodes verify, never sign
             for site in query.sites}
    try:
        source = subprocess.run([sys.executable, "-m", "services.source", "--query", str(qfile), "--data",
                                 str(tmp_path / "data"), "--fast", "--bootstrap", bootstrap, "--no-progress"],
                                cwd=ROOT, capture_output=True, text=True, timeout=120,
                                env={**{k: v for k, v in os.environ.items() if k not in CLIENT_VARS},
                                     **secure_cluster.client_env("joinlib-source")})
        assert source.returncode == 0, source.stderr
        deadline = time.monotonic() + 120
        while svc.status(query.name)["state"] != "done" and time.monotonic() < deadline:
            assert all(p.poll() in (None, 0) for p in nodes.values()), {s: logs[s].read_text() for s in nodes}
            time.sleep(0.5)
        st = svc.status(query.name)
        assert st["state"] == "done", (st, {s: logs[s].read_text()[-2000:] for s in nodes})
        for site, p in nodes.items():
            assert p.wait(30) == 0, logs[site].read_text()
    finally:
        for p in nodes.values():
            if p.poll() is None:
                p.kill()
                p.wait(10)
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
    printed = [out.out, out.err, source.stdout, source.stderr, *(log.read_text() for log in logs.values())]
    hidden = [secrets.kafka_password(u) for u in ("joinlib-source", "joinlib-planner", *map(site_user, query.sites))]
    for secret in [*hidden, secrets.redis_password("joinlib-node"), secrets.token_file.read_text().strip()]:
        assert not any(secret in text for text in printed)


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
