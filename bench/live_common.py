"""What the live benchmarks share (bench/live_bench.py, bench/spark_compare.py): the Fig. 7 workload on
live JSON topics at three sites, writing it, joinlib's services, and reading results back.

Workload ("Fig. 7 default, three sites"): the paper's Fig. 7 defaults -- 1,250-byte tuples, 300 tuples/s per
stream, 3 s time windows, tau = 100 ms, delta = 80 ms -- for three streams at three sites joined in a chain on
one attribute (S1.J = S2.J, S2.J = S3.J).  Only the selectivity differs: with the default f = 0.1 a 3-way
join yields ~8,000 results per input tuple (90 matches in each of two windows); f = 0.01 gives ~80, about
the 2-way default's 88.  Each event is a JSON object {"id", "ts" (ms), "J", "payload" (1,250 characters)},
out of order by up to 60 ms (< delta); no late or malformed records, so every record is on time for both
engines and their result counts must both equal the reference join of all records.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from bisect import bisect_left, bisect_right
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from joinlib.ingest.contract import Written  # noqa: E402
from joinlib.ingest.events import EventProfile  # noqa: E402
from joinlib.model import Query  # noqa: E402

RATE, PAYLOAD, WINDOW_MS, F = 300.0, 1250, 3000, 0.01
# event time of a backlog's first events (a real date: Spark drops rows at event time 0 as late)
BASE_MS = 1_700_000_000_000


def fig7_query(name: str, sites: list[str], topics: list[str], *, f: float = F, rate: float = RATE,
               start: str = "earliest", idle: str = "1s", payload: int = PAYLOAD) -> Query:
    from joinlib.query import parse_query
    streams = {}
    for i, (site, topic) in enumerate(zip(sites, topics, strict=True)):
        streams[f"S{i + 1}"] = {
            "site": site, "window": f"{WINDOW_MS}ms", "rate": rate, "tuple_bytes": payload, "selectivity": f,
            "source": {"topic": topic, "format": "json", "time": {"field": "ts", "unit": "ms"}, "id": "id",
                       "attributes": ["payload"], "start": start}}
    doc = {"name": name, "streams": streams, "join": ["S1.J = S2.J", "S2.J = S3.J"],
           "network": {"latency": "25ms", "bandwidth": "1024kbps"},
           "execution": {"interval": "100ms", "max_delay": "80ms", "idle_timeout": idle}}
    return parse_query(doc, name)


def profile(f: float = F, rate: float = RATE, payload: int = PAYLOAD) -> EventProfile:
    return EventProfile(rate=rate, distinct=round(1 / f), payload_bytes=payload, disorder_ms=60,
                        late_every=0, malformed_every=0)


def tag() -> str:
    return uuid.uuid4().hex[:6]


def make_topics(bootstrap: str, names: list[str], partitions: int) -> None:
    from joinlib.adapters.kafka import ensure_topics, make_admin
    ensure_topics(make_admin(bootstrap), names, partitions=partitions)


# --------------------------------------------------------------------------- writing a backlog


def cpu_seconds(procs: dict[str, subprocess.Popen]) -> dict[str, float]:
    """CPU seconds of each process so far (user + system, all threads), from /proc; NaN once it is gone."""
    out = {}
    for site, p in procs.items():
        try:
            with open(f"/proc/{p.pid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            out[site] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except OSError:
            out[site] = float("nan")
    return out


class CpuMeter:
    """A process's CPU seconds (user + system, from /proc), sampled every ``every_s`` on a thread, so that the CPU
    it used over a span of wall time known only afterwards (a drain's, in epoch ms) can be read: the local broker's
    share of a drain.  Why: on these two cores the broker serving a drain's fetches and produce requests used as
    much CPU as the engine's own processes (docs/results.md, "Session of 2026-11-29 14:00-17:00")."""

    def __init__(self, pid: int, every_s: float = 0.1) -> None:
        self.pid, self.every = pid, every_s
        self.samples: list[tuple[float, float]] = []   # (epoch ms, CPU s)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-meter", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        tick = os.sysconf("SC_CLK_TCK")
        while not self._stop.is_set():
            try:
                with open(f"/proc/{self.pid}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except OSError:
                return
            self.samples.append((time.time() * 1000, (int(fields[11]) + int(fields[12])) / tick))
            self._stop.wait(self.every)

    def between(self, t0_ms: float, t1_ms: float) -> Optional[float]:
        """CPU seconds from ``t0_ms`` to ``t1_ms`` (interpolated between samples); None outside the samples.  A span
        that ended just now waits for the next sample (up to a second): a drain read as soon as it ended was None."""
        deadline = time.monotonic() + 1.0
        while self.samples and t1_ms > self.samples[-1][0] and time.monotonic() < deadline \
                and self._thread.is_alive():
            time.sleep(self.every / 2)
        xs = self.samples
        if not xs or t0_ms < xs[0][0] or t1_ms > xs[-1][0]:
            return None
        return round(_at(xs, t1_ms) - _at(xs, t0_ms), 2)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)


def _at(xs: list[tuple[float, float]], t: float) -> float:
    i = bisect_left(xs, (t, float("-inf")))
    if i == 0:
        return xs[0][1]
    (ta, ca), (tb, cb) = xs[i - 1], xs[min(i, len(xs) - 1)]
    return ca if tb == ta else ca + (cb - ca) * (t - ta) / (tb - ta)


def broker_meter(cluster: Any) -> Optional[CpuMeter]:
    """A :class:`CpuMeter` of the throw-away local broker ``cluster`` started (None: a broker of the environment,
    whose process the bench does not know)."""
    proc = getattr(getattr(cluster, "kafka", None), "proc", None)
    return CpuMeter(proc.pid) if proc is not None else None


class Recorder:
    def __init__(self) -> None:
        self.written: dict[str, list[Written]] = {}
        self.bytes: dict[str, int] = {}
        self.lock = threading.Lock()

    def __call__(self, stream: str, rec: Any, part: int, offset: int) -> None:
        with self.lock:
            self.written.setdefault(stream, []).append(Written(part, offset, rec.value))
            self.bytes[stream] = self.bytes.get(stream, 0) + len(rec.value)


def write_backlog(bootstrap: str, query: Query, seconds: float, *, f: float = F, rate: float = RATE,
                  partitions: int = 3, seed: int = 1, payload: int = PAYLOAD) -> Recorder:
    """``seconds`` of events per stream (event time from :data:`BASE_MS` + 1 s), then per partition one
    *sentinel* event 30 s later whose join value matches nothing: it moves every watermark past the data,
    so the last results come out as soon as the data is processed (no idle timeout to wait for)."""
    from joinlib.adapters.kafka import make_producer
    from joinlib.adapters.live_gen import LiveGenerator
    rec = Recorder()
    # events from BASE_MS + 1 s: the first ones are up to 60 ms old when written, still after the origin
    gen = LiveGenerator(bootstrap, query, profile(f, rate, payload), seed=seed, time_base_ms=BASE_MS + 1000,
                        on_delivered=rec)
    gen.burst(int(seconds * rate))
    p = make_producer(bootstrap, **{"enable.idempotence": True, "acks": "all"})
    end_ms = BASE_MS + int(seconds * 1000) + 30_000
    for s in query.streams:
        for part in range(partitions):
            value = json.dumps({"id": 10**9 + part, "ts": end_ms, "J": f"sentinel-{s.name}-{part}",
                                "payload": ""}).encode()

            def cb(err, msg, s=s.name, value=value):
                if err is None:
                    with rec.lock:
                        rec.written[s].append(Written(msg.partition(), msg.offset(), value))
            p.produce(s.source.topic, value, partition=part, on_delivery=cb)
    p.flush(30)
    return rec


# --------------------------------------------------------------------------- joinlib's services


class Joinlib:
    """The planner (in this process) and one node service per site (``python -m services.node --serve``)."""

    def __init__(self, bootstrap: str, sites: list[str], log_dir: Path, redis_url: Optional[str] = None) -> None:
        from services.planner.service import PlannerService
        self.bootstrap, self.log_dir = bootstrap, log_dir
        log_dir.mkdir(parents=True, exist_ok=True)
        self.planner = PlannerService(bootstrap)
        env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap, "METRICS_PORT": "0", "PYTHONPATH": str(ROOT),
               "PYTHONUNBUFFERED": "1"}
        env.pop("REDIS_URL", None)
        if redis_url:
            env["REDIS_URL"] = redis_url
        self.procs = {}
        for site in sites:
            log = open(log_dir / f"node-{site}.log", "wb")
            self.procs[site] = subprocess.Popen([sys.executable, "-m", "services.node", "--site", site, "--serve"],
                                                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)

    def ready(self, timeout_s: float = 60.0) -> None:
        """Wait until every node service logs that it serves (interpreter start and imports done: about a CPU-second
        each, which a CPU reading taken after this call does not charge to the query), at least 2 s."""
        time.sleep(2.0)
        deadline = time.monotonic() + timeout_s
        for site in self.procs:
            log = self.log_dir / f"node-{site}.log"
            while b"serving every query" not in log.read_bytes():
                if time.monotonic() > deadline or self.procs[site].poll() is not None:
                    raise RuntimeError(f"node {site} did not start serving: see {log}")
                time.sleep(0.1)

    def submit(self, query: Query, plan: Optional[str] = None, since: str = "0") -> dict:
        import yaml

        from joinlib.query import query_to_dict
        return self.planner.submit(yaml.safe_dump(query_to_dict(query)), plan, None, since)

    def stop(self, query: Query) -> None:
        try:
            self.planner.stop(query.name)
        except Exception:
            pass

    def cpu_s(self) -> dict[str, float]:
        """CPU seconds of each node process so far (user + system, librdkafka threads included)."""
        return cpu_seconds(self.procs)

    def close(self) -> None:
        for p in self.procs.values():
            p.terminate()
        for p in self.procs.values():
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
        self.planner.close()


class OutReader:
    """Reads ``out.<query>`` of one run incrementally: per result group (head ts, emit ms, results)."""

    def __init__(self, bootstrap: str, query: Query, run: str, origin_ms: int) -> None:
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        from joinlib.adapters.kafka import make_watcher, out_topic
        self.c = make_watcher(bootstrap, f"bench-{tag()}")   # a downstream reader of results
        self.c.assign([TopicPartition(out_topic(query.name), 0, OFFSET_BEGINNING)])
        self.run, self.origin = run.encode(), origin_ms
        self.groups: list[tuple[int, int, int]] = []
        self.count = 0
        self.last_emit = 0

    def poll(self, seconds: float = 0.5) -> None:
        from joinlib.adapters.kafka import consume
        from joinlib.protocol import records
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for m in consume(self.c, 5000, 0.1):
                if dict(m.headers() or ()).get("run") != self.run:
                    continue
                emit, groups = records.result_batch_summary(m.value())
                for head_ts, n in groups:
                    self.groups.append((head_ts + self.origin, emit, n))
                    self.count += n
                self.last_emit = max(self.last_emit, emit)

    def wait_for(self, count: int, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while self.count < count and time.monotonic() < deadline:
            self.poll(0.5)
        return self.count >= count

    def close(self) -> None:
        self.c.close()


def percentiles(pairs: list[tuple[float, int]]) -> dict[str, float]:
    """p50/p90/p99/max/mean of values given as (value, weight)."""
    if not pairs:
        return {}
    pairs = sorted(pairs)
    cum, acc = [], 0
    for _, w in pairs:
        acc += w
        cum.append(acc)
    total = acc

    def q(f: float) -> float:
        return round(pairs[min(len(pairs) - 1, bisect_right(cum, int(f * total)))][0], 1)
    return {"p50": q(0.5), "p90": q(0.9), "p99": q(0.99), "max": round(pairs[-1][0], 1),
            "mean": round(sum(v * w for v, w in pairs) / total, 1)}


def kafka(bootstrap: Optional[str]) -> tuple[str, Any]:
    """A broker: ``bootstrap``, ``$KAFKA_BOOTSTRAP_SERVERS``, the ``make up`` cluster, else a throw-away one."""
    bs = bootstrap or os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if not bs:
        try:
            out = subprocess.run(["bash", str(ROOT / "scripts" / "cluster.sh"), "env"], capture_output=True,
                                 text=True, timeout=30).stdout
            bs = dict(line.split("=", 1) for line in out.splitlines() if "=" in line).get("KAFKA_BOOTSTRAP_SERVERS")
        except (subprocess.SubprocessError, OSError):
            bs = None
    if bs:
        return bs, None
    from infra.local_cluster import LocalCluster
    cluster = LocalCluster.start(kafka=True, redis=False)
    return cluster.kafka_bootstrap, cluster


def kafka_and_redis() -> tuple[str, str, Any]:
    """$KAFKA_BOOTSTRAP_SERVERS and $REDIS_URL (``make up``), else a throw-away local broker and Redis; the third
    item is that cluster (None: the environment's), to stop when done."""
    bootstrap, redis_url = os.environ.get("KAFKA_BOOTSTRAP_SERVERS"), os.environ.get("REDIS_URL")
    if bootstrap and redis_url:
        return bootstrap, redis_url, None
    from infra.local_cluster import LocalCluster
    print("starting a local broker and Redis", file=sys.stderr)
    cluster = LocalCluster.start(kafka=True, redis=True)
    return cluster.kafka_bootstrap, cluster.redis_url, cluster


def machine() -> dict[str, Any]:
    import platform
    return {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform(),
            "loadavg": list(os.getloadavg())}


def read_written(bootstrap: str, query: Query, timeout_s: float = 60.0) -> dict[str, list[Written]]:
    """Every record now in the source topics of ``query`` (all partitions, from the beginning)."""
    from confluent_kafka import TopicPartition

    from joinlib.adapters.kafka import consume, make_admin, make_consumer
    md = make_admin(bootstrap).list_topics(timeout=10)
    out: dict[str, list[Written]] = {}
    for s in query.streams:
        topic = s.source.topic
        c = make_consumer(bootstrap, f"bench-read-{tag()}")
        try:
            parts = sorted(md.topics[topic].partitions)
            ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts}
            c.assign([TopicPartition(topic, p, 0) for p in parts])
            got, rows = {p: 0 for p in parts}, []
            deadline = time.monotonic() + timeout_s
            while any(got[p] < ends[p] for p in parts) and time.monotonic() < deadline:
                for m in consume(c, 10000, 0.3):
                    rows.append(Written(m.partition(), m.offset(), m.value()))
                    got[m.partition()] = m.offset() + 1
            out[s.name] = rows
        finally:
            c.close()
    return out


def logged_advances(bootstrap: str, query: Query, run: str) -> dict[tuple[str, int], list[tuple[int, int]]]:
    """The idle advances the nodes logged for ``run`` (wm.<query>)."""
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition

    from joinlib.adapters.kafka import consume, end_offsets, make_consumer
    topic = f"wm.{query.name}"
    c = make_consumer(bootstrap, f"bench-wm-{tag()}")
    out: dict[tuple[str, int], list[tuple[int, int]]] = {}
    try:
        end = end_offsets(c, [topic])[topic]
        if not end:
            return out
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        seen, deadline = 0, time.monotonic() + 30
        while seen < end and time.monotonic() < deadline:
            for m in consume(c, 5000, 0.3):
                seen = m.offset() + 1
                if dict(m.headers() or ()).get("run") == run.encode():
                    d = json.loads(m.value())
                    out.setdefault((d["stream"], d["part"]), []).append((d["at"], d["wm"]))
        return out
    finally:
        c.close()
