"""Durations as users write them on command lines: ``10s``, ``500ms``, ``2min``, ``1.5s``.

(Query files have their own, richer parser in :mod:`joinlib.query`.)
"""
from __future__ import annotations

import re

from joinlib.errors import JoinlibError

_DURATION = re.compile(r"\s*([0-9]*\.?[0-9]+)\s*(ms|s|min|h)?\s*")
_MS_PER_UNIT = {"ms": 1, "s": 1000, "min": 60000, "h": 3600000, None: 1}


def parse_duration(text: str) -> int:
    """'10s', '500ms', '2min', '1.5s' or a bare number of ms -> ms."""
    m = _DURATION.fullmatch(str(text))
    if not m:
        raise JoinlibError(f"bad duration {text!r}: use e.g. 10s, 500ms, 2min")
    ms = float(m.group(1)) * _MS_PER_UNIT[m.group(2)]
    if ms <= 0 or ms != int(ms):
        raise JoinlibError(f"bad duration {text!r}: must be a positive whole number of ms")
    return int(ms)
