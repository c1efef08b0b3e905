"""The floor: what any exact plan must ship (``shared/notes/bytes.md``).

**floor** = the bytes of the tuples that take part in at least one result and are not already at
the result site, minimised over one result site (a tuple's bytes: ``len(avro.encode_tuple(t))``).
**floor + keys** adds, per stream not at that site, the join keys of its non-contributing tuples
once per batch (a tuple that takes part must travel; one that does not must at least have its
key ruled out).

:func:`contributors` finds the tuples that take part in a result without enumerating results:
for each tuple s_h as the ≺-latest member, every other stream's candidates are the tuples in its
window as seen by s_h; the join is then a constraint problem over those candidate sets, which a
full reducer (semijoins down a spanning tree of the join graph from s_h, up, and down again)
solves exactly when the predicates off the tree are implied by those on it (chains, stars, any
graph on one shared key); otherwise the reduced sets are searched for combinations.  Tested
against :func:`joinlib.reference.reference_join` (tests/unit/test_floor.py).
"""
from __future__ import annotations

import argparse
import json
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

from joinlib.data.files import load_streams
from joinlib.model import Query, Tup, Value
from joinlib.protocol.avro import encode_tuple
from joinlib.protocol.messages import KeyBatch
from joinlib.protocol.wire import encode_body
from joinlib.sql import load_query_file

Edge = tuple[int, int, int, int]  # (stream a, attr index in a, stream b, attr index in b)


@dataclass(frozen=True)
class Floor:
    """The floor of a run: at its best ``site``, ``bytes`` and ``bytes + keys``; ``by_site``:
    the floor at every site; ``contributors``: tuples taking part, per stream."""

    site: str
    bytes: int
    keys_bytes: int
    by_site: dict[str, int]
    contributors: dict[str, int]

    @property
    def with_keys(self) -> int:
        return self.bytes + self.keys_bytes


class _Stream:
    """One stream's tuples in ≺ order with per-attribute key indexes (lists of positions)."""

    def __init__(self, tups: list[Tup], nattrs: int) -> None:
        self.tups = sorted(tups, key=lambda t: (t.ts, t.id))
        self.ts = [t.ts for t in self.tups]
        self.index: list[dict[Value, list[int]]] = [{} for _ in range(nattrs)]
        for i, t in enumerate(self.tups):
            for a in range(nattrs):
                self.index[a].setdefault(t.key[a], []).append(i)


def _edges(query: Query) -> list[Edge]:
    out = []
    for p in query.predicates:
        a, b = query.stream(p.left), query.stream(p.right)
        out.append((a.pos, a.attr_index(p.left_attr), b.pos, b.attr_index(p.right_attr)))
    return out


def _tree(m: int, root: int, edges: list[Edge]) -> tuple[list[int], dict[int, tuple[int, int, int]], list[Edge]]:
    """BFS order from ``root``, parent links (child -> (parent, child attr, parent attr)) and the
    edges left off the tree."""
    order, parent, used = [root], {}, set()
    i = 0
    while i < len(order):
        u = order[i]
        i += 1
        for k, (a, ia, b, ib) in enumerate(edges):
            for x, ix, y, iy in ((a, ia, b, ib), (b, ib, a, ia)):
                if x == u and y not in parent and y != root:
                    parent[y] = (u, iy, ix)
                    order.append(y)
                    used.add(k)
    return order, parent, [e for k, e in enumerate(edges) if k not in used]


def _implied(m: int, parent: dict[int, tuple[int, int, int]], rest: list[Edge]) -> bool:
    """Whether the off-tree predicates follow from the tree's by transitivity of equality."""
    uf: dict[tuple[int, int], tuple[int, int]] = {}

    def find(x: tuple[int, int]) -> tuple[int, int]:
        while uf.setdefault(x, x) != x:
            x = uf[x]
        return x
    for c, (p, ic, ip) in parent.items():
        uf[find((c, ic))] = find((p, ip))
    return all(find((a, ia)) == find((b, ib)) for a, ia, b, ib in rest)


def contributors(query: Query, streams: dict[str, list[Tup]]) -> list[set[int]]:
    """Per stream position, the ids of the tuples that take part in at least one result."""
    m = len(query.streams)
    data = [_Stream(streams.get(s.name, []), len(s.join_attrs)) for s in query.streams]
    edges = _edges(query)
    out: list[set[int]] = [set() for _ in range(m)]
    for h in range(m):
        order, parent, rest = _tree(m, h, edges)
        exact = _implied(m, parent, rest)
        for i, sh in enumerate(data[h].tups):
            ranges = [_range(query, data[k], k, h, sh) for k in range(m)]
            ranges[h] = (i, i + 1)
            found = _reduce(data, order, parent, ranges, h, i)
            if found is None:
                continue
            if exact:
                for k in range(m):
                    out[k].update(data[k].tups[j].id for j in found[k])
            else:
                for combo in _search(data, edges, order, found):
                    for k, j in enumerate(combo):
                        out[k].add(data[k].tups[j].id)
    return out


def _range(query: Query, s: _Stream, k: int, h: int, sh: Tup) -> tuple[int, int]:
    """Positions of stream k's tuples that precede ``sh`` (of stream h) and lie in k's window."""
    hi = bisect_right(s.ts, sh.ts) if k < h else bisect_left(s.ts, sh.ts)
    w = query.streams[k].window
    lo = bisect_left(s.ts, sh.ts - w.size, 0, hi) if w.is_time else max(0, hi - w.size)
    return lo, hi


def _matching(s: _Stream, attr: int, values: set[Value], rng: tuple[int, int]) -> set[int]:
    lo, hi = rng
    out: set[int] = set()
    for v in values:
        lst = s.index[attr].get(v)
        if lst:
            out.update(lst[bisect_left(lst, lo):bisect_left(lst, hi)])
    return out


def _reduce(data: list[_Stream], order: list[int], parent: dict[int, tuple[int, int, int]],
            ranges: list[tuple[int, int]], h: int, i: int) -> Optional[list[set[int]]]:
    """The full reducer from head tuple i of stream h; None when nothing survives."""
    cand: dict[int, set[int]] = {h: {i}}
    for k in order[1:]:  # down: tuples matching some candidate of the parent
        p, ik, ip = parent[k]
        vals = {data[p].tups[j].key[ip] for j in cand[p]}
        cand[k] = _matching(data[k], ik, vals, ranges[k])
        if not cand[k]:
            return None
    for k in reversed(order[1:]):  # up: parents keep tuples with a surviving child
        p, ik, ip = parent[k]
        vals = {data[k].tups[j].key[ik] for j in cand[k]}
        cand[p] = {j for j in cand[p] if data[p].tups[j].key[ip] in vals}
        if not cand[p]:
            return None
    for k in order[1:]:  # down again: children keep tuples with a surviving parent
        p, ik, ip = parent[k]
        vals = {data[p].tups[j].key[ip] for j in cand[p]}
        cand[k] = {j for j in cand[k] if data[k].tups[j].key[ik] in vals}
    return [cand[k] for k in range(len(data))]


def _search(data: list[_Stream], edges: list[Edge], order: list[int], cand: list[set[int]]) -> Iterator[list[int]]:
    """Every combination over the reduced candidates satisfying every predicate (cyclic graphs)."""
    m = len(data)
    row = [-1] * m
    placed: set[int] = set()

    def ok(k: int) -> bool:
        for a, ia, b, ib in edges:
            if (a == k and b in placed) or (b == k and a in placed):
                if data[a].tups[row[a]].key[ia] != data[b].tups[row[b]].key[ib]:
                    return False
        return True

    def rec(d: int) -> Iterator[list[int]]:
        if d == m:
            yield list(row)
            return
        k = order[d]
        for j in cand[k]:
            row[k] = j
            if ok(k):
                placed.add(k)
                yield from rec(d + 1)
                placed.discard(k)
    yield from rec(0)


def floor(query: Query, streams: dict[str, list[Tup]], sites: Optional[tuple[str, ...]] = None) -> Floor:
    """The floor and floor + keys of a run (see the module docstring); ``sites``: the candidate
    result sites (default: every node of the query)."""
    tau = query.execution.interval_ms
    contrib = contributors(query, streams)
    size = {s.name: [len(encode_tuple(t)) for t in streams.get(s.name, []) if t.id in contrib[s.pos]]
            for s in query.streams}
    per_stream = {n: sum(v) for n, v in size.items()}
    by_site = {site: sum(b for n, b in per_stream.items() if query.stream(n).site != site)
               for site in (sites or query.nodes)}
    best = min(by_site, key=lambda x: (by_site[x], x))
    keys = 0
    empty = len(encode_body(KeyBatch([])))
    for s in query.streams:
        if s.site == best:
            continue
        batches: dict[int, set[tuple[Value, ...]]] = {}
        for t in streams.get(s.name, []):
            if t.id not in contrib[s.pos]:
                batches.setdefault(t.ts // tau, set()).add(tuple(t.key))
        keys += sum(len(encode_body(KeyBatch(sorted(ks, key=repr)))) - empty for ks in batches.values())
    return Floor(best, by_site[best], keys, by_site, {s.name: len(contrib[s.pos]) for s in query.streams})


def main(argv: Optional[list[str]] = None) -> int:
    """``python -m joinlib.costs.floor QUERY DATA [--json OUT]``: the floor of a data set."""
    ap = argparse.ArgumentParser(prog="python -m joinlib.costs.floor",
                                 description="The floor (bytes of the tuples that take part in a result and are "
                                             "not at the result site, best site) and floor + keys of a data set.")
    ap.add_argument("query", type=Path, help="query file (.yaml or .sql)")
    ap.add_argument("data", type=Path)
    ap.add_argument("--json", type=Path, help="also write the figures as JSON here")
    a = ap.parse_args(argv)
    q = load_query_file(a.query)
    f = floor(q, load_streams(q, a.data))
    doc = {"site": f.site, "floor": f.bytes, "floor_keys": f.with_keys, "by_site": f.by_site,
           "contributors": f.contributors}
    print(f"floor {f.bytes:,} bytes (results at {f.site}); floor + keys {f.with_keys:,}; "
          f"contributing tuples {f.contributors}")
    if a.json:
        a.json.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
