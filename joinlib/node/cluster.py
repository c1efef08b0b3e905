"""Cluster mode: the embedded mode's nodes as real services on Kafka.

:func:`run_cluster` does one run of a plan end to end on a real broker:

1. creates the query's topics (``src.<q>.<stream>``, ``node.<q>.<r>.from.<s>``, ``out.<q>``,
   ``control``; one partition each) and notes their end offsets;
2. publishes the plan on ``control`` (kind ``plan``, with a fresh run id and those offsets,
   so earlier runs of the same query on the same broker are not re-read);
3. starts one node service per site (:mod:`.cluster_nodes`) -- ``python -m services.node --site X --query Q
   --run R`` subprocesses (``mode="process"``, the real deployment) or :class:`NodeService` threads in
   this process (``mode="thread"``, faster to start; same code path from Kafka on) -- or none:
   ``mode="serving"`` uses node services already running with ``--serve`` (``docker compose up``),
   which take the plan from ``control`` like any other;
4. once every node has reported (``status``) that it runs the plan, replays the streams into
   the source topics (the source service's code, in a thread) and publishes ``end``;
5. consumes ``out.<q>`` into ``sink`` until every node has published ``done`` and every
   result it announced has arrived (:mod:`.cluster_collect`); per-link message and byte counts come from the
   ``done`` messages (sender side; measured transfer times from the receiver side).

The report (:mod:`.cluster_report`) has the shape of :meth:`joinlib.runtime.report.Report.to_dict` where that
makes sense.  The sink sees each result as a one-tuple group; ``now`` is on the event-time axis:
``(emit_ms - t0) * rate_scale`` where ``t0`` is the wall-clock time event time 0 was replayed
(fast replay: ``emit_ms - t0``), so ``now - head_ts`` is a latency in event-time ms.

This module imports Kafka: the command line imports it only for ``run --cluster``.
"""
from __future__ import annotations

import shutil
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, Union

from joinlib.adapters.kafka import (
    Producing,
    TopicPartition,
    check_reachable,
    end_offsets,
    ensure_topics,
    is_control_topic,
    make_admin,
    make_consumer,
    make_producer,
    out_topic,
    query_topics,
    source_topic,
    status_topic,
    warm_up,
)
from joinlib.adaptive.jep import from_plan
from joinlib.adaptive.service import merge
from joinlib.control.run_plan import AdaptiveRun, RunPlan, TreesRun, as_run_plan
from joinlib.data.files import load_streams
from joinlib.errors import ClusterError
from joinlib.model import Query
from joinlib.node.cluster_collect import Replayer, Results, collect_results
from joinlib.node.cluster_nodes import Faults, NodeHandle, ThreadNode, starter
from joinlib.node.cluster_report import report_of, to_report
from joinlib.node.control import publish_sync
from joinlib.node.scale_out import naive_of, per_site, scale_message, scaled_topics, split_of, wanted
from joinlib.node.tree_service import TreeRun, tree_run, tree_topics
from joinlib.plan.partitioned import Partitioned
from joinlib.runtime.deploy import Plans, generations

MODES = ("process", "thread", "serving")


def run_cluster(query: Query, streams: Union[str, Path, dict], plan: Plans, sink=None, *, bootstrap: str,
                redis_url: Optional[str] = None, timeout_s: float = 120.0, mode: str = "process",
                rate_scale: Optional[float] = None, progress: bool = False,
                metrics_ports: Optional[dict] = None, run_id: Optional[str] = None,
                python: str = sys.executable, log_dir: Optional[Path] = None,
                registries: Optional[dict] = None, faults: Sequence[tuple[Any, ...]] = (),
                adaptive: Any = None, instances: Optional[dict[str, int]] = None) -> dict:
    """Run ``plan`` over ``streams`` (a data directory or loaded streams) on the Kafka at
    ``bootstrap``; results go to ``sink`` (a :class:`~joinlib.runtime.sink.Sink`, or None to
    only count).  ``rate_scale``: replay X times faster than event time (None: unpaced).
    ``metrics_ports``: site -> METRICS_PORT for node processes (default: no HTTP server);
    ``registries``: a dict that receives site -> the node's prometheus CollectorRegistry
    (thread mode); ``log_dir``: node process logs (default: a temp dir, removed on success).
    ``faults``: (site, seconds) -- that long after the replay starts, kill the site's node
    (SIGKILL; a thread node is stopped) and start a new one, which resumes from its last
    checkpoint (needs ``redis_url``: checkpoints live in Redis).
    ``adaptive``: an :class:`~joinlib.adaptive.config.AdaptiveConfig` -- the nodes re-plan and migrate
    while running (seed 003, docs/adaptive.md); ``plan`` is then the initial plan (Algorithm 1's), and the
    report has an ``adaptive`` section.
    ``plan`` may be an MJoin tree instead (:class:`~joinlib.mjoin.derived.TreeProgram`, ``PartitionedTrees``, or
    ``SharedTrees`` with ``query`` their union: ``sink`` then gets each query's results, named in the instance key;
    :mod:`joinlib.node.tree_service`), or any :data:`~joinlib.control.run_plan.RunPlan`.
    ``instances``: scale a partitioned ``plan`` out (:mod:`joinlib.node.scale_out`): its source and node
    topics get a partition per plan partition, and each site runs ``instances.get(site, 1)`` node instances
    that share the site's plan partitions as a consumer group (needs ``redis_url``).
    Raises :class:`~joinlib.errors.ClusterError` naming the sites that did not finish."""
    _check_options(query, mode, faults, redis_url)
    rp = as_run_plan(plan, adaptive)
    tree = tree_run(query, rp.plan) if isinstance(rp, TreesRun) else None
    split = split_of(rp.plan if isinstance(rp, TreesRun) else rp.plans, instances, redis_url, adaptive, faults)
    streams = streams if isinstance(streams, dict) else load_streams(query, streams)
    t_begin = time.perf_counter()
    topics, partitioned_topics = _topics(query, tree, split, bootstrap)
    run = run_id or uuid.uuid4().hex[:12]
    start = _Starter(mode, query.name, run, bootstrap, redis_url, python, log_dir is None,
                     Path(log_dir) if log_dir else Path(tempfile.gettempdir()) / f"joinlib-nodes-{run}",
                     metrics_ports or {}, registries)
    consumer = make_consumer(bootstrap, f"joinlib-cluster-{run}")
    nodes: dict[str, NodeHandle] = {}
    try:
        producer = make_producer(bootstrap)
        specs, sites = _publish(query, rp, tree, split, consumer, producer, run, topics, partitioned_topics)
        _start_nodes(nodes, sites, instances if split is not None else None, start)
        warm_up(producer, [source_topic(query, s.name) for s in query.streams])
        replayer = Replayer(Producing(producer), query, streams, rate_scale, run, progress, split)
        merge = (lambda done: per_site(done, naive_of(query, streams))) if split is not None else None
        res = collect_results(consumer, query, sink, nodes, replayer, timeout_s, run, Faults(faults, start, nodes),
                      isinstance(rp, AdaptiveRun), _outputs(query, tree), wanted(specs, split), merge)
        replayer.join(5)
    except BaseException:
        for h in nodes.values():
            h.stop()
        raise
    finally:
        consumer.close()
    start.finish(nodes)
    report = report_of(query, specs, streams, res, replayer, run, mode, time.perf_counter() - t_begin, nodes,
                       rp.plan if isinstance(rp, TreesRun) else rp.plans)
    _adaptive_report(report, query, specs, res, adaptive)
    return report


def _topics(query: Query, tree: Optional[TreeRun], split: Optional[Partitioned],
            bootstrap: str) -> tuple[list[str], list[str]]:
    """Every topic of the run, made (a scaled-out plan's source and node topics with a partition per plan
    partition: the second list)."""
    check_reachable(bootstrap)
    admin = make_admin(bootstrap)
    topics = query_topics(query) + _tree_topics(tree)
    partitioned_topics = scaled_topics(query, split, admin, split)
    ensure_topics(admin, topics)
    return topics, partitioned_topics


def _publish(query: Query, rp: RunPlan, tree: Optional[TreeRun], split: Optional[Partitioned], consumer: Any,
             producer: Any, run: str, topics: list[str], partitioned_topics: list[str]) -> tuple[list[Any], list[str]]:
    """Publish the run's plan message, from the end of its topics; the consumer then reads the status topics of
    its nodes (their reports) and the ``out`` topics of the run's queries from there.  Returns the plan
    generations (none for a tree) and the sites to start a node at."""
    offsets = end_offsets(consumer, [t for t in topics if not is_control_topic(t)])
    msg = scale_message(rp.message(query, run, offsets), consumer, split, partitioned_topics)
    reports = end_offsets(consumer, [status_topic(site) for site in msg.nodes or query.nodes])
    publish_sync(producer, query.name, msg)
    consumer.assign([TopicPartition(t, 0, start) for t, start in reports.items()]
                    + [TopicPartition(out_topic(q.name), 0, offsets[out_topic(q.name)])
                       for q in _outputs(query, tree)])
    specs = [] if isinstance(rp, TreesRun) else generations(query, rp.plans)
    return specs, list(msg.nodes or ())


@dataclass
class _Starter:
    """Starts the node of a site (an extra instance of it: ``instance`` > 0) as ``mode`` says, and ends them."""

    mode: str
    query: str
    run: str
    bootstrap: str
    redis_url: Optional[str]
    python: str
    own_logs: bool   # the log directory is this run's: removed once every node ended well
    log_dir: Path
    metrics_ports: dict[str, int]
    registries: Optional[dict[str, Any]]

    def __call__(self, site: str, instance: int = 0) -> NodeHandle:
        extra = {"instance": instance} if instance else {}
        port = None if instance else self.metrics_ports.get(site)   # one metrics port per site
        h = starter(self.mode)(site, self.query, self.run, self.bootstrap, self.redis_url, port, self.python,
                               self.log_dir, **extra)
        if self.registries is not None and isinstance(h, ThreadNode) and not instance:
            self.registries[site] = h.svc.registry
        return h

    def finish(self, nodes: dict[str, NodeHandle]) -> None:
        for h in nodes.values():
            h.finish(10.0)
        if self.own_logs and self.mode == "process":
            shutil.rmtree(self.log_dir, ignore_errors=True)
            for h in nodes.values():
                h.log = None


def _adaptive_report(report: dict, query: Query, specs: Sequence[Any], res: Results, adaptive: Any) -> None:
    """An adaptive run's ``adaptive`` section (the embedded report's, merged from the nodes' ``done``), and
    the plan generations the run went through as ``plan`` and ``switches``."""
    if adaptive is None:
        return
    initial = from_plan(specs[0].ir.plan).to_json()
    ad = report["adaptive"] = merge(query, {k: d.to_json() for k, d in res.done.items()}, initial)
    changes = ad["changes"]
    if changes:
        gens = [{"from_epoch": 0, "plan": initial}] + [{"from_epoch": c["from_epoch"], "plan": c["plan"]}
                                                       for c in changes]
        stops = [c["from_epoch"] - 1 for c in changes] + [None]
        report["plan"] = gens
        report["switches"] = [{"generation": i, "from_epoch": g["from_epoch"], "to_epoch": stops[i]}
                              for i, g in enumerate(gens)]


def _start_nodes(nodes: dict[str, NodeHandle], sites: Sequence[str], instances: Optional[dict[str, int]],
                 start_node: Callable[..., NodeHandle]) -> None:
    """A node per site; a scaled-out plan's (``instances``) extra instances of a site are ``r1#2``, ``r1#3``..."""
    for site in sites:
        for k in range((instances or {}).get(site, 1)):
            nodes[site if k == 0 else f"{site}#{k + 1}"] = start_node(site, k)


def _tree_topics(tree: Optional[TreeRun]) -> list[str]:
    if tree is None:
        return []
    return tree_topics(tree) + [out_topic(q.name) for q in _outputs(tree.base, tree)]


def _outputs(query: Query, tree: Optional[TreeRun]) -> list[Query]:
    """The queries whose ``out`` topics a run writes: ``query``'s, or the results queries of a tree run."""
    return [query] if tree is None else list({q.name: q for q in tree.results.values()}.values())


def _check_options(query: Query, mode: str, faults: Sequence[tuple[Any, ...]], redis_url: Optional[str]) -> None:
    if mode not in MODES:
        raise ClusterError(f"unknown cluster mode {mode!r} (choose from {', '.join(MODES)})")
    for site, *rest in faults:
        if site not in query.nodes:
            raise ClusterError(f"cannot kill site {site!r}: the query's nodes are {', '.join(query.nodes)}")
        if rest[1:] and rest[1] not in ("kill", "join", "pause"):
            raise ClusterError(f"unknown fault {rest[1]!r} (kill, join or pause)")
        if rest[1:2] == ["pause"] and mode != "process":
            raise ClusterError("pausing a node needs node processes (mode process): a thread cannot be paused")
    if faults and mode == "serving":
        raise ClusterError("killing nodes needs nodes this run starts (mode process or thread), not serving ones")
    if faults and not redis_url:
        raise ClusterError("killing nodes needs Redis windows (REDIS_URL): a node resumes from its checkpoint there")


# --------------------------------------------------------------------------- CLI glue

def cluster_runner(bootstrap: Optional[str], redis_url: Optional[str] = None, **options):
    """A drop-in for :func:`joinlib.sim.engine.run_embedded` that runs on Kafka instead:
    ``runner(query, streams, plan, sink, progress=False) -> Report``.  ``bootstrap``: the broker (the command
    line's ``--cluster``, else ``$KAFKA_BOOTSTRAP_SERVERS``); ``redis_url`` puts the windows in Redis; other
    options go to :func:`run_cluster` (``rate_scale``, ``mode``, ``timeout_s``)."""
    if not bootstrap:
        raise ClusterError("--cluster needs a Kafka broker: pass --cluster HOST:PORT or set KAFKA_BOOTSTRAP_SERVERS")
    options = {k: v for k, v in options.items() if v is not None}

    def runner(query, streams, plan, sink, *, progress: bool = False, **_ignored):
        d = run_cluster(query, streams, plan, sink, bootstrap=bootstrap, redis_url=redis_url, progress=progress,
                        **options)
        for r in d["restarts"]:
            print(_restart_line(r, d), file=sys.stderr)
        return to_report(d)
    return runner


def _restart_line(r: dict[str, Any], d: dict[str, Any]) -> str:
    """What ``joinlib run --kill / --join`` says about a node it killed or started."""
    if r.get("action") == "join":
        return f"started another instance of {r['site']} {r['after_s']:g} s into the replay"
    if r.get("action") in ("pause", "resume"):
        what = f"paused an instance of {r['site']} for {r['length_s']:g} s" if r["action"] == "pause" else (
            f"resumed the paused instance of {r['site']}")
        return f"{what} {r['after_s']:g} s into the replay"
    if not r.get("successor", True):
        return (f"killed an instance of {r['site']} {r['after_s']:g} s into the replay; the others took its "
                "partitions")
    epoch = d["sites"][r["site"]]["resumed_from_epoch"]
    where = f"from its checkpoint of epoch {epoch}" if epoch is not None else "from the start (no checkpoint yet)"
    return f"killed the node of {r['site']} {r['after_s']:g} s into the replay; its successor resumed {where}"
