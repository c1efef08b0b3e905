"""Plan submitted queries with the same planners as embedded mode and publish them; follow them.

HTTP API (JSON answers; ``joinlib submit | queries | stop | results | status`` are its clients):

* ``GET /healthz``: ``ok``;
* ``POST /queries?plan=auto&model=wire&since=now``, body: the query file (YAML): plans it (any plan
  name of :mod:`joinlib.planner.registry`, default ``auto`` where the registry has it, else ``greedy``;
  ``planner=`` is the old name of ``plan=``; ``model`` defaults to the registry's), creates its
  topics, publishes the plan on ``control`` (every node service compiles it and takes its share, its
  node operator set); for a live query (json/avro sources) also its origin (``since``,
  :func:`joinlib.ingest.lifecycle.origin_for`) and where each source partition starts; 201
  ``{"query", "run", "plan"}``; 400 ``{"error"}`` for a bad query or plan; 409 if a live query of that
  name is still running.  ``plan=mjoin`` (a tree in the file's ``mjoin_tree``, or STREAMJOINOPT's): a live
  query's inner MJoins are operator deployments shared with other queries (:mod:`.trees`), unless
  ``reuse=0``; the answer adds ``deployed`` and ``reused`` (operator deployments);
  ``scale_out=1`` (with ``plan=pmjoin...``): the plan's partitions are shared by each site's node instances,
  a live query's sources re-keyed by partition at each site (docs/pmjoin.md "Scale-out within a site");
  ``repartition=R`` (with ``plan=pmjoin:rate|range|site...``, live sources): replanned to a function fitted to the
  reported per-value rates whenever the running one costs more than 1 + R times it (:mod:`.repartition`);
  ``sample=1`` (with ``plan=auto``, live sources): planned on a sample of the sources' newest records, as ``--data``
  plans (:mod:`joinlib.node.live_sample`);
* ``POST /explain?plan=auto&model=wire``, body: the query file (YAML, as for ``POST /queries``): the plan that
  submission would choose, explained without running anything (:mod:`joinlib.costs.explanation`: per site what
  runs and what it sends, bytes per link and kind, ``central``'s and the floor's estimates): 200 with the
  explanation's JSON plus ``text``, what ``joinlib explain`` prints; 400 ``{"error"}`` for a bad query or plan;
* ``GET /queries``: every known query with its state and figures (input rates, results/s, bytes
  shipped against ``central``'s, dead letters, p50/p99 latency);
* ``GET /queries/<name>``: the same for one query, plus its plan and per-site progress;
* ``POST /queries/<name>/replan?plan=P&margin=SECONDS``: moves a running live query to plan P without stopping it
  (docs/live.md "Replan"): a new run from a switch time on, the running one ends by itself there; 200 ``{"query",
  "run", "replaces", "plan", "switch_ms", "origin_ms", "reread_all"}``; 404 unknown query, 409 not running or
  switching already, 400 a plan kind that cannot be replanned; ``pmjoin:rate|range|site`` is fitted to the query's
  live per-value rates (409 before its nodes have reported any), ``auto`` weighs every kind but MJoin trees on a
  sample of the sources' newest records (:mod:`joinlib.node.live_sample`);
* ``POST /queries/<name>/stop`` (or ``DELETE /queries/<name>``): publishes ``stop`` for its run, then for
  each operator deployment it used that no running query still uses; 409 for an operator still in use;
* ``GET /queries/<name>/results?from=beginning|end|OFFSET&max=N&wait=S``: results of its current run
  in the OUT format, ``{"results": [...], "next": OFFSET, "end": OFFSET}``;
* ``GET /queries/<name>/values``: a live query's per-value rates over the last minute of event time
  (:mod:`joinlib.pmjoin.value_monitor`; the JSON of ``joinlib stats --values``, for ``--plan pmjoin:rate``);
  409 before its nodes have reported any.

State comes from the ``control`` topic (plans, ``status`` / ``done`` of the nodes, ``stop``), read
by a background thread, so a restarted planner knows every earlier submission.

With a token (``JOINLIB_PLANNER_TOKEN[_FILE]``, docs/security.md) every route but ``/healthz`` answers
401 unless the request carries ``Authorization: Bearer <token>``.
"""
from __future__ import annotations

import json
import ssl
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Optional
from urllib.parse import parse_qs, urlparse

import yaml
from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from joinlib.adapters.kafka import (
    CONTROL_TOPIC,
    ENDS_TOPIC,
    consume,
    end_offsets,
    ensure_topics,
    is_control_topic,
    make_admin,
    make_consumer,
    make_producer,
    make_watcher,
    query_topics,
    status_topic,
)
from joinlib.adapters.rejections import Rejections
from joinlib.control.check import INVALID
from joinlib.control.messages import (
    DoneMessage,
    LiveStart,
    PlanMessage,
    Replan,
    StatusMessage,
    StopMessage,
)
from joinlib.control.run_plan import AdaptiveRun, Deployable, Generations, PartitionedRun, TreesRun, next_generation
from joinlib.costs import DEFAULT_MODEL
from joinlib.costs.explanation import format_explanation
from joinlib.errors import ClusterError, JoinlibError
from joinlib.ingest.lifecycle import QueryStats, origin_for
from joinlib.model import Query
from joinlib.node.control import ControlRecord, decode_control_message, publish_sync
from joinlib.node.live_queries import read_results, replan_point, source_starts
from joinlib.node.live_sample import auto_on_sample
from joinlib.node.scale_out import scale_message, scaled_topics
from joinlib.node.sources import RegistrySchemas, live_streams
from joinlib.plan.logical import central
from joinlib.planner.explained import explain_query
from joinlib.planner.registry import PlanKind, lookup, plan_kind, resolve_run_plan
from joinlib.pmjoin.repartition import FITTED, check_repartitionable, scheme_of
from joinlib.pmjoin.value_monitor import VALUES_EVERY_S
from joinlib.query import parse_query
from joinlib.settings import authorized, tls_server
from services.planner.repartition import Repartitioner, threshold_arg
from services.planner.trees import released, status_json, submit_tree, used_by


def default_plan() -> str:
    """The registry's default: ``auto`` where it exists, else ``greedy``."""
    return "auto" if lookup("auto") is not None else "greedy"


def plan_of(query: Query, planner: str, model: Optional[str] = None, values: Any = None) -> Deployable:
    """The plan of a submission (:func:`joinlib.planner.registry.run_plan`): for ``adaptive[:cnu|:dnu]``
    (seed 003, docs/adaptive.md) Algorithm 1's initial plan and the configuration the nodes re-plan with; for
    ``pmjoin[:hash|range|rate][:D]`` (seed 002) a partitioned plan from the per-value rates ``values``
    (``joinlib stats --values``; hash needs none), ``auto`` per partition on the query with its partition's
    rates."""
    if values is not None and plan_kind(planner) is not PlanKind.PARTITIONED:
        raise JoinlibError("per-value rates ('partition_values', joinlib submit --values) are for "
                           "--plan pmjoin[:hash|range|rate][:D] only")
    plan = resolve_run_plan(query, planner, model or DEFAULT_MODEL, values=values)
    assert not isinstance(plan, TreesRun)   # trees are submit_tree's
    return plan


#: how far after the newest event time a replan's switch lies, by default (``joinlib replan --margin``)
DEFAULT_MARGIN_MS = 3_000


def _check_options(query: Query, planner: str, model: Optional[str], scale_out: bool, repartition: Optional[float],
                   sample: bool) -> None:
    """JoinlibError unless a submission's ``repartition`` and ``sample`` fit its plan and sources."""
    live = bool(live_streams(query))
    if repartition is not None:
        check_repartitionable(query, planner, repartition)
        if scale_out or not live:
            raise JoinlibError("--repartition moves a live query with a replan: its streams need live sources, "
                               "and a scaled-out plan is not replanned")
    if sample and (planner != "auto" or not live or model is not None):
        raise JoinlibError("--sample goes with --plan auto on a live query, without --model: auto then plans on "
                           "its sources' newest records")


def _replannable(q: Query, msg: PlanMessage, planner: str) -> None:
    """JoinlibError unless ``q``, running ``msg``, can move to ``planner``'s plan with a replan."""
    kinds = (PlanKind.PLANS, PlanKind.PARTITIONED, PlanKind.ADAPTIVE)
    if plan_kind(planner) not in kinds:
        raise JoinlibError(f"--plan {planner}: a replan moves a query to a static plan (auto, greedy, central, a "
                           "reduction, an algorithm), a partitioned one (pmjoin[:hash|range|rate][:D]) or an adaptive "
                           "one (adaptive[:cnu|:dnu]); not to an MJoin tree plan yet (a query running one may move "
                           "to another plan)")
    if msg.scale_out or msg.operator is not None or msg.uses \
            or isinstance(msg.plan, dict) and any(k in msg.plan for k in ("mjoin_trees", "mjoin_trees_of")):
        raise JoinlibError(f"query {q.name} runs a scaled-out plan, a shared operator or several MJoin trees: a "
                           "replan moves static, partitioned (pmjoin), adaptive and single MJoin tree plans; stop "
                           "it and submit it again")
    counted = [s.name for s in q.streams if not s.window.is_time]
    if counted:
        raise JoinlibError(f"{', '.join(counted)} have tuple windows: a replan warms the new run's windows from one "
                           "window of event time before the switch, which a count window has not")


class Conflict(JoinlibError):
    """The request does not fit the query's state (HTTP 409)."""


class NotFound(JoinlibError):
    """No such query (HTTP 404)."""


@dataclass
class QueryStatus:
    name: str
    run: str
    plan: dict
    planner: str
    sites: dict = field(default_factory=dict)  # site -> {"epoch", "last_epoch", "done", "results"}
    submitted_ms: float = 0.0
    query: Optional[Query] = None
    nodes: list = field(default_factory=list)
    live: bool = False
    origin_ms: int = 0
    out_start: int = 0
    rows_start: int = 0          # where the run's rows start on its sink topic (a query writing rows there)
    stopping: bool = False
    stats: Optional[QueryStats] = None
    uses: list = field(default_factory=list)      # the operator deployments it reads (docs/multiquery.md)
    operator: Optional[dict] = None               # an operator deployment's key, producer, node, streams
    message: Optional[PlanMessage] = None         # the run's plan message
    previous: Optional["QueryStatus"] = None      # the run a replan switched from (docs/live.md "Replan")
    replaced: dict = field(default_factory=dict)  # every earlier run of a replanned query -> its origin
    repartition: Optional[float] = None           # submit --repartition's threshold (services/planner/repartition.py)
    repartition_check: Optional[dict] = None      # its latest verdict
    repartitions: list = field(default_factory=list)   # the automatic re-partitions so far

    def state(self) -> str:
        nodes = self.nodes or list(self.sites)
        if nodes and all(self.sites.get(n, {}).get("done") for n in nodes):
            stopped = self.stopping or any(s.get("stopped") for s in self.sites.values())
            return "stopped" if stopped else "done"
        return "stopping" if self.stopping else "running"

    def to_json(self) -> dict:
        out = {"query": self.name, "run": self.run, "planner": self.planner, "plan": self.plan,
               "state": self.state(), "live": self.live, "sites": self.sites}
        if self.uses:
            out["uses"] = self.uses
        if self.operator is not None:
            out["operator"] = self.operator
        if self.live:
            out["origin_ms"] = self.origin_ms
        if self.stats is not None:
            out["stats"] = self.stats.summary()
        if self.repartition is not None:
            out["repartition"] = {"threshold": self.repartition, "last_check": self.repartition_check,
                                  "moves": self.repartitions}
        rp = self.message.replan if self.message is not None else None
        if rp is not None and self.previous is not None:
            prev = self.previous.state()
            out["replan"] = {"from_run": rp.replaces, "from_planner": self.previous.planner, "switch_ms": rp.switch_ms,
                             "state": "switched" if prev in ("done", "stopped") else "switching",
                             "from_state": prev, "from_sites": self.previous.sites}
        return out

    def chain(self, prev: "QueryStatus") -> None:
        """This run takes ``prev``'s over (a replan): one query to its readers -- its results from ``prev``'s first
        result on, every earlier run's results too."""
        self.previous = replace(prev, previous=None)
        self.replaced = {**prev.replaced, prev.run: prev.origin_ms}
        self.out_start, self.rows_start = prev.out_start, prev.rows_start


def _status_of(name: str, msg: PlanMessage, planner: str, submitted_ms: float = 0.0,
               query: Optional[Query] = None) -> QueryStatus:
    """A query's status from its ``plan`` control message (``query``: the message's, parsed already)."""
    st = QueryStatus(name, msg.run or "", dict(msg.plan), planner, submitted_ms=submitted_ms,
                     nodes=list(msg.nodes or []), message=msg)
    st.live, st.origin_ms = msg.live is not None, msg.origin_ms
    if msg.repartition is not None:   # the planner re-partitions the run with the plan it was asked for
        st.repartition, st.planner = float(msg.repartition["threshold"]), str(msg.repartition["plan"])
    st.out_start = int((msg.offsets or {}).get(f"out.{name}") or 0)
    st.uses = list(msg.uses or [])
    st.operator = dict(msg.operator) if msg.operator is not None else None
    try:
        st.query = query if query is not None else parse_query(msg.query, name)
        sink = st.query.output.sink_topic
        st.rows_start = int((msg.offsets or {}).get(sink) or 0) if sink is not None else 0
        st.stats = QueryStats(st.query, central(st.query).sequences[0].start or st.query.sites[0])
    except (JoinlibError, KeyError, TypeError):
        pass
    return st


def _on_status(cur: QueryStatus, site: dict, status: StatusMessage) -> None:
    """A node's ``status`` of the query's current run (a scaled-out plan's: of one partition at the site, or of
    the site's re-keyer; the site shows the least epoch and the sum of the results)."""
    if status.part is not None:
        parts = site.setdefault("parts", {})
        parts[str(status.part)] = {"epoch": status.epoch, "results": status.results}
        site.update(epoch=min(p["epoch"] for p in parts.values()), last_epoch=status.last_epoch,
                    results=sum(p["results"] for p in parts.values()))
    else:
        site.update(epoch=status.epoch, last_epoch=status.last_epoch, results=status.results)
    if status.adaptive is not None:  # an adaptive plan: the node's generation and plan changes
        site["adaptive"] = status.adaptive
    if cur.stats is not None:
        cur.stats.on_status(status)


class PlannerService:
    def __init__(self, bootstrap: str, *, sensor=None) -> None:
        self.bootstrap = bootstrap
        self.sensor = sensor
        self.admin = make_admin(bootstrap)
        ensure_topics(self.admin, [CONTROL_TOPIC, ENDS_TOPIC])
        self.producer = make_producer(bootstrap)
        self.queries: dict[str, QueryStatus] = {}
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._registries: dict[str, RegistrySchemas] = {}
        self.rejections = Rejections("planner", sensor, lambda m: print(f"[planner] {m}", file=sys.stderr, flush=True))
        self._reject = self.rejections.control(CONTROL_TOPIC)
        self._sites: set[str] = set()   # the sites of the plans read: the watcher reads their status topics
        self._watcher = threading.Thread(target=self._watch, name="control-watcher", daemon=True)
        self._watcher.start()
        self.repartitioner = Repartitioner(self)

    # ------------------------------------------------------------------ submission
    def submit(self, text: str, planner: Optional[str] = None, model: Optional[str] = None,
               since: Optional[str] = None, reuse: bool = True, scale_out: bool = False,
               repartition: Optional[float] = None, sample: bool = False) -> dict:
        """Plan a query file's text (``planner``: any plan name of the registry, default
        :func:`default_plan`; ``model``: its cost model, default the registry's; ``mjoin`` or a tree sent as
        the file's ``mjoin_tree``: an MJoin tree whose inner operators are shared with other queries unless
        not ``reuse``, :mod:`.trees`; ``scale_out``: a partitioned plan whose partitions a site's node
        instances share, :meth:`scaled`; ``repartition``: a live ``pmjoin:rate|range|site`` plan moved to a function
        fitted to the current per-value rates when the running one costs that much more, :mod:`.repartition`;
        ``sample`` with ``auto``: planned on a sample of its sources' newest records, every run kind but MJoin trees)
        and publish the plan; JoinlibError for user mistakes."""
        data = _query_document(text)
        values = data.pop("partition_values", None) if isinstance(data, dict) else None
        tree = data.pop("mjoin_tree", None) if isinstance(data, dict) else None
        query = parse_query(data, "<submitted query>")
        with self.lock:
            cur = self.queries.get(query.name)
        if cur is not None and cur.live and cur.state() == "running":
            raise Conflict(f"query {query.name} is running (run {cur.run}); stop it first with "
                           f"'joinlib stop {query.name}'")
        planner = planner or default_plan()
        if tree is not None or plan_kind(planner) is PlanKind.TREE:
            if scale_out:
                raise JoinlibError("MJoin tree plans do not scale out: --scale-out needs --plan "
                                   "pmjoin[:hash|range|rate][:D]")
            return submit_tree(self, query, planner, tree, since, reuse)
        _check_options(query, planner, model, scale_out, repartition, sample)
        live = self.live_of(query, since)
        plan = auto_on_sample(self.bootstrap, query, live) if sample and live is not None else None
        plan = plan or plan_of(query, planner, model, values)
        run = uuid.uuid4().hex[:12]
        rp = None if repartition is None else {"threshold": repartition, "plan": planner}
        msg = replace(plan.message(query, run, {}), switches=None, live=live, repartition=rp)
        if scale_out:
            msg = self.scaled(query, plan, msg)
        msg = self.publish(query, msg, planner)
        if self.sensor is not None:
            self.sensor.set_plan(query.name, plan.first)
        out: dict[str, object] = {"query": query.name, "run": run, "plan": msg.plan}
        if live is not None:
            out["origin_ms"] = live.origin_ms
        return out

    def replan(self, name: str, planner: str, model: Optional[str] = None, margin_ms: int = DEFAULT_MARGIN_MS,
               values: Any = None) -> dict:
        """Move the running live query ``name`` to a plan of ``planner`` without stopping it (docs/live.md "Replan"):
        publish a new run that serves the results triggered from a switch time on, reading its sources from one
        window before it (its jump-start); the running run serves those before and ends by itself.  A
        ``pmjoin:rate|range|site`` plan is fitted to ``values`` (default: the query's live per-value rates)."""
        with self.lock:
            cur = self.queries.get(name)
        if cur is None or cur.query is None:
            raise NotFound(f"no query {name!r}; 'joinlib queries' lists them")
        q, msg = cur.query, cur.message
        if not cur.live or cur.state() != "running" or msg is None or msg.live is None:
            raise Conflict(f"query {name} is not a running live query ({cur.state()}); 'joinlib submit' starts one")
        if cur.previous is not None and cur.previous.state() not in ("done", "stopped"):
            raise Conflict(f"query {name} is switching already (run {cur.previous.run} -> {cur.run}); replan it "
                           f"again once that switch is over ('joinlib queries {name}' shows it)")
        _replannable(q, msg, planner)
        if values is None and scheme_of(planner) in FITTED:
            values = self.values(name)   # the live rates (Conflict until the nodes have reported some)
        plan = auto_on_sample(self.bootstrap, q, msg.live) if planner == "auto" and model is None else None
        plan = plan or plan_of(q, planner, model, values)
        watermarks = (cur.stats.summary().get("watermarks_ms") or {}) if cur.stats is not None else {}
        point = replan_point(self.bootstrap, q, msg.live, max(watermarks.values(), default=None), margin_ms)
        run = uuid.uuid4().hex[:12]
        gen = next_generation(msg)
        # an automatic re-partition goes on, on the new plan if it is one it can refit
        keep = ({"threshold": cur.repartition, "plan": planner}
                if cur.repartition is not None and scheme_of(planner) in FITTED else None)
        new = replace(plan.message(q, run, {}), switches=None, live=LiveStart(point.origin_ms, point.starts),
                      replan=Replan(cur.run, point.switch_ms, gen, point.handover), repartition=keep)
        new = self.publish(q, new, planner)
        if keep is not None:
            with self.lock:
                self.queries[name].repartitions = list(cur.repartitions)
        if self.sensor is not None:
            self.sensor.set_plan(name, plan.first)
        return {"query": name, "run": run, "replaces": cur.run, "plan": new.plan, "switch_ms": point.switch_ms,
                "origin_ms": point.origin_ms, "reread_all": point.reread_all}

    def explain(self, text: str, planner: Optional[str] = None, model: Optional[str] = None) -> dict:
        """The plan a submission of the query file's ``text`` would get (``planner``, ``model``: as for
        :meth:`submit`), explained; nothing is published (``joinlib explain --url``, SQL's ``EXPLAIN``)."""
        data = _query_document(text)
        if isinstance(data, dict):
            data.pop("partition_values", None)
            data.pop("mjoin_tree", None)
        e = explain_query(parse_query(data, "<explained query>"), planner or default_plan(), model or DEFAULT_MODEL)
        return {**e.to_json(), "text": format_explanation(e)}

    def scaled(self, query: Query, plan: Deployable, msg: PlanMessage) -> PlanMessage:
        """``msg`` scaled out (docs/pmjoin.md "Scale-out within a site"): its source and node topics with a
        partition per plan partition, and where each of those partitions starts.  A live query's sources are
        re-keyed into ``src.<query>.<stream>`` at each site (:mod:`joinlib.node.rekey`)."""
        split = plan.plan if isinstance(plan, PartitionedRun) else None
        if split is None:
            raise JoinlibError("--scale-out needs a partitioned plan (--plan pmjoin[:hash|range|rate][:D]): its "
                               "partitions are what a site's instances share")
        topics = scaled_topics(query, split, self.admin, split)
        consumer = make_consumer(self.bootstrap, f"joinlib-planner-{uuid.uuid4().hex[:8]}")
        try:
            return scale_message(msg, consumer, split, topics)
        finally:
            consumer.close()

    def live_of(self, query: Query, since: Optional[str]) -> Optional[LiveStart]:
        """A live query's origin and the offsets its sources start at (None for a replayed query)."""
        if not live_streams(query):
            return None
        return LiveStart(origin_for(since, time.time() * 1000, query.execution.interval_ms),
                         source_starts(self.bootstrap, self.admin, query))

    def publish(self, query: Query, msg: PlanMessage, planner: str) -> PlanMessage:
        """Create ``query``'s topics and publish its plan message ``msg`` (the planner's plans have no
        ``switches``) from their current ends; returns it."""
        topics = query_topics(query)
        ensure_topics(self.admin, topics)
        consumer = make_consumer(self.bootstrap, f"joinlib-planner-{uuid.uuid4().hex[:8]}")
        try:
            offsets = end_offsets(consumer, [t for t in topics if not is_control_topic(t)])
        finally:
            consumer.close()
        msg = replace(msg, offsets=offsets)
        publish_sync(self.producer, query.name, msg)
        status = _status_of(query.name, msg, planner, time.time() * 1000)
        with self.lock:
            prev = self.queries.get(query.name)
            if msg.replan is not None and prev is not None:
                status.chain(prev if prev.run == msg.replan.replaces else prev.previous or prev)
            self.queries[query.name] = status
        return msg

    def stop(self, name: str) -> dict:
        """Publish ``stop`` for the current run of ``name``, then for each operator deployment it used
        that no other running query uses (docs/multiquery.md "Shared operators")."""
        with self.lock:
            cur = self.queries.get(name)
        if cur is None:
            raise NotFound(f"no query {name!r}; 'joinlib queries' lists them")
        if cur.state() in ("done", "stopped"):
            raise Conflict(f"query {name} is not running ({cur.state()})")
        if cur.operator is not None and used_by(self, name):
            raise Conflict(f"{name} is a shared operator that {', '.join(used_by(self, name))} still use(s); it "
                           "stops with the last of them")
        publish_sync(self.producer, name, StopMessage(cur.run))
        prev = cur.previous
        if prev is not None and prev.state() not in ("done", "stopped"):   # stopped mid-replan: the old run too
            publish_sync(self.producer, name, StopMessage(prev.run))
        with self.lock:
            cur.stopping = True
        for op in released(self, cur):
            self.stop(op)
        return {"query": name, "run": cur.run, "state": cur.state()}

    def results(self, name: str, start: str = "beginning", max_results: int = 10_000, wait_s: float = 0.0) -> dict:
        with self.lock:
            cur = self.queries.get(name)
        if cur is None or cur.query is None:
            raise NotFound(f"no query {name!r}; 'joinlib queries' lists them")
        rows = cur.query.output.sink_topic is not None
        if start == "beginning":
            offset = cur.rows_start if rows else cur.out_start
        elif start == "end":
            offset = -1
        else:
            try:
                offset = int(start)
            except ValueError:
                raise JoinlibError(f"from={start!r}: expected beginning, end or an offset") from None
        return read_results(self.bootstrap, cur.query, cur.run, cur.origin_ms, offset,
                            max(1, min(max_results, 100_000)), max(0.0, min(wait_s, 30.0)), self._schemas(cur.query),
                            cur.replaced)

    def _schemas(self, query: Query) -> Optional[RegistrySchemas]:
        """The writer schemas of an Avro sink's rows, from its registry (cached per registry URL)."""
        url = query.output.registry
        if url is None:
            return None
        with self.lock:
            return self._registries.setdefault(url, RegistrySchemas(url, None, self.rejections.log))

    def values(self, name: str) -> dict:
        """The live per-value rates of query ``name`` (``joinlib stats NAME --live --values FILE``)."""
        with self.lock:
            cur = self.queries.get(name)
            if cur is None:
                raise NotFound(f"no query {name!r}; 'joinlib queries' lists them")
            stats = cur.stats.value_stats() if cur.stats is not None else None
        if stats is None:
            raise Conflict(f"query {name!r} has no per-value rates yet: its nodes report them every "
                           f"{VALUES_EVERY_S:.0f} s once a live stream of its partition attributes has tuples "
                           "(replayed queries and queries that cannot be partitioned have none)")
        return stats

    def status(self, name: Optional[str] = None):
        with self.lock:
            if name is None:
                return [status_json(self, q) for q in self.queries.values()]
            q = self.queries.get(name)
            return None if q is None else status_json(self, q)

    # ------------------------------------------------------------------ control log
    def _watch(self) -> None:
        """Follow ``control`` (plans, stops) and the status topics (the nodes' reports) of every site a plan read
        names.  ``control`` is read to its end first: a report counts only for the run of the query's current
        plan, and the topics are not ordered with each other."""
        consumer = make_watcher(self.bootstrap, f"joinlib-planner-watch-{uuid.uuid4().hex[:8]}")
        positions: dict[str, int] = {CONTROL_TOPIC: 0}   # topic -> next offset to read
        try:
            end = end_offsets(consumer, [CONTROL_TOPIC])[CONTROL_TOPIC]
            consumer.assign([TopicPartition(CONTROL_TOPIC, 0, OFFSET_BEGINNING)])
            while positions[CONTROL_TOPIC] < end and not self._stop.is_set():
                for msg in consume(consumer, 1000, 0.5):
                    self._take(msg, positions)
            assigned, unusable = 0, set()   # how many topics the consumer reads; report topics it cannot make
            while not self._stop.is_set():
                new = [t for t in map(status_topic, sorted(self._sites)) if t not in positions and t not in unusable]
                if new:   # a plan named a site whose reports are not read yet (one not published here: made now)
                    try:
                        ensure_topics(self.admin, new)
                        positions.update(dict.fromkeys(new, 0))
                    except ClusterError as e:   # a site name no topic may have: the watcher goes on without it
                        unusable.update(new)
                        print(f"[planner] not reading {', '.join(new)}: {e}", file=sys.stderr, flush=True)
                if assigned != len(positions):
                    consumer.assign([TopicPartition(t, 0, pos or OFFSET_BEGINNING) for t, pos in positions.items()])
                    assigned = len(positions)
                for msg in consume(consumer, 1000, 0.5):
                    self._take(msg, positions)
        finally:
            consumer.close()

    def _take(self, msg: Any, positions: dict[str, int]) -> None:
        topic, offset = msg.topic(), msg.offset()
        if topic in positions and offset is not None:
            positions[topic] = max(positions[topic], offset + 1)
        rec = decode_control_message(msg, self._reject)   # a tombstone too is rejected
        if rec is None:  # rejected: logged and counted, changes nothing
            return
        if isinstance(rec.message, PlanMessage):
            self._sites |= rec.message.node_set()   # the watcher reads their status topics from now on
        try:
            self._apply(rec)
        except Exception as e:  # the watcher must outlive any message
            self._reject(rec.offset, INVALID, f"cannot apply: {type(e).__name__}: {e}", rec.topic)

    def _apply(self, rec: ControlRecord) -> None:
        m, query = rec.message, rec.query
        with self.lock:
            if isinstance(m, PlanMessage):
                cur = self.queries.get(query)
                if m.run and (cur is None or cur.run != m.run):
                    st = _status_of(query, m, "external", query=rec.compiled.query if rec.compiled else None)
                    if m.replan is not None and cur is not None and m.replan.replaces == cur.run:
                        st.chain(cur)
                    self.queries[query] = st
                    self._restore_plan_metric(query, rec)
                return
            cur = self.queries.get(query)
            if cur is not None and cur.previous is not None and m.run == cur.previous.run:
                cur = cur.previous   # the run a replan switches from: its status and done go on
            if cur is None or m.run != cur.run:
                return
            if isinstance(m, StopMessage):
                cur.stopping = True
            elif isinstance(m, StatusMessage):
                _on_status(cur, cur.sites.setdefault(m.site, {"done": False}), m)
            elif isinstance(m, DoneMessage):
                cur.sites.setdefault(m.site, {"done": False}).update(done=True, results=m.results,
                                                                     stopped=bool(m.stopped))
                if cur.stats is not None:
                    cur.stats.on_done(m)

    def _restore_plan_metric(self, query: str, rec: ControlRecord) -> None:
        """The plan metric of a plan read from ``control`` (plan generations or an adaptive plan: their first)."""
        plan = rec.compiled.plan if self.sensor is not None and rec.compiled is not None else None
        if isinstance(plan, (Generations, AdaptiveRun)):
            self.sensor.set_plan(query, plan.first)

    def close(self) -> None:
        self._stop.set()
        self.repartitioner.close()
        self._watcher.join(5)


def _query_document(text: str) -> Any:
    """The YAML document of a submitted query file."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise JoinlibError(f"the submitted query is not valid YAML: {e}") from None


def _route(path: str) -> tuple[str, Optional[str], Optional[str]]:
    """``/queries[/<name>[/<action>]]`` -> ("queries", name, action); anything else ("", None, None)."""
    parts = [p for p in path.split("/") if p]
    if not parts or parts[0] != "queries" or len(parts) > 3:
        return "", None, None
    return "queries", (parts[1] if len(parts) > 1 else None), (parts[2] if len(parts) > 2 else None)


def _get(service: PlannerService, path: str, args: dict) -> tuple[int, object]:
    if path == "/healthz":
        return 200, b"ok\n"
    root, name, action = _route(path)
    if root and name is None:
        return 200, service.status()
    if root and name is not None and action is None:
        st = service.status(name)
        return (200, st) if st else (404, {"error": "no such query"})
    if root and name is not None and action == "values":
        return 200, service.values(name)
    if root and name is not None and action == "results":
        return 200, service.results(name, args.get("from", "beginning"), int(args.get("max", 10_000)),
                                    float(args.get("wait", 0)))
    return 404, {"error": f"no route {path}; see GET /healthz, GET|POST /queries, GET /queries/NAME[/results|/values], "
                          "POST /queries/NAME/stop"}


def _post(service: PlannerService, path: str, args: dict, body: Callable[[], str]) -> tuple[int, object]:
    if path == "/explain":
        return 200, service.explain(body(), args.get("plan") or args.get("planner"), args.get("model"))
    root, name, action = _route(path)
    if root and name and action == "stop":
        return 200, service.stop(name)
    if root and name and action == "replan":
        if not args.get("plan"):
            raise JoinlibError("POST /queries/NAME/replan needs ?plan=P (the plan to move the query to)")
        return 200, service.replan(name, args["plan"], args.get("model"),
                                   int(float(args.get("margin", DEFAULT_MARGIN_MS / 1000)) * 1000))
    if not root or name is not None:
        return 404, {"error": "POST /queries (or /explain) with the query file as the body, or POST "
                              "/queries/NAME/stop|replan"}
    return 201, service.submit(body(), args.get("plan") or args.get("planner"), args.get("model"),
                               args.get("since"), args.get("reuse", "1") not in ("0", "false", "no"),
                               args.get("scale_out", "0") in ("1", "true", "yes"),
                               threshold_arg(args.get("repartition")), args.get("sample", "0") in ("1", "true", "yes"))


def _delete(service: PlannerService, path: str) -> tuple[int, object]:
    root, name, action = _route(path)
    if not root or not name or action is not None:
        return 404, {"error": "DELETE /queries/NAME stops a query"}
    return 200, service.stop(name)


def _admit(handler: BaseHTTPRequestHandler, token: Optional[str]) -> bool:
    """True if the request may go on; else answers 401 (``/healthz`` is always open, for probes)."""
    if urlparse(handler.path).path == "/healthz" or authorized(handler.headers.get("Authorization"), token):
        return True
    data = b'{"error": "unauthorized: send Authorization: Bearer <token> (JOINLIB_PLANNER_TOKEN)"}\n'
    handler.send_response(401)
    handler.send_header("WWW-Authenticate", 'Bearer realm="joinlib-planner"')
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)
    return False


class _TokenChecked(BaseHTTPRequestHandler):
    """Checks the bearer token of every request before its ``do_*`` method runs."""

    token: Optional[str] = None

    def parse_request(self) -> bool:
        return super().parse_request() and _admit(self, self.token)


def make_handler(service: PlannerService, token: Optional[str] = None):
    class Handler(_TokenChecked):
        def log_message(self, fmt, *args):  # quiet: one line per request is noise here
            pass

        def _answer(self, code: int, body) -> None:
            data = (json.dumps(body, indent=2) + "\n").encode() if not isinstance(body, bytes) else body
            self.send_response(code)
            self.send_header("Content-Type", "application/json" if not isinstance(body, bytes) else "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _do(self, route: Callable[[str, dict], tuple[int, object]]) -> None:
            url = urlparse(self.path)
            args = {k: v[0] for k, v in parse_qs(url.query).items()}
            try:
                code, body = route(url.path.rstrip("/") or "/", args)
            except JoinlibError as e:
                code = 404 if isinstance(e, NotFound) else 409 if isinstance(e, Conflict) else 400
                body = {"error": str(e)}
            except ValueError as e:
                code, body = 400, {"error": f"bad parameter: {e}"}
            self._answer(code, body)

        def _body(self) -> str:
            return self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode("utf-8", "replace")

        def do_GET(self):
            self._do(lambda path, args: _get(service, path, args))

        def do_POST(self):
            self._do(lambda path, args: _post(service, path, args, self._body))

        def do_DELETE(self):
            self._do(lambda path, args: _delete(service, path))

    Handler.token = token
    return Handler


def serve(service: PlannerService, port: int, token: Optional[str] = None,
          tls: Optional[ssl.SSLContext] = None) -> ThreadingHTTPServer:
    """Serve the API on ``port``; with ``token`` every route but ``/healthz`` needs ``Bearer <token>``;
    with ``tls`` (:meth:`joinlib.settings.HttpSecurity.server_context`) over HTTPS only."""
    server = tls_server(ThreadingHTTPServer(("0.0.0.0", port), make_handler(service, token)), tls)
    threading.Thread(target=server.serve_forever, name="planner-http", daemon=True).start()
    return server
