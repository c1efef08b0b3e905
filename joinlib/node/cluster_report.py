"""The report of a cluster run (:mod:`.cluster`), from the nodes' ``done`` messages and the results collected:
the shape of :meth:`joinlib.runtime.report.Report.to_dict` where that makes sense, and :func:`to_report` to
print it as ``joinlib run`` prints an embedded run's.
"""
from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from typing import Any, Optional, Sequence

from joinlib.adaptive.embedded import AdaptiveReport
from joinlib.adaptive.jep import JEP
from joinlib.control.messages import DoneMessage, LinkTraffic
from joinlib.model import Query
from joinlib.node.cluster_collect import Replayer, Results
from joinlib.runtime.deploy import plan_json
from joinlib.runtime.report import Report


def percentiles(xs: list[float], weights: Optional[list[int]] = None) -> dict[str, float]:
    """p50/p90/p99/max/mean of ``xs``, each counted ``weights[i]`` times (default once)."""
    if not xs:
        return {}
    weights = weights or [1] * len(xs)
    pairs = sorted(zip(xs, weights, strict=True))
    total = sum(weights)
    cum, acc = [], 0
    for _, w in pairs:
        acc += w
        cum.append(acc)

    def q(f: float) -> float:  # the value at rank int(f * total) (0-based), as for an expanded list
        return round(pairs[bisect_right(cum, min(total - 1, int(f * total)))][0], 3)
    return {"p50": q(0.5), "p90": q(0.9), "p99": q(0.99), "max": round(pairs[-1][0], 3),
            "mean": round(sum(x * w for x, w in pairs) / total, 3)}


def _links(done: dict[str, DoneMessage]) -> list[dict[str, Any]]:
    """Per (src, dst, kind): messages and bytes as the senders counted them, transfer time as measured by the
    receivers."""
    sent: dict[tuple[str, str, str], LinkTraffic] = {}
    received: dict[tuple[str, str, str], LinkTraffic] = {}
    for d in done.values():
        sent.update({(ln.src, ln.dst, ln.kind): ln for ln in d.links})
        received.update({(ln.src, ln.dst, ln.kind): ln for ln in d.received})
    links = []
    for key in sorted(set(sent) | set(received)):
        s, r = sent.get(key), received.get(key)
        links.append({"src": key[0], "dst": key[1], "kind": key[2], "messages": s.messages if s else 0,
                      "bytes": s.bytes if s else 0,
                      "transfer_ms": r.transfer_ms if r is not None and r.transfer_ms is not None else 0.0,
                      "received_messages": r.messages if r else 0})
    return links


def _site(d: DoneMessage, node: Any) -> dict[str, Any]:
    """A site's line of the report (a scaled-out plan's: with its partitions')."""
    out: dict[str, Any] = {
        "results": d.results, "input_tuples": d.input_tuples, "wall_s": d.wall_s, "cpu_s": d.cpu_s,
        "resumed_from_epoch": d.resumed_from_epoch, "resumed_from": d.resumed_from, "checkpoints": d.checkpoints,
        "generations": list(d.generations), "log": str(node.log) if node is not None and node.log else None}
    if d.parts:
        out["parts"] = [{"part": x.part, "instance": x.instance, "results": x.results,
                         "resumed_from_epoch": x.resumed_from_epoch, "checkpoints": x.checkpoints,
                         "startup_s": x.startup_s} for x in d.parts]
    return out


def _latency(res: Results, info: Any) -> dict[str, float]:
    """Event-to-result latency (wall clock) of a paced replay's results; empty for an unpaced one."""
    if info is None or not info.rate_scale or not res.count:
        return {}
    t0, scale = info.t0_ms, info.rate_scale
    lats = [e - (t0 + h / scale) for h, e in zip(res.head_ts, res.emit_ms, strict=True)]
    return percentiles(lats, res.weight)


def report_of(query: Query, specs: Sequence[Any], streams: dict[str, Any], res: Results, replayer: Replayer,
              run: str, mode: str, wall: float, nodes: dict[str, Any], plan: Any = None) -> dict[str, Any]:
    """The report of a cluster run (see the module docstring)."""
    processing = {site: d.processing_s for site, d in res.done.items()}
    naive: dict[tuple[str, str], int] = defaultdict(int)
    for d in res.done.values():
        for n in d.naive:
            naive[(n.src, n.dst)] += n.bytes
    links = _links(res.done)
    all_ts = [t.ts for tups in streams.values() for t in tups]
    info = replayer.info
    span = (max(all_ts) - min(all_ts) + 1) if all_ts else 0
    transmission = sum(ln["transfer_ms"] for ln in links)
    proc_total = sum(sum(v.values()) for v in processing.values())
    latency = _latency(res, info)
    return {
        "mode": "cluster", "node_mode": mode, "run": run,
        "query": query.name, "plan": plan_json(specs, plan) if specs else plan.to_json(), "results": res.count,
        "input_tuples": len(all_ts), "duration_ms": span,
        "bytes": sum(ln["bytes"] for ln in links), "messages": sum(ln["messages"] for ln in links),
        "transmission_ms": round(transmission, 3),
        "processing_s": round(proc_total, 6),
        "execution_s_per_s": round((proc_total + transmission / 1000.0) / (max(span, 1) / 1000.0), 6),
        "late_messages": sum(d.late_messages for d in res.done.values()),
        "wall_s": round(wall, 4),
        "mean_latency_ms": latency.get("mean"),
        "p50_latency_ms": latency.get("p50"), "p99_latency_ms": latency.get("p99"),
        "latency_ms": latency,                      # wall-clock, paced replays only
        "last_emit_ms": max(res.emit_ms) if res.emit_ms else None,   # wall clock (epoch ms)
        "links": links,
        "naive": [{"src": s, "dst": d, "bytes": n} for (s, d), n in sorted(naive.items())],
        "processing_by_site": processing,
        "sites": {site: _site(d, nodes.get(site)) for site, d in sorted(res.done.items())},
        "replay": info.to_dict() if info is not None else None,
        "restarts": res.restarts,
    }


def to_report(d: dict[str, Any]) -> Report:
    """A cluster run's dict as an :class:`joinlib.runtime.report.Report` (what ``joinlib run`` prints); an
    adaptive run's as an :class:`joinlib.adaptive.embedded.AdaptiveReport`."""
    args = (d["query"], d["plan"], d["results"], d["input_tuples"], d["duration_ms"],
            [{**ln, "queued_ms": 0.0} for ln in d["links"]], d["processing_by_site"],
            d["late_messages"], d["wall_s"], 0.0,
            lambda: {k: d.get(k) for k in ("mean_latency_ms", "p50_latency_ms", "p99_latency_ms")})
    ad = d.get("adaptive")
    if ad is None:
        return Report(*args)
    return AdaptiveReport(*args, switches=d.get("switches") or [], mode=ad["mode"],
                          initial=JEP.from_json(ad["initial_plan"]), changes=ad["changes"], triggers=ad["triggers"],
                          rounds=ad["rounds"], timeline=ad["timeline"], restarts=ad["restarts"])
