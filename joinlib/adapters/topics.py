"""The names of the Kafka topics a query's run uses: pure functions of the query, its sites and its streams.

Why a module of their own: every service, the CLI and the benches name topics, and naming is not talking to
Kafka -- :mod:`joinlib.adapters.kafka` (the clients) re-exports them, so ``from joinlib.adapters.kafka import
out_topic`` keeps working.

Topic layout (docs/contracts.md, "Topics"); every topic has one partition:

* ``src.<query>.<stream>`` -- source tuples (``records.SourceBatch``, one message per stream
  per batch interval), key = stream name, header ``run`` when the replay knows the run;
* ``node.<query>.<receiver>.from.<sender>`` -- the flow of one link (``wire`` Envelope; the topic names
  the query and both ends, the envelope the plan instance's partition and generation), key = sending
  site, headers ``sent_ms`` (wall-clock ms at send, for transmission time), ``kind`` and
  ``run`` (the run id of the plan, when there is one).  A topic per sender, so that the broker's ACLs can
  let a site's principal write only its own outbound flows (docs/security.md) and a receiver can take
  the sender from the topic, not from what the sender wrote; a receiver reads one such topic per peer;
* ``out.<query>`` -- results (``records.ResultBatch``, many per message), key = producing site;
* ``control`` -- the planner's ``records.Control`` messages of every query (plan, stop): only the planner
  (and the CLI's cluster runner) writes it;
* ``status.node.<site>`` -- the ``status`` and ``done`` messages of the node service(s) of one site, every
  query's; ``status.source`` -- the sources' ``end`` messages.  A topic per writer, so that the broker can keep
  every other writer off ``control`` and one site's credentials off another site's reports, and a reader
  takes the site from the topic (a report naming another site is rejected), as it does for flows.
"""
from __future__ import annotations

from typing import Any, Iterable, Optional

CONTROL_TOPIC = "control"
#: the start of every report topic's name (the topics of ``records.Control`` messages but ``control``)
REPORTS_PREFIX = "status."
#: the sources' ``end`` messages (the source service, the CLI's replay)
ENDS_TOPIC = "status.source"
#: the kinds the planner publishes, on ``control``
PLANNER_KINDS = frozenset({"plan", "stop"})
#: the kinds a node publishes, on its site's :func:`status_topic`; the rest (``end``) go to ``status.source``
NODE_KINDS = frozenset({"status", "done"})


def status_topic(site: str) -> str:
    """The topic of the ``status`` and ``done`` messages of the node service(s) of ``site`` (every query's)."""
    return f"{REPORTS_PREFIX}node.{site}"


def report_topics(nodes: Iterable[str]) -> list[str]:
    """The topics of what is reported about a run on ``nodes``: the sources' ends and each node's status topic."""
    return [ENDS_TOPIC, *(status_topic(s) for s in dict.fromkeys(nodes))]


def is_control_topic(topic: Optional[str]) -> bool:
    """Whether ``topic`` carries ``records.Control`` messages: ``control`` or a report topic."""
    return topic is not None and (topic == CONTROL_TOPIC or topic.startswith(REPORTS_PREFIX))


def control_topic_of(kind: str, site: Any = None) -> str:
    """The topic of a control message of ``kind``: ``control`` for the planner's, the status topic of the
    node's ``site`` for a node's (``status``, ``done``), ``status.source`` for the rest (``end``)."""
    if kind in PLANNER_KINDS:
        return CONTROL_TOPIC
    return status_topic(str(site)) if kind in NODE_KINDS else ENDS_TOPIC


def src_topic(query: str, stream: str) -> str:
    return f"src.{query}.{stream}"


def node_topic(query: str, dst: str, src: str) -> str:
    """The topic of the flow from site ``src`` to site ``dst`` of ``query``."""
    return f"node.{query}.{dst}.from.{src}"


def flow_topics(query: str, nodes: Iterable[str]) -> list[str]:
    """The flow topic of every ordered pair of distinct ``nodes`` of ``query`` (a plan, adaptive ones
    included, may send between any two)."""
    nodes = list(dict.fromkeys(nodes))
    return [node_topic(query, dst, src) for dst in nodes for src in nodes if src != dst]


def inbound_topics(query: str, site: str, nodes: Iterable[str]) -> dict[str, str]:
    """The flow topics ``site`` reads, each with its sender."""
    return {node_topic(query, site, src): src for src in dict.fromkeys(nodes) if src != site}


def out_topic(query: str) -> str:
    return f"out.{query}"


def source_topic(query, stream: str) -> str:
    """Where the replayer writes a stream's SourceBatch messages: its ``source`` topic if it has a
    ``sourcebatch`` source, else ``src.<query>.<stream>``."""
    src = query.stream(stream).source
    return src.topic if src is not None and src.format == "sourcebatch" else src_topic(query.name, stream)


def query_topics(query) -> list[str]:
    """Every topic (partition 0) a run of ``query`` (a :class:`~joinlib.model.Query`) uses, ``control``, the
    report topics of its nodes and the rows' sink topic included; the users' topics of live sources (json, avro)
    are not among them (they have their own partitions), the dead-letter and idle-advance topics of a live query
    are."""
    live = [s for s in query.streams if s.source is not None and s.source.live]
    return ([source_topic(query, s.name) for s in query.streams if s not in live]
            + flow_topics(query.name, query.nodes)
            + ([f"dlq.{query.name}", f"wm.{query.name}"] if live else [])
            + [out_topic(query.name), *sink_topics(query), CONTROL_TOPIC, *report_topics(query.nodes)])


def sink_topics(query) -> list[str]:
    """The topic a query's rows go to (``output.topic``, with a SELECT list; docs/sql.md), if any."""
    topic = query.output.sink_topic
    return [] if topic is None else [topic]
