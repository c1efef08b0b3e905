"""Keeping remote window replicas in step with the home window (Sect. 3.2 of the paper).

Home side (the node of stream S_2), one *sender* per replica it serves:

- :class:`FullSender` (SP-S): ships every new batch B_2.
- :class:`FifoSender` (SM-S1): non-redundant semijoin (Algorithm 7: one shipped bit
  per tuple and destination) and the expiry count k of shipped tuples (Algorithm 8).
- :class:`MixedSender` (SM-S2): V_2 with counts and shipped bits, update message
  (v_J, v_C, s_F) (Algorithm 9), and ΔW'_2 for requested partial keys.
- :class:`DjaSender` (SM-D1): V_2 with counts, update message (v_J, v_C).

Replica side (the node of the intermediate stream), the mirror images.  Every
method is deterministic in its inputs: nodes apply messages in a fixed order
(see :mod:`joinlib.runtime.node`), so home and replica states agree exactly.
"""
from __future__ import annotations

import heapq
from typing import Iterable, Optional, Sequence

from ..model import Stream, Tup
from ..state.base import WindowStore
from .messages import DjaUpdate, ExpiryUpdate, Key, TupleBatch
from .windowing import Progress, purge_bound


def project(t: Tup, index: tuple[int, ...]) -> Key:
    return tuple(t.key[i] for i in index)


def arrivals_of(stream: Stream, batch: Sequence[Tup]) -> list[int]:
    """Arrival timestamps, needed remotely only for tuple-count windows."""
    return [t.ts for t in batch] if not stream.window.is_time else []


# ----------------------------------------------------------------------------- home side

class FullSender:
    """SP-S: W_2 is exported to the source node — ship every batch B_2."""

    def tick(self, epoch: int, batch: Sequence[Tup], dying: Sequence[Tup]) -> TupleBatch:
        return TupleBatch([(t,) for t in batch])


class FifoSender:
    """SM-S1 at the home node: shipped bits and the FIFO expiry count."""

    def __init__(self, stream: Stream) -> None:
        self.stream = stream
        self.shipped: set[int] = set()   # seqs shipped to the replica and still stored here
        self._heap: list[int] = []       # the same seqs, oldest first

    def semijoin(self, store: WindowStore, index: tuple[int, ...], keys: Iterable[Key]) -> TupleBatch:
        """Algorithm 7: window tuples matching ``keys`` that were never shipped (ΔW'_2)."""
        out = []
        shipped = self.shipped
        for kl in store.lookup_many(index, keys).values():
            for t in kl.live():
                if t.seq not in shipped:
                    shipped.add(t.seq)
                    heapq.heappush(self._heap, t.seq)
                    out.append((t,))
        out.sort(key=lambda r: r[0].seq)
        return TupleBatch(out)

    def tick(self, epoch: int, batch: Sequence[Tup], dying: Sequence[Tup]) -> ExpiryUpdate:
        """Algorithm 8: k = number of expired tuples whose shipped bit is set."""
        k = 0
        if dying:
            bound = dying[-1].seq
            heap = self._heap
            while heap and heap[0] <= bound:
                self.shipped.discard(heapq.heappop(heap))
                k += 1
        return ExpiryUpdate(k, arrivals_of(self.stream, batch))


class DjaSender:
    """SM-D1 at the home node: V_2 as an ordered map key -> count (Sect. 3.2.2)."""

    def __init__(self, stream: Stream, index: tuple[int, ...]) -> None:
        self.stream = stream
        self.index = index
        self.entries: dict[Key, list] = {}  # key -> [count, shipped bit]; insertion order = V order

    def _update(self, batch: Sequence[Tup], dying: Sequence[Tup], sf: Optional[list]) -> DjaUpdate:
        vj = []
        for t in batch:
            key = project(t, self.index)
            e = self.entries.get(key)
            if e is None:
                self.entries[key] = [1, False]
                vj.append(key)
            else:
                e[0] += 1
                if e[1] and sf is not None:
                    sf.append(t)
        for t in dying:
            self.entries[project(t, self.index)][0] -= 1
        vc = [e[0] for e in self.entries.values()]
        for key in [k for k, e in self.entries.items() if e[0] == 0]:
            del self.entries[key]
        return DjaUpdate(vj, vc, sf or [], arrivals_of(self.stream, batch))

    def tick(self, epoch: int, batch: Sequence[Tup], dying: Sequence[Tup]) -> DjaUpdate:
        return self._update(batch, dying, None)


class MixedSender(DjaSender):
    """SM-S2 at the home node: V_2 with shipped bits; s_F carries new tuples of shipped keys."""

    def tick(self, epoch: int, batch: Sequence[Tup], dying: Sequence[Tup]) -> DjaUpdate:
        return self._update(batch, dying, [])

    def semijoin(self, store: WindowStore, index: tuple[int, ...], keys: Iterable[Key]) -> TupleBatch:
        """ΔW'_2: all tuples of requested keys whose full tuples were not shipped yet
        (``index`` is always this replica's DJA key)."""
        want = [k for k in keys if (e := self.entries.get(k)) is not None and not e[1]]
        out = []
        for key, kl in store.lookup_many(self.index, want).items():
            self.entries[key][1] = True
            out.extend((t,) for t in kl.live())
        return TupleBatch(out)


# ----------------------------------------------------------------------------- replica side

class FullReplica:
    """SP-S's W_2@N_1: a complete copy, expired locally like the home window."""

    def __init__(self, stream: Stream, store: WindowStore, tau: int) -> None:
        self.stream, self.store, self.tau = stream, store, tau
        self.progress = Progress() if not stream.window.is_time else None
        self.batches: dict[int, list[Tup]] = {}
        self.keep_batches = False  # a sequence headed by the stream starts here (it takes them)

    def apply(self, epoch: int, body: TupleBatch) -> None:
        batch = [r[0] for r in body.rows]
        self.store.insert(batch)
        if self.progress is not None:
            self.progress.add_epoch(epoch, [t.ts for t in batch])
        self.store.purge_below(**purge_bound(self.stream, epoch, self.tau, self.progress))
        if self.progress is not None:
            self.progress.prune(epoch)
        if self.keep_batches:
            self.batches[epoch] = batch


class FifoReplica:
    """SM-S1's W'_2@N_1: shipped tuples, removed k at a time from the old end (Algorithm 8)."""

    def __init__(self, stream: Stream, store: WindowStore) -> None:
        self.stream, self.store = stream, store
        self.progress = Progress() if not stream.window.is_time else None
        self._fifo: list[tuple[int, Tup]] = []  # heap by seq: a FIFO in stream order

    def apply(self, epoch: int, body: ExpiryUpdate) -> None:
        gone = [heapq.heappop(self._fifo)[1] for _ in range(body.expired)]
        self.store.remove_oldest(gone)
        if self.progress is not None:
            self.progress.add_epoch(epoch, body.arrivals)
            self.progress.prune(epoch)

    def receive(self, body: TupleBatch) -> None:
        tups = [r[0] for r in body.rows]
        self.store.insert(tups)
        for t in tups:
            heapq.heappush(self._fifo, (t.seq, t))

    def __len__(self) -> int:
        return len(self._fifo)


class DjaReplica:
    """SM-D1's V_2@N_1: distinct join values with counts, in V_2's order."""

    def __init__(self, stream: Stream, index: tuple[int, ...]) -> None:
        self.stream, self.index = stream, index
        self.entries: dict[Key, list] = {}  # key -> [count, full?]

    def apply(self, epoch: int, body: DjaUpdate) -> None:
        for key in body.vj:
            self.entries[key] = [0, False]
        if len(body.vc) != len(self.entries):
            raise RuntimeError(f"DJA count vector of {self.stream.name} has {len(body.vc)} entries, "
                               f"replica has {len(self.entries)}: replicas out of sync")
        dead = []
        for (key, e), p in zip(list(self.entries.items()), body.vc):
            self._settle(key, e, p)
            if p == 0:
                dead.append(key)
        for key in dead:
            del self.entries[key]

    def _settle(self, key: Key, entry: list, p: int) -> None:
        """Take the window's new count ``p`` of tuples with ``key``."""
        entry[0] = p

    def __contains__(self, key: Key) -> bool:
        return key in self.entries


class MixedReplica(DjaReplica):
    """SM-S2's M_2@N_1: partial entries (join values) and full entries (their tuples)."""

    def __init__(self, stream: Stream, index: tuple[int, ...], store: WindowStore) -> None:
        super().__init__(stream, index)
        self.store = store
        self.progress = Progress() if not stream.window.is_time else None
        self._sf: dict[Key, list[Tup]] = {}
        self._expire: dict[Key, int] = {}

    def apply(self, epoch: int, body: DjaUpdate) -> None:
        self._sf = {}
        for t in body.sf:
            self._sf.setdefault(project(t, self.index), []).append(t)
        self._expire: dict[Key, int] = {}
        super().apply(epoch, body)
        if self._sf:
            raise RuntimeError(f"s_F of {self.stream.name} names keys the replica holds no full tuples of")
        # One store call each for the new and the expired tuples (a round trip each on Redis).
        self.store.insert(sorted(body.sf, key=lambda t: t.seq))
        gone = [t for key, kl in self.store.lookup_many(self.index, self._expire).items()
                for t in kl.live()[:self._expire[key]]]
        gone.sort(key=lambda t: t.seq)
        self.store.remove_oldest(gone)
        if self.progress is not None:
            self.progress.add_epoch(epoch, body.arrivals)
            self.progress.prune(epoch)

    def _settle(self, key: Key, entry: list, p: int) -> None:
        if not entry[1]:
            return
        q = len(self._sf.pop(key, ()))
        k = entry[0] + q - p  # Algorithm 9, line 36: expired full tuples of this key
        if k:
            self._expire[key] = k
        entry[0] = p  # partial entries keep c = 0: M_2 holds none of their full tuples

    def partial_keys(self, keys: Iterable[Key]) -> set[Key]:
        return {k for k in keys if (e := self.entries.get(k)) is not None and not e[1]}

    def receive(self, body: TupleBatch) -> None:
        """ΔW'_2 arrived: the requested entries become full."""
        tups = [r[0] for r in body.rows]
        self.store.insert(tups)
        for key, kl in self.store.lookup_many(self.index, {project(t, self.index) for t in tups}).items():
            e = self.entries[key]
            e[1] = True
            e[0] = len(kl)
