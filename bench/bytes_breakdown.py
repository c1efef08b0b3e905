#!/usr/bin/env python3
"""What `auto`'s bytes are made of, against the floor and floor + keys (issue 30).

    python bench/bytes_breakdown.py [WORKLOAD ...] [--plan JSON] [--out FILE]

For each workload of the bytes bench's grid (default: the selective uniform ones where `auto` is above
1.1 × floor + keys) it plans `auto` as ``bench/bytes_bench.py`` does (or runs ``--plan``), runs the plan on
the simulator and sorts every byte a host sends into:

* ``contributing``: the encoded tuples (``len(encode_tuple(t))``, as the floor counts them) that take part
  in a result (:func:`joinlib.costs.floor.contributors`);
* ``non_contributing``: the other tuples shipped in full, split for a reduction into
  ``fp`` (a filtering neighbour holds no tuple that matches it and survives the filters itself -- arc
  consistency over keys and window lifetimes: only a Bloom filter's false positive lets it through) and
  ``pairwise`` (every filtering neighbour has such a partner, but no result holds them together: a
  reducer that tests pairwise key sets cannot tell);
* ``key_sets`` (keys or Bloom filters in key filters and key batches), ``empty`` (messages with nothing in
  them), and ``overhead`` (envelopes, row and array framing of the others).

The floor's keys term is what ``floor + keys`` adds to the floor.  Output: one line per workload and a
JSON list (``--out``).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

DEFAULT = ["chain4-f0.001-1250B-w3000", "star4-f0.001-1250B-w3000", "clique4-f0.001-1250B-w3000",
           "chain4-keys-f0.001-1250B-w3000", "clique3-f0.001-1250B-w3000", "chain3-f0.001-1250B-w3000",
           "clique3-keys-f0.001-1250B-w3000"]


def _body_parts(body: Any) -> tuple[list[Any], int]:
    """The tuples a body ships in full, and for a key set the bytes of its keys or Bloom filter (the body's
    size less an empty one's)."""
    from joinlib.protocol.messages import KeyBatch, KeyFilter, ShippedBatch, TupleBatch, WindowSnapshot
    from joinlib.protocol.wire import encode_body
    if isinstance(body, (ShippedBatch, WindowSnapshot)):
        return list(body.tuples), 0
    if isinstance(body, TupleBatch):
        return [t for row in body.rows for t in row], 0
    if isinstance(body, (KeyFilter, KeyBatch)):
        return [], len(encode_body(body)) - len(encode_body(type(body)()))
    return list(getattr(body, "sf", [])), 0


def survivors(q: Any, streams: dict[str, list[Any]], plan: Any) -> dict[str, set[int]]:
    """Arc consistency of a reduction's filters over exact key sets: per stream, the ids of the tuples that
    have, toward every neighbour whose sets filter them, a surviving partner with the same key whose window
    lifetime overlaps theirs (a tuple lives from its timestamp to a window plus an epoch after)."""
    red = plan.reduce
    tau = q.execution.interval_ms
    edges = red.edges(q)
    skip = set(red.skip)
    filt: dict[str, list[tuple[str, list[int], list[int]]]] = {n: [] for n in q.names}
    for a, b in edges:
        for x, y in ((a, b), (b, a)):
            if (y, x) in skip:
                continue
            px, py = [], []
            for p in q.predicates_between(x, y):
                mine, theirs = (p.left_attr, p.right_attr) if p.left == x else (p.right_attr, p.left_attr)
                px.append(q.stream(x).attr_index(mine))
                py.append(q.stream(y).attr_index(theirs))
            filt[x].append((y, px, py))
    life = {s.name: s.window.size + tau for s in q.streams}
    alive = {n: {t.id: t for t in streams.get(n, [])} for n in q.names}
    changed = True
    while changed:
        changed = False
        for x in q.names:
            for y, px, py in filt[x]:
                by_key: dict[tuple[Any, ...], list[int]] = {}
                for u in alive[y].values():
                    by_key.setdefault(tuple(u.key[i] for i in py), []).append(u.ts)
                gone = [i for i, t in alive[x].items()
                        if not any(u < t.ts + life[x] and t.ts < u + life[y]
                                   for u in by_key.get(tuple(t.key[i] for i in px), ()))]
                for i in gone:
                    del alive[x][i]
                changed = changed or bool(gone)
    return {n: set(v) for n, v in alive.items()}


def measure(name: str, plan_json: Optional[str] = None, fpr: Optional[float] = None) -> dict[str, Any]:
    import bytes_bench as bb

    from joinlib.costs import from_data
    from joinlib.costs.floor import contributors, floor
    from joinlib.data.files import load_streams
    from joinlib.plan.logical import Plan, from_json
    from joinlib.planner.auto import auto_ranked
    from joinlib.planner.measure import run_candidate
    from joinlib.protocol import wire
    from joinlib.protocol.avro import encode_tuple
    from joinlib.runtime import host
    w = next((x for x in bb.grid(False, 15_000) if x.name == name), None)
    if w is None:
        raise SystemExit(f"no workload {name!r} in the bytes bench's grid (see docs/bytes.md)")
    q = w.query()
    if fpr is not None:   # the query's Bloom filter rate (0: key sets as keys only)
        q = replace(q, execution=replace(q.execution, bloom_fpr=fpr))
    with tempfile.TemporaryDirectory() as tmp:
        w.generate(tmp, seed=1)
        streams = load_streams(q, tmp)
    if plan_json:
        plan: Any = from_json(q, plan_json)
        plan_name = "given"
    else:
        ranked, measured = auto_ranked(q, streams, from_data(q, streams), every_kind=True)
        plan, plan_name = (measured or ranked)[0].plan, (measured or ranked)[0].name
    fl = floor(q, streams)
    contrib = contributors(q, streams)
    good = {(s.pos, t.id) for s in q.streams for t in streams.get(s.name, []) if t.id in contrib[s.pos]}
    passing = survivors(q, streams, plan) if isinstance(plan, Plan) and plan.reduce else None
    ok_ids = {(q.stream(n).pos, i) for n, v in passing.items() for i in v} if passing is not None else set()
    parts = dict.fromkeys(("contributing", "non_contributing", "fp", "pairwise", "key_sets", "empty",
                           "overhead"), 0)
    shipped: dict[tuple[int, int], int] = {}
    send = host.Host.send

    def counting_send(self: Any, env: Any) -> None:
        n = wire.envelope_size(env)
        body = env.body
        tups, keys = _body_parts(body)
        if body == type(body)():
            parts["empty"] += n
        else:
            inner = keys
            for t in tups:
                b = len(encode_tuple(t))
                inner += b
                if (t.pos, t.id) in good:
                    parts["contributing"] += b
                else:
                    parts["non_contributing"] += b
                    shipped[(t.pos, t.id)] = shipped.get((t.pos, t.id), 0) + 1
                    if passing is not None:
                        parts["pairwise" if (t.pos, t.id) in ok_ids else "fp"] += b
            parts["key_sets"] += keys
            parts["overhead"] += n - inner
        send(self, env)
    host.Host.send = counting_send   # type: ignore[method-assign]
    try:
        rep = run_candidate(q, streams, plan)
    finally:
        host.Host.send = send   # type: ignore[method-assign]
    out = {"workload": name, "plan": plan_name, "plan_json": plan.to_json(), "bytes": rep.bytes,
           "results": rep.results, "floor": fl.bytes, "floor_keys": fl.with_keys, "floor_site": fl.site,
           **parts, "non_contributing_tuples": len(shipped),
           "ratio": round(rep.bytes / max(1, fl.with_keys), 3)}
    if passing is not None:
        out["arc_consistent_tuples"] = {n: len(v) for n, v in passing.items()}
        out["contributing_tuples"] = fl.contributors
    return out


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="Workloads are named as in docs/bytes.md (bench/bytes_bench.py's grid).")
    ap.add_argument("workloads", nargs="*", default=DEFAULT, help="workload names (default: the selective "
                    "uniform 1250 B, 3 s ones of issue 30)")
    ap.add_argument("--plan", help="run this plan (JSON, as --plan of joinlib run) instead of auto's")
    ap.add_argument("--bloom-fpr", type=float, help="the query's bloom_fpr (0: key sets never as Bloom filters); "
                    "default the bench's 0.01")
    ap.add_argument("--out", type=Path, help="also write the rows as JSON here")
    args = ap.parse_args(argv)
    rows = []
    for name in args.workloads:
        r = measure(name, args.plan, args.bloom_fpr)
        rows.append(r)
        pct = {k: r[k] / max(1, r["bytes"]) for k in ("contributing", "non_contributing", "key_sets", "empty",
                                                        "overhead")}
        extra = f" (fp {r['fp']:,}, pairwise {r['pairwise']:,})" if "arc_consistent_tuples" in r else ""
        print(f"{name}: {r['plan']} {r['bytes']:,} B = {r['ratio']} x floor+keys ({r['floor']:,} + "
              f"{r['floor_keys'] - r['floor']:,}); contributing {r['contributing']:,} ({pct['contributing']:.0%}), "
              f"non-contributing {r['non_contributing']:,} ({pct['non_contributing']:.0%}){extra}, key sets "
              f"{r['key_sets']:,} ({pct['key_sets']:.0%}), empty {r['empty']:,}, overhead {r['overhead']:,} "
              f"({pct['overhead']:.0%})", flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
