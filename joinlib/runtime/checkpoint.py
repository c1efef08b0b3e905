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
from typing import TYPE_CHECKING, Any

from .. import wire
from ..errors import JoinlibError

if TYPE_CHECKING:  # pragma: no cover
    from .host import Host

FORMAT = 2


class CheckpointError(JoinlibError, ValueError):
    """The checkpoint does not fit the host (other plan, other format, damaged)."""


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise CheckpointError(f"checkpoint names a class ({module}.{name}); only plain data is allowed")


def dumps(state: dict[str, Any]) -> bytes:
    return pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)


def loads(data: bytes) -> dict[str, Any]:
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


def state_of(host: "Host", with_stores: bool = False) -> dict[str, Any]:
    """The host's state as plain data (see the module docstring)."""
    enc = wire.encode_tuple
    return {
        "format": FORMAT, "site": host.site, "now": host.now,
        "last": dict(host.last),
        "windows": [((q, part, s), w.snapshot(enc, with_stores)) for (q, part, s), w in host.windows.items()],
        "instances": [(list(key), inst.snapshot(enc, with_stores)) for key, inst in host.instances.items()],
        "inbox": [(list(key), wire.encode_body(body)) for key, body in host.inbox.items()],
        "taken": [(list(k), e) for k, e in host.taken.items()],
    }


def snapshot(host: "Host", with_stores: bool = False) -> bytes:
    return dumps(state_of(host, with_stores))


def restore(host: "Host", data: bytes) -> None:
    """Put a :func:`snapshot` back into ``host``, a fresh host of the same site with the same
    instances installed, whose stores hold the windows of the snapshot's instant (or, for a
    snapshot ``with_stores``, are loaded from it)."""
    st = loads(data)
    if st["site"] != host.site:
        raise CheckpointError(f"checkpoint of site {st['site']}, not {host.site}")
    keys = {tuple(k) for k, _ in st["instances"]}
    if keys != set(host.instances):
        raise CheckpointError(f"checkpoint holds instances {sorted(keys)}, the host {sorted(host.instances)}")
    wins = {tuple(k) for k, _ in st["windows"]}
    if wins != set(host.windows):
        raise CheckpointError(f"checkpoint holds windows {sorted(wins)}, the host {sorted(host.windows)}")
    dec = wire.decode_tuple
    host.now = st["now"]
    for q, last in st["last"].items():
        host.set_last(q, last)
    for key, w in st["windows"]:
        host.windows[tuple(key)].restore(w, dec)  # type: ignore[index]
    for key, inst in st["instances"]:
        host.instances[tuple(key)].restore(inst, dec)  # type: ignore[index]
    host.inbox = {tuple(k): wire.decode_body(b) for k, b in st["inbox"]}  # type: ignore[misc]
    host.taken = {tuple(k): e for k, e in st["taken"]}  # type: ignore[misc]
