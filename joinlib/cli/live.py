"""The query lifecycle commands, clients of the planner service's HTTP API (docs/live.md):

* ``joinlib queries [NAME] [--json]``: every query with its state, input rates, results/s, bytes
  shipped against ``central``'s, dead letters and p50/p99 event-to-result latency;
* ``joinlib stop NAME``: stop a running query (its nodes end the run and clear its state);
* ``joinlib replan NAME --plan P [--margin SECONDS]``: move a running live query to another plan without
  stopping it (docs/live.md "Replan");
* ``joinlib results NAME [--follow] [--from-beginning] [--idle-exit SECONDS] [--out FILE]``: results
  in the OUT format, one JSON object per line, or the rows of a query writing rows to a sink topic.
  Without ``--follow``: every result of the current run so far, then exit.  With ``--follow``: new results
  as they come (from the run's first result with ``--from-beginning``), until Ctrl-C or until none arrived
  for ``--idle-exit`` seconds.

(``joinlib submit`` lives with the other commands in :mod:`joinlib.cli.main`.)  No Kafka client here:
the planner service reads the topics.  Every request carries the planner's bearer token when
``JOINLIB_PLANNER_TOKEN`` or ``JOINLIB_PLANNER_TOKEN_FILE`` is set.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import IO, Any, Optional
from urllib.error import HTTPError, URLError
from urllib.parse import quote, urlencode
from urllib.request import Request, urlopen

from joinlib.errors import JoinlibError
from joinlib.settings import ServiceEnv, planner_client_context, planner_token

DEFAULT_URL = "http://localhost:8080"


def planner_url(env: Optional[ServiceEnv] = None) -> str:
    """``$JOINLIB_PLANNER_URL`` (``env``: the environment as read already), else :data:`DEFAULT_URL`."""
    url = (env or ServiceEnv.from_env()).planner_url
    return DEFAULT_URL if url is None else url


def http_json(url: str, data: Optional[bytes] = None, method: Optional[str] = None, timeout: float = 60) -> Any:
    """GET (or POST ``data``) a planner-service URL, with ``Authorization: Bearer <token>`` when
    ``JOINLIB_PLANNER_TOKEN[_FILE]`` is set (docs/security.md); errors become one clear line."""
    token = planner_token()
    try:
        req = Request(url, data=data, method=method or ("POST" if data is not None else "GET"))
        if token is not None:
            req.add_header("Authorization", f"Bearer {token}")
        context = planner_client_context() if url.startswith("https:") else None
        with urlopen(req, timeout=timeout, context=context) as r:
            return json.loads(r.read())
    except HTTPError as e:
        if e.code == 401:
            raise JoinlibError("planner service: unauthorized; set JOINLIB_PLANNER_TOKEN or "
                               "JOINLIB_PLANNER_TOKEN_FILE to the planner's API token"
                               + (" (the one set was refused)" if token is not None else "")) from None
        try:
            msg = json.loads(e.read()).get("error", e.reason)
        except ValueError:
            msg = e.reason
        raise JoinlibError(f"planner service: {msg}") from None
    except (URLError, OSError) as e:
        raise JoinlibError(f"cannot reach the planner service at {url}: {getattr(e, 'reason', e)} "
                           "(start it with 'python -m services.planner', or set --url)") from None


def add_commands(sub: Any, env: Optional[ServiceEnv] = None) -> None:
    """``queries``, ``stop`` and ``results`` on the command line's subparsers (``env``: the environment, read
    once by the caller)."""
    url = planner_url(env)
    q = sub.add_parser("queries", help="list submitted queries: state, rates, bytes vs central, latency",
                       description="Every query the planner service knows, with its state (running, stopping, "
                                   "stopped, done), input events/s per stream, results/s, bytes shipped between "
                                   "sites against what 'central' would ship, dead letters and the latest p50/p99 "
                                   "event-to-result latency; the operators MJoin trees share (op-...), with the "
                                   "queries that use each, and per query the operators it reads.")
    q.add_argument("name", nargs="?", help="one query (default: all)")
    q.add_argument("--json", action="store_true", help="print the planner's JSON")
    q.add_argument("--url", default=url)
    q.set_defaults(func=_cmd_queries)

    s = sub.add_parser("stop", help="stop a running query",
                       description="Publish 'stop' for the query's current run: every node ends it, publishes "
                                   "its final counters and clears its checkpoint; other queries go on.")
    s.add_argument("name")
    s.add_argument("--wait", type=float, default=30.0, metavar="SECONDS",
                   help="wait until every node has stopped it (default 30; 0: do not wait)")
    s.add_argument("--url", default=url)
    s.set_defaults(func=_cmd_stop)

    rp = sub.add_parser("replan", help="move a running live query to another plan without stopping it",
                        description="Start a new run of the query with plan P that serves every result whose newest "
                                    "tuple has event time T or later; the running run serves those before T and then "
                                    "ends by itself, so each result is on out.<query> once, none missing. T is "
                                    "--margin after the newest event time the sources hold. The new run warms its "
                                    "windows by reading the sources again from one window (plus max_delay and a 5 s "
                                    "slack) before T: both runs work until the old one's watermark passes T. "
                                    "Static plans (auto, greedy, central, reductions, algorithms), pmjoin "
                                    "without --scale-out and adaptive[:cnu|:dnu], in every direction between them, "
                                    "and from a single MJoin tree (not to one); docs/live.md \"Replan\".")
    rp.add_argument("name")
    rp.add_argument("--plan", required=True, metavar="P",
                    help="the plan to move to: any static plan name, pmjoin[:hash|range|rate][:D] (rate, range "
                         "and site: fitted to the query's live per-value rates) or adaptive[:cnu|:dnu]; auto: every "
                         "plan kind but MJoin trees, weighed on a sample of the sources' newest records")
    rp.add_argument("--model", help="the cost model the planner prices P with (default: the registry's)")
    rp.add_argument("--margin", type=float, default=3.0, metavar="SECONDS",
                    help="how far after the newest event time the switch lies (default 3; raise it when a node "
                         "takes longer than that to see a control message)")
    rp.add_argument("--wait", type=float, default=0.0, metavar="SECONDS",
                    help="wait until the old run has ended at every node (default 0: do not wait)")
    rp.add_argument("--url", default=url)
    rp.set_defaults(func=_cmd_replan)

    r = sub.add_parser("results", help="print a query's results or rows (JSON lines), optionally following them",
                       description="Results of the query's current run, one JSON object per line: for a query "
                                   "with a SELECT list and a sink topic (SQL: CREATE STREAM out WITH (topic = "
                                   "'matches') AS SELECT ...), its rows as on that topic -- the selected columns, "
                                   '"ids" and "ts" (Avro rows decoded with their registered schema); else the OUT '
                                   'format ({"ids": {stream: id}, "ts": head event time in ms}) of out.<query>.')
    r.add_argument("name")
    r.add_argument("--follow", "-f", action="store_true", help="keep printing new results until Ctrl-C")
    r.add_argument("--from-beginning", action="store_true",
                   help="with --follow: start at the run's first result (default: only new ones)")
    r.add_argument("--idle-exit", type=float, metavar="SECONDS",
                   help="with --follow: exit once no result has arrived for this long")
    r.add_argument("--out", type=Path, help="write the results to this file instead of stdout")
    r.add_argument("--url", default=url)
    r.set_defaults(func=_cmd_results)


# ---------------------------------------------------------------------------- queries

def _cmd_queries(args: argparse.Namespace) -> int:
    base = f"{args.url.rstrip('/')}/queries"
    data = http_json(base + (f"/{quote(args.name)}" if args.name else ""))
    rows = [data] if args.name else data
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    if not rows:
        print("no queries; submit one with 'joinlib submit QUERY.yaml'")
    for q in rows:
        print(format_query(q))
    return 0


def format_query(q: dict[str, Any]) -> str:
    """A few lines per query for people (``joinlib queries``)."""
    lines = [f"{q['query']}  {q['state']}  run {q['run']}  plan {q.get('planner')}"
             + ("  live" if q.get("live") else "")]
    rp = q.get("replan")
    if isinstance(rp, dict):
        lines.append(f"  replan     {rp.get('state')} from run {rp.get('from_run')} (plan {rp.get('from_planner')}, "
                     f"{rp.get('from_state')}) at event time {rp.get('switch_ms')} ms")
    changes = _plan_changes(q.get("sites") or {})
    if changes:
        lines.append(changes)
    lines += _repartition(q.get("repartition"))
    lines += _sharing(q)
    st = q.get("stats")
    if not st:
        return "\n".join(lines)
    rates = "  ".join(f"{k} {_num(v)}" for k, v in st["input_per_s"].items())
    lines.append(f"  input/s    {rates}")
    lat = (f"   latency p50 {_num(st['p50_latency_ms'])} ms, p99 {_num(st['p99_latency_ms'])} ms"
           if st.get("p99_latency_ms") is not None else "")
    lines.append(f"  results/s  {_num(st['results_per_s'])}  (total {st['results']:,}){lat}")
    ratio = f": {st['bytes_vs_central']:.0%}" if st.get("bytes_vs_central") is not None else ""
    lines.append(f"  shipped    {st['bytes']:,} bytes; central (all to {st['central_site']}) "
                 f"{st['central_bytes']:,} bytes{ratio}")
    dead = st.get("dead_letters") or {}
    if dead:
        parts = ", ".join(f"{k} {v}" for k, v in sorted(dead.items()))
        lines.append(f"  dead letters {sum(dead.values())} ({parts}) in dlq.{q['query']}")
    return "\n".join(lines)


def _plan_changes(sites: dict[str, Any]) -> str:
    """An adaptive query's line (docs/adaptive.md): its plan changes, and the current plan of the node
    furthest on; empty for other queries."""
    ad = {s: v["adaptive"] for s, v in sites.items() if isinstance(v, dict) and isinstance(v.get("adaptive"), dict)}
    if not ad:
        return ""
    site, cur = max(ad.items(), key=lambda kv: (kv[1].get("generation", 0), kv[0]))
    gens = ", ".join(f"{s} {v.get('generation', 0)}" for s, v in sorted(ad.items()))
    plan = "; ".join(f"{h}: " + " ".join(f"{o}{'<>'[int(p)]}" for o, p in steps)
                     for h, steps in (cur.get("plan") or {}).items())
    return (f"  adaptive   {str(cur.get('mode', '')).upper()}: {cur.get('plan_changes', 0)} plan change(s), "
            f"{cur.get('triggers', 0)} trigger(s) at {site}; generation per node: {gens}\n"
            f"  plan       {plan}")


def _repartition(rp: Any) -> list[str]:
    """A query submitted with --repartition: its threshold, the latest check and the moves so far."""
    if not isinstance(rp, dict):
        return []
    last = rp.get("last_check") or {}
    check = (f"last check: running function {last.get('gain', 1.0):.2f}x a refit" if last else "not checked yet")
    moves = rp.get("moves") or []
    return [f"  repartition at {1 + float(rp.get('threshold') or 0):.2f}x; {check}; {len(moves)} move(s)"
            + (f", the last to run {moves[-1].get('run')}" if moves else "")]


def _sharing(q: dict[str, Any]) -> list[str]:
    """A shared operator's line (what it joins where, and the queries holding it: its reference count), or
    a query's line naming the operator deployments it reads (docs/multiquery.md "Shared operators")."""
    op = q.get("operator")
    if isinstance(op, dict):
        users = q.get("used_by") or []
        return [f"  operator   {'+'.join(op.get('streams') or [])} at {op.get('node')}; used by "
                f"{', '.join(users) if users else 'no running query'} ({len(users)} reference(s))"]
    return [f"  reads      {', '.join(q['uses'])}"] if q.get("uses") else []


def _num(v: Optional[float]) -> str:
    return "-" if v is None else f"{v:,.1f}"


# ---------------------------------------------------------------------------- stop

def _cmd_stop(args: argparse.Namespace) -> int:
    base = f"{args.url.rstrip('/')}/queries/{quote(args.name)}"
    out = http_json(base + "/stop", b"")
    print(f"query {out['query']} (run {out['run']}): stopping")
    deadline = time.monotonic() + max(0.0, args.wait)
    state = out["state"]
    while args.wait > 0 and state != "stopped" and time.monotonic() < deadline:
        time.sleep(0.5)
        state = http_json(base)["state"]
    if args.wait > 0:
        print(f"query {out['query']}: {state}")
    return 0


# ---------------------------------------------------------------------------- replan

def _cmd_replan(args: argparse.Namespace) -> int:
    if args.margin <= 0:
        raise JoinlibError(f"--margin {args.margin}: must be positive (seconds after the newest event time)")
    base = f"{args.url.rstrip('/')}/queries/{quote(args.name)}"
    params = {k: v for k, v in (("plan", args.plan), ("model", args.model), ("margin", str(args.margin))) if v}
    out = http_json(f"{base}/replan?{urlencode(params)}", b"")
    print(f"query {out['query']}: run {out['run']} (plan {args.plan}) takes run {out['replaces']} over from event "
          f"time {out['switch_ms']} ms; the old run ends by itself once its watermark passes it")
    if out.get("reread_all"):
        print("note: the sources' Kafka timestamps do not follow their event times; the new run reads them again "
              "from the query's start to warm its windows")
    deadline = time.monotonic() + max(0.0, args.wait)
    state = "switching"
    while args.wait > 0 and state == "switching" and time.monotonic() < deadline:
        time.sleep(0.5)
        state = (http_json(base).get("replan") or {}).get("state", "switched")
    if args.wait > 0:
        print(f"query {out['query']}: {state}")
    return 0


# ---------------------------------------------------------------------------- results

def _cmd_results(args: argparse.Namespace) -> int:
    if (args.from_beginning or args.idle_exit is not None) and not args.follow:
        raise JoinlibError("--from-beginning and --idle-exit go with --follow (without it every result "
                           "so far is printed)")
    if args.out is not None:
        if args.out.is_dir():
            raise JoinlibError(f"cannot write {args.out}: it is a directory")
        with open(args.out, "w", encoding="utf-8") as f:
            return _results(args, f)
    return _results(args, sys.stdout)


def _results(args: argparse.Namespace, f: IO[str]) -> int:
    base = f"{args.url.rstrip('/')}/queries/{quote(args.name)}/results"
    start = "beginning" if args.from_beginning or not args.follow else "end"
    stop_at: Optional[int] = None
    last_result = time.monotonic()
    try:
        while True:
            page = http_json(f"{base}?{urlencode({'from': start, 'max': 20000, 'wait': 1.0 if args.follow else 0})}")
            if stop_at is None and not args.follow:
                stop_at = page["end"]
            if page["results"]:
                f.write("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in page["results"]))
                f.flush()
                last_result = time.monotonic()
            start = str(page["next"])
            if not args.follow and page["next"] >= min(stop_at or 0, page["end"]):
                return 0
            if args.follow and args.idle_exit is not None and time.monotonic() - last_result >= args.idle_exit:
                return 0
    except KeyboardInterrupt:
        return 0
