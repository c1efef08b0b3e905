"""MJoin trees run (docs/pmjoin.md "MJoin trees"; issues 14 and 15): measured bytes against the model,
and an operator shared by two queries.

Part 1, seed 002's Example 1 x 10 (examples/pmjoin_routers.yaml, the data of examples/pmjoin_plan.py,
20 s): the model predicts centralized 1001, one STREAMJOINOPT tree 540.3 and PMJoin 0.696 bytes/s with
1-byte tuples and no protocol. Each plan is run embedded; per plan the bytes and messages shipped, the
bytes the model predicts for 20 s where it has a figure, and whether the output is the reference join.

Part 2, operator reuse (seed 001): four routers, 1250-byte packets, 100/s each, 3 s windows, 5000
destinations.
Q1 = S1 x S2 x S3 and Q2 = S1 x S2 x S4, both as ((S1 x S2)@r2 x S_k)@r_k. Run apart, S1 is shipped to
r2 twice; deployed together (joinlib.mjoin.derived.deploy), the S1 x S2 operator runs once and its derived
stream feeds both queries' roots.

    python bench/mjoin_bench.py [--out results/mjoin] [--seconds 20] [--cluster [HOST:PORT]]

With --cluster, every plan of part 1 and the shared deployment of part 2 also run on Kafka (node threads;
$KAFKA_BOOTSTRAP_SERVERS, else a throw-away local broker): bytes on Kafka, and the output checked there too.

Writes OUT/mjoin.json and OUT/mjoin.png, and prints both tables (markdown).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PLANS = ("central:n1", "auto", "mjoin", "pmjoin:rate:3", "pmjoin:rate:3:mjoin", "pmjoin:hash:3:mjoin")
MODEL = {"central:n1": 1001.0, "mjoin": 540.3, "pmjoin:rate:3:mjoin": 0.696}   # bytes/s, the digest's


class Collect:
    """A sink keeping each result's (ids by stream position, head ts)."""

    def __init__(self) -> None:
        self.got: Counter = Counter()

    def emit(self, inst: Any, head_pos: int, pos: int, groups: list, now: float) -> None:
        for row, tups in groups:
            for t in tups:
                r = list(row)
                r[pos] = t
                self.got[(tuple(x.id for x in r), r[head_pos].ts)] += 1


def _row(name: str, report: Any, got: Counter, want: Counter, model: Any = None) -> dict[str, Any]:
    return {"plan": name, "bytes": report.bytes, "messages": report.messages, "results": sum(got.values()),
            "exact": got == want, "model_bytes": model}


def example1(seconds: int, bootstrap: Any = None) -> list[dict[str, Any]]:
    """Part 1; with ``bootstrap`` each plan runs on that Kafka too (node threads, unpaced replay)."""
    from joinlib.data.files import load_streams
    from joinlib.mjoin.derived import deploy
    from joinlib.mjoin.tree_plans import is_tree, plan_partitioned_trees, plan_tree
    from joinlib.plan.partitioned import is_partitioned
    from joinlib.planner.registry import resolve_plan
    from joinlib.pmjoin.partitioned import build
    from joinlib.query import load_query
    from joinlib.reference import reference_join
    from joinlib.sim.engine import run_embedded
    from joinlib.sim.tree_engine import run_deployment
    spec = importlib.util.spec_from_file_location("pmjoin_plan", ROOT / "examples" / "pmjoin_plan.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    query = load_query(ROOT / "examples" / "pmjoin_routers.yaml")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        mod.write_demo(Path(tmp), seconds=seconds)
        streams = load_streams(query, tmp)
    want = Counter(reference_join(query, streams))
    for name in PLANS:
        sink = Collect()
        if is_tree(name):
            if name.startswith("pmjoin"):
                plan, inputs = plan_partitioned_trees(query, streams, name)
                programs = list(plan.programs)
            else:
                plan = plan_tree(query, name, streams)
                programs, inputs = [plan], [streams]
            rep = run_deployment(deploy(programs, share=False),
                                 {p.base.name: s for p, s in zip(programs, inputs, strict=True)},
                                 {p.base.name: sink for p in programs})
        else:
            plan = (build(query, streams, name, lambda q, s: resolve_plan(q, "auto", streams=s))
                    if is_partitioned(name) else resolve_plan(query, name, streams=streams))
            rep = run_embedded(query, streams, plan, sink)
        model = MODEL.get(name)
        row = _row(name, rep, sink.got, want, round(model * seconds, 1) if model is not None else None)
        if bootstrap is not None:
            from joinlib.node.cluster import run_cluster
            on_kafka = Collect()
            d = run_cluster(query, streams, plan, on_kafka, bootstrap=bootstrap, mode="thread", timeout_s=600)
            row.update(kafka_bytes=d["bytes"], kafka_messages=d["messages"], kafka_exact=on_kafka.got == want,
                       kafka_wall_s=d["wall_s"])
            row["exact"] = row["exact"] and row["kafka_exact"]
        rows.append(row)
        print(f"  {name}: {rep.bytes} bytes" + (f", on Kafka {row['kafka_bytes']}" if bootstrap else ""),
              file=sys.stderr)
    return rows


CATALOGUE = {
    "name": "catalogue",
    "streams": {f"S{i}": {"site": f"r{i}", "window": "3s", "rate": 100, "attributes": 250, "tuple_bytes": 1250,
                          "selectivity": 0.0002} for i in range(1, 5)},
    "join": ["S1.dest = S2.dest", "S2.dest = S3.dest", "S2.dest = S4.dest"],
    "network": {"latency": "25ms", "bandwidth": "1024kbps"},
    "execution": {"interval": "100ms", "max_delay": "80ms"},
}


class Route:
    """Each query's results to its own :class:`Collect` (the instance key names the query)."""

    def __init__(self, names: Any) -> None:
        self.sinks = {n: Collect() for n in names}

    def emit(self, inst: Any, head_pos: int, pos: int, groups: list, now: float) -> None:
        self.sinks[inst[0]].emit(inst, head_pos, pos, groups, now)


def sharing(seconds: int, bootstrap: Any = None) -> list[dict[str, Any]]:
    """Part 2; with ``bootstrap`` the shared deployment runs on that Kafka too."""
    from joinlib.data.files import load_streams
    from joinlib.data.gen import generate
    from joinlib.mjoin.derived import deploy, lower_tree
    from joinlib.mjoin.tree_plans import SharedTrees, union_query
    from joinlib.pmjoin.tree import Leaf, MJoin
    from joinlib.query import parse_query
    from joinlib.reference import reference_join
    from joinlib.sim.tree_engine import run_deployment
    cat = parse_query(CATALOGUE, "catalogue")
    with tempfile.TemporaryDirectory() as tmp:
        generate(cat, tmp, seconds * 1000, 1)
        all_streams = load_streams(cat, tmp)
        data = {}
        queries = {}
        for name, other in (("Q1", "S3"), ("Q2", "S4")):
            d = json.loads(json.dumps(CATALOGUE))
            d["name"] = name
            d["streams"] = {k: v for k, v in d["streams"].items() if k in ("S1", "S2", other)}
            d["join"] = ["S1.dest = S2.dest", f"S2.dest = {other}.dest"]
            q = queries[name] = parse_query(d, name)
            data[name] = load_streams(q, tmp)
    s12 = MJoin((Leaf("S1", "r1"), Leaf("S2", "r2")), "r2")
    programs = {n: lower_tree(q, MJoin((s12, Leaf(o, f"r{o[1]}")), f"r{o[1]}"))
                for (n, q), o in zip(queries.items(), ("S3", "S4"), strict=True)}
    want = {n: Counter(reference_join(queries[n], data[n])) for n in queries}
    rows = []
    for n, prog in programs.items():
        sink = Collect()
        rep = run_deployment(deploy([prog]), {n: data[n]}, {n: sink})
        rows.append(_row(f"{n} alone: {prog.describe()}", rep, sink.got, want[n]))
    sinks = {n: Collect() for n in programs}
    dep = deploy(list(programs.values()))
    rep = run_deployment(dep, data, sinks)
    row = _row(f"Q1 + Q2 sharing S1 x S2 ({len(dep.ops)} operators)", rep, Counter(), Counter())
    row["results"] = sum(sum(s.got.values()) for s in sinks.values())
    row["exact"] = all(sinks[n].got == want[n] for n in programs)
    if bootstrap is not None:
        from joinlib.node.cluster import run_cluster
        base = union_query("catalogue", list(queries.values()))
        route = Route(programs)
        d = run_cluster(base, {n: all_streams[n] for n in base.names}, SharedTrees(base, tuple(programs.values())),
                        route, bootstrap=bootstrap, mode="thread", timeout_s=600)
        row.update(kafka_bytes=d["bytes"], kafka_messages=d["messages"], kafka_wall_s=d["wall_s"],
                   kafka_exact=all(route.sinks[n].got == want[n] for n in programs))
        row["exact"] = row["exact"] and row["kafka_exact"]
        print(f"  shared on Kafka: {d['bytes']} bytes", file=sys.stderr)
    rows.append(row)
    return rows


def _on_kafka(seconds: int, bootstrap: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    cluster = None
    if not bootstrap:
        from infra.local_cluster import LocalCluster
        print("starting a local broker", file=sys.stderr)
        cluster = LocalCluster.start(kafka=True, redis=False)
        bootstrap = cluster.kafka_bootstrap
    try:
        part1 = example1(seconds, bootstrap)
        print("part 2: a shared operator", file=sys.stderr)
        return part1, sharing(seconds, bootstrap)
    finally:
        if cluster is not None:
            cluster.stop()


def _table(rows: list[dict[str, Any]]) -> str:
    kafka = any("kafka_bytes" in r for r in rows)
    lines = ["| plan | bytes | messages | model bytes | results | exact |" + (" bytes on Kafka |" if kafka else ""),
             "|---|---:|---:|---:|---:|---|" + ("---:|" if kafka else "")]
    for r in rows:
        model = f"{r['model_bytes']:,}" if r["model_bytes"] is not None else ""
        on_kafka = f" {r['kafka_bytes']:,} |" if "kafka_bytes" in r else (" |" if kafka else "")
        lines.append(f"| {r['plan']} | {r['bytes']:,} | {r['messages']:,} | {model} | {r['results']:,} | "
                     f"{'yes' if r['exact'] else 'NO'} |" + on_kafka)
    return "\n".join(lines)


def _plot(part1: list[dict[str, Any]], part2: list[dict[str, Any]], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
    a.bar([r["plan"] for r in part1], [r["bytes"] for r in part1], color="#4477aa")
    a.set_yscale("log")
    a.set_ylabel("bytes shipped (log)")
    a.set_title("Example 1 x 10: measured bytes per plan")
    a.tick_params(axis="x", rotation=30)
    alone = sum(r["bytes"] for r in part2[:2])
    b.bar(["Q1 and Q2 apart", "Q1 + Q2 sharing S1 x S2"], [alone, part2[2]["bytes"]], color=["#aa7744", "#44aa77"])
    b.set_ylabel("bytes shipped")
    b.set_title("Two queries, one shared operator")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path("results/mjoin"))
    p.add_argument("--seconds", type=int, default=20, help="seconds of data (default 20)")
    p.add_argument("--cluster", nargs="?", const="", metavar="HOST:PORT",
                   help="also run part 1 on Kafka (default: $KAFKA_BOOTSTRAP_SERVERS, else a throw-away local broker)")
    args = p.parse_args(argv)
    if args.seconds < 1:
        print("error: --seconds must be at least 1", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    print("part 1: Example 1 x 10", file=sys.stderr)
    if args.cluster is None:
        part1 = example1(args.seconds)
        print("part 2: a shared operator", file=sys.stderr)
        part2 = sharing(args.seconds)
    else:
        part1, part2 = _on_kafka(args.seconds, args.cluster or os.environ.get("KAFKA_BOOTSTRAP_SERVERS", ""))
    (args.out / "mjoin.json").write_text(json.dumps({"seconds": args.seconds, "example1": part1,
                                                     "sharing": part2}, indent=2) + "\n")
    _plot(part1, part2, args.out / "mjoin.png")
    print(_table(part1))
    print()
    print(_table(part2))
    ok = all(r["exact"] for r in part1 + part2)
    print(f"\nwrote {args.out}/mjoin.json and mjoin.png; every output exact: {ok}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
