"""Fixtures giving integration tests a real Kafka broker and a real Redis server.

Where they come from, first that works (each of Kafka and Redis on its own, started lazily,
once per session):

1. the environment: ``KAFKA_BOOTSTRAP_SERVERS`` / ``REDIS_URL`` (e.g. after ``make up``);
2. a reachable Docker engine (``docker.from_env().ping()``) -> testcontainers
   (``confluentinc/cp-kafka`` in KRaft mode, ``redis``);
3. local processes started by :mod:`infra.local_cluster` (Kafka jars from Maven Central,
   ``redis-server`` from the OS) on random free ports in a temp dir, stopped at session end;
4. otherwise the test FAILS (``pytest.fail``) with what to install - never skipped: a required
   integration suite must not pass vacuously in CI.

``JOINLIB_TEST_INFRA=local|docker|auto`` (default auto) forces step 2 or 3.

Fixtures: ``kafka_bootstrap`` (str), ``redis_url`` (str), ``kafka_admin`` (AdminClient),
``make_topic`` (factory creating uniquely named topics, deleted afterwards),
``redis_client`` (redis.Redis), ``unique_name`` (per-test unique, topic/key-safe string).
"""

from __future__ import annotations

import os
import re
import sys
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

import pytest

if TYPE_CHECKING:  # infra is imported when a test first needs a cluster
    from infra.local_cluster import LocalCluster

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:  # `import infra.local_cluster` with plain `pytest` too
    sys.path.insert(0, str(REPO_ROOT))

KAFKA_IMAGE = os.environ.get("JOINLIB_TEST_KAFKA_IMAGE", "confluentinc/cp-kafka:7.6.0")
REDIS_IMAGE = os.environ.get("JOINLIB_TEST_REDIS_IMAGE", "redis:7.0")

# what each service came from, shown in the terminal summary
_PROVENANCE: dict[str, str] = {}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "integration: needs a real Kafka broker and/or Redis server")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # noqa: ARG001
    if _PROVENANCE:
        terminalreporter.write_sep("-", "integration infrastructure")
        for name, where in sorted(_PROVENANCE.items()):
            terminalreporter.write_line(f"{name}: {where}")


# --------------------------------------------------------------------------- provisioning


def _mode() -> str:
    mode = os.environ.get("JOINLIB_TEST_INFRA", "auto").strip().lower() or "auto"
    if mode not in {"auto", "docker", "local"}:
        pytest.fail(f"JOINLIB_TEST_INFRA={mode!r}: expected auto, docker or local", pytrace=False)
    return mode


_docker_state: dict[str, object] = {}


def _docker_reachable() -> tuple[bool, str]:
    if "ok" not in _docker_state:
        try:
            import docker  # type: ignore[import-untyped]  # the docker SDK ships no types (no stubs installed)

            client = docker.from_env(timeout=5)
            client.ping()
            client.close()
            _docker_state.update(ok=True, why="")
        except Exception as e:  # no SDK, no socket, daemon down, permission denied ...
            _docker_state.update(ok=False, why=f"Docker not reachable ({type(e).__name__}: {e})")
    return bool(_docker_state["ok"]), str(_docker_state["why"])


class _Local:
    """One infra.local_cluster.LocalCluster per session; Kafka and Redis started on first use."""

    def __init__(self) -> None:
        self.cluster: Optional[LocalCluster] = None

    def get(self):
        if self.cluster is None:
            from infra.local_cluster import LocalCluster

            self.cluster = LocalCluster.create()
        return self.cluster

    def stop(self) -> None:
        if self.cluster is not None:
            self.cluster.stop()
            self.cluster = None


@pytest.fixture(scope="session")
def _local_cluster():
    local = _Local()
    yield local
    local.stop()


def _fail(service: str, reasons: list[str], hint: str) -> None:
    from infra.local_cluster import INSTALL_HINT

    lines = "\n".join(f"  - {r}" for r in reasons)
    pytest.fail(
        f"No {service} available for the integration tests. Tried:\n{lines}\n{hint}\n{INSTALL_HINT}",
        pytrace=False,
    )


def _check_kafka(bootstrap: str, timeout: float = 15.0) -> Optional[str]:
    from confluent_kafka.admin import AdminClient

    deadline = time.monotonic() + timeout
    err = ""
    while time.monotonic() < deadline:
        try:
            md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=3)
            if md.brokers:
                return None
        except Exception as e:
            err = f"{type(e).__name__}: {e}"
        time.sleep(0.5)
    return err or "no broker answered a metadata request"


def _check_redis(url: str) -> Optional[str]:
    import redis

    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=5)
        client.ping()
        client.close()
        return None
    except Exception as e:
        return f"{type(e).__name__}: {e}"


def _provide(key: str, service: str, env_var: str, check: Callable[[str], Optional[str]], docker_start,
             local_start) -> tuple[str, Optional[Callable[[], object]]]:
    """The address of ``service``: ``$env_var`` (checked with ``check``), else a testcontainers
    container (``docker_start() -> (address, provenance, stop)``) when a Docker engine answers, else a
    local process (``local_start() -> (address, provenance)``); fails with every reason tried."""
    env = os.environ.get(env_var, "").strip()
    if env:
        err = check(env)
        if err:
            pytest.fail(f"{env_var}={env} is set but {service} does not answer there: {err}", pytrace=False)
        _PROVENANCE[key] = f"{env} ({env_var})"
        return env, None

    mode, reasons = _mode(), [f"{env_var} not set"]
    if mode in {"auto", "docker"}:
        ok, why = _docker_reachable()
        if ok:
            try:
                address, provenance, stop = docker_start()
                _PROVENANCE[key] = provenance
                return address, stop
            except Exception as e:
                reasons.append(f"testcontainers {service} failed: {type(e).__name__}: {e}")
        else:
            reasons.append(why)
    if mode in {"auto", "local"}:
        from infra.local_cluster import LocalClusterError

        try:
            address, provenance = local_start()
            _PROVENANCE[key] = provenance
            return address, None  # stopped with the session's LocalCluster
        except LocalClusterError as e:
            reasons.append(f"local {service} (infra.local_cluster): {e}")
    _fail(service, reasons, f"Set {env_var} (e.g. `make up`) or fix the above.")
    raise AssertionError("unreachable")


def _provide_kafka(local: _Local) -> tuple[str, Optional[Callable[[], object]]]:
    def docker():
        from testcontainers.community.kafka import KafkaContainer

        container = KafkaContainer(KAFKA_IMAGE).with_kraft()
        container.start()
        bootstrap = container.get_bootstrap_server()
        return bootstrap, f"{bootstrap} (testcontainers {KAFKA_IMAGE})", container.stop

    def local_process():
        kafka = local.get().start_kafka()
        return kafka.bootstrap, (f"{kafka.bootstrap} (local process, ready in {kafka.startup_seconds:.1f}s, "
                                 f"log {kafka.log})")

    return _provide("kafka", "Kafka broker", "KAFKA_BOOTSTRAP_SERVERS", _check_kafka, docker, local_process)


def _provide_redis(local: _Local) -> tuple[str, Optional[Callable[[], object]]]:
    def docker():
        from testcontainers.community.redis import RedisContainer

        container = RedisContainer(REDIS_IMAGE)
        container.start()
        url = f"redis://{container.get_container_host_ip()}:{container.get_exposed_port(6379)}/0"
        return url, f"{url} (testcontainers {REDIS_IMAGE})", container.stop

    def local_process():
        proc = local.get().start_redis()
        return proc.url, f"{proc.url} (local redis-server, log {proc.log})"

    return _provide("redis", "Redis server", "REDIS_URL", _check_redis, docker, local_process)


@pytest.fixture(scope="session")
def kafka_bootstrap(_local_cluster):
    """``host:port`` of a real Kafka broker (see the module docstring for the lookup order)."""
    bootstrap, stop = _provide_kafka(_local_cluster)
    yield bootstrap
    if stop is not None:
        stop()


@pytest.fixture(scope="session")
def redis_url(_local_cluster):
    """``redis://host:port/db`` of a real Redis server (see the module docstring for the lookup order)."""
    url, stop = _provide_redis(_local_cluster)
    yield url
    if stop is not None:
        stop()


# --------------------------------------------------------------------------- helpers


def unique_topic_name(hint: str = "t") -> str:
    """A Kafka-legal topic name unique to this call: ``<hint>-<12 hex>`` (hint sanitized, <= 200 chars)."""
    base = re.sub(r"[^A-Za-z0-9._-]+", "-", hint).strip("-.") or "t"
    return f"{base[:200]}-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def unique_name(request) -> str:
    """Per-test unique string, safe for topic names, consumer groups and Redis key prefixes."""
    return unique_topic_name(f"it-{request.node.name}")


@pytest.fixture(scope="session")
def kafka_admin(kafka_bootstrap):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": kafka_bootstrap})


def create_topics(admin, names: list[str], partitions: int = 1, config: Optional[dict] = None,
                  timeout: float = 30.0) -> None:
    """Create topics (replication factor 1) and wait until every partition has a leader."""
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]  # re-exported, not in __all__

    futures = admin.create_topics(
        [NewTopic(n, num_partitions=partitions, replication_factor=1, config=dict(config or {})) for n in names],
        operation_timeout=timeout, request_timeout=timeout,
    )
    for fut in futures.values():
        fut.result(timeout=timeout)  # raises KafkaException on failure
    deadline = time.monotonic() + timeout
    pending = set(names)
    while pending:
        md = admin.list_topics(timeout=5)
        for n in list(pending):
            t = md.topics.get(n)
            if t is not None and t.error is None and len(t.partitions) == partitions and all(
                p.leader >= 0 for p in t.partitions.values()
            ):
                pending.discard(n)
        if pending:
            if time.monotonic() > deadline:
                raise TimeoutError(f"topics without leaders after {timeout}s: {sorted(pending)}")
            time.sleep(0.1)


def delete_topics(admin, names: list[str], timeout: float = 30.0) -> None:
    if not names:
        return
    for fut in admin.delete_topics(list(names), operation_timeout=timeout, request_timeout=timeout).values():
        try:
            fut.result(timeout=timeout)
        except Exception:
            pass  # best effort: already gone, or the broker is shutting down


@pytest.fixture
def make_topic(kafka_admin, request):
    """Factory: ``make_topic(hint=None, partitions=1, config=None) -> name``; creates a uniquely named
    topic (default hint: the test name), waits for leaders, and deletes it after the test."""
    created: list[str] = []

    def _make(hint: Optional[str] = None, partitions: int = 1, config: Optional[dict] = None) -> str:
        name = unique_topic_name(hint or f"it-{request.node.name}")
        create_topics(kafka_admin, [name], partitions=partitions, config=config)
        created.append(name)
        return name

    yield _make
    delete_topics(kafka_admin, created)


@pytest.fixture(scope="session")
def secure_cluster():
    """A Kafka broker with SASL_SSL (SCRAM-SHA-512) and a redis-server with TLS and ACL users
    (:class:`infra.secure_cluster.SecureCluster`), local processes on their own random ports,
    certificates and secrets in a temp dir; started on first use, stopped at the session's end.
    ``client_env(kafka_user, redis_user)`` gives the environment of a client (docs/security.md)."""
    from infra.local_cluster import LocalClusterError
    from infra.secure_cluster import SecureCluster

    try:
        cluster = SecureCluster.start()
    except LocalClusterError as e:
        _fail("secure Kafka/Redis", [f"infra.secure_cluster: {e}"], "Needs openssl, java and redis-server (TLS).")
    assert cluster.kafka is not None   # started
    _PROVENANCE["secure"] = (f"kafka {cluster.kafka_bootstrap} (SASL_SSL, ready in "
                             f"{cluster.kafka.startup_seconds:.1f}s), redis {cluster.redis_url} (TLS, ACL users)")
    yield cluster
    cluster.stop()


@pytest.fixture
def redis_client(redis_url):
    """A ``redis.Redis`` on ``redis_url`` (bytes responses). Not flushed: prefix keys with ``unique_name``."""
    import redis

    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()
