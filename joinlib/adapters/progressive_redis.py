"""Spill progressive joins to Redis: a page backend for ``joinlib.progressive.runs.PagedRunStore``.

It stores opaque page blobs only (the core encodes and checks tuples), under one prefix
(``clear()`` removes every key):

* ``<prefix>:run:<id>``          - a Redis list, one page per element, appended with RPUSH in
  batches as the run is written, read back with LRANGE a few pages at a time;
* ``<prefix>:runs:<rel>:<part>`` - sorted set of the committed run ids of R_rel^disk[part];
* ``<prefix>:size``              - hash run id -> tuples;  ``<prefix>:next`` - the id counter.

A run becomes visible only at commit (ZADD after its pages are in), so an aborted or
crashed writer leaves no half run in any listing.
"""
from __future__ import annotations

from collections.abc import Iterator

import redis

from joinlib.adapters.redis_client import redis_client
from joinlib.errors import ClusterError
from joinlib.settings import redact_url

READ_PAGES = 32


class RedisPages:
    """Runs as Redis lists of pages under ``prefix`` (see the module docstring)."""

    def __init__(self, client: redis.Redis, prefix: str) -> None:
        self.client = client
        self.prefix = prefix
        self._open: dict[int, tuple[int, int]] = {}

    def key(self, suffix: str) -> str:
        return f"{self.prefix}:{suffix}"

    def create(self, rel: int, part: int) -> int:
        run = int(self.client.incr(self.key("next")))
        self._open[run] = (rel, part)
        return run

    def append(self, run: int, pages: list[bytes]) -> None:
        if pages:
            self.client.rpush(self.key(f"run:{run}"), *pages)

    def commit(self, run: int, tuples: int) -> None:
        rel, part = self._open.pop(run)
        pipe = self.client.pipeline(transaction=True)
        pipe.hset(self.key("size"), str(run), tuples)
        pipe.zadd(self.key(f"runs:{rel}:{part}"), {str(run): run})
        pipe.execute()

    def discard(self, run: int) -> None:
        self._open.pop(run, None)
        self.client.delete(self.key(f"run:{run}"))

    def _check(self, rel: int, part: int, run: int) -> None:
        if self.client.zscore(self.key(f"runs:{rel}:{part}"), str(run)) is None:
            raise KeyError(f"no run {run} in relation {rel} partition {part}")

    def pages(self, rel: int, part: int, run: int) -> Iterator[bytes]:
        self._check(rel, part, run)
        key = self.key(f"run:{run}")

        def chunks() -> Iterator[bytes]:
            start = 0
            while True:
                chunk: list[bytes] = self.client.lrange(key, start, start + READ_PAGES - 1)  # type: ignore[assignment]
                yield from chunk
                if len(chunk) < READ_PAGES:
                    return
                start += READ_PAGES
        return chunks()

    def runs(self, rel: int, part: int) -> list[int]:
        members: list[bytes] = self.client.zrange(self.key(f"runs:{rel}:{part}"), 0, -1)  # type: ignore[assignment]
        return [int(m) for m in members]

    def size(self, rel: int, part: int, run: int) -> int:
        self._check(rel, part, run)
        return int(self.client.hget(self.key("size"), str(run)) or 0)

    def delete(self, rel: int, part: int, run: int) -> None:
        self._check(rel, part, run)
        pipe = self.client.pipeline(transaction=True)
        pipe.zrem(self.key(f"runs:{rel}:{part}"), str(run))
        pipe.hdel(self.key("size"), str(run))
        pipe.delete(self.key(f"run:{run}"))
        pipe.execute()

    def clear(self) -> None:
        keys = list(self.client.scan_iter(match=f"{self.prefix}:*", count=1000))
        for i in range(0, len(keys), 500):
            self.client.delete(*keys[i:i + 500])

    def close(self) -> None:
        self.client.close()


def open_redis_pages(url: str, prefix: str) -> RedisPages:
    """Connect to (and ping) ``url``; a :class:`~joinlib.errors.ClusterError` if Redis does not answer."""
    try:
        client = redis_client(url, socket_connect_timeout=5, socket_timeout=30)
        client.ping()
    except (redis.RedisError, ValueError) as e:
        raise ClusterError(f"--spill {redact_url(url)}: Redis does not answer ({e}); start one (make up) "
                           "or use --spill file:DIR") from None
    return RedisPages(client, prefix)
