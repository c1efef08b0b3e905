"""Cluster mode: the embedded mode's nodes as real services on Kafka.

:func:`run_cluster` does one run of a plan end to end on a real broker:

1. creates the query's topics (``src.<q>.<stream>``, ``node.<q>.<site>``, ``out.<q>``,
   ``control``; one partition each) and notes their end offsets;
2. publishes the plan on ``control`` (kind ``plan``, with a fresh run id and those offsets,
   so earlier runs of the same query on the same broker are not re-read);
3. starts one node service per site -- ``python -m services.node --site X --query Q --run R``
   subprocesses (``mode="process"``, the real deployment) or :class:`NodeService` threads in
   this process (``mode="thread"``, faster to start; same code path from Kafka on) -- or none:
   ``mode="serving"`` uses node services already running with ``--serve`` (``docker compose up``),
   which take the plan from ``control`` like any other;
4. once every node has reported (``status``) that it runs the plan, replays the streams into
   the source topics (the source service's code, in a thread) and publishes ``end``;
5. consumes ``out.<q>`` into ``sink`` until every node has published ``done`` and every
   result it announced has arrived; per-link message and byte counts come from the ``done``
   messages (sender side; measured transfer times from the receiver side).

The report has the shape of :meth:`joinlib.runtime.report.Report.to_dict` where that makes sense.
The sink sees each result as a one-tuple group; ``now`` is on the event-time axis:
``(emit_ms - t0) * rate_scale`` where ``t0`` is the wall-clock time event time 0 was replayed
(fast replay: ``emit_ms - t0``), so ``now - head_ts`` is a latency in event-time ms.

This module imports Kafka (via :mod:`joinlib.adapters`) and the services lazily, inside
:func:`run_cluster`: importing it costs nothing and needs no I/O library.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from bisect import bisect_right
from collections import defaultdict
from pathlib import Path
from typing import Any, Optional, Sequence, Union

from joinlib.errors import ClusterError
from joinlib.model import Query, Tup
from joinlib.plan.partitioned import Partitioned
from joinlib.runtime.deploy import Plans, generations, plan_json

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
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
    ``plan`` may be an MJoin tree instead (:class:`~joinlib.mjoin.derived.TreeProgram`,
    :class:`~joinlib.mjoin.tree_plans.PartitionedTrees`, or :class:`~joinlib.mjoin.tree_plans.SharedTrees`
    with ``query``
    their union: ``sink`` then gets each query's results, named in the instance key); see
    :mod:`joinlib.node.tree_service`.
    ``instances``: scale a partitioned ``plan`` out (:mod:`joinlib.node.scale_out`): its source and node
    topics get a partition per plan partition, and each site runs ``instances.get(site, 1)`` node instances
    that share the site's plan partitions as a consumer group (needs ``redis_url``).
    Raises :class:`~joinlib.errors.ClusterError` naming the sites that did not finish."""
    _check_options(query, mode, faults, redis_url)
    tree = _tree_of(query, plan, adaptive)
    from joinlib.node.scale_out import naive_of, per_site, scale_message, scaled_topics, split_of, wanted
    split = split_of(plan, instances, redis_url, adaptive, faults)
    from joinlib.adapters.kafka import (
        CONTROL_TOPIC,
        Producing,
        check_reachable,
        consume,
        end_offsets,
        ensure_topics,
        make_admin,
        make_consumer,
        make_producer,
        out_topic,
        produce_control_sync,
        query_topics,
        source_topic,
        warm_up,
    )
    from joinlib.protocol import records
    if not isinstance(streams, dict):
        from joinlib.data.files import load_streams
        streams = load_streams(query, streams)
    t_begin = time.perf_counter()
    check_reachable(bootstrap)
    admin = make_admin(bootstrap)
    topics = query_topics(query) + _tree_topics(tree)
    partitioned_topics = scaled_topics(query, plan, admin, split)
    ensure_topics(admin, topics)
    run = run_id or uuid.uuid4().hex[:12]
    consumer = make_consumer(bootstrap, f"joinlib-cluster-{run}")
    nodes: dict[str, _NodeHandle] = {}
    try:
        offsets = end_offsets(consumer, [t for t in topics if t != CONTROL_TOPIC])
        producer = make_producer(bootstrap)
        specs, msg, sites = _plan_of(query, plan, tree, run, offsets, adaptive)
        scale_message(msg, consumer, split, partitioned_topics)
        plan_offset = produce_control_sync(producer, query.name, "plan", msg)
        from confluent_kafka import TopicPartition
        outputs = _outputs(query, tree)
        consumer.assign([TopicPartition(CONTROL_TOPIC, 0, plan_offset + 1)]
                        + [TopicPartition(out_topic(q.name), 0, offsets[out_topic(q.name)]) for q in outputs])
        own_logs = log_dir is None
        log_dir = Path(log_dir) if log_dir else Path(tempfile.gettempdir()) / f"joinlib-nodes-{run}"

        def start_node(site: str, instance: int = 0) -> _NodeHandle:
            extra = {"instance": instance} if instance else {}
            port = None if instance else (metrics_ports or {}).get(site)   # one metrics port per site
            h = _starter(mode)(site, query.name, run, bootstrap, redis_url, port, python, log_dir, **extra)
            if registries is not None and isinstance(h, _ThreadNode) and not instance:
                registries[site] = h.svc.registry
            return h
        _start_nodes(nodes, sites, instances if split is not None else None, start_node)
        warm_up(producer, [source_topic(query, s.name) for s in query.streams])
        replayer = _Replayer(Producing(producer), query, streams, rate_scale, run, progress, split)
        chaos = _Faults(faults, start_node, nodes)
        res = _collect(consumer, query, sink, nodes, replayer, timeout_s, run, records, consume, chaos,
                       adaptive is not None, outputs, wanted(specs, split),
                       (lambda done: per_site(done, naive_of(query, streams))) if split is not None else None)
        replayer.join(5)
    except BaseException:
        for h in nodes.values():
            h.stop()
        raise
    finally:
        consumer.close()
    for h in nodes.values():
        h.finish(10.0)
    if own_logs and mode == "process":
        shutil.rmtree(log_dir, ignore_errors=True)
        for h in nodes.values():
            h.log = None
    report = _report(query, specs, streams, res, replayer, run, mode, time.perf_counter() - t_begin, nodes, plan)
    _adaptive_report(report, query, specs, res, adaptive)
    return report


def _adaptive_report(report: dict, query: Query, specs: Sequence[Any], res: "_Results", adaptive: Any) -> None:
    """An adaptive run's ``adaptive`` section (the embedded report's, merged from the nodes' ``done``), and
    the plan generations the run went through as ``plan`` and ``switches``."""
    if adaptive is None:
        return
    from joinlib.adaptive.jep import from_plan
    from joinlib.adaptive.service import merge
    initial = from_plan(specs[0].ir.plan).to_json()
    ad = report["adaptive"] = merge(query, res.done, initial)
    changes = ad["changes"]
    if changes:
        gens = [{"from_epoch": 0, "plan": initial}] + [{"from_epoch": c["from_epoch"], "plan": c["plan"]}
                                                       for c in changes]
        stops = [c["from_epoch"] - 1 for c in changes] + [None]
        report["plan"] = gens
        report["switches"] = [{"generation": i, "from_epoch": g["from_epoch"], "to_epoch": stops[i]}
                              for i, g in enumerate(gens)]


def _start_nodes(nodes: dict[str, _NodeHandle], sites: Sequence[str], instances: Optional[dict[str, int]],
                 start_node: Any) -> None:
    """A node per site; a scaled-out plan's (``instances``) extra instances of a site are ``r1#2``, ``r1#3``..."""
    for site in sites:
        for k in range((instances or {}).get(site, 1)):
            nodes[site if k == 0 else f"{site}#{k + 1}"] = start_node(site, k)


def _tree_of(query: Query, plan: Any, adaptive: Any) -> Any:
    """The :class:`~joinlib.node.tree_service.TreeRun` of an MJoin tree plan (a tree program, partitioned or
    shared trees), else None."""
    from joinlib.mjoin.derived import TreeProgram
    from joinlib.mjoin.tree_plans import PartitionedTrees, SharedTrees
    if not isinstance(plan, (TreeProgram, PartitionedTrees, SharedTrees)):
        return None
    if adaptive is not None:
        raise ClusterError("an MJoin tree is not adaptive")
    from joinlib.node.tree_service import tree_run
    return tree_run(query, plan)


def _plan_of(query: Query, plan: Plans, tree: Any, run: str, offsets: dict[str, int],
             adaptive: Any) -> tuple[list[Any], dict[str, Any], list[str]]:
    """The plan generations (none for a tree), the plan message and the nodes of a run."""
    if tree is not None:
        return [], tree_message(query, plan, tree, run, offsets), tree_nodes(tree)
    specs = generations(query, plan)
    return specs, plan_message(query, specs, run, offsets, adaptive, plan), plan_sites(query, specs, adaptive)


def _tree_topics(tree: Any) -> list[str]:
    if tree is None:
        return []
    from joinlib.adapters.kafka import out_topic
    from joinlib.node.tree_service import tree_topics
    return tree_topics(tree) + [out_topic(q.name) for q in _outputs(tree.base, tree)]


def _outputs(query: Query, tree: Any) -> list[Query]:
    """The queries whose ``out`` topics a run writes: ``query``'s, or the results queries of a tree run."""
    return [query] if tree is None else list({q.name: q for q in tree.results.values()}.values())


def tree_message(query: Query, plan: Any, tree: Any, run: str, offsets: dict[str, int]) -> dict[str, Any]:
    """The ``plan`` control message of an MJoin tree run (:mod:`joinlib.node.tree_service`): ``plan``
    is a tree program, partitioned trees or shared trees (``query`` then their union)."""
    from joinlib.query import query_to_dict
    return {"query": query_to_dict(query), "plan": plan.to_json(), "run": run, "offsets": offsets,
            "nodes": tree_nodes(tree), "switches": []}


def tree_nodes(tr: Any) -> list[str]:
    from joinlib.node.tree_service import tree_nodes as nodes
    return nodes(tr.dep)


def _check_options(query: Query, mode: str, faults: Sequence[tuple[Any, ...]], redis_url: Optional[str]) -> None:
    if mode not in MODES:
        raise ClusterError(f"unknown cluster mode {mode!r} (choose from {', '.join(MODES)})")
    for site, *rest in faults:
        if site not in query.nodes:
            raise ClusterError(f"cannot kill site {site!r}: the query's nodes are {', '.join(query.nodes)}")
        if rest[1:] and rest[1] not in ("kill", "join"):
            raise ClusterError(f"unknown fault {rest[1]!r} (kill or join)")
    if faults and mode == "serving":
        raise ClusterError("killing nodes needs nodes this run starts (mode process or thread), not serving ones")
    if faults and not redis_url:
        raise ClusterError("killing nodes needs Redis windows (REDIS_URL): a node resumes from its checkpoint there")


def plan_message(query: Query, specs: Sequence[Any], run: str, offsets: dict[str, int],
                 adaptive: Any = None, plan: Any = None) -> dict[str, Any]:
    """The ``plan`` control message of a run: the query, its first plan and the later generations
    (``switches``), the run id, the topics' start offsets and every node involved.  An adaptive run
    (``adaptive``: its configuration) has no switches, every site of the query as its nodes and an
    ``adaptive`` object (:func:`joinlib.adaptive.service.config_json`).  A partitioned ``plan`` (PMJoin) is
    sent whole: its specs are its partitions, not generations."""
    from joinlib.query import query_to_dict
    msg = {"query": query_to_dict(query), "plan": specs[0].ir.plan.to_json(), "run": run,
           "offsets": offsets, "nodes": list(nodes_of(specs)),
           "switches": [{"from_epoch": s.start, "plan": s.ir.plan.to_json()} for s in specs[1:]]}
    if isinstance(plan, Partitioned):
        if adaptive is not None:
            raise ClusterError("a partitioned plan is not adaptive")
        msg.update(plan=plan.to_json(), switches=[])
    if adaptive is not None:
        from joinlib.adaptive.service import config_json
        if len(specs) > 1:
            raise ClusterError("an adaptive run starts with one plan and chooses its switches itself")
        msg.update(nodes=plan_sites(query, specs, adaptive), adaptive=config_json(adaptive))
    return msg


def plan_sites(query: Query, specs: Sequence[Any], adaptive: Any = None) -> list[str]:
    """The nodes of a run: every site of the query for an adaptive run (any may take part in a later
    plan), else :func:`nodes_of`."""
    return list(query.sites) if adaptive is not None else nodes_of(specs)


def nodes_of(specs: Sequence[Any]) -> list[str]:
    """Every node any plan generation places something at (stream sites first)."""
    out: dict[str, None] = {}
    for spec in specs:
        out.update(dict.fromkeys(spec.ir.nodes))
    return list(out)


# --------------------------------------------------------------------------- nodes

class _NodeHandle:
    site: str
    log: Optional[Path] = None

    def failure(self) -> Optional[str]:
        """A message if the node died without finishing, else None."""
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def kill(self) -> None:
        raise NotImplementedError

    def finish(self, grace: float) -> None:
        raise NotImplementedError


class _ProcessNode(_NodeHandle):
    def __init__(self, site: str, proc: subprocess.Popen, log: Path) -> None:
        self.site, self.proc, self.log = site, proc, log
        self.done = False

    def failure(self) -> Optional[str]:
        rc = self.proc.poll()
        if rc is None or (rc == 0 and self.done):
            return None
        if rc == 0:
            return None  # exited cleanly; its done message is on its way
        return f"node process of site {self.site} exited with status {rc}\n{_tail(self.log)}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def kill(self) -> None:
        """Die without warning (SIGKILL): no flush, no checkpoint."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        if self.log is not None and self.log.exists():  # its successor writes the same log name
            self.log = self.log.rename(self.log.with_name(f"{self.log.stem}.killed-{uuid.uuid4().hex[:6]}.log"))

    def finish(self, grace: float) -> None:
        try:
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            self.stop()


def _die_with_parent() -> None:  # in the child, between fork and exec
    try:
        import ctypes
        import signal
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _start_process(site, query, run, bootstrap, redis_url, port, python, log_dir, instance=0) -> _ProcessNode:
    log_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.update(KAFKA_BOOTSTRAP_SERVERS=bootstrap, JOINLIB_SITE=site, METRICS_PORT=str(port or 0),
               PYTHONUNBUFFERED="1")
    if redis_url:
        env["REDIS_URL"] = redis_url
    else:
        env.pop("REDIS_URL", None)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    log = log_dir / (f"node-{site}.log" if not instance else f"node-{site}-{instance + 1}.log")
    with open(log, "wb") as fh:
        proc = subprocess.Popen([python, "-m", "services.node", "--site", site, "--query", query, "--run", run,
                                 "--plan-timeout", "60"],
                                cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT,
                                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None)
    return _ProcessNode(site, proc, log)


class _ThreadNode(_NodeHandle):
    def __init__(self, site: str, svc, stop: threading.Event) -> None:
        self.site, self.svc, self._stop = site, svc, stop
        self.error: Optional[BaseException] = None
        self.thread = threading.Thread(target=self._main, name=f"node-{site}", daemon=True)
        self.thread.start()

    def _main(self) -> None:
        try:
            self.svc.run()
        except BaseException as e:  # reported by failure()
            self.error = e

    def failure(self) -> Optional[str]:
        if self.error is None:
            return None
        return f"node thread of site {self.site} failed: {type(self.error).__name__}: {self.error}"

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(10)

    def kill(self) -> None:
        """A thread cannot be killed: stop it (it saves a checkpoint on its way out)."""
        self.stop()

    def finish(self, grace: float) -> None:
        self.thread.join(grace)
        if self.thread.is_alive():
            self.stop()


def _start_thread(site, query, run, bootstrap, redis_url, port, python, log_dir, instance=0) -> _ThreadNode:
    from prometheus_client import CollectorRegistry

    from joinlib.node.node_service import NodeService
    stop = threading.Event()
    svc = NodeService(site, bootstrap, query=query, run=run, redis_url=redis_url, metrics_port=port,
                      registry=CollectorRegistry(), stop=stop, plan_timeout_s=60, quiet=True)
    return _ThreadNode(site, svc, stop)


class _ServingNode(_NodeHandle):
    """A node service this run did not start (``--serve``): nothing to watch, stop or wait for but its
    messages; a site none serves shows in the timeout message as one that never reported."""

    def __init__(self, site: str) -> None:
        self.site = site

    def failure(self) -> Optional[str]:
        return None

    def stop(self) -> None:
        pass

    def kill(self) -> None:
        raise ClusterError(f"cannot kill the serving node of {self.site}: this run did not start it")

    def finish(self, grace: float) -> None:
        pass


def _serving(site, query, run, bootstrap, redis_url, port, python, log_dir, instance=0) -> _ServingNode:
    return _ServingNode(site)


def _starter(mode: str) -> Any:
    """What starts a node in ``mode`` (looked up at each call, so a test may replace one)."""
    return {"process": _start_process, "thread": _start_thread, "serving": _serving}[mode]


def _tail(path: Optional[Path], lines: int = 15) -> str:
    if path is None:
        return ""
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"(no log at {path})"
    return f"--- last lines of {path} ---\n" + "\n".join(text[-lines:])


class _Faults:
    """Kills nodes on schedule (seconds after the replay starts) and starts their successors.  A fault is
    ``(site, seconds)`` or ``(site, seconds, action)``: ``kill`` (the default) SIGKILLs the site's oldest
    instance and starts a successor unless another instance serves the site (a scaled-out plan: the others
    take its partitions); ``join`` starts one more instance of the site."""

    def __init__(self, faults, start_node, nodes: dict) -> None:
        self.todo = sorted(faults, key=lambda f: f[1])
        self.start_node, self.nodes = start_node, nodes
        self.done: list[dict] = []

    def tick(self, t0: Optional[float]) -> None:
        while self.todo and t0 is not None and time.monotonic() - t0 >= self.todo[0][1]:
            site, after, *action = self.todo.pop(0)
            keys = [k for k in self.nodes if k == site or k.startswith(site + "#")]
            if action and action[0] == "join":
                n = 1 + max((int(k.rpartition("#")[2]) for k in keys if "#" in k), default=1)
                self.nodes[f"{site}#{n}"] = self.start_node(site, n - 1)
                self.done.append({"site": site, "after_s": after, "action": "join"})
                continue
            old = self.nodes[keys[0]]
            old.kill()
            if len(keys) > 1:   # the others take its partitions (its log stays named in self.done)
                del self.nodes[keys[0]]
            else:
                self.nodes[keys[0]] = self.start_node(site)
            self.done.append({"site": site, "after_s": after, "action": "kill", "successor": len(keys) == 1,
                              "log": str(old.log) if old.log else None})


# --------------------------------------------------------------------------- sources

class _Replayer(threading.Thread):
    def __init__(self, out, query, streams, rate_scale, run, progress, split=None) -> None:
        super().__init__(name="replay", daemon=True)
        self.args = (out, query, streams, rate_scale, run, progress)
        self.split = split
        self.info: Optional[Any] = None  # a replay.ReplayInfo once the replay is done
        self.error: Optional[BaseException] = None
        self.t0_ms: Optional[float] = None

    def run(self) -> None:
        from joinlib.node.replay import replay
        out, query, streams, rate_scale, run, progress = self.args
        try:
            self.info = replay(out, query, streams, rate_scale=rate_scale, run=run, progress=progress,
                               split=self.split)
        except BaseException as e:
            self.error = e


# --------------------------------------------------------------------------- collecting

class _Results:
    def __init__(self) -> None:
        self.count = 0
        self.head_ts: list[int] = []   # per result group: head ts, emit time, number of results
        self.emit_ms: list[int] = []
        self.weight: list[int] = []
        self.done: dict[str, dict] = {}
        self.status: dict[str, tuple[float, dict]] = {}
        self.restarts: list[dict] = []


def _collect(consumer: Any, query: Query, sink: Any, nodes: dict[str, _NodeHandle], replayer: _Replayer,
             timeout_s: float, run: str, wire: Any, consume: Any, chaos: _Faults, adaptive: bool = False,
             outputs: Sequence[Query] = (), wanted: Optional[set[str]] = None,
             merge: Any = None) -> _Results:
    """Consume ``control`` and ``out.<query>`` (of each of ``outputs`` if given) until every node is done
    and every result it announced has arrived (adaptive: and the nodes have ended the protocol); start the
    replay once every node runs, kill nodes on schedule.  ``wanted``: whose ``done`` to wait for (default:
    every site of ``nodes``; a scaled-out plan: every (site, partition), whose dones ``merge`` adds up)."""
    c = _Collector(query, sink, nodes, run, wire, adaptive, outputs, wanted)
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

    def __init__(self, query: Query, sink: Any, nodes: dict[str, _NodeHandle], run: str, wire: Any,
                 adaptive: bool = False, outputs: Sequence[Query] = (), wanted: Optional[set[str]] = None) -> None:
        from joinlib.adapters.kafka import CONTROL_TOPIC
        self.wanted = set(nodes) if wanted is None else wanted
        self.adaptive = adaptive
        self.control_topic, self.query, self.sink, self.nodes, self.run, self.wire = (
            CONTROL_TOPIC, query, sink, nodes, run, wire)
        self.res = _Results()
        self.pos_of = {q.name: {n: i for i, n in enumerate(q.names)} for q in (outputs or [query])}
        self.pending: list[Any] = []   # results before the replay start time is known

    def take(self, msg: Any) -> None:
        if msg.topic() == self.control_topic:
            self._control(msg)
        else:
            self._results(msg)

    def _control(self, msg: Any) -> None:
        try:
            c = self.wire.decode_control(msg.value())
        except ValueError:
            return
        p = c.payload if isinstance(c.payload, dict) else {}
        if c.query != self.query.name or p.get("run") != self.run:
            return
        if c.kind not in ("done", "status"):
            return
        from joinlib.node.scale_out import done_key
        key = done_key(p["site"], p.get("part"))
        if c.kind == "done":
            self.res.done[key] = p
            h = self.nodes.get(key)
            if h is not None and hasattr(h, "done"):
                h.done = True
        elif c.kind == "status":
            self.res.status[key] = (time.monotonic(), p)

    def _results(self, msg: Any) -> None:
        res = self.res
        if self.sink is not None:
            b = self.wire.decode_result_batch(msg.value())
            self.pending.append(b)
            emit_ms, groups = b.emit_ms, [(g.head_ts, len(g.last_ids)) for g in b.groups]
        else:
            emit_ms, groups = self.wire.result_batch_summary(msg.value())
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

    def check(self, replayer: _Replayer, query: Query) -> None:
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
        return sum(d["results"] for d in self.res.done.values())

    def complete(self) -> bool:
        n = self.expected()
        if n is None or self.res.count < n:
            return False
        if self.adaptive:  # a node may publish done again after a round that started near the end
            from joinlib.adaptive.service import quiescent
            return quiescent(self.res.done, self.nodes)
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


def _timeout_message(query, run, timeout_s, nodes, res: _Results, expected, wanted=None) -> str:
    parts = []
    now = time.monotonic()
    for key in sorted(wanted) if wanted is not None else nodes:   # sites, or (site, partition) when scaled out
        if key in res.done:
            continue
        st = res.status.get(key)
        if st is None:
            where = "no status message: did the node start?"
        else:
            at, p = st
            where = f"at epoch {p.get('epoch')} of {p.get('last_epoch')}, last status {now - at:.1f}s ago"
        h = nodes.get(key)
        log = f"; log {h.log}" if h is not None and h.log else ""
        what = f"site {key}" if "/p" not in key else "partition {1} of site {0}".format(*key.split("/p"))
        parts.append(f"{what} did not finish ({where}{log})")
    if not parts:
        parts.append(f"every node finished but only {res.count} of {expected} results arrived")
    return f"cluster run of {query.name} (run {run}) timed out after {timeout_s:.0f}s: " + "; ".join(parts)


# --------------------------------------------------------------------------- report

def _percentiles(xs: list[float], weights: Optional[list[int]] = None) -> dict:
    """p50/p90/p99/max/mean of ``xs``, each counted ``weights[i]`` times (default once)."""
    if not xs:
        return {}
    weights = weights or [1] * len(xs)
    pairs = sorted(zip(xs, weights, strict=True))
    total = sum(weights)
    cum, acc = [], 0
    for _, w in pairs:
        acc += w
        cum.append(acc)

    def q(f: float) -> float:  # the value at rank int(f * total) (0-based), as for an expanded list
        return round(pairs[bisect_right(cum, min(total - 1, int(f * total)))][0], 3)
    return {"p50": q(0.5), "p90": q(0.9), "p99": q(0.99), "max": round(pairs[-1][0], 3),
            "mean": round(sum(x * w for x, w in pairs) / total, 3)}


def _report(query: Query, specs, streams: dict, res: _Results, replayer: _Replayer, run: str, mode: str,
            wall: float, nodes: dict, plan: Any = None) -> dict:
    sent: dict = {}
    received: dict = {}
    processing: dict = {}
    naive: dict = defaultdict(int)
    for site, d in res.done.items():
        for ln in d["links"]:
            sent[(ln["src"], ln["dst"], ln["kind"])] = ln
        for ln in d["received"]:
            received[(ln["src"], ln["dst"], ln["kind"])] = ln
        processing[site] = d.get("processing_s", {})
        for n in d.get("naive", []):
            naive[(n["src"], n["dst"])] += n["bytes"]
    links = []
    for key in sorted(set(sent) | set(received)):
        s, r = sent.get(key, {}), received.get(key, {})
        links.append({"src": key[0], "dst": key[1], "kind": key[2], "messages": s.get("messages", 0),
                      "bytes": s.get("bytes", 0), "transfer_ms": r.get("transfer_ms", 0.0),
                      "received_messages": r.get("messages", 0)})
    all_ts = [t.ts for tups in streams.values() for t in tups]
    info = replayer.info
    span = (max(all_ts) - min(all_ts) + 1) if all_ts else 0
    transmission = sum(ln["transfer_ms"] for ln in links)
    proc_total = sum(sum(v.values()) for v in processing.values())
    latency: dict[str, float] = {}
    if info is not None and info.rate_scale and res.count:
        t0, scale = info.t0_ms, info.rate_scale
        lats = [e - (t0 + h / scale) for h, e in zip(res.head_ts, res.emit_ms, strict=True)]
        latency = _percentiles(lats, res.weight)
    return {
        "mode": "cluster", "node_mode": mode, "run": run,
        "query": query.name, "plan": plan_json(specs, plan) if specs else plan.to_json(), "results": res.count,
        "input_tuples": len(all_ts), "duration_ms": span,
        "bytes": sum(ln["bytes"] for ln in links), "messages": sum(ln["messages"] for ln in links),
        "transmission_ms": round(transmission, 3),
        "processing_s": round(proc_total, 6),
        "execution_s_per_s": round((proc_total + transmission / 1000.0) / (max(span, 1) / 1000.0), 6),
        "late_messages": sum(d.get("late_messages", 0) for d in res.done.values()),
        "wall_s": round(wall, 4),
        "mean_latency_ms": latency.get("mean"),
        "p50_latency_ms": latency.get("p50"), "p99_latency_ms": latency.get("p99"),
        "latency_ms": latency,                      # wall-clock, paced replays only
        "last_emit_ms": max(res.emit_ms) if res.emit_ms else None,   # wall clock (epoch ms)
        "links": links,
        "naive": [{"src": s, "dst": d, "bytes": n} for (s, d), n in sorted(naive.items())],
        "processing_by_site": processing,
        "sites": {site: {"results": d["results"], "input_tuples": d.get("input_tuples"), "wall_s": d.get("wall_s"),
                         "cpu_s": d.get("cpu_s"),
                         "resumed_from_epoch": d.get("resumed_from_epoch"), "resumed_from": d.get("resumed_from"),
                         "checkpoints": d.get("checkpoints", 0), "generations": d.get("generations"),
                         "log": str(nodes[site].log) if site in nodes and nodes[site].log else None,
                         **({"parts": [{k: x.get(k) for k in ("part", "instance", "results", "resumed_from_epoch",
                                                              "checkpoints", "startup_s")} for x in d["parts"]]}
                            if "parts" in d else {})}
                  for site, d in sorted(res.done.items())},
        "replay": info.to_dict() if info is not None else None,
        "restarts": res.restarts,
    }


# --------------------------------------------------------------------------- CLI glue

def to_report(d: dict):
    """A cluster run's dict as an :class:`joinlib.runtime.report.Report` (what ``joinlib run`` prints); an
    adaptive run's as an :class:`joinlib.adaptive.embedded.AdaptiveReport`."""
    from joinlib.runtime.report import Report
    args = (d["query"], d["plan"], d["results"], d["input_tuples"], d["duration_ms"],
            [{**ln, "queued_ms": 0.0} for ln in d["links"]], d["processing_by_site"],
            d["late_messages"], d["wall_s"], 0.0,
            lambda: {k: d.get(k) for k in ("mean_latency_ms", "p50_latency_ms", "p99_latency_ms")})
    ad = d.get("adaptive")
    if ad is None:
        return Report(*args)
    from joinlib.adaptive.embedded import AdaptiveReport
    from joinlib.adaptive.jep import JEP
    return AdaptiveReport(*args, switches=d.get("switches") or [], mode=ad["mode"],
                          initial=JEP.from_json(ad["initial_plan"]), changes=ad["changes"], triggers=ad["triggers"],
                          rounds=ad["rounds"], timeline=ad["timeline"], restarts=ad["restarts"])


def cluster_runner(bootstrap: Optional[str] = None, **options):
    """A drop-in for :func:`joinlib.sim.engine.run_embedded` that runs on Kafka instead:
    ``runner(query, streams, plan, sink, progress=False) -> Report``.  ``bootstrap`` empty or
    None: ``$KAFKA_BOOTSTRAP_SERVERS``; ``REDIS_URL`` (env) puts the windows in Redis unless
    ``redis_url`` is given; other options go to :func:`run_cluster` (``rate_scale``, ``mode``,
    ``timeout_s``)."""
    bootstrap = bootstrap or os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
    if not bootstrap:
        raise ClusterError("--cluster needs a Kafka broker: pass --cluster HOST:PORT or set KAFKA_BOOTSTRAP_SERVERS")
    options.setdefault("redis_url", os.environ.get("REDIS_URL", "").strip() or None)
    options = {k: v for k, v in options.items() if v is not None or k == "redis_url"}

    def runner(query, streams, plan, sink, *, progress: bool = False, **_ignored):
        d = run_cluster(query, streams, plan, sink, bootstrap=bootstrap, progress=progress, **options)
        for r in d["restarts"]:
            if r.get("action") == "join":
                print(f"started another instance of {r['site']} {r['after_s']:g} s into the replay", file=sys.stderr)
                continue
            if not r.get("successor", True):
                print(f"killed an instance of {r['site']} {r['after_s']:g} s into the replay; the others took its "
                      "partitions", file=sys.stderr)
                continue
            epoch = d["sites"][r["site"]]["resumed_from_epoch"]
            where = (f"from its checkpoint of epoch {epoch}" if epoch is not None
                     else "from the start (no checkpoint yet)")
            print(f"killed the node of {r['site']} {r['after_s']:g} s into the replay; its successor resumed {where}",
                  file=sys.stderr)
        return to_report(d)
    return runner
