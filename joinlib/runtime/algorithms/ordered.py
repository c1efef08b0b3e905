"""DJA's V: distinct join values with their entries, in insertion order, with positions in O(log n).

Why: a DJA update names the entries whose counts changed by their position in V (gaps between
positions, :func:`joinlib.runtime.algorithms.dja.count_changes`).  Finding a position by walking V costs
the whole window every epoch, on the home and on every replica; a Fenwick tree over insertion slots
of the removed slots (keys are appended, so an insert costs nothing there) gives a key's position
(:meth:`OrderedEntries.position`) and the key at a position
(:meth:`OrderedEntries.at`) in O(log n), so an epoch costs what changed.
"""
from __future__ import annotations

from array import array
from collections.abc import ItemsView, MutableMapping, ValuesView
from typing import Any, Iterable, Iterator, Optional

from joinlib.kernels import kernel
from joinlib.protocol.bloom import _DIGESTS, Matcher, hit_index, key_digest
from joinlib.protocol.messages import Key

Entry = list[Any]   # [count, flag]: a DJA entry (the flag: shipped on the home, full on a replica)


#: The tree's loops in C (``_fenwickc.c``, built by setup.py), or None: the Python loops below answer.  Its
#: ``dja_tick`` / ``dja_apply`` run DJA's per-epoch loops (runtime/algorithms/dja.py) on an OrderedEntries' own
#: ``_entries``, ``_slot``, ``_keys`` and ``_tree`` (calling :meth:`OrderedEntries._rebuild` when add would).
_c: Any = kernel("joinlib.runtime.algorithms._fenwickc")


def _tree(size: int) -> "array[int]":
    """A zeroed Fenwick tree of ``size`` entries: an array of 8-byte ints, which the kernels read and write in place
    (as a list, each step read an int object and each removal made one per level)."""
    return array("q", bytes(8 * size))


def _capacity(live: int) -> int:
    """The slots a rebuild with ``live`` keys makes room for: four times the live keys, so that a rebuild (O(V))
    comes after three times V new keys, not after V (a key per tuple when join values rarely repeat: with twice
    V, the rebuilds were a tenth of an SM-D1 home's tick); the tree is one level deeper for it.  ``_fenwickc.c``'s
    ``append_key`` sizes it the same."""
    return max(16, 4 * live + 2)


#: the digest of a removed slot in :attr:`OrderedEntries._dig` (its hits are dropped: the slot holds no key)
_NO_DIGEST = bytes(64)


class OrderedEntries(MutableMapping[Key, Entry]):
    """key -> entry in insertion order (a mapping, equal to a dict with the same items), with positions
    among the live keys."""

    def __init__(self, items: Iterable[tuple[Key, Entry]] = ()) -> None:
        self._entries: dict[Key, Entry] = {}
        self._slot: dict[Key, int] = {}
        self._keys: list[Optional[Key]] = []
        self._tree = _tree(1)   # Fenwick tree of removed slots, 1-based
        self._dig = bytearray()   # the key digests of the slots, end to end (64 bytes each), up to some slot
        for k, e in items:
            self[k] = e

    # ------------------------------------------------------------------ a dict
    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __getitem__(self, key: Key) -> Entry:
        return self._entries[key]

    def get(self, key: Key, default: Optional[Entry] = None) -> Optional[Entry]:  # type: ignore[override]
        return self._entries.get(key, default)

    def __iter__(self) -> Iterator[Key]:
        return iter(self._entries)

    def items(self) -> ItemsView[Key, Entry]:
        return self._entries.items()

    def values(self) -> ValuesView[Entry]:
        return self._entries.values()

    def __setitem__(self, key: Key, entry: Entry) -> None:
        if key in self._entries:
            self._entries[key] = entry
            return
        if len(self._keys) + 1 >= len(self._tree):
            self._rebuild(_capacity(len(self._entries)))
        self._slot[key] = len(self._keys)   # appended: no tree update (the tree counts removed slots)
        self._keys.append(key)
        self._entries[key] = entry

    def __delitem__(self, key: Key) -> None:
        del self._entries[key]
        slot = self._slot.pop(key)
        self._keys[slot] = None
        if _c is not None:
            _c.mark(self._tree, slot)
            return
        i, tree = slot + 1, self._tree
        while i < len(tree):
            tree[i] += 1
            i += i & -i

    # ------------------------------------------------------------------ DJA's counts
    # The operations of DJA's per-tuple and per-epoch loops (runtime/algorithms/dja.py), each with the one dict
    # lookup per key the loops had when they read the inner dict themselves; the dict stays inside, so no caller
    # can add or remove a key past the positions.

    def add(self, key: Key) -> Optional[Entry]:
        """One more tuple of ``key``: its entry with the count raised by one, or None if ``key`` was new (now
        in V, last, with entry ``[1, False]``)."""
        entry = self._entries.get(key)
        if entry is None:
            if len(self._keys) + 1 >= len(self._tree):
                self._rebuild(_capacity(len(self._entries)))
            self._slot[key] = len(self._keys)   # as __setitem__ does for a new key
            self._keys.append(key)
            self._entries[key] = [1, False]
        else:
            entry[0] += 1
        return entry

    def bump(self, key: Key, delta: int) -> None:
        """Add ``delta`` to the count of ``key`` (KeyError if it is not in V)."""
        self._entries[key][0] += delta

    def drop_empty(self, keys: Iterable[Key]) -> None:
        """Remove those of ``keys`` whose count is 0 (every one of them must be in V)."""
        entries = self._entries
        for key in keys:
            if entries[key][0] == 0:
                del self[key]

    def unflagged(self, keys: Iterable[Key]) -> list[Key]:
        """Those of ``keys`` in V whose flag is off (not shipped yet on the home, partial on a replica), in
        the order given."""
        entries = self._entries
        return [k for k in keys if (e := entries.get(k)) is not None and not e[1]]

    def held_unflagged(self, m: Matcher) -> list[Key]:
        """The keys in V whose flag is off that the set of ``m`` holds, in V's order: an SM-S2 home's answer to a
        request sent as a Bloom filter.  The slots' digests are kept end to end (:attr:`_dig`, extended by the
        slots added since the last call, dropped with the slots by :meth:`_rebuild`), so a request costs one
        kernel call over them and a Python step per hit, not a walk of V and a digest look-up per key."""
        if m._bloom is None:
            return [k for k, e in self._entries.items() if not e[1] and m.has(k)]
        dig, keys = self._dig, self._keys
        done = len(dig) // 64
        if done < len(keys):
            new = keys[done:]
            # one C look-up per slot (a removed slot's None and a miss both give None, put right below)
            ds = list(map(_DIGESTS.get, new))  # type: ignore[arg-type]
            if None in ds:
                ds = [d if d is not None else _NO_DIGEST if k is None else key_digest(k)
                      for k, d in zip(new, ds, strict=True)]
            dig += b"".join(ds)  # type: ignore[arg-type]
        entries = self._entries
        return [k for i in hit_index(m, dig) if (k := keys[i]) is not None and not entries[k][1]]

    # ------------------------------------------------------------------ positions
    def position(self, key: Key) -> int:
        """The 0-based position of ``key`` among the live keys, in insertion order: its slot less the
        removed slots before it."""
        slot = self._slot[key]
        if _c is not None:
            return slot - int(_c.removed_before(self._tree, slot))
        return self._position_of(slot)

    def changes(self, keys: Iterable[Key]) -> list[int]:
        """DJA's v_C for the entries of ``keys`` (each in V): (gap, count) pairs in V order, gap = entries
        skipped since the previous one.  Positions grow with slots, so the slots are sorted once and their
        positions found in one pass (one call of the C kernel)."""
        slots = sorted([self._slot[k] for k in keys])
        if _c is not None:
            found: list[int] = _c.positions(self._tree, slots)
        else:
            found = [self._position_of(s) for s in slots]
        entries, at, last = self._entries, self._keys, -1
        out: list[int] = []
        for s, pos in zip(slots, found, strict=True):
            out += (pos - last - 1, entries[at[s]][0])  # type: ignore[index]
            last = pos
        return out

    def _position_of(self, slot: int) -> int:
        i, removed = slot, 0
        while i > 0:
            removed += self._tree[i]
            i -= i & -i
        return slot - removed

    def at(self, position: int) -> Key:
        """The key at ``position`` (0-based); IndexError past the end."""
        return self.keys_at([position])[0]

    def keys_at(self, positions: list[int]) -> list[Key]:
        """The keys at ``positions`` (0-based; an update's changed entries, in one call of the C kernel);
        IndexError if one is past the end."""
        if positions and not (0 <= min(positions) and max(positions) < len(self._entries)):
            raise IndexError(positions)
        tree, n, keys = self._tree, len(self._keys), self._keys
        if _c is not None:
            slots: list[int] = _c.slots_of(tree, n, positions)
        else:
            slots = [self._slot_at(position) for position in positions]
        out = [keys[i] for i in slots]
        assert None not in out
        return out  # type: ignore[return-value]

    def _slot_at(self, position: int) -> int:
        tree, n = self._tree, len(self._keys)
        i, rest, step = 0, position + 1, 1 << n.bit_length()
        while step:   # the largest slot prefix holding fewer than position + 1 live keys
            j = i + step
            if j <= n:
                live = step - tree[j]
                if live < rest:
                    i, rest = j, rest - live
            step >>= 1
        return i

    def _rebuild(self, capacity: int) -> None:
        """Slots for the live keys only, in order (no removed slot left), and room for ``capacity``."""
        keys: list[Optional[Key]] = list(self._entries)
        self._keys = keys
        self._slot = dict(zip(keys, range(len(keys)), strict=True))  # type: ignore[arg-type]
        self._tree = _tree(max(capacity, len(keys) + 1) + 1)
        self._dig = bytearray()
