"""A window store kept in Redis: the cluster mode's :class:`~joinlib.state.base.WindowStore`.

Behaves exactly like :class:`~joinlib.state.memory.MemoryWindowStore` (the conformance
suite ``tests/conformance/test_window_store.py`` checks it), but all state is in Redis, so
a new store on the same prefix (a restarted node) sees the same tuples and indexes.  The
process keeps only two caches that cannot go stale: a memo key -> key name (a pure
function) and a bounded content-addressed one, blob -> decoded ``Tup`` (a blob is the
whole tuple, so equal blobs are equal tuples; it saves ~90% of decoding, as a tuple is
returned by every lookup of its key while it is in the window).

:class:`MirroredRedisWindowStore` is the same store plus a write-through copy in memory that serves every
read, so Redis holds the durable windows (for restart recovery) while probes run at memory speed. Node
services use neither any more: :func:`redis_store_factory` makes a
:class:`~joinlib.adapters.redis_blocks.RedisBlockStore` by default (memory plus a log of whole epoch blocks in
Redis, written behind and flushed before each checkpoint: 1.1-1.8x the memory store's CPU where these two take
4-20x, plus as much again in Redis; docs/results.md "Redis window store"). These two stay for the conformance
suite's reference of a store that keeps every read in Redis, for comparison (``bench/redis_store_bench.py``)
and for ``kind="mirror"`` / ``kind="redis"``.

Every operation is ONE round trip: a Lua script (:mod:`joinlib.adapters.redis_lua`; ``register_script`` ->
EVALSHA, reloaded on NOSCRIPT) for insert / purge / remove_oldest / add_index / first_seq_at_or_after, a
pipeline of plain commands (no Lua: tuples never pass through the script engine on the
hot read path) for lookup_many, one command for ``len`` and :meth:`tuples`.

Key layout (``B`` is the store's base, ``{ns/site}/rest`` for stores made by
:func:`redis_store_factory`; the ``{...}`` hash tag puts all the keys of a node in one
cluster slot, which the scripts need):

* ``B:s`` sorted set of blobs scored by seq: every stored tuple, in stream order.
  ``blob`` = ``marshal((pos, id, ts, seq, key, rest))`` ++ ``comps`` ++ ``seq`` (8 bytes
  BE) ++ ``ts`` (8 bytes BE) ++ ``len(comps)`` (4 bytes BE).  ``marshal.loads`` ignores
  the trailer; the scripts read seq, ts and ``comps`` from it.
* ``B:x`` set of index specs (``"0"``, ``"0,2"``: positions in ``Tup.key``).
* ``B:i:<spec>:<name>`` sorted set of the same blobs scored by seq, one per (index, key
  value) present; Redis drops it when its last member goes.  ``<name>`` is the key's
  canonical components joined by ``0x1f``: ``repr`` for str (it escapes control
  characters, so ``0x1f`` never occurs inside one), decimal for int, bool and integral
  floats (they compare equal in Python, so they must find the same tuples), ``repr`` for
  other floats, ``N`` for None.  ``comps`` in the blob is that of the whole ``Tup.key``, so
  the scripts derive any index's name from it (also for an index added later).

A tuple is stored 1 + (number of indexes) times: a lookup is then a plain ``ZRANGE`` per
key (C only) instead of a script that gathers blobs from a hash (measured 3-5x slower on
the server).  Duplicates are detected by seq (in-order batches skip the check).

Tuples must have ``ts`` non-decreasing in ``seq`` (true of every stream: seq is the rank
in (ts, id) order); ``purge_below(ts=...)`` and :meth:`first_seq_at_or_after` bisect on it,
as the memory store does.

The blob uses :mod:`marshal` (format 4, stable since Python 3.4; its C decoder is 1.5-2x
faster than struct + orjson): every process sharing a Redis must run CPython >= 3.4.
"""
from __future__ import annotations

import marshal
import struct
import weakref
from typing import Any, Iterable, Optional, Sequence, cast

from redis.exceptions import ResponseError

from joinlib.adapters import redis_lua as lua
from joinlib.adapters.redis_blocks import MemoryReads, RedisBlockStore, flush_stores
from joinlib.adapters.redis_client import (
    clear_namespace,
    glob_escape,
    index_spec,
    redis_client,
    require_bytes_client,
    store_prefix,
    tagged_base,
    unlink_matching,
)
from joinlib.model import Tup
from joinlib.state.base import Index, KeyList
from joinlib.state.memory import MemoryWindowStore

__all__ = ["RedisWindowStore", "MirroredRedisWindowStore", "RedisBlockStore", "RedisStoreFactory",
           "redis_store_factory", "canonical_key"]

_TRAILER = struct.Struct(">qqI")   # seq, ts, len(comps)
_SEP = b"\x1f"
_MEMO_MAX = 1 << 16


# --------------------------------------------------------------------------- encoding

def _canon(v) -> bytes:
    t = type(v)
    if t is str:
        return repr(v).encode("utf-8")
    if t is int or t is bool:
        return b"%d" % v
    if t is float:
        return b"%d" % v if v.is_integer() else repr(v).encode()
    if v is None:
        return b"N"
    if isinstance(v, str):
        return repr(str(v)).encode("utf-8")
    if isinstance(v, (int, float)):
        return _canon(float(v) if isinstance(v, float) else int(v))
    return repr(v).encode("utf-8", "backslashreplace")


def canonical_key(key: tuple) -> bytes:
    """The name component of a key: equal keys (1 == 1.0 == True) give equal bytes."""
    return _SEP.join([_canon(v) for v in key])


def _blob(t: Tup, comps: bytes) -> bytes:
    return (marshal.dumps((t.pos, t.id, t.ts, t.seq, t.key, t.rest))
            + comps + _TRAILER.pack(t.seq, t.ts, len(comps)))


def _keylist(tups: list[Tup]) -> KeyList:
    kl = KeyList()
    kl.tups = tups
    kl.ts = [t.ts for t in tups]
    kl.seq = [t.seq for t in tups]
    return kl


def _bound(x) -> str:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise TypeError(f"purge bound must be a number, not {x!r}")
    return str(x) if isinstance(x, int) else repr(float(x))


# --------------------------------------------------------------------------- the store

class RedisWindowStore:
    """The tuples of one stream kept under ``prefix`` in Redis (see the module docstring).

    ``client`` is a ``redis.Redis`` (or ``RedisCluster``) returning bytes
    (``decode_responses=False``).  ``prefix`` gets wrapped in a hash tag ``{prefix}``
    unless it already contains one.  ``cache_size`` bounds the blob -> Tup cache (entries;
    it is emptied when full, and purged tuples leave it).
    """

    def __init__(self, client, prefix: str, *, cache_size: int = 1 << 16) -> None:
        require_bytes_client(client, "RedisWindowStore")
        self.client = client
        self.prefix = prefix
        self.base = base = tagged_base(prefix)
        self._ks, self._kx = base + ":s", base + ":x"
        self._keys2 = [self._ks, self._kx]
        self._base_arg = base.encode("utf-8")
        self._names: dict[tuple, bytes] = {}  # key -> canonical components (a pure function)
        self._cache: dict[bytes, Tup] = {}    # blob -> its Tup (content-addressed: never stale)
        self._cache_size = cache_size
        reg = client.register_script
        self._insert = reg(lua.INSERT)
        self._purge = reg(lua.PURGE)
        self._remove = reg(lua.REMOVE_OLDEST)
        self._add_index = reg(lua.ADD_INDEX)
        self._first = reg(lua.FIRST)

    def __repr__(self) -> str:
        return f"RedisWindowStore({self.base!r})"

    # ------------------------------------------------------------------ helpers
    def _comps(self, key: tuple) -> bytes:
        memo = self._names
        c = memo.get(key)
        if c is None:
            c = canonical_key(key)
            if len(memo) >= _MEMO_MAX:
                memo.clear()
            memo[key] = c
        return c

    def _decode(self, blobs: list) -> list[Tup]:
        """Tups of blobs, decoding each distinct blob once while it stays in the cache."""
        cache = self._cache
        if len(cache) + len(blobs) > self._cache_size:
            cache.clear()
        get, loads = cache.get, marshal.loads
        out = [get(b) for b in blobs]
        for i, t in enumerate(out):
            if t is None:
                b = blobs[i]
                t = out[i] = cache[b] = Tup(*loads(b))
        return cast(list[Tup], out)  # every None (a cache miss) was replaced just above

    def _forget(self, blobs: list) -> None:
        pop = self._cache.pop
        for b in blobs:
            pop(b, None)

    # ------------------------------------------------------------------ protocol
    def add_index(self, index: Index) -> None:
        self._add_index(keys=self._keys2, args=[self._base_arg, index_spec(index)])

    def insert(self, tups: Sequence[Tup]) -> None:
        if not tups:
            return
        comps = self._comps
        self._insert(keys=self._keys2, args=[self._base_arg] + [_blob(t, comps(t.key)) for t in tups])

    def lookup(self, index: Index, key: tuple) -> Optional[KeyList]:
        return self.lookup_many(index, (key,)).get(key)

    def lookup_many(self, index: Index, keys: Iterable[tuple]) -> dict[tuple, KeyList]:
        keys = list(keys)
        if not keys:
            return {}
        spec = index_spec(index)
        head = (self.base + ":i:" + spec + ":").encode("utf-8")
        comps = self._comps
        names = [head + comps(k) for k in keys]
        slot: dict[bytes, int] = {}
        pipe = self.client.pipeline(transaction=False)
        pipe.execute_command("SISMEMBER", self._kx, spec)
        for n in names:
            if n not in slot:
                slot[n] = len(slot)
                pipe.execute_command("ZRANGE", n, 0, -1)
        res = pipe.execute()
        if not res[0]:
            raise KeyError(index)
        decode = self._decode
        kls = [_keylist(decode(bs)) if bs else None for bs in res[1:]]
        out: dict[tuple, KeyList] = {}
        for k, n in zip(keys, names, strict=False):  # one name per key by construction
            kl = kls[slot[n]]
            if kl is not None and k not in out:
                out[k] = kl
        return out

    @staticmethod
    def _purge_args(ts, seq) -> list:
        if ts is not None:
            return ["ts", _bound(ts)]
        if seq is not None:
            return ["seq", _bound(seq)]
        raise TypeError("purge_below needs ts or seq")

    def purge_count(self, *, ts: Optional[int] = None, seq: Optional[int] = None) -> int:
        """:meth:`purge_below` without sending the purged tuples back: how many went."""
        return int(self._purge(keys=self._keys2, args=[self._base_arg, *self._purge_args(ts, seq), "n"]))

    def purge_below(self, *, ts: Optional[int] = None, seq: Optional[int] = None) -> list[Tup]:
        blobs = self._purge(keys=self._keys2, args=[self._base_arg, *self._purge_args(ts, seq)])
        if not blobs:
            return []
        gone = self._decode(blobs)
        self._forget(blobs)
        return gone

    def remove_oldest(self, tups: Sequence[Tup]) -> None:
        if not tups:
            return
        try:
            gone = self._remove(keys=self._keys2, args=[self._base_arg] + [str(int(t.seq)) for t in tups])
        except ResponseError as e:
            msg = str(e)
            if msg.startswith("NOTOLDEST"):
                raise AssertionError(f"remove_oldest: not the oldest tuple of its key: "
                                     f"{tups[int(msg.split()[1])]!r}") from None
            if msg.startswith("NOTSTORED"):
                raise KeyError(tups[int(msg.split()[1])]) from None
            raise
        self._forget(gone)

    def first_seq_at_or_after(self, ts: int) -> Optional[int]:
        b = self._first(keys=self._keys2, args=[_bound(ts)])
        return None if b is None else _TRAILER.unpack_from(b, len(b) - _TRAILER.size)[0]

    def tuples(self) -> list[Tup]:
        """All stored tuples in seq order (tests, metrics)."""
        return self._decode(self.client.zrange(self._ks, 0, -1))

    def indexes(self) -> set[Index]:
        """The indexes maintained under this prefix."""
        return {tuple(int(p) for p in s.split(b",") if p) for s in self.client.smembers(self._kx)}

    def __len__(self) -> int:
        return int(self.client.zcard(self._ks))

    def clear(self) -> int:
        """Delete every key of this store; return how many."""
        return unlink_matching(self.client, [glob_escape(self.base) + ":*"])

    def snapshot(self) -> list[Tup]:
        return self.tuples()

    def load(self, tuples: Sequence[Tup]) -> None:
        """Replace the content by ``tuples``, keeping the indexes (a few round trips)."""
        indexes = self.indexes()
        self.clear()
        for index in sorted(indexes):
            self.add_index(index)
        self.insert(sorted(tuples, key=lambda t: t.seq))


class MirroredRedisWindowStore(MemoryReads):
    """A :class:`RedisWindowStore` with a write-through copy in process memory: every change goes
    to Redis (one round trip, as before) and to a :class:`MemoryWindowStore`; every read is served
    from memory.  Redis stays the durable copy -- a new handle on the prefix (a restarted node,
    after its checkpoint rolled the keys back) loads the tuples and indexes from it -- but probes
    no longer pull each matching tuple's bytes out of Redis, which capped a node at ~1.2k input
    tuples/s on the Fig. 7 workload (88 matches of 1.25 kB per probe).

    Requires a single writer per prefix: one node owns its stores (the node service's case).
    Redis is changed first, so its errors (not the oldest, not stored) leave both copies as they were.
    """

    def __init__(self, client, prefix: str, **kw) -> None:
        self.redis = RedisWindowStore(client, prefix, **kw)
        self.prefix, self.base = self.redis.prefix, self.redis.base
        self.mem = MemoryWindowStore()
        for index in sorted(self.redis.indexes()):
            self.mem.add_index(index)
        self.mem.insert(self.redis.tuples())

    def __repr__(self) -> str:
        return f"MirroredRedisWindowStore({self.base!r})"

    def add_index(self, index: Index) -> None:
        self.redis.add_index(index)
        self.mem.add_index(index)

    def insert(self, tups: Sequence[Tup]) -> None:
        self.redis.insert(tups)
        self.mem.insert(tups)

    def purge_below(self, *, ts: Optional[int] = None, seq: Optional[int] = None) -> list[Tup]:
        n = self.redis.purge_count(ts=ts, seq=seq)
        gone = self.mem.purge_below(ts=ts, seq=seq)
        if n != len(gone):  # pragma: no cover - another writer on the prefix
            raise RuntimeError(f"{self.base}: Redis purged {n} tuples, the memory copy {len(gone)}: "
                               "two writers on one store?")
        return gone

    def remove_oldest(self, tups: Sequence[Tup]) -> None:
        self.redis.remove_oldest(tups)
        self.mem.remove_oldest(tups)

    def clear(self) -> int:
        self.mem = MemoryWindowStore()
        return self.redis.clear()

    def load(self, tuples: Sequence[Tup]) -> None:
        self.redis.load(tuples)
        self.mem.load(tuples)


# --------------------------------------------------------------------------- factory

class RedisStoreFactory:
    """``store_factory`` for :class:`joinlib.runtime.host.Host`: name -> a store under the namespace, of
    ``kind`` ``"blocks"`` (:class:`~joinlib.adapters.redis_blocks.RedisBlockStore`: memory plus a log of
    blocks written behind; the default, what node services use), ``"mirror"``
    (:class:`MirroredRedisWindowStore`) or ``"redis"`` (:class:`RedisWindowStore`: every read from Redis).

    :meth:`flush` sends every block store's pending changes in one transaction: a node calls it before each
    checkpoint copies its keys (the other kinds write through: nothing to flush)."""

    KINDS = ("blocks", "mirror", "redis")

    def __init__(self, client, namespace: str, *, kind: str = "blocks") -> None:
        if not namespace or "{" in namespace or "}" in namespace:
            raise ValueError(f"bad Redis namespace {namespace!r} (non-empty, no braces)")
        if kind not in self.KINDS:
            raise ValueError(f"bad Redis store kind {kind!r} (one of {', '.join(self.KINDS)})")
        self.client = client
        self.namespace = namespace
        self.kind = kind
        classes: dict[str, type] = {"blocks": RedisBlockStore, "mirror": MirroredRedisWindowStore,
                                    "redis": RedisWindowStore}
        self.cls = classes[kind]
        self._blocks: weakref.WeakSet[RedisBlockStore] = weakref.WeakSet()  # what flush() flushes
        # the run's claim of its stores (joinlib.adapters.redis_fence), set before it makes any: block stores
        # flush only while it holds; the write-through kinds are not fenced (node services use blocks)
        self.fence: Any = None

    def __call__(self, name: str):
        store = self.cls(self.client, store_prefix(self.namespace, name))
        if isinstance(store, RedisBlockStore):
            store.fence = self.fence
            if self.fence is not None:   # a fenced run takes checkpoints (joinlib.node.recovery): they flush it
                store.flush_when_asked()
            self._blocks.add(store)
        return store

    def flush(self) -> int:
        """Make Redis hold the current state of every block store made (one MULTI/EXEC); returns how many
        had changes.  Raises on a Redis error (the changes are kept for the next flush)."""
        return flush_stores(self.client, list(self._blocks))

    def clear(self) -> int:
        return clear_namespace(self.client, self.namespace)

    def close(self) -> None:
        self.client.close()


def redis_store_factory(url: str, namespace: str, *, kind: str = "blocks", **client_kwargs) -> RedisStoreFactory:
    """A ``store_factory`` keeping every store of the run under ``namespace`` on ``url`` (``kind``: see
    :class:`RedisStoreFactory`).

    The stores keep what an earlier run under the same namespace left (a restarted node
    recovers its windows); call :func:`clear_namespace` first for a fresh run.
    """
    client_kwargs.setdefault("decode_responses", False)
    return RedisStoreFactory(redis_client(url, **client_kwargs), namespace, kind=kind)
