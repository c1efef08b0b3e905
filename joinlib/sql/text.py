"""An SQL file's text and its positioned errors.

Why a class of its own: every SQL mistake is reported at a line and column of the file the user wrote, with the
line itself and a caret under the spot, whichever pass finds it (the pre-pass over tokens, sqlglot, the query
checks of :mod:`joinlib.query`).  Offsets are 0-based character offsets into the original text; the pre-pass
keeps them exact (:mod:`joinlib.sql.lexer` blanks what it takes out instead of deleting it).
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from joinlib.errors import QueryError


class SqlError(QueryError):
    """A mistake in an SQL query file, at ``line`` and ``column`` (1-based); ``problem`` is the message without
    the file, position and excerpt (what the tests compare)."""

    def __init__(self, source: str, line: int, column: int, problem: str, excerpt: str = "") -> None:
        self.source, self.line, self.column, self.problem = source, line, column, problem
        text = f"{source}:{line}:{column}: {problem}"
        if excerpt.strip():
            text += f"\n    {excerpt}\n    {' ' * (column - 1)}^"
        super().__init__(text)


@dataclass(frozen=True)
class SqlText:
    """The text of one SQL file (``name`` prefixes its errors)."""

    name: str
    text: str
    _line_starts: list[int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        starts = [0] + [i + 1 for i, c in enumerate(self.text) if c == "\n"]
        object.__setattr__(self, "_line_starts", starts)

    def position(self, offset: int) -> tuple[int, int]:
        """(line, column), both 1-based, of a character offset."""
        offset = max(0, min(offset, len(self.text)))
        i = bisect.bisect_right(self._line_starts, offset) - 1
        return i + 1, offset - self._line_starts[i] + 1

    def offset(self, line: int, column: int) -> int:
        """The character offset of a 1-based (line, column)."""
        line = max(1, min(line, len(self._line_starts)))
        return self._line_starts[line - 1] + max(0, column - 1)

    def error(self, offset: int, problem: str) -> SqlError:
        line, column = self.position(offset)
        start = self._line_starts[line - 1]
        end = self.text.find("\n", start)
        excerpt = self.text[start:] if end < 0 else self.text[start:end]
        return SqlError(self.name, line, column, problem, excerpt.expandtabs(1).rstrip())
