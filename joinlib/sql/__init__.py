"""SQL query files: a dialect close to ksqlDB and Flink SQL, parsed with sqlglot into the same
:class:`~joinlib.model.Query` a YAML file gives (docs/sql.md).

```sql
CREATE STREAM s1 (id BIGINT, ts BIGINT, dest VARCHAR) WITH (site = 'r1', topic = 'events.r1', timestamp = 'ts');
CREATE STREAM s2 WITH (site = 'r2');
CREATE STREAM matches WITH (interval = '100ms') AS
  SELECT s1.dest, s1.id AS id1, s2.id AS id2
  FROM s1 JOIN s2 WITHIN 3 SECONDS ON s1.dest = s2.dest
  EMIT CHANGES;
```

:func:`load_query_file` is what every command calls to read a query file: ``.sql`` files here, anything else as
YAML (:func:`joinlib.query.load_query`, which cannot dispatch itself: this package builds on it).
"""
from __future__ import annotations

from pathlib import Path
from typing import Union

from joinlib.model import Query
from joinlib.query import load_query, read_query_text
from joinlib.sql.build import QUERY_OPTIONS, STREAM_OPTIONS, parse_sql
from joinlib.sql.render import query_to_sql
from joinlib.sql.text import SqlError

__all__ = ["QUERY_OPTIONS", "STREAM_OPTIONS", "SqlError", "load_query_file", "load_sql", "parse_sql",
           "query_to_sql"]


def load_sql(path: Union[str, Path], *, explain: bool = False) -> Query:
    """Read and check an SQL query file (files it names are looked up next to it); an ``EXPLAIN`` query only with
    ``explain`` (:func:`~joinlib.sql.build.parse_sql`)."""
    path = Path(path)
    return parse_sql(read_query_text(path, ".sql"), str(path), base_dir=path.parent, explain=explain)


def load_query_file(path: Union[str, Path], *, explain: bool = False) -> Query:
    """A query file of either format: ``.sql`` is SQL, anything else YAML; ``explain``: an SQL ``EXPLAIN`` query is
    accepted (what ``joinlib explain`` reads), else it is an error pointing there."""
    path = Path(path)
    return load_sql(path, explain=explain) if path.suffix.lower() == ".sql" else load_query(path)
