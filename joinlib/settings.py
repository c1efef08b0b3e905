"""Everything joinlib reads from the environment: the client security settings, read at the service edge
from the environment or files (docs/security.md: Kafka SASL/TLS, Redis AUTH/TLS and the planner API's bearer
token), and the services' own variables (:class:`ServiceEnv`, :class:`NodeSettings`: the broker, Redis, site,
ports, checkpoint and scale-out settings), read once at an entry point (``services/*/__main__.py``,
``joinlib/cli/``) and handed on.  No other module reads ``os.environ``.

This module only reads variables and files and builds plain dicts; the adapters hand them to the
clients (``joinlib.adapters.kafka``, ``joinlib.adapters.redis_store``, ``services.spark.common``)
and the CLI (``joinlib.cli.live``) sends the token. It lives in the core because the CLI, which
may not import adapters, needs the token too.

Every secret ``NAME`` is taken from ``$NAME`` or, when that is unset, from the file named by
``$NAME_FILE`` (Kubernetes Secrets and compose secrets are mounted as files); one trailing newline
is dropped. Secrets never appear in ``repr``, :meth:`KafkaSecurity.describe`, :func:`mask` or
:func:`redact_url` output, nor in the error messages raised here.

=================================  ==========================================================
variable                           meaning
=================================  ==========================================================
``KAFKA_SECURITY_PROTOCOL``        ``PLAINTEXT`` (default), ``SSL``, ``SASL_PLAINTEXT``,
                                   ``SASL_SSL`` (default when ``KAFKA_SASL_USERNAME`` is set)
``KAFKA_SASL_MECHANISM``           ``SCRAM-SHA-512`` (default), ``SCRAM-SHA-256``, ``PLAIN``
``KAFKA_SASL_USERNAME``            SASL user
``KAFKA_SASL_PASSWORD[_FILE]``     its password (secret)
``KAFKA_SSL_CA_FILE``              PEM CA bundle to verify the brokers (default: system CAs)
``KAFKA_SSL_VERIFY_HOSTNAME``      ``true`` (default) / ``false``
``REDIS_USERNAME``                 Redis ACL user (default: from the URL, else ``default``)
``REDIS_PASSWORD[_FILE]``          its password (secret; overrides one in the URL)
``REDIS_SSL_CA_FILE``              PEM CA bundle for ``rediss://`` URLs
``JOINLIB_PLANNER_TOKEN[_FILE]``   bearer token of the planner's HTTP API (server and CLI)
``KAFKA_SSL_CERT_FILE``            mutual TLS: the client's certificate (PEM) ...
``KAFKA_SSL_KEY_FILE``             ... and its unencrypted key (PEM)
``JOINLIB_TLS_CERT_FILE``          HTTPS certificate (PEM) of the planner API and ``/metrics`` ...
``JOINLIB_TLS_KEY_FILE``           ... and its key
``JOINLIB_METRICS_TOKEN[_FILE]``   bearer token ``/metrics`` requires (secret)
``JOINLIB_PLANNER_CA_FILE``        PEM CA the CLI trusts for an ``https://`` planner
``JOINLIB_PLAN_SIGNING_KEY_FILE``  the planner's Ed25519 key signing plan/stop messages (PEM)
``JOINLIB_PLAN_VERIFY_KEY_FILE``   its public key, with which nodes check them (PEM)
=================================  ==========================================================
"""
from __future__ import annotations

import hmac
import os
import re
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional
from urllib.parse import urlsplit, urlunsplit

from joinlib.errors import ClusterError, JoinlibError

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN")
MASK = "***"
# keys of client configuration dicts whose values are secrets (librdkafka, Spark's kafka.*, redis-py)
_SECRET_KEY = re.compile(r"(password|secret|token|jaas|keystore\.key)", re.IGNORECASE)


class SettingsError(JoinlibError):
    """A security setting is missing, unreadable or inconsistent (names the variable, never the value)."""


def secret(name: str, environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """``$name``, else the content of the file ``$name_FILE`` (one trailing newline dropped), else None."""
    env = os.environ if environ is None else environ
    value = env.get(name, "")
    if value:
        return value
    path = env.get(f"{name}_FILE", "").strip()
    if not path:
        return None
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise SettingsError(f"{name}_FILE={path}: cannot read it ({e.strerror or type(e).__name__})") from None
    text = text[:-1] if text.endswith("\n") else text
    if not text:
        raise SettingsError(f"{name}_FILE={path} is empty")
    return text


def _plain(name: str, env: Mapping[str, str]) -> Optional[str]:
    v = env.get(name, "").strip()
    return v or None


def _flag(name: str, env: Mapping[str, str], default: bool) -> bool:
    v = env.get(name, "").strip().lower()
    if not v:
        return default
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off"):
        return False
    raise SettingsError(f"{name}={v!r}: expected true or false")


def _existing_file(name: str, path: Optional[str]) -> Optional[str]:
    if path is not None and not Path(path).is_file():
        raise SettingsError(f"{name}={path}: no such file")
    return path


@dataclass(frozen=True)
class KafkaSecurity:
    """How a Kafka client authenticates and encrypts; ``PLAINTEXT`` (nothing) by default."""

    protocol: str = "PLAINTEXT"
    mechanism: str = "SCRAM-SHA-512"
    username: Optional[str] = None
    password: Optional[str] = field(default=None, repr=False)
    ca_file: Optional[str] = None
    verify_hostname: bool = True
    cert_file: Optional[str] = None   # mutual TLS: the client's certificate (PEM), its CN the Kafka user
    key_file: Optional[str] = None    # ... and its private key (PEM, unencrypted)

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise SettingsError(f"KAFKA_SECURITY_PROTOCOL={self.protocol!r}: expected one of {', '.join(PROTOCOLS)}")
        if (self.cert_file is None) != (self.key_file is None):
            raise SettingsError("a client certificate needs both KAFKA_SSL_CERT_FILE and KAFKA_SSL_KEY_FILE")
        if self.cert_file is not None and not self.tls:
            raise SettingsError(f"KAFKA_SSL_CERT_FILE needs KAFKA_SECURITY_PROTOCOL=SSL (or SASL_SSL), "
                                f"not {self.protocol}")
        if self.sasl:
            if self.mechanism not in MECHANISMS:
                raise SettingsError(f"KAFKA_SASL_MECHANISM={self.mechanism!r}: expected one of {', '.join(MECHANISMS)}")
            if not self.username or not self.password:
                raise SettingsError(f"KAFKA_SECURITY_PROTOCOL={self.protocol} needs KAFKA_SASL_USERNAME and "
                                    "KAFKA_SASL_PASSWORD (or KAFKA_SASL_PASSWORD_FILE)")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @classmethod
    def from_env(cls, environ: Optional[Mapping[str, str]] = None) -> "KafkaSecurity":
        env = os.environ if environ is None else environ
        username = _plain("KAFKA_SASL_USERNAME", env)
        protocol = (_plain("KAFKA_SECURITY_PROTOCOL", env) or ("SASL_SSL" if username else "PLAINTEXT")).upper()
        sasl = protocol.startswith("SASL_")
        return cls(protocol=protocol,
                   mechanism=(_plain("KAFKA_SASL_MECHANISM", env) or "SCRAM-SHA-512").upper(),
                   username=username if sasl else None,
                   password=secret("KAFKA_SASL_PASSWORD", env) if sasl else None,
                   ca_file=_existing_file("KAFKA_SSL_CA_FILE", _plain("KAFKA_SSL_CA_FILE", env)),
                   verify_hostname=_flag("KAFKA_SSL_VERIFY_HOSTNAME", env, True),
                   cert_file=_existing_file("KAFKA_SSL_CERT_FILE", _plain("KAFKA_SSL_CERT_FILE", env)),
                   key_file=_existing_file("KAFKA_SSL_KEY_FILE", _plain("KAFKA_SSL_KEY_FILE", env)))

    def librdkafka(self) -> dict[str, str]:
        """Settings for confluent-kafka clients (empty for PLAINTEXT)."""
        conf: dict[str, str] = {}
        if self.protocol == "PLAINTEXT":
            return conf
        conf["security.protocol"] = self.protocol
        if self.sasl:
            conf.update({"sasl.mechanism": self.mechanism, "sasl.username": self.username or "",
                         "sasl.password": self.password or ""})
        if self.tls:
            if self.ca_file:
                conf["ssl.ca.location"] = self.ca_file
            conf["ssl.endpoint.identification.algorithm"] = "https" if self.verify_hostname else "none"
        if self.cert_file and self.key_file:
            conf.update({"ssl.certificate.location": self.cert_file, "ssl.key.location": self.key_file})
        return conf

    def spark_options(self) -> dict[str, str]:
        """The same for Spark's Kafka source/sink (Java client settings prefixed with ``kafka.``)."""
        opts: dict[str, str] = {}
        if self.protocol == "PLAINTEXT":
            return opts
        opts["kafka.security.protocol"] = self.protocol
        if self.sasl:
            module = ("org.apache.kafka.common.security.plain.PlainLoginModule" if self.mechanism == "PLAIN"
                      else "org.apache.kafka.common.security.scram.ScramLoginModule")
            opts["kafka.sasl.mechanism"] = self.mechanism
            opts["kafka.sasl.jaas.config"] = (f'{module} required username="{_jaas(self.username or "")}" '
                                              f'password="{_jaas(self.password or "")}";')
        if self.tls:
            if self.ca_file:
                opts["kafka.ssl.truststore.type"] = "PEM"
                opts["kafka.ssl.truststore.location"] = self.ca_file
            opts["kafka.ssl.endpoint.identification.algorithm"] = "https" if self.verify_hostname else ""
        if self.cert_file and self.key_file:  # the Java client takes PEM key and chain as values
            opts.update({"kafka.ssl.keystore.type": "PEM",
                         "kafka.ssl.keystore.certificate.chain": Path(self.cert_file).read_text(),
                         "kafka.ssl.keystore.key": Path(self.key_file).read_text()})
        return opts

    def describe(self) -> str:
        """One line for logs, without the password."""
        if self.protocol == "PLAINTEXT":
            return "PLAINTEXT (no authentication, no encryption)"
        parts = [self.protocol]
        if self.sasl:
            parts.append(f"{self.mechanism} user {self.username} password {MASK}")
        if self.tls:
            parts.append(f"CA {self.ca_file or 'system'}" + ("" if self.verify_hostname else ", hostname not verified"))
        if self.cert_file:
            parts.append(f"client certificate {self.cert_file}")
        return ", ".join(parts)


def _jaas(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


@dataclass(frozen=True)
class RedisSecurity:
    """Redis ACL user and password, and the CA for ``rediss://`` (TLS) URLs."""

    username: Optional[str] = None
    password: Optional[str] = field(default=None, repr=False)
    ca_file: Optional[str] = None

    @classmethod
    def from_env(cls, environ: Optional[Mapping[str, str]] = None) -> "RedisSecurity":
        env = os.environ if environ is None else environ
        return cls(username=_plain("REDIS_USERNAME", env), password=secret("REDIS_PASSWORD", env),
                   ca_file=_existing_file("REDIS_SSL_CA_FILE", _plain("REDIS_SSL_CA_FILE", env)))

    def client_kwargs(self, url: str) -> dict[str, str]:
        """Keyword arguments for ``redis.Redis.from_url(url, ...)`` (values in the URL stay unless set here)."""
        kw: dict[str, str] = {}
        if self.username:
            kw["username"] = self.username
        if self.password:
            kw["password"] = self.password
        if self.ca_file and url.startswith("rediss://"):
            kw["ssl_ca_certs"] = self.ca_file
        return kw


def authorized(header: Optional[str], token: Optional[str]) -> bool:
    """Whether an ``Authorization`` header carries ``Bearer <token>``, compared in constant time;
    always true without a token (an open endpoint, the local default; docs/security.md)."""
    if token is None:
        return True
    scheme, _, given = (header or "").strip().partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(given.strip().encode("utf-8"), token.encode("utf-8"))


@dataclass(frozen=True)
class HttpSecurity:
    """The services' HTTP endpoints (the planner API, every ``/metrics``): HTTPS with this certificate and
    key when set, and the bearer token ``/metrics`` requires (the API has its own, :func:`planner_token`)."""

    cert_file: Optional[str] = None
    key_file: Optional[str] = None
    metrics_token: Optional[str] = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if (self.cert_file is None) != (self.key_file is None):
            raise SettingsError("HTTPS needs both JOINLIB_TLS_CERT_FILE and JOINLIB_TLS_KEY_FILE")

    @classmethod
    def from_env(cls, environ: Optional[Mapping[str, str]] = None) -> "HttpSecurity":
        env = os.environ if environ is None else environ
        token = secret("JOINLIB_METRICS_TOKEN", env)
        return cls(cert_file=_existing_file("JOINLIB_TLS_CERT_FILE", _plain("JOINLIB_TLS_CERT_FILE", env)),
                   key_file=_existing_file("JOINLIB_TLS_KEY_FILE", _plain("JOINLIB_TLS_KEY_FILE", env)),
                   metrics_token=token.strip() if token and token.strip() else None)

    @property
    def scheme(self) -> str:
        return "https" if self.cert_file else "http"

    def server_context(self) -> Optional[ssl.SSLContext]:
        """A TLS server context (TLS 1.2 or later) with the certificate, None for plain HTTP."""
        if self.cert_file is None:
            return None
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            ctx.load_cert_chain(self.cert_file, self.key_file)
        except (ssl.SSLError, OSError) as e:
            raise SettingsError(f"JOINLIB_TLS_CERT_FILE={self.cert_file} / JOINLIB_TLS_KEY_FILE: cannot load the "
                                f"certificate and key ({getattr(e, 'reason', None) or e})") from None
        return ctx


def tls_server(server: Any, tls: Optional[ssl.SSLContext]) -> Any:
    """``server`` (a :class:`socketserver.TCPServer`, not serving yet) over TLS with ``tls``; unchanged when None.
    The handshake runs in the request's thread (not in the accept loop, where a silent client would stall
    every other), and a failed one -- a plain-HTTP client, an untrusted certificate -- is not printed."""
    if tls is None:
        return server
    server.socket = tls.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
    report = server.handle_error

    def handle_error(request: Any, client_address: Any) -> None:
        import sys
        if not isinstance(sys.exc_info()[1], (ssl.SSLError, ConnectionError, TimeoutError)):
            report(request, client_address)
    server.handle_error = handle_error
    return server


def plan_key_files(environ: Optional[Mapping[str, str]] = None) -> tuple[Optional[str], Optional[str]]:
    """(``JOINLIB_PLAN_SIGNING_KEY_FILE``, ``JOINLIB_PLAN_VERIFY_KEY_FILE``): the planner's key signing plans and
    the public key checking them (:mod:`joinlib.adapters.plan_signing`); None where unset."""
    env = os.environ if environ is None else environ
    return _plain("JOINLIB_PLAN_SIGNING_KEY_FILE", env), _plain("JOINLIB_PLAN_VERIFY_KEY_FILE", env)


def planner_client_context(environ: Optional[Mapping[str, str]] = None) -> Optional[ssl.SSLContext]:
    """The CLI's TLS context for an ``https://`` planner: trusts ``JOINLIB_PLANNER_CA_FILE`` (PEM) when set,
    else None (the system's CAs)."""
    env = os.environ if environ is None else environ
    ca = _existing_file("JOINLIB_PLANNER_CA_FILE", _plain("JOINLIB_PLANNER_CA_FILE", env))
    return None if ca is None else ssl.create_default_context(cafile=ca)


def planner_token(environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """The planner API's bearer token (``JOINLIB_PLANNER_TOKEN[_FILE]``), None when there is none."""
    token = secret("JOINLIB_PLANNER_TOKEN", environ)
    token = token.strip() if token else None
    return token or None


def redact_url(url: Optional[str]) -> str:
    """``url`` with any password replaced by ``***`` (``redis://user:***@host:6379/0``)."""
    if not url:
        return ""
    try:
        parts = urlsplit(url)
    except ValueError:
        return MASK
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit(parts._replace(netloc=f"{user}:{MASK}@{host}"))


def mask(conf: Mapping[str, object]) -> dict[str, object]:
    """A copy of a client configuration with every secret value replaced by ``***`` (for dumps)."""
    out: dict[str, object] = {}
    for k, v in conf.items():
        if _SECRET_KEY.search(str(k)) and v not in (None, ""):
            out[k] = MASK
        elif isinstance(v, str) and "://" in v:
            out[k] = redact_url(v)
        else:
            out[k] = v
    return out


# ----------------------------------------------------------------------------- the services' environment

class SecretStr:
    """A secret that shows as ``**********`` in ``repr`` and ``str``; :meth:`get_secret_value` gives it.  The
    interface of pydantic's ``SecretStr``, without importing pydantic (~200 ms) into every command."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def get_secret_value(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "SecretStr('**********')"

    def __str__(self) -> str:
        return "**********"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SecretStr) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


def reveal(value: Optional[SecretStr]) -> Optional[str]:
    return None if value is None else value.get_secret_value()


#: how long a silent node instance keeps its plan partitions (joinlib.node.scale_out), in ms, default
#: :data:`SESSION_TIMEOUT_MS` (the broker's default group.min.session.timeout.ms: a lower value needs that
#: broker setting lowered too)
SESSION_TIMEOUT_ENV = "JOINLIB_SESSION_TIMEOUT_MS"
SESSION_TIMEOUT_MS = 6000
#: static membership of the scale-out groups (``group.instance.id``): a stable name of this instance (a
#: StatefulSet pod's name); unset: dynamic membership (docs/reliability.md "Fenced instances" has the trade-off)
GROUP_INSTANCE_ENV = "JOINLIB_GROUP_INSTANCE_ID"
# A test hook (tests/integration/test_drills.py): "N:S" pauses the N-th checkpoint of a run for S seconds
# after the producer flush and the state snapshot, before the Redis save -- a window in which a drill
# kills the node "during a checkpoint".  Unset (always, outside tests): no effect.
PAUSE_HOOK_ENV = "JOINLIB_TEST_CHECKPOINT_PAUSE"


def env_value(name: str, default: Optional[str] = None, environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """``$name`` stripped, or ``default`` when it is unset or blank."""
    env = os.environ if environ is None else environ
    return env.get(name, "").strip() or default


def _pause_hook(value: Optional[str]) -> Optional[tuple[int, float]]:
    try:
        n, s = (value or "").split(":")
        return int(n), float(s)
    except ValueError:
        return None


GC_GEN0_ENV = "JOINLIB_GC_GEN0"
#: a node's young-generation GC threshold: a node allocates a tuple per intermediate result and keeps them for a
#: step, and at Python's 700 the collector ran every ~700 of them over everything young (docs/runtime.md, "What an
#: operator costs per epoch")
GC_GEN0 = 50_000
MALLOC_TRIM_ENV = "JOINLIB_MALLOC_TRIM_S"
#: how often a node hands the C heap's free memory back to the system (glibc's malloc_trim): glibc returns only the
#: free memory at the top of its heap by itself, so each backlog a node works off left its RSS at that backlog's
#: high-water mark, a new step up with each bigger one (docs/reliability.md, "Memory growth while keeping up")
MALLOC_TRIM_S = 10.0


@dataclass(frozen=True)
class NodeSettings:
    """What a node service reads from the environment besides its command line, read once where the service
    starts (``python -m services.node``, the cluster runner) and handed to it."""

    session_timeout: Optional[str] = None                 # $JOINLIB_SESSION_TIMEOUT_MS, checked when used
    checkpoint_pause: Optional[tuple[int, float]] = None  # $JOINLIB_TEST_CHECKPOINT_PAUSE
    group_instance: Optional[str] = None                  # $JOINLIB_GROUP_INSTANCE_ID
    gc_gen0: Optional[str] = None                         # $JOINLIB_GC_GEN0, checked when used
    malloc_trim: Optional[str] = None                     # $JOINLIB_MALLOC_TRIM_S, checked when used

    @classmethod
    def from_env(cls, environ: Optional[Mapping[str, str]] = None) -> "NodeSettings":
        return cls(env_value(SESSION_TIMEOUT_ENV, None, environ),
                   _pause_hook(env_value(PAUSE_HOOK_ENV, None, environ)),
                   env_value(GROUP_INSTANCE_ENV, None, environ), env_value(GC_GEN0_ENV, None, environ),
                   env_value(MALLOC_TRIM_ENV, None, environ))

    @property
    def trim_every_s(self) -> float:
        """Seconds between two hand-backs of the C heap's free memory (:data:`MALLOC_TRIM_S`; 0: never); a
        :class:`~joinlib.errors.ClusterError` for a bad value."""
        raw = self.malloc_trim
        if not raw:
            return MALLOC_TRIM_S
        try:
            every = float(raw)
        except ValueError:
            every = -1.0
        if not every >= 0 or every == float("inf"):
            raise ClusterError(f"{MALLOC_TRIM_ENV}={raw!r}: expected seconds >= 0 (0: never)")
        return every

    @property
    def gc_threshold(self) -> int:
        """The allocations between two young-generation collections of Python's garbage collector in a node
        (:data:`GC_GEN0`; Python's own is 700); a :class:`~joinlib.errors.ClusterError` for a bad value."""
        raw = self.gc_gen0
        if not raw:
            return GC_GEN0
        if not raw.isdigit() or int(raw) < 1:
            raise ClusterError(f"{GC_GEN0_ENV}={raw!r}: expected a positive number of allocations (Python's is 700)")
        return int(raw)

    def group_config(self) -> dict[str, Any]:
        """The scale-out group consumer's membership settings: the session timeout, a heartbeat of at most a
        third of it, and ``group.instance.id`` when static membership is asked for."""
        session = self.session_timeout_ms
        conf: dict[str, Any] = {"session.timeout.ms": session, "heartbeat.interval.ms": min(500, session // 3)}
        if self.group_instance:
            if not re.fullmatch(r"[A-Za-z0-9._-]{1,200}", self.group_instance):
                raise ClusterError(f"{GROUP_INSTANCE_ENV}={self.group_instance!r}: expected a name of letters, "
                                   "digits, '.', '_' and '-' (a pod's name), unique among the site's instances")
            conf["group.instance.id"] = self.group_instance
        return conf

    @property
    def session_timeout_ms(self) -> int:
        """The scale-out group's session timeout; a :class:`~joinlib.errors.ClusterError` for a bad value
        (raised when a scaled-out plan runs, not when the node starts: a node that runs none never needs it)."""
        raw = self.session_timeout
        if not raw:
            return SESSION_TIMEOUT_MS
        if not raw.isdigit() or int(raw) < 1000:
            raise ClusterError(f"{SESSION_TIMEOUT_ENV}={raw!r}: expected milliseconds, at least 1000")
        return int(raw)


def session_timeout_ms(environ: Optional[Mapping[str, str]] = None) -> int:
    """$JOINLIB_SESSION_TIMEOUT_MS as :attr:`NodeSettings.session_timeout_ms` reads it."""
    return NodeSettings.from_env(environ).session_timeout_ms


@dataclass(frozen=True)
class ServiceEnv:
    """The environment the services and the command line read (docs/deploy.md; the Helm chart and
    docker-compose.yml set these names), read once at an entry point (:meth:`from_env`) and passed on.  Values are
    stripped, a blank one is unset; each service parses and checks the numbers itself, with its own messages."""

    kafka_bootstrap: Optional[str] = None        # KAFKA_BOOTSTRAP_SERVERS
    redis_url: Optional[SecretStr] = None        # REDIS_URL (a password in it is a secret)
    site: Optional[str] = None                   # JOINLIB_SITE
    metrics_port: Optional[str] = None           # METRICS_PORT
    planner_port: Optional[str] = None           # PLANNER_PORT
    planner_url: Optional[str] = None            # JOINLIB_PLANNER_URL (as set: not stripped)
    checkpoint_every_s: Optional[str] = None     # JOINLIB_CHECKPOINT_EVERY_S
    shared: Optional[str] = None                 # JOINLIB_SHARED
    node: NodeSettings = field(default_factory=NodeSettings)

    @classmethod
    def from_env(cls, environ: Optional[Mapping[str, str]] = None) -> "ServiceEnv":
        env = os.environ if environ is None else environ
        redis = env_value("REDIS_URL", None, env)
        return cls(env_value("KAFKA_BOOTSTRAP_SERVERS", None, env), None if redis is None else SecretStr(redis),
                   env_value("JOINLIB_SITE", None, env), env_value("METRICS_PORT", None, env),
                   env_value("PLANNER_PORT", None, env), env.get("JOINLIB_PLANNER_URL"),
                   env_value("JOINLIB_CHECKPOINT_EVERY_S", None, env), env_value("JOINLIB_SHARED", None, env),
                   NodeSettings.from_env(env))


def child_env(environ: Optional[Mapping[str, str]] = None, *, unset: tuple[str, ...] = (),
              **values: str) -> dict[str, str]:
    """The environment of a child process: this process's (or ``environ``) with ``values`` set and ``unset``
    removed."""
    env = dict(os.environ if environ is None else environ)
    env.update(values)
    for name in unset:
        env.pop(name, None)
    return env
