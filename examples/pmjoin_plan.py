"""Plan a PMJoin from a query file and a joinlib data directory, and compare it with one plan for
the whole streams (docs/pmjoin.md).

    python examples/pmjoin_plan.py examples/pmjoin_routers.yaml --demo DIR   # writes Example 1 data to DIR
    python examples/pmjoin_plan.py QUERY.yaml --data DIR [--partition rate|hash|range] [-d 3] [--json PLAN.json]

The per-value rates come from the data (joinlib.pmjoin.value_rates); costs are predicted by the
rate model in bytes/s (the query's tuple_bytes; a result carries all its components). The plan's
trees are not executed; ``joinlib run --plan pmjoin:rate:3`` runs the partitioning with joinlib's own
plan per partition (docs/runtime.md).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from joinlib.data.files import write_stream
from joinlib.errors import JoinlibError
from joinlib.pmjoin import (
    HashPartition,
    RangePartition,
    plan_pmjoin,
    rate_partition,
    simple,
    stream_join_opt,
    tree_cost,
    value_model,
    value_rates,
)
from joinlib.pmjoin.tree import describe
from joinlib.query import load_query

# Table 1 of seed 002 x 10: tuples per second per destination
DEMO_RATES = {"S1": {"a": 1, "b": 1, "c": 1000}, "S2": {"a": 0.3, "b": 500, "c": 0.4},
              "S3": {"a": 500, "b": 0.1, "c": 0.2}}


def write_demo(out: Path, seconds: int = 100) -> None:
    """Evenly spaced tuples per (stream, value) at the demo rates, ``seconds`` long."""
    for stream, rates in DEMO_RATES.items():
        rows = []
        for value, rate in rates.items():
            n = round(rate * seconds)
            rows += [(round(k * seconds * 1000 / n), value) for k in range(n)]
        rows.sort()
        write_stream(out / f"{stream}.jsonl", ({"id": i, "ts": ts, "dest": v} for i, (ts, v) in enumerate(rows)))


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("query", type=Path)
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--data", type=Path, help="directory with one <stream>.jsonl per stream")
    g.add_argument("--demo", type=Path, metavar="DIR", help="write Example 1 data (x 10) to DIR and use it")
    p.add_argument("--partition", choices=("rate", "hash", "range"), default="rate")
    p.add_argument("-d", type=int, default=3, help="number of partitions D (default 3)")
    p.add_argument("--json", type=Path, help="write the PMJoin plan as JSON")
    args = p.parse_args(argv)
    try:
        query = load_query(args.query)
        data = args.data or args.demo
        if args.demo:
            write_demo(args.demo)
        stats = value_rates(query, data)
        model = value_model(query, stats)
        part = {"rate": lambda: rate_partition(stats, args.d), "hash": lambda: HashPartition(args.d),
                "range": lambda: RangePartition.from_values(stats.values, args.d)}[args.partition]()
        whole = stream_join_opt(model)
        print(f"centralized (Simple): {tree_cost(simple(model), model):.4g} bytes/s")
        print(f"one plan (STREAMJOINOPT): {tree_cost(whole, model):.4g} bytes/s  {describe(whole)}")
        plan = plan_pmjoin(model, stats.values, part, stats.attribute)
        print(plan.describe())
        if args.json:
            args.json.write_text(json.dumps(plan.to_json(), indent=1) + "\n")
    except JoinlibError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
