"""How much of ``auto``'s bytes are messages that carry nothing, and whether a heartbeat could batch them
(issue 11, item 3: "no message for an empty flow and epoch").

    python bench/empty_flows.py [WORKLOAD ...] [--out results/bytes/empty_flows.json]

For each workload of the bytes bench's grid (default: the three most selective 50-byte ones) it plans
``auto`` as ``bench/bytes_bench.py`` does, runs it on the simulator and counts every message a host sends
whose body is empty (its kind's default: no tuples, no keys, nothing expired) or a key filter with no keys,
with its encoded size, grouped by (site, scheduler round, destination): a heartbeat that coalesces what one
round of a host's lanes sends to one site -- the variant that cannot wait in a circle -- saves only where a
group has more than one message.

It also bounds **one heartbeat per link and interval** (issue 30, item 3), grouping by (site, epoch,
destination) and ignoring the waits that grouping costs: an empty message on a link that carries another
message in the same epoch could ride on it for free, and a link whose messages of the epoch are all empty
needs one heartbeat (as large as the smallest of them).  ``link_epoch_bound`` is the bytes that saves, an
upper bound on what any grouping of empty flows by link and interval can save.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

DEFAULT = ["2way-f0.0001-50B-w500", "chain3-f0.001-50B-w500", "star4-f0.0001-50B-w500"]


def measure(name: str) -> dict[str, Any]:
    import bytes_bench as bb

    from joinlib.costs import from_data
    from joinlib.data.files import load_streams
    from joinlib.data.gen import generate
    from joinlib.planner.auto import auto_ranked
    from joinlib.protocol import wire
    from joinlib.protocol.messages import KeyFilter
    from joinlib.runtime import host
    from joinlib.runtime.sink import CountingSink
    from joinlib.sim.engine import run_embedded
    w = next((x for x in bb.grid(False, 15_000) if x.name == name), None)
    if w is None:
        raise SystemExit(f"no workload {name!r} in the bytes bench's grid (see docs/bytes.md)")
    q = w.query()
    with tempfile.TemporaryDirectory() as tmp:
        generate(q, tmp, w.duration_ms, seed=1)
        streams = load_streams(q, tmp)
    ranked, measured = auto_ranked(q, streams, from_data(q, streams))
    plan = (measured or ranked)[0].plan
    counts: Counter[str] = Counter()
    groups: Counter[tuple[str, int, str]] = Counter()
    links: dict[tuple[str, int, str], list[tuple[bool, int]]] = {}   # (src, epoch, dst) -> (empty, bytes)
    rounds = [0]
    send, run = host.Host.send, host.Host.run

    def counting_send(self: Any, env: Any) -> None:
        n = wire.envelope_size(env)
        counts["messages"] += 1
        counts["bytes"] += n
        body = env.body
        empty = body == type(body)() or isinstance(body, KeyFilter) and not body.keys and not body.bits
        if empty:
            counts["empty"] += 1
            counts["empty_bytes"] += n
            groups[(self.site, rounds[0], env.dst)] += 1
        links.setdefault((self.site, env.epoch, env.dst), []).append((empty, n))
        send(self, env)

    def counting_run(self: Any, now: Optional[float] = None) -> bool:
        rounds[0] += 1
        return run(self, now)
    host.Host.send, host.Host.run = counting_send, counting_run   # type: ignore[method-assign]
    try:
        rep = run_embedded(q, streams, plan, CountingSink())
    finally:
        host.Host.send, host.Host.run = send, run   # type: ignore[method-assign]
    sizes = Counter(groups.values())
    bound = link_epoch_bound(links.values())
    return {"workload": name, "plan": plan.to_json(), "bytes": rep.bytes, "results": rep.results, **counts,
            "empty_share": round(counts["empty_bytes"] / max(1, counts["bytes"]), 4),
            "groups_by_size": {str(k): v for k, v in sorted(sizes.items())},
            "batchable": sum(v * (k - 1) for k, v in sizes.items()),
            "link_epoch_bound": bound, "link_epoch_share": round(bound / max(1, counts["bytes"]), 4)}


def link_epoch_bound(groups: Any) -> int:
    """Bytes one heartbeat per (link, epoch) saves at most: every empty message, less one heartbeat of the
    smallest empty message's size on a link whose messages of the epoch are all empty."""
    saved = 0
    for msgs in groups:
        empty = [n for e, n in msgs if e]
        if empty:
            saved += sum(empty) - (min(empty) if len(empty) == len(msgs) else 0)
    return saved


def model_bound(name: str) -> dict[str, Any]:
    """The byte model's side of the bound, for a workload's query without data (auto's plan over the query
    file's statistics): a flow of n expected items per epoch is empty with probability e^-n (Poisson), and
    one heartbeat per (link, epoch) saves the expected bytes of the empty messages on every link, less a
    heartbeat where all of a link's flows are empty."""
    import math

    import bytes_bench as bb

    from joinlib.costs import WireModel
    from joinlib.planner.auto import auto_ranked
    from joinlib.protocol.messages import KeyBatch
    w = next(x for x in bb.grid(False, 15_000) if x.name == name)
    q = w.query()
    best = auto_ranked(q)[0][0]
    model = WireModel()
    enc, _ = model.context(q)
    e = enc.size("", "", KeyBatch([]))   # an envelope with an empty body
    tau = q.execution.interval_ms / 1000.0
    by_link: dict[tuple[str, str], list[float]] = {}
    for f in model.estimate(q, best.plan).flows:
        by_link.setdefault((f.src, f.dst), []).append(math.exp(-f.items))
    saved = sum(sum(ps) * e - e * math.prod(ps) for ps in by_link.values()) / tau
    return {"workload": name, "plan": best.name, "bytes_per_s": best.estimate, "bound_per_s": saved,
            "share": saved / best.estimate if best.estimate else 0.0}


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("workloads", nargs="*", default=DEFAULT, help=f"workload names (default {' '.join(DEFAULT)})")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "bytes" / "empty_flows.json")
    ap.add_argument("--model-grid", action="store_true", help="instead: the byte model's bound on every workload "
                    "of the grid (no run), the largest shares first")
    args = ap.parse_args(argv)
    if args.model_grid:
        import bytes_bench as bb
        grid = sorted((model_bound(w.name) for w in bb.grid(False, 15_000) if not w.zipf),
                      key=lambda r: -r["share"])
        for r in grid[:15]:
            print(f"{r['workload']}: {r['plan']}, {r['bytes_per_s']:,.0f} B/s, one heartbeat per link and "
                  f"interval saves at most {r['bound_per_s']:,.0f} B/s ({r['share']:.1%})")
        print(f"over {len(grid)} workloads: {sum(r['share'] > 0.02 for r in grid)} above 2 %")
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(grid, indent=1) + "\n")
        return 0
    rows = [measure(n) for n in args.workloads]
    for r in rows:
        print(f"{r['workload']}: {r['empty']} of {r['messages']} messages empty, {r['empty_bytes']:,} of "
              f"{r['bytes']:,} bytes ({r['empty_share']:.1%}); per (site, round, destination): "
              f"{r['groups_by_size']} -> {r['batchable']} a per-round heartbeat could fold in; one heartbeat per "
              f"link and interval saves at most {r['link_epoch_bound']:,} bytes ({r['link_epoch_share']:.1%})")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=2) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
