"""Per-value rate statistics (FStream rates) from a joinlib data directory, and the rate models
of a query file.

``value_rates`` reads ``DIR/<stream>.jsonl`` the way ``joinlib run`` does (:func:`joinlib.data.files.load_streams`)
and counts, per stream, the tuples of every value of the PMJoin's join attribute class over the stream's
observation period (last ts - first ts, as ``joinlib stats`` measures ``rate``: (n - 1) / span, so the
per-value rates are scaled by (n - 1) / n to sum to that rate). ``value_model`` and ``selectivity_model``
turn a query (sites, windows, ``tuple_bytes``, ``selectivity``, processing-only ``network.nodes``) into
the rate models of :mod:`.rates`.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Optional

from joinlib.data.files import load_streams
from joinlib.errors import DataError, PlanError
from joinlib.model import Query, Stream
from joinlib.plan.partition import canonical, order_key
from joinlib.pmjoin.rates import JoinClass, SelectivityModel, StreamSpec, ValueRateModel, ValueRates


def join_classes(query: Query) -> list[list[tuple[str, str]]]:
    """The attribute equality classes of the query's predicates: lists of (stream, attribute),
    transitively closed (S1.a = S2.b and S2.b = S3.c put all three in one class)."""
    parent: dict[tuple[str, str], tuple[str, str]] = {}

    def find(x: tuple[str, str]) -> tuple[str, str]:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for p in query.predicates:
        parent[find((p.left, p.left_attr))] = find((p.right, p.right_attr))
    groups: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for x in list(parent):
        groups.setdefault(find(x), []).append(x)
    order = {n: i for i, n in enumerate(query.names)}
    return sorted((sorted(g, key=lambda m: (order[m[0]], m[1])) for g in groups.values()),
                  key=lambda g: (order[g[0][0]], g[0][1]))


def single_class(query: Query) -> list[tuple[str, str]]:
    """The one equality class covering every stream of a single-attribute PMJoin."""
    classes = join_classes(query)
    if len(classes) != 1 or len({s for s, _ in classes[0]}) != len(query.streams) or \
            len(classes[0]) != len(query.streams):
        shown = "; ".join(" = ".join(f"{s}.{a}" for s, a in c) for c in classes)
        raise PlanError(f"query {query.name}: a PMJoin partitions every stream on one join attribute, but the "
                        f"predicates form {len(classes)} equality class(es): {shown}. Use "
                        "joinlib.pmjoin.findpartition for joins on different attributes")
    return classes[0]


def _spec(s: Stream, rate: Optional[float] = None) -> StreamSpec:
    r = rate if rate is not None else s.stats.rate
    if r is None:
        raise PlanError(f"stream {s.name}: no rate; add 'rate' to the query file or measure it "
                        "(joinlib stats QUERY --data DIR --write OUT.yaml)")
    size = float(s.stats.tuple_bytes) if s.stats.tuple_bytes else 1.0
    if s.window.is_time:
        return StreamSpec(s.name, s.site, r, window_s=s.window.size / 1000.0, tuple_bytes=size)
    return StreamSpec(s.name, s.site, r, window_tuples=s.window.size, tuple_bytes=size)


def value_rates(query: Query, data_dir: Path) -> ValueRates:
    """Per-value rates of every stream on the query's single join attribute class, from data."""
    members = dict(single_class(query))
    if not Path(data_dir).is_dir():
        raise DataError(f"--data {data_dir}: no such directory (expected one <stream>.jsonl per stream)")
    tuples = load_streams(query, data_dir)
    counts: list[Counter[bytes]] = []
    periods: list[float] = []
    seen: dict[bytes, object] = {}
    for s in query.streams:
        tups, i = tuples[s.name], s.attr_index(members[s.name])
        span = (tups[-1].ts - tups[0].ts) / 1000.0 if len(tups) > 1 else 0.0
        if span <= 0:
            raise DataError(f"{data_dir}/{s.name}.jsonl: needs at least two tuples at different times to "
                            "measure rates")
        c: Counter[bytes] = Counter()
        for t in tups:
            key = canonical(t.key[i])
            seen.setdefault(key, t.key[i])
            c[key] += 1
        counts.append(c)
        periods.append(span)
    keys = sorted(seen, key=lambda k: order_key(seen[k]))
    rates = tuple(tuple(c[k] * (sum(c.values()) - 1) / sum(c.values()) / p for k in keys)
                  for c, p in zip(counts, periods, strict=True))
    attr = query.streams[0].name + "." + members[query.streams[0].name]
    return ValueRates(query.names, tuple(seen[k] for k in keys), rates, attr, tuple(periods))


def value_model(query: Query, rates: ValueRates, same_size: bool = False) -> ValueRateModel:
    """The per-value rate model of a single-attribute query (stream order of the query)."""
    single_class(query)
    if rates.streams != query.names:
        raise PlanError(f"the value rates are of streams {rates.streams}, the query has {query.names}")
    specs = [_spec(s, rates.stream_rate(s.name)) for s in query.streams]
    return ValueRateModel(specs, rates.matrix(), query.network.nodes, same_size)


def selectivity_model(query: Query, same_size: bool = False) -> SelectivityModel:
    """The selectivity rate model of any query: declared rates and per-attribute selectivities."""
    idx = {n: i for i, n in enumerate(query.names)}
    classes = []
    for c in join_classes(query):
        members = []
        for s, a in c:
            f = query.stream(s).stats.selectivity_of(a)
            if f is None:
                raise PlanError(f"stream {s}: no selectivity for join attribute {a}; add 'selectivity' to the "
                                "query file or measure it (joinlib stats QUERY --data DIR --write OUT.yaml)")
            members.append((idx[s], f))
        classes.append(JoinClass(" = ".join(f"{s}.{a}" for s, a in c), tuple(members)))
    return SelectivityModel([_spec(s) for s in query.streams], classes, query.network.nodes, same_size)
