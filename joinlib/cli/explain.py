"""``joinlib explain QUERY [--plan P] [--data DIR] [--json] [--url URL]``: the plan a planner chooses, as a tree
of sites with the byte model's bytes per link and kind, next to ``central``'s and the floor's
(:mod:`joinlib.costs.explanation`).

Why a command of its own: ``joinlib plan --explain`` prints the plan's JSON and its flows, for tools; this is for
people deciding whether a query is worth running this way, and it reads SQL's ``EXPLAIN`` (docs/sql.md).  With
``--url`` the planner service explains it (``POST /explain``), with the service's planners and defaults.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import yaml

from joinlib.cli.live import http_json
from joinlib.costs.explanation import format_explanation
from joinlib.data.files import load_streams
from joinlib.errors import JoinlibError
from joinlib.planner.explained import DEFAULT_PLAN, explain_query
from joinlib.query import query_to_dict
from joinlib.sql import load_query_file

DESCRIPTION = """\
Print the plan chosen for QUERY (a .yaml or .sql file; an SQL file may say EXPLAIN CREATE STREAM ... or EXPLAIN
SELECT ...) as a tree: per site, the streams born there, the operators that run there (replicas, join steps and
their algorithms, reducers) and the flows it sends on each link with their estimated bytes. Then the bytes per
link and per kind (full tuples; join values, key sets and filters; window updates), the best 'central' plan's
bytes and the floor's (the bytes of the tuples that take part in a result), with the plan's ratio to each.

Figures are the byte model's (docs/cost-model.md), in bytes per second of stream time; with --data the statistics
are measured on the data, the floor is the exact one of the data (python -m joinlib.costs.floor) and every figure
is also given per run of the data's span. Without --data the floor is the model's estimate.

  joinlib explain examples/routers_selective.sql
  joinlib explain examples/routers_selective.sql --plan SM-S1 --data data/routers --json
  joinlib explain examples/routers_selective.sql --url http://localhost:8080     # the planner service's plan"""


def add_command(subparsers: Any) -> None:
    """Register ``joinlib explain`` on the main CLI's subparsers."""
    p = subparsers.add_parser("explain", help="show the plan, its bytes per link and kind, central's and the floor",
                              formatter_class=argparse.RawDescriptionHelpFormatter, description=DESCRIPTION)
    p.add_argument("query", type=Path, help="query file (.yaml or .sql, EXPLAIN or not)")
    p.add_argument("--plan", default=DEFAULT_PLAN,
                   help="plan name as for 'joinlib plan --planner' / 'run --plan' (default auto), or "
                        "adaptive[:cnu|:dnu] (its first plan)")
    p.add_argument("--model", default="wire", help="cost model the planners use: wire | paper | bytes (default wire)")
    p.add_argument("--data", type=Path, help="data directory: statistics measured, the exact floor, per-run bytes")
    p.add_argument("--json", action="store_true", help="print the explanation as JSON")
    p.add_argument("--url", metavar="URL",
                   help="ask the planner service at URL (POST /explain) instead of planning here; "
                        "no --data then")
    p.set_defaults(func=_cmd_explain)


def _cmd_explain(args: argparse.Namespace) -> int:
    query = load_query_file(args.query, explain=True)
    if args.url:
        if args.data is not None:
            raise JoinlibError("--data goes without --url: the planner service explains on the query's declared "
                               "statistics")
        params = urlencode({"plan": args.plan, "model": args.model})
        doc = http_json(f"{args.url.rstrip('/')}/explain?{params}",
                        yaml.safe_dump(query_to_dict(query), sort_keys=False).encode())
        text = doc.pop("text", None)   # the service's format_explanation, so that both print the same
        print(json.dumps(doc, indent=2) if args.json or not text else text)
        return 0
    streams = load_streams(query, args.data) if args.data is not None else None
    e = explain_query(query, args.plan, args.model, streams, progress=sys.stderr.isatty())
    print(json.dumps(e.to_json(), indent=2) if args.json else format_explanation(e))
    return 0
