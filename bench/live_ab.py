"""A/B of live drains between source trees on one broker and one Redis (issue 27): node CPU per event, drain rate,
and the Redis server's and the broker's CPU, each drain of a tree alternating with the others' in every round.

    python bench/live_ab.py --tree base=/tmp/wt-base --tree new=. --rounds 2 [--memory] [--backlog 300]
        [--profile DIR] [--out results/tmp/live-ab.jsonl]

Why: on a shared 2-core machine one drain's node CPU moves by 10-20 % from run to run, and the load of other work
moves it more (a drain that takes longer runs more loop rounds and checkpoints), so trees are compared on the same
broker, backlog and minutes, alternating.  Each tree is a worktree with its kernels built; its node services run
from it (``cwd`` and ``PYTHONPATH``), the planner and the reference from this one.  ``--profile``: each node's loop
under cProfile (``JOINLIB_PROFILE_DIR``), one directory per drain.  The routers workload of bench/live_common.py,
plan ``auto``, windows in Redis with checkpoints (and, with ``--memory``, also in memory) -- what
``bench/cpu_bench.py --live`` measures.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import live_common  # noqa: E402  (the module bench/live_bench.py imports: its Joinlib is the one backlog_run uses)

from bench.live_bench import backlog_run, prepare_backlog, warm_up  # noqa: E402
from bench.spark_compare import ROUTERS  # noqa: E402


def _cpu(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of process ``pid`` so far."""
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    tck = os.sysconf("SC_CLK_TCK")
    return int(f[11]) / tck, int(f[12]) / tck


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", action="append", required=True, help="name=path of a worktree (repeat)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--backlog", type=float, default=300.0, help="seconds of events per site")
    ap.add_argument("--memory", action="store_true", help="also drain with windows in memory")
    ap.add_argument("--warmup", type=float, default=60.0, help="seconds of backlog drained first, unmeasured")
    ap.add_argument("--profile", default=None, help="a directory for cProfile dumps of every node")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "tmp" / "live-ab.jsonl")
    a = ap.parse_args(argv)
    trees = [t.split("=", 1) for t in a.tree]
    split: dict[str, list[tuple[float, float]]] = {}

    def cpu_s(self: live_common.Joinlib) -> dict[str, float]:   # user + system, and the split kept
        out = {}
        for site, p in self.procs.items():
            try:
                u, s = _cpu(p.pid)
            except OSError:
                u = s = float("nan")
            out[site] = u + s
            split.setdefault(site, []).append((u, s))
        return out
    live_common.Joinlib.cpu_s = cpu_s   # type: ignore[method-assign]

    from infra.local_cluster import LocalCluster
    cl = LocalCluster.start(kafka=True, redis=True)
    assert cl.redis is not None and cl.kafka is not None
    bs, redis_url = cl.kafka_bootstrap, cl.redis_url
    work = ROOT / "results" / "tmp" / "live-ab-work"
    work.mkdir(parents=True, exist_ok=True)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    modes = [redis_url] + ([None] if a.memory else [])
    try:
        if a.warmup:
            w = warm_up(bs, a.warmup, ROUTERS["f"], "auto", work, ROUTERS["rate"], ROUTERS["payload"], redis_url)
            print(f"warm-up: {w['events_per_s']:,.0f} events/s (not measured)", flush=True)
        data = prepare_backlog(bs, a.backlog, ROUTERS["f"], ROUTERS["rate"], ROUTERS["payload"], exact=False)
        for rnd in range(a.rounds):
            for name, path in (trees if rnd % 2 == 0 else trees[::-1]):
                for mode in modes:
                    windows = "redis" if mode else "memory"
                    live_common.ROOT = Path(path).resolve()
                    if a.profile:
                        os.environ["JOINLIB_PROFILE_DIR"] = f"{a.profile}/{name}-{rnd}-{windows}"
                    load = os.getloadavg()[0]
                    r0, k0 = sum(_cpu(cl.redis.proc.pid)), sum(_cpu(cl.kafka.proc.pid))
                    r = backlog_run(bs, a.backlog, ROUTERS["f"], "auto", work, False, ROUTERS["rate"],
                                    ROUTERS["payload"], data=data, redis_url=mode)
                    cpu = sum(r["node_cpu_s"].values())
                    row = {"tree": name, "round": rnd, "windows": windows, "load": round(load, 2),
                           "events_per_s": r["events_per_s"], "node_cpu_s": round(cpu, 2),
                           "node_sys_s": round(sum(v[-1][1] - v[0][1] for v in split.values()), 2),
                           "events_per_node_cpu_s": round(r["events"] / cpu) if cpu else None,
                           "redis_cpu_s": round(sum(_cpu(cl.redis.proc.pid)) - r0, 2),
                           "broker_cpu_s": round(sum(_cpu(cl.kafka.proc.pid)) - k0, 2),
                           "same_count": r["same_count"], "bytes": r["bytes"], "at": time.strftime("%H:%M:%S")}
                    split.clear()
                    print(json.dumps(row), flush=True)
                    with open(a.out, "a") as fh:
                        fh.write(json.dumps(row) + "\n")
    finally:
        os.environ.pop("JOINLIB_PROFILE_DIR", None)
        cl.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
