#!/usr/bin/env python3
"""How long ``auto`` takes to plan, without and with data, for 3..8 streams (issue 30: "the planner
still plans an 8-stream query in under 1 s without --data; give the time with --data").

    python bench/plan_time.py [--streams 3,4,5,6,7,8] [--topologies chain,star,cycle,complete]
                              [--data-streams 3,4,8] [--out results/plan_time.json]

Queries as ``bench/bytes_bench.py`` builds them (one stream per site, 100 tuples/s, 1250-byte tuples,
3 s windows, f = 0.001, one shared key; ``cycle`` and ``complete`` are the cyclic ones).  Without data:
``auto_ranked(query)`` (the byte model's search over the query file's statistics).  With data
(``--data-streams``, chain and star only: the data is generated, 15 s): ``auto_ranked(query, streams,
every_kind=True)``, what ``joinlib plan --plan auto --data DIR`` runs (statistics measured, every run
kind, the short list run on a sample).  Each row gives wall and CPU seconds (the CPU time is steadier on
a shared machine) and the chosen candidate.  No assertion: the numbers go to ``docs/cost-model.md``.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def workload(m: int, topology: str) -> Any:
    import bytes_bench as bb
    return bb.Workload(f"{topology}{m}", m, topology, False, 0.001, 1250, 3000, False, 15_000)


def time_plan(m: int, topology: str, data: bool) -> dict[str, Any]:
    from joinlib.data.files import load_streams
    from joinlib.planner.auto import auto_ranked
    w = workload(m, topology)
    q = w.query()
    streams = None
    if data:
        with tempfile.TemporaryDirectory() as tmp:
            w.generate(tmp, seed=1)
            streams = load_streams(q, tmp)
    wall, cpu = time.perf_counter(), time.process_time()
    ranked, measured = auto_ranked(q, streams, every_kind=data)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    best = (measured or ranked)[0]
    return {"streams": m, "topology": topology, "data": data, "wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
            "candidates": len(ranked), "measured": len(measured), "chosen": best.name,
            "estimate_bytes_per_s": round(best.estimate, 1)}


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--streams", default="3,4,5,6,7,8", help="stream counts without data (default 3..8)")
    ap.add_argument("--topologies", default="chain,star,cycle,complete", help="join graphs (default: all four)")
    ap.add_argument("--data-streams", default="3,4,8", help="stream counts timed with data, chain and star "
                    "(default 3,4,8; empty: none)")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "plan_time.json")
    a = ap.parse_args(argv)
    rows = []
    for m in (int(x) for x in a.streams.split(",") if x):
        for topo in a.topologies.split(","):
            if topo in ("cycle", "complete") and m < 3:
                continue
            rows.append(time_plan(m, topo, False))
            print(json.dumps(rows[-1]), flush=True)
    for m in (int(x) for x in a.data_streams.split(",") if x):
        for topo in ("chain", "star"):
            rows.append(time_plan(m, topo, True))
            print(json.dumps(rows[-1]), flush=True)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps({"command": "python bench/plan_time.py " + " ".join(argv or sys.argv[1:]),
                                 "rows": rows}, indent=1) + "\n")
    print(f"wrote {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
