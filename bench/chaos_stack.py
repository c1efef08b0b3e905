"""The processes of the chaos benchmark (bench/chaos.py): the planner service and the node services, each a
process that a fault can SIGKILL and restart, or SIGSTOP and SIGCONT; the planner's HTTP API and the nodes'
/metrics as the benchmark reads them; the ``joinlib`` command line as a user runs it.

Node layout for the two queries at three sites s1, s2, s3 (docs/pmjoin.md "Scale-out within a site"):

* ``s1-R``: ``--site s1 --query R`` -- the reduction query's node at s1 (a ``--shared`` instance runs only
  scaled-out plans, so R needs a node of its own there);
* ``s1-P1``, ``s1-P2``: ``--site s1 --query P --shared`` -- the two instances that share s1's partitions of the
  scaled-out ``pmjoin:hash:2`` query P (and its re-keyer);
* ``s2``, ``s3``: one node each, serving both queries.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Proc:
    """One restartable service process; its output appended to ``log`` across restarts."""

    name: str
    cmd: list[str]
    env: dict[str, str]
    log: Path
    metrics_port: Optional[int] = None
    proc: Optional[subprocess.Popen] = None
    paused: bool = False
    starts: int = 0

    def start(self) -> None:
        with open(self.log, "ab") as fh:
            fh.write(f"--- chaos: start #{self.starts + 1} at {time.strftime('%H:%M:%S')} ---\n".encode())
            fh.flush()
            self.proc = subprocess.Popen(self.cmd, cwd=ROOT, env=self.env, stdout=fh, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)
        self.starts += 1

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(sig)

    def kill(self) -> None:
        """SIGKILL and reap: a crash."""
        self.signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(10)
        self.paused = False

    def pause(self) -> None:
        self.signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        self.signal(signal.SIGCONT)
        self.paused = False

    def stop(self) -> None:
        """SIGTERM (after SIGCONT: a paused process cannot act on it), SIGKILL after 20 s."""
        if not self.alive():
            return
        assert self.proc is not None
        self.resume()
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)

    def text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def metrics(self) -> Optional[str]:
        if self.metrics_port is None or self.paused:
            return None
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=2) as r:
                return r.read().decode()
        except (OSError, ValueError):
            return None

    def lag(self) -> Optional[float]:
        """joinlib_consumer_lag_messages summed over every topic the node reads (None: no answer)."""
        text = self.metrics()
        if text is None:
            return None
        return sum(float(x.rsplit(" ", 1)[1]) for x in text.splitlines()
                   if x.startswith("joinlib_consumer_lag_messages{"))


@dataclass
class Stack:
    """The planner process and the node processes of both queries (module docstring)."""

    bootstrap: str
    redis_url: str
    sites: list[str]
    reduce_query: str
    pmjoin_query: str
    logs: Path
    session_ms: int = 4000
    planner: Proc = field(init=False)
    nodes: dict[str, Proc] = field(init=False, default_factory=dict)
    url: str = field(init=False, default="")

    def __post_init__(self) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        base = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": self.bootstrap, "PYTHONPATH": str(ROOT),
                "PYTHONUNBUFFERED": "1"}
        for k in ("JOINLIB_PLANNER_TOKEN", "JOINLIB_PLANNER_TOKEN_FILE", "PLANNER_URL"):
            base.pop(k, None)
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.planner = Proc("planner", [sys.executable, "-m", "services.planner", "--bootstrap", self.bootstrap,
                                        "--port", str(port), "--metrics-port", str(free_port())],
                            base, self.logs / "planner.log")
        s1, s2, s3 = self.sites
        layout = {f"{s1}-R": [s1, "--query", self.reduce_query],
                  f"{s1}-P1": [s1, "--query", self.pmjoin_query, "--shared"],
                  f"{s1}-P2": [s1, "--query", self.pmjoin_query, "--shared"],
                  s2: [s2], s3: [s3]}
        for name, args in layout.items():
            mport = free_port()
            # MALLOC_ARENA_MAX=2 as in services/Dockerfile; a 4 s group session: a paused instance's partitions
            # move to the other instance within the pause (docs/reliability.md "Fenced instances")
            env = {"MALLOC_ARENA_MAX": "2", **base, "REDIS_URL": self.redis_url, "METRICS_PORT": str(mport),
                   "JOINLIB_SESSION_TIMEOUT_MS": str(self.session_ms)}
            self.nodes[name] = Proc(name, [sys.executable, "-m", "services.node", "--site", args[0], "--serve",
                                           *args[1:]], env, self.logs / f"node-{name}.log", mport)

    def start(self, timeout_s: float = 90.0) -> None:
        self.planner.start()
        for n in self.nodes.values():
            n.start()
        self.wait_planner(timeout_s)

    def procs(self) -> dict[str, Proc]:
        return {"planner": self.planner, **self.nodes}

    def wait_planner(self, timeout_s: float = 90.0) -> float:
        """Until the planner answers /healthz; the seconds it took."""
        t0 = time.monotonic()
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/healthz", timeout=2) as r:
                    if r.status == 200:
                        return time.monotonic() - t0
            except (OSError, ValueError):
                pass
            if not self.planner.alive() or time.monotonic() - t0 > timeout_s:
                raise RuntimeError(f"the planner does not answer on {self.url}\n{self.planner.text()[-2000:]}")
            time.sleep(0.2)

    def status(self, query: str) -> Optional[dict]:
        """GET /queries/<query> (None: no answer, the planner being down or paused)."""
        try:
            with urllib.request.urlopen(f"{self.url}/queries/{query}", timeout=3) as r:
                return json.loads(r.read())
        except (OSError, ValueError):
            return None

    def cli(self, *args: str, timeout_s: float = 120.0) -> subprocess.CompletedProcess:
        """``joinlib ARGS --url <planner>``, as a user runs it."""
        return subprocess.run([sys.executable, "-m", "joinlib", *args, "--url", self.url], cwd=ROOT,
                              env={**self.planner.env}, capture_output=True, text=True, timeout=timeout_s)

    def shared(self) -> tuple[str, ...]:
        """The scaled-out query's instances at s1 (where a paused one's work moves to the other)."""
        return tuple(n for n, p in self.nodes.items() if "--shared" in p.cmd)

    def lags(self) -> dict[str, Optional[float]]:
        return {name: n.lag() for name, n in self.nodes.items()}

    def close(self) -> None:
        for p in [*self.nodes.values(), self.planner]:
            p.resume()
        for p in [*self.nodes.values(), self.planner]:
            p.stop()


def wait_running(stack: Stack, queries: list[str], timeout_s: float = 120.0) -> None:
    """Until every site of each query reports on it (its nodes run the query: a fault then hits a running query)."""
    deadline = time.monotonic() + timeout_s
    for q in queries:
        while True:
            st = stack.status(q) or {}
            if len(st.get("sites") or {}) >= len(stack.sites):
                break
            dead = [n for n, p in stack.procs().items() if not p.alive()]
            if dead or time.monotonic() > deadline:
                raise RuntimeError(f"query {q} does not run at every site ({st.get('sites')}); exited: {dead}\n"
                                   + "\n".join(p.text()[-1500:] for p in stack.procs().values()))
            time.sleep(0.5)



def wait_state(stack: Stack, queries: list[str], state: str, timeout_s: float = 60.0) -> bool:
    """Until each query's state (``joinlib queries``) is ``state``; False if one is not within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    for q in queries:
        while (stack.status(q) or {}).get("state") != state:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.5)
    return True
