"""What a :class:`~.node_run.PlanRun` is made of besides its loop: the node service it runs in (its owner, a
:class:`NodeOwner`), which part of the plan message it runs (:class:`RunScope`), and the two strategies that
differ between a plan's run, a scaled-out partition's (:mod:`.scale_out`) and an MJoin operator's
(:mod:`.tree_service`): how it reads its source batches (:class:`SourceReader`) and where its results go
(:class:`PlanOutput`).  The run composes them with its inputs (:mod:`.run_inputs`), its status reporter
(:mod:`.run_report`) and its checkpointer (:class:`~.recovery.Checkpointer`).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Protocol

from joinlib.adapters.kafka import KafkaResultSink
from joinlib.adapters.kafka_rows import RowsOut
from joinlib.model import Query, Stream, Tup
from joinlib.runtime.sink import Sink


class NodeOwner(Protocol):
    """The node service as its runs see it (:class:`~.node_service.NodeService`)."""

    site: str
    bootstrap: str
    redis_url: Optional[str]
    store_factory: Optional[Callable[[str], Any]]
    sensor: Any                      # the service's PrometheusSensor
    stop: threading.Event            # set: every run checkpoints and returns
    checkpoint_every_s: float
    rejections: Any                  # joinlib.adapters.rejections.Rejections
    reject_control: Any
    finished_runs: list[Any]         # the done messages published
    resumed_from: Optional[dict[str, Any]]
    instance: str                    # which instance of the site this is (host:pid:tag)

    def log(self, msg: str) -> None: ...


@dataclass(frozen=True)
class RunScope:
    """Which part of a plan message a run executes and whose topics it uses: ``part`` (None: every plan
    partition) of a scaled-out plan, whose source and node topics have ``topic_parts`` partitions and whose
    status and done name ``part`` and ``instance``; ``ctl_query``: the query whose ``end`` and ``stop`` apply,
    ``live_name``: whose ``dlq`` and ``wm`` topics the live ingest writes (a tree operator's: its tree query's;
    None: the run's own query); ``topic_runs``: input topics another run writes (a shared operator's);
    ``rekeyed``: the live streams' tuples come as SourceBatches on ``src.<query>.<stream>``, written by the
    site's re-keyer (a scaled-out live query's partition: :mod:`.rekey`), not from the users' topics."""

    part: Optional[int] = None
    topic_parts: int = 1
    instance: Optional[str] = None
    ctl_query: Optional[str] = None
    live_name: Optional[str] = None
    topic_runs: Mapping[str, str] = field(default_factory=dict)
    rekeyed: bool = False


class SourceReader:
    """How a run reads ``src.<query>.<stream>``: a batch's tuples (None: not a batch of that stream, rejected),
    its watermark in the run's event time, and whether the run counts the naive baseline of its batches."""

    naive = True

    def tuples(self, run: Any, b: Any, stream: Stream) -> Optional[list[Tup]]:
        if b.stream != stream.name or any(t.pos != stream.pos for t in b.tuples):
            return None
        return list(b.tuples)

    def watermark(self, run: Any, b: Any, stream: Stream) -> int:
        return int(b.watermark)

    def start(self, run: Any, offsets: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        """Where a run that does not resume from a checkpoint of its own reads its inputs from (absent: the
        beginning); its host exists already.  A shared operator's reader starts at the operator's mark."""
        return offsets


class PlanOutput:
    """Where a run's results go: ``out.<query>`` (an MJoin operator's: :mod:`.tree_service`).  ``out_query``
    (None: the run's query) is the query whose out topic takes them; the output's own state, if any, is
    checkpointed with the run."""

    out_query: Optional[Query] = None

    def sink(self, run: Any) -> Sink:
        return KafkaResultSink(run.out, run.q, run.site, headers=run.headers, rows=rows_out(run))

    def after_step(self, run: Any) -> None:
        """After each step of the host (an operator hands its derived stream over)."""

    def keeps_checkpoints(self) -> bool:
        return True

    def checkpointed(self, run: Any) -> Optional[bytes]:
        """A checkpoint is being taken, the producer flushed: what it publishes for other runs to read (a shared
        operator's derived-topic marks), or None.  Called before :meth:`state`."""
        return None

    def state(self) -> Any:
        """What a checkpoint keeps of the output (plain data)."""
        return None

    def restore(self, st: Any) -> None:
        """The inverse of :meth:`state`, on resuming."""


def rows_out(run: Any) -> Optional[RowsOut]:
    """The rows part of ``run``'s sink when its query writes rows to a sink topic (docs/sql.md), else None."""
    q = run.q
    if q.output.sink_topic is None:
        return None
    on_rows = getattr(run.svc.sensor, "on_rows", None)   # the service's Prometheus sensor: rows/s
    topic = q.output.sink_topic

    def written(n: int) -> None:
        if on_rows is not None:
            on_rows(run.site, q.name, topic, n)
    return RowsOut(run.out, q, run.site, run.origin, run.headers, written)
