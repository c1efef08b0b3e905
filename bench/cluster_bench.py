"""Cluster mode on a real broker: sustainable input rate and end-to-end result latency.

Workload: examples/fig7.yaml (the paper's Fig. 7 default: 2 sites, 250-attribute tuples,
f = 0.1, 300 tuples/s per stream, 3 s windows; ~54k results per second of stream time at
rate 1).  For each rate scale X (1, 2, 4, ...) the sources replay the same data X times
faster than event time (wall-clock paced, batch e released at t0 + (e+1)*tau/X), the node
services run as real subprocesses (``python -m services.node``), results go through
``out.<query>`` to the collector.  Per run:

* offered rate = input tuples / (event span / X);
* throughput = input tuples / (wall time from t0 until the last result was emitted);
* latency of a result = emit_ms - (t0 + head_ts / X), wall-clock ms: batching (a tuple waits
  for the end of its interval), Kafka hops, processing and queueing;
* the system *falls behind* when throughput < 90% of the offered rate or the median latency
  exceeds 1 s; the sweep stops at the first such scale;
* per node: input tuples of its own streams per CPU second of its process (librdkafka threads
  included) -- the rate one node could take with a core to itself; on a small machine the nodes,
  the broker and this harness share the cores, so the sustained rate is lower.

Every run replays ``--wall`` seconds of wall-clock time (the first X * wall seconds of event
time at scale X), so that queues have the same time to build up at every rate.

    python bench/cluster_bench.py [--wall 6 | --duration 10s] [--plan greedy] [--scales 0.5,1,2,4]
                                  [--selectivity F] [--mode process|thread]
                                  [--bootstrap HOST:PORT] [--redis URL] [--kill SITE@SECONDS]
                                  [--out bench/out] [--name cluster]

Kafka: --bootstrap, else $KAFKA_BOOTSTRAP_SERVERS, else a throw-away local broker
(infra.local_cluster).  Writes bench/out/<name>.json and bench/out/<name>.png (default name: cluster).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BEHIND_THROUGHPUT = 0.9
BEHIND_P50_MS = 1000.0


def one(query, streams, plan, bootstrap: str, scale: float, mode: str, redis_url, faults=()) -> dict:
    from joinlib.node.cluster import run_cluster
    span_s = max((t[-1].ts for t in streams.values() if t), default=0) / 1000.0
    rep = run_cluster(query, streams, plan, None, bootstrap=bootstrap, rate_scale=scale, mode=mode,
                      redis_url=redis_url, timeout_s=120.0 + 10 * span_s / scale, faults=faults)
    info = rep["replay"]
    n = rep["input_tuples"]
    span_ms = rep["duration_ms"]
    offered = n / (span_ms / 1000.0 / scale)
    # the last result's emit time relative to t0 (event time 0 on the wall clock)
    last_emit = rep["last_emit_ms"] and (rep["last_emit_ms"] - info["t0_ms"])
    busy_s = max(last_emit / 1000.0, span_ms / 1000.0 / scale) if last_emit else None
    throughput = n / busy_s if busy_s else None
    lat = rep["latency_ms"]
    behind = (throughput is not None and throughput < BEHIND_THROUGHPUT * offered) or \
        (lat.get("p50", 0) > BEHIND_P50_MS)
    return {
        "rate_scale": scale, "input_tuples": n, "results": rep["results"],
        "offered_tuples_per_s": round(offered, 1),
        "throughput_tuples_per_s": None if throughput is None else round(throughput, 1),
        "results_per_s": None if not busy_s else round(rep["results"] / busy_s, 1),
        "latency_ms": lat, "behind": behind,
        "replay_behind_schedule_ms": round(info["behind_ms"], 1),
        "wall_s": rep["wall_s"], "bytes": rep["bytes"], "messages": rep["messages"],
        "late_messages": rep["late_messages"], "transmission_ms": rep["transmission_ms"],
        "processing_s": rep["processing_s"],
        # per node: its input tuples per CPU second of its process -- what one node could take with a
        # core to itself (on this machine all nodes, the broker and this harness share 2 cores)
        "restarts": [{**r, "resumed_from_epoch": rep["sites"][r["site"]]["resumed_from_epoch"]}
                     for r in rep["restarts"]],
        "nodes": {site: {"input_tuples": st["input_tuples"], "cpu_s": st["cpu_s"],
                         "input_tuples_per_cpu_s": (round(st["input_tuples"] / st["cpu_s"], 1) if st.get("cpu_s")
                                                    else None)}
                  for site, st in rep["sites"].items()},
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--query", type=Path, default=ROOT / "examples" / "fig7.yaml")
    ap.add_argument("--wall", type=float, default=6.0,
                    help="seconds of wall-clock replay per run: scale X replays the first X*wall seconds "
                         "of event time (default 6)")
    ap.add_argument("--duration", help="instead: replay this much event time at every scale (e.g. 10s)")
    ap.add_argument("--plan", default="greedy", help="plan (as for `joinlib run --plan`; default greedy)")
    ap.add_argument("--scales", default="0.5,1,1.5,2,3,4,6,8,12,16", help="rate scales to try, in order")
    ap.add_argument("--selectivity", type=float,
                    help="override every stream's selectivity (fewer results: the input-bound limit)")
    ap.add_argument("--mode", default="process", choices=("process", "thread"), help="node services as")
    ap.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    ap.add_argument("--redis", default=None, help="keep windows in Redis at this URL")
    ap.add_argument("--kill", action="append", default=[], metavar="SITE@SECONDS",
                    help="in every run, SIGKILL the node of SITE that many wall-clock seconds into the replay; "
                         "its successor resumes from its Redis checkpoint (a local redis-server is started "
                         "unless --redis): the cost of a crash in throughput and latency")
    ap.add_argument("--keep-going", action="store_true", help="try every scale even after falling behind")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    ap.add_argument("--name", default="cluster", help="output file stem (default cluster: cluster.json/.png)")
    args = ap.parse_args()

    from joinlib.data.files import load_streams
    from joinlib.data.gen import generate
    from joinlib.planner.registry import resolve_plan
    from joinlib.query import load_query
    from joinlib.units import parse_duration

    query = load_query(args.query)
    if args.selectivity:
        from joinlib.query import parse_query, query_to_dict
        d = query_to_dict(query)
        for spec in d["streams"].values():
            spec["selectivity"] = args.selectivity
        d["name"] = f"{query.name}_f{str(args.selectivity).replace('.', '')}"
        query = parse_query(d, f"{args.query} (selectivity {args.selectivity})")
    plan = resolve_plan(query, args.plan)
    scales = [float(x) for x in args.scales.split(",")]
    fixed = parse_duration(args.duration) if args.duration else None
    duration = fixed or int(max(scales) * args.wall * 1000)
    data = args.out / "data" / f"cluster-{query.name}-{duration}ms"
    if not all((data / f"{s.name}.jsonl").exists() for s in query.streams):
        print(f"generating {duration / 1000:.0f}s of {query.name} data in {data}", file=sys.stderr)
        generate(query, data, duration, seed=1)
    all_streams = load_streams(query, data)
    from joinlib.cli.run_options import parse_kills
    faults = parse_kills(args.kill, query)
    cluster = None
    need_redis = bool(faults) and not args.redis
    if not args.bootstrap or need_redis:
        from infra.local_cluster import LocalCluster
        print(f"starting a local {'broker' if not args.bootstrap else ''}"
              f"{' and ' if not args.bootstrap and need_redis else ''}{'redis-server' if need_redis else ''}",
              file=sys.stderr)
        cluster = LocalCluster.start(kafka=not args.bootstrap, redis=need_redis)
        args.bootstrap = args.bootstrap or cluster.kafka_bootstrap
        args.redis = args.redis or (cluster.redis_url if need_redis else None)
    rows = []
    load_before = list(os.getloadavg())  # other work on the machine skews every number here
    try:
        for scale in scales:
            t = time.perf_counter()
            span = fixed or int(scale * args.wall * 1000)
            streams = {k: [x for x in v if x.ts < span] for k, v in all_streams.items()}
            r = one(query, streams, plan, args.bootstrap, scale, args.mode, args.redis, faults)
            rows.append(r)
            lat = r["latency_ms"]
            print(f"x{scale:<5g} offered {r['offered_tuples_per_s']:>9,.0f} tuples/s  "
                  f"throughput {r['throughput_tuples_per_s'] or 0:>9,.0f} tuples/s  "
                  f"{r['results_per_s'] or 0:>10,.0f} results/s  latency p50 {lat.get('p50', 0):>8.1f} "
                  f"p99 {lat.get('p99', 0):>8.1f} max {lat.get('max', 0):>8.1f} ms  per node CPU-s: "
                  + ", ".join(f"{site} {n['input_tuples_per_cpu_s'] or 0:,.0f} tuples"
                              for site, n in r["nodes"].items())
                  + "".join(f"  [killed {x['site']} at {x['after_s']:g}s, resumed from epoch {x['resumed_from_epoch']}]"
                            for x in r["restarts"])
                  + f"{'  BEHIND' if r['behind'] else ''}  ({time.perf_counter() - t:.1f}s)", flush=True)
            if r["behind"] and not args.keep_going:
                break
    finally:
        if cluster is not None:
            cluster.stop()
    sustained = [r for r in rows if not r["behind"]]
    out = {
        "query": query.name, "plan": plan.to_json(), "node_mode": args.mode,
        "event_ms_per_run": fixed or f"rate_scale * {int(args.wall * 1000)}",
        "redis": bool(args.redis),
        "kill": args.kill,
        "criteria": {"throughput_below": BEHIND_THROUGHPUT, "p50_latency_above_ms": BEHIND_P50_MS},
        "max_sustained_tuples_per_s": max((r["throughput_tuples_per_s"] for r in sustained), default=None),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform(),
                    "loadavg_before": load_before, "loadavg_after": list(os.getloadavg())},
        "runs": rows,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(out, indent=2) + "\n")
    plot(rows, args.out / f"{args.name}.png", query.name)
    print(f"wrote {args.out / (args.name + '.json')} and {args.out / (args.name + '.png')}; max sustained "
          f"{out['max_sustained_tuples_per_s']} input tuples/s")
    return 0


def plot(rows: list[dict], path: Path, name: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
    x = [r["offered_tuples_per_s"] for r in rows]
    a.plot(x, x, ls="--", color="grey", label="offered")
    a.plot(x, [r["throughput_tuples_per_s"] or 0 for r in rows], marker="o", label="achieved")
    for r in rows:
        if r["behind"]:
            a.annotate("behind", (r["offered_tuples_per_s"], r["throughput_tuples_per_s"] or 0))
    a.set_xlabel("offered input rate (tuples/s)")
    a.set_ylabel("input tuples/s")
    a.set_title(f"{name}: cluster throughput")
    a.legend()
    for q, style in (("p50", "o-"), ("p90", "s-"), ("p99", "^-"), ("max", "x:")):
        b.plot(x, [r["latency_ms"].get(q, float("nan")) for r in rows], style, label=q)
    b.set_yscale("log")
    b.set_xlabel("offered input rate (tuples/s)")
    b.set_ylabel("result latency (ms, wall clock)")
    b.set_title("end-to-end latency (emit - replay time of head tuple)")
    b.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
