"""The centralized reference join: the contract every plan and transport must meet.

Deliberately naive and independent of the engine (no shared window code): for every
tuple s_h as the ≺-latest member, collect from every other stream the tuples that
precede s_h and lie in that stream's window as seen by s_h, then enumerate the
combinations satisfying every predicate.  Quadratic; meant for tests and small data.
Streams with a filter (``where``) are joined over the rows it keeps: :func:`tuples_of_rows` builds them from the
data rows as written.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from joinlib.filter_spec import condition_test
from joinlib.model import Query, Tup

Result = tuple[tuple[int, ...], int]  # (tuple ids by stream position, head ts)


def tuples_of_rows(query: Query, rows: Mapping[str, Sequence[dict[str, Any]]]) -> dict[str, list[Tup]]:
    """Each stream's tuples from its data rows as written (in (ts, id) order): a row is a tuple iff every condition
    of the stream's ``where`` holds on it, and its ``seq`` is its rank among those.  Naive on purpose (a condition
    at a time, no compiled filter): what the loader and the live sources must agree with."""
    out: dict[str, list[Tup]] = {}
    for s in query.streams:
        tests = [(c.field, condition_test(c)) for c in s.where]
        kept = [r for r in rows[s.name] if all(test(r.get(f)) for f, test in tests)]
        out[s.name] = [Tup(s.pos, r["id"], r["ts"], i, tuple(r[a] for a in s.join_attrs))
                       for i, r in enumerate(kept)]
    return out


def reference_join(query: Query, streams: dict[str, list[Tup]]) -> Counter[Result]:
    """Multiset of (ids by stream position, head ts) of every result."""
    m = len(query.streams)
    data = [sorted(streams[s.name], key=lambda t: (t.ts, t.id)) for s in query.streams]
    preds = []
    for p in query.predicates:
        a, b = query.stream(p.left), query.stream(p.right)
        preds.append((a.pos, a.attr_index(p.left_attr), b.pos, b.attr_index(p.right_attr)))
    out: Counter[Result] = Counter()
    for h in range(m):
        for sh in data[h]:
            cands = []
            for k in range(m):
                if k == h:
                    cands.append([sh])
                    continue
                before = [s for s in data[k] if (s.ts, k, s.id) < (sh.ts, h, sh.id)]
                w = query.streams[k].window
                cands.append([s for s in before if s.ts >= sh.ts - w.size] if w.is_time
                             else before[max(0, len(before) - w.size):])
            for combo in _combos(cands, preds):
                out[(tuple(t.id for t in combo), sh.ts)] += 1
    return out


def _combos(cands: list[list[Tup]], preds: list[tuple[int, int, int, int]]) -> Iterator[tuple[Tup, ...]]:
    m = len(cands)
    if not all(cands):
        return
    row = [c[0] for c in cands]  # placeholders: position i is set before it is read

    def ok(i: int) -> bool:
        for pa, ia, pb, ib in preds:
            if max(pa, pb) == i and row[pa].key[ia] != row[pb].key[ib]:
                return False
        return True

    def rec(i: int) -> Iterator[tuple[Tup, ...]]:
        if i == m:
            yield tuple(row)
            return
        for t in cands[i]:
            row[i] = t
            if ok(i):
                yield from rec(i + 1)

    yield from rec(0)
