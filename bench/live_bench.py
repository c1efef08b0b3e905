"""Live JSON topics, the Fig. 7 workload at three sites (bench/live_common.py): sustained input events/s
and p50/p99 event-to-result latency of joinlib's node services (``make live-bench``).

1. *Sustained throughput*: ``--backlog`` seconds of events per site are written to 3-partition topics
   first; then the node services (one process per site) run the query from the beginning of the topics.
   Sustained = input events / (time of the last result - submission): the rate the nodes drain a
   backlog at, every result checked against the contract (count equal to the reference join of the
   records; ``--exact`` compares the ids too).
2. *Latency*: for each rate of ``--rates`` (events/s per site), a generator process writes events with
   real-time event times for ``--wall`` seconds and the query runs on them live; the selectivity is
   scaled as 1 / rate (f * 300 / rate) so that every rate has the default's ~80 results per event (with a
   fixed f the results grow with the square of the rate: 2,000/s per site would be ~20M results/s); the
   latency of a
   result is its emit time (node wall clock) minus the event time of its latest event (its head).
   A rate is *behind* when the p50 exceeds 1 s or results are still missing 15 s after the input ends.
   The output of each run is checked against the contract too (records read back from the topics).

    python bench/live_bench.py [--backlog 120] [--rates 300,1000,2000,4000] [--wall 20] [--plan NAME]
                               [--f 0.01] [--bootstrap HOST:PORT] [--out bench/out] [--name live]

Writes bench/out/<name>.json and .png.  Kafka: --bootstrap, $KAFKA_BOOTSTRAP_SERVERS, the ``make up``
cluster, else a throw-away local broker.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))

from live_common import (  # noqa: E402
    BASE_MS,
    PAYLOAD,
    RATE,
    ROOT,
    F,
    Joinlib,
    OutReader,
    fig7_query,
    kafka,
    logged_advances,
    machine,
    make_topics,
    percentiles,
    read_written,
    tag,
    write_backlog,
)

BEHIND_P50_MS = 1000.0


def sites_for(t: str) -> list[str]:
    return [f"n1{t}", f"n2{t}", f"n3{t}"]


def prepare_backlog(bs: str, seconds: float, f: float, rate: float = RATE, payload: int = PAYLOAD,
                    exact: bool = False) -> dict:
    """Topics holding ``seconds`` of events per site, the query over them and the reference."""
    from joinlib.ingest.contract import expected_output
    t = tag()
    topics = [f"fig7.{t}.{i}" for i in (1, 2, 3)]
    make_topics(bs, topics, 3)
    q = fig7_query(f"fig7live{t}", sites_for(t), topics, f=f, rate=rate, start="earliest", payload=payload)
    rec = write_backlog(bs, q, seconds, f=f, rate=rate, payload=payload)
    return {"tag": t, "query": q, "rec": rec, "want": expected_output(q, rec.written, BASE_MS, count_only=not exact)}


def backlog_run(bs: str, seconds: float, f: float, plan, logs: Path, exact: bool, rate: float = RATE,
                payload: int = PAYLOAD, data: Optional[dict] = None, redis_url: Optional[str] = None) -> dict:
    data = data or prepare_backlog(bs, seconds, f, rate, payload, exact)
    t, q, rec, want = data["tag"], data["query"], data["rec"], data["want"]
    sites = [s.site for s in q.streams]
    n_events = sum(len(v) for v in rec.written.values())
    svc = Joinlib(bs, sites, logs / f"backlog-{t}", redis_url=redis_url)
    try:
        svc.ready()  # the node processes start and read the control topic: not the query's CPU
        cpu0 = svc.cpu_s()
        t_submit = time.time() * 1000
        out = svc.submit(q, plan, since=str(BASE_MS))
        reader = OutReader(bs, q, out["run"], out["origin_ms"])
        done = reader.wait_for(want.count, timeout_s=120 + 4 * seconds)
        cpu = {k: round(v - cpu0[k], 2) for k, v in svc.cpu_s().items()}
        drain_s = (reader.last_emit - t_submit) / 1000.0
        time.sleep(2.5)
        stats = svc.planner.status(q.name).get("stats") or {}
        svc.stop(q)
        ok = done and reader.count == want.count
        if exact and ok:
            from collections import Counter

            from joinlib.node.live_queries import read_results
            # absolute event times (the run's origin added back), compared relative to the reference's base
            # wait_s: the first poll of a busy topic can come back empty, which read as "no results"
            res = read_results(bs, q, out["run"], out["origin_ms"], 0, 10**8, 300.0)["results"]
            pos = {s.name: s.pos for s in q.streams}
            got = Counter((tuple(r["ids"][n] for n in sorted(pos, key=pos.get)), r["ts"] - BASE_MS) for r in res)
            ok = got == want.results
        reader.close()
    finally:
        svc.close()
    return {
        "events": n_events, "results": reader.count, "reference_results": want.count,
        ("same_results" if exact else "same_count"): ok,
        "drain_s": round(drain_s, 2), "events_per_s": round(n_events / drain_s, 1),
        "results_per_s": round(reader.count / drain_s, 1), "node_cpu_s": cpu,
        "window_ms": [round(t_submit), round(reader.last_emit)],
        "plan": out["plan"], "bytes": stats.get("bytes"), "central_bytes": stats.get("central_bytes"),
        "json_bytes": sum(rec.bytes.values()),
    }


def warm_up(bs: str, seconds: float, f: float, plan, logs: Path, rate: float = RATE, payload: int = PAYLOAD,
            redis_url: Optional[str] = None) -> dict:
    """An unmeasured drain of ``seconds`` of backlog (its figures returned, for a log line).  Why: a broker just
    started compiles its hot paths (JIT) during its first drains -- a routers drain went from ~20k to ~40k events/s
    between a fresh broker's first and third -- so a bench that starts one drains once before it measures."""
    return backlog_run(bs, seconds, f, plan, logs, False, rate, payload, redis_url=redis_url)


def paced_run(bs: str, rate: float, wall: float, f: float, plan, logs: Path) -> dict:
    from joinlib.ingest.contract import expected_output
    from joinlib.query import dump_query
    t = tag()
    sites = sites_for(t)
    topics = [f"fig7p.{t}.{i}" for i in (1, 2, 3)]
    make_topics(bs, topics, 3)
    q = fig7_query(f"fig7pace{t}", sites, topics, f=f, rate=rate, start="latest")
    qfile = logs / f"{q.name}.yaml"
    qfile.parent.mkdir(parents=True, exist_ok=True)
    dump_query(q, qfile)
    svc = Joinlib(bs, sites, logs / f"paced-{t}")
    try:
        svc.ready()
        out = svc.submit(q, plan, since="now")
        time.sleep(1.0)
        reader = OutReader(bs, q, out["run"], out["origin_ms"])
        env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bs, "PYTHONPATH": str(ROOT)}
        t0 = time.time() * 1000
        gen = subprocess.Popen([sys.executable, "-m", "services.generator", "--query", str(qfile), "--rate", str(rate),
                                "--distinct", str(round(1 / f)), "--payload-bytes", "1250", "--late-every", "0",
                                "--malformed-every", "0", "--duration", str(wall)], cwd=ROOT, env=env,
                               stdout=subprocess.DEVNULL, stderr=open(logs / f"paced-{t}" / "generator.log", "wb"))
        cpu0 = svc.cpu_s()
        while gen.poll() is None:
            reader.poll(0.5)
        t_end = time.time() * 1000
        cpu = {k: round(v - cpu0[k], 2) for k, v in svc.cpu_s().items()}
        written = read_written(bs, q)
        n_events = sum(len(v) for v in written.values())
        deadline = time.monotonic() + 15
        want = None
        while time.monotonic() < deadline:
            reader.poll(1.0)
            want = expected_output(q, written, out["origin_ms"], logged_advances(bs, q, out["run"]), count_only=True)
            if reader.count >= want.count:
                break
        svc.stop(q)
        reader.close()
    finally:
        svc.close()
    # steady state: skip the first 2 s, and the last second of input, whose final epochs wait for the
    # idle timeout once the input stops (nothing later moves the watermarks)
    heads = [h for h, _, _ in reader.groups]
    first, last = (min(heads), max(heads)) if heads else (t0, t_end)
    steady = [(emit - head, n) for head, emit, n in reader.groups if first + 2000 <= head <= last - 1000]
    lat = percentiles(steady)
    behind = reader.count < (want.count if want else 0) or lat.get("p50", 0) > BEHIND_P50_MS
    return {"rate_per_site": rate, "selectivity": f, "offered_events_per_s": round(n_events / ((t_end - t0) / 1000), 1),
            "events": n_events, "results": reader.count, "reference_results": want.count if want else None,
            "exact_count": want is not None and reader.count == want.count, "latency_ms": lat,
            "behind": behind, "node_cpu_s": cpu}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backlog", type=float, default=120.0, help="seconds of events per site for the throughput run")
    ap.add_argument("--rates", default="300,1000,2000,4000",
                    help="events/s per site for the latency runs (selectivity f * 300 / rate: ~80 results per event)")
    ap.add_argument("--wall", type=float, default=20.0, help="seconds of input per latency run")
    ap.add_argument("--f", type=float, default=F, help="selectivity (default 0.01: ~80 results per input event)")
    ap.add_argument("--plan", help="plan name (default: the planner's default)")
    ap.add_argument("--exact", action="store_true", help="compare result ids with the reference, not only counts")
    ap.add_argument("--bootstrap")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    ap.add_argument("--name", default="live")
    args = ap.parse_args()
    bs, cluster = kafka(args.bootstrap)
    logs = args.out / f"{args.name}-logs"
    before = machine()
    try:
        backlog = backlog_run(bs, args.backlog, args.f, args.plan, logs, args.exact)
        print(f"backlog: {backlog['events']:,} events drained in {backlog['drain_s']} s = "
              f"{backlog['events_per_s']:,.0f} events/s ({backlog['results']:,} results, reference "
              f"{backlog['reference_results']:,}); node CPU-s {backlog['node_cpu_s']}",
              flush=True)
        runs = []
        for rate in (float(x) for x in args.rates.split(",")):
            # the default's result volume per event (~80) at every rate: f scaled as 1 / rate
            r = paced_run(bs, rate, args.wall, args.f * RATE / rate, args.plan, logs)
            runs.append(r)
            lat = r["latency_ms"]
            print(f"{rate:>6g}/s per site: offered {r['offered_events_per_s']:,.0f} events/s, {r['results']:,} results "
                  f"(reference {r['reference_results']:,}), latency p50 {lat.get('p50')} p99 {lat.get('p99')} ms"
                  f"{'  BEHIND' if r['behind'] else ''}", flush=True)
            if r["behind"]:
                break
    finally:
        if cluster is not None:
            cluster.stop()
    out = {"workload": {"paper": "Fig. 7 defaults at three sites", "tuple_bytes": 1250, "window_ms": 3000,
                        "selectivity": args.f, "tau_ms": 100, "delta_ms": 80, "rate_per_site": 300,
                        "partitions": 3, "join": "S1.J = S2.J, S2.J = S3.J"},
           "sustained_events_per_s": backlog["events_per_s"], "backlog": backlog, "paced": runs,
           "machine_before": before, "machine_after": machine()}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(out, indent=2) + "\n")
    plot(out, args.out / f"{args.name}.png")
    print(f"wrote {args.out / (args.name + '.json')} and .png")
    return 0


def plot(out: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    runs = out["paced"]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    x = [r["offered_events_per_s"] for r in runs]
    for q, style in (("p50", "o-"), ("p99", "^-")):
        ax.plot(x, [r["latency_ms"].get(q, float("nan")) for r in runs], style, label=f"{q} latency")
    ax.axvline(out["sustained_events_per_s"], ls="--", color="grey",
               label=f"sustained (backlog drain) {out['sustained_events_per_s']:,.0f} events/s")
    ax.set_yscale("log")
    ax.set_xlabel("input events/s (three sites together)")
    ax.set_ylabel("event-to-result latency (ms)")
    ax.set_title("joinlib on live JSON topics: Fig. 7 workload, three sites")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
