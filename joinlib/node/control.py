"""The ``control`` topic as the node services read it: plans, ends and dones with their offsets.

Control messages (``records.Control``, topic ``control``, key = query name):

* ``plan``, published by the cluster runner or the planner: ``{"query": query_to_dict, "plan":
  plan.to_json(), "run": id, "offsets": {topic: offset}, "nodes": [...], "switches": [{"from_epoch": E,
  "plan": ...}], "last_epoch": E?}``;
* ``end``, published by the source after the last batch: ``{"last_epoch": E, "run": id?}``;
* ``status``, published by a node every ~2 s: ``{"site", "run", "epoch", "epochs", "last_epoch"}``;
* ``done``, published by a node when finished: ``{"site", "run", "results", "links": [...],
  "received": [...], ...}`` (docs/contracts.md);
* ``stop``, published by the planner (``joinlib stop``): ``{"run": id}``: the nodes end that run of
  the query (a live query runs until stopped).

``offsets`` (optional) are the partition-0 offsets of the query's topics when the plan was
published: nodes start reading there, so several runs of one query can share a broker.
Without them nodes read from the beginning.  An ``end`` applies to the run of the latest
plan before it (``run`` missing) or to the named run.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from joinlib.adapters.kafka import CONTROL_TOPIC, consume, end_offsets
from joinlib.control.check import INVALID, UNDECODABLE, check_control
from joinlib.protocol import records


@dataclass
class ControlRecord:
    offset: int
    query: str
    kind: str
    payload: object


@dataclass
class ControlLog:
    """Control messages read so far (plans, ends and dones), with their offsets."""

    plans: list[ControlRecord] = field(default_factory=list)
    ends: list[ControlRecord] = field(default_factory=list)
    done: set[tuple[Any, Any]] = field(default_factory=set)   # (run, site)
    stopped: set[tuple[str, Any]] = field(default_factory=set)  # (query, run)
    position: int = 0                               # next offset to read
    started: set[tuple[Any, Any]] = field(default_factory=set)  # (run, site) with a status: a node ran it
    parts_done: set[tuple[Any, Any, Any]] = field(default_factory=set)  # (run, site, partition): scale-out

    def add(self, rec: ControlRecord) -> None:
        p = rec.payload if isinstance(rec.payload, dict) else {}
        if rec.kind == "plan":
            self.plans.append(rec)
        elif rec.kind == "end":
            self.ends.append(rec)
        elif rec.kind == "done" and "part" in p:   # one partition of a scaled-out plan, not the site's run
            self.parts_done.add((p.get("run"), p.get("site"), p.get("part")))
        elif rec.kind == "done":
            self.done.add((p.get("run"), p.get("site")))
        elif rec.kind == "stop":
            self.stopped.add((rec.query, p.get("run")))
        elif rec.kind == "status":
            self.started.add((p.get("run"), p.get("site")))
        self.position = max(self.position, rec.offset + 1)

    def latest_plan(self, accept: Callable[[ControlRecord], bool]) -> Optional[ControlRecord]:
        for rec in reversed(self.plans):
            if accept(rec):
                return rec
        return None

    def latest_plans(self, accept: Callable[[ControlRecord], bool]) -> list[ControlRecord]:
        """The latest accepted plan of each query, in control order."""
        latest: dict[str, ControlRecord] = {}
        for rec in self.plans:
            if accept(rec):
                latest[rec.query] = rec
        return sorted(latest.values(), key=lambda r: r.offset)

    def is_stopped(self, rec: ControlRecord) -> bool:
        p = rec.payload if isinstance(rec.payload, dict) else {}
        return (rec.query, p.get("run")) in self.stopped

    def copy(self) -> ControlLog:
        return ControlLog(list(self.plans), list(self.ends), set(self.done), set(self.stopped), self.position,
                          set(self.started), set(self.parts_done))


#: ``reject(offset, reason, detail)``: called for a control message that is rejected
Reject = Callable[[int, str, str], None]


def decode_control_message(msg: Any, reject: Optional[Reject] = None) -> Optional[ControlRecord]:
    """The control record of a message, or None (and ``reject`` called) if it does not decode or does
    not validate (:func:`joinlib.control.check.check_control`): such a message changes nothing."""
    offset = msg.offset()
    try:
        c = records.decode_control(msg.value())
    except Exception as e:  # garbage may trip fastavro or the JSON payload in several ways
        if reject is not None:
            reject(offset, UNDECODABLE, f"not a Control message: {type(e).__name__}: {str(e)[:200]}")
        return None
    why = check_control(c.query, c.kind, c.payload)
    if why is not None:
        if reject is not None:
            reject(offset, INVALID, f"control message of query {str(c.query)[:80]!r}: {why}")
        return None
    return ControlRecord(offset, c.query, c.kind, c.payload)


def read_control_to_end(consumer: Any, log: ControlLog, timeout_s: float = 10.0,
                        reject: Optional[Reject] = None) -> ControlLog:
    """Read ``control`` from ``log.position`` (0 = beginning) up to its current end (``reject``: see
    :func:`decode_control_message`)."""
    end = end_offsets(consumer, [CONTROL_TOPIC], timeout_s)[CONTROL_TOPIC]
    if log.position >= end:
        return log
    consumer.assign([TopicPartition(CONTROL_TOPIC, 0, log.position or OFFSET_BEGINNING)])
    deadline = time.monotonic() + max(timeout_s, 30.0)
    while log.position < end:
        for m in consume(consumer, 5000, 0.2):
            rec = decode_control_message(m, reject)
            offset = m.offset()
            if rec is not None:
                log.add(rec)
            elif offset is not None:  # always, for a consumed message
                log.position = max(log.position, offset + 1)
        if time.monotonic() > deadline:
            break
    return log
