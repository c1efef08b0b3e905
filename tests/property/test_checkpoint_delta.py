"""Checkpoints encode only what changed since the last one (``Instance.snapshot`` keeps the encoding of the rows
between steps a list already had), and say exactly what a snapshot taken from scratch says.

The harness of ``tests/property/test_checkpoint.py`` runs a plan; at random steps every host is snapshotted twice:
as a node does (its caches kept from the last checkpoint) and from scratch (the caches dropped first).  The two
must be equal, and a host restored from the incremental one must snapshot the same state again.
"""
from __future__ import annotations

import copy
import random

from hypothesis import given
from hypothesis import strategies as st

from joinlib.runtime import checkpoint
from joinlib.runtime.host import Host
from joinlib.runtime.sink import CollectingSink
from tests.property.test_checkpoint import FEWER, SETTINGS, Harness, _Queues, make_host, runs


def _from_scratch(host: Host) -> dict:
    """The host's state with every instance's snapshot cache dropped (then put back as it was)."""
    saved = {k: i.__dict__.get("_snap_rows") for k, i in host.instances.items()}
    for i in host.instances.values():
        i.__dict__["_snap_rows"] = None
    try:
        return checkpoint.state_of(host)
    finally:
        for k, i in host.instances.items():
            i.__dict__["_snap_rows"] = saved[k]


@SETTINGS
@given(st.data())
def test_incremental_snapshots_equal_snapshots_from_scratch(data):
    query, streams, plan = data.draw(runs(max_streams=3))
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    h = Harness(query, streams, plan, seed)
    rng = random.Random(seed)
    while True:
        h.run(rng.randint(0, 12))
        for site in h.sites:
            node = h.nodes[site]
            got = checkpoint.state_of(node)   # incremental: after the last one of this loop
            assert got == _from_scratch(node), f"site {site}: incremental snapshot differs"
        if not any(h.src_pos[s] < len(h.src[s]) for s in h.sites) and not any(h.net.q.values()):
            break


@FEWER
@given(st.data())
def test_restored_host_snapshots_the_same_state(data):
    """A host restored from an incremental snapshot (its caches empty) and the host it came from (caches full)
    snapshot the same state, now and after both take the same further inputs."""
    query, streams, plan = data.draw(runs(max_streams=3))
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    h = Harness(query, streams, plan, seed)
    h.run(data.draw(st.integers(0, 150)))
    for site in h.sites:
        h.run_until_busy(site, rows_only=True)
        node = h.nodes[site]
        checkpoint.snapshot(node)   # fills the caches
        h.run(data.draw(st.integers(0, 5)))
        blob = checkpoint.snapshot(node)
        stores = copy.deepcopy(h.stores[site])
        fresh = make_host(h.specs, site, _Queues(h.sites), CollectingSink(query), lambda name, s=stores: s[name])
        checkpoint.restore(fresh, blob)
        assert checkpoint.state_of(fresh) == checkpoint.state_of(node) == checkpoint.loads(blob)


@FEWER
@given(st.data())
def test_rows_appended_between_snapshots_are_encoded(data):
    """A list of rows that grows between two snapshots (a step handing on an epoch's output in parts): the second
    snapshot has the old rows' cached encoding and the new rows' own, as a snapshot from scratch does; a list
    replaced by another (taken, then made again) is encoded afresh."""
    query, streams, plan = data.draw(runs(max_streams=3))
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    h = Harness(query, streams, plan, seed)
    h.run(data.draw(st.integers(0, 150)))
    for site in h.sites:
        h.run_until_busy(site, rows_only=True)
        node = h.nodes[site]
        checkpoint.snapshot(node)
        for inst in node.instances.values():
            for rows in list(inst.pending.values()):
                if rows:
                    rows.append(tuple(list(rows[0])))   # a new row object, as expand_rows makes
                    rows.extend(tuple(list(r)) for r in rows[1:3])
        assert checkpoint.state_of(node) == _from_scratch(node)
        for inst in node.instances.values():
            for k, rows in list(inst.pending.items()):
                if rows:
                    inst.pending[k] = list(reversed(rows))   # another list: nothing of the cache applies
        assert checkpoint.state_of(node) == _from_scratch(node)
