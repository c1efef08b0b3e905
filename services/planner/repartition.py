"""The planner's automatic re-partitioning of live partitioned queries (``joinlib submit --repartition``).

Every ``every_s`` the :class:`Repartitioner` looks at each running live query submitted with a threshold: once its
run has had ``settle_s`` to report per-value rates, it asks the rate model whether the running partition function
still fits them (:func:`joinlib.pmjoin.repartition.verdict`) and, when the running one costs more than ``1 +
threshold`` times a function of the same scheme and D fitted to them, moves the query to that function with a
replan (:meth:`PlannerService.replan`, with the rates it judged on): the output stays exact across the switch
(docs/live.md "Replan").  The latest verdict and every move are in the query's status (``joinlib queries``).

Why a thread of its own: a replan publishes a plan and reads topic ends, which the control watcher must not
wait for.  Why ``settle_s``: a run's first reports cover less than the monitor's horizon, and after a move the
new run must report before it is judged again (no flapping on its predecessor's figures).
"""
from __future__ import annotations

import sys
import threading
import time
from typing import Any, Optional

from joinlib.errors import JoinlibError
from joinlib.plan.partitioned import Partitioned, is_partitioned_json
from joinlib.pmjoin.repartition import verdict
from joinlib.pmjoin.value_monitor import VALUES_EVERY_S


class Repartitioner:
    """Judges and moves ``service``'s queries (see the module docstring)."""

    def __init__(self, service: Any, every_s: float = VALUES_EVERY_S, settle_s: float = 3 * VALUES_EVERY_S) -> None:
        self.service, self.every_s, self.settle_s = service, every_s, settle_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="repartitioner", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            with self.service.lock:
                names = [n for n, st in self.service.queries.items() if st.repartition is not None]
            for name in names:
                try:
                    self.check(name)
                except JoinlibError as e:   # e.g. the query stopped meanwhile: judged again next time if it runs
                    print(f"[planner] re-partition of {name}: {e}", file=sys.stderr, flush=True)

    def check(self, name: str, now_ms: Optional[float] = None) -> Optional[dict[str, Any]]:
        """Judge query ``name`` now; the replan's answer if it moved, else None."""
        svc = self.service
        now_ms = time.time() * 1000 if now_ms is None else now_ms
        with svc.lock:
            cur = svc.queries.get(name)
            if cur is None or cur.repartition is None or not cur.live or cur.state() != "running":
                return None
            if cur.previous is not None and cur.previous.state() not in ("done", "stopped"):
                return None   # a switch is under way
            if now_ms - cur.submitted_ms < self.settle_s * 1000 or cur.stats is None or cur.message is None:
                return None
            stats = cur.stats.value_stats()
            query, plan, spec, threshold = cur.query, cur.message.plan, cur.planner, cur.repartition
        if stats is None or query is None or not is_partitioned_json(plan):
            return None
        v = verdict(query, Partitioned.from_json(query, plan), spec, stats, threshold)
        with svc.lock:
            cur.repartition_check = {**v.to_json(), "at_ms": round(now_ms)}
        sensor = getattr(svc, "sensor", None)
        if sensor is not None:
            sensor.on_repartition_check(name, v.gain, v.due)
        if not v.due:
            return None
        out: dict[str, Any] = svc.replan(name, spec, values=stats)
        move = {"at_ms": round(now_ms), "from_run": out["replaces"], "run": out["run"],
                "switch_ms": out["switch_ms"], **v.to_json()}
        print(f"[planner] re-partitioned {name}: the running function costs {v.gain:.2f}x one fitted to the current "
              f"rates (threshold {1 + threshold:.2f}x); run {out['run']} takes over from event time "
              f"{out['switch_ms']} ms", file=sys.stderr, flush=True)
        with svc.lock:
            st = svc.queries.get(name)
            if st is not None:
                st.repartitions = [*cur.repartitions, move]
        return out


def threshold_arg(raw: Optional[str]) -> Optional[float]:
    """``?repartition=R``: a positive number (the check of its range is the service's)."""
    if raw is None:
        return None
    try:
        return float(raw)
    except ValueError:
        raise JoinlibError(f"repartition={raw[:40]!r}: expected a number, e.g. 0.25") from None
