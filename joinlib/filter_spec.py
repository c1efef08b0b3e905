"""Filters on one stream's records: the ``WHERE`` of an SQL query, ``streams.<S>.where`` of a YAML one.

```yaml
streams:
  S1: {site: r1, window: 3s, where: "dest <> '10.0.0.1' AND bytes > 100"}
```

A filter is a conjunction of conditions, each on one field of the stream's records: ``field OP literal`` (OP one of
``=``, ``<>`` (or ``!=``), ``<``, ``<=``, ``>``, ``>=``; the literal on either side), ``field [NOT] IN (literal,
...)``, ``field IS [NOT] NULL``, ``field [NOT] LIKE 'pattern'`` (``%`` any characters, ``_`` one) and ``field
BETWEEN low AND high`` (read as ``>= low AND <= high``).  Literals are 'strings', numbers, TRUE and FALSE.

Why at the source, and why so little: a record a filter drops must never ship, so the filter runs where records
enter (the data loader, the live sources' decoder), on the raw record, before the record gets a rank; a condition
that needs two streams' fields is a join predicate, and one with OR or functions would need an expression engine
at every source, which nothing asks for yet.

Semantics, SQL's three-valued logic made two-valued the way WHERE does: a record is kept iff every condition is
true.  A missing field is NULL.  A comparison (``=``, ``<>``, ordering, IN, NOT IN, LIKE, NOT LIKE) with NULL, or
with a value of another kind than the literal (kinds: strings; numbers, int and float alike; booleans), is not
true: ``bytes > 100`` drops a record whose ``bytes`` is ``"many"``, and so does ``bytes <> 100``.

The text form (YAML) is parsed with sqlglot, as SQL is, and :func:`where_to_text` writes it back so that
``parse_where_text(where_to_text(c)) == c``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Optional, Union

Literal = Union[str, int, float, bool]
Record = dict[str, Any]

COMPARISONS = ("=", "<>", "<", "<=", ">", ">=")
OPS = COMPARISONS + ("IN", "NOT IN", "IS NULL", "IS NOT NULL", "LIKE", "NOT LIKE")
SUPPORTED = ("a WHERE is a conjunction (AND) of conditions on one stream's field each: s.f = 'x', s.f <> 3, "
             "s.f < 3 (<=, >, >=), s.f IN ('a', 'b'), s.f NOT IN (...), s.f IS [NOT] NULL, s.f [NOT] LIKE 'x%', "
             "s.f BETWEEN 1 AND 5")
_FLIP = {"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class FilterProblem(Exception):
    """A condition that is not a filter joinlib can apply; ``node`` is the sqlglot node at fault (its position is
    the SQL front end's to report), ``problem`` what to say."""

    def __init__(self, node: Any, problem: str) -> None:
        super().__init__(problem)
        self.node, self.problem = node, problem


@dataclass(frozen=True)
class Condition:
    """``field op values``: one literal for comparisons and LIKE, one or more for IN, none for IS [NOT] NULL."""

    field: str
    op: str
    values: tuple[Literal, ...] = ()

    def __str__(self) -> str:
        name = quote(self.field)
        if self.op in ("IS NULL", "IS NOT NULL"):
            return f"{name} {self.op}"
        if self.op in ("IN", "NOT IN"):
            return f"{name} {self.op} ({', '.join(map(literal, self.values))})"
        return f"{name} {self.op} {literal(self.values[0])}"


Where = tuple[Condition, ...]


def quote(name: str) -> str:
    """A field name as the filter text writes it: double-quoted unless it is a plain name and not a keyword."""
    from sqlglot.tokens import Tokenizer
    if _PLAIN.match(name) and name.upper() not in Tokenizer.KEYWORDS:
        return name
    return '"' + name.replace('"', '""') + '"'


def literal(value: Literal) -> str:
    """A literal as SQL: TRUE / FALSE, numbers by repr (exact floats), strings quoted."""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, (int, float)):
        return repr(value)
    return "'" + value.replace("'", "''") + "'"


def where_to_text(where: Where) -> str:
    """The YAML spelling of a stream's filter: its conditions joined by AND, fields unqualified."""
    return " AND ".join(map(str, where))


# --------------------------------------------------------------------------- reading sqlglot's trees

def conditions(node: Any, column: Callable[[Any], tuple[str, str]]) -> list[tuple[str, Condition]]:
    """(stream, condition) of every conjunct of a WHERE tree; ``column`` resolves an ``exp.Column`` to (stream,
    field) (and raises for one it cannot).  :class:`FilterProblem` for anything that is not a filter."""
    from sqlglot import exp
    if isinstance(node, exp.Paren):
        return conditions(node.this, column)
    if isinstance(node, exp.And):
        return conditions(node.this, column) + conditions(node.expression, column)
    if isinstance(node, exp.Or):
        raise FilterProblem(node, f"OR is not supported in WHERE; {SUPPORTED}")
    negate = False
    if isinstance(node, exp.Not):
        negate, node = True, node.this
        if isinstance(node, exp.Paren):
            node = node.this
    if isinstance(node, exp.Like) and node.args.get("negate"):
        negate = not negate
    out = _condition(node, column, negate)
    return [out] if isinstance(out, tuple) else out


def _condition(node: Any, column: Callable[[Any], tuple[str, str]],
               negate: bool) -> Union[tuple[str, Condition], list[tuple[str, Condition]]]:
    from sqlglot import exp
    if isinstance(node, (exp.Is, exp.In, exp.Like)):
        return _test_condition(node, column, negate)
    if negate:
        raise FilterProblem(node, f"NOT is supported in IS NOT NULL, NOT IN and NOT LIKE only; {SUPPORTED}")
    if isinstance(node, exp.Between):
        stream, field = _column(node, node.this, column)
        low, high = _literal(node.args["low"]), _literal(node.args["high"])
        return [(stream, Condition(field, ">=", (low,))), (stream, Condition(field, "<=", (high,)))]
    return _comparison(node, column)


def _test_condition(node: Any, column: Callable[[Any], tuple[str, str]], negate: bool) -> tuple[str, Condition]:
    """IS [NOT] NULL, [NOT] IN (...), [NOT] LIKE 'pattern'."""
    from sqlglot import exp
    if isinstance(node, exp.Is):
        if not isinstance(node.expression, exp.Null):
            raise FilterProblem(node, f"IS tests NULL only (s.f IS NULL, s.f IS NOT NULL); {SUPPORTED}")
        stream, field = _column(node, node.this, column)
        return stream, Condition(field, "IS NOT NULL" if negate else "IS NULL")
    if isinstance(node, exp.In):
        if node.args.get("query") is not None or not node.expressions:
            raise FilterProblem(node, f"IN takes a list of literals, not a subquery; {SUPPORTED}")
        stream, field = _column(node, node.this, column)
        values = tuple(_literal(v) for v in node.expressions)
        if len({_kind(v) for v in values}) > 1:
            raise FilterProblem(node, "the literals of an IN list must be of one kind (strings, numbers or "
                                      "booleans)")
        return stream, Condition(field, "NOT IN" if negate else "IN", values)
    stream, field = _column(node, node.this, column)
    pattern = _literal(node.expression)
    if not isinstance(pattern, str):
        raise FilterProblem(node, "LIKE takes a 'pattern' string, e.g. s.f LIKE '10.%'")
    return stream, Condition(field, "NOT LIKE" if negate else "LIKE", (pattern,))


def _comparison(node: Any, column: Callable[[Any], tuple[str, str]]) -> tuple[str, Condition]:
    """``s.f OP literal`` or ``literal OP s.f``."""
    from sqlglot import exp
    ops = {exp.EQ: "=", exp.NEQ: "<>", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">="}
    op = ops.get(type(node))
    if op is None:
        raise FilterProblem(node, f"{node.sql()!r} is not a filter joinlib applies; {SUPPORTED}")
    left, right = node.this, node.expression
    if isinstance(left, exp.Column) and isinstance(right, exp.Column):
        a, b = column(left), column(right)
        if a[0] != b[0]:
            raise FilterProblem(node, f"{node.sql()!r} compares two streams' fields: an equality of two streams "
                                      "is a join predicate (write it in a JOIN's ON), other comparisons of two "
                                      "streams are not supported")
        raise FilterProblem(node, f"{node.sql()!r} compares two fields of one stream; a filter compares a field "
                                  "with a literal")
    if not isinstance(left, exp.Column) and isinstance(right, exp.Column):
        left, right, op = right, left, _FLIP[op]
    if isinstance(right, exp.Null):
        raise FilterProblem(node, f"a comparison with NULL is never true; write {left.sql()} IS "
                                  f"{'NOT ' if op == '<>' else ''}NULL")
    stream, field = _column(node, left, column)
    return stream, Condition(field, op, (_literal(right),))


def _column(node: Any, col: Any, column: Callable[[Any], tuple[str, str]]) -> tuple[str, str]:
    from sqlglot import exp
    if not isinstance(col, exp.Column) or isinstance(col.this, exp.Star):
        raise FilterProblem(node, f"{node.sql()!r}: a filter tests a column of one stream (s.field), not "
                                  f"{col.sql()!r}; functions and expressions are not supported")
    return column(col)


def _literal(node: Any) -> Literal:
    from sqlglot import exp
    sign = 1
    if isinstance(node, exp.Neg):
        sign, node = -1, node.this
    if isinstance(node, exp.Literal):
        if node.is_string:
            if sign < 0:
                raise FilterProblem(node, "a string cannot be negated")
            return str(node.this)
        text = str(node.this)
        try:
            number: Union[int, float] = int(text)
        except ValueError:
            number = float(text)
        return sign * number
    if isinstance(node, exp.Boolean) and sign > 0:
        return bool(node.this)
    raise FilterProblem(node, f"expected a literal ('string', number, TRUE or FALSE), not {node.sql()!r}")


def parse_where_text(text: Any, stream: str) -> Where:
    """The conditions of a YAML ``where`` string on ``stream`` (fields unqualified, or qualified with ``stream``);
    :class:`FilterProblem` (``node`` None for syntax errors) for anything else."""
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import ParseError, TokenError
    if not isinstance(text, str) or not text.strip():
        raise FilterProblem(None, f"expected a condition such as \"dest <> '10.0.0.1' AND bytes > 100\", not "
                                  f"{text!r}")
    try:
        tree = sqlglot.parse_one(text)
    except (ParseError, TokenError) as e:
        raise FilterProblem(None, f"cannot read {text!r} as a condition ({str(e).splitlines()[0]})") from None
    if isinstance(tree, (exp.Select, exp.Query)) or tree is None:
        raise FilterProblem(None, f"cannot read {text!r} as a condition")

    def column(col: Any) -> tuple[str, str]:
        if col.table and col.table != stream:
            raise FilterProblem(col, f"{col.sql()!r}: a filter of stream {stream} tests its own fields; write "
                                     f"{quote(col.name)}")
        return stream, col.name
    return tuple(c for _, c in conditions(tree, column))


# --------------------------------------------------------------------------- applying

def _kind(value: Any) -> str:
    """Values compare only within their kind: 'bool', 'num' (int and float), 'str'; '' for anything else."""
    t = type(value)
    if t is bool:
        return "bool"
    if t is int or t is float:
        return "num"
    return "str" if t is str else ""


def like_regex(pattern: str) -> re.Pattern[str]:
    """SQL LIKE as a regular expression: ``%`` any characters, ``_`` one, everything else itself."""
    parts = ["." if c == "_" else ".*" if c == "%" else re.escape(c) for c in pattern]
    return re.compile("".join(parts), re.S)


_TESTS: dict[str, Callable[[Any, Any], bool]] = {
    "=": lambda v, x: bool(v == x), "<>": lambda v, x: bool(v != x), "<": lambda v, x: bool(v < x),
    "<=": lambda v, x: bool(v <= x), ">": lambda v, x: bool(v > x), ">=": lambda v, x: bool(v >= x),
}


def condition_test(c: Condition) -> Callable[[Any], bool]:
    """The test of one condition on a field's value (``None`` for a missing field)."""
    if c.op == "IS NULL":
        return lambda v: v is None
    if c.op == "IS NOT NULL":
        return lambda v: v is not None
    kind = _kind(c.values[0])
    if c.op in ("IN", "NOT IN"):
        values, inside = frozenset(c.values), c.op == "IN"
        return lambda v: _kind(v) == kind and (v in values) == inside
    if c.op in ("LIKE", "NOT LIKE"):
        rx, match = like_regex(str(c.values[0])), c.op == "LIKE"
        return lambda v: type(v) is str and (rx.fullmatch(v) is not None) == match
    test, x = _TESTS[c.op], c.values[0]
    return lambda v: _kind(v) == kind and test(v, x)


def compile_filter(where: Where) -> Optional[Callable[[Record], bool]]:
    """A record -> keep? function for a stream's conditions; None when there are none (nothing to test, nothing
    to pay on the loader's hot path)."""
    if not where:
        return None
    tests = [(c.field, condition_test(c)) for c in where]
    if len(tests) == 1:
        (name, test), = tests
        return lambda row: test(row.get(name))
    return lambda row: all(test(row.get(name)) for name, test in tests)

