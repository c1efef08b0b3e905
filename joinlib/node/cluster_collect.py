"""What a cluster run (:mod:`.cluster`) reads while it runs: the replay of the sources into Kafka
(:class:`Replayer`), then ``control`` and ``out.<query>`` until every node is done (:func:`collect`): the nodes'
``status`` and ``done`` messages (typed, :mod:`joinlib.control.messages`) and the result batches, handed to the
sink on the replay's event-time axis.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Optional, Sequence

from joinlib.adapters.kafka import consume, control_topic_of, is_control_topic
from joinlib.adaptive.service import quiescent
from joinlib.control.check import accept_control
from joinlib.control.messages import DoneMessage, StatusMessage
from joinlib.errors import ClusterError
from joinlib.model import Query, Tup
from joinlib.node.cluster_nodes import NodeHandle
from joinlib.node.replay import replay
from joinlib.node.scale_out import done_key
from joinlib.protocol import records


class Replayer(threading.Thread):
    def __init__(self, out, query, streams, rate_scale, run, progress, split=None) -> None:
        super().__init__(name="replay", daemon=True)
        self.args = (out, query, streams, rate_scale, run, progress)
        self.split = split
        self.info: Optional[Any] = None  # a replay.ReplayInfo once the replay is done
        self.error: Optional[BaseException] = None
        self.t0_ms: Optional[float] = None

    def run(self) -> None:
        out, query, streams, rate_scale, run, progress = self.args
        try:
            self.info = replay(out, query, streams, rate_scale=rate_scale, run=run, progress=progress,
                               split=self.split)
        except BaseException as e:
            self.error = e


class Results:
    """What a cluster run collected: result counts with their head and emit times, the nodes' dones and latest
    statuses (by site, or ``site/p<part>`` for a scaled-out plan's partitions), the restarts of its drill."""

    def __init__(self) -> None:
        self.count = 0
        self.head_ts: list[int] = []   # per result group: head ts, emit time, number of results
        self.emit_ms: list[int] = []
        self.weight: list[int] = []
        self.done: dict[str, DoneMessage] = {}
        self.status: dict[str, tuple[float, StatusMessage]] = {}
        self.restarts: list[dict] = []


def collect_results(consumer: Any, query: Query, sink: Any, nodes: dict[str, NodeHandle], replayer: Replayer,
            timeout_s: float, run: str, chaos: Any, adaptive: bool = False, outputs: Sequence[Query] = (),
            wanted: Optional[set[str]] = None, merge: Any = None) -> Results:
    """Consume ``control`` and ``out.<query>`` (of each of ``outputs`` if given) until every node is done
    and every result it announced has arrived (adaptive: and the nodes have ended the protocol); start the
    replay once every node runs, kill nodes on schedule.  ``wanted``: whose ``done`` to wait for (default:
    every site of ``nodes``; a scaled-out plan: every (site, partition), whose dones ``merge`` adds up)."""
    c = _Collector(query, sink, nodes, run, adaptive, outputs, wanted)
    deadline = time.monotonic() + timeout_s
    t_replay: Optional[float] = None
    while True:
        if replayer.ident is None and c.wanted <= set(c.res.status) | set(c.res.done):
            replayer.start()  # every node is up and consuming: start the clock
            t_replay = time.monotonic()
        chaos.tick(t_replay)
        for msg in consume(consumer, 5000, 0.1):
            c.take(msg)
        c.flush(replayer.info)
        c.check(replayer, query)
        if c.complete() and replayer.info is not None:
            break
        if time.monotonic() > deadline:
            raise ClusterError(_timeout_message(query, run, timeout_s, nodes, c.res, c.expected(), c.wanted))
    c.flush(replayer.info)
    c.res.restarts = chaos.done
    if c.res.count != c.expected():
        raise ClusterError(f"{query.name}: received {c.res.count} results, nodes announced {c.expected()}")
    if merge is not None:
        c.res.done = merge(c.res.done)
    return c.res


class _Collector:
    """What the cluster runner reads: nodes' status and done messages, result batches."""

    def __init__(self, query: Query, sink: Any, nodes: dict[str, NodeHandle], run: str,
                 adaptive: bool = False, outputs: Sequence[Query] = (), wanted: Optional[set[str]] = None) -> None:
        self.wanted = set(nodes) if wanted is None else wanted
        self.adaptive = adaptive
        self.query, self.sink, self.nodes, self.run = query, sink, nodes, run
        self.res = Results()
        self.batch_ids: set[tuple[str, str, int, int, str, int]] = set()   # result batches taken
        self.pos_of = {q.name: {n: i for i, n in enumerate(q.names)} for q in (outputs or [query])}
        self.pending: list[Any] = []   # results before the replay start time is known

    def take(self, msg: Any) -> None:
        if is_control_topic(msg.topic()):
            self._control(msg)
        else:
            self._results(msg)

    def _control(self, msg: Any) -> None:
        try:
            c = records.decode_control(msg.value())
        except ValueError:
            return
        if c.query != self.query.name or c.kind not in ("done", "status"):
            return
        got = accept_control(c.query, c.kind, c.payload)
        if isinstance(got, str) or got.message.run != self.run:
            return   # another run's, or not a message a node writes
        m = got.message
        assert isinstance(m, (DoneMessage, StatusMessage))
        if control_topic_of(c.kind, m.site) != msg.topic():
            return   # a report naming another site than its topic's: forged
        key = done_key(m.site, m.part)
        if isinstance(m, DoneMessage):
            self.res.done[key] = m
            h = self.nodes.get(key)
            if h is not None and hasattr(h, "done"):
                h.done = True
        else:
            self.res.status[key] = (time.monotonic(), m)

    def _results(self, msg: Any) -> None:
        res = self.res
        bid = records.result_batch_id(msg.value())
        if bid in self.batch_ids:   # written twice (a fenced instance's queued messages): counted once
            return
        self.batch_ids.add(bid)
        if self.sink is not None:
            b = records.decode_result_batch(msg.value())
            self.pending.append(b)
            emit_ms, groups = b.emit_ms, [(g.head_ts, len(g.last_ids)) for g in b.groups]
        else:
            emit_ms, groups = records.result_batch_summary(msg.value())
        for head_ts, k in groups:
            res.count += k
            res.head_ts.append(head_ts)
            res.emit_ms.append(emit_ms)
            res.weight.append(k)

    def flush(self, info: Any) -> None:
        """Results kept until the replay's start time was known go to the sink."""
        if self.sink is not None and self.pending and info is not None:
            _to_sink(self.sink, self.pending, self.pos_of, info)
            self.pending = []

    def check(self, replayer: Replayer, query: Query) -> None:
        if replayer.error is not None:
            raise ClusterError(f"replaying the sources of {query.name} failed: {replayer.error}")
        for h in self.nodes.values():
            why = h.failure()
            if why:
                raise ClusterError(why)

    def expected(self) -> Optional[int]:
        """Results the nodes announced, once every node is done."""
        if not self.wanted <= set(self.res.done):
            return None
        return sum(d.results for d in self.res.done.values())

    def complete(self) -> bool:
        n = self.expected()
        if n is None or self.res.count < n:
            return False
        if self.adaptive:  # a node may publish done again after a round that started near the end
            return quiescent({k: d.to_json() for k, d in self.res.done.items()}, self.nodes)
        return True


def _to_sink(sink, batches: list, pos_of_query: dict, info) -> None:
    """Result batches -> ``sink.emit`` groups (tuples carry only ids; the head its ts), emit
    times on the event-time axis of the replay."""
    t0, scale = info.t0_ms, info.rate_scale or 1.0
    for b in batches:
        now = (b.emit_ms - t0) * scale
        pos_of = pos_of_query[b.query]
        m = len(pos_of)
        for g in b.groups:
            row: list = [None] * m
            head_pos = pos_of[g.head]
            for name, tid in g.ids.items():
                p = pos_of[name]
                row[p] = Tup(p, tid, g.head_ts if p == head_pos else 0, 0, ())
            last = pos_of[g.last]
            ts = g.head_ts if last == head_pos else 0   # a tree's results: the head is the last stream
            sink.emit((b.query, b.part, b.gen), head_pos, last,
                      [(tuple(row), [Tup(last, i, ts, 0, ()) for i in g.last_ids])], now)


def _timeout_message(query, run, timeout_s, nodes, res: Results, expected, wanted=None) -> str:
    parts = []
    now = time.monotonic()
    for key in sorted(wanted) if wanted is not None else nodes:   # sites, or (site, partition) when scaled out
        if key in res.done:
            continue
        st = res.status.get(key)
        if st is None:
            where = "no status message: did the node start?"
        else:
            at, status = st
            where = f"at epoch {status.epoch} of {status.last_epoch}, last status {now - at:.1f}s ago"
        h = nodes.get(key)
        log = f"; log {h.log}" if h is not None and h.log else ""
        what = f"site {key}" if "/p" not in key else "partition {1} of site {0}".format(*key.split("/p"))
        parts.append(f"{what} did not finish ({where}{log})")
    if not parts:
        parts.append(f"every node finished but only {res.count} of {expected} results arrived")
    return f"cluster run of {query.name} (run {run}) timed out after {timeout_s:.0f}s: " + "; ".join(parts)
