"""The floor's contributors (a full reducer per head tuple) equal those of the reference join."""
from __future__ import annotations

import random

import pytest

from joinlib.costs.floor import contributors, floor
from joinlib.model import Execution, Network, Predicate, Query, Stream, Tup, Window
from joinlib.protocol.avro import encode_tuple
from joinlib.reference import reference_join

PAIRS = {"chain": lambda m: [(i, i + 1) for i in range(m - 1)],
         "star": lambda m: [(0, i) for i in range(1, m)],
         "clique": lambda m: [(i, j) for i in range(m) for j in range(i + 1, m)]}


def random_case(rng: random.Random):
    m, topo, shared = rng.choice([2, 3, 4]), rng.choice(list(PAIRS)), rng.random() < 0.5
    attrs: dict[int, list[str]] = {i: [] for i in range(m)}
    preds = []
    for a, b in PAIRS[topo](m):
        name = "k" if shared else f"e{a}{b}"
        for x in (a, b):
            if name not in attrs[x]:
                attrs[x].append(name)
        preds.append(Predicate(f"S{a}", name, f"S{b}", name))
    streams = []
    for i in range(m):
        w = Window("time", rng.choice([20, 50])) if rng.random() < 0.7 else Window("tuples", rng.choice([2, 5]))
        streams.append(Stream(f"S{i}", i, rng.choice("abc"), w, tuple(attrs[i])))
    q = Query("t", tuple(streams), tuple(preds), Network(), Execution(10, 5))
    data = {}
    for s in streams:
        ts, tups = 0, []
        for j in range(rng.randint(0, 25)):
            ts += rng.choice([0, 1, 3, 7])
            tups.append(Tup(s.pos, j, ts, j, tuple(rng.choice("xyz") for _ in s.join_attrs), b"p" * rng.randint(0, 9)))
        data[s.name] = tups
    return q, data


@pytest.mark.parametrize("seed", range(6))
def test_contributors_equal_the_reference_joins(seed):
    rng = random.Random(seed)
    for _ in range(40):
        q, data = random_case(rng)
        want: list[set[int]] = [set() for _ in q.streams]
        for (ids, _), _n in reference_join(q, data).items():
            for k, i in enumerate(ids):
                want[k].add(i)
        assert contributors(q, data) == want


def test_floor_is_the_contributors_bytes_away_from_the_best_site():
    rng = random.Random(7)
    for _ in range(30):
        q, data = random_case(rng)
        f = floor(q, data)
        contrib = contributors(q, data)
        for site, got in f.by_site.items():
            want = sum(len(encode_tuple(t)) for s in q.streams if s.site != site
                       for t in data[s.name] if t.id in contrib[s.pos])
            assert got == want
        assert f.bytes == min(f.by_site.values()) and f.with_keys >= f.bytes
