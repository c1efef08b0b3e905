"""An instance's rows between steps in a checkpoint: written by column (``Instance.snapshot``'s ``pending_cols``,
snapshot version 2), read back as the same rows; a version 1 snapshot (a list per row) still restores.

The harness of ``tests/property/test_checkpoint.py`` runs a plan until a host holds rows between steps; a fresh host
restored from its snapshot must hold the same rows (the same tuples, the same Nones) and snapshot the same state.
"""
from __future__ import annotations

import copy
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from joinlib.model import Tup
from joinlib.runtime import checkpoint
from joinlib.runtime.host import Host
from joinlib.runtime.sink import CollectingSink
from tests.property.test_checkpoint import FEWER, Harness, _Queues, make_host, runs


def _rows(host: Host) -> dict[Any, list[tuple]]:
    """Every instance's rows between steps, as plain values (a Tup's fields; None stays None)."""
    def plain(t: Any) -> Any:
        return None if t is None else (t.pos, t.id, t.ts, t.seq, t.key, t.rest)
    return {(key, k): [tuple(map(plain, r)) for r in rows]
            for key, inst in host.instances.items() for k, rows in inst.pending.items() if rows}


def _fresh(h: Harness, site: str, blob: bytes) -> Host:
    stores = copy.deepcopy(h.stores[site])
    fresh = make_host(h.specs, site, _Queues(h.sites), CollectingSink(h.query), lambda name, s=stores: s[name])
    checkpoint.restore(fresh, blob)
    return fresh


def _busy_harness(data: Any) -> Harness:
    query, streams, plan = data.draw(runs(max_streams=3))
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    h = Harness(query, streams, plan, seed)
    h.run(data.draw(st.integers(0, 150)))
    return h


@FEWER
@given(st.data())
def test_rows_between_steps_come_back_the_same(data):
    """Rows as the steps made them, plus rows of tuples never encoded (no cached wire bytes) and rows with a None
    where the others have a tuple: the restored host holds the same rows and snapshots the same state."""
    h = _busy_harness(data)
    site = data.draw(st.sampled_from(h.sites), label="site")   # one: the rows added here are never run
    h.run_until_busy(site, rows_only=True)
    node = h.nodes[site]
    for inst in node.instances.values():
        for rows in list(inst.pending.values()):
            if rows:
                r = rows[0]
                rows.append(tuple(None if t is None else Tup(t.pos, t.id, t.ts, t.seq, t.key, t.rest)
                                  for t in r))   # fresh Tups: wire None, encoded at the snapshot
                if sum(t is not None for t in r) > 1:   # a column with a None among tuples
                    first = next(i for i, t in enumerate(r) if t is not None)
                    rows.append(r[:first] + (None,) + r[first + 1:])
    blob = checkpoint.snapshot(node)
    fresh = _fresh(h, site, blob)
    assert _rows(fresh) == _rows(node)
    assert checkpoint.state_of(fresh) == checkpoint.state_of(node) == checkpoint.loads(blob)


@FEWER
@given(st.data())
def test_a_version_1_snapshot_still_restores(data):
    """A checkpoint written before the column form (a list per row under ``pending``) restores the same rows."""
    h = _busy_harness(data)
    for site in h.sites:
        h.run_until_busy(site, rows_only=True)
        node = h.nodes[site]
        state = checkpoint.state_of(node)
        for _, inst in state["instances"]:
            cols = inst.pop("pending_cols")
            inst["v"] = 1
            inst["pending"] = [(si, j, e, [list(r) for r in zip(*[[None] * n if c is None else c for c in cs],
                                                                strict=True)])
                               for si, j, e, n, cs in cols]
        fresh = _fresh(h, site, checkpoint.dumps(state))
        assert _rows(fresh) == _rows(node)
        assert checkpoint.state_of(fresh) == checkpoint.state_of(node)
