"""Continuous queries sharing an operator on Kafka: bytes with reuse against each query deploying its own.

    python bench/shared_ops_bench.py [--out results/shared-ops] [--queries 3] [--seconds 20] [--rate 100]

K live queries Q_k = S1 ⋈ S2 ⋈ T_k (T_k at its own site z_k), each the MJoin tree ((S1@x ⋈ S2@y)@y ⋈
T_k)@z_k, submitted to the planner service twice over the same JSON topics: once with reuse (the first
deploys the S1 ⋈ S2 operator, the others read its derived stream) and once with ``--no-reuse`` (each
deploys its own).  Node services for every site run in this process (threads) on a local broker
(``KAFKA_BOOTSTRAP_SERVERS``, the ``make up`` cluster, else one started here).  The generator writes
wall-clock events at ``--rate`` per stream for ``--seconds``; then every query is stopped and the bytes
each deployment's nodes sent (their ``done`` messages) are added up.  Both runs of a query read the same records from
the same start, so their results must be the same set: the bench checks it.  Writes
``shared_ops.json`` and ``shared_ops.png`` (bytes per deployment, stacked per configuration).
"""
from __future__ import annotations

import argparse
import json
import socket
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import yaml  # noqa: E402

from joinlib.ingest.events import EventProfile  # noqa: E402
from joinlib.model import Query  # noqa: E402
from joinlib.query import parse_query, query_to_dict  # noqa: E402


def _query(name: str, sites: dict[str, str], topics: dict[str, str], payload: int) -> Query:
    src = {"format": "json", "time": {"field": "ts", "unit": "ms"}, "id": "id", "attributes": ["payload"]}
    streams = {s: {"site": sites[s], "window": "1s", "source": {**src, "topic": topics[s]}} for s in sites}
    doc = {"name": name, "streams": streams, "join": [f"S2.dest = {s}.dest" for s in sites if s != "S2"],
           "execution": {"interval": "100ms", "max_delay": "80ms", "idle_timeout": "5s"}}
    return parse_query(doc, name)


def _tree(third: str, sites: dict[str, str]) -> dict[str, Any]:
    inner = {"mjoin": sites["S2"], "inputs": [{"stream": "S1", "node": sites["S1"]},
                                              {"stream": "S2", "node": sites["S2"]}]}
    return {"mjoin": sites[third], "inputs": [inner, {"stream": third, "node": sites[third]}]}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Services:
    """The planner service and a node service thread per site, in this process."""

    def __init__(self, bootstrap: str, sites: list[str]) -> None:
        from prometheus_client import CollectorRegistry

        from joinlib.node.node_service import NodeService
        from services.planner.service import PlannerService
        self.planner = PlannerService(bootstrap)
        self.stop = threading.Event()
        self.threads = []
        for site in sites:
            n = NodeService(site, bootstrap, registry=CollectorRegistry(), stop=self.stop, serve=True, quiet=True)
            t = threading.Thread(target=n.run, daemon=True, name=f"node-{site}")
            t.start()
            self.threads.append(t)

    def wait_state(self, name: str, state: str, timeout_s: float = 120) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            st = self.planner.status(name)
            if st["state"] == state or time.monotonic() > deadline:
                return st
            time.sleep(0.5)

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(20)
        self.planner.close()


def _results(bootstrap: str, st: Any) -> set[tuple[tuple[tuple[str, int], ...], int]]:
    from joinlib.node.live_queries import read_results
    out: set[tuple[tuple[tuple[str, int], ...], int]] = set()
    start = st.out_start
    while True:
        page = read_results(bootstrap, st.query, st.run, st.origin_ms, start, 100_000, 0.0)
        out.update((tuple(sorted(r["ids"].items())), r["ts"]) for r in page["results"])
        if page["next"] >= page["end"]:
            return out
        start = page["next"]


def _bytes(st: Any) -> dict[str, int]:
    """Bytes per link (src>dst) a stopped deployment's nodes sent."""
    out: dict[str, int] = {}
    for d in st.stats.done.values():   # typed DoneMessages (joinlib.control.messages)
        for ln in d.links:
            key = f"{ln.src}>{ln.dst}"
            out[key] = out.get(key, 0) + ln.bytes
    return out


def _settle(svc: Services, names: list[str], quiet_s: float = 8.0, timeout_s: float = 300.0) -> None:
    """Wait until no query's result count has grown for ``quiet_s`` (every node caught up with the last
    events and idle-advanced past them): a live query's stop ends it wherever it is."""
    def counts() -> list[int]:
        return [int((svc.planner.status(n).get("stats") or {}).get("results") or 0) for n in names]
    last, since, deadline = counts(), time.monotonic(), time.monotonic() + timeout_s
    while time.monotonic() - since < quiet_s and time.monotonic() < deadline:
        time.sleep(1.0)
        now = counts()
        if now != last:
            last, since = now, time.monotonic()


def run(bootstrap: str, k: int, seconds: float, rate: float, payload: int, distinct: int) -> dict[str, Any]:
    from joinlib.adapters.kafka import ensure_topics, make_admin
    from joinlib.adapters.live_gen import LiveGenerator
    tag = uuid.uuid4().hex[:6]
    thirds = [f"T{i + 1}" for i in range(k)]
    sites = {"S1": f"x{tag}", "S2": f"y{tag}", **{t: f"z{i + 1}{tag}" for i, t in enumerate(thirds)}}
    topics = {s: f"bench.shared.{s}.{tag}" for s in sites}
    ensure_topics(make_admin(bootstrap), list(topics.values()), partitions=2)
    svc = Services(bootstrap, list(sites.values()))
    try:
        time.sleep(2)
        subs: dict[str, dict[str, Any]] = {}
        for reuse in (True, False):
            for t in thirds:
                name = f"{'share' if reuse else 'alone'}{t.lower()}{tag}"
                q = _query(name, {s: sites[s] for s in ("S1", "S2", t)}, topics, payload)
                doc = {**query_to_dict(q), "mjoin_tree": _tree(t, sites)}
                subs[name] = {"reuse": reuse, "third": t,
                              **svc.planner.submit(yaml.safe_dump(doc), "mjoin", None, "now", reuse)}
        time.sleep(3)   # every node has taken its plans
        everything = _query(f"all{tag}", sites, topics, payload)
        prof = EventProfile(rate=rate, distinct=distinct, payload_bytes=payload, disorder_ms=40, late_every=0,
                            malformed_every=0)
        gen = LiveGenerator(bootstrap, everything, prof)
        gen.run(seconds, report=lambda m: print(f"  {m}", file=sys.stderr))
        _settle(svc, list(subs))
        for name in subs:
            svc.planner.stop(name)
        deployments = list(dict.fromkeys([*subs, *(op for s in subs.values() for op in s["deployed"])]))
        rows = []
        for name in deployments:
            svc.wait_state(name, "stopped")
            st = svc.planner.queries[name]
            links = _bytes(st)
            sub = subs.get(name)
            rows.append({"deployment": name, "kind": "query" if sub else "operator",
                         "reuse": sub["reuse"] if sub else True, "third": sub["third"] if sub else None,
                         "uses": st.uses, "bytes": sum(links.values()), "links": links,
                         "results": int(st.stats.summary()["results"]) if sub else None})
        same = {}
        for t in thirds:
            a, b = (svc.planner.queries[f"{w}{t.lower()}{tag}"] for w in ("share", "alone"))
            ra, rb = _results(bootstrap, a), _results(bootstrap, b)
            same[t] = {"with_reuse": len(ra), "without": len(rb), "same": ra == rb}
    finally:
        svc.close()
    share = sum(r["bytes"] for r in rows if r["reuse"])
    alone = sum(r["bytes"] for r in rows if not r["reuse"])
    return {"queries": k, "seconds": seconds, "rate_per_stream": rate, "payload_bytes": payload,
            "distinct_keys": distinct, "events_written": sum(gen.sent.values()), "deployments": rows,
            "results": same, "bytes_with_reuse": share, "bytes_without_reuse": alone,
            "saving": round(1 - share / alone, 4) if alone else None}


def table(res: dict[str, Any]) -> str:
    lines = ["| deployment | kind | reuse | bytes | results |", "|---|---|---|---:|---:|"]
    for r in res["deployments"]:
        lines.append(f"| {r['deployment']} | {r['kind']} | {'yes' if r['reuse'] else 'no'} | {r['bytes']:,} | "
                     f"{'' if r['results'] is None else format(r['results'], ',')} |")
    lines.append(f"\nwith reuse {res['bytes_with_reuse']:,} bytes, without {res['bytes_without_reuse']:,} bytes: "
                 f"{res['saving']:.1%} saved; same results per query: "
                 + ", ".join(f"{t} {v['with_reuse']:,} = {v['without']:,}: {'yes' if v['same'] else 'NO'}"
                             for t, v in res["results"].items()))
    return "\n".join(lines)


def plot(res: dict[str, Any], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for x, reuse in enumerate((True, False)):
        bottom = 0
        for r in (r for r in res["deployments"] if r["reuse"] == reuse):
            label = r["third"] and f"query ..{r['third']}" or "shared S1⋈S2"
            ax.bar(x, r["bytes"], bottom=bottom, color="#dd8452" if r["kind"] == "operator" else "#4c72b0",
                   edgecolor="white")
            ax.text(x, bottom + r["bytes"] / 2, label, ha="center", va="center", fontsize=8, color="white")
            bottom += r["bytes"]
    ax.set_xticks([0, 1], ["with reuse", "each query its own"])
    ax.set_ylabel("bytes between sites")
    ax.set_title(f"{res['queries']} live queries S1⋈S2⋈T_k, {res['seconds']:.0f} s: "
                 f"{res['saving']:.0%} fewer bytes with reuse")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "shared-ops")
    ap.add_argument("--queries", type=int, default=3, help="queries sharing the join (default 3)")
    ap.add_argument("--seconds", type=float, default=30, help="seconds of events (default 30)")
    ap.add_argument("--rate", type=float, default=50, help="events/s per stream (default 50)")
    ap.add_argument("--payload", type=int, default=200, help="payload bytes per event (default 200)")
    ap.add_argument("--distinct", type=int, default=500, help="distinct join values (default 500)")
    args = ap.parse_args(argv)
    if args.queries < 2 or args.seconds < 2 or args.rate <= 0 or args.payload < 0 or args.distinct < 1:
        ap.error("--queries >= 2, --seconds >= 2, --rate > 0, --payload >= 0 and --distinct >= 1")
    from live_common import kafka
    bootstrap, cluster = kafka(None)   # $KAFKA_BOOTSTRAP_SERVERS, the 'make up' cluster, else one started here
    try:
        res = run(bootstrap, args.queries, args.seconds, args.rate, args.payload, args.distinct)
    finally:
        if cluster is not None:
            cluster.stop()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "shared_ops.json").write_text(json.dumps(res, indent=2) + "\n")
    plot(res, args.out / "shared_ops.png")
    print(table(res))
    print(f"wrote {args.out / 'shared_ops.json'} and {args.out / 'shared_ops.png'}", file=sys.stderr)
    return 0 if all(v["same"] for v in res["results"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
