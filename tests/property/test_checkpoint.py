"""A host crashes and restarts from a checkpoint (joinlib.runtime.checkpoint); the run stays exact.

The harness below drives the hosts of a plan (or of several plan generations switching at random
epochs) directly, without the simulated network: per-site source inputs (one epoch's tuples and
its watermark per step, the ``last_epoch`` marker somewhere among them) and per-destination
message queues delivered in a random order, each input followed by ``host.run()``.  Every input
a host is given is recorded.

A crash of host N: at step k take ``snapshot(N)`` and a deep copy of its window stores;
let the run go on for d more steps (N's *doomed* work: its messages reach their receivers,
its results are lost); then build a fresh host of the same site with the same instances over
the copied stores, ``restore`` it, and re-give it, in order, every input N got after the
snapshot.  N's results are its emissions up to the snapshot plus everything the restored host
emits.  The whole run must still produce exactly the reference join: each result once.
"""
from __future__ import annotations

import copy
import os
import random
from collections import Counter
from typing import Any, Optional

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from joinlib.algorithms import ALGORITHMS
from joinlib.model import Execution, Network, Predicate, Query, Stream, Tup, Window
from joinlib.plan import logical as plans_mod
from joinlib.protocol import wire
from joinlib.protocol.messages import Body
from joinlib.reference import reference_join
from joinlib.runtime import checkpoint
from joinlib.runtime.checkpoint import CheckpointError, restore, snapshot
from joinlib.runtime.deploy import generations
from joinlib.runtime.host import Host
from joinlib.runtime.instance import InstanceSpec
from joinlib.runtime.sink import CollectingSink
from joinlib.state.memory import MemoryWindowStore
from joinlib.testing import assert_same
from joinlib.testing.strategies import any_plans, queries, stream_data

# CHECKPOINT_EXAMPLES=500 python -m pytest tests/property/test_checkpoint.py: a longer hunt
EXAMPLES = int(os.environ.get("CHECKPOINT_EXAMPLES", "60"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FEWER = settings(SETTINGS, max_examples=max(1, EXAMPLES // 2))


# ----------------------------------------------------------------------------- the harness

class _Queues:
    """The transport: one queue per destination site.  Also checks that a message sent twice
    on a flow for an epoch (a restarted node redoing its work) is the same message."""

    def __init__(self, sites) -> None:
        self.q: dict[str, list] = {s: [] for s in sites}
        self.sent = 0
        self.by_src: dict[str, list[tuple]] = {s: [] for s in sites}  # (dst, gen, flow, epoch) in send order
        self.envs: dict[str, list] = {s: [] for s in sites}  # the envelopes, the same order
        self.bodies: dict[tuple, Body] = {}

    def send(self, env) -> None:
        key = (env.dst, env.gen, env.flow, env.epoch)
        first = self.bodies.setdefault((env.src,) + key, env.body)
        if first is not env.body:
            assert wire.encode_body(first) == wire.encode_body(env.body), (
                f"{env.src} sent two different messages on flow {env.flow}, epoch {env.epoch}:\n"
                f"{first}\n{env.body}")
        self.by_src[env.src].append(key)
        self.envs[env.src].append(env)
        self.q[env.dst].append(env)
        self.sent += 1


class _Snap:
    def __init__(self, site: str, blob: bytes, stores: dict, log_pos: int, emitted: int, sent: int) -> None:
        self.site, self.blob, self.stores = site, blob, stores
        self.log_pos, self.emitted, self.sent = log_pos, emitted, sent


class Harness:
    """Every site's node, driven one input at a time, deterministically from ``seed``."""

    def __init__(self, query: Query, data: dict[str, list[Tup]], plan, seed: int) -> None:
        self.query, self.specs, self.plan = query, generations(query, plan), plan
        self.rng = random.Random(seed)
        tau = query.execution.interval_ms
        all_ts = [t.ts for tups in data.values() for t in tups]
        last = max(all_ts) // tau if all_ts else 0
        self.sites = self._sites()
        self.net = self._queues()
        self.sinks = {s: CollectingSink(query) for s in self.sites}
        self.stores: dict[str, dict[str, MemoryWindowStore]] = {}
        self.nodes = {s: self._node(s) for s in self.sites}
        self.log: dict[str, list[tuple]] = {s: [] for s in self.sites}
        # each site's source inputs: epoch by epoch, its streams' tuples and watermark,
        # with the end marker put at a random place among them
        self.src: dict[str, list[tuple]] = {}
        for site in self.sites:
            items: list[tuple] = [
                ("feed", s.name, self._tuples(site, s.name, data, x * tau, (x + 1) * tau), (x + 1) * tau)
                for x in range(last + 1) for s in query.streams if s.site == self._site_of(site)]
            items.insert(self.rng.randint(0, len(items)), ("end", last))
            self.src[site] = items
        self.src_pos = {s: 0 for s in self.sites}
        self.steps = 0
        self.lost = self.resent = 0  # results thrown away, messages sent again (statistics)
        self.doomed: list[tuple[str, int, list]] = []  # (site, sends before the snapshot, doomed sends)

    # what a subclass may change (tests/property/test_scale_out_handover.py: a host per site and partition)
    def _sites(self) -> list[str]:
        """The hosts, by name."""
        return list(dict.fromkeys(n for spec in self.specs for n in spec.ir.nodes))

    def _queues(self) -> _Queues:
        return _Queues(self.sites)

    def _site_of(self, name: str) -> str:
        return name

    def _tuples(self, name: str, stream: str, data: dict[str, list[Tup]], lo: int, hi: int) -> list[Tup]:
        """The tuples of ``stream`` with lo <= ts < hi that host ``name`` is fed."""
        return [t for t in data.get(stream, []) if lo <= t.ts < hi]

    def _make_host(self, name: str, factory: Any) -> Host:
        return make_host(self.specs, name, self.net, self.sinks[name], factory)

    def _node(self, site: str, stores: Optional[dict] = None) -> Host:
        if stores is None:
            stores = {}

            def factory(name: str) -> MemoryWindowStore:
                assert name not in stores, f"store {name} made twice"
                stores[name] = MemoryWindowStore()
                return stores[name]
        else:
            def factory(name: str) -> MemoryWindowStore:
                return stores[name]
        self.stores[site] = stores
        return self._make_host(site, factory)

    # ------------------------------------------------------------------ inputs
    def give(self, site: str, inp: tuple) -> None:
        node = self.nodes[site]
        self.log[site].append(inp)
        if inp[0] == "feed":
            node.feed(self.query.name, inp[1], inp[2], inp[3])
        elif inp[0] == "msg":
            node.on_message(inp[1])
        else:
            node.set_last(self.query.name, inp[1])
        node.run()

    def step(self) -> bool:
        """One input to one node; False once there is nothing left to give."""
        options = [("src", s) for s in self.sites if self.src_pos[s] < len(self.src[s])]
        options += [("msg", s) for s in self.sites if self.net.q[s]]
        if not options:
            return False
        kind, site = self.rng.choice(options)
        if kind == "src":
            inp = self.src[site][self.src_pos[site]]
            self.src_pos[site] += 1
        else:
            queue = self.net.q[site]
            # mostly FIFO, sometimes any message: exactness does not depend on the order
            i = 0 if self.rng.random() < 0.5 else self.rng.randrange(len(queue))
            inp = ("msg", queue.pop(i))
        self.give(site, inp)
        self.steps += 1
        return True

    def run(self, steps: Optional[int] = None) -> None:
        n = 0
        while (steps is None or n < steps) and self.step():
            n += 1

    def run_until_busy(self, site: str, rows_only: bool = False) -> None:
        """Step until ``site``'s node holds work between phases (rows waiting for its next step,
        or with ``rows_only`` false temporaries of a multi-phase step): the states a crash is
        least likely to hit at random."""
        while not _busy(self.nodes[site], rows_only) and self.step():
            pass

    # ------------------------------------------------------------------ crash and restart
    def snapshot(self, site: str) -> _Snap:
        return _Snap(site, snapshot(self.nodes[site]), copy.deepcopy(self.stores[site]),
                     len(self.log[site]), len(self.sinks[site].results), len(self.net.by_src[site]))

    def crash(self, site: str, snap: _Snap, deliver: bool = False, messages_first: bool = False) -> None:
        """Replace ``site``'s node by a fresh one restored from ``snap`` and re-give it
        every input its predecessor got after the snapshot.  ``deliver``: first hand the
        receivers whatever the doomed node sent that is still queued (else it arrives later,
        interleaved with the copies the restarted node sends)."""
        assert snap.site == site
        if deliver:
            for env in self.net.envs[site][snap.sent:]:
                queue = self.net.q[env.dst]
                i = next((i for i, x in enumerate(queue) if x is env), None)
                if i is not None and env.dst != site:
                    self.give(env.dst, ("msg", queue.pop(i)))
        self.lost += len(self.sinks[site].results) - snap.emitted
        del self.sinks[site].results[snap.emitted:]  # the doomed node's results are lost
        sent = self.net.by_src[site]
        self.doomed.append((site, snap.sent, sent[snap.sent:]))  # must all be sent again
        del sent[snap.sent:], self.net.envs[site][snap.sent:]
        node = self.nodes[site] = self._node(site, copy.deepcopy(snap.stores))
        restore(node, snap.blob)
        suffix = self.log[site][snap.log_pos:]
        del self.log[site][snap.log_pos:]
        sent_before = self.net.sent
        for inp in self._reread(suffix, messages_first):
            self.give(site, inp)
        self.resent += self.net.sent - sent_before

    def _reread(self, suffix: list[tuple], messages_first: bool = False) -> list[tuple]:
        """The inputs a restarted node reads again, as Kafka gives them back: in order within each
        topic (a source stream, the node's inbound messages, control), any interleaving across
        (``messages_first``: every message before any source input, the worst case)."""
        if messages_first:
            return [i for i in suffix if i[0] == "msg"] + [i for i in suffix if i[0] != "msg"]
        channels: dict[object, list[tuple]] = {}
        for inp in suffix:
            channels.setdefault(inp[1] if inp[0] == "feed" else inp[0], []).append(inp)
        queues = [list(reversed(c)) for c in channels.values()]
        out = []
        while queues:
            q = self.rng.choice(queues)
            out.append(q.pop())
            if not q:
                queues.remove(q)
        return out

    # ------------------------------------------------------------------ outcome
    def results(self) -> Counter:
        stuck = [s for s, n in self.nodes.items() if not n.finished]
        assert not stuck, f"hosts not finished: {stuck} " + "; ".join(self.nodes[s].stuck() for s in stuck)
        for site, pos, doomed in self.doomed:
            again = set(self.net.by_src[site][pos:])
            assert again.issuperset(doomed), (
                f"restarted {site} did not send again {sorted(set(doomed) - again)[:6]}")
        left = {s: sorted(n.inbox) for s, n in self.nodes.items() if n.inbox}
        assert not left, f"messages never used (a copy not recognized as one?): {left}"
        return Counter((ids, ts) for sink in self.sinks.values() for ids, ts, _ in sink.results)


def make_host(specs: list[InstanceSpec], site: str, transport: Any, sink: Any, factory: Any) -> Host:
    host = Host(site, transport, sink, store_factory=factory)
    for spec in specs:
        if site in spec.ir.nodes:
            host.install(spec)
    return host


def _busy(host: Host, rows_only: bool = False) -> bool:
    return any(any(i.pending.values()) or (not rows_only and bool(i.held)) for i in host.instances.values())


# ----------------------------------------------------------------------------- strategies

@st.composite
def runs(draw, max_streams: int = 4):
    query = draw(queries(max_streams=max_streams))
    data = draw(stream_data(query))
    plan = draw(any_plans(query))
    tau = query.execution.interval_ms
    last = max([t.ts for tups in data.values() for t in tups] or [0]) // tau
    starts = sorted(set(draw(st.lists(st.integers(1, last + 2), max_size=2), label="switches")))
    if not starts:
        return query, data, plan
    return query, data, [(0, plan)] + [(s, draw(any_plans(query))) for s in starts]


def _describe(query, plan, seed, crashes) -> str:
    text = plan.to_json() if isinstance(plan, plans_mod.Plan) else [(e, p.to_json()) for e, p in plan]
    return (f"query {query.name} streams {[(s.name, s.site, s.window) for s in query.streams]} "
            f"preds {query.predicates} tau {query.execution.interval_ms}\n"
            f"plan {text}\nseed {seed} crashes {crashes}")


# ----------------------------------------------------------------------------- the property

@SETTINGS
@given(st.data())
def test_restarted_node_keeps_the_run_exact(data):
    query, streams, plan = data.draw(runs())
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    want = reference_join(query, streams)

    # the run without a crash: the harness itself must be exact; its length scales the crashes
    clean = Harness(query, streams, plan, seed)
    ever = set()  # (site, busy mode) seen in the clean run
    while clean.step():
        for site, node in clean.nodes.items():
            ever |= {(site, mode) for mode in ("any", "rows") if _busy(node, mode == "rows")}
    assert_same(clean.results(), want, f"no crash\n{_describe(query, plan, seed, [])}")
    total = clean.steps

    # one or two crashes, one after the other: (site, snapshot at step k, d doomed steps)
    # (busy: the snapshot waits, from step k on, until the node holds work between phases,
    # "rows": rows waiting for its next step)
    crashes = []
    at = 0
    for _ in range(data.draw(st.integers(1, 2), label="crashes")):
        site = data.draw(st.sampled_from(clean.sites))
        k = at + (total - at) * data.draw(st.integers(0, 100)) // 100
        d = (total - k) * data.draw(st.integers(0, 100)) // 100
        modes = [None, None] + [mode for mode in ("any", "rows") if (site, mode) in ever]
        crashes.append((site, k, d, data.draw(st.sampled_from(modes), label="busy"),
                        data.draw(st.booleans(), label="deliver doomed sends")))
        at = k + d
    h = Harness(query, streams, plan, seed)
    for site, k, d, busy, deliver in crashes:
        h.run(max(0, k - h.steps))
        if busy:
            h.run_until_busy(site, busy == "rows")
        snap = h.snapshot(site)
        h.run(d)
        h.crash(site, snap, deliver)
    h.run()
    got = h.results()
    event(f"results: {'none' if not want else 'some'}; "
          f"doomed results lost: {'yes' if h.lost else 'no'}; messages re-sent: {'yes' if h.resent else 'no'}")
    assert_same(got, want, _describe(query, plan, seed, crashes))


@FEWER
@given(st.data())
def test_every_node_crashes_once(data):
    """Every site crashes once, each at its own point: one node's doomed interval may overlap
    another's, and a node may restore while its peers replay their own suffixes."""
    query, streams, plan = data.draw(runs(max_streams=3))
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    events = []  # (step, order, kind, site)
    for site in Harness(query, streams, plan, seed).sites:
        k = data.draw(st.integers(0, 60))
        events += [(k, 0, "snap", site), (k + data.draw(st.integers(0, 60)), 1, "crash", site)]
    events.sort()
    h, snaps = Harness(query, streams, plan, seed), {}
    for step, _, kind, site in events:
        h.run(max(0, step - h.steps))
        if kind == "snap":
            snaps[site] = h.snapshot(site)
        else:
            h.crash(site, snaps[site], data.draw(st.booleans(), label="deliver doomed sends"))
    h.run()
    assert_same(h.results(), reference_join(query, streams), _describe(query, plan, seed, events))


@FEWER
@given(st.data())
def test_snapshot_round_trips(data):
    """A fresh host restored from a snapshot has the snapshotted host's state, part by part, and its
    own snapshot restores to that state again; a snapshot with the stores' contents restores into
    empty stores (the path a window jump start takes)."""
    query, streams, plan = data.draw(runs(max_streams=3))
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    h = Harness(query, streams, plan, seed)
    h.run(data.draw(st.integers(0, 200)))
    for site in h.sites:
        if data.draw(st.booleans(), label="busy"):
            h.run_until_busy(site)
        want = checkpoint.state_of(h.nodes[site], with_stores=True)
        blob = snapshot(h.nodes[site])
        assert checkpoint.loads(blob) == checkpoint.state_of(h.nodes[site])
        for _ in range(2):
            stores = copy.deepcopy(h.stores[site])
            fresh = make_host(h.specs, site, _Queues(h.sites), CollectingSink(query), lambda name, s=stores: s[name])
            restore(fresh, blob)
            assert checkpoint.state_of(fresh, with_stores=True) == want
            assert _batches(fresh) == _batches(h.nodes[site])   # a snapshot names them; the store gives them back
            blob = snapshot(fresh)
        empty = make_host(h.specs, site, _Queues(h.sites), CollectingSink(query), None)
        restore(empty, checkpoint.dumps(want))
        assert checkpoint.state_of(empty, with_stores=True) == want
        assert _batches(empty) == _batches(h.nodes[site])


def _batches(host: Host) -> dict[tuple[str, int, str], dict[int, list[Tup]]]:
    """Every window's kept batches B_e (what senders still ship and sequences still start from)."""
    return {k: dict(w.batches) for k, w in host.windows.items()}


# ----------------------------------------------------------------------------- targeted tests

def _two_sites() -> tuple[Query, dict[str, list[Tup]]]:
    q = Query("pair", (Stream("A", 0, "a", Window("time", 30), ("k",)),
                       Stream("B", 1, "b", Window("tuples", 3), ("k",))),
              (Predicate("A", "k", "B", "k"),), Network(5, 1000), Execution(10, 20))
    return q, _data(q, 30, 100, 3)


def _chain3() -> tuple[Query, dict[str, list[Tup]]]:
    """A chain A - B - C on three sites (B joins A on k and C on x): intermediate results."""
    q = Query("chain3", (Stream("A", 0, "a", Window("time", 40), ("k",)),
                         Stream("B", 1, "b", Window("tuples", 4), ("k", "x")),
                         Stream("C", 2, "c", Window("time", 25), ("x",))),
              (Predicate("A", "k", "B", "k"), Predicate("B", "x", "C", "x")),
              Network(5, 1000), Execution(10, 20))
    return q, _data(q, 25, 120, 2)


def _triangle() -> tuple[Query, dict[str, list[Tup]]]:
    """A, B, C pairwise joined on k: with the plans below, two sequences probe one SM-S1 (or
    SM-S2) replica of B at site a, so their steps share a lane there and one waits on the other."""
    q = Query("triangle", (Stream("A", 0, "a", Window("tuples", 5), ("k",)),
                           Stream("B", 1, "b", Window("time", 30), ("k",)),
                           Stream("C", 2, "c", Window("tuples", 3), ("k",))),
              (Predicate("A", "k", "B", "k"), Predicate("B", "k", "C", "k"), Predicate("A", "k", "C", "k")),
              Network(5, 1000), Execution(10, 20))
    return q, _data(q, 20, 120, 3)


def _data(q: Query, n: int, span: int, values: int) -> dict[str, list[Tup]]:
    rnd = random.Random(7)
    data = {}
    for s in q.streams:
        ts = sorted(rnd.randrange(0, span) for _ in range(n))
        data[s.name] = [Tup(s.pos, i, t, i, tuple(f"v{rnd.randrange(values)}" for _ in s.join_attrs), b"r")
                        for i, t in enumerate(ts)]
    return data


def _host(q: Query, plan: plans_mod.Plan, site: str) -> Host:
    return make_host(generations(q, plan), site, _Queues(q.sites), CollectingSink(q), None)


def test_restore_refuses_another_site_or_plan():
    q, data = _two_sites()
    h = Harness(q, data, plans_mod.uniform(q, "SM-S2"), 1)
    h.run(30)
    blob = snapshot(h.nodes["a"])
    with pytest.raises(CheckpointError, match="site a, not b"):
        restore(_host(q, plans_mod.uniform(q, "SM-S2"), "b"), blob)
    with pytest.raises(CheckpointError, match="does not match this plan generation"):
        restore(_host(q, plans_mod.uniform(q, "SM-D2"), "a"), blob)
    switched = make_host(generations(q, [(0, plans_mod.uniform(q, "SM-S2")), (5, plans_mod.uniform(q, "SP-S"))]),
                         "a", _Queues(q.sites), CollectingSink(q), None)
    with pytest.raises(CheckpointError, match="instances"):
        restore(switched, blob)
    # the same plan and site is accepted
    restore(_host(q, plans_mod.uniform(q, "SM-S2"), "a"), blob)


def test_restore_refuses_garbage_other_formats_and_objects():
    q, _ = _two_sites()
    host = _host(q, plans_mod.uniform(q, "SP-D"), "a")
    with pytest.raises(CheckpointError):
        restore(host, b"not a checkpoint")
    st_ = checkpoint.state_of(host)
    st_["format"] = checkpoint.FORMAT + 1
    with pytest.raises(CheckpointError, match="format"):
        restore(host, checkpoint.dumps(st_))
    with pytest.raises(CheckpointError):
        restore(host, checkpoint.dumps([1, 2, 3]))  # type: ignore[arg-type]
    import pickle
    with pytest.raises(CheckpointError, match="class"):  # an object in the blob is refused, never built
        restore(host, pickle.dumps({"format": checkpoint.FORMAT, "x": Tup(0, 1, 2, 3, ())}))


def _plan(q: Query, *seqs) -> plans_mod.Plan:
    return plans_mod.validate(q, plans_mod.Plan(tuple(
        plans_mod.Sequence(head, tuple(plans_mod.Step(o, alg) for o, alg in steps)) for head, steps in seqs)))


def _targets():
    """(name, query and data, plan): every algorithm alone, mixed plans, shared replica lanes."""
    q, _ = _chain3()
    out = [(a, _chain3, plans_mod.uniform(q, a)) for a in ALGORITHMS]
    out.append(("mixed", _chain3, _plan(q, ("A", [("B", "SM-S2"), ("C", "SM-D2")]),
                                        ("B", [("C", "SM-S1"), ("A", "SP-D")]),
                                        ("C", [("B", "SM-D1"), ("A", "SM-S2")]))))
    out.append(("central", _chain3, plans_mod.central(q, "b")))
    out.append(("reduce", _chain3, plans_mod.reduction(q, "c", [("A", "B"), ("B", "C")], "A")))
    out.append(("reduce-skip", _chain3, plans_mod.reduction(q, "c", [("A", "B"), ("B", "C")], "A",
                                                            [("B", "C"), ("A", "B")])))
    t, _ = _triangle()
    for alg in ("SM-S1", "SM-S2"):
        out.append((f"shared-{alg}", _triangle, _plan(t, ("A", [("B", alg), ("C", "SM-D1")]),
                                                      ("B", [("A", "SP-S"), ("C", "SM-D2")]),
                                                      ("C", [("A", "SP-D"), ("B", alg)]))))
    return out


@pytest.mark.parametrize("name,make,plan", _targets(), ids=[n for n, _, _ in _targets()])
def test_crash_at_every_step(name, make, plan):
    """Each node in turn: snapshot at a dozen steps k through the run, crash d = 0, 4 or 16 steps
    later (16: the restarted node reads every message again before any source input, so answers
    come back before it has redone the requests), and at steps where the node holds work between
    phases (temporaries, rows for its next step, d = 1); always exact."""
    q, data = make()
    want = reference_join(q, data)
    assert want, "the data should join"
    clean = Harness(q, data, plan, 3)
    clean.run()
    assert_same(clean.results(), want, "no crash")
    busy: dict[tuple[str, str], list[int]] = {(site, what): [] for site in q.sites for what in ("temp", "pending")}
    probe = Harness(q, data, plan, 3)
    while probe.step():
        for site, node in probe.nodes.items():
            if _busy(node) and not _busy(node, rows_only=True):
                busy[(site, "temp")].append(probe.steps)
            if _busy(node, rows_only=True):
                busy[(site, "pending")].append(probe.steps)
    for site in q.sites:
        points = {(k, d) for k in range(0, clean.steps + 1, max(1, clean.steps // 12)) for d in (0, 4, 16)}
        for what in ("temp", "pending"):
            ks = busy[(site, what)]
            points |= {(k, 1) for k in ks[::max(1, len(ks) // 8)]}
        for k, d in sorted(points):
            h = Harness(q, data, plan, 3)
            h.run(k)
            snap = h.snapshot(site)
            h.run(d)
            h.crash(site, snap, deliver=d > 0, messages_first=d == 16)
            h.run()
            assert_same(h.results(), want, f"{name}: crash of {site} at step {k}+{d}")
