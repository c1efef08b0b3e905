"""Rows between steps named by their tuples' seqs in a store (``Instance.snapshot`` version 3, ``pending_refs``).

A column of an instance's rows whose tuples are all in one window store here -- the very objects -- that a restore
finds as it was at the snapshot (a durable store: in Redis, rolled back to the checkpoint's copy; or one the snapshot
holds, ``with_stores``) is written as the store's name and the seqs, not as the tuples' bytes.  The harness of
``tests/property/test_checkpoint.py`` models a durable store by its deep copy at the snapshot; here its stores say
they are durable, so its crashes restore named rows.
"""
from __future__ import annotations

import copy
from typing import Any

from hypothesis import event, given
from hypothesis import strategies as st

from joinlib.reference import reference_join
from joinlib.runtime import checkpoint
from joinlib.runtime.host import Host
from joinlib.runtime.sink import CollectingSink
from joinlib.state.memory import MemoryWindowStore
from joinlib.testing import assert_same
from tests.property.test_checkpoint import FEWER, Harness, _Queues, make_host, runs
from tests.property.test_checkpoint_delta import _rows


class DurableHarness(Harness):
    """The harness with stores a restarted node finds as of the snapshot (it restores their deep copy), as one in
    Redis, and that say so."""

    def _make_host(self, name: str, factory: Any) -> Host:
        def durable(store: str) -> MemoryWindowStore:
            s = factory(store)
            s.durable = True
            return s
        return super()._make_host(name, durable)


def _named(state: dict[str, Any]) -> int:
    """How many lists of rows the host state names by seq."""
    return sum(len(inst.get("pending_refs", ())) for _, inst in state["instances"])


@FEWER
@given(st.data())
def test_a_node_restarted_from_named_rows_keeps_the_run_exact(data):
    """A crash while rows wait between steps (most of them named by seq), the restarted node given its inputs again:
    each result exactly once."""
    query, streams, plan = data.draw(runs(max_streams=3))
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    h = DurableHarness(query, streams, plan, seed)
    site = data.draw(st.sampled_from(h.sites), label="site")
    h.run(data.draw(st.integers(0, 150), label="steps before"))
    h.run_until_busy(site, rows_only=True)
    snap = h.snapshot(site)
    h.run(data.draw(st.integers(0, 100), label="doomed steps"))
    h.crash(site, snap, data.draw(st.booleans(), label="deliver doomed sends"))
    h.run()
    assert_same(h.results(), reference_join(query, streams), f"plan {plan}, seed {seed}, site {site}")


@FEWER
@given(st.data())
def test_named_rows_come_back_the_same(data):
    """From durable stores and from a snapshot with its stores: the same rows (the stores' own tuples), the same
    state; and rows whose tuples the stores hold are named, not written."""
    query, streams, plan = data.draw(runs(max_streams=3))
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    h = DurableHarness(query, streams, plan, seed)
    h.run(data.draw(st.integers(0, 150)))
    site = data.draw(st.sampled_from(h.sites), label="site")
    h.run_until_busy(site, rows_only=True)
    node = h.nodes[site]
    state = checkpoint.state_of(node)
    stored = {id(t) for s in h.stores[site].values() for t in s.tuples()}
    heads = [r for inst in node.instances.values() for rows in inst.pending.values() if rows for r in rows[:1]]
    if any(all(id(t) in stored for t in r if t is not None) for r in heads):
        assert _named(state) > 0
    event(f"lists of rows named by seq: {'some' if _named(state) else 'none'}")

    stores = copy.deepcopy(h.stores[site])
    fresh = make_host(h.specs, site, _Queues(h.sites), CollectingSink(h.query), lambda name, s=stores: s[name])
    checkpoint.restore(fresh, checkpoint.dumps(state))
    assert _rows(fresh) == _rows(node)
    assert checkpoint.state_of(fresh) == state

    # plain memory stores: named only when the snapshot holds them, and then restored into empty ones
    with_stores = checkpoint.state_of(node, with_stores=True)
    empty = make_host(h.specs, site, _Queues(h.sites), CollectingSink(h.query), None)
    checkpoint.restore(empty, checkpoint.dumps(with_stores))
    assert _rows(empty) == _rows(node)
    assert checkpoint.state_of(empty, with_stores=True) == with_stores
