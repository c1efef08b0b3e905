"""Adaptive re-planning (seed 003) embedded and on Kafka + Redis: the table of docs/adaptive.md, "Cluster mode".

The 4-way toggle workload of ``tests/integration/test_adaptive_cluster.py`` (examples/toggle4.yaml; S4 at
50/s, 200/s from 1.5 s, 50/s from 3.5 s; 5.5 s of data, seed 2), run with the default configuration of
each mode (CNU, DNU): embedded, and on Kafka with node threads (Redis windows) and node processes (Redis
windows), replayed at event-time pace; plus the initial plan without re-planning.  Per run: the trigger
epochs, the first head epoch of each new generation, bytes, wall time and whether the output equals the
reference join.

    python bench/adaptive_cluster.py [--out results/adaptive-cluster] [--bootstrap HOST:PORT] [--redis URL]

Kafka and Redis: --bootstrap / --redis, else $KAFKA_BOOTSTRAP_SERVERS / $REDIS_URL, else throw-away local
ones.  Writes OUT/adaptive_cluster.json and OUT/adaptive_cluster.md (the table).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DURATION_MS = 5500


def _workload() -> tuple[Any, dict, Counter]:
    from joinlib.adaptive.workload import Toggle, write_toggle
    from joinlib.data.files import load_streams
    from joinlib.query import load_query, parse_query, query_to_dict
    from joinlib.reference import reference_join
    d = query_to_dict(load_query(ROOT / "examples" / "toggle4.yaml"))
    d["name"] = "bench_toggle4"
    query = parse_query(d, "toggle4 (bench)")
    with tempfile.TemporaryDirectory() as tmp:
        write_toggle(query, Toggle("S4"), Path(tmp), DURATION_MS, 2)
        streams = load_streams(query, tmp)
    return query, streams, Counter(reference_join(query, streams))


def _row(name: str, results: Counter, want: Counter, bytes_: int, wall: float, adaptive: Optional[dict],
         switches: list) -> dict[str, Any]:
    triggers = [t["epoch"] for t in (adaptive or {}).get("triggers", [])]
    return {"run": name, "triggers": triggers, "switches": [s["from_epoch"] for s in switches[1:]],
            "bytes": bytes_, "wall_s": round(wall, 1), "exact": results == want,
            "results": sum(results.values())}


def measure(bootstrap: str, redis_url: str) -> list[dict[str, Any]]:
    from joinlib.adaptive.config import AdaptiveConfig
    from joinlib.adaptive.embedded import run_adaptive
    from joinlib.adaptive.planner import algorithm1
    from joinlib.adaptive.stats import with_stats
    from joinlib.node.cluster import run_cluster
    from joinlib.runtime.sink import CollectingSink
    from joinlib.sim.engine import run_embedded
    query, streams, want = _workload()
    rows = []
    for mode in ("cnu", "dnu"):
        cfg = AdaptiveConfig(mode)
        sink = CollectingSink(query)
        t0 = time.perf_counter()
        rep = run_adaptive(query, streams, cfg, sink)
        got = Counter((ids, ts) for ids, ts, _ in sink.results)
        d = rep.to_dict()
        rows.append(_row(f"embedded {mode.upper()}", got, want, d["bytes"], time.perf_counter() - t0,
                         d.get("adaptive"), d.get("switches") or []))
        initial = algorithm1(with_stats(query, {}), cfg.model).to_plan(query)
        for how in ("thread", "process"):
            sink = CollectingSink(query)
            t0 = time.perf_counter()
            rep_c = run_cluster(query, streams, initial, sink, bootstrap=bootstrap, redis_url=redis_url, mode=how,
                                rate_scale=1.0, timeout_s=120, adaptive=cfg)
            got = Counter((ids, ts) for ids, ts, _ in sink.results)
            kind = {"thread": "node threads", "process": "node processes"}[how]
            rows.append(_row(f"cluster {mode.upper()}, {kind}, Redis windows", got, want, rep_c["bytes"],
                             time.perf_counter() - t0, rep_c.get("adaptive"), rep_c.get("switches") or []))
            print(rows[-1], file=sys.stderr, flush=True)
    static = algorithm1(with_stats(query, {}), AdaptiveConfig("cnu").model).to_plan(query)
    sink = CollectingSink(query)
    t0 = time.perf_counter()
    rep_s = run_embedded(query, streams, static, sink)
    got = Counter((ids, ts) for ids, ts, _ in sink.results)
    rows.append(_row("static (the initial plan throughout)", got, want, rep_s.bytes, time.perf_counter() - t0,
                     None, []))
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    out = ["| | triggers (epoch) | switches (first head epoch) | bytes | wall | exact |", "|---|---|---|---:|---:|---|"]
    for r in rows:
        trig = ", ".join(map(str, r["triggers"])) or "--"
        sw = ", ".join(map(str, r["switches"])) or "--"
        exact = "yes" if r["exact"] else "NO"
        out.append(f"| {r['run']} | {trig} | {sw} | {r['bytes']:,} | {r['wall_s']} s | {exact} |")
    return "\n".join(out) + "\n"


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "adaptive-cluster")
    ap.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    ap.add_argument("--redis", default=os.environ.get("REDIS_URL"))
    args = ap.parse_args(argv)
    cluster = None
    if not args.bootstrap or not args.redis:
        from infra.local_cluster import LocalCluster
        print("starting a local broker and redis-server", file=sys.stderr)
        cluster = LocalCluster.start(kafka=not args.bootstrap, redis=not args.redis)
        args.bootstrap = args.bootstrap or cluster.kafka_bootstrap
        args.redis = args.redis or cluster.redis_url
    try:
        rows = measure(args.bootstrap, args.redis)
    finally:
        if cluster is not None:
            cluster.stop()
    args.out.mkdir(parents=True, exist_ok=True)
    doc = {"rows": rows, "load_avg": list(os.getloadavg()), "command": "python bench/adaptive_cluster.py"}
    (args.out / "adaptive_cluster.json").write_text(json.dumps(doc, indent=1) + "\n")
    (args.out / "adaptive_cluster.md").write_text(table(rows))
    print(table(rows))
    return 0 if all(r["exact"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
