"""Micro-benchmark of the Redis window stores (vs MemoryWindowStore) in a sliding window.

Steady state of one home window: it holds ``--window`` tuples; every epoch inserts a
batch of B new tuples (in seq order, one index on the join key), probes it with B keys
(``lookup_many``; keys drawn from ``--keys`` distinct values, so each distinct key finds
about window/keys tuples) and purges the B oldest (``purge_below(ts=...)``).  Each operation is
timed on its own, B = 30 and 300.  Also: ``remove_oldest`` of B and out-of-order inserts
(a replica's path).  Rates are per client thread; the PING round trip is reported for scale.

Store kinds (``--stores``): ``memory`` (the reference), ``redis`` (:class:`RedisWindowStore`: every
operation one Lua round trip, every read from Redis), ``mirror`` (:class:`MirroredRedisWindowStore`:
the same writes, reads from a copy in memory) and ``blocks`` (:class:`RedisBlockStore`, what node
services use: one block per insert, written behind at a flush; ``--flush-epochs`` stands for the
node's checkpoint interval, and the flushes' cost is in ``epoch_cpu_us``).  Besides wall time, each
kind reports the client's process CPU per epoch (``epoch_cpu_us``, ``time.process_time``) and the Redis
server's (``redis_cpu_us_per_epoch``, from ``INFO cpu``): the cost that competes with the join on a
node's cores.

Redis: ``--url`` / ``REDIS_URL``, else a local ``redis-server`` started by
``infra.local_cluster`` (stopped at exit).

    python bench/redis_store_bench.py [--url redis://...] [--epochs 300] [--rest-bytes 60] \
        [--stores memory,redis,mirror,blocks] [--flush-epochs 100] [--wire]

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

WIRE = False   # --wire: the tuples carry their Avro bytes (Tup.wire), as a node's do when decoded from Kafka


def make_tuples(n: int, keys: int, rest_bytes: int, seed: int = 1) -> list[Tup]:
    rnd = random.Random(seed)
    rest = bytes(rnd.getrandbits(8) for _ in range(rest_bytes))
    # 1000 tuples per second of event time, ts non-decreasing in seq
    tups = [Tup(0, 10_000 + i, i, i, (rnd.randrange(keys), f"r{i % 7}"), rest) for i in range(n)]
    if WIRE:
        from joinlib.protocol.avro import encode_tuple
        for t in tups:
            encode_tuple(t)
    return tups


def redis_cpu_s(client) -> float:
    """CPU seconds the Redis server has used (user + system, all its threads)."""
    if client is None:
        return 0.0
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def bench_store(store, batch: int, window: int, epochs: int, keys: int, rest_bytes: int,
                redis=None, flush_epochs: int = 0) -> dict:
    """Steady-state epochs on ``store``; ``redis`` (a client) to charge the server's CPU too, ``flush_epochs``:
    call ``store.flush()`` (if it has one) every that many epochs, inside the measured time."""
    tups = make_tuples(window + batch * (epochs + 1), keys, rest_bytes)
    store.add_index((0,))
    for i in range(0, window, 1000):
        store.insert(tups[i:min(i + 1000, window)])
    flush = getattr(store, "flush", None) if flush_epochs > 0 else None
    if flush is not None:
        flush()
    rnd = random.Random(7)
    t_ins = t_look = t_purge = t_flush = 0.0
    c_ins = c_look = c_purge = c_flush = 0.0
    found = purged = distinct = 0
    pc, cpu = time.perf_counter, time.process_time
    srv0 = redis_cpu_s(redis)
    for e in range(epochs):
        lo = window + e * batch
        new = tups[lo:lo + batch]
        probes = [(rnd.randrange(keys),) for _ in range(batch)]
        t0, c0 = pc(), cpu()
        store.insert(new)
        t1, c1 = pc(), cpu()
        res = store.lookup_many((0,), probes)
        t2, c2 = pc(), cpu()
        gone = store.purge_below(ts=new[-1].ts + 1 - window)
        t3, c3 = pc(), cpu()
        t_ins, t_look, t_purge = t_ins + t1 - t0, t_look + t2 - t1, t_purge + t3 - t2
        c_ins, c_look, c_purge = c_ins + c1 - c0, c_look + c2 - c1, c_purge + c3 - c2
        if flush is not None and (e + 1) % flush_epochs == 0:
            flush()
            t_flush, c_flush = t_flush + pc() - t3, c_flush + cpu() - c3
        found += sum(len(kl) for kl in res.values())
        distinct += len(set(probes))
        purged += len(gone)
    srv = redis_cpu_s(redis) - srv0
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
    us = 1e6 / epochs
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
        "epoch_ms": round((t_ins + t_look + t_purge + t_flush) / epochs * 1000, 3),
        "epoch_cpu_us": round((c_ins + c_look + c_purge + c_flush) * us, 1),
        "insert_cpu_us": round(c_ins * us, 1), "lookup_cpu_us": round(c_look * us, 1),
        "purge_cpu_us": round(c_purge * us, 1), "flush_cpu_us_per_epoch": round(c_flush * us, 1),
        "redis_cpu_us_per_epoch": round(srv * us, 1),
    }


def ping_us(client, n: int = 2000) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        client.ping()
    return round((time.perf_counter() - t0) / n * 1e6, 1)


STORES = ("memory", "redis", "mirror", "blocks")


def make_store(kind: str, client, prefix: str):
    """A fresh store of ``kind`` (see the module docstring) under ``prefix``."""
    if kind == "memory":
        return MemoryWindowStore()
    from joinlib.adapters import redis_store
    cls = {"redis": redis_store.RedisWindowStore, "mirror": redis_store.MirroredRedisWindowStore,
           "blocks": getattr(redis_store, "RedisBlockStore", None)}[kind]
    if cls is None:
        raise SystemExit(f"this checkout has no {kind!r} store")
    return cls(client, prefix)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default=os.environ.get("REDIS_URL", ""))
    ap.add_argument("--epochs", type=int, default=300)
    ap.add_argument("--window", type=int, default=3000, help="tuples held (default 3000: 3 s at 1000/s)")
    ap.add_argument("--keys", type=int, default=100, help="distinct join values (default 100)")
    ap.add_argument("--rest-bytes", type=int, default=60, help="payload bytes per tuple (default 60)")
    ap.add_argument("--batches", default="30,300")
    ap.add_argument("--stores", default=",".join(STORES), help=f"kinds to run, of {', '.join(STORES)}")
    ap.add_argument("--flush-epochs", type=int, default=100,
                    help="epochs between flushes of a write-behind store (a node's checkpoint; default 100)")
    ap.add_argument("--wire", action="store_true",
                    help="tuples carry their Avro bytes, as a node's do when decoded from Kafka (block stores "
                         "write those instead of encoding)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    args = ap.parse_args()
    global WIRE
    WIRE = args.wire
    kinds = [k for k in args.stores.split(",") if k]
    if not set(kinds) <= set(STORES):
        ap.error(f"--stores: unknown kind(s) {sorted(set(kinds) - set(STORES))}")

    import redis

    from joinlib.adapters.redis_client import clear_namespace

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
        out: dict = {"redis_url": url, "redis_version": info.get("redis_version"),
                     "redis_py": redis.__version__, "python": platform.python_version(),
                     "cpus": os.cpu_count(), "ping_round_trip_us": ping_us(client),
                     "window": args.window, "distinct_keys": args.keys, "rest_bytes": args.rest_bytes,
                     "epochs": args.epochs, "flush_epochs": args.flush_epochs, "wire": args.wire,
                     **{k: [] for k in kinds}}
        for b in (int(x) for x in args.batches.split(",")):
            for kind in kinds:
                store = make_store(kind, client, f"{ns}/{kind}/b{b}")
                r = bench_store(store, b, args.window, args.epochs, args.keys, args.rest_bytes,
                                redis=None if kind == "memory" else client, flush_epochs=args.flush_epochs)
                out[kind].append(r)
                print(f"B={b:4d} {kind:7s} " + "  ".join(f"{k}={v}" for k, v in r.items() if k != "batch"))
            if "memory" in kinds:
                base = out["memory"][-1]["epoch_cpu_us"]
                print(f"B={b:4d} client CPU per epoch vs memory: " + ", ".join(
                    f"{k} {out[k][-1]['epoch_cpu_us'] / base:.2f}x" for k in kinds if k != "memory"))
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
