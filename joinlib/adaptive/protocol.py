"""The messages of adaptive re-planning and migration, and their Avro encoding
(``schemas/AdaptiveMessage.avsc``).

Every message belongs to a trigger or a round (``mid``): statistics reports and the distributed
update's relays to the *trigger* (a statistics change past the threshold, numbered by
:func:`trigger_id`), plan updates, window copies and LOCAL_READY / GLOBAL_READY to the *round*
of the switch they prepare (a round takes in one trigger or several; ``triggers`` lists them).
Each message has a *category*, the paper's Table 3 columns: ``modification`` (statistics reports, plan
updates, the distributed update's relays), ``migration`` (window requests, window copies and the
tuples that keep a copied window in step until the switch, notifications of nodes whose operator
set does not change) and ``sync`` (LOCAL_READY / GLOBAL_READY; the paper counts them among the
migration messages too).  The simulator charges the encoded size, what Kafka carries.

Messages are idempotent: :meth:`Message.dedup` names what a copy repeats, and receivers drop
copies (a node restarted from a checkpoint sends again what it sent after it).
"""
from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any, Optional, Union

import fastavro

from joinlib.adaptive.jep import JEP, SEP
from joinlib.adaptive.stats import StreamStatistics
from joinlib.costs.unit_time import KeyClass, SeqState
from joinlib.model import Tup
from joinlib.protocol import avro, schemas

MODIFICATION, MIGRATION, SYNC = "modification", "migration", "sync"


def trigger_id(epoch: int, pos: int) -> int:
    """The id of a trigger of the stream at query position ``pos`` at the end of ``epoch``: unique,
    ordered by epoch then stream (the order in which simultaneous triggers are taken)."""
    return (epoch + 1) * 1024 + pos
CATEGORIES = (MODIFICATION, MIGRATION, SYNC)
_SCHEMA = schemas.SCHEMAS["joinlib.AdaptiveMessage"]


@dataclass(frozen=True)
class StatsReport:
    """A node's stream changed past the threshold: its new statistics (CNU: to the planner)."""

    stream: str
    epoch: int
    stats: StreamStatistics

    category = MODIFICATION


@dataclass(frozen=True)
class PlanUpdate:
    """The planner's new plan, generation ``gen``: an update for a node whose operator set
    changes, a notification (``notify``) for one whose does not."""

    gen: int
    notify: bool
    jep: JEP
    triggers: tuple[int, ...] = ()

    @property
    def category(self) -> str:
        return MIGRATION if self.notify else MODIFICATION


@dataclass(frozen=True)
class WindowRequest:
    """Copy the window of ``stream`` to ``holder`` (sent to the stream's home)."""

    stream: str
    holder: str

    category = MIGRATION


@dataclass(frozen=True)
class WindowData:
    """``snapshot``: the window of ``stream`` as the epochs before ``epoch`` left it (``base``
    tuples of the stream came before ``epoch``); otherwise the stream's tuples of epoch
    ``epoch``, keeping a copied window in step until the switch."""

    stream: str
    epoch: int
    snapshot: bool
    base: int
    tuples: tuple[Tup, ...]

    category = MIGRATION


@dataclass(frozen=True)
class Ready:
    """LOCAL_READY (``glob`` False) or GLOBAL_READY: ``epoch`` is the sender's fence, ``seps``
    the SEPs it heads (distributed update), ``digest`` the new plan's."""

    glob: bool
    epoch: int
    digest: str
    seps: tuple[SEP, ...] = ()
    versions: tuple[int, ...] = ()
    triggers: tuple[int, ...] = ()

    category = SYNC


RELAY_OPS = ("TRIGGER", "GO", "CHECK", "FIND_MIN", "RESULT", "SWAP", "SWAPPED", "NEIGHBOUR", "PLACE", "DONE")


@dataclass(frozen=True)
class Relay:
    """One message of the distributed update of SEP ``head`` at ``version`` (:mod:`.dnu`)."""

    op: str
    head: str
    version: int
    position: int
    order: tuple[str, ...]
    placement: tuple[int, ...]
    state: Optional[SeqState] = None
    best: Optional[tuple[str, float, int]] = None   # (stream, cost, placement)
    stream: Optional[str] = None
    stats: Optional[StreamStatistics] = None
    at: int = 0
    check: bool = False

    category = MODIFICATION

    def __post_init__(self) -> None:
        if self.op not in RELAY_OPS:
            raise ValueError(f"unknown relay op {self.op!r}")


Body = Union[StatsReport, PlanUpdate, WindowRequest, WindowData, Ready, Relay]


@dataclass(frozen=True)
class Message:
    """A protocol message from ``src`` to ``dst`` for trigger ``mid`` of ``query``."""

    src: str
    dst: str
    query: str
    mid: int
    body: Body

    @property
    def kind(self) -> str:
        """Its category (the simulator's per-link report groups by it)."""
        return self.body.category

    def dedup(self) -> tuple[Any, ...]:
        """What a copy of this message repeats (receivers drop a second one)."""
        b = self.body
        if isinstance(b, StatsReport):
            return ("stats", self.src, b.stream, b.epoch)
        if isinstance(b, PlanUpdate):
            return ("plan", self.mid, b.gen)
        if isinstance(b, WindowRequest):
            return ("request", self.mid, b.stream, b.holder, self.src)
        if isinstance(b, WindowData):
            return ("data", self.mid, b.stream, b.epoch, b.snapshot)
        if isinstance(b, Ready):
            return ("ready", self.mid, b.glob, self.src)
        return ("relay", self.mid, b.head, b.version, b.op, b.position, b.at, self.src, b.order, b.stream)


# ----------------------------------------------------------------------------- Avro

def _stats(s: StreamStatistics) -> dict[str, Any]:
    return {"rate": s.rate, "tuple_bytes": s.tuple_bytes, "window": s.window,
            "selectivity": [{"attr": a, "f": f} for a, f in s.selectivity]}


def _unstats(name: str, d: dict[str, Any]) -> StreamStatistics:
    return StreamStatistics(name, d["rate"], d["tuple_bytes"], d["window"],
                            tuple((x["attr"], x["f"]) for x in d["selectivity"]))


def _seps(seps: tuple[SEP, ...]) -> list[dict[str, Any]]:
    return [{"head": s.head, "order": list(s.order), "placement": list(s.placement)} for s in seps]


def _unseps(rows: list[dict[str, Any]]) -> tuple[SEP, ...]:
    return tuple(SEP(r["head"], tuple(r["order"]), tuple(r["placement"])) for r in rows)


def seq_state_data(s: SeqState) -> dict[str, Any]:
    """A join sequence's state as plain data (messages, a DNU node's checkpoint); inverse: :func:`seq_state_of`."""
    return {"joined": list(s.joined), "rate": s.rate, "bytes": s.full_bytes, "location": s.location,
            "classes": [{"attrs": sorted(f"{st}{_SEP}{a}" for st, a in c.attrs), "f": c.f} for c in s.classes]}


_SEP = "\x1f"  # between a stream's and an attribute's name (names may hold dots)


def _pair(x: str) -> tuple[str, str]:
    st, _, a = x.partition(_SEP)
    return st, a


def seq_state_of(d: dict[str, Any]) -> SeqState:
    classes = tuple(KeyClass(frozenset(_pair(x) for x in c["attrs"]), c["f"]) for c in d["classes"])
    joined = tuple(d["joined"])
    return SeqState(joined[0], joined, d["rate"], d["bytes"], classes, d["location"])


def _body(b: Body) -> tuple[str, dict[str, Any]]:
    if isinstance(b, StatsReport):
        return "joinlib.StatsReport", {"stream": b.stream, "epoch": b.epoch, "stats": _stats(b.stats)}
    if isinstance(b, PlanUpdate):
        return "joinlib.PlanUpdate", {"gen": b.gen, "notify": b.notify, "seps": _seps(b.jep.seps),
                                      "triggers": list(b.triggers)}
    if isinstance(b, WindowRequest):
        return "joinlib.WindowRequest", {"stream": b.stream, "holder": b.holder}
    if isinstance(b, WindowData):
        return "joinlib.WindowData", {"stream": b.stream, "epoch": b.epoch, "snapshot": b.snapshot, "base": b.base,
                                      "tuples": [avro.encode_tuple(t) for t in b.tuples]}
    if isinstance(b, Ready):
        return "joinlib.Ready", {"global": b.glob, "epoch": b.epoch, "digest": b.digest, "seps": _seps(b.seps),
                                 "versions": list(b.versions), "triggers": list(b.triggers)}
    return "joinlib.Relay", {
        "op": b.op, "head": b.head, "version": b.version, "position": b.position, "at": b.at, "check": b.check,
        "order": list(b.order),
        "placement": list(b.placement), "state": None if b.state is None else seq_state_data(b.state),
        "best": None if b.best is None else {"stream": b.best[0], "cost": b.best[1], "placement": b.best[2]},
        "stream": b.stream, "stats": None if b.stats is None else _stats(b.stats)}


def _unbody(name: str, d: dict[str, Any]) -> Body:
    if name == "joinlib.StatsReport":
        return StatsReport(d["stream"], d["epoch"], _unstats(d["stream"], d["stats"]))
    if name == "joinlib.PlanUpdate":
        return PlanUpdate(d["gen"], d["notify"], JEP(_unseps(d["seps"])), tuple(d["triggers"]))
    if name == "joinlib.WindowRequest":
        return WindowRequest(d["stream"], d["holder"])
    if name == "joinlib.WindowData":
        return WindowData(d["stream"], d["epoch"], d["snapshot"], d["base"],
                          tuple(avro.decode_tuple(x) for x in d["tuples"]))
    if name == "joinlib.Ready":
        return Ready(d["global"], d["epoch"], d["digest"], _unseps(d["seps"]), tuple(d["versions"]),
                     tuple(d["triggers"]))
    best = d["best"]
    return Relay(d["op"], d["head"], d["version"], d["position"], tuple(d["order"]), tuple(d["placement"]),
                 None if d["state"] is None else seq_state_of(d["state"]),
                 None if best is None else (best["stream"], best["cost"], best["placement"]),
                 d["stream"], None if d["stats"] is None else _unstats(d["stream"] or "", d["stats"]),
                 d["at"], d["check"])


def encode(msg: Message) -> bytes:
    """The message as Kafka carries it (schemaless Avro)."""
    out = io.BytesIO()
    fastavro.schemaless_writer(out, _SCHEMA, {"src": msg.src, "dst": msg.dst, "query": msg.query, "mid": msg.mid,
                                              "body": _body(msg.body)})
    return out.getvalue()


def decode(data: bytes) -> Message:
    rec: Any = fastavro.schemaless_reader(io.BytesIO(data), _SCHEMA, return_record_name=True,
                                         return_record_name_override=True)  # names only in the body union
    name, body = rec["body"]
    return Message(rec["src"], rec["dst"], rec["query"], rec["mid"], _unbody(name, body))


def size(msg: Message) -> int:
    """Encoded bytes of ``msg`` (what the simulator charges)."""
    return len(encode(msg))
