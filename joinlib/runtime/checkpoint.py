"""Host checkpoints: everything a host knows, in an explicit, versioned format of plain data.

A host's state is a deterministic function of the inputs handed to it (source batches,
messages, the last epoch), and it only changes inside :meth:`Host.run` / ``feed`` /
``on_message``.  So a checkpoint taken between two such calls, with the input positions up to
which messages were handed to it, lets a fresh host with the same instances installed carry on
exactly: it re-reads its inputs from those positions and redoes the same phases, sending the
same messages again (receivers drop epochs they already used) and emitting the same result
batches (a sink numbering them per instance skips those already delivered).

The format (``FORMAT``) is plain data only — dicts, lists, tuples, str, int, float, bool,
None, bytes — built by every part's own ``snapshot()``: home windows, and per instance its
lanes, senders, replicas, rows between steps and values between phases.  Tuples are in their
Avro wire encoding.  Nothing is pickled as an object: :func:`loads` refuses any class, so a
checkpoint cannot run code and renaming an attribute cannot silently change the format.

The window stores' contents are included when asked (``with_stores``: memory stores, tests,
jump starts); the cluster keeps its windows in Redis and snapshots them there, atomically with
this blob (:mod:`joinlib.adapters.redis_checkpoint`).
"""
from __future__ import annotations

import io
import pickle
from typing import Any, Protocol

from joinlib.errors import CheckpointError

FORMAT = 2

__all__ = ["FORMAT", "CheckpointError", "dumps", "loads", "state_of", "snapshot", "restore"]


class Checkpointable(Protocol):
    """A host: its state as plain data and back (:meth:`joinlib.runtime.host.Host.state`)."""

    def state(self, with_stores: bool = False) -> dict[str, Any]: ...
    def load_state(self, state: dict[str, Any]) -> None: ...


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise CheckpointError(f"checkpoint names a class ({module}.{name}); only plain data is allowed")


def dumps(state: dict[str, Any]) -> bytes:
    return pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)


def loads(data: bytes) -> dict[str, Any]:
    """Plain data back from :func:`dumps`; refuses anything else (objects, other formats)."""
    try:
        state = _PlainUnpickler(io.BytesIO(data)).load()
    except CheckpointError:
        raise
    except Exception as e:
        raise CheckpointError(f"unreadable checkpoint: {e}") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        got = state.get("format") if isinstance(state, dict) else "?"
        raise CheckpointError(f"checkpoint format {got} is not {FORMAT}")
    return state


def state_of(host: Checkpointable, with_stores: bool = False) -> dict[str, Any]:
    """The host's state as plain data (see the module docstring)."""
    return {"format": FORMAT, **host.state(with_stores)}


def snapshot(host: Checkpointable, with_stores: bool = False) -> bytes:
    return dumps(state_of(host, with_stores))


def restore(host: Checkpointable, data: bytes) -> None:
    """Put a :func:`snapshot` back into ``host``, a fresh host of the same site with the same
    instances installed, whose stores hold the windows of the snapshot's instant (or, for a
    snapshot ``with_stores``, are loaded from it)."""
    host.load_state(loads(data))
