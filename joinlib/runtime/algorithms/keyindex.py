"""A reducer's pending tuples toward one neighbour, by join key, with the latest live set holding each key.

Why a module of its own: this is where a reduction's per-epoch work is spent.  A set that arrives must
find the pending keys it holds, and a key that arrives must find the latest live set holding it.  For
explicit key sets both are dictionary look-ups; for Bloom filters every (key, filter) pair must be
tested, so the keys' hash digests are kept end to end in one buffer and a filter is tested against all
pending keys at once (:meth:`KeyIndex.holding`), and the new keys of an epoch against all live filters at
once (:meth:`KeyIndex.settle`): one call of a C kernel (or a handful of array operations without the
kernels) in place of a Python call per pair, with the live filters kept in the form the kernel takes.

The answers are exactly :meth:`joinlib.protocol.bloom.Matcher.has`'s: the same hash words, the same bit
positions (word mod m for the filter's first k words).

The table's bookkeeping (:meth:`KeyTable.add_all`, :meth:`KeyTable.discard_all`, :meth:`KeyTable.holding`),
:meth:`KeyIndex.settle`'s update of ``best`` (both at once: :meth:`KeyTable.add_settle`), :meth:`KeyIndex.live` and
:meth:`KeyIndex.more_live` run in C when ``_keytablec.c`` is built (setup.py): the same steps on the same Python
containers, so the state others read (``seqs``, ``keys``, ``slot``, ``base``, ``dig``, ``best``, ``settled``,
``_exact``, ``_blooms``) is the same; the Python below is the fallback, and what tests/unit/test_keytable_c.py
compares it to.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from joinlib.kernels import kernel
from joinlib.protocol import bloom
from joinlib.protocol.bloom import ALL_SET, MAX_HASHES, Matcher, digests, hash_rows, hit_index, latest_tags, unpacked
from joinlib.protocol.messages import Key

#: The key table's bookkeeping in C (``_keytablec.c``, built by setup.py: it says why), or None: the Python forms
#: below, the same answers more slowly.
_c: Any = kernel("joinlib.runtime.algorithms._keytablec")

#: a live set of a neighbour as the reducer keeps it: (its number, its tag, its matcher)
LiveSet = tuple[int, int, Matcher]


class _Bank:
    """The bits of the live Bloom filters of one index, end to end in one array, so that a batch of keys
    is tested against all of them in a handful of array operations.

    Element 0 of the bits is a set bit.  Each filter has a row of sixteen (size, offset) pairs, one per
    hash word: (m, its offset) for the k words it uses and (1, 0) for the others, so that word % size +
    offset is the bit to test, and the unused words test the set bit.  A filter is copied in once, when
    first tested; everything is compacted to the live filters when the bits fill up."""

    def __init__(self) -> None:
        self.bits = np.ones(1, dtype=bool)
        self.end = 1
        self.slot: dict[Matcher, int] = {}
        self.size = np.ones((0, MAX_HASHES), dtype=np.uint32)
        self.off = np.zeros((0, MAX_HASHES), dtype=np.uint32)

    def place(self, ms: Sequence[Matcher]) -> list[int]:
        """The slots of the filters of ``ms``, copied in as needed."""
        slot = self.slot
        new = [m for m in ms if m not in slot]
        if new:
            need = sum(len(unpacked(m)) for m in new)
            if self.end + need > len(self.bits) or len(slot) + len(new) > len(self.size):
                self._compact(ms, need, len(new))
            for m in new:
                self._copy(m, unpacked(m))
            slot = self.slot
        return [slot[m] for m in ms]

    def _copy(self, m: Matcher, bits: np.ndarray) -> None:
        assert m._bloom is not None
        i = self.slot[m] = len(self.slot)
        k, n = m._bloom.k, len(bits)
        self.bits[self.end:self.end + n] = bits
        self.size[i, :k], self.size[i, k:] = n, 1
        self.off[i, :k], self.off[i, k:] = self.end, 0
        self.end += n

    def _compact(self, live: Sequence[Matcher], need: int, more: int) -> None:
        keep = [m for m in dict.fromkeys(live) if m in self.slot]
        size = 1 + sum(len(unpacked(m)) for m in keep) + need
        rows = max(64, 2 * (len(keep) + more))
        self.bits, self.end, self.slot = np.ones(max(4096, 2 * size), dtype=bool), 1, {}
        self.size = np.ones((rows, MAX_HASHES), dtype=np.uint32)
        self.off = np.zeros((rows, MAX_HASHES), dtype=np.uint32)
        for m in keep:
            self._copy(m, unpacked(m))

    def test(self, ms: Sequence[Matcher], rows: np.ndarray) -> np.ndarray:
        """(keys, filters): does the filter of ``ms[j]`` hold the key of row i.  The sixteen bools of a
        (key, filter) pair are read as two 64-bit words: all set is both words 0x0101010101010101."""
        slots = self.place(ms)
        pos = rows[:, None, :] % self.size[slots] + self.off[slots]
        words = self.bits.take(pos).view(np.uint64)
        hit: np.ndarray = (words[:, :, 0] & words[:, :, 1]) == ALL_SET
        return hit




class KeyTable:
    """Pending seqs by key, and the keys' digests end to end in one buffer, 64 bytes per slot, so that a filter is
    tested against the buffer as it is; shared by the :class:`KeyIndex` of every neighbour whose sets test the
    same key of a tuple (a reducer in the middle of a chain keeps one table for both sides).

    Why it is shaped so: with tens of tuples an epoch, per-key and per-call Python steps cost more than the tests.
    A batch's keys are appended to the buffer in one step, a key that is already pending too: a key's slot is that
    of its latest tuple (``slot``), so slots leave in the order the window's tuples do.  A key that leaves keeps its
    slot, stale, until the stale slots at the front are dropped, so leaving costs one dictionary deletion; what it
    leaves behind (its entries in ``slot`` and ``best``, a stale slot of a tuple done with early) is swept when the
    keys gone outnumber the pending ones.  A slot is live when its key is pending and it is the key's latest.  Slots
    are dropped only when every index has settled the keys added (:meth:`KeyIndex.settle` finds its new keys by
    slot)."""

    #: keys gone (beyond one per pending key) remembered before the table is swept.  A sweep rebuilds ``slot`` and
    #: every index's ``best`` from the pending keys, so it comes rarer the more is remembered: with 64, the demo's
    #: reducers (about 300 pending keys, 10 new an epoch) swept every 35 epochs, a tenth of their admit's time; a few
    #: hundred stale dictionary entries more cost less than that
    slack = 512

    def __init__(self) -> None:
        self.seqs: dict[Key, int | set[int]] = {}   # a key's pending seq, or its seqs when it has several
        self.keys: list[Key] = []          # the key of each slot (stale where the key is no longer pending)
        self.slot: dict[Key, int] = {}     # a key's latest slot, counted from the first ever (``base``: keys[0]'s)
        self.base = 0
        self.dig = bytearray()
        self.users: list[KeyIndex] = []

    def add_all(self, keys: Sequence[Key], seqs: Sequence[int]) -> None:
        """Each (key, seq) pair pending (a reducer's batch)."""
        if _c is not None:
            _c.add_all(self, keys, seqs, bloom._DIGESTS, bloom._remember)
            return
        index = self.seqs
        for k, seq in zip(keys, seqs, strict=True):
            got = index.get(k)
            if got is None:
                index[k] = seq
            elif isinstance(got, int):
                index[k] = {got, seq}
            else:
                got.add(seq)
        if keys:
            at = self.base + len(self.keys)
            self.keys += keys
            self.slot.update(zip(keys, range(at, at + len(keys)), strict=True))
            self.dig += digests(keys)

    def add_settle(self, keys: Sequence[Key], seqs: Sequence[int]) -> None:
        """:meth:`add_all`, then every index over the table settled (:meth:`KeyIndex.settle`): what a reducer does
        with its batch every epoch, one kernel call for what is otherwise a call per index and three more per index
        with live filters (a few microseconds each, with ten keys a batch)."""
        if _c is not None:
            _c.add_settle(self, keys, seqs, bloom._DIGESTS, bloom._remember,
                          bloom._c.latest if bloom._c is not None else None)
            return
        self.add_all(keys, seqs)
        for u in self.users:
            u.settle()

    def discard_all(self, keys: Sequence[Key], seqs: Sequence[int]) -> None:
        """Each (key, seq) pair no longer pending (the tuples that left a reducer's window, or were done with)."""
        if _c is not None:
            _c.discard_all(self, keys, seqs)
            return
        index = self.seqs
        for k, seq in zip(keys, seqs, strict=True):
            got = index[k]
            if isinstance(got, int):
                if got == seq:
                    del index[k]
            else:
                got.discard(seq)
                if len(got) == 1:
                    index[k] = got.pop()
        n = len(self.keys)
        for u in self.users:
            if u.settled != n:
                return
        self._trim()

    def _trim(self) -> None:
        """Drop the stale slots at the front; when the keys gone outnumber the pending ones (by ``slack``), rebuild
        the buffer, ``slot`` and the indexes' ``best`` from the live slots (a key gone keeps its entries until then:
        they are read only for pending keys, and overwritten when a key comes back)."""
        if _c is not None:
            _c.trim(self)
            return
        index, keys, slot, base = self.seqs, self.keys, self.slot, self.base
        head, n = 0, len(keys)
        while head < n:
            k = keys[head]
            if k in index and slot[k] == base + head:
                break
            head += 1
        if head:
            for u in self.users:
                u.settled -= head
            del keys[:head]
            del self.dig[:64 * head]
            self.base += head
        if len(slot) > 2 * len(index) + self.slack:
            base = self.base
            live = [k for i, k in enumerate(keys) if k in index and slot[k] == base + i]
            if len(live) < len(keys):
                self.keys, self.dig = live, bytearray(digests(live))
            self.slot = {k: base + i for i, k in enumerate(live)}
            for u in self.users:
                best = u.best
                u.best, u.settled = {k: best[k] for k in live if k in best}, len(live)

    def holding(self, m: Matcher) -> list[Key]:
        """The pending keys that the set of ``m`` holds (each once)."""
        seqs = self.seqs
        if _c is not None:
            held: list[Key] = (_c.holding_set(seqs, m._set) if m._set is not None
                               else _c.live_hits(self, hit_index(m, self.dig)) if seqs else [])
            return held
        if m._set is not None:
            if len(m._set) < len(seqs):
                return [k for k in m._set if k in seqs]
            return [k for k in seqs if k in m._set]
        if not seqs:
            return []
        keys, slot, base = self.keys, self.slot, self.base
        return [k for i in hit_index(m, self.dig) if (k := keys[i]) in seqs and slot[k] == base + i]


class KeyIndex:
    """A neighbour's side of a reducer's pending keys: the latest tag of a live set of the neighbour holding each
    key (``best``), and the live sets (:meth:`live`), over a :class:`KeyTable` of the keys (its own, or one shared
    with other neighbours testing the same key).  Explicit key sets are kept as one dictionary, key -> the latest
    tag of a set received holding it (:meth:`more_live`): a new key's latest live explicit set is one look-up, not
    a test per live set; Bloom filters are tested in one kernel call per batch of new keys."""

    def __init__(self, table: Optional[KeyTable] = None) -> None:
        self.table = table if table is not None else KeyTable()
        self.table.users.append(self)
        self.best: dict[Key, int] = {}     # may keep entries of keys gone, until the table is rebuilt
        self.settled = len(self.table.keys)   # the table's slots from here on: keys added since the last settle
        self._exact: dict[Key, int] = {}   # key -> the latest tag of an explicit set received holding it
        self._exact_sets = 0               # explicit sets in the forms kept (live or expired)
        self._exact_cap = 64               # _exact is rebuilt from the live sets when it grows past this
        self._blooms: list[tuple[bytes, int, int]] = []     # the live Bloom filters as (bits, k, tag)
        self._matchers: list[tuple[Matcher, int]] = []      # the same, as matchers (the numpy form's bank)
        self._bank = _Bank()

    @property
    def seqs(self) -> dict[Key, int | set[int]]:
        return self.table.seqs

    def add(self, k: Key, seq: int) -> None:
        self.table.add_all((k,), (seq,))

    def add_all(self, keys: Sequence[Key], seqs: Sequence[int]) -> None:
        self.table.add_all(keys, seqs)

    def discard(self, k: Key, seq: int) -> None:
        self.table.discard_all((k,), (seq,))

    def discard_all(self, keys: Sequence[Key], seqs: Sequence[int]) -> None:
        self.table.discard_all(keys, seqs)

    def holding(self, m: Matcher) -> list[Key]:
        return self.table.holding(m)

    # ------------------------------------------------------------------ sets against keys
    def live(self, sets: Sequence[LiveSet]) -> None:
        """The live sets are now ``sets`` (their owner calls this when one arrives or expires): kept in the forms
        the tests below take, so an epoch's :meth:`settle` builds nothing."""
        if _c is not None:
            _c.live(self, sets)
            return
        exact: dict[Key, int] = {}
        self._exact, self._exact_sets = exact, 0
        for _, tag, m in sets:
            if m._set is not None:
                self._hold(exact, m._set, tag)
        self._exact_cap = max(64, 2 * len(exact))
        self._matchers = [(m, tag) for _, tag, m in sets if m._set is None]
        self._blooms = [(m._bloom.bits, m._bloom.k, tag) for m, tag in self._matchers]  # type: ignore[union-attr]

    def _hold(self, exact: dict[Key, int], held: set[Key], tag: int) -> None:
        self._exact_sets += 1
        for k in held:
            if exact.get(k, -1) < tag:
                exact[k] = tag

    def more_live(self, sets: Sequence[LiveSet], new: Sequence[LiveSet]) -> None:
        """The live sets are now ``sets``, of which ``new`` just arrived: added to the forms kept, without
        dropping the sets that expired meanwhile -- a set below the live tag holds nothing that counts (a key's
        latest tag from it is below the tag too, as if no set held the key), it only costs :meth:`settle` a test.
        So the forms are rebuilt only when the expired ones are more than a quarter of the live ones (or the
        explicit keys' dictionary doubled): an epoch's new set costs what it holds, not the whole window's sets,
        and :meth:`settle` tests at most a quarter more filters than are live (with half, rebuilding less often
        cost more in settle than it saved here)."""
        if _c is not None:
            _c.more_live(self, sets, new)
            return
        if 4 * (self._exact_sets + len(self._matchers)) > 5 * len(sets) or len(self._exact) > self._exact_cap:
            self.live(sets)
            return
        for _, tag, m in new:
            if m._set is not None:
                self._hold(self._exact, m._set, tag)
            else:
                assert m._bloom is not None
                self._matchers.append((m, tag))
                self._blooms.append((m._bloom.bits, m._bloom.k, tag))

    def settle(self, live: Optional[Sequence[LiveSet]] = None) -> None:
        """The latest tag of a live set holding each key added since the last call (-1: none); ``live``: the
        live sets changed to these first."""
        if live is not None:
            self.live(live)
        if _c is not None:
            self._settle_c()
            return
        table = self.table
        start, keys = self.settled, table.keys
        self.settled = len(keys)
        if start == len(keys):
            return
        # every key of the slots since the last settle, even one that left meanwhile (its entry is dropped with its
        # slot; one that came back has a later slot, settled after this one), and one pending already (its latest
        # live set found again: the same as kept, or below the live tag like the one kept): the slots' digests
        added = keys[start:]
        exact = self._exact
        if not self._blooms:
            self.best.update({k: exact.get(k, -1) for k in added} if exact else dict.fromkeys(added, -1))
            return
        latest = latest_tags(self._blooms, table.dig[64 * start:])
        if latest is None:
            latest = self._latest_np(added)
        best = dict(zip(added, latest, strict=True))
        for k in exact.keys() & best.keys():   # the few new keys an explicit set holds, found in C
            if exact[k] > best[k]:
                best[k] = exact[k]
        self.best.update(best)

    def _settle_c(self) -> None:
        """:meth:`settle` with the kernel updating ``best`` (from the explicit sets, and the filters' answer)."""
        if not self._blooms:
            _c.settle(self, None)
            return
        start, table = self.settled, self.table
        if start == len(table.keys):
            return
        latest = latest_tags(self._blooms, table.dig[64 * start:])
        _c.settle(self, latest if latest is not None else self._latest_np(table.keys[start:]))

    def _latest_np(self, new: Sequence[Key]) -> list[int]:
        """:func:`latest_tags` in array form, without the C kernels: the bank's test of every (key, filter)."""
        hit = self._bank.test([m for m, _ in self._matchers], hash_rows(new))
        tags = np.array([tag for _, tag in self._matchers], dtype=np.int64)
        latest: list[int] = np.where(hit, tags[None, :], -1).max(axis=1).tolist()
        return latest


def held_keys(m: Matcher, keys: Sequence[Key]) -> list[Key]:
    """The keys of ``keys`` (in their order) that the set of ``m`` holds: a Bloom filter tests them all at
    once (a semijoin's home answering a request sent as a filter tests every key of its window)."""
    if m._set is not None or len(keys) < 8:
        return [k for k in keys if m.has(k)]
    return [keys[i] for i in hit_index(m, digests(keys))]
