"""User mistakes of the multi-query part, printed by the CLI as one ``error: ...`` line.

They live here rather than in :mod:`joinlib.errors` so that this package stays self-contained;
they are :class:`~joinlib.errors.JoinlibError` subclasses, so the CLI's handling applies.
"""
from __future__ import annotations

from joinlib.errors import JoinlibError


class MultiQueryError(JoinlibError):
    """Root of the multi-query planner's user-facing errors."""


class TopologyError(MultiQueryError):
    """A topology file or generator argument is malformed (unknown node, bad latency, disconnected, ...)."""


class WorkloadError(MultiQueryError):
    """A query does not fit its catalogue or topology (unknown stream, sink not a node, ...)."""
