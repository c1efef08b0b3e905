"""Scale-out with live sources (issue 27 item 4): CPU seconds per event and throughput of a scaled-out live query
as the site that joins gets N = 1, 2, 4 node instance processes.

Workload: bench/live_common.py's Fig. 7 workload (3 sites, JSON events with 1,250-byte payloads on 3-partition
user topics, a 3-way chain, 3 s windows, f = 0.01), a backlog of --seconds per site written once; each run is a
fresh query over it (``start: earliest``) submitted with ``--plan pmjoin:hash:4 --scale-out``.  Each site's
re-keyer (joinlib/node/rekey.py) splits its stream into the plan's 4 partitions; the instances of the busy site
(the one whose node process used the most CPU with N = 1) share its partitions, and the re-keyer runs in one of
them.  Node processes, Redis windows and checkpoints (every second).  Each run's result count must equal the
reference's.

    python bench/scale_out_live_bench.py [--out results/scale-out-live] [--seconds 120] [--instances 1,2,4]
                                          [--no-warmup]

Reported per run: drain seconds (submission to the last result), events/s, the CPU seconds of the busy site's
instances (total and per instance), CPU microseconds per event at that site (total CPU / events), and every node
process's CPU.  On a 2-core machine the wall-clock speed-up stops at 2; the CPU per event is what must stay
flat (issue 27: within 1.2x from N = 1 to N = 4).  Writes OUT/scale_out_live.json and prints a markdown table.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from live_common import BASE_MS, OutReader, cpu_seconds, kafka_and_redis, machine, tag  # noqa: E402

PLAN = "pmjoin:hash:4"


def _renamed(query: Any, name: str) -> Any:
    from joinlib.query import parse_query, query_to_dict
    doc = query_to_dict(query)
    doc["name"] = name
    return parse_query(doc, name)


def _nodes(bs: str, redis_url: str, sites: list[str], busy: Optional[str], n: int, logs: Path) -> dict[str, Any]:
    """One node process per site, ``n`` shared ones at ``busy`` (None: one everywhere)."""
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bs, "REDIS_URL": redis_url, "METRICS_PORT": "0",
           "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    logs.mkdir(parents=True, exist_ok=True)
    procs = {}
    for site in sites:
        for i in range(n if site == busy else 1):
            cmd = [sys.executable, "-m", "services.node", "--site", site, "--serve"]
            if site == busy:
                cmd.append("--shared")
            log = open(logs / f"node-{site}-{i}.log", "wb")
            procs[f"{site}#{i}"] = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    return procs


def _close(procs: dict[str, Any]) -> None:
    for p in procs.values():
        p.terminate()
    for p in procs.values():
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()


def one_run(bs: str, redis_url: str, data: dict, busy: Optional[str], n: int, logs: Path) -> dict[str, Any]:
    """A fresh scaled-out query over the backlog, ``n`` instances at ``busy``; drained, counted, stopped."""
    import yaml

    from joinlib.query import query_to_dict
    from services.planner.service import PlannerService
    q = _renamed(data["query"], f"solive{tag()}")
    sites = [s.site for s in q.streams]
    procs = _nodes(bs, redis_url, sites, busy, n, logs / q.name)
    planner = PlannerService(bs)
    try:
        time.sleep(3.0)   # the node processes start and read the control topic
        cpu0 = cpu_seconds(procs)
        t_submit = time.time() * 1000
        out = planner.submit(yaml.safe_dump(query_to_dict(q)), PLAN, None, str(BASE_MS), scale_out=True)
        reader = OutReader(bs, q, out["run"], out["origin_ms"])
        want = data["want"].count
        done = reader.wait_for(want, timeout_s=300)
        cpu = {k: round(v - cpu0[k], 2) for k, v in cpu_seconds(procs).items()}
        drain_s = (reader.last_emit - t_submit) / 1000.0
        reader.close()
        planner.stop(q.name)
        time.sleep(2.0)
    finally:
        _close(procs)
        planner.close()
    events = sum(len(v) for v in data["rec"].written.values())
    at = busy or max(sites, key=lambda s: cpu[f"{s}#0"])
    mine = [v for k, v in cpu.items() if k.split("#")[0] == at]
    row = {"instances": n, "site": at, "events": events, "results": reader.count, "reference_results": want,
           "same_count": done and reader.count == want, "drain_s": round(drain_s, 2),
           "events_per_s": round(events / drain_s, 1), "site_cpu_s": round(sum(mine), 2),
           "cpu_s_per_instance": mine, "site_cpu_us_per_event": round(sum(mine) / events * 1e6, 1),
           "all_cpu_us_per_event": round(sum(cpu.values()) / events * 1e6, 1), "node_cpu_s": cpu}
    print(f"  N={n} at {at}: {row['drain_s']} s, {row['events_per_s']} events/s, {row['site_cpu_us_per_event']} "
          f"us/event at {at}, count ok {row['same_count']}", file=sys.stderr)
    return row


def run(bs: str, redis_url: str, seconds: float, instances: list[int], logs: Path,
        warm_up: bool = True) -> dict[str, Any]:
    from live_bench import prepare_backlog
    os.environ.setdefault("JOINLIB_CHECKPOINT_EVERY_S", "1")
    load0 = list(os.getloadavg())
    data = prepare_backlog(bs, seconds, 0.01)
    print(f"backlog: {sum(len(v) for v in data['rec'].written.values())} events, {data['want'].count} results",
          file=sys.stderr)
    rows, busy = [], None
    if warm_up:   # a broker's first drains run its JIT (live_bench.warm_up): N = 1 once, unmeasured, first
        busy = one_run(bs, redis_url, data, None, 1, logs)["site"]
        print("warm-up: N = 1 once, not measured", file=sys.stderr)
    for n in instances:
        rows.append(one_run(bs, redis_url, data, busy if n > 1 else None, n, logs))
        busy = busy or rows[-1]["site"]
    base = next((r["site_cpu_us_per_event"] for r in rows if r["instances"] == 1), None)
    for r in rows:
        r["cpu_per_event_vs_n1"] = round(r["site_cpu_us_per_event"] / base, 2) if base else None
    return {"plan": PLAN, "seconds": seconds, "workload": "bench/live_common.py Fig. 7, f = 0.01",
            "machine": {**machine(), "loadavg_before": load0}, "runs": rows}


def table(res: dict[str, Any]) -> str:
    lines = ["| N instances | drain s | events/s | results = reference | CPU s at the site (per instance) | "
             "CPU µs/event at the site | vs N = 1 | CPU µs/event, all nodes |",
             "|---:|---:|---:|---|---|---:|---:|---:|"]
    for r in res["runs"]:
        per = ", ".join(f"{v:.1f}" for v in r["cpu_s_per_instance"])
        lines.append(f"| {r['instances']} | {r['drain_s']:.1f} | {r['events_per_s']:,.0f} | "
                     f"{'yes' if r['same_count'] else 'NO'} | {r['site_cpu_s']:.1f} ({per}) | "
                     f"{r['site_cpu_us_per_event']:.0f} | {r['cpu_per_event_vs_n1']} | "
                     f"{r['all_cpu_us_per_event']:.0f} |")
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "scale-out-live")
    ap.add_argument("--seconds", type=float, default=120,
                    help="seconds of events per site in the backlog (default 120: long enough that the instances' "
                         "start-up and idle rounds do not weigh on the CPU per event)")
    ap.add_argument("--no-warmup", action="store_true",
                    help="measure from the first drain (default: one unmeasured N = 1 drain first, since a broker's "
                         "first drains run its JIT and would make N = 1 look dearer)")
    ap.add_argument("--instances", default="1,2,4", help="instance counts at the busy site (default 1,2,4)")
    args = ap.parse_args(argv)
    try:
        counts = [int(x) for x in args.instances.split(",")]
    except ValueError:
        ap.error(f"--instances {args.instances!r}: expected numbers separated by commas, e.g. 1,2,4")
    if args.seconds < 5 or not counts or min(counts) < 1 or counts[0] != 1:
        ap.error("--seconds must be at least 5 and --instances start with 1 (it finds the busy site)")
    bs, redis_url, cluster = kafka_and_redis()
    try:
        import tempfile
        logs = Path(tempfile.mkdtemp(prefix="scale-out-live-"))
        print(f"node logs in {logs}", file=sys.stderr)
        res = run(bs, redis_url, args.seconds, counts, logs, warm_up=not args.no_warmup)
    finally:
        if cluster is not None:
            cluster.stop()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "scale_out_live.json").write_text(json.dumps(res, indent=2) + "\n")
    print(table(res))
    print(f"wrote {args.out / 'scale_out_live.json'}", file=sys.stderr)
    return 0 if all(r["same_count"] for r in res["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
