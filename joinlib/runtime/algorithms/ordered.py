"""DJA's V: distinct join values with their entries, in insertion order, with positions in O(log n).

Why: a DJA update names the entries whose counts changed by their position in V (gaps between
positions, :func:`joinlib.runtime.algorithms.dja.count_changes`).  Finding a position by walking V costs
the whole window every epoch, on the home and on every replica; a Fenwick tree over insertion slots
gives a key's position (:meth:`OrderedEntries.position`) and the key at a position
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
        self._tree: list[int] = [0]   # Fenwick tree over slots, 1-based
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
            self._rebuild(max(16, 2 * len(self._entries) + 2))
        slot = len(self._keys)
        self._keys.append(key)
        self._slot[key] = slot
        self._entries[key] = entry
        self._add(slot, 1)

    def __delitem__(self, key: Key) -> None:
        del self._entries[key]
        slot = self._slot.pop(key)
        self._keys[slot] = None
        self._add(slot, -1)

    # ------------------------------------------------------------------ positions
    def position(self, key: Key) -> int:
        """The 0-based position of ``key`` among the live keys, in insertion order."""
        i, total = self._slot[key] + 1, 0
        while i > 0:
            total += self._tree[i]
            i -= i & -i
        return total - 1

    def at(self, position: int) -> Key:
        """The key at ``position`` (0-based); IndexError past the end."""
        if not 0 <= position < len(self._entries):
            raise IndexError(position)
        tree, n = self._tree, len(self._tree) - 1
        i, rest, step = 0, position + 1, 1 << n.bit_length()
        while step:
            j = i + step
            if j <= n and tree[j] < rest:
                i, rest = j, rest - tree[j]
            step >>= 1
        key = self._keys[i]
        assert key is not None
        return key

    def _add(self, slot: int, delta: int) -> None:
        i, tree = slot + 1, self._tree
        while i < len(tree):
            tree[i] += delta
            i += i & -i

    def _rebuild(self, capacity: int) -> None:
        """Slots for the live keys only, in order, and room for ``capacity`` slots."""
        keys = list(self._entries)
        self._keys = list(keys)
        self._slot = {k: i for i, k in enumerate(keys)}
        tree = [0] * (max(capacity, len(keys) + 1) + 1)
        for i in range(1, len(keys) + 1):
            tree[i] = 1
        for i in range(1, len(tree)):   # O(n) build: each node passes its sum on to its parent
            j = i + (i & -i)
            if j < len(tree):
                tree[j] += tree[i]
        self._tree = tree
