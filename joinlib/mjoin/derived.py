"""Derived streams: the result stream of one MJoin operator, read as an input by another.

An MJoin tree (:mod:`joinlib.pmjoin.tree`: STREAMJOINOPT's plans, seed 002) runs as one *operator
query* per MJoin: a join, at the operator's node, of its inputs (``central`` at that node: every
input shipped there once, all windows kept there). An input that is itself an MJoin is a
**derived stream** born at that MJoin's node. Its tuples are the child's results, flattened to
their base tuples (``Tup.rest`` carries them, so shipping a derived tuple costs what shipping the
joined row costs), its key is the base tuples' keys concatenated (attributes ``S1.a``), its time
is its latest component's.

**Windows on derived streams expire on the earliest component.** Under the output contract
(:mod:`joinlib.reference`, time windows) a set of base tuples is a result iff it satisfies every
predicate and each tuple lies in its window as seen from the latest one: ``max ts - t.ts <= W_t``.
A derived tuple ``d`` is alive for a later tuple at ``t`` iff every component is; since
``d.ts >= c.ts``, that implies ``t - d.ts <= min W_c``. So the operator query keeps ``d`` in a
window of size ``min W_c`` (never too small: no result is missed) and every operator checks the
exact condition on the flattened components of what it produces (:func:`alive`), dropping the few
extra ones (a window of ``min W_c`` over-approximates it). Ties between equal timestamps decide
only which tuple is the head, never whether a combination is a result, so the operators' own
(ts, position, id) order does not matter. Tuple-count windows have no such argument (the last N
tuples depend on the order) and are refused.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Optional

from joinlib.errors import PlanError
from joinlib.model import Predicate, Query, Stream, Tup, Window, equality_classes
from joinlib.plan.logical import bfs_order
from joinlib.pmjoin.tree import Leaf, MJoin, Tree, describe, operators, streams_of, to_json
from joinlib.protocol.avro import decode_tuple_list, encode_tuple_list


@dataclass(frozen=True)
class Operator:
    """One MJoin of a tree as a query of its own: ``query`` has one stream per input, and
    ``parts[i]`` names the base streams input ``i`` carries (one for a leaf; a derived stream's
    components sorted by name: the same in every query, so another query's operator can read it).
    ``parent``/``slot``: the operator and input stream its results feed (None for the root, whose
    results are the tree's)."""

    query: Query
    node: str
    parts: tuple[tuple[str, ...], ...]
    parent: Optional[int]
    slot: Optional[str]

    @property
    def name(self) -> str:
        return self.query.name

    def is_derived(self, stream: str) -> bool:
        return len(self.parts[self.query.stream(stream).pos]) > 1

    @property
    def bases(self) -> tuple[str, ...]:
        """The base streams below it, sorted by name."""
        return tuple(sorted(n for part in self.parts for n in part))

    @property
    def output(self) -> str:
        """The name of its derived stream (its readers' input)."""
        return derived_name(self.bases)

    @property
    def sites(self) -> list[str]:
        """The sites that run it: its inputs' and its own."""
        return list(dict.fromkeys([*(s.site for s in self.query.streams), self.node]))


@dataclass(frozen=True)
class TreeProgram:
    """An MJoin tree lowered: its operators, children before parents (the root last)."""

    base: Query
    tree: Tree
    ops: tuple[Operator, ...]

    @property
    def root(self) -> Operator:
        return self.ops[-1]

    def describe(self) -> str:
        return describe(self.tree)

    def to_json(self) -> dict[str, object]:
        return {"mjoin_tree": to_json(self.tree)}


def derived_name(parts: Sequence[str]) -> str:
    return "+".join(parts)


def lower_tree(query: Query, tree: Tree) -> TreeProgram:
    """The operator queries of ``tree`` over ``query``'s streams; a tree that does not fit the
    query (a stream missing or twice, a leaf away from its stream's site, an unknown node, an MJoin
    whose inputs share no predicate, a tuple-count window) is a :class:`PlanError`."""
    _check_tree(query, tree)
    mjoins = list(operators(tree))
    index = {id(op): i for i, op in enumerate(mjoins)}
    parent: dict[int, tuple[int, str]] = {}
    ops: list[Operator] = []
    for i, op in enumerate(mjoins):
        parts = tuple(tuple(sorted(streams_of(t))) for t in op.inputs)
        streams = tuple(_input_stream(query, t, p, pos)
                        for pos, (t, p) in enumerate(zip(op.inputs, parts, strict=True)))
        for t, s in zip(op.inputs, streams, strict=True):
            if isinstance(t, MJoin):
                parent[index[id(t)]] = (i, s.name)
        preds = _predicates(query, streams, parts)
        sites = {s.site for s in streams}  # every node of the base query is a node of each operator's
        net = replace(query.network, nodes=tuple(n for n in query.nodes if n not in sites))
        q = Query(f"{query.name}.mj{i}", streams, preds, net, query.execution)
        _check_connected(q, op)
        ops.append(Operator(q, op.node, parts, None, None))
    ops = [Operator(o.query, o.node, o.parts, *parent.get(i, (None, None))) for i, o in enumerate(ops)]
    return TreeProgram(query, tree, tuple(ops))


def _check_tree(query: Query, tree: Tree) -> None:
    names = streams_of(tree)
    if sorted(names) != sorted(query.names):
        twice = sorted({n for n in names if names.count(n) > 1})
        missing = sorted(set(query.names) - set(names))
        unknown = sorted(set(names) - set(query.names))
        what = "; ".join(x for x in (twice and f"twice: {', '.join(twice)}",
                                     missing and f"missing: {', '.join(missing)}",
                                     unknown and f"not in {query.name}: {', '.join(unknown)}") if x)
        raise PlanError(f"the MJoin tree must use every stream of {query.name} once ({what})")
    if isinstance(tree, Leaf):
        raise PlanError("an MJoin tree needs at least one MJoin")
    check_windows(query)
    for op in operators(tree):
        if op.node not in query.nodes:
            raise PlanError(f"no node {op.node!r} for an MJoin (nodes: {', '.join(query.nodes)})")
        for t in op.inputs:
            if isinstance(t, Leaf) and t.node != query.stream(t.stream).site:
                raise PlanError(f"leaf {t.stream}@{t.node}: {t.stream} is born at {query.stream(t.stream).site}")


def check_windows(query: Query) -> None:
    for s in query.streams:
        if not s.window.is_time:
            raise PlanError(f"MJoin trees need time windows; {s.name} has a window of {s.window} (the last N "
                            "tuples of a joined stream are not the last N of each component)")


def _input_stream(query: Query, t: Tree, parts: tuple[str, ...], pos: int) -> Stream:
    if isinstance(t, Leaf):
        s = query.stream(t.stream)
        return Stream(s.name, pos, s.site, s.window, s.join_attrs, s.stats)
    bases = [query.stream(p) for p in parts]
    window = Window("time", min(b.window.size for b in bases))
    attrs = tuple(f"{b.name}.{a}" for b in bases for a in b.join_attrs)
    return Stream(derived_name(parts), pos, t.node, window, attrs)


def _predicates(query: Query, streams: Sequence[Stream], parts: Sequence[tuple[str, ...]]) -> tuple[Predicate, ...]:
    """What the base predicates imply between the inputs, as predicates on the inputs' attributes.

    Equality is transitive, so per equality class every member carried by the inputs is equated to
    one anchor, a member of another input (the anchor of a member of the anchor's own input is a
    member of a second input). So two inputs joined only through a third (S1 and S3 of
    S1.a = S2.a = S3.a) are joined directly, not by a cross product; and two attributes of one stream
    in one class (S0.k = S1.k = S0.x) are equal in the output although no predicate names both. A
    class with members in one input only is left to the operators above (the root has them all)."""
    find = equality_classes(query.predicates)
    classes: dict[tuple[str, str], list[tuple[int, tuple[str, str]]]] = {}
    for i, names in enumerate(parts):
        for n in names:
            for attr in query.stream(n).join_attrs:
                ref = (streams[i].name, attr if len(names) == 1 else f"{n}.{attr}")
                classes.setdefault(find((n, attr)), []).append((i, ref))
    out: dict[Predicate, None] = {}
    for members in classes.values():
        (ia, anchor), others = members[0], members[1:]
        second = next((m for j, m in others if j != ia), None)
        if second is None:
            continue
        for j, m in others:
            out[Predicate(*anchor, *m) if j != ia else Predicate(*m, *second)] = None
    return tuple(out)


def _check_connected(q: Query, op: MJoin) -> None:
    seen = {q.names[0], *bfs_order(q, q.names[0])}
    if len(seen) < len(q.names):
        raise PlanError(f"the MJoin at {op.node} over {', '.join(q.names)} would be a cross product: "
                        f"no predicate joins {', '.join(n for n in q.names if n not in seen)} to the others")


# ---------------------------------------------------------------------------- sharing


@dataclass(frozen=True)
class Deployment:
    """The operators of several queries' trees, each distinct operator once (seed 001's reuse).

    Two MJoins are the same operator when they join the same base streams (site, window and join
    attributes alike) with the same predicates among them, at the same node, from inputs that carry
    the same streams: they make the same derived stream there, whatever tree is below their inputs
    (an input is itself shared only if it, too, is the same operator). ``consumers[i]`` lists the (operator, input
    stream) pairs operator ``i``'s results feed; ``roots[i]`` the queries whose results they are;
    ``windows[i]`` the time window of each base stream below operator ``i``."""

    ops: tuple[Operator, ...]
    consumers: tuple[tuple[tuple[int, str], ...], ...]
    roots: tuple[tuple[Query, ...], ...]
    windows: tuple[Mapping[str, int], ...]
    queries: tuple[Query, ...]

    def owners(self, i: int) -> tuple[str, ...]:
        """The queries whose trees use operator ``i`` (its reference count is their number)."""
        out: dict[str, None] = {}
        todo = [i]
        while todo:
            j = todo.pop()
            out.update(dict.fromkeys(q.name for q in self.roots[j]))
            todo.extend(p for p, _ in self.consumers[j])
        return tuple(sorted(out))


def signatures(prog: TreeProgram) -> list[tuple[object, ...]]:
    """What each operator of ``prog`` computes: its base streams (site, window, join attributes) and the
    equalities it and the operators below it enforce among their attributes, as classes (canonical).
    An operator's predicates come from its whole query's equality classes, so two queries with the
    same streams below an operator may still make it compute different things: their signatures differ."""
    out: list[tuple[object, ...]] = []
    enforced: list[list[tuple[tuple[str, str], tuple[str, str]]]] = []
    for k, op in enumerate(prog.ops):
        pairs = [p for i, o in enumerate(prog.ops[:k]) if o.parent == k for p in enforced[i]]  # children first
        for p in op.query.predicates:
            pairs.append((_base_attr(op, p.left, p.left_attr), _base_attr(op, p.right, p.right_attr)))
        enforced.append(pairs)
        find = equality_classes(Predicate(*a, *b) for a, b in pairs)
        classes: dict[tuple[str, str], list[tuple[str, str]]] = {}
        for a, b in pairs:
            for x in (a, b):
                classes.setdefault(find(x), []).append(x)
        names = op.bases
        base = prog.base
        streams = tuple((n, base.stream(n).site, base.stream(n).window.size, base.stream(n).join_attrs) for n in names)
        out.append((streams, tuple(sorted(tuple(sorted(set(c))) for c in classes.values()))))
    return out


def _base_attr(op: Operator, stream: str, attr: str) -> tuple[str, str]:
    if op.is_derived(stream):
        name, _, a = attr.partition(".")
        return (name, a)
    return (stream, attr)


def deploy(programs: Sequence[TreeProgram], share: bool = True) -> Deployment:
    """The operators of ``programs`` with every repeated operator kept once (``share``; not for the
    partitions of one query, whose streams of one name carry different tuples); query names must differ.
    Sharing takes a stream name to mean one stream: the same tuples in every query that names it."""
    names = [p.base.name for p in programs]
    if len(set(names)) < len(names):
        raise PlanError(f"two queries named {next(n for n in names if names.count(n) > 1)!r}")
    ops: list[Operator] = []
    index: dict[tuple[object, ...], int] = {}
    consumers: list[dict[tuple[int, str], None]] = []
    roots: list[list[Query]] = []
    windows: list[dict[str, int]] = []
    for prog in programs:
        mapped: list[int] = []
        for op, sig in zip(prog.ops, signatures(prog), strict=True):
            key = (sig, op.node, tuple(sorted(op.parts)), None if share else prog.base.name)
            if key not in index:
                index[key] = len(ops)
                ops.append(op)
                consumers.append({})
                roots.append([])
                windows.append({n: prog.base.stream(n).window.size for p in op.parts for n in p})
            mapped.append(index[key])
        for i, op in enumerate(prog.ops):
            if op.parent is None:
                roots[mapped[i]].append(prog.base)
            else:
                consumers[mapped[i]][(mapped[op.parent], op.slot or "")] = None
    return Deployment(tuple(ops), tuple(tuple(c) for c in consumers), tuple(tuple(r) for r in roots),
                      tuple(windows), tuple(p.base for p in programs))


# ---------------------------------------------------------------------------- tuples

Named = list[tuple[str, Tup]]   # a result's base tuples by stream name, sorted by name


def components(op: Operator, row: Sequence[Tup]) -> Named:
    """The base tuples of an operator's result row, by base stream name (sorted)."""
    out: Named = []
    for t in row:
        names = op.parts[t.pos]
        if len(names) == 1:
            out.append((names[0], t))
        else:  # a derived tuple: its components, ``pos`` = index in the derived stream's parts
            out.extend((names[c.pos], c) for c in decode_tuple_list(t.rest))
    out.sort(key=_first)
    return out


def _first(x: tuple[str, Tup]) -> str:
    return x[0]


def alive(windows: Mapping[str, int], comps: Named) -> bool:
    """Does every component lie in its (time) window as seen from the latest one (the output contract)?"""
    last = max(t.ts for _, t in comps)
    return all(last - t.ts <= windows[n] for n, t in comps)


def windows_of(query: Query) -> dict[str, int]:
    return {s.name: s.window.size for s in query.streams}


def derived_tuple(comps: Named, pos: int, seq: int) -> Tup:
    """The derived tuple of a result, as input ``pos`` of the reading operator; rank ``seq`` is also its id."""
    parts = [Tup(i, t.id, t.ts, t.seq, t.key, t.rest) for i, (_, t) in enumerate(comps)]
    key = tuple(v for t in parts for v in t.key)
    return Tup(pos, seq, max(t.ts for t in parts), seq, key, encode_tuple_list(parts))


def base_row(query: Query, comps: Named) -> tuple[Tup, ...]:
    """A result's tuples at their positions in ``query`` (what sinks of the base query take)."""
    row = [Tup(query.stream(n).pos, t.id, t.ts, t.seq, t.key, t.rest) for n, t in comps]
    row.sort(key=lambda t: t.pos)
    return tuple(row)


def leaf_tuple(t: Tup, pos: int) -> Tup:
    """A base tuple as input ``pos`` of an operator query."""
    return Tup(pos, t.id, t.ts, t.seq, t.key, t.rest)


def moved(tups: Sequence[Tup], pos: int, delta: int, horizon: int) -> list[Tup]:
    """Derived tuples of a shared operator moved ``delta`` ms (from its origin to a reader's) as input
    ``pos`` of the reader, their components too; those older than ``horizon`` after the move are dropped
    (they can meet no tuple of the reader's: docs/multiquery.md "Shared operators")."""
    out = []
    for t in tups:
        if t.ts + delta < horizon:
            continue
        rest = t.rest if delta == 0 else encode_tuple_list([Tup(c.pos, c.id, c.ts + delta, c.seq, c.key, c.rest)
                                                            for c in decode_tuple_list(t.rest)])
        out.append(Tup(pos, t.id, t.ts + delta, t.seq, t.key, rest))
    return out

