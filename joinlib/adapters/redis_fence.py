"""Generation fencing of a node's run in Redis: an owner epoch per unit of work, checked atomically with its writes.

A unit of work -- one site's part of a run (``{joinlib:<query>:<run>[:p<part>]/<site>}``, the tag of its window
stores and checkpoints) -- may be run by another process than the one that started it: a scale-out partition
moves when its instance's group session expires, a node restarted after a crash takes over its run.  The old
process may still be alive (paused: SIGSTOP, a long GC or swap, a network partition from the broker but not from
Redis) and carry on where it was once it runs again.  Without a fence it would then overwrite the new owner's
checkpoint with an older state and write its window blocks into the keys the new owner uses.

So every run *claims* the unit when it starts: ``INCR {tag}#owner`` gives it an epoch higher than every earlier
owner's.  Then

* a checkpoint save (:mod:`joinlib.adapters.redis_checkpoint`) runs in one Lua script that first compares
  ``{tag}#owner`` with the saver's epoch and refuses (``FENCED``) if another owner claimed since;
* the window stores' write-behind flushes (:func:`joinlib.adapters.redis_blocks.flush_stores`) are a
  ``WATCH {tag}#owner`` / ``MULTI`` / ``EXEC`` transaction after a check of the epoch: a claim in between makes
  the ``EXEC`` fail;
* the run's loop checks the epoch before each round of work that produces messages (:meth:`RedisFence.check`).

A refusal is a :class:`~joinlib.errors.FencedError`: the run drops what its producer still queues and ends
without a checkpoint and without ``done``.  What Redis cannot stop: messages the old owner had already handed to
its Kafka producer before it was paused are sent when it runs again; their receivers drop them as copies (flows:
``Host.taken``; result batches: by their number, :mod:`joinlib.node.recovery`).  docs/reliability.md says more.
"""
from __future__ import annotations

import math
import time
from typing import Any, Callable, Optional

from joinlib.errors import FencedError

__all__ = ["RedisFence", "FENCED_REPLY"]

#: how old the last owner check may be before a producing round checks again (:meth:`RedisFence.check_often`)
CHECK_EVERY_S = 0.05

#: the prefix of a script's error reply when the saver is not the owner any more
FENCED_REPLY = "FENCED"


class RedisFence:
    """The owner epoch of the unit of work whose keys share the hash tag ``tag`` (``{ns/site}``); ``epoch`` is
    None until :meth:`claim` (then nothing is checked: a store used outside a node run)."""

    def __init__(self, client: Any, tag: str) -> None:
        self.client, self.tag = client, tag
        self.key = tag + "#owner"
        self.epoch: Optional[int] = None
        self._checked = -math.inf   # monotonic time of the last check

    def claim(self) -> int:
        """Become the owner: every earlier owner's writes are refused from now on."""
        self.epoch = int(self.client.incr(self.key))
        return self.epoch

    def arg(self) -> str:
        """The epoch as a script argument (``""``: not claimed, no check)."""
        return "" if self.epoch is None else str(self.epoch)

    def refuse(self, current: Any, what: str) -> FencedError:
        now = "none (the run was cleared)" if current is None else int(current)
        return FencedError(f"{self.tag}: {what} refused: this instance owned the work at epoch {self.epoch}, "
                           f"another instance took it over (owner epoch now {now})")

    def verify(self, current: Any, what: str) -> None:
        """Raise :class:`FencedError` unless ``current`` (the owner key's value) is our epoch."""
        if self.epoch is not None and (current is None or int(current) != self.epoch):
            raise self.refuse(current, what)

    def check(self, what: str = "writing") -> None:
        """One GET: raise :class:`FencedError` if another instance claimed the work."""
        if self.epoch is not None:
            self.verify(self.client.get(self.key), what)
            self._checked = time.monotonic()

    def check_often(self, what: str = "writing", every_s: float = CHECK_EVERY_S) -> None:
        """:meth:`check`, unless the last check is less than ``every_s`` old: a node's loop runs many rounds a
        second, and a GET per round cost a Redis round trip each.  A zombie is caught all the same: one paused
        past its session finds its last check old when it wakes up, and every checkpoint and window flush is
        checked atomically whatever the time (the gap that remains is the one docs/reliability.md names)."""
        if self.epoch is not None and time.monotonic() - self._checked >= every_s:
            self.check(what)

    def transaction(self, queue: Callable[[Any], None], what: str = "window flush") -> None:
        """Run the commands ``queue`` puts into a MULTI/EXEC pipeline only while we are the owner: WATCH the
        owner key, check it, then EXEC (which fails if a claim came in between)."""
        from redis.exceptions import WatchError  # optional dependency: redis (adapters only)
        with self.client.pipeline(transaction=True) as pipe:
            if self.epoch is not None:
                pipe.watch(self.key)
                self.verify(pipe.get(self.key), what)
                pipe.multi()
            queue(pipe)
            try:
                pipe.execute()
            except WatchError:
                raise self.refuse(self.client.get(self.key), what) from None
