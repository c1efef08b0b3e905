"""A throw-away Kafka broker with SASL (SCRAM-SHA-512) over TLS and a redis-server with ACL users,
passwords and TLS, as local processes (docs/security.md).

The secure twin of :mod:`infra.local_cluster` (same jars, same process handling): certificates
from ``scripts/gen-certs.sh`` (a CA of its own, a server certificate for 127.0.0.1/localhost, client
certificates), the planner's plan-signing key pair, random passwords for the Kafka SCRAM users (each with
the ACLs of ``infra/kafka_acls.py``) and the Redis ACL users (``infra/redis/users.acl.template``), a
planner API token, all in files of mode 600 in one directory.

    from infra.secure_cluster import SecureCluster
    with SecureCluster.start() as c:
        c.kafka_bootstrap                   # "127.0.0.1:41234" (SASL_SSL)
        c.redis_url                         # "rediss://127.0.0.1:40321/0"
        c.client_env("joinlib-node", "joinlib-node")   # KAFKA_SECURITY_PROTOCOL=..., REDIS_PASSWORD_FILE=..., ...

``python -m infra.secure_cluster prepare DIR`` only writes the certificates, passwords, token and
ACL file (what ``scripts/cluster.sh up-secure`` runs first; existing ones are kept);
``prepare .secure-compose --compose`` does it for docker-compose.secure.yml (certificates also for
the hosts ``kafka`` and ``redis``, files readable by the containers' users).
"""
from __future__ import annotations

import os
import secrets
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from infra.local_cluster import (
    HOST,
    INFRA_DIR,
    REPO_ROOT,
    KafkaProcess,
    LocalClusterError,
    RedisProcess,
    free_port,
    start_kafka,
    start_redis,
)

SECURE_TEMPLATE = INFRA_DIR / "kafka" / "server-secure.properties.template"
ACL_TEMPLATE = INFRA_DIR / "redis" / "users.acl.template"
GEN_CERTS = REPO_ROOT / "scripts" / "gen-certs.sh"
MECHANISM = "SCRAM-SHA-512"
KAFKA_ADMIN = "admin"  # the broker's own user (inter-broker traffic)
KAFKA_USERS = (KAFKA_ADMIN, "joinlib-node", "joinlib-planner", "joinlib-source", "joinlib-spark", "joinlib-cli")
REDIS_USERS = ("joinlib-admin", "joinlib-node", "joinlib-progressive")


@dataclass(frozen=True)
class Secrets:
    """The files of one secure cluster: certificates, one password file per user, the API token."""

    dir: Path

    @property
    def ca(self) -> Path:
        return self.dir / "ca.crt"

    def kafka_password_file(self, user: str) -> Path:
        return self.dir / f"kafka-{user}.password"

    def redis_password_file(self, user: str) -> Path:
        return self.dir / f"redis-{user}.password"

    @property
    def token_file(self) -> Path:
        return self.dir / "planner.token"

    @property
    def plan_signing_key(self) -> Path:
        """The planner's Ed25519 key signing plan and stop messages (joinlib/adapters/plan_signing.py)."""
        return self.dir / "plan-signing.key"

    @property
    def plan_verify_key(self) -> Path:
        return self.dir / "plan-signing.pub"

    @property
    def acl_file(self) -> Path:
        return self.dir / "users.acl"

    def client_cert(self, user: str) -> Path:
        """``user``'s client certificate (CN=``user``) for the mutual-TLS listener; its key is :meth:`client_key`."""
        return self.dir / f"client-{user}.crt"

    def client_key(self, user: str) -> Path:
        return self.dir / f"client-{user}.key"

    def kafka_password(self, user: str) -> str:
        return self.kafka_password_file(user).read_text().strip()

    def redis_password(self, user: str) -> str:
        return self.redis_password_file(user).read_text().strip()

    def kafka_client_conf(self, user: str = KAFKA_ADMIN) -> dict[str, str]:
        """librdkafka settings of ``user`` (for checks and tests; services read the environment)."""
        return {"security.protocol": "SASL_SSL", "sasl.mechanism": MECHANISM, "sasl.username": user,
                "sasl.password": self.kafka_password(user), "ssl.ca.location": str(self.ca)}

    def kafka_mtls_conf(self, user: str) -> dict[str, str]:
        """librdkafka settings of ``user`` on the mutual-TLS listener (no password: the certificate names it)."""
        return {"security.protocol": "SSL", "ssl.ca.location": str(self.ca),
                "ssl.certificate.location": str(self.client_cert(user)), "ssl.key.location": str(self.client_key(user))}

    def scram_format_args(self) -> tuple[str, ...]:
        """``kafka-storage format`` arguments creating every Kafka user's SCRAM credential."""
        args: list[str] = []
        for user in KAFKA_USERS:
            args += ["--add-scram", f"{MECHANISM}=[name={user},password={self.kafka_password(user)}]"]
        return tuple(args)


def _write_secret(path: Path, value: str) -> None:
    if not path.exists():
        path.write_text(value + "\n")
    path.chmod(0o600)


def prepare(directory: Path, hosts: tuple[str, ...] = (), *, shared: bool = False) -> Secrets:
    """Certificates (for 127.0.0.1, localhost and ``hosts``), passwords (hex, 32 characters), the
    planner token and the Redis ACL file in ``directory`` (mode 700, files 600); what exists already
    is kept (the ACL file is re-rendered). ``shared``: files 644, directory 755, for compose, whose
    file secrets are bind mounts that keep the host's owner and mode (docker-compose.secure.yml)."""
    directory = Path(directory).resolve()
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    clients = " ".join(u for u in KAFKA_USERS if u != KAFKA_ADMIN)   # client certificates for mutual TLS
    res = subprocess.run(["bash", str(GEN_CERTS), str(directory), *hosts], capture_output=True, text=True,
                         env={**os.environ, "CLIENTS": clients})
    if res.returncode != 0:
        raise LocalClusterError(f"generating certificates failed:\n{res.stderr[-2000:]}")
    s = Secrets(directory)
    for user in KAFKA_USERS:
        _write_secret(s.kafka_password_file(user), secrets.token_hex(16))
    for user in REDIS_USERS:
        _write_secret(s.redis_password_file(user), secrets.token_hex(16))
    _write_secret(s.token_file, secrets.token_urlsafe(32))
    from joinlib.adapters.plan_signing import generate
    generate(s.plan_signing_key, s.plan_verify_key)
    acl = ACL_TEMPLATE.read_text()
    for user in REDIS_USERS:
        acl = acl.replace(f"@{user.removeprefix('joinlib-').upper()}_PASSWORD@", s.redis_password(user))
    # an ACL file has no comments: keep the user lines only
    s.acl_file.write_text("".join(line + "\n" for line in acl.splitlines() if line.startswith("user ")))
    s.acl_file.chmod(0o600)
    if shared:
        directory.chmod(0o755)
        for f in directory.iterdir():
            f.chmod(0o644)
    return s


def _kafka_ready(s: Secrets):
    def ready(bootstrap: str) -> bool:
        from confluent_kafka.admin import AdminClient
        try:
            admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 2000,
                                 **s.kafka_client_conf()})
            return bool(admin.list_topics(timeout=2).brokers)
        except Exception:
            return False
    return ready


def _redis_ping(s: Secrets):
    def ping(port: int) -> bool:
        import redis
        try:
            return bool(redis.Redis(host=HOST, port=port, ssl=True, ssl_ca_certs=str(s.ca),
                                    username="joinlib-admin", password=s.redis_password("joinlib-admin"),
                                    socket_timeout=1, socket_connect_timeout=1).ping())
        except Exception:
            return False
    return ping


def redis_tls_args(s: Secrets, port: int) -> list[str]:
    """redis-server arguments: TLS only on ``port`` (no plain port), ACL users from the file."""
    return ["--port", "0", "--tls-port", str(port), "--tls-cert-file", str(s.dir / "server.crt"),
            "--tls-key-file", str(s.dir / "server.key"), "--tls-ca-cert-file", str(s.ca),
            "--tls-auth-clients", "no", "--aclfile", str(s.acl_file)]


def start_secure_kafka(workdir: Path, s: Secrets, ssl_port: int, **kw) -> KafkaProcess:
    """The secure broker: SASL_SSL on its port, mutual TLS on ``ssl_port``."""
    return start_kafka(workdir, template=SECURE_TEMPLATE, format_args=s.scram_format_args(), ready=_kafka_ready(s),
                       substitutions={"CERT_DIR": str(s.dir), "ADMIN_USER": KAFKA_ADMIN, "SSL_PORT": str(ssl_port),
                                      "ADMIN_PASSWORD": s.kafka_password(KAFKA_ADMIN)}, **kw)


def grant_service_acls(bootstrap: str, s: Secrets) -> None:
    """The ACLs of every service principal (infra/kafka_acls.py), created as the super user ``admin``."""
    from infra.kafka_acls import admin_client, apply, service_grants
    apply(admin_client(bootstrap, s.dir), service_grants())


def start_secure_redis(workdir: Path, s: Secrets, **kw) -> RedisProcess:
    return start_redis(workdir, extra_args=lambda p: redis_tls_args(s, p), ping=_redis_ping(s), **kw)


@dataclass
class SecureCluster:
    workdir: Path
    secrets: Secrets
    kafka: Optional[KafkaProcess] = None
    redis: Optional[RedisProcess] = None
    mtls_port: int = 0   # the broker's mutual-TLS (SSL, client certificate required) listener
    _own_workdir: bool = field(default=True, repr=False)

    @classmethod
    def start(cls, kafka: bool = True, redis: bool = True, workdir: Optional[Path] = None) -> "SecureCluster":
        own = workdir is None
        wd = Path(tempfile.mkdtemp(prefix="joinlib-secure-")) if workdir is None else Path(workdir)
        c = cls(wd, prepare(wd / "secrets"), _own_workdir=own)
        try:
            if kafka:
                c.mtls_port = free_port()
                c.kafka = start_secure_kafka(wd, c.secrets, c.mtls_port)
                grant_service_acls(c.kafka.bootstrap, c.secrets)
            if redis:
                c.redis = start_secure_redis(wd, c.secrets)
        except BaseException:
            c.stop()
            raise
        return c

    @property
    def kafka_bootstrap(self) -> str:
        if self.kafka is None:
            raise LocalClusterError("the secure Kafka was not started")
        return self.kafka.bootstrap

    @property
    def redis_url(self) -> str:
        if self.redis is None:
            raise LocalClusterError("the secure Redis was not started")
        return f"rediss://{HOST}:{self.redis.port}/0"

    @property
    def kafka_mtls_bootstrap(self) -> str:
        """The mutual-TLS listener (SSL, a client certificate of the cluster's CA required)."""
        if self.kafka is None:
            raise LocalClusterError("the secure Kafka was not started")
        return f"{HOST}:{self.mtls_port}"

    def mtls_env(self, kafka_user: str = "joinlib-cli") -> dict[str, str]:
        """The Kafka settings of ``kafka_user`` on the mutual-TLS listener (instead of SCRAM)."""
        s = self.secrets
        return {"KAFKA_BOOTSTRAP_SERVERS": self.kafka_mtls_bootstrap, "KAFKA_SECURITY_PROTOCOL": "SSL",
                "KAFKA_SSL_CA_FILE": str(s.ca), "KAFKA_SSL_CERT_FILE": str(s.client_cert(kafka_user)),
                "KAFKA_SSL_KEY_FILE": str(s.client_key(kafka_user))}

    def client_env(self, kafka_user: str = "joinlib-cli", redis_user: str = "joinlib-node") -> dict[str, str]:
        """The environment a joinlib client of these servers needs (secrets as ``*_FILE``)."""
        s = self.secrets
        env = {"JOINLIB_PLANNER_TOKEN_FILE": str(s.token_file),
               "JOINLIB_PLAN_SIGNING_KEY_FILE": str(s.plan_signing_key),
               "JOINLIB_PLAN_VERIFY_KEY_FILE": str(s.plan_verify_key)}
        if self.kafka is not None:
            env.update(KAFKA_BOOTSTRAP_SERVERS=self.kafka_bootstrap, KAFKA_SECURITY_PROTOCOL="SASL_SSL",
                       KAFKA_SASL_MECHANISM=MECHANISM, KAFKA_SASL_USERNAME=kafka_user,
                       KAFKA_SASL_PASSWORD_FILE=str(s.kafka_password_file(kafka_user)), KAFKA_SSL_CA_FILE=str(s.ca))
        if self.redis is not None:
            env.update(REDIS_URL=self.redis_url, REDIS_USERNAME=redis_user,
                       REDIS_PASSWORD_FILE=str(s.redis_password_file(redis_user)), REDIS_SSL_CA_FILE=str(s.ca))
        return env

    def stop(self) -> None:
        for proc in (self.kafka, self.redis):
            if proc is not None:
                proc.stop()
        if self._own_workdir:
            import shutil
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> "SecureCluster":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "prepare":
        print(prepare(Path(argv[1])).dir)
        return 0
    if len(argv) == 3 and argv[0] == "prepare" and argv[2] == "--compose":
        print(prepare(Path(argv[1]), ("kafka", "redis"), shared=True).dir)
        return 0
    print("usage: python -m infra.secure_cluster prepare DIR [--compose]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
