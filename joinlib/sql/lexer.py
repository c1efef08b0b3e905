"""The pre-pass: what sqlglot does not parse, taken out of the text over sqlglot's own tokens.

sqlglot knows ``CREATE TABLE ... AS SELECT ... JOIN ... ON`` but not the stream words of ksqlDB and Flink SQL:
``CREATE STREAM``, ``WITHIN n SECONDS`` after a joined stream, ``EMIT CHANGES``; and it turns some ``WITH (...)``
option keys into dialect-specific properties (``format`` becomes a file format).  So, per statement, this pass

* rewrites ``STREAM`` after ``CREATE`` to ``TABLE `` (same length),
* reads the ``WITH (key = value, ...)`` list after the stream's name (and columns) itself,
* reads every ``WITHIN n UNIT`` and a final ``EMIT CHANGES``,
* takes an ``EXPLAIN`` off the front of a statement (sqlglot's tokenizer reads everything after it as one string;
  so it is blanked and the text tokenized again, and the statement remembers where it was),

and blanks them (spaces, newlines kept) so that sqlglot parses the rest of the same text: every offset, line and
column sqlglot reports is the user's.  Working on tokens, not on regular expressions over the text, keeps comments,
strings and quoted names that contain these words out of it.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Optional, Union

from sqlglot.errors import TokenError
from sqlglot.tokenizer_core import Token, TokenType
from sqlglot.tokens import Tokenizer

from joinlib.sql.text import SqlText

OptionValue = Union[str, int, float]
#: WITHIN's units and the YAML window suffix each one stands for
UNITS = {"MILLISECOND": "ms", "MILLISECONDS": "ms", "SECOND": "s", "SECONDS": "s", "MINUTE": "min",
         "MINUTES": "min", "HOUR": "h", "HOURS": "h", "ROW": "tuples", "ROWS": "tuples"}
WITHIN_HINT = "write e.g. WITHIN 3 SECONDS, WITHIN 500 MILLISECONDS or WITHIN 100 ROWS"
OPTIONS_HINT = "write WITH (key = 'value', key = 42, ...)"
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@dataclass(frozen=True)
class Option:
    """``key = value`` of a WITH list; ``key`` lower-cased, ``*_at`` offsets in the text."""

    key: str
    value: OptionValue
    key_at: int
    value_at: int


@dataclass(frozen=True)
class Within:
    """``WITHIN n UNIT`` after the JOIN at offset ``join_at``: ``window`` in the YAML spelling ('3s', '5 tuples')."""

    window: str
    at: int
    join_at: int


@dataclass
class Statement:
    """One statement: its tokens, the text sqlglot is to parse (everything else blanked) and what was taken out."""

    tokens: list[Token]
    text: str = ""
    stream: bool = False                    # CREATE STREAM (rewritten to CREATE TABLE)
    options: Optional[dict[str, Option]] = None
    with_at: int = -1
    withins: dict[int, Within] = field(default_factory=dict)   # by the offset of their JOIN keyword
    joins: list[int] = field(default_factory=list)              # offsets of the JOIN keywords
    explain_at: int = -1                                        # the offset of an EXPLAIN before it (-1: none)

    @property
    def start(self) -> int:
        return self.tokens[0].start


def statements(src: SqlText) -> list[Statement]:
    """The statements of ``src`` (split at ';'), each pre-processed; positioned errors for what is wrong here."""
    tokens, explains = _tokenize(src)
    out: list[list[Token]] = [[]]
    marks: list[int] = [-1]
    boundary = 0   # where the current statement's text begins (after the last ';')
    for tok in tokens:
        if tok.token_type == TokenType.SEMICOLON:
            _explain_of_nothing(src, explains, boundary, tok.start, out[-1])
            out.append([])
            marks.append(-1)
            boundary = tok.end + 1
            continue
        if not out[-1]:
            marks[-1] = next((e for e in explains if boundary <= e < tok.start), -1)
        out[-1].append(tok)
    _explain_of_nothing(src, explains, boundary, len(src.text), out[-1])
    return [_prepare(src, toks, mark) for toks, mark in zip(out, marks, strict=True) if toks]


def _explain_of_nothing(src: SqlText, explains: list[int], start: int, end: int, toks: list[Token]) -> None:
    """An ``EXPLAIN`` with no statement after it (before ``end``, the next ';' or the end of the file)."""
    if toks:
        return
    for e in explains:
        if start <= e < end:
            raise src.error(e, "EXPLAIN of nothing; write EXPLAIN CREATE STREAM out AS SELECT ... (or EXPLAIN "
                               "SELECT ...)")


def _tokenize(src: SqlText) -> tuple[list[Token], list[int]]:
    """The tokens of ``src`` and the offsets of the ``EXPLAIN`` words taken out of it (see the module docstring)."""
    text, explains = src.text, list[int]()
    while True:
        toks = _tokens(src, text)
        found = [t for t in toks if t.token_type == TokenType.COMMAND and t.text.upper() == "EXPLAIN"]
        if not found:
            return toks, explains
        for t in found:
            explains.append(t.start)
            text = text[:t.start] + " " * (t.end + 1 - t.start) + text[t.end + 1:]


def _tokens(src: SqlText, text: str) -> list[Token]:
    tokenizer = Tokenizer()
    try:
        return tokenizer.tokenize(text)
    except TokenError as e:
        # the tokenizer stops at the start of what it could not read (an unclosed string or quoted name, as a
        # rule); its offset is internal to sqlglot (pinned), hence the getattr
        start = getattr(getattr(tokenizer, "_core", None), "_start", None)
        at = start if isinstance(start, int) else 0
        cause = str(e.__cause__ or e)
        if cause.startswith("Missing "):
            raise src.error(at, f"this {cause.split()[1]} is never closed; close the string or the quoted "
                                "name") from None
        raise src.error(at, f"cannot read the SQL here ({cause.splitlines()[0]})") from None


def _prepare(src: SqlText, toks: list[Token], explain_at: int = -1) -> Statement:
    st = Statement(toks, explain_at=explain_at)
    chars = [c if c in "\r\n" else " " for c in src.text]
    keep = [False] * len(src.text)
    for tok in toks:
        for i in range(tok.start, tok.end + 1):
            keep[i] = True
    i = _create_header(src, st, keep)
    _withins_and_emit(src, st, i, keep)
    for j, k in enumerate(keep):
        if k:
            chars[j] = src.text[j]
    if st.stream:
        t = toks[1]
        chars[t.start:t.end + 1] = list("TABLE ")
    st.text = "".join(chars)
    return st


def _upper(tok: Token) -> str:
    """The word a token spells, upper-cased; '' for a quoted name or a string (never a keyword of ours)."""
    if tok.token_type in (TokenType.STRING, TokenType.IDENTIFIER):
        return ""
    return tok.text.upper()


def _blank(keep: list[bool], start: int, end: int) -> None:
    for i in range(start, end + 1):
        keep[i] = False


def _create_header(src: SqlText, st: Statement, keep: list[bool]) -> int:
    """CREATE STREAM name [(columns)] [WITH (options)]: the index of the first token after it (0 if no CREATE)."""
    toks = st.tokens
    if toks[0].token_type != TokenType.CREATE:
        return 0
    if len(toks) < 3:
        raise src.error(toks[-1].start, "an incomplete CREATE statement; write CREATE STREAM name WITH (...)")
    kind = _upper(toks[1])
    if kind == "TABLE":
        raise src.error(toks[1].start, "CREATE TABLE is not supported: joinlib joins streams; write CREATE STREAM")
    if kind == "OR":
        raise src.error(toks[1].start, "CREATE OR REPLACE is not supported; write CREATE STREAM")
    if kind != "STREAM":
        raise src.error(toks[1].start, f"expected CREATE STREAM, not CREATE {toks[1].text}")
    if _upper(toks[2]) == "IF":
        raise src.error(toks[2].start, "IF NOT EXISTS is not supported; write CREATE STREAM name ...")
    st.stream = True
    i = 3
    if i < len(toks) and toks[i].token_type == TokenType.L_PAREN:
        i = _matching_paren(src, toks, i) + 1
    if i < len(toks) and toks[i].token_type == TokenType.WITH:
        end = _matching_paren(src, toks, i + 1) if i + 1 < len(toks) else i
        st.options, st.with_at = _options(src, toks[i + 1:end + 1], toks[i]), toks[i].start
        _blank(keep, toks[i].start, toks[end].end)
        i = end + 1
    return i


def _matching_paren(src: SqlText, toks: list[Token], i: int) -> int:
    if toks[i].token_type != TokenType.L_PAREN:
        raise src.error(toks[i].start, f"expected '(' here, not {toks[i].text!r}; {OPTIONS_HINT}")
    depth = 0
    for j in range(i, len(toks)):
        depth += {TokenType.L_PAREN: 1, TokenType.R_PAREN: -1}.get(toks[j].token_type, 0)
        if depth == 0:
            return j
    raise src.error(toks[i].start, "this '(' is never closed; add the ')'")


def _options(src: SqlText, toks: list[Token], with_tok: Token) -> dict[str, Option]:
    """``( key = value, ... )``: keys are names or 'strings' (as Flink writes them), values strings or numbers."""
    if len(toks) < 2 or toks[0].token_type != TokenType.L_PAREN:
        raise src.error(with_tok.start, f"WITH needs a list of options; {OPTIONS_HINT}")
    out: dict[str, Option] = {}
    i = 1
    while i < len(toks) - 1:
        opt, i = _option(src, toks, i)
        if opt.key in out:
            first = src.position(out[opt.key].key_at)
            raise src.error(opt.key_at, f"option '{opt.key}' is given twice (first at line {first[0]}, column "
                                        f"{first[1]}); keep one")
        out[opt.key] = opt
        if toks[i].token_type == TokenType.COMMA and i == len(toks) - 2:
            raise src.error(toks[i].start, "remove the trailing ','")
        if toks[i].token_type == TokenType.COMMA:
            i += 1
        elif toks[i].token_type != TokenType.R_PAREN:
            raise src.error(toks[i].start, f"expected ',' or ')' after an option, not {toks[i].text!r}; "
                                           + OPTIONS_HINT)
    return out


def _option(src: SqlText, toks: list[Token], i: int) -> tuple[Option, int]:
    key_tok = toks[i]
    key = key_tok.text.lower()
    if key_tok.token_type != TokenType.STRING and not _KEY.match(key_tok.text):
        raise src.error(key_tok.start, f"expected an option name, not {key_tok.text!r}; {OPTIONS_HINT}")
    if i + 2 >= len(toks) or toks[i + 1].token_type != TokenType.EQ:
        at = toks[min(i + 1, len(toks) - 1)].start
        raise src.error(at, f"expected '=' after option '{key}'; {OPTIONS_HINT}")
    j = i + 2
    negative = toks[j].token_type == TokenType.DASH and j + 1 < len(toks)
    if negative:
        j += 1
    val = toks[j]
    if val.token_type in (TokenType.COMMA, TokenType.R_PAREN):
        raise src.error(val.start, f"option '{key}' has no value; write {key} = 'value'")
    if val.token_type == TokenType.NUMBER:
        value: OptionValue = _number(("-" if negative else "") + val.text)
    elif val.token_type == TokenType.STRING and not negative:
        value = val.text
    else:
        raise src.error(val.start, f"option values are 'strings' or numbers: write {key} = '{val.text}'")
    return Option(key, value, key_tok.start, toks[i + 2].start), j + 1


def _number(text: str) -> Union[int, float]:
    """An option's number as YAML would load it: an int when written without a point or exponent."""
    try:
        return int(text)
    except ValueError:
        return float(text)


def _withins_and_emit(src: SqlText, st: Statement, i: int, keep: list[bool]) -> None:
    toks = st.tokens
    while i < len(toks):
        tok = toks[i]
        word = _upper(tok)
        if tok.token_type == TokenType.JOIN:
            st.joins.append(tok.start)
        elif word == "WITHIN":
            i = _within(src, st, i, keep)
            continue
        elif word == "EMIT":
            _emit(src, toks, i, keep)
            return
        i += 1


def _within(src: SqlText, st: Statement, i: int, keep: list[bool]) -> int:
    toks = st.tokens
    at = toks[i].start
    if not st.joins:
        raise src.error(at, "WITHIN belongs to a joined stream: write FROM s1 JOIN s2 WITHIN 3 SECONDS ON ...")
    join_at = st.joins[-1]
    if join_at in st.withins:
        raise src.error(at, "this JOIN already has a WITHIN; keep one")
    rest = toks[i + 1:i + 3]
    if rest and rest[0].token_type == TokenType.L_PAREN:
        raise src.error(rest[0].start, "asymmetric windows WITHIN (before, after) are not supported; "
                                       + WITHIN_HINT)
    if rest and rest[0].token_type == TokenType.DASH:
        raise src.error(rest[0].start, f"a window must be positive; {WITHIN_HINT}")
    if len(rest) < 2 or rest[0].token_type != TokenType.NUMBER:
        raise src.error(at, f"WITHIN needs a size and a unit; {WITHIN_HINT}")
    number, unit_tok = rest[0].text, rest[1]
    unit = UNITS.get(_upper(unit_tok))
    if unit is None:
        close = difflib.get_close_matches(unit_tok.text.upper(), list(UNITS), n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        raise src.error(unit_tok.start, f"unknown window unit {unit_tok.text!r}; {hint}{WITHIN_HINT}")
    st.withins[join_at] = Within(_window(src, number, unit, rest[0].start), at, join_at)
    _blank(keep, at, unit_tok.end)
    return i + 3


def _window(src: SqlText, number: str, unit: str, at: int) -> str:
    if unit != "tuples":
        return f"{number}{unit}"
    try:
        count = Decimal(number)
    except InvalidOperation:  # pragma: no cover - the tokenizer only gives numbers here
        count = Decimal(-1)
    if count != count.to_integral_value():
        raise src.error(at, f"a tuple window holds a whole number of rows, not {number}")
    return f"{int(count)} tuples"


def _emit(src: SqlText, toks: list[Token], i: int, keep: list[bool]) -> None:
    nxt = toks[i + 1] if i + 1 < len(toks) else None
    if nxt is None or _upper(nxt) != "CHANGES":
        what = f"EMIT {nxt.text}" if nxt is not None else "EMIT"
        raise src.error(toks[i].start, f"{what} is not supported: results are emitted as they are found; write "
                                       "EMIT CHANGES or nothing")
    if i + 2 < len(toks):
        raise src.error(toks[i + 2].start, "EMIT CHANGES ends the query; move this before it or remove it")
    _blank(keep, toks[i].start, nxt.end)
