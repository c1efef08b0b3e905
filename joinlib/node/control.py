"""The ``control`` and report topics as the node services read them: plans, ends and dones with their offsets.

Control messages (``records.Control``, key = query name) are the planner's ``plan`` and ``stop`` on ``control``,
the sources' ``end`` on ``status.source`` and each node's ``status`` and ``done`` on its site's
``status.node.<site>`` (a topic per writer, so that the broker can keep all but the planner off ``control`` and
each site off the others' reports; a report naming another site than its topic's is rejected), typed in
:mod:`joinlib.control.messages` (docs/contracts.md, "Control kinds"); :func:`decode_control_message` accepts one
only once it validates (:mod:`joinlib.control.check`), and a plan compiles, once, on the way in.  A plan's
``offsets`` (optional) are the partition-0 offsets of the query's topics when the plan was published: nodes
start reading there, so several runs of one query can share a broker; without them nodes read from the
beginning.  An ``end`` applies to the run it names (the topics are not ordered with each other, so "the latest
plan before it" means nothing; an ``end`` without a run applies to plans without one).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from joinlib.adapters.kafka import (
    CONTROL_TOPIC,
    ENDS_TOPIC,
    OFFSET_BEGINNING,
    Producing,
    TopicPartition,
    consume,
    control_topic_of,
    end_offsets,
    produce_control_sync,
    publish_control,
    report_topics,
)
from joinlib.adapters.plan_signing import verify
from joinlib.control.check import INVALID, UNDECODABLE, accept_control
from joinlib.control.compile import Compiled, compile_message
from joinlib.control.messages import (
    ControlMessage,
    DoneMessage,
    EndMessage,
    PlanMessage,
    StatusMessage,
    StopMessage,
    kind_of,
)
from joinlib.errors import PlanError
from joinlib.protocol import records


@dataclass
class ControlRecord:
    """A control message read at ``offset`` of ``topic`` (``control`` or a report topic): its query, kind and typed
    message; a plan's also compiled, once, when it was checked (:func:`decode_control_message`)."""

    offset: int
    query: str
    kind: str
    message: ControlMessage
    compiled: Optional[Compiled] = None
    topic: str = CONTROL_TOPIC

    @property
    def run(self) -> Optional[str]:
        return self.message.run

    @property
    def plan(self) -> PlanMessage:
        """The message of a ``plan`` record."""
        assert isinstance(self.message, PlanMessage), self.kind
        return self.message

    def compile(self) -> Compiled:
        """The plan of a ``plan`` record compiled (when it was checked; a record made otherwise, now) and
        lowered; :class:`~joinlib.errors.PlanError` (naming the offset) for what cannot run."""
        where = f"control@{self.offset}"
        if self.compiled is None:
            return compile_message(self.plan, where)
        try:
            return self.compiled.lowered()
        except PlanError as e:
            raise PlanError(f"{where}: {e}") from None


@dataclass
class ControlLog:
    """Control messages read so far (plans, ends and dones), with their offsets; ``position``: the next offset
    of ``control`` to read; ``reports``: the report topics read (the sources' ends, by default) with the next
    offset of each (0: the beginning).  A reader names the sites whose reports it needs (:meth:`of`,
    :meth:`watch`): a node its own (its dones), an adaptive run its peers' too, the planner its queries'."""

    plans: list[ControlRecord] = field(default_factory=list)
    ends: list[ControlRecord] = field(default_factory=list)
    done: set[tuple[Any, Any]] = field(default_factory=set)   # (run, site)
    stopped: set[tuple[str, Any]] = field(default_factory=set)  # (query, run)
    position: int = 0                               # next offset to read
    started: set[tuple[Any, Any]] = field(default_factory=set)  # (run, site) with a status: a node ran it
    parts_done: set[tuple[Any, Any, Any]] = field(default_factory=set)  # (run, site, partition): scale-out
    reports: dict[str, int] = field(default_factory=lambda: {ENDS_TOPIC: 0})   # report topic -> next offset

    @classmethod
    def of(cls, sites: Any, position: int = 0) -> ControlLog:
        """A log reading ``control`` from ``position`` and the reports about runs on ``sites``."""
        return cls(position=position, reports=dict.fromkeys(report_topics(sites), 0))

    def watch(self, topics: Any) -> list[str]:
        """Read the report topics ``topics`` too (from their beginning); returns those that are new."""
        new = [t for t in topics if t not in self.reports]
        self.reports.update(dict.fromkeys(new, 0))
        return new

    def add(self, rec: ControlRecord) -> None:
        m = rec.message
        if isinstance(m, PlanMessage):
            self.plans.append(rec)
        elif isinstance(m, EndMessage):
            self.ends.append(rec)
        elif isinstance(m, DoneMessage) and m.part is not None:   # a scaled-out plan's partition, not the site's
            self.parts_done.add((m.run, m.site, m.part))
        elif isinstance(m, DoneMessage):
            self.done.add((m.run, m.site))
        elif isinstance(m, StopMessage):
            self.stopped.add((rec.query, m.run))
        elif isinstance(m, StatusMessage):
            self.started.add((m.run, m.site))
        self.advance(rec.topic, rec.offset)

    def advance(self, topic: str, offset: int) -> None:
        """``offset`` of ``topic`` is read."""
        if topic == CONTROL_TOPIC:
            self.position = max(self.position, offset + 1)
        elif topic in self.reports:
            self.reports[topic] = max(self.reports[topic], offset + 1)

    def assignment(self, after: int = -1) -> list[Any]:
        """The partitions of ``control`` (from its position, at least ``after`` + 1) and of the report topics to
        read on."""
        ctl = max(self.position, after + 1)
        return [TopicPartition(CONTROL_TOPIC, 0, ctl or OFFSET_BEGINNING),
                *(TopicPartition(t, 0, pos or OFFSET_BEGINNING) for t, pos in self.reports.items())]

    def behind(self, ends: dict[str, int]) -> bool:
        """Whether a topic of ``ends`` (end offsets) has messages not read yet."""
        return any((self.position if t == CONTROL_TOPIC else self.reports.get(t, 0)) < end for t, end in ends.items())

    def take(self, msg: Any, reject: Optional[Reject] = None) -> Optional[ControlRecord]:
        """Read ``msg``: its record added (:func:`decode_control_message`), or, rejected, only its offset."""
        rec = decode_control_message(msg, reject)
        offset = msg.offset()
        if rec is not None:
            self.add(rec)
        elif offset is not None:  # always, for a consumed message
            self.advance(msg.topic() or CONTROL_TOPIC, offset)
        return rec

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

    def successor(self, rec: ControlRecord) -> Optional[ControlRecord]:
        """The plan of the run that takes ``rec``'s run over (``joinlib replan``), if one was read."""
        return next((p for p in self.plans if p.offset > rec.offset and p.query == rec.query
                     and p.plan.replan is not None and p.plan.replan.replaces == rec.run), None)

    def predecessor(self, rec: ControlRecord) -> Optional[ControlRecord]:
        """The plan of the run that ``rec``'s run takes over (``joinlib replan``), if ``rec`` is a replan."""
        rp = rec.plan.replan
        if rp is None:
            return None
        return next((p for p in reversed(self.plans) if p.offset < rec.offset and p.query == rec.query
                     and p.run == rp.replaces), None)

    def is_stopped(self, rec: ControlRecord) -> bool:
        return (rec.query, rec.run) in self.stopped

    def ends_of(self, query: str, run: Optional[str]) -> list[EndMessage]:
        """The ``end`` messages of ``query`` read so far that apply to run ``run``."""
        return [e.message for e in self.ends if e.query == query
                and isinstance(e.message, EndMessage) and e.message.applies_to(run)]

    def copy(self) -> ControlLog:
        return ControlLog(list(self.plans), list(self.ends), set(self.done), set(self.stopped), self.position,
                          set(self.started), set(self.parts_done), dict(self.reports))


#: ``reject(offset, reason, detail, topic)``: called for a control message that is rejected
Reject = Callable[[int, str, str, str], None]


def decode_control_message(msg: Any, reject: Optional[Reject] = None) -> Optional[ControlRecord]:
    """The control record of a message, or None (and ``reject`` called) if it does not decode, does not
    validate (:func:`joinlib.control.check.check_control`) or is a plan without the planner's signature
    where one is required (:mod:`joinlib.adapters.plan_signing`): such a message changes nothing."""
    offset = msg.offset()
    topic = msg.topic() or CONTROL_TOPIC
    try:
        c = records.decode_control(msg.value())
    except Exception as e:  # garbage may trip fastavro or the JSON payload in several ways
        if reject is not None:
            reject(offset, UNDECODABLE, f"not a Control message: {type(e).__name__}: {str(e)[:200]}", topic)
        return None
    got = verify(c.kind, msg.value(), getattr(msg, "headers", lambda: None)()) or accept_control(
        c.query, c.kind, c.payload)
    if isinstance(got, str):
        if reject is not None:
            reject(offset, INVALID, f"control message of query {str(c.query)[:80]!r}: {got}", topic)
        return None
    home = control_topic_of(c.kind, getattr(got.message, "site", None))
    if home != topic:
        if reject is not None:
            reject(offset, INVALID, f"a {c.kind!r} message of query {str(c.query)[:80]!r} on {topic[:120]!r}, which "
                                    f"does not carry it (it goes to {home[:120]!r})", topic)
        return None
    return ControlRecord(offset, c.query, c.kind, got.message, got.compiled, topic)


def read_control_to_end(consumer: Any, log: ControlLog, timeout_s: float = 10.0,
                        reject: Optional[Reject] = None) -> ControlLog:
    """Read ``control`` from ``log.position`` and the log's report topics from theirs (0 = beginning) up to
    their current ends (``reject``: see :func:`decode_control_message`)."""
    ends = end_offsets(consumer, [CONTROL_TOPIC, *log.reports], timeout_s)
    if not log.behind(ends):
        return log
    consumer.assign(log.assignment())
    deadline = time.monotonic() + max(timeout_s, 30.0)
    while log.behind(ends):
        for m in consume(consumer, 5000, 0.2):
            log.take(m, reject)
        if time.monotonic() > deadline:
            break
    return log


def publish(out: Producing, query: str, msg: ControlMessage, *, flush: bool = True) -> None:
    """Publish a control message of ``query`` (flushed unless ``flush`` is False)."""
    publish_control(out, query, kind_of(msg), msg.to_json(), flush=flush)


def publish_sync(producer: Any, query: str, msg: ControlMessage) -> int:
    """Publish a control message of ``query`` and wait for it; returns its offset in its topic."""
    return int(produce_control_sync(producer, query, kind_of(msg), msg.to_json()))
