"""How much of ``auto``'s bytes are messages that carry nothing, and whether a heartbeat could batch them
(issue 11, item 3: "no message for an empty flow and epoch").

    python bench/empty_flows.py [WORKLOAD ...] [--out results/bytes/empty_flows.json]

For each workload of the bytes bench's grid (default: the three most selective 50-byte ones) it plans
``auto`` as ``bench/bytes_bench.py`` does, runs it on the simulator and counts every message a host sends
whose body is empty (its kind's default: no tuples, no keys, nothing expired) or a key filter with no keys,
with its encoded size, grouped by (site, scheduler round, destination): a heartbeat that coalesces what one
round of a host's lanes sends to one site -- the variant that cannot wait in a circle -- saves only where a
group has more than one message.
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
    rounds = [0]
    send, run = host.Host.send, host.Host.run

    def counting_send(self: Any, env: Any) -> None:
        n = wire.envelope_size(env)
        counts["messages"] += 1
        counts["bytes"] += n
        body = env.body
        if body == type(body)() or isinstance(body, KeyFilter) and not body.keys and not body.bits:
            counts["empty"] += 1
            counts["empty_bytes"] += n
            groups[(self.site, rounds[0], env.dst)] += 1
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
    return {"workload": name, "plan": plan.to_json(), "bytes": rep.bytes, "results": rep.results, **counts,
            "empty_share": round(counts["empty_bytes"] / max(1, counts["bytes"]), 4),
            "groups_by_size": {str(k): v for k, v in sorted(sizes.items())},
            "batchable": sum(v * (k - 1) for k, v in sizes.items())}


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("workloads", nargs="*", default=DEFAULT, help=f"workload names (default {' '.join(DEFAULT)})")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "bytes" / "empty_flows.json")
    args = ap.parse_args(argv)
    rows = [measure(n) for n in args.workloads]
    for r in rows:
        print(f"{r['workload']}: {r['empty']} of {r['messages']} messages empty, {r['empty_bytes']:,} of "
              f"{r['bytes']:,} bytes ({r['empty_share']:.1%}); per (site, round, destination): "
              f"{r['groups_by_size']} -> {r['batchable']} a per-round heartbeat could fold in")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=2) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
