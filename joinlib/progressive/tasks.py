"""md-tasks, dd-tasks (PSMJ) and the clean-up hash join, with the paper's duplicate avoidance.

A pair (t1, t2) with equal keys can be found by four kinds of work; each reports it only
if no earlier work did (closed intervals over strictly monotone ticks, so no ties):

* mm-stage: iff [t1.ATS, t1.DTS] ∩ [t2.ATS, t2.DTS] ≠ ∅;
* md-task R_i^mem[j] ⋈ R_o^disk[j] at tick T: skip mm pairs, and pairs the previous
  md-task of the same memory partition saw (its tick > the memory tuple's ATS and > the
  disk tuple's DTS) - Fig. 5;
* dd-task (one PSMJ merge operation at a time): skip mm pairs, pairs of one slot
  (matching runs, :mod:`.disk`), and pairs some md-task reported: a T^md_1 inside
  [t1.ATS, t1.DTS] later than t2.DTS, or symmetrically - Fig. 7 with the digest's fix of
  line 7 (compare T[i], not T[c1]: the printed version loses results);
* clean-up: a dd-task (or XJoin's hash join) over everything, with the same rules.

Within one task, results are emitted in (key, R1 ATS, R2 ATS) order, whichever store
serves the runs: the in-memory path and the streaming path give identical output.
"""
from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain, groupby
from operator import itemgetter
from typing import Optional

from joinlib.progressive.disk import Disk, RunRef, Slot
from joinlib.progressive.memory import MemPartition
from joinlib.progressive.model import DiskTuple, Id, Key, MemTuple, PairSink, Phase, VirtualClock
from joinlib.progressive.runs import RunWriter

Found = tuple[Key, int, int, Id, Id]
"""A result before emission: (key, R1 ATS, R2 ATS, R1 id, R2 id) - sorts canonically."""
Rule = Callable[[int, int, int, int], bool]


@dataclass
class TaskContext:
    """What every task needs: the disk, the clock it charges, the sink it reports to."""

    disk: Disk
    clock: VirtualClock
    sink: PairSink

    def emit(self, found: list[Found], phase: Phase, t: int) -> None:
        sink = self.sink
        for r in found:
            sink(r[3], r[4], phase, t)


def dd_rule(tmd1: Sequence[int], tmd2: Sequence[int]) -> Rule:
    """``rule(a1, d1, a2, d2)``: should a dd/clean-up pair from different slots be reported?"""

    def reportable(a1: int, d1: int, a2: int, d2: int) -> bool:
        if a1 < d2 and a2 < d1:  # in memory together: the mm-stage reported it
            return False
        if tmd1:  # an md-task of R1^mem[j] while t1 was in memory and t2 already on disk
            i = bisect_right(tmd1, a1 if a1 > d2 else d2)
            if i < len(tmd1) and tmd1[i] < d1:
                return False
        if tmd2:
            i = bisect_right(tmd2, a2 if a2 > d1 else d1)
            if i < len(tmd2) and tmd2[i] < d2:
                return False
        return True

    return reportable


# --------------------------------------------------------------------------- md-task

def md_task(ctx: TaskContext, mem: MemPartition, rel: int, part: int, phase: Phase = "reactive") -> int:
    """R_rel^mem[part] ⋈ R_other^disk[part] (Fig. 5); appends its tick to T^md afterwards."""
    t = ctx.clock.tick()
    dp, other = ctx.disk.parts[part], 1 - rel
    prev = dp.last_md(rel)
    costs = ctx.disk.costs
    ctx.clock.charge_scan(dp.runs[other], dp.pages[other])
    ctx.clock.charge_cpu(dp.pages[other] + costs.pages(len(mem)))
    found: list[Found] = []
    for m, d in _md_candidates(ctx, mem, other, part):
        if m.ats < d.dts:  # m arrived while d was in memory: reported by the mm-stage
            continue
        if prev is not None and prev > m.ats and prev > d.dts:  # the previous md-task saw it
            continue
        found.append((m.key, m.ats, d.ats, m.id, d.id) if rel == 0 else (m.key, d.ats, m.ats, d.id, m.id))
    found.sort()
    ctx.emit(found, phase, t)
    dp.tmd[rel].append(t)
    return len(found)


def _md_candidates(ctx: TaskContext, mem: MemPartition, other: int,
                   part: int) -> Iterator[tuple[MemTuple, DiskTuple]]:
    """(memory tuple, disk tuple) pairs with equal keys: from the key index, or by scanning runs."""
    dp = ctx.disk.parts[part]
    by_key = mem.by_key
    if dp.index is not None:
        idx = dp.index[other]
        for key, mts in by_key.items():
            for d in idx.get(key, ()):
                for m in mts:
                    yield m, d
        return
    store = ctx.disk.store
    for ref in ctx.disk.run_refs(part, other):
        for d in store.read_run(other, part, ref.run):
            for m in by_key.get(d.key, ()):
                yield m, d


# --------------------------------------------------------------------------- dd-task

def pack_slots(slots: list[Slot], fanin: int) -> list[list[Slot]]:
    """One PSMJ pass: consecutive slots grouped so no group has more than ``fanin`` runs per side."""
    groups: list[list[Slot]] = []
    cur: list[Slot] = []
    count = [0, 0]
    for s in slots:
        add = [int(r is not None) for r in s.runs]
        if cur and (count[0] + add[0] > fanin or count[1] + add[1] > fanin):
            groups.append(cur)
            cur, count = [], [0, 0]
        cur.append(s)
        count = [count[0] + add[0], count[1] + add[1]]
    if cur:
        groups.append(cur)
    return groups


def dd_task(ctx: TaskContext, part: int, fanin: int, phase: Phase = "reactive") -> int:
    """R_1^disk[part] ⋈ R_2^disk[part] by PSMJ: merge passes until one slot is left.  The
    clean-up's last pass only joins: nothing will read its merged runs."""
    t = ctx.clock.tick()
    dp = ctx.disk.parts[part]
    rule = dd_rule(dp.tmd[0], dp.tmd[1])
    n = 0
    while len(dp.slots) > 1:
        groups = pack_slots(list(dp.slots), fanin)
        if phase == "cleanup" and len(groups) == 1:
            return n + _join_only(ctx, part, groups[0], rule, phase, t)
        for group in groups:
            if len(group) > 1:
                n += _merge_op(ctx, part, group, rule, phase, t)
    return n


def _charge_group(ctx: TaskContext, group: list[Slot], write: bool, phase: Phase) -> None:
    """A merge operation during transmission has a few pages per run: it reads the runs in
    turns and writes as it goes, every page a random access (Et_dd's 2·c_ran per page).  In
    the clean-up the whole memory buffers the runs: a seek per run read or written, the rest
    sequential - as XJoin's clean-up hash join, which only reads."""
    costs = ctx.disk.costs
    refs = [r for s in group for r in s.runs if r is not None]
    pages = sum(costs.pages(r.size) for r in refs)
    if write and phase != "cleanup":
        ctx.clock.charge_io(random=2 * pages)
    elif write:
        ctx.clock.charge_scan(len(refs) + 2, 2 * pages)
    else:
        ctx.clock.charge_scan(len(refs), pages)
    ctx.clock.charge_cpu(pages)


def _merge_op(ctx: TaskContext, part: int, group: list[Slot], rule: Rule, phase: Phase, t: int) -> int:
    """One merging operation: report new pairs across the group's slots, write one slot."""
    _charge_group(ctx, group, True, phase)
    store = ctx.disk.store
    if store.in_memory:
        found, merged = _join_in_memory(ctx, part, group, rule, merge=True)
        ctx.emit(found, phase, t)
        n = len(found)
        refs = [RunRef(store.write_run(rel, part, m), len(m)) if m else None for rel, m in enumerate(merged)]
    else:
        writers = (store.writer(0, part), store.writer(1, part))
        try:
            n, sizes = _join_streaming(ctx, part, group, rule, phase, t, writers)
        except BaseException:
            for w in writers:
                w.abort()
            raise
        refs = [None, None]
        for rel, w in enumerate(writers):
            if sizes[rel]:
                refs[rel] = RunRef(w.commit(), sizes[rel])
            else:
                w.abort()
    ctx.disk.replace_slots(part, group, Slot((refs[0], refs[1])))
    return n


def hash_join_task(ctx: TaskContext, part: int, phase: Phase = "cleanup") -> int:
    """XJoin's clean-up for one partition: every run of both sides read once, joined by key
    with the same skip rules (no runs are written)."""
    t = ctx.clock.tick()
    dp = ctx.disk.parts[part]
    if len(dp.slots) < 2:
        return 0
    return _join_only(ctx, part, list(dp.slots), dd_rule(dp.tmd[0], dp.tmd[1]), phase, t)


def _join_only(ctx: TaskContext, part: int, group: list[Slot], rule: Rule, phase: Phase, t: int) -> int:
    """Report the new pairs across the group's slots, reading each run once, writing nothing."""
    _charge_group(ctx, group, False, phase)
    if ctx.disk.store.in_memory:
        found, _ = _join_in_memory(ctx, part, group, rule, merge=False)
        ctx.emit(found, phase, t)
        return len(found)
    n, _ = _join_streaming(ctx, part, group, rule, phase, t, None)
    return n


def _side_runs(ctx: TaskContext, part: int, group: list[Slot], rel: int) -> list[tuple[int, RunRef]]:
    return [(s, ref) for s, slot in enumerate(group) if (ref := slot.runs[rel]) is not None]


def _join_in_memory(ctx: TaskContext, part: int, group: list[Slot], rule: Rule,
                    merge: bool) -> tuple[list[Found], list[Sequence[DiskTuple]]]:
    """Runs already in RAM: hash side 2 by key (tagged with its slot), probe with side 1."""
    store = ctx.disk.store
    runs = [[(s, store.load_run(rel, part, ref.run)) for s, ref in _side_runs(ctx, part, group, rel)]
            for rel in (0, 1)]
    table: dict[Key, list[tuple[int, DiskTuple]]] = {}
    for s, run in runs[1]:
        for t2 in run:
            table.setdefault(t2.key, []).append((s, t2))
    found: list[Found] = []
    for s, run in runs[0]:
        for t1 in run:
            for s2, t2 in table.get(t1.key, ()):
                if s2 != s and rule(t1.ats, t1.dts, t2.ats, t2.dts):
                    found.append((t1.key, t1.ats, t2.ats, t1.id, t2.id))
    found.sort()
    merged: list[Sequence[DiskTuple]] = []
    if merge:
        merged = [sorted(chain.from_iterable(run for _, run in side)) for side in runs]
    return found, merged


def _tagged(it: Iterator[DiskTuple], slot: int) -> Iterator[tuple[Key, int, int, DiskTuple]]:
    for t in it:
        yield t.key, t.ats, slot, t


def _key_groups(ctx: TaskContext, part: int, group: list[Slot],
                rel: int) -> Iterator[tuple[Key, list[tuple[Key, int, int, DiskTuple]]]]:
    """Side ``rel`` of the group as one sorted stream (a heap over its runs), grouped by key."""
    store = ctx.disk.store
    streams = [_tagged(store.read_run(rel, part, ref.run), s) for s, ref in _side_runs(ctx, part, group, rel)]
    for key, items in groupby(heapq.merge(*streams), key=itemgetter(0)):
        yield key, list(items)


def _join_streaming(ctx: TaskContext, part: int, group: list[Slot], rule: Rule, phase: Phase, t: int,
                    writers: Optional[tuple[RunWriter, RunWriter]]) -> tuple[int, list[int]]:
    """Runs read page by page: a sort-merge walk over both sides' key groups, writing the
    merged runs (when ``writers``) as it goes; memory holds one key group per side."""
    g1, g2 = _key_groups(ctx, part, group, 0), _key_groups(ctx, part, group, 1)
    a, b = next(g1, None), next(g2, None)
    n, sizes = 0, [0, 0]
    while a is not None or b is not None:
        if b is None or (a is not None and a[0] < b[0]):  # type: ignore[operator]
            assert a is not None
            _write(writers, 0, a[1], sizes)
            a = next(g1, None)
        elif a is None or b[0] < a[0]:  # type: ignore[operator]
            _write(writers, 1, b[1], sizes)
            b = next(g2, None)
        else:
            found = [(t1.key, t1.ats, t2.ats, t1.id, t2.id)
                     for _, _, s1, t1 in a[1] for _, _, s2, t2 in b[1]
                     if s1 != s2 and rule(t1.ats, t1.dts, t2.ats, t2.dts)]
            ctx.emit(found, phase, t)
            n += len(found)
            _write(writers, 0, a[1], sizes)
            _write(writers, 1, b[1], sizes)
            a, b = next(g1, None), next(g2, None)
    return n, sizes


def _write(writers: Optional[tuple[RunWriter, RunWriter]], rel: int,
           items: list[tuple[Key, int, int, DiskTuple]], sizes: list[int]) -> None:
    if writers is not None:
        writers[rel].add([it[3] for it in items])
    sizes[rel] += len(items)
