"""Riding out a Redis restart: a node resumes from its last checkpoint instead of retrying commands.

Why not let redis-py retry?  A command is retried when its reply is lost, and Redis may have applied
it already (killed after the fsync of ``appendfsync always`` and before the reply left).  The window
scripts are not idempotent -- a purge retried removes tuples twice -- so a retried command can
corrupt a window (drill (b) of ``tests/integration/test_drills.py`` found it: ``NOTSTORED`` from
``remove_oldest`` about one run in four).  The node's window stores therefore never retry
(``retry`` with 0 retries); a Redis failure ends the run in the process as a crash would, and the
node service waits until Redis answers again and starts the same plan over: the existing restart
path rolls the windows back to the checkpoint copies in Redis, re-reads the inputs from the
checkpoint's offsets and skips the messages and result batches already delivered -- whatever Redis
had applied after the checkpoint is discarded with it.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Optional

REDIS_WAIT_S = 300.0   # how long a node waits for Redis to answer again before its query fails


def redis_outage(exc: BaseException) -> Optional[BaseException]:
    """The Redis connection failure behind ``exc`` (itself, or in its cause/context chain), or None.

    ``BusyLoadingError`` (Redis replaying its append-only file) is a ``ConnectionError`` in redis-py.
    """
    try:
        # optional dependency: redis (node_service imports this module whether or not a node has REDIS_URL)
        from redis.exceptions import ConnectionError as RedisConnectionError  # optional dependency: redis
        from redis.exceptions import TimeoutError as RedisTimeoutError  # optional dependency: redis
    except ImportError:  # pragma: no cover - redis is a dependency of the node service
        return None
    seen: set[int] = set()
    e: Optional[BaseException] = exc
    while e is not None and id(e) not in seen:
        if isinstance(e, (RedisConnectionError, RedisTimeoutError)):
            return e
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return None


def no_retry() -> Any:
    """redis-py's ``Retry`` with no retries: a lost reply surfaces as an error instead of a re-send."""
    from redis.backoff import NoBackoff  # optional dependency: redis (only a node with REDIS_URL calls this)
    from redis.retry import Retry  # optional dependency: redis
    return Retry(NoBackoff(), 0)


def wait_for_redis(client: Any, *, timeout_s: float = REDIS_WAIT_S, stop: Any = None,
                   log: Callable[[str], None] = lambda _: None) -> bool:
    """Ping ``client`` until Redis answers (and has loaded its data), at most ``timeout_s``.

    Returns False if it did not answer in time or ``stop`` (an Event) was set meanwhile.
    """
    # optional dependency: redis (node_service imports this module whether or not a node has REDIS_URL)
    from redis.exceptions import ConnectionError as RedisConnectionError  # optional dependency: redis
    from redis.exceptions import ResponseError  # optional dependency: redis
    from redis.exceptions import TimeoutError as RedisTimeoutError  # optional dependency: redis

    deadline = time.monotonic() + timeout_s
    delay, told = 0.05, 0.0
    while time.monotonic() < deadline:
        if stop is not None and stop.is_set():
            return False
        try:
            if client.ping():
                return True
        except (RedisConnectionError, RedisTimeoutError, ResponseError):
            pass
        waited = timeout_s - (deadline - time.monotonic())
        if waited - told >= 10.0:
            told = waited
            log(f"still waiting for Redis ({waited:.0f} s of at most {timeout_s:.0f} s)")
        time.sleep(delay)
        delay = min(1.0, delay * 2)
    return False
