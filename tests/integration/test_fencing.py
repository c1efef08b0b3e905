"""Fenced instances (issue 29, item 3): a run's work has an owner epoch in Redis
(``joinlib.adapters.redis_fence``); once another instance claimed it, the old one's checkpoint saves, window
flushes and rounds of work are refused -- on the real Redis, and end to end with a scale-out instance paused
(SIGSTOP) past its group session and then resumed while its partitions run elsewhere."""
from __future__ import annotations

import re
import threading
import time
import uuid
from pathlib import Path

import pytest

from joinlib.adapters.redis_checkpoint import RedisCheckpoints
from joinlib.adapters.redis_client import clear_namespace
from joinlib.adapters.redis_store import redis_store_factory
from joinlib.errors import FencedError
from joinlib.model import Tup
from tests.integration.test_cluster import _run_and_check
from tests.integration.test_pmjoin_cluster import _pmjoin
from tests.integration.test_scale_out import routers_long  # noqa: F401  (module fixture)


def _tups(lo: int, hi: int) -> list[Tup]:
    return [Tup(0, i, i, i, (i % 5,), b"x%d" % i) for i in range(lo, hi)]


def _owner(redis_url: str, ns: str):
    """One instance's view of the unit of work ``ns``/r1: its checkpoints, its store factory (fenced by the
    checkpoints' claim, as recovery.checkpoints_for wires them) and a window store."""
    factory = redis_store_factory(redis_url, ns)
    ckpt = RedisCheckpoints(factory.client, ns, "r1")
    factory.fence = ckpt.fence
    return ckpt, factory


def test_an_older_owner_cannot_save_flush_or_go_on_once_a_new_owner_claimed(redis_url):
    ns = f"fence-{uuid.uuid4().hex[:8]}"
    old_ckpt, old_factory = _owner(redis_url, ns)
    try:
        assert old_ckpt.fence.claim() == 1
        old = old_factory("r1/home/S1")
        old.insert(_tups(0, 10))
        old_factory.flush()
        old_ckpt.save(b"checkpoint of the first owner")

        new_ckpt, new_factory = _owner(redis_url, ns)
        assert new_ckpt.fence.claim() == 2
        assert new_ckpt.load() == b"checkpoint of the first owner"   # the new owner rolls back to it
        new = new_factory("r1/home/S1")
        assert sorted(t.seq for t in new.tuples()) == list(range(10))

        # the old owner carries on: every write is refused, nothing reaches Redis
        old.insert(_tups(10, 20))
        with pytest.raises(FencedError, match=r"window flush refused: .*epoch 1.*owner epoch now 2"):
            old_factory.flush()
        with pytest.raises(FencedError, match="checkpoint save refused"):
            old_ckpt.save(b"stale checkpoint")
        with pytest.raises(FencedError, match="producing refused"):
            old_ckpt.fence.check("producing")

        # the new owner's writes go through and are what a later owner finds
        new.insert(_tups(10, 15))
        new_factory.flush()
        new_ckpt.save(b"checkpoint of the second owner")
        third_ckpt, third_factory = _owner(redis_url, ns)
        third_ckpt.fence.claim()
        assert third_ckpt.load() == b"checkpoint of the second owner"
        assert sorted(t.seq for t in third_factory("r1/home/S1").tuples()) == list(range(15))

        # a finished run clears its owner key: a late instance still finds itself fenced
        third_ckpt.clear()
        with pytest.raises(FencedError, match="none"):
            third_ckpt.fence.check()
    finally:
        clear_namespace(old_factory.client, ns)


def _watch_starts(log: Path, stop: threading.Event, seen: list[tuple[float, str]]) -> None:
    """Note when each "partitions [...] of r1 start here" line appears in ``log`` (the survivor's)."""
    n = 0
    while not stop.is_set():
        try:
            lines = [x for x in log.read_text(errors="replace").splitlines() if "start here" in x]
        except OSError:
            lines = []
        for line in lines[n:]:
            seen.append((time.time(), line))
        n = len(lines)
        time.sleep(0.05)


def test_a_paused_instance_is_fenced_after_its_partitions_moved(routers_long, kafka_bootstrap,  # noqa: F811
                                                               redis_url, monkeypatch, tmp_path):
    """Two node processes share r1's 4 plan partitions; 3 s into a paced replay the first is SIGSTOPped for
    5 s -- past its group session (2 s here, JOINLIB_SESSION_TIMEOUT_MS) -- so the other instance takes its
    partitions over from their last checkpoints; then it is resumed (SIGCONT), a zombie that still runs their
    threads.  It must not write: its next checkpoint or round of work is refused by the fence (or the group
    tells it first that its session is lost).  The output is exactly the reference and the simulator's bytes.
    The take-over time (pause to the survivor starting the partitions) is printed, not asserted."""
    monkeypatch.setenv("JOINLIB_CHECKPOINT_EVERY_S", "0.5")
    monkeypatch.setenv("JOINLIB_SESSION_TIMEOUT_MS", "2000")
    logs = tmp_path / "logs"
    stop, starts = threading.Event(), list[tuple[float, str]]()
    watcher = threading.Thread(target=_watch_starts, args=(logs / "node-r1-2.log", stop, starts), daemon=True)
    watcher.start()
    try:
        plan = _pmjoin(routers_long, "pmjoin:hash:4")
        report = _run_and_check(routers_long, plan, kafka_bootstrap, mode="process", redis_url=redis_url,
                                rate_scale=1.0, instances={"r1": 2}, faults=[("r1", 3.0, "pause", 5.0)],
                                log_dir=logs)
    finally:
        stop.set()
        watcher.join(5)
    pause = next(r for r in report["restarts"] if r["action"] == "pause")
    assert [r["action"] for r in report["restarts"]] == ["pause", "resume"]
    taken = [(t - pause["at"], line) for t, line in starts if t >= pause["at"]]
    assert taken, f"the other instance never took a partition over; its starts: {starts}"
    print(f"take-over with a 2 s session: {taken[0][0]:.2f} s after the pause ({taken[0][1].strip()})")
    zombie = (logs / "node-r1.log").read_text(errors="replace")
    refused = re.findall(r".*(?:fenced, stopping without writing|session lost: no checkpoint).*", zombie)
    assert refused, f"the paused instance gave nothing up after it resumed\n{zombie[-3000:]}"
    print("the zombie on resuming:\n  " + "\n  ".join(x.strip() for x in refused))
    parts = report["sites"]["r1"]["parts"]
    assert sorted(p["part"] for p in parts) == [0, 1, 2, 3]
