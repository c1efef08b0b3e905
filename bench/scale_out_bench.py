"""Scale-out within a site (docs/pmjoin.md "Scale-out within a site"; issue 14): a partitioned plan whose
site partitions are shared by several node instances, on Kafka + Redis with node processes.

Data: examples/routers.yaml at --rate times its rates for --seconds (seeded); plan pmjoin:hash:4 (auto per
partition).  Runs, each checked against the reference join and the simulator's bytes:

* unpaced replays (as fast as the nodes go): the plan as usual (one node per site), scaled out with one
  instance per site, and scaled out with two instances of the site that does the most joining;
* paced replays (real time): scaled out with two instances of that site, undisturbed, and the drill --
  a third instance joins at 1/4 of the run, one of the first two is SIGKILLed at 1/2 -- for the result
  latency a hand-over and a take-over cost.

    python bench/scale_out_bench.py [--out results/scale-out] [--seconds 20] [--rate 0.5]

Needs $KAFKA_BOOTSTRAP_SERVERS and $REDIS_URL (``make up``), else starts a throw-away local broker and Redis.
Writes OUT/scale_out.json and OUT/scale_out.png and prints a markdown table.  On a 2-core machine the
instances compete with the other sites' nodes and the replayer for the same cores: wall time measures the
protocol's overhead more than a speed-up.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import uuid
from collections import Counter
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _dataset(seconds: int, rate: float, out: Path) -> tuple[Any, dict, Counter]:
    from joinlib.data.files import load_streams
    from joinlib.data.gen import generate
    from joinlib.query import load_query, parse_query, query_to_dict
    from joinlib.reference import reference_join
    doc = query_to_dict(load_query(ROOT / "examples" / "routers.yaml"))
    for s in doc["streams"].values():
        s["rate"] = float(s["rate"]) * rate
    doc["name"] = f"bench_scale_{uuid.uuid4().hex[:6]}"
    query = parse_query(doc, "bench")
    generate(query, out, seconds * 1000, 7)
    streams = load_streams(query, out)
    return query, streams, reference_join(query, streams)


def _run(name: str, query: Any, streams: dict, plan: Any, want: Counter, embedded: dict, bootstrap: str,
         redis_url: str, **kw: Any) -> dict[str, Any]:
    from joinlib.node.cluster import run_cluster
    from joinlib.runtime.sink import CollectingSink
    sink = CollectingSink(query)
    d = run_cluster(query, streams, plan, sink, bootstrap=bootstrap, redis_url=redis_url, mode="process",
                    timeout_s=900, **kw)
    got = Counter((ids, ts) for ids, ts, _ in sink.results)
    row = {"run": name, "wall_s": d["wall_s"], "results": d["results"], "exact": got == want,
           "bytes": d["bytes"], "messages": d["messages"], "simulator_bytes": embedded["bytes"],
           "p50_latency_ms": d["p50_latency_ms"], "p99_latency_ms": d["p99_latency_ms"],
           "cpu_s": {s: v["cpu_s"] for s, v in d["sites"].items()}, "restarts": d["restarts"],
           "parts": {s: v.get("parts") for s, v in d["sites"].items() if v.get("parts")}}
    print(f"  {name}: {row['wall_s']:.1f} s, {row['results']} results, exact {row['exact']}, "
          f"{row['bytes']} bytes (simulator {row['simulator_bytes']})", file=sys.stderr)
    return row


def run(seconds: int, rate: float, bootstrap: str, redis_url: str) -> dict[str, Any]:
    from joinlib.planner import resolve_plan
    from joinlib.pmjoin import partitioned as choose_pm
    from joinlib.runtime.sink import CountingSink
    from joinlib.sim.engine import run_embedded
    os.environ.setdefault("JOINLIB_CHECKPOINT_EVERY_S", "0.5")
    with tempfile.TemporaryDirectory() as tmp:
        query, streams, want = _dataset(seconds, rate, Path(tmp))
    plan = choose_pm.build(query, streams, "pmjoin:hash:4", lambda q, s: resolve_plan(q, "auto", streams=s))
    embedded = run_embedded(query, streams, plan, CountingSink()).to_dict()
    print(f"{query.name}: {sum(len(t) for t in streams.values())} tuples, {sum(want.values())} results",
          file=sys.stderr)
    rows = [_run("plain", query, streams, plan, want, embedded, bootstrap, redis_url),
            _run("scaled, 1 per site", query, streams, plan, want, embedded, bootstrap, redis_url, instances={})]
    busy = max(rows[-1]["cpu_s"], key=rows[-1]["cpu_s"].get)
    rows.append(_run(f"scaled, 2 x {busy}", query, streams, plan, want, embedded, bootstrap, redis_url,
                     instances={busy: 2}))
    rows.append(_run(f"paced, 2 x {busy}", query, streams, plan, want, embedded, bootstrap, redis_url,
                     instances={busy: 2}, rate_scale=1.0))
    drill = [(busy, seconds / 4, "join"), (busy, seconds / 2, "kill")]
    rows.append(_run(f"paced drill, 2 x {busy} + join + kill", query, streams, plan, want, embedded, bootstrap,
                     redis_url, instances={busy: 2}, rate_scale=1.0, faults=drill))
    return {"query": query.name, "seconds": seconds, "rate": rate, "plan": "pmjoin:hash:4",
            "tuples": sum(len(t) for t in streams.values()), "results": sum(want.values()), "busiest_site": busy,
            "cpu_count": os.cpu_count(), "runs": rows}


def table(res: dict[str, Any]) -> str:
    lines = ["| run | wall s | results | exact | bytes (simulator) | p50 / p99 latency ms | CPU s per site | "
             "resumes: startup s |",
             "|---|---:|---:|---|---:|---:|---|---|"]
    for r in res["runs"]:
        lat = (f"{r['p50_latency_ms']:,.0f} / {r['p99_latency_ms']:,.0f}" if r["p50_latency_ms"] is not None
               else "")
        cpu = ", ".join(f"{s} {v:.1f}" for s, v in sorted(r["cpu_s"].items()))
        resumed = [p for parts in r["parts"].values() for p in parts if p.get("resumed_from_epoch")]
        res_s = ", ".join(f"p{p['part']} {p['startup_s']:.2f}" for p in resumed if p.get("startup_s") is not None)
        lines.append(f"| {r['run']} | {r['wall_s']:.1f} | {r['results']:,} | {'yes' if r['exact'] else 'NO'} | "
                     f"{r['bytes']:,} ({r['simulator_bytes']:,}) | {lat} | {cpu} | {res_s} |")
    return "\n".join(lines)


def plot(res: dict[str, Any], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    runs = res["runs"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
    unpaced = [r for r in runs if r["p50_latency_ms"] is None]
    a.bar([r["run"] for r in unpaced], [r["wall_s"] for r in unpaced], color="#4c72b0")
    a.set_ylabel("wall s (unpaced replay)")
    a.set_title(f"{res['tuples']:,} tuples, {res['results']:,} results, {res['cpu_count']} cores")
    a.tick_params(axis="x", labelrotation=15)
    paced = [r for r in runs if r["p50_latency_ms"] is not None]
    xs = range(len(paced))
    b.bar([x - 0.2 for x in xs], [r["p50_latency_ms"] for r in paced], 0.4, label="p50")
    b.bar([x + 0.2 for x in xs], [r["p99_latency_ms"] for r in paced], 0.4, label="p99")
    b.set_xticks(list(xs), [r["run"] for r in paced])
    b.set_ylabel("result latency ms (real-time replay)")
    b.set_title("a hand-over and a take-over (session timeout 6 s)")
    b.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "scale-out")
    ap.add_argument("--seconds", type=int, default=20, help="seconds of stream data (default 20)")
    ap.add_argument("--rate", type=float, default=0.5, help="times examples/routers.yaml's rates (default 0.5)")
    args = ap.parse_args(argv)
    if args.seconds < 4 or args.rate <= 0:
        ap.error("--seconds must be at least 4 and --rate positive")
    sys.path.insert(0, str(ROOT / "bench"))
    from live_common import kafka_and_redis
    bootstrap, redis_url, cluster = kafka_and_redis()
    try:
        res = run(args.seconds, args.rate, bootstrap, redis_url)
    finally:
        if cluster is not None:
            cluster.stop()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "scale_out.json").write_text(json.dumps(res, indent=2) + "\n")
    plot(res, args.out / "scale_out.png")
    print(table(res))
    print(f"wrote {args.out / 'scale_out.json'} and {args.out / 'scale_out.png'}", file=sys.stderr)
    return 0 if all(r["exact"] and r["bytes"] == r["simulator_bytes"] for r in res["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
