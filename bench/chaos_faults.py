"""The chaos benchmark's faults (bench/chaos.py): a seeded schedule, and each fault carried out on the running
processes (bench/chaos_stack.py), the broker and Redis.

Kinds (``--faults``):

* ``kill-node``: SIGKILL a node instance, start it again ``hold_s`` later (it resumes from its checkpoint);
* ``pause-node``: SIGSTOP a node instance for ``hold_s`` -- past its 4 s group session, so a scaled-out
  instance's partitions move to the other instance -- then SIGCONT (it must find itself fenced or its session
  lost, and write nothing more: docs/reliability.md "Fenced instances");
* ``kill-planner``: SIGKILL the planner service, start it again (it rebuilds its state from the control and
  status topics); ``pause-planner``: SIGSTOP / SIGCONT it;
* ``broker-restart``: stop the broker (SIGTERM), start it again on its data dir ``hold_s`` later
  (infra.local_cluster ``KafkaProcess.stop`` / ``start_again``, as ``scripts/cluster.sh restart-kafka``);
* ``redis-restart``: SIGKILL redis-server (AOF, appendfsync always), start it again on its data ``hold_s`` later
  (drill (b) of tests/integration/test_drills.py);
* ``replan``: ``joinlib replan`` of the reduction query, to ``pmjoin:hash:2`` and back to ``reduce`` in turn;
  cleared when the switch is over (``joinlib queries``: ``switched``).
"""
from __future__ import annotations

import math
import random
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Optional

KINDS = ("kill-node", "pause-node", "kill-planner", "pause-planner", "broker-restart", "redis-restart", "replan")
REPLAN_PLANS = ("pmjoin:hash:2", "reduce")
HOLD_S = {"kill-node": (2.0, 5.0), "pause-node": (9.0, 12.0), "kill-planner": (2.0, 5.0),
          "pause-planner": (5.0, 10.0), "broker-restart": (2.0, 5.0), "redis-restart": (3.0, 6.0), "replan": (0.0, 0.0)}


@dataclass(frozen=True)
class Fault:
    """One planned fault: ``at_s`` seconds after the generator's start (at the earliest: a fault waits for the
    recovery from the one before), its ``kind``, ``target`` (a node, ``planner``, ``broker``, ``redis``, or the
    plan a replan moves to) and how long the target stays down or paused."""

    at_s: float
    kind: str
    target: str
    hold_s: float


def make_schedule(seed: int, duration_s: float, kinds: tuple[str, ...], nodes: list[str], *, warmup_s: float,
                  cooldown_s: float, gap_s: float, shared: tuple[str, ...] = ()) -> list[Fault]:
    """Slots every ``gap_s`` (plus a seeded jitter of up to 30 %) from ``warmup_s`` to ``cooldown_s`` before the
    end; every kind once in a seeded order, then a replan back (if replans are drawn), then seeded choices;
    targets and hold times seeded too; the first pause of a node hits one of the ``shared`` instances (where
    another instance takes its work over: fencing), if any."""
    rng = random.Random(seed)
    last = duration_s - cooldown_s
    slots = int((last - warmup_s) // gap_s) + 1 if last >= warmup_s else 0
    order = list(kinds)
    rng.shuffle(order)
    if "replan" in kinds:   # there and back: the reduction query ends on its first plan kind again
        order.append("replan")
    while len(order) < slots:
        order.append(rng.choice(kinds))
    out, replans, paused = [], 0, False
    for i, kind in enumerate(order[:slots]):
        at = min(last, warmup_s + i * gap_s + rng.uniform(0, 0.3 * gap_s))
        lo, hi = HOLD_S[kind]
        hold = round(rng.uniform(lo, hi), 1)
        if kind == "pause-node" and shared and not paused:
            target, paused = rng.choice(shared), True
        elif kind in ("kill-node", "pause-node"):
            target = rng.choice(nodes)
        elif kind == "replan":
            target, replans = REPLAN_PLANS[replans % len(REPLAN_PLANS)], replans + 1
        else:
            target = {"broker-restart": "broker", "redis-restart": "redis"}.get(kind, "planner")
        out.append(Fault(math.floor(at * 10) / 10, kind, target, hold))
    return out


@dataclass
class Done:
    """What happened: when the fault began and was cleared (seconds after the generator's start), details."""

    fault: Fault
    began_s: float
    cleared_s: float
    detail: dict
    error: Optional[str] = None
    recovered_s: Optional[float] = None   # seconds from cleared to recovered (None: not within the limit)

    def to_json(self) -> dict:
        return {**asdict(self.fault), "began_s": round(self.began_s, 1), "cleared_s": round(self.cleared_s, 1),
                "recovery_s": None if self.recovered_s is None else round(self.recovered_s, 1),
                "error": self.error, **self.detail}


class Faults:
    """Carries faults out (in the benchmark's main thread: a broker's or Redis's process dies with the thread that
    started it, infra.local_cluster)."""

    def __init__(self, stack: Any, kafka: Any, redis: Any, reduce_query: str, on_run: Callable[[str, int], None],
                 clock: Callable[[], float]) -> None:
        self.stack, self.kafka, self.redis = stack, kafka, redis
        self.reduce_query, self.on_run, self.clock = reduce_query, on_run, clock

    def run(self, f: Fault) -> Done:
        began = self.clock()
        detail: dict = {}
        try:
            getattr(self, "_" + f.kind.replace("-", "_"))(f, detail)
            error = None
        except Exception as e:   # a fault that could not be carried out (or undone) is a failed verdict
            error = f"{type(e).__name__}: {e}"
        return Done(f, began, self.clock(), detail, error)

    def _kill_node(self, f: Fault, detail: dict) -> None:
        p = self.stack.nodes[f.target]
        p.kill()
        time.sleep(f.hold_s)
        p.start()

    def _pause_node(self, f: Fault, detail: dict) -> None:
        p = self.stack.nodes[f.target]
        detail["log_offset"] = len(p.text())
        p.pause()
        time.sleep(f.hold_s)
        p.resume()

    def _kill_planner(self, f: Fault, detail: dict) -> None:
        self.stack.planner.kill()
        time.sleep(f.hold_s)
        self.stack.planner.start()
        detail["planner_up_s"] = round(self.stack.wait_planner(), 1)

    def _pause_planner(self, f: Fault, detail: dict) -> None:
        self.stack.planner.pause()
        time.sleep(f.hold_s)
        self.stack.planner.resume()

    def _broker_restart(self, f: Fault, detail: dict) -> None:
        self.kafka.stop(grace=30)
        time.sleep(f.hold_s)
        detail["broker_up_s"] = round(self.kafka.start_again(timeout=180), 1)

    def _redis_restart(self, f: Fault, detail: dict) -> None:
        self.redis.kill()
        time.sleep(f.hold_s)
        detail["redis_up_s"] = round(self.redis.start_again(), 1)

    def _replan(self, f: Fault, detail: dict) -> None:
        q = self.reduce_query
        before = (self.stack.status(q) or {}).get("run")
        r = self.stack.cli("replan", q, "--plan", f.target)
        detail["cli"] = (r.stdout + r.stderr).strip()[-400:]
        if r.returncode != 0:
            raise RuntimeError(f"joinlib replan exited with {r.returncode}: {detail['cli']}")
        deadline = time.monotonic() + 180
        while True:
            st = self.stack.status(q) or {}
            if st.get("run") and st["run"] != before:
                self.on_run(st["run"], int(st["origin_ms"]))
                detail["run"] = st["run"]
                if (st.get("replan") or {}).get("state") == "switched":
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the switch to {f.target} did not finish within 180 s: {st.get('replan')}")
            time.sleep(0.5)


def fencing_evidence(text: str) -> Optional[str]:
    """What a resumed instance's log says about its lost work (None: nothing -- a node that owned nothing others
    could take, e.g. a site's only instance)."""
    for line in text.splitlines():
        if "fenced, stopping without writing" in line or "session lost" in line or "refused" in line:
            return line.strip()[-300:]
    return None
