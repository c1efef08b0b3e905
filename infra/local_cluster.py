"""Start a throw-away Kafka broker (single-node KRaft) and redis-server as local processes.

The Python twin of ``scripts/cluster.sh up``: same jars cache, same broker config template
(``infra/kafka/server.properties.template``), same log config and Redis config, but on
random free loopback ports in a temporary directory, owned by the calling process and
stopped (and the directory removed) by :meth:`LocalCluster.stop` / the context manager.
The broker can be stopped and started again on its data (topics, records, group offsets kept):
:meth:`KafkaProcess.stop` / :meth:`KafkaProcess.start_again`, or :meth:`LocalCluster.restart_kafka`.
Used by ``tests/integration/conftest.py`` when no Kafka/Redis is given and Docker is absent.

    from infra.local_cluster import LocalCluster
    with LocalCluster.start() as c:
        c.kafka_bootstrap   # "127.0.0.1:41234"
        c.redis_url         # "redis://127.0.0.1:40321/0"

``python -m infra.local_cluster`` starts both, prints the env lines and runs until Ctrl-C.

Requirements: ``java`` (>= 11), ``redis-server``, and ``mvn`` the first time (to fill the
jars cache ``${JOINLIB_CACHE:-~/.cache/joinlib}/kafka-lib``); nothing needs root.
Children get SIGTERM when the starting thread dies (Linux ``PR_SET_PDEATHSIG``), so a
killed test run does not leave brokers behind.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import fcntl
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Optional

REPO_ROOT = Path(__file__).resolve().parent.parent
INFRA_DIR = REPO_ROOT / "infra"
POM = INFRA_DIR / "kafka" / "pom.xml"
LOG4J = INFRA_DIR / "kafka" / "log4j.properties"
SERVER_TEMPLATE = INFRA_DIR / "kafka" / "server.properties.template"
REDIS_CONF = INFRA_DIR / "redis" / "redis.conf"
# AOF with appendfsync always: what a Redis restart with the nodes' windows kept needs (docs/reliability.md)
REDIS_DURABLE_CONF = INFRA_DIR / "redis" / "redis-durable.conf"

HOST = "127.0.0.1"
READY_LINE = "Kafka Server started"
DEFAULT_HEAP_OPTS = "-Xms256m -Xmx512m"

INSTALL_HINT = (
    "Install the local cluster prerequisites with `bash scripts/cluster.sh install` "
    "(as root: apt-get install -y redis-server; needs java >= 11 and maven), "
    "or point the tests at running services with KAFKA_BOOTSTRAP_SERVERS / REDIS_URL, "
    "or provide a Docker engine for testcontainers."
)


class LocalClusterError(RuntimeError):
    """A local Kafka/Redis could not be provided (message says why and what to do)."""


class MissingToolError(LocalClusterError):
    """A required executable (java, mvn, redis-server) is not on PATH."""


# --------------------------------------------------------------------------- paths / tools


def cache_dir() -> Path:
    return Path(os.environ.get("JOINLIB_CACHE") or Path.home() / ".cache" / "joinlib")


def kafka_lib_dir() -> Path:
    return cache_dir() / "kafka-lib"


def _require(tool: str, hint: str) -> str:
    path = shutil.which(tool)
    if not path:
        raise MissingToolError(f"`{tool}` not found on PATH: {hint}")
    return path


def _pom_hash() -> str:
    # same value as `sha256sum infra/kafka/pom.xml | cut -c1-16` in scripts/cluster.sh
    return hashlib.sha256(POM.read_bytes()).hexdigest()[:16]


def _jars_cached(lib: Path) -> bool:
    stamp = lib / ".pom-sha256"
    return (
        stamp.is_file()
        and stamp.read_text().strip() == _pom_hash()
        and any(lib.glob("kafka_2.13-*.jar"))
    )


@contextlib.contextmanager
def _cache_lock() -> Iterator[None]:
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / "kafka-lib.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def ensure_kafka_jars() -> Path:
    """Return the Kafka classpath dir, fetching it with Maven first if it is not cached."""
    lib = kafka_lib_dir()
    if _jars_cached(lib):
        return lib
    with _cache_lock():
        if _jars_cached(lib):  # another process fetched it meanwhile
            return lib
        mvn = _require("mvn", "Maven is needed once to fetch the Kafka jars (apt-get install -y maven)")
        tmp = Path(tempfile.mkdtemp(prefix="kafka-lib.tmp.", dir=cache_dir()))
        cmd = [
            mvn, "-q", "-B", "-Dstyle.color=never", "-f", str(POM),
            "dependency:copy-dependencies", f"-DoutputDirectory={tmp}", "-DincludeScope=runtime",
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0 or not any(tmp.glob("kafka_2.13-*.jar")):
            shutil.rmtree(tmp, ignore_errors=True)
            out = (proc.stdout + proc.stderr).strip().splitlines()[-30:]
            raise LocalClusterError(
                "fetching the Kafka jars with Maven failed:\n  " + " ".join(cmd) + "\n" + "\n".join(out)
            )
        (tmp / ".pom-sha256").write_text(_pom_hash() + "\n")
        shutil.rmtree(lib, ignore_errors=True)
        tmp.rename(lib)
    return lib


def new_cluster_id() -> str:
    """A KRaft cluster id like `StorageTool random-uuid` prints (16 random bytes, base64url, no
    padding; Kafka's Uuid never starts with '-'). Saves a JVM start (~1 s) per broker."""
    while True:
        cid = base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _distinct_free_ports(n: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < n:
        p = free_port()
        if p not in ports:
            ports.append(p)
    return ports


def _tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"(no log at {path})"
    return f"----- last lines of {path} -----\n" + "\n".join(text[-lines:]) + "\n-----"


def _die_with_parent() -> None:  # runs in the child between fork and exec
    os.setsid()  # own session: a ^C in the terminal reaches pytest only, which then stops us cleanly
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _popen(cmd: list[str], log: Path, cwd: Path) -> subprocess.Popen:
    with open(log, "ab") as fh:
        return subprocess.Popen(
            cmd, cwd=cwd, stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
            start_new_session=not sys.platform.startswith("linux"),
        )


def _terminate(proc: Optional[subprocess.Popen], grace: float) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


# --------------------------------------------------------------------------- Kafka


@dataclass
class KafkaProcess:
    port: int
    controller_port: int
    workdir: Path
    proc: subprocess.Popen
    startup_seconds: float = 0.0

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def log(self) -> Path:
        return self.workdir / "kafka.log"

    def stop(self, grace: float = 15.0) -> None:
        _terminate(self.proc, grace)

    @property
    def running(self) -> bool:
        return self.proc.poll() is None

    def start_again(self, timeout: float = 90.0, ready: Optional[Callable[[str], bool]] = None) -> float:
        """Start the broker again (after :meth:`stop`) on the same data dir, cluster id and ports -- topics,
        records and consumer-group offsets are kept -- and wait until it serves metadata; returns the seconds
        it took.  A restart right after a stop may find its ports still held for a moment: retried."""
        if self.running:
            raise LocalClusterError(f"the broker on {self.bootstrap} is still running; stop it first")
        if not (self.workdir / "data" / "meta.properties").is_file():
            raise LocalClusterError(f"no formatted KRaft data in {self.workdir / 'data'} to start from")
        t0 = time.monotonic()
        deadline = t0 + timeout
        while True:
            since = _log_size(self.log)
            self.proc = _launch_kafka(self.workdir, self.log)
            if _wait_ready(self, ready or _kafka_ready, deadline, retry_bind=True, since=since):
                self.startup_seconds = time.monotonic() - t0
                return self.startup_seconds
            time.sleep(0.5)   # the old process's ports not yet free: try again

    def restart(self, grace: float = 30.0, timeout: float = 90.0) -> float:
        """:meth:`stop` (SIGTERM: a controlled shutdown) then :meth:`start_again`."""
        self.stop(grace)
        return self.start_again(timeout)


def _launch_kafka(wd: Path, log: Path) -> subprocess.Popen:
    java = _require("java", "Kafka needs a JRE >= 11 (apt-get install -y openjdk-17-jre-headless)")
    cp = f"{ensure_kafka_jars()}/*"
    return _popen([java, *_java_opts(), "-cp", cp, "kafka.Kafka", str(wd / "server.properties")], log, wd)


def _log_size(log: Path) -> int:
    try:
        return log.stat().st_size
    except OSError:
        return 0


def _wait_ready(kafka: KafkaProcess, ready: Callable[[str], bool], deadline: float, retry_bind: bool,
                since: int = 0) -> bool:
    """Wait for the ready line (in the log after byte ``since``: a restarted broker appends to its log) and
    ``ready``; False: the broker exited on a port in use and ``retry_bind`` (the caller tries again); a
    LocalClusterError for any other exit or the deadline."""
    proc, log = kafka.proc, kafka.log

    def text() -> str:
        with open(log, "rb") as fh:
            fh.seek(since)
            return fh.read().decode(errors="replace")
    seen_line = False
    while True:
        if proc.poll() is not None:
            if retry_bind and "Address already in use" in text() and time.monotonic() < deadline:
                return False
            raise LocalClusterError(f"Kafka exited with code {proc.returncode} during startup\n{_tail(log)}")
        if not seen_line:
            try:
                seen_line = READY_LINE in text()
            except OSError:
                pass
        if seen_line and ready(kafka.bootstrap):
            return True
        if time.monotonic() > deadline:
            kafka.stop(grace=5)
            raise LocalClusterError(f"Kafka not ready before its deadline\n{_tail(log)}")
        time.sleep(0.1)


def _java_opts() -> list[str]:
    heap = os.environ.get("KAFKA_HEAP_OPTS", DEFAULT_HEAP_OPTS).split()
    extra = os.environ.get("KAFKA_JVM_EXTRA_OPTS", "").split()
    return heap + [
        "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-Djava.awt.headless=true",
        f"-Dlog4j.configuration=file:{LOG4J}",
    ] + extra


def _kafka_ready(bootstrap: str) -> bool:
    try:
        from confluent_kafka.admin import AdminClient
    except ImportError:  # the log line is enough then
        return True
    try:
        md = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 2000}).list_topics(timeout=2)
        return bool(md.brokers)
    except Exception:
        return False


def _render(template: Path, substitutions: dict[str, str]) -> str:
    text = Path(template).read_text()
    for key, value in substitutions.items():
        text = text.replace(f"@{key}@", value)
    return text


def start_kafka(workdir: Path, port: Optional[int] = None, controller_port: Optional[int] = None,
                timeout: float = 90.0, attempts: int = 3, *, template: Path = SERVER_TEMPLATE,
                substitutions: Optional[dict[str, str]] = None, format_args: tuple[str, ...] = (),
                ready: Optional[Callable[[str], bool]] = None) -> KafkaProcess:
    """Format a fresh KRaft data dir under ``workdir`` and start a broker; wait until it serves metadata.

    ``template`` (with extra ``@KEY@`` ``substitutions``), ``format_args`` (e.g. ``--add-scram ...``)
    and ``ready`` (a readiness check of the bootstrap address) serve the secure broker of
    ``infra/secure_cluster.py``."""
    ready = ready or _kafka_ready
    java = _require("java", "Kafka needs a JRE >= 11 (apt-get install -y openjdk-17-jre-headless)")
    cp = f"{ensure_kafka_jars()}/*"
    opts = _java_opts()
    last_error = ""
    for attempt in range(attempts):
        kp, cport = (port, controller_port) if port and controller_port else _distinct_free_ports(2)
        wd = Path(workdir) / (f"kafka-{attempt}" if attempt else "kafka")
        shutil.rmtree(wd, ignore_errors=True)
        (wd / "data").mkdir(parents=True)
        props = (
            _render(template, substitutions or {})
            .replace("@HOST@", HOST)
            .replace("@KAFKA_PORT@", str(kp))
            .replace("@CONTROLLER_PORT@", str(cport))
            .replace("@DATA_DIR@", str(wd / "data"))
        )
        (wd / "server.properties").write_text(props)
        (wd / "server.properties").chmod(0o600)  # the secure broker's file holds its SASL password
        t0 = time.monotonic()
        cluster_id = new_cluster_id()
        fmt = subprocess.run(
            [java, *opts, "-cp", cp, "kafka.tools.StorageTool", "format", "-t", cluster_id,
             "-c", str(wd / "server.properties"), "--ignore-formatted", *format_args],
            capture_output=True, text=True,
        )
        if fmt.returncode != 0:
            raise LocalClusterError(f"formatting the KRaft storage failed:\n{(fmt.stdout + fmt.stderr)[-3000:]}")
        log = wd / "kafka.log"
        kafka = KafkaProcess(kp, cport, wd, _launch_kafka(wd, log))
        if _wait_ready(kafka, ready, time.monotonic() + timeout, retry_bind=not (port and controller_port)):
            kafka.startup_seconds = time.monotonic() - t0
            return kafka
        last_error = f"Kafka exited during startup: a port was taken\n{_tail(log)}"   # retry with new ports
    raise LocalClusterError(last_error)


# --------------------------------------------------------------------------- Redis


@dataclass
class RedisProcess:
    port: int
    workdir: Path
    proc: subprocess.Popen
    startup_seconds: float = 0.0
    conf: Path = REDIS_CONF

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.port}/0"

    @property
    def log(self) -> Path:
        return self.workdir / "redis.log"

    def stop(self, grace: float = 10.0) -> None:
        _terminate(self.proc, grace)

    def kill(self) -> None:
        """SIGKILL, as a crash: with the durable config every acknowledged write is in its AOF."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def start_again(self, timeout: float = 30.0) -> float:
        """Start redis-server again (after :meth:`kill` or :meth:`stop`) on the same dir, port and config -- with
        :data:`REDIS_DURABLE_CONF` its data are kept -- and wait for PING; returns the seconds it took.  Not for a
        server started with ``extra_args`` (TLS, ACLs): those are not repeated."""
        if self.proc.poll() is None:
            raise LocalClusterError(f"redis-server on port {self.port} is still running; stop it first")
        t0 = time.monotonic()
        wd = self.workdir
        self.proc = _popen(_redis_cmd(self.conf, self.port, wd), wd / "redis.stdout", wd)
        while not _redis_ping(self.port):
            if self.proc.poll() is not None or time.monotonic() - t0 > timeout:
                raise LocalClusterError(f"redis-server did not start again on port {self.port}\n{_tail(self.log)}")
            time.sleep(0.05)
        self.startup_seconds = time.monotonic() - t0
        return self.startup_seconds


def _redis_cmd(conf: Path, port: int, wd: Path) -> list[str]:
    server = _require("redis-server", "install it with `apt-get install -y redis-server` (Debian/Ubuntu)")
    return [server, str(conf), "--port", str(port), "--bind", HOST, "--dir", str(wd), "--daemonize", "no",
            "--logfile", str(wd / "redis.log")]


def _redis_ping(port: int) -> bool:
    try:
        import redis
    except ImportError:
        cli = shutil.which("redis-cli")
        if not cli:
            with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
            return False
        r = subprocess.run([cli, "-h", HOST, "-p", str(port), "ping"], capture_output=True, text=True)
        return r.stdout.strip() == "PONG"
    try:
        return bool(redis.Redis(host=HOST, port=port, socket_timeout=1, socket_connect_timeout=1).ping())
    except Exception:
        return False


def start_redis(workdir: Path, port: Optional[int] = None, timeout: float = 15.0,
                attempts: int = 3, *, extra_args: Callable[[int], list[str]] = lambda p: [],
                ping: Optional[Callable[[int], bool]] = None, durable: bool = False) -> RedisProcess:
    """Start ``redis-server`` (no persistence; ``durable``: AOF, appendfsync always, so that
    :meth:`RedisProcess.kill` + :meth:`RedisProcess.start_again` keep its data) in the foreground as our child;
    wait for PING.

    ``extra_args(port)`` (arguments appended to the command line) and ``ping`` serve the TLS and
    ACL server of ``infra/secure_cluster.py``."""
    ping = ping or _redis_ping
    conf = REDIS_DURABLE_CONF if durable else REDIS_CONF
    last_error = ""
    for attempt in range(attempts):
        p = port or free_port()
        wd = Path(workdir) / (f"redis-{attempt}" if attempt else "redis")
        shutil.rmtree(wd, ignore_errors=True)
        wd.mkdir(parents=True)
        log = wd / "redis.log"
        t0 = time.monotonic()
        proc = _popen([*_redis_cmd(conf, p, wd), *extra_args(p)], wd / "redis.stdout", wd)
        rp = RedisProcess(p, wd, proc, conf=conf)
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                text = (log.read_text(errors="replace") if log.exists() else "") + (
                    (wd / "redis.stdout").read_text(errors="replace"))
                last_error = (f"redis-server exited with code {proc.returncode} during startup\n{_tail(log)}\n"
                              f"{text[-2000:]}")
                if "Address already in use" in text and not port:
                    break
                raise LocalClusterError(last_error)
            if ping(p):
                rp.startup_seconds = time.monotonic() - t0
                return rp
            if time.monotonic() > deadline:
                rp.stop(grace=2)
                raise LocalClusterError(f"redis-server not answering PING after {timeout:.0f}s\n{_tail(log)}")
            time.sleep(0.05)
    raise LocalClusterError(last_error)


# --------------------------------------------------------------------------- both


@dataclass
class LocalCluster:
    """Kafka and/or Redis processes living in one temp dir. Use :meth:`start` or the helpers."""

    workdir: Path
    kafka: Optional[KafkaProcess] = None
    redis: Optional[RedisProcess] = None
    _own_workdir: bool = field(default=True, repr=False)

    @classmethod
    def create(cls, workdir: Optional[Path] = None) -> "LocalCluster":
        if workdir is None:
            return cls(Path(tempfile.mkdtemp(prefix="joinlib-cluster-")), _own_workdir=True)
        Path(workdir).mkdir(parents=True, exist_ok=True)
        return cls(Path(workdir), _own_workdir=False)

    @classmethod
    def start(cls, kafka: bool = True, redis: bool = True, workdir: Optional[Path] = None) -> "LocalCluster":
        c = cls.create(workdir)
        try:
            if kafka:
                c.start_kafka()
            if redis:
                c.start_redis()
        except BaseException:
            c.stop()
            raise
        return c

    def start_kafka(self, **kw) -> KafkaProcess:
        if self.kafka is None:
            self.kafka = start_kafka(self.workdir, **kw)
        return self.kafka

    def restart_kafka(self, grace: float = 30.0, timeout: float = 90.0) -> float:
        """Stop the broker and start it again on its data dir and port (:meth:`KafkaProcess.restart`)."""
        if self.kafka is None:
            raise LocalClusterError("Kafka not started in this LocalCluster")
        return self.kafka.restart(grace, timeout)

    def start_redis(self, **kw) -> RedisProcess:
        if self.redis is None:
            self.redis = start_redis(self.workdir, **kw)
        return self.redis

    @property
    def kafka_bootstrap(self) -> str:
        if self.kafka is None:
            raise LocalClusterError("Kafka not started in this LocalCluster")
        return self.kafka.bootstrap

    @property
    def redis_url(self) -> str:
        if self.redis is None:
            raise LocalClusterError("Redis not started in this LocalCluster")
        return self.redis.url

    def env(self) -> dict[str, str]:
        out = {}
        if self.kafka:
            out["KAFKA_BOOTSTRAP_SERVERS"] = self.kafka.bootstrap
        if self.redis:
            out["REDIS_URL"] = self.redis.url
        return out

    def stop(self, keep_workdir: bool = False) -> None:
        for proc in (self.kafka, self.redis):
            if proc is not None:
                with contextlib.suppress(Exception):
                    proc.stop()
        if self._own_workdir and not keep_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> "LocalCluster":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def main() -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--no-kafka", action="store_true")
    ap.add_argument("--no-redis", action="store_true")
    ap.add_argument("--workdir", type=Path, help="keep configs/data/logs here (default: a temp dir, removed on exit)")
    args = ap.parse_args()
    try:
        c = LocalCluster.start(kafka=not args.no_kafka, redis=not args.no_redis, workdir=args.workdir)
    except LocalClusterError as e:
        print(f"error: {e}", file=sys.stderr)
        if isinstance(e, MissingToolError):
            print(INSTALL_HINT, file=sys.stderr)
        return 1
    try:
        for k, v in c.env().items():
            print(f"{k}={v}", flush=True)
        print(f"# workdir {c.workdir}; Ctrl-C to stop", file=sys.stderr, flush=True)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        c.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
