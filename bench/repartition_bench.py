#!/usr/bin/env python3
"""What an automatic re-partition (``joinlib submit --repartition``) saves: a partition function fitted to
per-value rates that have moved, against one fitted to the current rates (issue 29 item 2).

    python bench/repartition_bench.py [--seconds 60] [--rate 50] [--out results/repartition]

Workloads: a 2-way and a 3-way chain on one join attribute, a site per stream, 20 join values, 1 s windows,
1,000-byte tuples.  Each value is *homed* at one site: a stream draws 90 % of its values from those homed at its
site.  The query's partition function was fitted to one homing (``stale``: value k at site k mod n); the data
has another (``moved``: the first 20/n values at the first site, and so on), as when traffic shifts between
routers.  For ``pmjoin:rate:D`` and ``pmjoin:site`` the bench

* prices both functions with the rate model the planner's trigger reads
  (:func:`joinlib.pmjoin.repartition.verdict`: the running function's predicted bytes/s over the refit's);
* runs both plans on the moved data on the simulator (each partition's plan chosen by ``auto`` from the same
  per-value rates the function was fitted to, as the planner does for a live query), with ``central`` at every
  site for scale; every run must give the same results.

Writes OUT/repartition.json and OUT/repartition.png (bytes per plan and workload).
"""
from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from joinlib.control.run_plan import PartitionedRun  # noqa: E402
from joinlib.data.files import load_streams, stream_path  # noqa: E402
from joinlib.plan.logical import central  # noqa: E402
from joinlib.planner.registry import resolve_run_plan  # noqa: E402
from joinlib.pmjoin.partitioned import value_stats  # noqa: E402
from joinlib.pmjoin.repartition import verdict  # noqa: E402
from joinlib.query import load_query  # noqa: E402
from joinlib.runtime.sink import CountingSink  # noqa: E402
from joinlib.sim.engine import run_embedded  # noqa: E402

VALUES = [f"10.0.0.{i}" for i in range(20)]
HOME_SHARE = 0.9


def query_file(n: int, rate: float, out: Path) -> Path:
    streams = "".join(f"  S{i}: {{site: n{i}, window: 1s, rate: {rate}, tuple_bytes: 1000, "
                      f"selectivity: {{dest: 0.05}}}}\n" for i in range(1, n + 1))
    join = "".join(f"  - S{i}.dest = S{i + 1}.dest\n" for i in range(1, n))
    nodes = ", ".join(f"n{i}" for i in range(1, n + 1))
    path = out / f"chain{n}.yaml"
    path.write_text(f"name: rp{n}\nstreams:\n{streams}join:\n{join}network:\n  nodes: [{nodes}]\n"
                    "execution: {interval: 100ms, max_delay: 80ms}\n")
    return path


def homing(n: int, kind: str) -> dict[str, int]:
    """value -> the stream index (0-based) it is homed at."""
    if kind == "stale":
        return {v: k % n for k, v in enumerate(VALUES)}
    per = len(VALUES) // n
    return {v: min(k // per, n - 1) for k, v in enumerate(VALUES)}


def skew(q: Any, data: Path, home: dict[str, int], seed: int) -> None:
    """Redraw every stream's join values: HOME_SHARE from the values homed at it, the rest from the others."""
    for i, s in enumerate(q.streams):
        rng = random.Random(f"repartition:{seed}:{s.name}")
        mine = [v for v in VALUES if home[v] == i]
        other = [v for v in VALUES if home[v] != i]
        path = stream_path(data, s.name)
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        for row in rows:
            row["dest"] = rng.choice(mine if rng.random() < HOME_SHARE else other)
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def dataset(qfile: Path, out: Path, seconds: int, seed: int, q: Any, kind: str) -> dict[str, Any]:
    data = out / f"{qfile.stem}-{kind}"
    subprocess.run([sys.executable, "-m", "joinlib", "gen", str(qfile), "--out", str(data), "--duration",
                    f"{seconds}s", "--seed", str(seed)], check=True, capture_output=True, cwd=ROOT)
    skew(q, data, homing(len(q.streams), kind), seed)
    streams = load_streams(q, data)
    return {"streams": streams, "values": value_stats(q, streams)}


def workload(n: int, args: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    qfile = query_file(n, args.rate, work)
    q = load_query(qfile)
    stale = dataset(qfile, work, args.seconds, args.seed + 1, q, "stale")
    moved = dataset(qfile, work, args.seconds, args.seed, q, "moved")
    rows: list[dict[str, Any]] = []
    results = set()

    def run(name: str, plan: Any, extra: dict[str, Any]) -> None:
        rep = run_embedded(q, moved["streams"], plan, CountingSink())
        results.add(rep.results)
        rows.append({"workload": f"chain{n}", "plan": name, "bytes": rep.bytes, "results": rep.results, **extra})
        print(f"  chain{n} {name:26s} {rep.bytes:>12,} bytes  {rep.results:,} results", flush=True)
    for node in q.nodes:
        run(f"central:{node}", central(q, node), {})
    for spec in (f"pmjoin:rate:{n}", "pmjoin:site"):
        fitted = {}
        for kind, ds in (("stale", stale), ("refit", moved)):
            got = resolve_run_plan(q, spec, values=ds["values"])
            assert isinstance(got, PartitionedRun)
            fitted[kind] = got.plan
        v = verdict(q, fitted["stale"], spec, moved["values"], 0.25)
        for kind, part in fitted.items():
            run(f"{spec} {kind}", part, {"spec": spec, "fitted": kind, "model_gain": round(v.gain, 3),
                                         "due": v.due})
    if len(results) != 1:
        raise SystemExit(f"chain{n}: the plans disagree on the results: {sorted(results)}")
    return rows


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    loads = sorted({r["workload"] for r in rows})
    fig, axes = plt.subplots(1, len(loads), figsize=(6 * len(loads), 4), squeeze=False)
    for ax, w in zip(axes[0], loads, strict=True):
        mine = [r for r in rows if r["workload"] == w]
        colours = ["#999999" if r["plan"].startswith("central") else "#d62728" if r.get("fitted") == "stale"
                   else "#2ca02c" for r in mine]
        ax.barh([r["plan"] for r in mine], [r["bytes"] / 1e6 for r in mine], color=colours)
        ax.set_title(f"{w}, moved rates: red stale function, green refit")
        ax.set_xlabel("MB shipped")
        ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--seconds", type=int, default=60, help="event time of each dataset (default 60)")
    ap.add_argument("--rate", type=float, default=50.0, help="tuples/s per stream (default 50)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "repartition")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in (2, 3):
            rows += workload(n, args, Path(tmp))
    (args.out / "repartition.json").write_text(json.dumps({"setup": vars(args) | {"out": str(args.out)},
                                                           "rows": rows}, indent=1))
    plot(rows, args.out / "repartition.png")
    for spec_rows in _pairs(rows):
        stale, refit = spec_rows
        print(f"{stale['workload']} {stale['spec']}: refit ships {refit['bytes'] / stale['bytes']:.3f}x the stale "
              f"function's bytes; the model's gain {stale['model_gain']}x (due: {stale['due']})")
    print(f"wrote {args.out / 'repartition.json'} and {args.out / 'repartition.png'}")
    return 0


def _pairs(rows: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    out = []
    for r in rows:
        if r.get("fitted") == "stale":
            refit = next(x for x in rows if x["workload"] == r["workload"] and x.get("spec") == r["spec"]
                         and x.get("fitted") == "refit")
            out.append((r, refit))
    return out


if __name__ == "__main__":

    sys.exit(main())
