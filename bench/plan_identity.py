#!/usr/bin/env python3
"""Every ``auto`` candidate without data, written out exactly, to show that a change to the search leaves
its results bit-identical (issue 30's plan-time passes: "without changing any choice or estimate").

    python bench/plan_identity.py OUT.jsonl [--random 40]
    cmp BASE.jsonl OUT.jsonl          # the same file from the tree before the change

One line per query: its name and ``rank``'s candidates in order, each as (name, plan JSON, estimate as
``float.hex``).  Queries: the 243 of the bytes grid (``bench/bytes_bench.py``, Zipf ones included), the 24
``bench/plan_time.py`` builds (chain, star, cycle, complete at 3..8 streams) and ``--random`` random ones
(``random_query`` with seeds 0..N-1, 3..6 streams, fully connected).  It imports the tree it is in: for the
tree before the change, copy it there (``git show HEAD:bench/plan_identity.py > BASE/bench/plan_identity.py``).
"""
from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def queries(n_random: int) -> list[tuple[str, Any]]:
    import bytes_bench as bb

    from joinlib.planner.improved import random_query
    out = [(w.name, w.query()) for w in bb.grid(False, 15_000)]
    for m in range(3, 9):
        for topo in ("chain", "star", "cycle", "complete"):
            out.append((f"plan_time-{topo}{m}", bb.Workload(f"{topo}{m}", m, topo, False, 0.001, 1250, 3000,
                                                            False, 15_000).query()))
    for seed in range(n_random):
        out.append((f"random{seed}", random_query(random.Random(seed), random.Random(seed).randint(3, 6))))
    return out


def main(argv: Optional[list[str]] = None) -> int:
    from joinlib.costs import WireModel, inputs_for
    from joinlib.planner.auto import rank
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--random", type=int, default=40, help="random queries besides the grid and bench ones")
    a = ap.parse_args(argv)
    with a.out.open("w") as f:
        for name, q in queries(a.random):
            inputs = inputs_for(q, None)
            ranked = rank(inputs.query, WireModel(inputs))
            f.write(json.dumps([name, [(r.name, r.plan.to_json(), r.estimate.hex()) for r in ranked]]) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
