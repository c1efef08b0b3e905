"""The runtime's :class:`~joinlib.runtime.sensor.Sensor` as Prometheus metrics.

Names, types and labels follow docs/contracts.md ("Metrics") and monitoring/metrics.yaml;
values are in base units (seconds, bytes).  Histograms use millisecond-scale buckets (the
client's default 5 ms - 10 s buckets are too coarse for per-phase processing times).

Besides the Sensor hooks the node calls, the services call:
``on_ship`` (KafkaTransport, per message sent), ``on_transmission`` (consumer side, from the
``sent_ms`` header), ``on_naive`` (bytes a naive broadcast of every source tuple would ship),
``on_checkpoint`` / ``on_resume`` (restart recovery), ``set_lag`` and ``set_plan``; for live sources
``on_dead_letter`` and ``set_watermark_lag``; ``on_results`` labels results with a query (a node
serving several queries).

It is also an :class:`~joinlib.adaptive.config.AdaptiveSensor` (``--plan adaptive``, docs/adaptive.md):
``on_stream_stats`` sets the measured statistics, ``on_trigger`` counts statistics changes past the
threshold, ``on_plan_change`` counts the node's plan switches, sets its plan generation and
``joinlib_plan_info`` to the new plan, ``on_protocol`` counts the protocol's messages.  With ``log``
it also writes a line per trigger and plan switch (:class:`~joinlib.adaptive.config.LogSensor`).
"""
from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Optional, Sequence

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    start_http_server,
)

from joinlib.adapters.prom_histogram import FastCounter, FastHistogram
from joinlib.adaptive.config import AdaptiveSensor, LogSensor
from joinlib.adaptive.jep import JEP
from joinlib.adaptive.stats import StreamStatistics
from joinlib.plan.logical import Plan
from joinlib.settings import HttpSecurity, authorized, tls_server

TRANSMISSION_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
PROCESSING_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                      0.25, 0.5, 1.0)

# The node's phase names -> the contract's operator label values {tick, probe, semijoin, sync, ship}:
# starting a head batch belongs to the tick group of an epoch.
OPERATORS = {"tick": "tick", "start": "tick", "sync": "sync", "probe": "probe", "semijoin": "semijoin",
             "ship": "ship"}


def serve_metrics(port: int, registry: Optional[CollectorRegistry] = None,
                  http: Optional[HttpSecurity] = None) -> None:
    """Serve ``registry`` (default: the global registry) on ``port``'s /metrics in a daemon thread; over
    HTTPS and behind a bearer token when ``http`` (default: :meth:`HttpSecurity.from_env`) says so.

    The services call this rather than prometheus_client, so that the client stays behind the
    adapters layer (pyproject's node contract forbids importing it from joinlib.node).
    """
    http = HttpSecurity.from_env() if http is None else http
    registry = registry or REGISTRY
    if http.cert_file is None and http.metrics_token is None:
        start_http_server(port, registry=registry)
        return
    server = tls_server(ThreadingHTTPServer(("0.0.0.0", port), _metrics_handler(registry, http.metrics_token)),
                        http.server_context())
    threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True).start()


def _metrics_handler(registry: CollectorRegistry, token: Optional[str]) -> type:
    class Metrics(BaseHTTPRequestHandler):
        timeout = 30   # a client that opens a connection and sends nothing

        def do_GET(self) -> None:
            if not authorized(self.headers.get("Authorization"), token):
                self._send(401, b"unauthorized: send Authorization: Bearer <token> (JOINLIB_METRICS_TOKEN)\n",
                           "text/plain", [("WWW-Authenticate", 'Bearer realm="joinlib-metrics"')])
                return
            self._send(200, generate_latest(registry), CONTENT_TYPE_LATEST)

        def _send(self, code: int, body: bytes, ctype: str, extra: Sequence[tuple[str, str]] = ()) -> None:
            self.send_response(code)
            for k, v in [("Content-Type", ctype), ("Content-Length", str(len(body))), *extra]:
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:   # scrapes are not news
            pass
    return Metrics


class PrometheusSensor(AdaptiveSensor):
    """Sensor hooks -> Prometheus metrics in ``registry`` (default: the global registry).

    Use one registry per node when several nodes share a process (a registry refuses
    duplicate metric names).  ``query`` labels ``joinlib_results_total``; ``log`` (optional)
    gets a line per adaptive trigger and plan switch.
    """

    def __init__(self, registry: Optional[CollectorRegistry] = None, query: str = "",
                 log: Optional[Callable[[str], None]] = None) -> None:
        r = REGISTRY if registry is None else registry
        self.registry = r
        self.query = query
        self.logger: Optional[LogSensor] = LogSensor(log) if log is not None else None
        # Registered in this order (the order of the exposition), a group per concern.
        self._node_metrics(r)
        self._recovery_and_live_metrics(r)
        self._adaptive_metrics(r)
        self._reader_metrics(r)
        self._children: dict = {}
        self._plans: dict[str, list[tuple[str, str]]] = {}
        self._adaptive: set[tuple[str, str]] = set()
        self._generation: dict[tuple[str, str], int] = {}
        self._triggered: set[tuple[str, str, str, int]] = set()

    def _node_metrics(self, r: CollectorRegistry) -> None:
        """What every node reports: messages, processing, windows, results, inputs, lag, its plan."""
        # observed per message received and per phase run: FastHistogram (prom_histogram.py's docstring says why)
        self.transmission = FastHistogram(
            "joinlib_transmission_seconds",
            "Time from sending a message at site src until site dst received it, per message kind.",
            ["src", "dst", "kind"], TRANSMISSION_BUCKETS, r)
        self.processing = FastHistogram(
            "joinlib_processing_seconds",
            "Wall-clock time a node spent in one invocation of an operator (tick, probe, semijoin, sync, ship).",
            ["site", "operator"], PROCESSING_BUCKETS, r)
        self.shipped_bytes = FastCounter(   # one inc per message shipped: the client's Counter locks per inc
            "joinlib_shipped_bytes", "Bytes of message bodies shipped from site src to site dst, per message kind.",
            ["src", "dst", "kind"], r)
        self.shipped_messages = FastCounter(
            "joinlib_shipped_messages", "Messages shipped from site src to site dst, per message kind.",
            ["src", "dst", "kind"], r)
        self.naive_bytes = Counter(
            "joinlib_naive_bytes",
            "Bytes that shipping every source tuple from src to dst would have cost (the naive baseline).",
            ["src", "dst"], registry=r)
        self.window = Gauge(
            "joinlib_window_tuples", "Tuples currently held in a window store of a node, per stream and store.",
            ["site", "stream", "store"], registry=r)
        self.results = Counter(
            "joinlib_results", "Join results emitted by the node at site for a query.",
            ["site", "query"], registry=r)
        self.rows = Counter(
            "joinlib_rows_written", "Result rows written by the node at site to a query's sink topic (docs/sql.md).",
            ["site", "query", "topic"], registry=r)
        self.inputs = Counter(
            "joinlib_input_tuples", "Source tuples of a stream received by the node at its home site.",
            ["site", "stream"], registry=r)
        self.late = Counter(
            "joinlib_late_messages",
            "Messages that arrived after the allowed delay (max_delay) and were counted as late, per kind.",
            ["site", "kind"], registry=r)
        self.lag = Gauge(
            "joinlib_consumer_lag_messages",
            "Messages the Kafka consumer of a query's run at a node is behind the end of a topic.",
            ["site", "query", "topic"], registry=r)
        self.plan_info = Gauge(
            "joinlib_plan_info",
            "Always 1; labels describe the plan currently executed for a query "
            "(head stream, plan sequence number).",
            ["query", "head", "sequence"], registry=r)

    def _recovery_and_live_metrics(self, r: CollectorRegistry) -> None:
        """Checkpoints and resumes (restart recovery), dead letters and watermarks (live sources)."""
        self.checkpoint = Histogram(
            "joinlib_checkpoint_seconds",
            "Time a node took to save a checkpoint (producer flush + atomic Redis snapshot of its windows and state).",
            ["site"], buckets=TRANSMISSION_BUCKETS, registry=r)
        self.resumes = Counter(
            "joinlib_resumes", "Times a node resumed a run from its last checkpoint after a restart.",
            ["site", "query"], registry=r)
        self.repartitions = Counter(
            "joinlib_repartitions",
            "Times the planner moved a live partitioned query to a partition function fitted to its current "
            "per-value rates (joinlib submit --repartition).", ["query"], registry=r)
        self.repartition_gain = Gauge(
            "joinlib_repartition_gain",
            "At the planner's latest check of a query submitted with --repartition: the rate model's bytes/s of its "
            "running partition function over a refit's (it moves past 1 + threshold).", ["query"], registry=r)
        self.dead_letters = Counter(
            "joinlib_dead_letters",
            "Records of a live source written to the dead-letter topic dlq.<query>, per reason "
            "(late, bad_json, bad_avro, missing_field, wrong_type, no_value, duplicate_id, too_far_ahead).",
            ["site", "query", "stream", "reason"], registry=r)
        self.watermark_lag = Gauge(
            "joinlib_watermark_lag_seconds",
            "Processing time minus the event-time watermark of a live stream at its site.",
            ["site", "query", "stream"], registry=r)

    def _adaptive_metrics(self, r: CollectorRegistry) -> None:
        """Adaptive re-planning (``--plan adaptive``): plan changes, triggers, measured statistics, protocol."""
        self.plan_changes = Counter(
            "joinlib_plan_changes",
            "Plan switches of the node at site for a query (adaptive re-planning: every node of the query "
            "switches once per plan change, at the head epoch the nodes agreed on).",
            ["site", "query"], registry=r)
        self.plan_generation = Gauge(
            "joinlib_plan_generation",
            "The plan generation the node at site runs for a query (0: the initial plan; +1 per plan change).",
            ["site", "query"], registry=r)
        self.triggers = Counter(
            "joinlib_adaptive_triggers",
            "Statistics changes of a stream past the threshold (rate, tuple size or selectivity, for "
            "persistence intervals in a row) that made its node ask for re-planning.",
            ["site", "query", "stream"], registry=r)
        self.measured_rate = Gauge(
            "joinlib_measured_rate",
            "Rate of a stream measured at its site over the last measurement interval, tuples per second.",
            ["site", "query", "stream"], registry=r)
        self.measured_bytes = Gauge(
            "joinlib_measured_tuple_bytes",
            "Mean encoded size of a stream's tuples measured at its site over the last measurement interval.",
            ["site", "query", "stream"], registry=r)
        self.measured_selectivity = Gauge(
            "joinlib_measured_selectivity",
            "Selectivity of a stream's join attribute measured at its site (the chance that two tuples "
            "share the value).",
            ["site", "query", "stream", "attribute"], registry=r)
        self.protocol = Counter(
            "joinlib_adaptive_messages",
            "Adaptive protocol messages sent by the node at site, per message type and the paper's "
            "category (modification, migration, sync).",
            ["site", "message", "category"], registry=r)

    def _reader_metrics(self, r: CollectorRegistry) -> None:
        """Rejected messages of every reader (nodes, planner) and the last checkpoint's time."""
        self.rejected = Counter(
            "joinlib_rejected_messages",
            "Messages read from a joinlib topic (control, node.<query>.<site>, src.<query>.<stream>) that were "
            "rejected and ignored, per reason (undecodable, invalid, bad_header); site is the reader "
            "(a node's site, or planner).",
            ["site", "topic", "reason"], registry=r)
        self.checkpoint_time = Gauge(
            "joinlib_checkpoint_timestamp_seconds",
            "Unix time of the last checkpoint a node saved (nodes with REDIS_URL only); time() minus it is the "
            "checkpoint age.",
            ["site"], registry=r)

    def _child(self, metric, *labels):
        key = (id(metric), labels)
        c = self._children.get(key)
        if c is None:
            c = self._children[key] = metric.labels(*labels)
        return c

    # ------------------------------------------------------------------ Sensor hooks
    def on_input(self, site: str, stream: str, n: int) -> None:
        self._child(self.inputs, site, stream).inc(n)

    def on_phase(self, site: str, operator: str, seconds: float) -> None:
        self.processing.observe((site, OPERATORS.get(operator, operator)), seconds)

    @property
    def phases_direct(self) -> bool:
        """Whether :meth:`on_phase` only adds to :meth:`phase_series` (not so in a subclass that observes phases
        otherwise): a caller may then add to the series itself."""
        return type(self).on_phase is PrometheusSensor.on_phase

    def phase_series(self, site: str, operator: str) -> list[float]:
        """What :meth:`on_phase` of ``(site, operator)`` adds to: the processing histogram's series (see
        ``FastHistogram.series``; its bucket bounds are ``self.processing.bounds``), for a caller that observes it
        directly (a node's phase hook, :func:`joinlib.node.run_report.phase_hook`)."""
        return self.processing.series((site, OPERATORS.get(operator, operator)))

    def on_emit(self, site: str, n: int) -> None:
        self._child(self.results, site, self.query).inc(n)

    def on_results(self, site: str, query: str, n: int) -> None:
        self._child(self.results, site, query).inc(n)

    def on_rows(self, site: str, query: str, topic: str, n: int) -> None:
        self._child(self.rows, site, query, topic).inc(n)

    def on_late(self, site: str, kind: str) -> None:
        self._child(self.late, site, kind).inc()

    def on_window(self, site: str, stream: str, store: str, size: int) -> None:
        self._child(self.window, site, stream, store).set(size)

    # ------------------------------------------------------------------ service hooks
    def on_ship(self, src: str, dst: str, kind: str, nbytes: int) -> None:
        link = (src, dst, kind)
        self.shipped_bytes.inc(link, nbytes)
        self.shipped_messages.inc(link)

    def on_transmission(self, src: str, dst: str, kind: str, seconds: float) -> None:
        self.transmission.observe((src, dst, kind), max(0.0, seconds))

    def on_naive(self, src: str, dst: str, nbytes: int) -> None:
        self._child(self.naive_bytes, src, dst).inc(nbytes)

    def on_checkpoint(self, site: str, seconds: float) -> None:
        self._child(self.checkpoint, site).observe(seconds)
        self._child(self.checkpoint_time, site).set_to_current_time()

    def on_resume(self, site: str, query: str) -> None:
        self._child(self.resumes, site, query).inc()

    def on_repartition_check(self, query: str, gain: float, moved: bool) -> None:
        """The planner judged ``query``'s partition function (services/planner/repartition.py)."""
        self._child(self.repartition_gain, query).set(gain)
        if moved:
            self._child(self.repartitions, query).inc()

    def set_lag(self, site: str, query: str, topic: str, messages: int) -> None:
        """Per query: the runs of two queries at a node that read one topic (``control``, a shared source) each
        have their own consumer, and their own position in it."""
        self._child(self.lag, site, query, topic).set(messages)

    def on_dead_letter(self, site: str, query: str, stream: str, reason: str) -> None:
        self._child(self.dead_letters, site, query, stream, reason).inc()

    def set_watermark_lag(self, site: str, query: str, stream: str, seconds: float) -> None:
        self._child(self.watermark_lag, site, query, stream).set(seconds)

    def on_rejected(self, site: str, topic: str, reason: str) -> None:
        self._child(self.rejected, site, topic, reason).inc()

    def set_plan(self, query: str, plan) -> None:
        """``plan``: a :class:`~joinlib.plan.logical.Plan`; one series per head, ``sequence`` = its join
        sequence as text (``S2:SM-S1,S3:SP-D``; ``@site/`` prefix if it starts elsewhere); the series
        of an earlier plan of the query are removed.  A partitioned plan (PMJoin): the series of every
        partition's plan, ``head`` as ``S1/p2`` (partition 2)."""
        for head, text in self._plans.pop(query, []):
            try:
                self.plan_info.remove(query, head, text)
            except KeyError:
                pass
        parts = getattr(plan, "plans", None)
        labelled = [(f"/p{i}", p) for i, p in enumerate(parts)] if parts is not None else [("", plan)]
        series = []
        for suffix, part_plan in labelled:
            for seq in part_plan.sequences:
                text = ",".join(f"{st.stream}:{st.algorithm}" for st in seq.steps)
                if seq.start:
                    text = f"@{seq.start}/{text}"
                self.plan_info.labels(query, seq.head + suffix, text).set(1)
                series.append((seq.head + suffix, text))
        self._plans[query] = series

    # ------------------------------------------------------------------ adaptive hooks
    def on_stream_stats(self, site: str, query: str, epoch: int, stats: StreamStatistics) -> None:
        if (site, query) not in self._adaptive:   # series at 0 from the first measurement, so that
            self._adaptive.add((site, query))     # increase() and changes() see the first plan change
            self._child(self.plan_changes, site, query).inc(0)
            self._child(self.plan_generation, site, query).set(0)
        self._child(self.triggers, site, query, stats.stream).inc(0)
        self._child(self.measured_rate, site, query, stats.stream).set(stats.rate)
        self._child(self.measured_bytes, site, query, stats.stream).set(stats.tuple_bytes)
        for attr, f in stats.selectivity:
            self._child(self.measured_selectivity, site, query, stats.stream, attr).set(f)

    def on_trigger(self, site: str, query: str, epoch: int, stats: StreamStatistics) -> None:
        key = (site, query, stats.stream, epoch)
        if key in self._triggered:
            return   # a node restarted from a checkpoint replays its inputs and triggers again
        self._triggered.add(key)
        self._child(self.triggers, site, query, stats.stream).inc()
        if self.logger is not None:
            self.logger.on_trigger(site, query, epoch, stats)

    def on_plan_change(self, site: str, query: str, gen: int, epoch: int, jep: JEP,
                       triggers: tuple[int, ...]) -> None:
        self._adaptive.add((site, query))
        if gen <= self._generation.get((site, query), 0):
            return   # a replayed switch (restart) is counted once
        self._generation[(site, query)] = gen
        self._child(self.plan_changes, site, query).inc()
        self._child(self.plan_generation, site, query).set(gen)
        self.set_plan(query, Plan(tuple(s.sequence() for s in jep.seps)))
        if self.logger is not None:
            self.logger.on_plan_change(site, query, gen, epoch, jep, triggers)

    def on_protocol(self, site: str, kind: str, category: str) -> None:
        self._child(self.protocol, site, kind, category).inc()
