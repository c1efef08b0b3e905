"""A report topic per writer (docs/contracts.md "Topics", docs/security.md "Kafka ACLs"): the planner's plans and
stops go to ``control``, the sources' ends to ``status.source``, a node's status and done to its site's
``status.node.<site>``; a reader rejects a kind on a topic that does not carry it and a report naming another
site than its topic's, and the control log reads the report topics of the sites it is told to."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from joinlib.adapters.kafka import (
    CONTROL_TOPIC,
    ENDS_TOPIC,
    control_topic_of,
    is_control_topic,
    report_topics,
    status_topic,
)
from joinlib.control.messages import DoneMessage, EndMessage, StatusMessage
from joinlib.node.control import ControlLog, decode_control_message
from joinlib.protocol import records


@dataclass
class _Msg:
    """What :func:`decode_control_message` reads of a consumed Kafka message."""

    _topic: str
    _value: bytes
    _offset: int = 0

    def topic(self) -> str:
        return self._topic

    def value(self) -> bytes:
        return self._value

    def offset(self) -> int:
        return self._offset

    def headers(self) -> Optional[list[Any]]:
        return None


def _report(topic: str, kind: str, payload: dict, offset: int = 0) -> _Msg:
    return _Msg(topic, records.encode_control(records.Control("q", kind, payload)), offset)


STATUS = {"site": "r1", "run": "run1", "t_ms": 5}
DONE = {"site": "r1", "run": "run1", "results": 3}
END = {"last_epoch": 7, "run": "run1"}


def test_each_kind_goes_to_its_writers_topic():
    assert control_topic_of("plan") == control_topic_of("stop") == CONTROL_TOPIC
    assert control_topic_of("end") == ENDS_TOPIC == "status.source"
    assert control_topic_of("status", "r1") == control_topic_of("done", "r1") == status_topic("r1") == "status.node.r1"
    assert report_topics(["r2", "r1", "r2"]) == [ENDS_TOPIC, "status.node.r2", "status.node.r1"]
    assert all(is_control_topic(t) for t in (CONTROL_TOPIC, ENDS_TOPIC, "status.node.x"))
    assert not any(is_control_topic(t) for t in ("node.q.r1.from.r2", "src.q.S1", "statusx", None))


def test_a_report_on_its_own_topic_is_read():
    for kind, payload, topic in (("status", STATUS, "status.node.r1"), ("done", DONE, "status.node.r1"),
                                 ("end", END, ENDS_TOPIC)):
        rec = decode_control_message(_report(topic, kind, payload))
        assert rec is not None and rec.kind == kind and rec.topic == topic


def test_a_report_on_another_writers_topic_is_rejected():
    """A node of r2 that writes a done naming r1 on its own topic (which the broker lets it write) forges
    nothing: the site is the topic's; nor may a node write an end, nor a source a node's report."""
    forged = [("done", DONE, "status.node.r2"), ("status", STATUS, "status.node.r2"), ("end", END, "status.node.r1"),
              ("done", DONE, ENDS_TOPIC), ("done", DONE, CONTROL_TOPIC), ("end", END, CONTROL_TOPIC)]
    why: list[str] = []
    for kind, payload, topic in forged:
        assert decode_control_message(_report(topic, kind, payload), lambda o, r, d, t: why.append(d)) is None
    assert len(why) == len(forged) and all("does not carry it" in w for w in why), why


def test_the_control_log_reads_the_report_topics_of_its_sites():
    log = ControlLog.of(["r1"], position=4)
    assert set(log.reports) == {ENDS_TOPIC, "status.node.r1"}
    assert [(tp.topic, tp.offset) for tp in log.assignment()][0] == (CONTROL_TOPIC, 4)
    assert log.watch(["status.node.r1", "status.node.r2"]) == ["status.node.r2"]
    log.take(_report("status.node.r1", "done", DONE, offset=6))
    log.take(_report("status.node.r2", "done", DONE, offset=2))     # rejected (r1's done on r2's topic): read
    log.take(_report(ENDS_TOPIC, "end", END, offset=0))
    assert log.done == {("run1", "r1")} and len(log.ends) == 1
    assert log.reports == {ENDS_TOPIC: 1, "status.node.r1": 7, "status.node.r2": 3}
    assert not log.behind({CONTROL_TOPIC: 4, "status.node.r1": 7}) and log.behind({"status.node.r2": 4})
    copy = log.copy()
    copy.watch(["status.node.r3"])
    assert "status.node.r3" not in log.reports


def test_typed_messages_name_their_topics():
    """What nodes and sources publish (:func:`joinlib.node.control.publish`) lands on the topic of its writer."""
    assert control_topic_of("status", StatusMessage("r3", "x", 1).to_json()["site"]) == "status.node.r3"
    assert control_topic_of("done", DoneMessage("r3", "x", 0).to_json()["site"]) == "status.node.r3"
    assert "site" not in EndMessage(3, "x").to_json()
