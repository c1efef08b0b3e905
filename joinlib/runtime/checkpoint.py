"""Node checkpoints: what a node knows besides its window stores, as bytes.

A node's state is a deterministic function of the inputs handed to it (source batches,
messages, ``end``), and it only changes inside :meth:`Node.run` / ``feed`` / ``on_message``.
So a checkpoint taken between two such calls, together with

* the window stores as they were at that instant (the cluster adapter snapshots its Redis
  keys in the same atomic step, ``joinlib.adapters.redis_checkpoint``), and
* the input positions up to which messages were handed to the node,

lets a fresh :class:`~joinlib.runtime.node.Node` built from the same plan carry on exactly:
it re-reads its inputs from those positions and redoes the same phases, sending the same
messages again (receivers drop epochs they already used, ``Node.taken``) and emitting the
same result batches (the sink skips those already delivered).

Kept: epochs and cursors of the tick group, every lane and every free home; the inbox, the
source queues and watermarks; batches, pending rows and temporaries between phases; the
senders and replicas (minus their stores: they are re-attached by name); the per-flow
``taken`` epochs.  Not kept: the plan (the caller rebuilds the node from it; a checkpoint of
another plan is refused), transport, sink and sensor.
"""
from __future__ import annotations

import hashlib
import json
import pickle
from typing import Any

FORMAT = 1


class CheckpointError(ValueError):
    """The checkpoint does not fit the node (other plan or format)."""


def plan_digest(node) -> str:
    """What the checkpoint must match: query, plan and site (a short hash)."""
    from ..query import query_to_dict
    text = json.dumps([query_to_dict(node.q), node.pp.plan.to_json(), node.site], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _without_store(obj) -> dict:
    return {k: v for k, v in vars(obj).items() if k != "store"}


def state_of(node) -> dict[str, Any]:
    """The node's state as plain Python objects (see the module docstring for what is in it)."""
    return {
        "format": FORMAT, "plan": plan_digest(node),
        "now": node.now, "epoch": node.epoch, "cursor": node.cursor, "last_epoch": node.last_epoch,
        "inbox": node.inbox, "taken": node.taken,
        "source": {k: list(v) for k, v in node.source.items()}, "watermark": node.watermark,
        "batches": node.batches, "pending": dict(node.pending), "temp": node.temp, "step_done": node.step_done,
        "lanes": [(lane.epoch, lane.cursor) for lane in node.lanes],
        "homes": {name: (h.progress, h.epoch) for name, h in node.homes.items()},
        "senders": {rid: _without_store(x) for rid, x in node.senders.items()},
        "replicas": {rid: _without_store(x) for rid, x in node.replicas.items()},
    }


def snapshot(node) -> bytes:
    return pickle.dumps(state_of(node), protocol=pickle.HIGHEST_PROTOCOL)


def restore(node, data: bytes) -> None:
    """Put a :func:`snapshot` back into ``node``, a fresh Node of the same plan and site whose
    stores already hold the windows of the snapshot's instant."""
    from collections import deque
    try:
        st = pickle.loads(data)
    except Exception as e:
        raise CheckpointError(f"unreadable checkpoint: {e}") from None
    if not isinstance(st, dict) or st.get("format") != FORMAT:
        raise CheckpointError(f"checkpoint format {st.get('format') if isinstance(st, dict) else '?'} "
                              f"is not {FORMAT}")
    if st["plan"] != plan_digest(node):
        raise CheckpointError(f"checkpoint of another plan or site (digest {st['plan']}, this node {plan_digest(node)})")
    if len(st["lanes"]) != len(node.lanes) or set(st["senders"]) != set(node.senders) \
            or set(st["replicas"]) != set(node.replicas):
        raise CheckpointError("checkpoint does not match the node's lanes, senders and replicas")
    node.now, node.epoch, node.cursor, node.last_epoch = st["now"], st["epoch"], st["cursor"], st["last_epoch"]
    node.inbox, node.taken = st["inbox"], st["taken"]
    node.source = {k: deque(v) for k, v in st["source"].items()}
    node.watermark, node.batches, node.temp, node.step_done = st["watermark"], st["batches"], st["temp"], st["step_done"]
    node.pending.clear()
    node.pending.update(st["pending"])
    for lane, (epoch, cursor) in zip(node.lanes, st["lanes"]):
        lane.epoch, lane.cursor = epoch, cursor
    for name, (progress, epoch) in st["homes"].items():
        home = node.homes[name]
        home.progress, home.epoch = progress, epoch
    for table, saved in ((node.senders, st["senders"]), (node.replicas, st["replicas"])):
        for rid, fields in saved.items():
            vars(table[rid]).update(fields)
