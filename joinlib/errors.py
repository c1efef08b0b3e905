"""One error root for everything a user can get wrong.

The CLI catches :class:`JoinlibError` and prints its message without a traceback;
anything else escaping is a bug in joinlib, not a user mistake.
"""


class JoinlibError(Exception):
    """Root of all user-facing errors."""


class QueryError(JoinlibError):
    """The query file is malformed or inconsistent (unknown stream, bad window, ...)."""


class DataError(JoinlibError):
    """A data file is missing, unreadable, or out of timestamp order."""


class PlanError(JoinlibError):
    """A join plan does not fit the query (unknown stream, bad algorithm, not a join-graph order)."""


class ClusterError(JoinlibError):
    """Kafka or Redis cannot be reached or misbehaves."""


class CheckpointError(JoinlibError, ValueError):
    """A checkpoint does not fit the host it is restored into (other plan, other format, damaged)."""


class FencedError(ClusterError):
    """Another instance took over this run's work (a higher owner epoch in Redis): this one may not write its
    windows, checkpoints or messages any more (docs/reliability.md "Fenced instances")."""
