"""``joinlib sql FILE --to-yaml | --from-yaml [-o OUT]``: convert a query between its SQL and YAML files.

Why a command: the YAML format stays (the planner service, the Spark jobs and older files speak it), SQL is what
people write; both read into the same query, and this command prints one as the other (docs/sql.md).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from joinlib.errors import JoinlibError
from joinlib.query import load_query, query_to_yaml
from joinlib.sql import load_sql, query_to_sql

DESCRIPTION = """\
Convert a query file between SQL (docs/sql.md) and YAML; both describe the same query, and every command that
takes a query file reads either (by its suffix: .sql is SQL, anything else YAML).

  joinlib sql examples/routers_selective.sql --to-yaml        # print the YAML of an SQL query
  joinlib sql examples/routers_selective.yaml --from-yaml     # print the SQL of a YAML query
  joinlib sql Q.sql --to-yaml -o Q.yaml                       # write it to a file instead

The YAML written names the query (name: ...) and spells out every default that matters (network, execution), so
it reads back to the same query; so does the SQL."""


def add_command(subparsers: Any) -> None:
    """Register ``joinlib sql`` on the main CLI's subparsers."""
    p = subparsers.add_parser("sql", help="convert a query between SQL and YAML (--to-yaml, --from-yaml)",
                              formatter_class=argparse.RawDescriptionHelpFormatter, description=DESCRIPTION)
    p.add_argument("file", type=Path, help="the query file to convert: .sql with --to-yaml, .yaml with --from-yaml")
    way = p.add_mutually_exclusive_group(required=True)
    way.add_argument("--to-yaml", action="store_true", help="read an SQL query, print its YAML")
    way.add_argument("--from-yaml", action="store_true", help="read a YAML query, print its SQL")
    p.add_argument("-o", "--out", type=Path, metavar="FILE", help="write the result here instead of stdout")
    p.set_defaults(func=_cmd_sql)


def _cmd_sql(args: argparse.Namespace) -> int:
    path: Path = args.file
    if args.to_yaml:
        if path.suffix.lower() != ".sql":
            raise JoinlibError(f"{path}: --to-yaml reads an SQL query file (.sql); for a YAML file use --from-yaml")
        text = query_to_yaml(load_sql(path))
    else:
        if path.suffix.lower() == ".sql":
            raise JoinlibError(f"{path}: --from-yaml reads a YAML query file; for an SQL file use --to-yaml")
        text = query_to_sql(load_query(path))
    if args.out is None:
        sys.stdout.write(text)
        return 0
    if not args.out.parent.is_dir():
        raise JoinlibError(f"cannot write {args.out}: directory {args.out.parent} does not exist")
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out}")
    return 0
