"""DJA's V: distinct join values with their entries, in insertion order, with positions in O(log n).

Why: a DJA update names the entries whose counts changed by their position in V (gaps between
positions, :func:`joinlib.runtime.algorithms.dja.count_changes`).  Finding a position by walking V costs
the whole window every epoch, on the home and on every replica; a Fenwick tree over insertion slots
of the removed slots (keys are appended, so an insert costs nothing there) gives a key's position
(:meth:`OrderedEntries.position`) and the key at a position
(:meth:`OrderedEntries.at`) in O(log n), so an epoch costs what changed.
"""
from __future__ import annotations

from collections.abc import ItemsView, MutableMapping, ValuesView
from typing import Any, Iterable, Iterator, Optional

from joinlib.protocol.messages import Key

Entry = list[Any]   # [count, flag]: a DJA entry (the flag: shipped on the home, full on a replica)


class OrderedEntries(MutableMapping[Key, Entry]):
    """key -> entry in insertion order (a mapping, equal to a dict with the same items), with positions
    among the live keys."""

    def __init__(self, items: Iterable[tuple[Key, Entry]] = ()) -> None:
        self._entries: dict[Key, Entry] = {}
        self._slot: dict[Key, int] = {}
        self._keys: list[Optional[Key]] = []
        self._tree: list[int] = [0]   # Fenwick tree of removed slots, 1-based
        for k, e in items:
            self[k] = e

    # ------------------------------------------------------------------ a dict
    @property
    def data(self) -> dict[Key, Entry]:
        """The entries as a plain dict, for reads and in-place changes of entries in hot loops (adding or
        removing a key goes through this mapping, which keeps the positions)."""
        return self._entries

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
            self._rebuild(max(16, 2 * len(self._entries) + 2))
        self._slot[key] = len(self._keys)   # appended: no tree update (the tree counts removed slots)
        self._keys.append(key)
        self._entries[key] = entry

    def __delitem__(self, key: Key) -> None:
        del self._entries[key]
        slot = self._slot.pop(key)
        self._keys[slot] = None
        i, tree = slot + 1, self._tree
        while i < len(tree):
            tree[i] += 1
            i += i & -i

    # ------------------------------------------------------------------ positions
    def position(self, key: Key) -> int:
        """The 0-based position of ``key`` among the live keys, in insertion order: its slot less the
        removed slots before it."""
        slot = self._slot[key]
        i, removed = slot, 0
        while i > 0:
            removed += self._tree[i]
            i -= i & -i
        return slot - removed

    def at(self, position: int) -> Key:
        """The key at ``position`` (0-based); IndexError past the end."""
        if not 0 <= position < len(self._entries):
            raise IndexError(position)
        tree, n = self._tree, len(self._keys)
        i, rest, step = 0, position + 1, 1 << n.bit_length()
        while step:   # the largest slot prefix holding fewer than position + 1 live keys
            j = i + step
            if j <= n:
                live = step - tree[j]
                if live < rest:
                    i, rest = j, rest - live
            step >>= 1
        key = self._keys[i]
        assert key is not None
        return key

    def _rebuild(self, capacity: int) -> None:
        """Slots for the live keys only, in order (no removed slot left), and room for ``capacity``."""
        keys = list(self._entries)
        self._keys = list(keys)
        self._slot = {k: i for i, k in enumerate(keys)}
        self._tree = [0] * (max(capacity, len(keys) + 1) + 1)
