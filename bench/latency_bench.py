"""Result latency on the simulated network: do epochs pipeline for every algorithm?

A node starts epoch e + 1 while epoch e's round trips are in flight (lagged purges, replicas
that answer for a stated epoch), so a result's latency -- emit time minus its head tuple's
timestamp, in simulated ms -- should stay near τ (a tuple waits for the end of its batch) plus
the plan's chain of network hops, instead of growing with the length of the stream.

Workloads:

* the demo (``examples/routers_wan.yaml``, 10 s: three routers, 1250-byte packets, 25 ms
  links at 1024 kbps) with the plan ``make demo`` picks and with SM-S1 everywhere;
* Fig. 7 (``examples/fig7.yaml``: 2-way join, 300 tuples/s of 1250 bytes, 25 ms, τ = 100 ms,
  δ = 80 ms) with each of the six algorithms; the links are widened to ``--fig7-bandwidth``
  (default 16 Mbps: Fig. 7's own 1024 kbps cannot carry 300 tuples/s of 1250 bytes at all,
  so latency there measures the queue, not the runtime).

Per run: mean / p50 / p99 latency, the busiest link's utilisation, and the bound the issue
sets: p99 <= τ + δ + 2 × the plan's longest chain of hops (each hop: link latency + the mean
transfer time of that link's messages of that kind; ``PlanIR.round_trip_chain_ms``).  The check
applies where every link is below capacity (utilisation < 1).

    python bench/latency_bench.py [--out bench/out] [--name latency] [--fig7-duration 20s] [--data DIR]

Writes <out>/<name>.json and <out>/<name>.png.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

ALGORITHMS = ("SP-S", "SP-D", "SM-S1", "SM-S2", "SM-D1", "SM-D2")


def measure(query: Any, streams: dict, plan_spec: str, label: str) -> dict[str, Any]:
    from joinlib.plan.ir import FlowOp, lower
    from joinlib.planner.registry import resolve_plan
    from joinlib.runtime.sink import CountingSink
    from joinlib.sim.engine import run_embedded
    plan = resolve_plan(query, plan_spec, "paper", streams)
    rep = run_embedded(query, streams, plan, CountingSink())
    net = query.network
    size = {(ln["src"], ln["dst"], ln["kind"]): ln["bytes"] / max(1, ln["messages"]) for ln in rep.links}
    span_s = max(rep.duration_ms, 1) / 1000.0
    util: dict[tuple[str, str], float] = {}
    for ln in rep.links:
        bw = net.link(ln["src"], ln["dst"])[1]
        util[(ln["src"], ln["dst"])] = util.get((ln["src"], ln["dst"]), 0.0) + ln["bytes"] * 8 / 1000 / span_s / bw

    def hop(f: FlowOp) -> float:
        lat, bw = net.link(f.src, f.dst)
        return lat + size.get((f.src, f.dst, f.kind), 0.0) * 8 / bw

    ir = lower(query, plan)
    chain = ir.round_trip_chain_ms(hop)
    tau, delta = query.execution.interval_ms, query.execution.max_delay_ms
    bound = tau + delta + 2 * chain
    busiest = max(util.values(), default=0.0)
    return {"workload": query.name, "plan": label, "plan_json": plan.to_json(), "results": rep.results,
            "input_tuples": rep.input_tuples, "bytes": rep.bytes, "tau_ms": tau, "delta_ms": delta,
            "chain_ms": round(chain, 1), "bound_ms": round(bound, 1),
            "mean_latency_ms": rep.mean_latency_ms, "p50_latency_ms": rep.p50_latency_ms,
            "p99_latency_ms": rep.p99_latency_ms, "max_link_utilisation": round(busiest, 3),
            "below_capacity": busiest < 1.0,
            "ok": rep.p99_latency_ms is None or busiest >= 1.0 or rep.p99_latency_ms <= bound}


def workloads(args: argparse.Namespace) -> list[tuple[Any, dict, str, str]]:
    from joinlib.data.files import load_streams
    from joinlib.data.gen import generate
    from joinlib.query import load_query, parse_query, query_to_dict
    from joinlib.units import parse_duration
    out = []
    demo = load_query(ROOT / "examples" / "routers_wan.yaml")
    d = args.data / "latency-demo"
    generate(demo, d, 10_000, seed=1)
    demo_streams = load_streams(demo, d)
    out += [(demo, demo_streams, args.demo_plan, f"demo plan ({args.demo_plan})"),
            (demo, demo_streams, "SM-S1", "SM-S1")]
    doc = query_to_dict(load_query(ROOT / "examples" / "fig7.yaml"))
    doc["network"]["bandwidth"] = args.fig7_bandwidth
    fig7 = parse_query(doc, "fig7 (wide links)")
    d = args.data / "latency-fig7"
    generate(fig7, d, parse_duration(args.fig7_duration), seed=1)
    fig7_streams = load_streams(fig7, d)
    out += [(fig7, fig7_streams, a, a) for a in ALGORITHMS]
    return out


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(11, 4.5))
    labels = [f"{r['workload']}\n{r['plan']}" for r in rows]
    x = range(len(rows))
    ax.bar([i - 0.2 for i in x], [r["p50_latency_ms"] or 0 for r in rows], 0.4, label="p50", color="tab:blue")
    ax.bar([i + 0.2 for i in x], [r["p99_latency_ms"] or 0 for r in rows], 0.4, label="p99", color="tab:orange")
    ax.scatter(list(x), [r["bound_ms"] for r in rows], marker="_", s=900, color="tab:red",
               label="bound τ + δ + 2 × chain", zorder=3)
    ax.set_xticks(list(x))
    ax.set_xticklabels(labels, fontsize=7)
    ax.set_ylabel("simulated result latency (ms)")
    ax.set_title("Result latency with pipelined epochs (simulated network)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    ap.add_argument("--name", default="latency")
    ap.add_argument("--data", type=Path, default=ROOT / "bench" / "out" / "data", help="where generated data goes")
    ap.add_argument("--demo-plan", default="sampled", help="the plan `make demo` uses (default sampled)")
    ap.add_argument("--fig7-duration", default="20s")
    ap.add_argument("--fig7-bandwidth", default="16Mbps")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    from tqdm import tqdm
    rows = [measure(q, s, spec, label) for q, s, spec, label in tqdm(workloads(args), desc="latency", unit="run")]
    (args.out / f"{args.name}.json").write_text(json.dumps({"runs": rows}, indent=2) + "\n")
    plot(rows, args.out / f"{args.name}.png")
    print(f"{'workload':<12}{'plan':<24}{'mean':>8}{'p50':>8}{'p99':>8}{'bound':>8}{'util':>7}  ok")
    for r in rows:
        print(f"{r['workload']:<12}{r['plan']:<24}{r['mean_latency_ms'] or 0:>8.0f}{r['p50_latency_ms'] or 0:>8.0f}"
              f"{r['p99_latency_ms'] or 0:>8.0f}{r['bound_ms']:>8.0f}{r['max_link_utilisation']:>7.2f}  "
              f"{'yes' if r['ok'] else 'NO'}")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
