"""The control topic's messages as frozen dataclasses: ``plan``, ``end``, ``status``, ``done`` and ``stop``.

Every producer builds one of these and publishes :meth:`to_json`; every reader gets one from
:func:`parse` after :func:`joinlib.control.check.check_control` accepted the payload, so the keys of a
payload are read here and nowhere else.  ``to_json`` gives the JSON joinlib has always written, key for
key and in the same order (other versions of the services, the Spark jobs and docs/contracts.md read
it): a field that is ``None`` is a key the message does not have, except the few keys a message always
carries, null or not (named where they are).

Every message has a ``version`` (:data:`CONTROL_VERSION`).  It is written only when it is not 1, so a
version-1 message is byte for byte what joinlib wrote before the field existed, and a message without
it is version 1.  A reader rejects a version it does not know (``check_control``).

Pure: no I/O, no client libraries.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence, Union

#: the version of the control messages this code writes and reads (docs/contracts.md "Control kinds")
CONTROL_VERSION = 1

JSON = Mapping[str, Any]


def _versioned(out: dict[str, Any], version: int) -> dict[str, Any]:
    if version != CONTROL_VERSION:
        out["version"] = version
    return out


def _some(out: dict[str, Any], **keys: Any) -> None:
    """Add the keys whose value is not None (a None field is a key the message does not have)."""
    out.update({k: v for k, v in keys.items() if v is not None})


# ----------------------------------------------------------------------------- plan

@dataclass(frozen=True)
class Switch:
    """A later plan generation: the plan serving the head epochs from ``from_epoch`` on."""

    from_epoch: int
    plan: JSON

    def to_json(self) -> dict[str, Any]:
        return {"from_epoch": self.from_epoch, "plan": self.plan}


@dataclass(frozen=True)
class LiveStart:
    """A live query's origin (event time of epoch 0, ms since the Unix epoch) and where each partition of
    each source starts: stream -> {partition (as text, JSON keys are): first offset}."""

    origin_ms: int
    sources: Mapping[str, Mapping[str, int]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"origin_ms": self.origin_ms, "sources": self.sources}

    def starts(self) -> dict[str, dict[int, int]]:
        """stream -> {partition: first offset}, as numbers."""
        return {name: {int(k): int(v) for k, v in (parts or {}).items()} for name, parts in self.sources.items()}

    @classmethod
    def from_json(cls, d: JSON) -> LiveStart:
        return cls(int(d.get("origin_ms") or 0), d.get("sources") or {})


@dataclass(frozen=True)
class Replan:
    """A run that takes a running live query over (``joinlib replan``, docs/live.md "Replan"): it serves the
    results whose trigger (head tuple) has event time ``switch_ms`` or later, the run ``replaces`` those before;
    its plan generations are numbered from ``gen`` (after the replaced run's, so that the two runs' result
    batches and rows are told apart); ``handover``: stream -> {partition (as text): offset}, the end of each
    source partition when the replan was asked -- dead letters of records before it are the replaced run's,
    from it on the new run's."""

    replaces: str
    switch_ms: int
    gen: int = 1
    handover: Mapping[str, Mapping[str, int]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"replaces": self.replaces, "switch_ms": self.switch_ms, "gen": self.gen, "handover": self.handover}

    @classmethod
    def from_json(cls, d: JSON) -> Replan:
        return cls(str(d["replaces"]), int(d["switch_ms"]), int(d.get("gen", 1)), d.get("handover") or {})

    def handover_at(self) -> dict[str, dict[int, int]]:
        """stream -> {partition: offset}, as numbers."""
        return {name: {int(k): int(v) for k, v in (parts or {}).items()} for name, parts in self.handover.items()}

    def switch_epoch(self, origin_ms: int, tau_ms: int) -> int:
        """The first head epoch at or after ``switch_ms`` of a run with this origin and batch interval."""
        return -(-(self.switch_ms - origin_ms) // tau_ms)


@dataclass(frozen=True)
class PlanMessage:
    """A ``plan``: the query (``query_to_dict``), its first plan and the later ones (``switches``), the run id,
    where each topic starts, the nodes involved, and per kind of plan its extras (docs/contracts.md)."""

    query: JSON
    plan: JSON
    run: Optional[str] = None
    offsets: Optional[Mapping[str, Optional[int]]] = None
    nodes: Optional[tuple[str, ...]] = None
    switches: Optional[tuple[Switch, ...]] = None
    adaptive: Optional[JSON] = None                     # an adaptive plan's configuration
    operator: Optional[JSON] = None                     # a shared operator deployment (the planner's trees)
    uses: Optional[tuple[str, ...]] = None              # the operator deployments a query reads
    live: Optional[LiveStart] = None
    scale_out: Optional[bool] = None
    part_offsets: Optional[Mapping[str, tuple[int, ...]]] = None
    last_epoch: Optional[int] = None
    version: int = CONTROL_VERSION
    replan: Optional[Replan] = None                     # a run taking a running live query over
    repartition: Optional[JSON] = None                  # submit --repartition's {"threshold", "plan"} (the planner's)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"query": self.query, "plan": self.plan}
        _some(out, run=self.run, offsets=self.offsets,
              nodes=None if self.nodes is None else list(self.nodes),
              switches=None if self.switches is None else [s.to_json() for s in self.switches],
              adaptive=self.adaptive, operator=self.operator, uses=None if self.uses is None else list(self.uses),
              live=None if self.live is None else self.live.to_json(), scale_out=self.scale_out,
              part_offsets=None if self.part_offsets is None else {t: list(o) for t, o in self.part_offsets.items()},
              last_epoch=self.last_epoch, replan=None if self.replan is None else self.replan.to_json(),
              repartition=self.repartition)
        return _versioned(out, self.version)

    @classmethod
    def from_json(cls, p: JSON) -> PlanMessage:
        """The message of a payload :func:`~joinlib.control.check.check_control` accepted (missing keys:
        absent)."""
        switches, live, parts, rp = p.get("switches"), p.get("live"), p.get("part_offsets"), p.get("replan")
        return cls(
            p.get("query") or {}, p.get("plan") or {}, p.get("run"), p.get("offsets"),
            None if p.get("nodes") is None else tuple(p["nodes"]),
            None if switches is None else tuple(Switch(int(s["from_epoch"]), s["plan"]) for s in switches),
            p.get("adaptive"), p.get("operator") if isinstance(p.get("operator"), dict) else None,
            None if p.get("uses") is None else tuple(str(u) for u in p["uses"]),
            LiveStart.from_json(live) if isinstance(live, dict) else None, p.get("scale_out"),
            None if parts is None else {t: tuple(o) for t, o in parts.items()}, p.get("last_epoch"),
            int(p.get("version", CONTROL_VERSION)), Replan.from_json(rp) if isinstance(rp, dict) else None,
            p.get("repartition") if isinstance(p.get("repartition"), dict) else None)

    def positions(self) -> dict[tuple[str, int], int]:
        """``offsets`` (topic -> offset of partition 0) and ``part_offsets`` (topic -> the offset of each
        partition: a scaled-out plan's topics) as (topic, partition) -> offset."""
        out = {(t, 0): int(o) for t, o in (self.offsets or {}).items() if o is not None}
        for t, offs in (self.part_offsets or {}).items():
            out.update({(t, i): int(o) for i, o in enumerate(offs) if o is not None})
        return out

    def node_set(self) -> set[str]:
        """The nodes the plan involves: ``nodes`` if given, else the sites of its query's streams."""
        if self.nodes is not None:
            return set(self.nodes)
        streams = self.query.get("streams") or {}
        return {str(s.get("site")) for s in streams.values() if isinstance(s, dict)}

    @property
    def origin_ms(self) -> int:
        """Event time 0 of a live run (0 for a replayed one)."""
        return self.live.origin_ms if self.live is not None else 0


# ----------------------------------------------------------------------------- end, stop

@dataclass(frozen=True)
class EndMessage:
    """``end``: the last epoch of the run ``run`` (None: of plans without a run id)."""

    last_epoch: int
    run: Optional[str] = None
    version: int = CONTROL_VERSION

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"last_epoch": self.last_epoch}
        _some(out, run=self.run)
        return _versioned(out, self.version)

    @classmethod
    def from_json(cls, p: JSON) -> EndMessage:
        return cls(int(p.get("last_epoch") or 0), p.get("run"), int(p.get("version", CONTROL_VERSION)))

    def applies_to(self, run: Optional[str]) -> bool:
        """Does this ``end`` apply to a run with id ``run``?  Only to the run it names (one without a run: to
        plans without one): ``end`` travels on ``status``, which is not ordered with the plans on ``control``."""
        return self.run == run


@dataclass(frozen=True)
class StopMessage:
    """``stop``: the nodes end run ``run`` of the query."""

    run: Optional[str]
    version: int = CONTROL_VERSION

    def to_json(self) -> dict[str, Any]:
        return _versioned({"run": self.run}, self.version)

    @classmethod
    def from_json(cls, p: JSON) -> StopMessage:
        return cls(p.get("run"), int(p.get("version", CONTROL_VERSION)))


# ----------------------------------------------------------------------------- status, done

@dataclass(frozen=True)
class LinkTraffic:
    """Messages and bytes of one (src, dst, kind); ``transfer_ms``: measured by the receiver."""

    src: str
    dst: str
    kind: str
    messages: int = 0
    bytes: int = 0
    transfer_ms: Optional[float] = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"src": self.src, "dst": self.dst, "kind": self.kind, "messages": self.messages,
                               "bytes": self.bytes}
        _some(out, transfer_ms=self.transfer_ms)
        return out

    @classmethod
    def from_json(cls, d: JSON) -> LinkTraffic:
        return cls(d["src"], d["dst"], d["kind"], d.get("messages", 0), d.get("bytes", 0), d.get("transfer_ms"))


@dataclass(frozen=True)
class Naive:
    """What shipping every source batch from ``src`` to ``dst`` would cost (the naive baseline)."""

    src: str
    dst: str
    bytes: int

    def to_json(self) -> dict[str, Any]:
        """As ``done`` writes it."""
        return {"src": self.src, "dst": self.dst, "bytes": self.bytes}

    def to_row(self) -> list[Any]:
        """As ``status`` writes it."""
        return [self.src, self.dst, self.bytes]

    @classmethod
    def from_json(cls, v: Any) -> Naive:
        if isinstance(v, dict):
            return cls(str(v["src"]), str(v["dst"]), int(v["bytes"]))
        src, dst, n = v
        return cls(str(src), str(dst), int(n))


Counts = Mapping[str, int]


@dataclass(frozen=True)
class StatusMessage:
    """``status``, published by a node every ~2 s: its run's progress and counters so far.

    A plan run's status (``operators`` None) always carries ``epoch``, ``epochs``, ``last_epoch`` (null or
    not) and ``naive``, and a live one ``latency_ms`` (null when no result came since the last status); a tree
    site's status (``operators``: how many operator runs it adds up) carries none of these."""

    site: str
    run: Optional[str]
    t_ms: Optional[float] = None
    results: int = 0
    sent_bytes: int = 0
    inputs: Counts = field(default_factory=dict)
    operators: Optional[int] = None
    epoch: Optional[int] = None
    epochs: Optional[Counts] = None
    last_epoch: Optional[int] = None
    naive: tuple[Naive, ...] = ()
    part: Optional[int] = None
    instance: Optional[str] = None
    live: bool = False
    dead_letters: Optional[Mapping[str, Counts]] = None
    watermarks_ms: Optional[Mapping[str, float]] = None
    latency_ms: Optional[JSON] = None
    values: Optional[JSON] = None
    adaptive: Optional[JSON] = None
    version: int = CONTROL_VERSION

    def to_json(self) -> dict[str, Any]:
        run_status = self.operators is None
        out: dict[str, Any] = {"site": self.site, "run": self.run}
        if run_status:
            out.update(epoch=self.epoch, epochs=self.epochs, last_epoch=self.last_epoch)
        else:
            out["operators"] = self.operators
        out.update(t_ms=self.t_ms, results=self.results, sent_bytes=self.sent_bytes, inputs=self.inputs)
        if run_status:
            out["naive"] = [n.to_row() for n in self.naive]
        _some(out, part=self.part, instance=self.instance)
        if self.live:
            out.update(live=True, dead_letters=self.dead_letters, watermarks_ms=self.watermarks_ms)
            if run_status:
                out["latency_ms"] = self.latency_ms
        _some(out, values=self.values, adaptive=self.adaptive)
        return _versioned(out, self.version)

    @classmethod
    def from_json(cls, p: JSON) -> StatusMessage:
        return cls(
            str(p.get("site")), p.get("run"), p.get("t_ms"), p.get("results") or 0, p.get("sent_bytes") or 0,
            p.get("inputs") or {}, p.get("operators"), p.get("epoch"), p.get("epochs"), p.get("last_epoch"),
            tuple(Naive.from_json(r) for r in p.get("naive") or ()), p.get("part"), p.get("instance"),
            bool(p.get("live")), p.get("dead_letters"), p.get("watermarks_ms"),
            p.get("latency_ms") if isinstance(p.get("latency_ms"), dict) else None,
            p.get("values") if isinstance(p.get("values"), dict) else None,
            p.get("adaptive") if isinstance(p.get("adaptive"), dict) else None,
            int(p.get("version", CONTROL_VERSION)))


@dataclass(frozen=True)
class DoneMessage:
    """``done``, published by a node when its run has finished: what it did, for the cluster report.

    ``last_epoch``, ``resumed_from`` and ``resumed_from_epoch`` are always written, null or not.  ``operators``:
    a tree site's done (its operator runs' added up); ``part`` and ``instance``: a scaled-out plan partition's;
    ``parts``: the partitions a site's done adds up (the cluster report's; never published)."""

    site: str
    run: Optional[str]
    results: int = 0
    links: tuple[LinkTraffic, ...] = ()
    received: tuple[LinkTraffic, ...] = ()
    naive: tuple[Naive, ...] = ()
    input_tuples: int = 0
    processing_s: Mapping[str, float] = field(default_factory=dict)
    late_messages: int = 0
    last_epoch: Optional[int] = None
    wall_s: float = 0.0
    cpu_s: float = 0.0
    resumed_from: Optional[Counts] = None
    resumed_from_epoch: Optional[int] = None
    startup_s: Optional[float] = None
    checkpoints: int = 0
    generations: tuple[int, ...] = ()
    operators: Optional[int] = None
    part: Optional[int] = None
    instance: Optional[str] = None
    stopped: Optional[bool] = None
    inputs: Optional[Counts] = None
    dead_letters: Optional[Mapping[str, Counts]] = None
    adaptive: Optional[JSON] = None
    parts: tuple[DoneMessage, ...] = ()
    version: int = CONTROL_VERSION

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "site": self.site, "run": self.run, "results": self.results,
            "links": [ln.to_json() for ln in self.links], "received": [ln.to_json() for ln in self.received],
            "naive": [n.to_json() for n in self.naive], "input_tuples": self.input_tuples,
            "processing_s": self.processing_s, "late_messages": self.late_messages, "last_epoch": self.last_epoch,
            "wall_s": self.wall_s, "cpu_s": self.cpu_s, "resumed_from": self.resumed_from,
            "resumed_from_epoch": self.resumed_from_epoch}
        _some(out, startup_s=self.startup_s)
        out.update(checkpoints=self.checkpoints, generations=list(self.generations))
        _some(out, operators=self.operators, part=self.part, instance=self.instance, stopped=self.stopped,
              inputs=self.inputs, dead_letters=self.dead_letters, adaptive=self.adaptive)
        if self.parts:
            out["parts"] = [d.to_json() for d in self.parts]
        return _versioned(out, self.version)

    @classmethod
    def from_json(cls, p: JSON) -> DoneMessage:
        return cls(
            str(p.get("site")), p.get("run"), p.get("results") or 0,
            tuple(LinkTraffic.from_json(ln) for ln in p.get("links") or ()),
            tuple(LinkTraffic.from_json(ln) for ln in p.get("received") or ()),
            tuple(Naive.from_json(r) for r in p.get("naive") or ()), p.get("input_tuples") or 0,
            p.get("processing_s") or {}, p.get("late_messages") or 0, p.get("last_epoch"),
            p.get("wall_s") or 0.0, p.get("cpu_s") or 0.0, p.get("resumed_from"), p.get("resumed_from_epoch"),
            p.get("startup_s"), p.get("checkpoints") or 0, tuple(p.get("generations") or ()), p.get("operators"),
            p.get("part"), p.get("instance"), p.get("stopped"), p.get("inputs"), p.get("dead_letters"),
            p.get("adaptive") if isinstance(p.get("adaptive"), dict) else None,
            tuple(cls.from_json(d) for d in p.get("parts") or ()), int(p.get("version", CONTROL_VERSION)))

    @property
    def sent_bytes(self) -> int:
        return sum(ln.bytes for ln in self.links)


ControlMessage = Union[PlanMessage, EndMessage, StatusMessage, DoneMessage, StopMessage]

_KINDS: dict[str, Any] = {"plan": PlanMessage, "end": EndMessage, "status": StatusMessage, "done": DoneMessage,
                          "stop": StopMessage}


def parse(kind: str, payload: JSON) -> ControlMessage:
    """The message of a ``kind`` payload that :func:`~joinlib.control.check.check_control` accepted."""
    msg: ControlMessage = _KINDS[kind].from_json(payload)
    return msg


def kind_of(msg: ControlMessage) -> str:
    """The control kind of a message (the ``kind`` of its ``Control`` envelope)."""
    return next(k for k, cls in _KINDS.items() if isinstance(msg, cls))


def _added(key: tuple[str, str, str], links: list[LinkTraffic]) -> LinkTraffic:
    """One link's counts added up (``transfer_ms`` absent unless some link has it)."""
    ms = [ln.transfer_ms for ln in links if ln.transfer_ms is not None]
    return LinkTraffic(*key, sum(ln.messages for ln in links), sum(ln.bytes for ln in links), sum(ms) if ms else None)


def _merged_links(lists: list[tuple[LinkTraffic, ...]]) -> tuple[LinkTraffic, ...]:
    acc: dict[tuple[str, str, str], list[LinkTraffic]] = {}
    for links in lists:
        for ln in links:
            acc.setdefault((ln.src, ln.dst, ln.kind), []).append(ln)
    return tuple(_added(k, acc[k]) for k in sorted(acc))


def merge_done(site: str, run: Optional[str], parts: Sequence[DoneMessage], wall: float, cpu: float) -> DoneMessage:
    """One ``done`` for a site of a tree run (its operators') or of a scaled-out plan (its partitions'):
    their counts added up (links and received per (src, dst, kind), naive per (src, dst))."""
    processing: dict[str, float] = {}
    naive: dict[tuple[str, str], int] = {}
    for d in parts:
        for op, secs in d.processing_s.items():
            processing[op] = processing.get(op, 0.0) + secs
        for n in d.naive:
            naive[(n.src, n.dst)] = naive.get((n.src, n.dst), 0) + n.bytes
    resumed = [d.resumed_from_epoch for d in parts if d.resumed_from_epoch is not None]
    return DoneMessage(
        site, run, sum(d.results for d in parts), _merged_links([d.links for d in parts]),
        _merged_links([d.received for d in parts]), tuple(Naive(s, t, n) for (s, t), n in sorted(naive.items())),
        sum(d.input_tuples for d in parts), {op: round(v, 6) for op, v in processing.items()},
        sum(d.late_messages for d in parts),
        max((d.last_epoch for d in parts if d.last_epoch is not None), default=None), round(wall, 4), round(cpu, 4),
        None, min(resumed, default=None), checkpoints=sum(d.checkpoints for d in parts), generations=(0,),
        operators=len(parts))
