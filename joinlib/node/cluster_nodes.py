"""The node services a cluster run starts (:mod:`.cluster`): processes (``python -m services.node``, the real
deployment), threads of this process (:class:`~.node_service.NodeService`, faster to start; the same code from
Kafka on) or none (``serving``: node services already running with ``--serve``); and the faults a drill injects
into them on schedule (:class:`Faults`).
"""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Optional

from joinlib.adapters.prometheus import CollectorRegistry
from joinlib.errors import ClusterError
from joinlib.node.node_service import NodeService
from joinlib.settings import child_env

REPO_ROOT = Path(__file__).resolve().parent.parent.parent


class NodeHandle:
    site: str
    log: Optional[Path] = None

    def failure(self) -> Optional[str]:
        """A message if the node died without finishing, else None."""
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def kill(self) -> None:
        raise NotImplementedError

    def finish(self, grace: float) -> None:
        raise NotImplementedError

    def pause(self) -> None:
        raise ClusterError(f"cannot pause the node of {self.site}: only node processes can be (--nodes process)")

    def resume(self) -> None:
        self.pause()


class ProcessNode(NodeHandle):
    def __init__(self, site: str, proc: subprocess.Popen, log: Path) -> None:
        self.site, self.proc, self.log = site, proc, log
        self.done = False

    def failure(self) -> Optional[str]:
        rc = self.proc.poll()
        if rc is None or (rc == 0 and self.done):
            return None
        if rc == 0:
            return None  # exited cleanly; its done message is on its way
        return f"node process of site {self.site} exited with status {rc}\n{_tail(self.log)}"

    def pause(self) -> None:
        """SIGSTOP: the process keeps its state and sockets but does nothing (nor heartbeats) until resumed."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)   # a paused process acts on SIGTERM only once resumed
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def kill(self) -> None:
        """Die without warning (SIGKILL): no flush, no checkpoint."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        if self.log is not None and self.log.exists():  # its successor writes the same log name
            self.log = self.log.rename(self.log.with_name(f"{self.log.stem}.killed-{uuid.uuid4().hex[:6]}.log"))

    def finish(self, grace: float) -> None:
        try:
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            self.stop()


def _die_with_parent() -> None:  # in the child, between fork and exec
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _start_process(site, query, run, bootstrap, redis_url, port, python, log_dir, instance=0) -> ProcessNode:
    log_dir.mkdir(parents=True, exist_ok=True)
    env = child_env(unset=() if redis_url else ("REDIS_URL",), KAFKA_BOOTSTRAP_SERVERS=bootstrap, JOINLIB_SITE=site,
                    METRICS_PORT=str(port or 0), PYTHONUNBUFFERED="1",
                    **({"REDIS_URL": redis_url} if redis_url else {}))
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    log = log_dir / (f"node-{site}.log" if not instance else f"node-{site}-{instance + 1}.log")
    with open(log, "wb") as fh:
        proc = subprocess.Popen([python, "-m", "services.node", "--site", site, "--query", query, "--run", run,
                                 "--plan-timeout", "60"],
                                cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT,
                                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None)
    return ProcessNode(site, proc, log)


class ThreadNode(NodeHandle):
    def __init__(self, site: str, svc, stop: threading.Event) -> None:
        self.site, self.svc, self._stop = site, svc, stop
        self.error: Optional[BaseException] = None
        self.thread = threading.Thread(target=self._main, name=f"node-{site}", daemon=True)
        self.thread.start()

    def _main(self) -> None:
        try:
            self.svc.run()
        except BaseException as e:  # reported by failure()
            self.error = e

    def failure(self) -> Optional[str]:
        if self.error is None:
            return None
        return f"node thread of site {self.site} failed: {type(self.error).__name__}: {self.error}"

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(10)

    def kill(self) -> None:
        """A thread cannot be killed: stop it (it saves a checkpoint on its way out)."""
        self.stop()

    def finish(self, grace: float) -> None:
        self.thread.join(grace)
        if self.thread.is_alive():
            self.stop()


def _start_thread(site, query, run, bootstrap, redis_url, port, python, log_dir, instance=0) -> ThreadNode:
    stop = threading.Event()
    svc = NodeService(site, bootstrap, query=query, run=run, redis_url=redis_url, metrics_port=port,
                      registry=CollectorRegistry(), stop=stop, plan_timeout_s=60, quiet=True)
    return ThreadNode(site, svc, stop)


class ServingNode(NodeHandle):
    """A node service this run did not start (``--serve``): nothing to watch, stop or wait for but its
    messages; a site none serves shows in the timeout message as one that never reported."""

    def __init__(self, site: str) -> None:
        self.site = site

    def failure(self) -> Optional[str]:
        return None

    def stop(self) -> None:
        pass

    def kill(self) -> None:
        raise ClusterError(f"cannot kill the serving node of {self.site}: this run did not start it")

    def finish(self, grace: float) -> None:
        pass


def _serving(site, query, run, bootstrap, redis_url, port, python, log_dir, instance=0) -> ServingNode:
    return ServingNode(site)


def starter(mode: str) -> Any:
    """What starts a node in ``mode`` (looked up at each call, so a test may replace one)."""
    return {"process": _start_process, "thread": _start_thread, "serving": _serving}[mode]


def _tail(path: Optional[Path], lines: int = 15) -> str:
    if path is None:
        return ""
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"(no log at {path})"
    return f"--- last lines of {path} ---\n" + "\n".join(text[-lines:])


class Faults:
    """Kills nodes on schedule (seconds after the replay starts) and starts their successors.  A fault is
    ``(site, seconds)`` or ``(site, seconds, action)``: ``kill`` (the default) SIGKILLs the site's oldest
    instance and starts a successor unless another instance serves the site (a scaled-out plan: the others
    take its partitions); ``join`` starts one more instance of the site; ``(site, seconds, "pause", length)``
    SIGSTOPs the site's oldest instance and SIGCONTs it ``length`` seconds later (a zombie, if its group
    session expired meanwhile: its partitions' new owners fence it)."""

    def __init__(self, faults, start_node, nodes: dict) -> None:
        self.todo = sorted(faults, key=lambda f: f[1])
        self.start_node, self.nodes = start_node, nodes
        self.done: list[dict] = []

    def tick(self, t0: Optional[float]) -> None:
        while self.todo and t0 is not None and time.monotonic() - t0 >= self.todo[0][1]:
            site, after, *action = self.todo.pop(0)
            keys = [k for k in self.nodes if k == site or k.startswith(site + "#")]
            if action and action[0] in ("pause", "_resume"):
                self._pause(site, after, action, keys)
                continue
            if action and action[0] == "join":
                n = 1 + max((int(k.rpartition("#")[2]) for k in keys if "#" in k), default=1)
                self.nodes[f"{site}#{n}"] = self.start_node(site, n - 1)
                self.done.append({"site": site, "after_s": after, "action": "join"})
                continue
            old = self.nodes[keys[0]]
            old.kill()
            if len(keys) > 1:   # the others take its partitions (its log stays named in self.done)
                del self.nodes[keys[0]]
            else:
                self.nodes[keys[0]] = self.start_node(site)
            self.done.append({"site": site, "after_s": after, "action": "kill", "successor": len(keys) == 1,
                              "log": str(old.log) if old.log else None})

    def _pause(self, site: str, after: float, action: list[Any], keys: list[str]) -> None:
        if action[0] == "_resume":
            self.nodes[action[1]].resume()
            self.done.append({"site": site, "after_s": after, "action": "resume", "at": time.time()})
            return
        length = float(action[1]) if action[1:] else 5.0
        self.nodes[keys[0]].pause()
        self.todo.append((site, after + length, "_resume", keys[0]))
        self.todo.sort(key=lambda f: f[1])
        self.done.append({"site": site, "after_s": after, "action": "pause", "length_s": length, "at": time.time(),
                          "log": str(self.nodes[keys[0]].log or "")})
