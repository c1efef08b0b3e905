"""What the services share: environment and error lines; reading the ``control`` topic lives in
:mod:`joinlib.node.control` (re-exported here).

Control messages (``records.Control``, topic ``control``, key = query name):

* ``plan``, published by the cluster runner or the planner: ``{"query": query_to_dict, "plan":
  plan.to_json(), "run": id, "offsets": {topic: offset}, "last_epoch": E?}``;
* ``end``, published by the source after the last batch: ``{"last_epoch": E, "run": id?}``;
* ``status``, published by a node every ~2 s: ``{"site", "run", "epoch", "last_epoch"}``;
* ``done``, published by a node when finished: ``{"site", "run", "results", "links": [...],
  "received": [...], ...}``.

``offsets`` (optional) are the partition-0 offsets of the query's topics when the plan was
published: nodes start reading there, so several runs of one query can share a broker.
Without them nodes read from the beginning.  An ``end`` applies to the run of the latest
plan before it (``run`` missing) or to the named run.
"""
from __future__ import annotations

import os
import sys
from typing import Optional, overload

from joinlib.node.control import ControlLog, ControlRecord, decode_control_message, read_control_to_end

__all__ = ["env", "error_line", "info_line", "ControlLog", "ControlRecord", "decode_control_message",
           "read_control_to_end"]


@overload
def env(name: str) -> Optional[str]: ...
@overload
def env(name: str, default: str) -> str: ...
def env(name: str, default: Optional[str] = None) -> Optional[str]:
    """``$name`` stripped, or ``default`` when it is unset or blank."""
    v = os.environ.get(name, "").strip()
    return v or default


def error_line(msg: str) -> None:
    print(f"error: {msg}", file=sys.stderr, flush=True)


def info_line(prefix: str, msg: str) -> None:
    print(f"[{prefix}] {msg}", file=sys.stderr, flush=True)
