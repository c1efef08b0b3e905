"""Node checkpoints in Redis, atomic with a snapshot of the node's window stores.

A node's stores live under one hash tag ``{namespace/site}`` (``redis_client.store_prefix``):
``{ns/site}/home/S1:s``, ``{ns/site}/SP-S/S2/3:i:...``.  :meth:`RedisCheckpoints.save` runs
one Lua script that copies every such key to ``{ns/site}#/...`` (server-side ``COPY``,
dropping the previous copies) and stores the checkpoint bytes at ``{ns/site}#meta``; Redis
runs a script atomically, so the copies and the bytes always belong to the same instant.
A checkpoint may also publish a small value for other runs to read at ``{ns/site}#published`` in the same
script (a shared MJoin operator's derived-topic marks, :mod:`joinlib.mjoin.marks`; :func:`published`).
:meth:`RedisCheckpoints.load` puts the copies back in place of the live keys (which may hold
work done after the checkpoint) and returns the bytes, or None if there is no checkpoint.

Why copies: the live windows keep changing between checkpoints (inserts, purges, expiries),
and a purge is not undone by replaying the inputs; a restarted node must see its windows as
they were when its other state was saved.  The cost is O(window size) inside Redis per
checkpoint (no data crosses the network) plus a ``KEYS`` scan of the node's tag: meant for a
Redis dedicated to joinlib, checkpoints every second or so.
"""
from __future__ import annotations

from typing import Optional

from joinlib.adapters.redis_client import glob_escape, unlink_matching
from joinlib.adapters.redis_fence import FENCED_REPLY, RedisFence

_SAVE = r"""
local tag = KEYS[1]
local n = #tag
if ARGV[4] ~= '' then
  local owner = redis.call('GET', tag .. '#owner')
  if owner ~= ARGV[4] then return redis.error_reply('FENCED ' .. tostring(owner)) end
end
for _, k in ipairs(redis.call('KEYS', ARGV[2])) do redis.call('UNLINK', k) end
local live = redis.call('KEYS', ARGV[1])
for _, k in ipairs(live) do
  redis.call('COPY', k, tag .. '#' .. string.sub(k, n + 1), 'REPLACE')
end
redis.call('SET', tag .. '#meta', ARGV[3])
if ARGV[5] ~= '' then redis.call('SET', tag .. '#published', ARGV[5]) end
return #live
"""

_LOAD = r"""
local tag = KEYS[1]
local n = #tag
local blob = redis.call('GET', tag .. '#meta')
if not blob then return false end
for _, k in ipairs(redis.call('KEYS', ARGV[1])) do redis.call('UNLINK', k) end
for _, k in ipairs(redis.call('KEYS', ARGV[2])) do
  redis.call('COPY', k, tag .. string.sub(k, n + 2), 'REPLACE')
end
return blob
"""


def checkpoint_tag(namespace: str, site: str) -> str:
    """The hash tag of the stores and checkpoints of the node at ``site`` under ``namespace``."""
    return "{" + namespace + "/" + site + "}"


def published(client, namespace: str, site: str) -> Optional[bytes]:
    """What the last checkpoint of the node at ``site`` under ``namespace`` published for other runs (None:
    nothing, or no checkpoint yet)."""
    value = client.get(checkpoint_tag(namespace, site) + "#published")
    return bytes(value) if value is not None else None


class RedisCheckpoints:
    """Checkpoints of the node at ``site`` whose stores are under ``namespace`` (the
    namespace given to ``redis_store.redis_store_factory``)."""

    def __init__(self, client, namespace: str, site: str) -> None:
        self.client = client
        self.tag = checkpoint_tag(namespace, site)
        self.fence = RedisFence(client, self.tag)   # claimed by the run that saves (joinlib.adapters.redis_fence)
        esc = glob_escape(self.tag)
        self._live, self._snap = esc + "/*", esc + "#/*"
        self._save = client.register_script(_SAVE)
        self._load = client.register_script(_LOAD)

    def save(self, data: bytes, publish: Optional[bytes] = None) -> int:
        """Snapshot the stores and keep ``data`` with them (and ``publish``, if given, where :func:`published`
        reads it); returns the number of keys copied.  Once :attr:`fence` is claimed, only while no other
        instance claimed the work since (else :class:`~joinlib.errors.FencedError`, nothing written)."""
        from redis.exceptions import ResponseError  # optional dependency: redis (adapters only)
        args = [self._live, self._snap, data, self.fence.arg(), publish or b""]
        try:
            return int(self._save(keys=[self.tag], args=args))
        except ResponseError as e:
            if not str(e).startswith(FENCED_REPLY):
                raise
            current = str(e).split(" ", 1)[1] if " " in str(e) else None
            raise self.fence.refuse(None if current in (None, "false") else current, "checkpoint save") from None

    def load(self) -> Optional[bytes]:
        """Roll the stores back to the last :meth:`save` and return its data (None: no checkpoint)."""
        blob = self._load(keys=[self.tag], args=[self._live, self._snap])
        return blob or None

    def reset(self) -> int:
        """Delete the live stores (a node starting afresh); returns how many keys."""
        return unlink_matching(self.client, [self._live])

    def clear(self) -> int:
        """Drop the checkpoint, its copies, what it published and the owner epoch (not the live stores): the work
        is done; an instance still running it finds no owner key and stays fenced."""
        return unlink_matching(self.client, [self._snap]) + int(
            self.client.unlink(self.tag + "#meta", self.tag + "#published", self.fence.key))
