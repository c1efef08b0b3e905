"""A window store in memory whose durable copy in Redis is a log of epoch blocks: what node services use.

Why: the node reads its windows back from Redis only when it restarts (it rolls them back to its last
checkpoint, :mod:`joinlib.adapters.redis_checkpoint`); every probe is served from memory.  So Redis needs
the window *as of each checkpoint*, not a per-tuple index kept current on every insert.  The older stores
(:class:`~joinlib.adapters.redis_store.RedisWindowStore`, :class:`~joinlib.adapters.redis_store.
MirroredRedisWindowStore`) run a Lua script per insert / purge with a ZADD per tuple per index: 7x (batches
of 30) to 4x (300) the memory store's CPU in the client and as much again in Redis.  This one costs
1.1x (batches of 300) to 1.4-1.8x (30) the memory store's client CPU and almost nothing in Redis
(``bench/redis_store_bench.py``, docs/results.md "Redis window store").

:class:`RedisBlockStore` = a :class:`~joinlib.state.memory.MemoryWindowStore` (serves every read, decides
every result) + a log of *records* kept in one Redis hash, ``B:d`` (record id -> bytes):

* ``insert(tups)``  -> one insert record: the batch (an epoch's block of one stream), encoded as a whole;
* ``purge_below``   -> one purge record ``("ts" | "seq", bound)``, only when it removed something and a
  live block may still hold a removed tuple (otherwise the deleted blocks say it all);
* ``remove_oldest`` -> one remove record (the seqs), on the same condition.

Replaying the records in id order through a memory store gives exactly the window in memory (the records are
its operations, and a memory store decides what each does). Records that no longer change the outcome are
deleted: an insert record once none of its seqs is stored any more (every seq is below the oldest stored one:
a whole expired block), a purge / remove record once no older insert record is left, and a purge record once a
later one of its kind has a bound at least as high. Replay drops what a partially expired block holds below
its purge bound. When dead weight piles up anyway (a block kept by one long-lived tuple, out-of-order batches)
the log is *compacted*: one insert record of the live window replaces every record. Tuples with the same seq
are the same tuple (a stream's rank), so dropping one copy of a duplicated seq changes nothing.

**Written behind.**  Records are not sent when made: :meth:`RedisBlockStore.flush` sends what changed
since the last flush in one ``MULTI``/``EXEC`` transaction (``SADD`` of new indexes, ``HSET`` of new
records, ``HDEL`` of dead ones), so Redis holds the state of one flush or of the next, never a mix; records
that die before a flush are never sent at all (in a sliding window, blocks younger than the flush interval
that expired, and most purge records).  :class:`~joinlib.adapters.redis_store.RedisStoreFactory` flushes
every store of a node in one round trip, and the node flushes it before each checkpoint saves the keys
(:class:`joinlib.node.recovery.NodeCheckpoints`).  A store flushes by itself when ``flush_records``
records are waiting (bounded memory for a node without checkpoints), and at its next change once a record
has waited ``flush_after_s`` (1 s): a node that takes no checkpoints (a live adaptive run) still keeps its
windows in Redis, at most about a second behind, for one round trip a second.  Redis errors therefore
surface at a flush, where a node's outage handling (:mod:`joinlib.adapters.redis_outage`) restarts it from
its checkpoint as before.  A new handle on the prefix (a restarted node) sees the state of the last flush.
A store of a run with checkpoints (a fenced one, :class:`~joinlib.adapters.redis_store.RedisStoreFactory`)
never flushes by itself: its checkpoints flush it, and a restart rolls its live keys back to the last
checkpoint's copies anyway (its waiting records stay bounded by the window: a record that dies before a
flush is dropped at once).

Keys (``B`` as for the other stores, ``{ns/site}/rest`` under :func:`~joinlib.adapters.redis_store.
redis_store_factory`): ``B:d`` the records, ``B:x`` the set of index specs (``"0"``, ``"0,2"``).  A
record is a tag byte and its body: ``A`` + an Avro array of ``joinlib.BaseTuple`` (the block's tuples'
cached wire bytes, :mod:`joinlib.protocol.avro`: tuples decoded from Kafka have them, so encoding is a
join), ``M`` + :mod:`marshal` of ``[(pos, id, ts, seq, key, rest), ...]`` (a block with a tuple never
encoded: marshal costs a fifth of encoding it in Avro), ``P`` + marshal of ``("ts" | "seq", bound)``,
``R`` + marshal of ``[seq, ...]``; every process sharing a Redis must run CPython >= 3.4.
The older layout (``B:s``, ``B:i:...``) under the same prefix is refused, not misread.

A checkpoint copies ``B:d`` and ``B:x`` inside Redis (a few hundred hash fields per store instead of a
sorted set per index key): the list of live record ids is the hash's fields.

Requires a single writer per prefix: one node owns its stores (the node service's case).
"""
from __future__ import annotations

import heapq
import marshal
import sys
import time
from collections import deque
from operator import attrgetter
from typing import Any, Iterable, Optional, Sequence

from joinlib.adapters.redis_client import glob_escape, index_spec, require_bytes_client, tagged_base, unlink_matching
from joinlib.model import Tup
from joinlib.protocol.avro import END, decode_tuple_list, encode_long
from joinlib.state.base import Index, Key, KeyList
from joinlib.state.memory import MemoryWindowStore

__all__ = ["RedisBlockStore", "MemoryReads", "flush_stores"]

_INSERT, _PURGE, _REMOVE = 0, 1, 2
FLUSH_RECORDS = 1024   # records waiting that make a store flush by itself
FLUSH_AFTER_S = 1.0    # how long a record may wait before the store's next change flushes it
_HSET_FIELDS = 256     # record ids per HSET / HDEL command of a flush
_MIN_DEAD = 4096       # dead tuples in the log tolerated before compacting, whatever the window's size
_MIN_OTHERS = 64       # purge / remove records tolerated before compacting, whatever the number of blocks

Record = tuple[int, Any]   # (kind, body): a list of Tups for an insert record until it is encoded


_wire = attrgetter("wire")


def _encode(rec: Record) -> bytes:
    kind, body = rec
    if kind == _INSERT:
        try:   # tuples decoded from Kafka (sources, replicas) keep their Avro bytes: a block is then a join
            return b"".join([b"A", encode_long(len(body)), *map(_wire, body), END])
        except TypeError:   # some tuple never encoded: marshal is 5x cheaper than encoding it in Avro here
            return b"M" + marshal.dumps([(t.pos, t.id, t.ts, t.seq, t.key, t.rest) for t in body])
    return (b"P" if kind == _PURGE else b"R") + marshal.dumps(body)


def _decode(data: bytes) -> Record:
    tag, rest = data[:1], data[1:]
    if tag == b"A":
        return _INSERT, decode_tuple_list(rest)
    if tag == b"M":
        return _INSERT, [Tup(*r) for r in marshal.loads(rest)]
    if tag in (b"P", b"R"):
        return (_PURGE if tag == b"P" else _REMOVE), marshal.loads(rest)
    raise ValueError(f"unknown block store record {data[:16]!r}")


class MemoryReads:
    """Every read of a :class:`~joinlib.state.base.WindowStore` served by ``self.mem``, a memory store: the
    stores that keep a durable copy elsewhere (here, :class:`~joinlib.adapters.redis_store.
    MirroredRedisWindowStore`) answer probes at memory speed."""

    mem: MemoryWindowStore
    #: a restarted node finds the store as of its last checkpoint (the copy in Redis), so a checkpoint may name the
    #: store's tuples instead of writing them (:meth:`joinlib.runtime.instance.Instance.snapshot`)
    durable = True

    def lookup(self, index: Index, key: Key) -> Optional[KeyList]:
        return self.mem.lookup(index, key)

    def lookup_many(self, index: Index, keys: Iterable[Key]) -> dict[Key, KeyList]:
        return self.mem.lookup_many(index, keys)

    def first_seq_at_or_after(self, ts: int) -> Optional[int]:
        return self.mem.first_seq_at_or_after(ts)

    def tuples(self) -> list[Tup]:
        return self.mem.tuples()

    def holds_all(self, tups: Sequence[Tup], seqs: Sequence[int]) -> bool:
        return self.mem.holds_all(tups, seqs)

    def indexes(self) -> set[Index]:
        return self.mem.indexes()

    def __len__(self) -> int:
        return len(self.mem)

    def snapshot(self) -> list[Tup]:
        return self.mem.snapshot()


class RedisBlockStore(MemoryReads):
    """The tuples of one stream in memory, with a durable log of blocks under ``prefix`` in Redis (see
    the module docstring).  ``client``: a ``redis.Redis`` (or ``RedisCluster``) returning bytes.  A new
    store on a prefix loads what the log there holds."""

    def __init__(self, client: Any, prefix: str, *, flush_records: int = FLUSH_RECORDS,
                 flush_after_s: float = FLUSH_AFTER_S) -> None:
        require_bytes_client(client, "RedisBlockStore")
        self.client = client
        self.prefix = prefix
        self.base = base = tagged_base(prefix)
        self._kd, self._kx = base + ":d", base + ":x"
        self.fence: Any = None   # a claimed RedisFence: flushes only while its run owns the store
        self._flush_records = flush_records
        self._flush_after_s = flush_after_s
        self._waiting_since: Optional[float] = None   # when the oldest change not in Redis was made
        self._reset_log()
        self._new_indexes: list[str] = []          # index specs not yet in Redis
        self.mem = self._open()
        self._maybe_compact()

    def __repr__(self) -> str:
        return f"RedisBlockStore({self.base!r})"

    # ------------------------------------------------------------------ the log's bookkeeping
    def _reset_log(self, next_id: int = 0) -> None:
        """No records (the state of an empty hash); ids go on from ``next_id``."""
        self._next = next_id
        self._pending: dict[int, Record] = {}      # records made since the last flush, not in Redis yet
        self._dead: list[int] = []                 # records in Redis that are no longer needed
        self._sizes: dict[int, int] = {}           # live insert record -> its number of tuples
        self._by_max: list[tuple[int, int, int]] = []  # heap of (max seq, id, min seq) of insert records
        self._ids: list[int] = []                  # heap of insert record ids (lazy: stale when not in _sizes)
        self._others: deque[int] = deque()         # purge / remove record ids, increasing
        self._purges: dict[str, tuple[int, Any]] = {}  # "ts" / "seq" -> (id, bound) of the latest purge record
        self._stored = 0                           # tuples in live insert records (duplicates and dead ones too)
        self._hi: Optional[int] = None             # highest seq of any insert record since the last reset
        self._ordered = True                       # each insert record's seqs above every earlier one's
        self._limit = _MIN_DEAD                    # _stored above which the dead weight is looked at again

    def _add_insert(self, rid: int, n: int, lo: int, hi: int) -> None:
        """Account for insert record ``rid``: ``n`` tuples, seqs from ``lo`` to ``hi``."""
        self._sizes[rid] = n
        self._stored += n
        heapq.heappush(self._by_max, (hi, rid, lo))
        heapq.heappush(self._ids, rid)
        top = self._hi
        if top is None or hi > top:
            self._hi = hi
        if top is not None and lo <= top:
            self._ordered = False

    def _forget(self, rid: int) -> None:
        """Record ``rid`` is not needed any more: never sent, or deleted at the next flush."""
        if self._pending.pop(rid, None) is None:
            self._dead.append(rid)

    def _record(self, rec: Record) -> int:
        rid = self._next
        self._next = rid + 1
        self._pending[rid] = rec
        if self._waiting_since is None:
            self._waiting_since = time.monotonic()
        return rid

    def _after_removal(self, top: int, rec: Record) -> None:
        """Tuples up to seq ``top`` left the memory store by operation ``rec``: drop the insert records none
        of whose seqs is stored any more, log ``rec`` if a live one may still hold a removed tuple, drop the
        purge / remove records no insert record precedes, compact if the log carries too much dead weight."""
        oldest = self.mem.oldest_seq()
        by_max, sizes, pending = self._by_max, self._sizes, self._pending
        while by_max and (oldest is None or by_max[0][0] < oldest):
            rid = heapq.heappop(by_max)[1]
            self._stored -= sizes.pop(rid)
            if pending.pop(rid, None) is None:   # _forget, inlined: the hot path of a sliding window
                self._dead.append(rid)
        # ordered: the block with the lowest max seq also has the lowest seqs, so if it starts above ``top``
        # no live block holds a removed tuple and ``rec`` would change nothing on replay
        if by_max and not (self._ordered and by_max[0][2] > top):
            rid = self._record(rec)
            self._others.append(rid)
            if rec[0] == _PURGE:
                self._supersede(rid, *rec[1])
        ids, others = self._ids, self._others
        while ids and ids[0] not in sizes:
            heapq.heappop(ids)
        first = ids[0] if ids else self._next
        while others and others[0] < first:
            self._forget(others.popleft())
        if self._stored > self._limit or len(others) > _MIN_OTHERS:
            self._maybe_compact()

    def _supersede(self, rid: int, kind: str, bound: Any) -> None:
        """Purge record ``rid`` removes whatever the previous one of its kind did if its bound is not lower
        (the last removal of a seq decides its fate, and a bound covers a seq by the seq's own ts / seq):
        forget that one."""
        prev = self._purges.get(kind)
        self._purges[kind] = (rid, bound)
        others = self._others
        if prev is not None and prev[1] <= bound and prev[0] >= others[0]:   # else pruned already
            others.remove(prev[0])
            self._forget(prev[0])

    def _maybe_compact(self) -> None:
        """Compact if the log holds more dead tuples than ``max(live, _MIN_DEAD)`` or more purge / remove
        records than ``max(_MIN_OTHERS, 2 x insert records)``; else note the next size worth a look."""
        live = len(self.mem)
        if (self._stored - live > max(live, _MIN_DEAD)
                or len(self._others) > max(_MIN_OTHERS, 2 * len(self._sizes))):
            self._compact()
        else:
            self._limit = live + max(live, _MIN_DEAD)

    def _compact(self) -> None:
        """Replace every record by one insert record of the live window."""
        for rid in list(self._sizes):
            self._forget(rid)
        for rid in self._others:
            self._forget(rid)
        pending, dead = self._pending, self._dead
        self._reset_log(self._next)
        self._pending, self._dead = pending, dead
        live = self.mem.tuples()
        if live:
            self._add_insert(self._record((_INSERT, live)), len(live), live[0].seq, live[-1].seq)
        self._limit = len(live) + max(len(live), _MIN_DEAD)

    # ------------------------------------------------------------------ Redis
    def _open(self) -> MemoryWindowStore:
        """The window the log in Redis holds (replayed through a memory store), and the log's bookkeeping."""
        pipe = self.client.pipeline(transaction=False)
        pipe.smembers(self._kx)
        pipe.hgetall(self._kd)
        pipe.exists(self.base + ":s")
        specs, raw, old = pipe.execute()
        if old:
            raise ValueError(f"{self.base}: holds a RedisWindowStore's keys ({self.base}:s, ...), not a "
                             "RedisBlockStore's: clear them, or open them with the store that wrote them")
        mem = MemoryWindowStore()
        by_seq: dict[int, Tup] = {}
        records = sorted((int(k), v) for k, v in raw.items())
        for rid, data in records:
            kind, body = _decode(data)
            if kind == _INSERT:
                tups = body
                mem.insert(tups)
                for t in tups:
                    by_seq[t.seq] = t
                seqs = sorted([t.seq for t in tups])
                self._add_insert(rid, len(tups), seqs[0], seqs[-1])
            else:
                if kind == _PURGE:
                    mem.purge_below(**{body[0]: body[1]})
                    self._purges[body[0]] = (rid, body[1])
                else:   # without indexes a memory store ignores seqs it does not hold
                    mem.remove_oldest([by_seq[s] for s in body if s in by_seq])
                self._others.append(rid)
        self._next = records[-1][0] + 1 if records else 0
        for spec in sorted(specs):
            mem.add_index(tuple(int(p) for p in spec.split(b",") if p))
        return mem

    def _queue(self, pipe: Any) -> None:
        """Put the changes since the last flush into ``pipe`` (new indexes, new records, then deletions)."""
        if self._new_indexes:
            pipe.sadd(self._kx, *self._new_indexes)
        items = list(self._pending.items())
        for i in range(0, len(items), _HSET_FIELDS):
            args: list[Any] = []
            for rid, rec in items[i:i + _HSET_FIELDS]:
                args += (rid, _encode(rec))
            pipe.execute_command("HSET", self._kd, *args)
        dead = self._dead
        for i in range(0, len(dead), _HSET_FIELDS):
            pipe.execute_command("HDEL", self._kd, *dead[i:i + _HSET_FIELDS])

    def _flushed(self) -> None:
        self._new_indexes, self._pending, self._dead = [], {}, []
        self._waiting_since = None

    def flush_when_asked(self) -> None:
        """Never flush by itself again (neither by the clock nor by the records waiting): a store of a run that takes
        checkpoints, each of which flushes every store first, while a restart rolls the live keys back to the last
        checkpoint's copies -- a flush in between (of a lane's blocks between two checkpoints of a backlog's drain)
        would send blocks, most of which expire before the next checkpoint, that nothing ever reads.  The records
        waiting stay bounded by the window: a record that dies before a flush leaves at once."""
        self._flush_records = sys.maxsize
        self._flush_after_s = float("inf")
        self._flush_if_due = _never   # type: ignore[method-assign]

    def _flush_if_due(self) -> None:
        """Flush when too many records wait, or one has waited ``flush_after_s``."""
        since = self._waiting_since
        if len(self._pending) >= self._flush_records or (
                since is not None and time.monotonic() - since >= self._flush_after_s):
            self.flush()

    def dirty(self) -> bool:
        """Whether changes wait for a :meth:`flush`."""
        return bool(self._pending or self._dead or self._new_indexes)

    def flush(self) -> None:
        """Make Redis hold this store's current state (one round trip; none if nothing changed).  On a Redis
        error nothing is forgotten: a later flush sends it all again (every command is idempotent)."""
        if self.dirty():
            flush_stores(self.client, [self])

    def records(self) -> int:
        """Records the log holds (tests, metrics): insert records plus purge / remove records."""
        return len(self._sizes) + len(self._others)

    # ------------------------------------------------------------------ protocol
    def add_index(self, index: Index) -> None:
        if index in self.mem.indexes():
            return
        self.mem.add_index(index)
        self._new_indexes.append(index_spec(index))

    def insert(self, tups: Sequence[Tup]) -> None:
        if not tups:
            return
        self.mem.insert(tups)
        batch = list(tups)
        seqs = sorted([t.seq for t in batch])   # timsort: linear on the usual sorted batch, cheaper than min + max
        self._add_insert(self._record((_INSERT, batch)), len(batch), seqs[0], seqs[-1])
        if self._stored > self._limit:   # the window grew, or duplicates pile up (a replica sent a batch again)
            self._maybe_compact()
        self._flush_if_due()

    def purge_below(self, *, ts: Optional[int] = None, seq: Optional[int] = None) -> list[Tup]:
        gone = self.mem.purge_below(ts=ts, seq=seq)
        if gone:
            self._after_removal(gone[-1].seq, (_PURGE, ("ts", ts) if ts is not None else ("seq", seq)))
        return gone

    def remove_oldest(self, tups: Sequence[Tup]) -> None:
        if not tups:
            return
        self.mem.remove_oldest(tups)
        seqs = [t.seq for t in tups]
        self._after_removal(max(seqs), (_REMOVE, seqs))

    def load(self, tuples: Sequence[Tup]) -> None:
        """Replace the content by ``tuples`` (indexes kept): the log becomes one insert record."""
        self.mem.load(tuples)
        self._compact()

    def clear(self) -> int:
        """Drop everything, in Redis now (tuples, indexes, unsent changes); returns how many keys went."""
        self.mem = MemoryWindowStore()
        self._reset_log(self._next)
        self._new_indexes = []
        return unlink_matching(self.client, [glob_escape(self.base) + ":*"])


def _never() -> None:
    """A store that flushes only when asked: no clock read, no count, per change."""


def flush_stores(client: Any, stores: Iterable[RedisBlockStore]) -> int:
    """Flush ``stores`` (all on ``client``, in one cluster slot: one node's, with one ``fence``) in one
    transaction; returns how many had changes.  Raises on a Redis error, the stores' changes kept for the next
    flush, and :class:`~joinlib.errors.FencedError` when another instance owns the stores now."""
    dirty = [s for s in stores if s.dirty()]
    if not dirty:
        return 0

    def queue(pipe: Any) -> None:
        for s in dirty:
            s._queue(pipe)
    fence = dirty[0].fence
    if fence is not None:   # only while this run owns the stores (joinlib.adapters.redis_fence)
        fence.transaction(queue)
    else:
        pipe = client.pipeline(transaction=True)
        queue(pipe)
        pipe.execute()
    for s in dirty:
        s._flushed()
    return len(dirty)
