"""sqlglot's trees of the statements, read into what a query file says: declared streams and the one query.

Why a pass of its own: sqlglot accepts far more SQL than a window join is (outer joins, subqueries, expressions,
GROUP BY ...); this module turns each construct joinlib cannot run into a positioned error that says what to write
instead, and hands :mod:`joinlib.sql.build` plain records with the offsets of everything they name.  Stream names
are resolved there, once every statement is read (a query may come before the streams it names).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Optional

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError
from sqlglot.tokenizer_core import TokenType

from joinlib.sql.lexer import Option, Statement, Within
from joinlib.sql.text import SqlText

JOIN_HINT = "write JOIN s2 WITHIN 3 SECONDS ON s1.k = s2.k"
SELECT_HINT = "select columns: s1.dest, s1.id AS id1, s1.*, or *"
_TOKEN_REPR = re.compile(r"<Token token_type: TokenType\.\w+, text: (.*?), line: \d+, col: \d+, start: \d+, "
                         r"end: \d+, comments: \[.*?\]>")
_JOIN_WORDS = ("LEFT", "RIGHT", "FULL", "OUTER", "INNER", "CROSS", "SEMI", "ANTI", "NATURAL", "ASOF", "JOIN")
_CLAUSES = {"group": "GROUP BY", "order": "ORDER BY", "with_": "WITH (a common table expression)",
            "windows": "WINDOW"}
_ALLOWED_SELECT_ARGS = ("expressions", "from_", "from", "joins", "where", "kind")


@dataclass(frozen=True)
class Ref:
    """A column as written: ``stream`` (a name or alias, None if unqualified) and ``field`` at offset ``at``."""

    stream: Optional[str]
    field: str
    at: int


@dataclass(frozen=True)
class Declared:
    """``CREATE STREAM name [(columns)] [WITH (options)]``: ``columns`` None when no column list is given."""

    name: str
    at: int
    columns: Optional[dict[str, int]]
    options: dict[str, Option]
    with_at: int


@dataclass(frozen=True)
class Scan:
    """A stream of the FROM clause or of a JOIN: ``name`` as written, its alias and, for a JOIN, its WITHIN and
    its ON predicates (pairs of columns, with the offset of the predicate)."""

    name: str
    at: int
    alias: Optional[str] = None
    within: Optional[Within] = None
    join_at: int = -1
    on: tuple[tuple[Ref, Ref, int], ...] = ()


@dataclass(frozen=True)
class SelectItem:
    """One SELECT item: a column (``field`` '*' for stars) and its alias."""

    ref: Ref
    alias: Optional[str] = None


@dataclass(frozen=True)
class RawQuery:
    """``CREATE STREAM name WITH (options) AS SELECT items FROM scans[0] JOIN scans[1:] ...``; ``name`` None for a
    bare ``EXPLAIN SELECT ...`` (the query is named by the file, as a YAML file without ``name``)."""

    name: Optional[str]
    at: int
    options: dict[str, Option]
    with_at: int
    scans: tuple[Scan, ...]
    items: tuple[SelectItem, ...] = field(default=())
    where: Optional[exp.Expr] = None    # the WHERE condition as sqlglot read it (joinlib.filter_spec reads it)
    where_at: int = -1
    explain_at: int = -1                # the offset of EXPLAIN before the statement (-1: none)


def parse_statement(src: SqlText, st: Statement) -> exp.Expr:
    """sqlglot's tree of one pre-processed statement; its syntax errors at the user's line and column."""
    try:
        tree = sqlglot.parse_one(st.text)
    except ParseError as e:
        raise _syntax_error(src, st, e) from None
    if tree is None:  # pragma: no cover - statements are never empty
        raise src.error(st.start, "an empty statement")
    return tree


def _syntax_error(src: SqlText, st: Statement, e: ParseError) -> Exception:
    info: dict[str, Any] = e.errors[0] if e.errors else {}
    line, col = info.get("line"), info.get("col")
    desc = _TOKEN_REPR.sub(lambda m: repr(m.group(1)), str(info.get("description") or e).split("\n")[0])
    desc = re.sub(r"<class 'sqlglot\.[\w.]*\.(\w+)'>", r"\1", desc)
    if not isinstance(line, int) or not isinstance(col, int):
        return src.error(st.start, f"SQL syntax error: {desc}")
    width = len(str(info.get("highlight") or " "))
    return src.error(max(st.start, src.offset(line, col) - width + 1), f"SQL syntax error: {desc}")


def at(node: Optional[exp.Expr], default: int) -> int:
    """The offset of the first name or literal in ``node`` (sqlglot keeps positions on those only)."""
    best = None
    for n in ([] if node is None else node.walk()):
        start = n.meta.get("start") if isinstance(n, (exp.Identifier, exp.Literal)) else None
        if isinstance(start, int) and (best is None or start < best):
            best = start
    return default if best is None else best


def _table(src: SqlText, node: Any, default: int, what: str) -> tuple[str, int, Optional[str]]:
    """(name, offset, alias) of a stream in a FROM / JOIN / CREATE; an error for anything but a plain name."""
    if not isinstance(node, exp.Table) or not isinstance(node.this, exp.Identifier):
        raise src.error(at(node, default), f"{what} must be a stream name; subqueries are not supported")
    if node.args.get("db") is not None:
        raise src.error(at(node, default), "stream names have no schema part; write the stream's name alone")
    alias = node.alias or None
    return node.name, at(node.this, default), alias


def declaration(src: SqlText, st: Statement, tree: exp.Create) -> Declared:
    """A source stream: ``CREATE STREAM s1 (id BIGINT, ...) WITH (site = 'r1', ...)``."""
    target, columns = tree.this, None
    if isinstance(target, exp.Schema):
        columns = {}
        for col in target.expressions:
            if not isinstance(col, exp.ColumnDef):
                raise src.error(at(col, st.start), "expected a column definition such as dest VARCHAR")
            name = col.name
            if name in columns:
                raise src.error(at(col, st.start), f"column '{name}' is declared twice; keep one")
            columns[name] = at(col, st.start)
        target = target.this
    name, name_at, _ = _table(src, target, st.start, "CREATE STREAM")
    return Declared(name, name_at, columns, dict(st.options or {}), st.with_at)


def query(src: SqlText, st: Statement, tree: exp.Create) -> RawQuery:
    """The query: ``CREATE STREAM out WITH (...) AS SELECT ... FROM ... JOIN ... WITHIN ... ON ...``."""
    if isinstance(tree.this, exp.Schema):
        raise src.error(at(tree.this, st.start), "an output stream's columns are its SELECT list; remove the "
                                                 "column list after its name")
    name, name_at, _ = _table(src, tree.this, st.start, "CREATE STREAM")
    select = tree.expression
    if not isinstance(select, exp.Select):
        raise src.error(at(select, st.start), f"expected AS SELECT ... after CREATE STREAM {name}; set "
                                              "operations (UNION, ...) are not supported")
    return _select(src, st, select, name, name_at)


def explained_select(src: SqlText, st: Statement, select: exp.Select) -> RawQuery:
    """``EXPLAIN SELECT ...``: a query without ``CREATE STREAM out AS`` (named by the file; no options)."""
    return _select(src, st, select, None, st.start)


def _select(src: SqlText, st: Statement, select: exp.Select, name: Optional[str], name_at: int) -> RawQuery:
    _check_clauses(src, st, select, name_at)
    items = tuple(_item(src, e, name_at) for e in select.expressions)
    source = select.args.get("from_") or select.args.get("from")
    if source is None:
        raise src.error(name_at, f"the query has no FROM; write SELECT ... FROM s1 {JOIN_HINT}")
    first, first_at, first_alias = _table(src, source.this, name_at, "FROM")
    scans = [Scan(first, first_at, first_alias)]
    for join in select.args.get("joins") or []:
        scans.append(_join(src, st, join, scans[-1].at))
    where = select.args.get("where")
    where_at = next((t.start for t in st.tokens if t.token_type == TokenType.WHERE), name_at)
    return RawQuery(name, name_at, dict(st.options or {}), st.with_at, tuple(scans), items,
                    None if where is None else where.this, where_at, st.explain_at)


def _check_clauses(src: SqlText, st: Statement, select: exp.Select, default: int) -> None:
    for key, value in select.args.items():
        if key in _ALLOWED_SELECT_ARGS or value in (None, [], False):
            continue
        clause = _CLAUSES.get(key, key.rstrip("_").upper().replace("_", " "))
        word = clause.split()[0]
        where = next((t.start for t in st.tokens if t.text.upper().startswith(word)),
                     at(value if isinstance(value, exp.Expr) else None, default))
        raise src.error(where, f"{clause} is not supported: a query joins streams and selects columns")


def _item(src: SqlText, node: exp.Expr, default: int) -> SelectItem:
    alias = None
    if isinstance(node, exp.Alias):
        alias, node = node.alias, node.this
    if isinstance(node, exp.Star):
        return SelectItem(Ref(None, "*", default), alias)
    if isinstance(node, exp.Column):
        return SelectItem(_ref(src, node, default), alias)
    raise src.error(at(node, default), f"only columns can be selected yet, not {node.sql()!r}; {SELECT_HINT}")


def _ref(src: SqlText, col: exp.Column, default: int) -> Ref:
    if col.args.get("db") is not None or col.args.get("catalog") is not None:
        raise src.error(at(col, default), f"write a column as stream.field, not {col.sql()!r}")
    table = col.table or None
    field_name = "*" if isinstance(col.this, exp.Star) else col.name
    return Ref(table, field_name, at(col, default))


def _join(src: SqlText, st: Statement, join: exp.Join, previous_at: int) -> Scan:
    name, name_at, alias = _table(src, join.this, previous_at, "JOIN")
    keywords = [j for j in st.joins if previous_at < j < name_at]
    if not keywords:
        raise src.error(name_at, f"streams are joined with JOIN ... WITHIN ... ON, not listed with commas; "
                                 f"{JOIN_HINT}")
    join_at = keywords[-1]
    start = _first_join_word(st, join_at)
    side, kind = (join.args.get("side") or "").upper(), (join.args.get("kind") or "").upper()
    if side in ("LEFT", "RIGHT", "FULL"):
        raise src.error(start, f"{side} JOIN is not supported: joinlib computes inner joins (a result has a "
                               f"tuple of every stream); {JOIN_HINT.replace('s2', name)}")
    if kind not in ("", "INNER"):
        raise src.error(start, f"{kind} JOIN is not supported; {JOIN_HINT.replace('s2', name)}")
    if join.args.get("using"):
        raise src.error(at(join.args["using"][0], name_at), f"JOIN ... USING is not supported; write ON with "
                                                             f"the stream of each side: {JOIN_HINT}")
    within = st.withins.get(join_at)
    if within is None:
        raise src.error(join_at, f"missing WITHIN: the window of {name}; write JOIN {name} WITHIN 3 SECONDS ON ...")
    on = join.args.get("on")
    if on is None:
        raise src.error(name_at, f"missing ON: {JOIN_HINT.replace('s2', name)}")
    preds = tuple(_predicate(src, c, name_at) for c in _conjuncts(on))
    return Scan(name, name_at, alias, within, join_at, preds)


def _first_join_word(st: Statement, join_at: int) -> int:
    """The offset of LEFT in LEFT OUTER JOIN (the JOIN keyword's offset is known)."""
    idx = next(i for i, t in enumerate(st.tokens) if t.start == join_at)
    while idx > 0 and st.tokens[idx - 1].text.upper() in _JOIN_WORDS:
        idx -= 1
    return st.tokens[idx].start


def _conjuncts(node: exp.Expr) -> list[exp.Expr]:
    if isinstance(node, exp.Paren):
        return _conjuncts(node.this)
    if isinstance(node, exp.And):
        return _conjuncts(node.this) + _conjuncts(node.expression)
    return [node]


def _predicate(src: SqlText, node: exp.Expr, default: int) -> tuple[Ref, Ref, int]:
    where = at(node, default)
    if isinstance(node, exp.Or):
        raise src.error(where, "OR is not supported in ON: a join predicate is a conjunction of equalities; "
                               "write ON s1.a = s2.a AND s1.b = s2.b")
    if not isinstance(node, exp.EQ):
        op = type(node).__name__.upper()
        raise src.error(where, f"only equality predicates join streams, not {node.sql()!r} ({op}); write "
                               "s1.k = s2.k (a time bound is the JOIN's WITHIN)")
    left, right = node.this, node.expression
    if not (isinstance(left, exp.Column) and isinstance(right, exp.Column)):
        raise src.error(where, f"{node.sql()!r} compares with a constant: that is a filter; move it to the "
                               "WHERE clause (a join predicate is s1.k = s2.k)")
    return _ref(src, left, where), _ref(src, right, where), where
