"""Micro-benchmark of RedisWindowStore (vs MemoryWindowStore) in a sliding window.

Steady state of one home window: it holds ``--window`` tuples; every epoch inserts a
batch of B new tuples (in seq order, one index on the join key), probes it with B keys
(``lookup_many``; keys drawn from ``--keys`` distinct values, so each distinct key finds
about window/keys tuples) and purges the B oldest (``purge_below(ts=...)``).  Each operation is
timed on its own, B = 30 and 300.  Also: ``remove_oldest`` of B and out-of-order inserts
(a replica's path).  One Redis round trip per call (a Lua script), so rates are per
client thread; the PING round trip is reported for scale.

Redis: ``--url`` / ``REDIS_URL``, else a local ``redis-server`` started by
``infra.local_cluster`` (stopped at exit).

    python bench/redis_store_bench.py [--url redis://...] [--epochs 300] [--rest-bytes 60]

Writes ``bench/out/redis_store.json``.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from joinlib.model import Tup  # noqa: E402
from joinlib.state.memory import MemoryWindowStore  # noqa: E402


def make_tuples(n: int, keys: int, rest_bytes: int, seed: int = 1) -> list[Tup]:
    rnd = random.Random(seed)
    rest = bytes(rnd.getrandbits(8) for _ in range(rest_bytes))
    # 1000 tuples per second of event time, ts non-decreasing in seq
    return [Tup(0, 10_000 + i, i, i, (rnd.randrange(keys), f"r{i % 7}"), rest) for i in range(n)]


def bench_store(store, batch: int, window: int, epochs: int, keys: int, rest_bytes: int) -> dict:
    tups = make_tuples(window + batch * (epochs + 1), keys, rest_bytes)
    store.add_index((0,))
    for i in range(0, window, 1000):
        store.insert(tups[i:min(i + 1000, window)])
    rnd = random.Random(7)
    t_ins = t_look = t_purge = 0.0
    found = purged = distinct = 0
    pc = time.perf_counter
    for e in range(epochs):
        lo = window + e * batch
        new = tups[lo:lo + batch]
        probes = [(rnd.randrange(keys),) for _ in range(batch)]
        t0 = pc()
        store.insert(new)
        t1 = pc()
        res = store.lookup_many((0,), probes)
        t2 = pc()
        gone = store.purge_below(ts=new[-1].ts + 1 - window)
        t3 = pc()
        t_ins, t_look, t_purge = t_ins + t1 - t0, t_look + t2 - t1, t_purge + t3 - t2
        found += sum(len(kl) for kl in res.values())
        distinct += len(set(probes))
        purged += len(gone)
    assert purged == epochs * batch, (purged, epochs * batch)
    assert len(store) == window
    # remove_oldest (FIFO replica) and out-of-order inserts (replica receiving late tuples)
    t_rm = t_ooo = 0.0
    reps = max(1, min(epochs // 5, window // batch))
    for _ in range(reps):
        live = store.tuples()[:batch]
        t0 = pc()
        store.remove_oldest(live)
        t1 = pc()
        store.insert(live[::-1])
        t2 = pc()
        t_rm, t_ooo = t_rm + t1 - t0, t_ooo + t2 - t1
    n = epochs * batch
    return {
        "batch": batch,
        "insert_tuples_per_s": round(n / t_ins),
        "insert_calls_per_s": round(epochs / t_ins, 1),
        "lookup_keys_per_s": round(n / t_look),
        "lookup_calls_per_s": round(epochs / t_look, 1),
        "lookup_tuples_returned_per_s": round(found / t_look),
        "tuples_per_distinct_key": round(found / distinct, 2),
        "purge_calls_per_s": round(epochs / t_purge, 1),
        "purge_tuples_per_s": round(purged / t_purge),
        "remove_oldest_tuples_per_s": round(reps * batch / t_rm),
        "out_of_order_insert_tuples_per_s": round(reps * batch / t_ooo),
        "epoch_ms": round((t_ins + t_look + t_purge) / epochs * 1000, 3),
    }


def ping_us(client, n: int = 2000) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        client.ping()
    return round((time.perf_counter() - t0) / n * 1e6, 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default=os.environ.get("REDIS_URL", ""))
    ap.add_argument("--epochs", type=int, default=300)
    ap.add_argument("--window", type=int, default=3000, help="tuples held (default 3000: 3 s at 1000/s)")
    ap.add_argument("--keys", type=int, default=100, help="distinct join values (default 100)")
    ap.add_argument("--rest-bytes", type=int, default=60, help="payload bytes per tuple (default 60)")
    ap.add_argument("--batches", default="30,300")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    args = ap.parse_args()

    import redis

    from joinlib.adapters.redis_client import clear_namespace
    from joinlib.adapters.redis_store import RedisWindowStore

    proc = None
    url = args.url
    if not url:
        from infra.local_cluster import start_redis
        proc = start_redis(Path(tempfile.mkdtemp(prefix="redis-bench-")))
        url = proc.url
    client = redis.Redis.from_url(url)
    ns = f"bench-{uuid.uuid4().hex[:8]}"
    try:
        info = client.info("server")
        out = {"redis_url": url, "redis_version": info.get("redis_version"),
               "redis_py": redis.__version__, "python": platform.python_version(),
               "cpus": os.cpu_count(), "ping_round_trip_us": ping_us(client),
               "window": args.window, "distinct_keys": args.keys, "rest_bytes": args.rest_bytes,
               "epochs": args.epochs, "redis": [], "memory": []}
        for b in (int(x) for x in args.batches.split(",")):
            r = bench_store(RedisWindowStore(client, f"{ns}/b{b}"), b, args.window, args.epochs,
                            args.keys, args.rest_bytes)
            m = bench_store(MemoryWindowStore(), b, args.window, args.epochs, args.keys, args.rest_bytes)
            out["redis"].append(r)
            out["memory"].append(m)
            print(f"B={b:4d} redis  " + "  ".join(f"{k}={v}" for k, v in r.items() if k != "batch"))
            print(f"B={b:4d} memory " + "  ".join(f"{k}={v}" for k, v in m.items() if k != "batch"))
        args.out.mkdir(parents=True, exist_ok=True)
        path = args.out / "redis_store.json"
        path.write_text(json.dumps(out, indent=2) + "\n")
        print(f"ping {out['ping_round_trip_us']} us; wrote {path}")
    finally:
        clear_namespace(client, ns)
        client.close()
        if proc is not None:
            proc.stop()


if __name__ == "__main__":
    main()
