"""Soak: a continuous live query at 80 % of the sustainable rate measured just before, for ``--minutes`` (default
10), with Redis windows and checkpoints, recording node RSS, Redis memory, consumer lag and latency over time and
checking **every result** against the live contract's reference (``make bench-soak``; issues 16 and 29).

Workload: the Fig. 7 query of the live benchmarks (bench/live_common.py: three sites, 1,250-byte JSON events
on 3-partition topics, 3 s windows, tau 100 ms, delta 80 ms, a chain on J), selectivity scaled as 1 / rate so that
an event meets one match in each other window (~1 result per event at every rate: the reference of a long run
stays computable as it goes), every ``--malformed-every``-th record malformed (dead letters to account for), one
node service process per site with ``REDIS_URL`` (windows in Redis, a checkpoint every second), a generator
process writing real-time events.

The rate: ``--rate`` (events/s per site), else measured first, the same hour with the same services:
``--measure-seconds`` of backlog per site at ``--measure-density`` events/s per site, drained with Redis
windows (its results checked against the reference), then ``--probes`` short soaks of ``--probe-minutes``
from half that drain's rate, searching the highest rate whose lag stays bounded and whose p99 latency stays
under ``--probe-p99-ms`` with the generator and the check running too (bench/soak_ramp.py: a drain measures a
burst; 80 % of it fell behind within a minute), then ``--fraction`` (0.8) of that.  soak.json records when and
how (``measured``, ``measured.ramp``).

Every ``--every`` seconds it samples: each node process's RSS (/proc), Redis ``INFO memory``
(used_memory, used_memory_rss), each node's consumer lag (``joinlib_consumer_lag_messages`` summed over
its topics, scraped from its /metrics) and watermark lag, the results/s and the p50/p99 event-to-result
latency of the results emitted in the interval (read from ``out.<query>``).

The check (bench/soak_check.py): a thread reads every source record and computes the contract's reference chunk
by chunk (15 s of head time, joinlib/ingest/contract_stream.py) -- once the input has ended (``--check after``,
the default: its CPU, ~12-25 us a record (bench/soak_check_speed.py), then does not compete with the nodes;
the source topics keep the whole run) or while the generator writes (``--check live``) -- and the reader of
``out.<query>`` tallies the live results the same way: per chunk, a count and an order-independent hash. After the
input ends, every chunk must match (nothing missing, nothing duplicated), and ``dlq.<query>`` must hold exactly the
contract's dead letters (bench/chaos_check.py).

``--trace-memory S`` (with ``--trace-frames``) finds what a node's memory is made of (bench/soak_memtrace.py:
tracemalloc snapshots of the first site's node, or every node's RSS and glibc malloc figures) and counts Redis
keys by kind in every sample; ``--node-env KEY=VALUE`` sets the node processes' environment (malloc settings).

Verdicts, after the warm-up (``--warmup``, default 20 % of the run, at least 60 s): every node's RSS and
Redis used_memory are flat: each minute's median within +-10 % of the median of them all, and the last minute
within +-10 % of the first (single samples are recorded too, ``memory_flat_every_sample``, but do not decide: a
sample inside a lag burst reads glibc's high-water mark, which ``malloc_trim`` hands back within seconds --
docs/reliability.md, "Memory growth while keeping up"); the consumer lag is bounded (its maximum after the
warm-up below ``--lag-bound-s`` seconds of input, and its least-squares trend over the post-warm-up part adds
less than one second of input); the p99 latency is bounded (each minute's median of the samples' p99 under
``--p99-bound-ms``); the results and dead letters were checked and are exact.  A failed verdict exits 1.
Printed and written with the samples to ``results/soak/soak.json`` and ``soak.png`` (``--out``).

    python bench/soak.py [--minutes 10] [--rate R | --measure-seconds 20] [--fraction 0.8] [--every 5]
                         [--bootstrap HOST:PORT --redis-url URL] [--out results/soak]

Kafka and Redis: a throw-away local broker and redis-server of its own (infra.local_cluster) unless both
``--bootstrap`` and ``--redis-url`` are given (then Redis memory includes whatever else is in that Redis).
The machine's load average is recorded before, during and after (the machine may be shared).
"""
from __future__ import annotations

import argparse
import gc
import json
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))

from live_common import (  # noqa: E402
    BASE_MS,
    PAYLOAD,
    ROOT,
    WINDOW_MS,
    cpu_seconds,
    fig7_query,
    machine,
    make_topics,
    percentiles,
    tag,
    write_backlog,
)

FLAT_TOLERANCE = 0.10
CHECK_GC_THRESHOLDS = (100_000, 50, 50)   # see main(): the check's rows
P99_BOUND_MS = 2000.0   # the verdict's bound on each minute's median p99 (twice the ramp's --probe-p99-ms)
PARTITIONS = 3
MATCHES_PER_WINDOW = 1.0   # an event's matches in each other stream's window: ~1 result per event (a chain of 3)
# source topics: with the check reading them after the input (``--check after``, the default) they keep the whole
# run (+ 30 min for the drain and the check: ~1.3 kB per event on disk, 13 GB for 30 min at 1,850 events/s per
# site); with ``--check live`` (the check reading beside the nodes) a few minutes
SOURCE_RETENTION_LIVE_MS = 180_000
DRAIN_AND_CHECK_S = 1800
SOURCE_SEGMENT_BYTES = 64 * 1024 * 1024
CHECK_MODES = ("after", "live")
# the node processes' malloc settings, as in services/Dockerfile (without MALLOC_ARENA_MAX a node's RSS stayed at
# each burst's peak); the environment and --node-env override them
NODE_MALLOC_ENV = {"MALLOC_ARENA_MAX": "2"}


def source_topic_config(minutes: float, check: str) -> dict[str, str]:
    """The soak's source topics' config: they keep every record until the check has read it."""
    keep_ms = SOURCE_RETENTION_LIVE_MS if check == "live" else round((minutes * 60 + DRAIN_AND_CHECK_S) * 1000)
    return {"retention.ms": str(keep_ms), "segment.bytes": str(SOURCE_SEGMENT_BYTES)}


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Nodes:
    """One node service process per site (``--serve``, windows in Redis, metrics on a free port each)."""

    def __init__(self, bootstrap: str, redis_url: str, sites: list[str], log_dir: Path,
                 trace_memory_s: Optional[float] = None, trace_frames: int = 8,
                 node_env: Optional[dict[str, str]] = None) -> None:
        log_dir.mkdir(parents=True, exist_ok=True)
        self.procs: dict[str, subprocess.Popen] = {}
        self.ports: dict[str, int] = {}
        for site in sites:
            port = _free_port()
            env = {**NODE_MALLOC_ENV, **os.environ, **(node_env or {}), "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
                   "REDIS_URL": redis_url, "METRICS_PORT": str(port), "PYTHONPATH": str(ROOT),
                   "PYTHONUNBUFFERED": "1"}
            # --trace-memory: the first site's node (the central one of the default plan, the one whose RSS
            # grew) under tracemalloc, heap snapshots in the log dir (bench/soak_memtrace.py); --trace-frames 0:
            # every node, its RSS and malloc's figures only
            traced = trace_memory_s and (site == sites[0] or not trace_frames)
            run = ([str(ROOT / "bench" / "soak_memtrace.py"), str(log_dir / f"heap-{site}"), str(trace_memory_s),
                    str(trace_frames)] if traced else [])
            with open(log_dir / f"node-{site}.log", "wb") as log:
                self.procs[site] = subprocess.Popen(
                    [sys.executable, *run, "-m", "services.node", "--site", site, "--serve"], cwd=ROOT, env=env,
                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            self.ports[site] = port

    def wait_ready(self, timeout_s: float = 120.0) -> float:
        """Wait until every node serves its /metrics (its imports done: a node submitted to before it subscribes
        misses the first records, and a loaded machine has taken tens of seconds to start one); seconds waited."""
        t0 = time.monotonic()
        waiting = set(self.procs)
        while waiting and time.monotonic() - t0 < timeout_s:
            for site in list(waiting):
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{self.ports[site]}/metrics", timeout=2):
                        waiting.discard(site)
                except OSError:
                    pass
            if waiting:
                time.sleep(0.5)
        return round(time.monotonic() - t0, 1)

    def rss_mb(self) -> dict[str, float]:
        out = {}
        for site, p in self.procs.items():
            try:
                with open(f"/proc/{p.pid}/status") as fh:
                    kb = next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:"))
                out[site] = round(kb / 1024, 1)
            except (OSError, StopIteration):
                out[site] = float("nan")
        return out

    def cpu_s(self) -> dict[str, float]:
        return cpu_seconds(self.procs)

    def metrics(self, site: str) -> dict[str, float]:
        """Consumer lag (messages, summed over the node's topics) and the worst watermark lag (s)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ports[site]}/metrics", timeout=3) as r:
                text = r.read().decode()
        except OSError:
            return {}
        lag, wm, src_lag = 0.0, 0.0, 0.0
        for line in text.splitlines():
            if line.startswith("joinlib_consumer_lag_messages{"):
                v = float(line.rsplit(" ", 1)[1])
                lag += v
                topic = re.search(r'topic="([^"]*)"', line)
                if topic and topic.group(1).startswith("fig7soak"):
                    src_lag += v
            elif line.startswith("joinlib_watermark_lag_seconds{"):
                wm = max(wm, float(line.rsplit(" ", 1)[1]))
        return {"lag": lag, "source_lag": src_lag, "watermark_lag_s": wm}

    def alive(self) -> dict[str, bool]:
        return {s: p.poll() is None for s, p in self.procs.items()}

    def close(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.terminate()
        for p in self.procs.values():
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)


def redis_memory(client: Any) -> dict[str, float]:
    info = client.info("memory")
    return {"used_mb": round(info["used_memory"] / 2**20, 2), "rss_mb": round(info["used_memory_rss"] / 2**20, 2),
            "peak_mb": round(info["used_memory_peak"] / 2**20, 2)}


def redis_key_kinds(client: Any) -> dict[str, int]:
    """Redis keys counted by kind: each key with its digits blanked (``joinlib:q:w:s1:e#``), the kinds sorted by
    count -- which kind keeps growing is what a soak never expires."""
    kinds: dict[str, int] = {}
    for k in client.scan_iter(count=1000):
        kind = re.sub(rb"[0-9]+", b"#", k).decode(errors="replace")
        kinds[kind] = kinds.get(kind, 0) + 1
    return dict(sorted(kinds.items(), key=lambda x: -x[1])[:30])


def selectivity(rate: float) -> float:
    """f scaled as 1 / rate: one match per event in each other 3 s window, ~1 result per event at every rate."""
    return MATCHES_PER_WINDOW / (rate * WINDOW_MS / 1000.0)


# --------------------------------------------------------------------------- measuring the sustainable rate


def plan_for(plan: str, sites: list[str]) -> str:
    """``central`` (the default): central at the first site, what ``auto`` picks for the Fig. 7 workload
    (docs/live.md) -- pinned, so that the measurement and the soak run the same plan at any rate."""
    return f"central:{sites[0]}" if plan == "central" else plan


def measure(bs: str, redis_url: str, seconds: float, density: float, logs: Path, plan: str) -> dict:
    """Drain ``seconds`` of backlog per site (events ``density``/s per site) with Redis windows and
    checkpoints; sustained = input events / (last result - submission); the results checked against the
    contract's (every one: the backlog is short)."""
    from chaos_check import Results, check_results, expected

    from services.planner.service import PlannerService
    began = _utc()
    t = tag()
    topics = [f"fig7soakm.{t}.{i}" for i in (1, 2, 3)]
    make_topics(bs, topics, 3)
    f = selectivity(density)
    q = fig7_query(f"soakm{t}", [f"m1{t}", f"m2{t}", f"m3{t}"], topics, f=f, rate=density, start="earliest")
    rec = write_backlog(bs, q, seconds, f=f, rate=density)
    want = expected(q, rec.written, BASE_MS)
    n_events = sum(len(v) for v in rec.written.values())
    nodes = Nodes(bs, redis_url, [s.site for s in q.streams], logs / f"measure-{t}")
    planner = PlannerService(bs)
    try:
        time.sleep(2.0)
        import yaml

        from joinlib.query import query_to_dict
        t_submit = time.time() * 1000
        out = planner.submit(yaml.safe_dump(query_to_dict(q)), plan_for(plan, [s.site for s in q.streams]), None,
                             str(BASE_MS))
        reader = Results(bs, q, {out["run"]: out["origin_ms"]})
        reader.start()
        last_emit, count = t_submit, 0
        deadline = time.monotonic() + 60 + 6 * seconds
        while time.monotonic() < deadline:
            time.sleep(0.5)
            pairs, count = reader.take()
            if pairs:
                last_emit = time.time() * 1000
            if count >= want.count:
                break
        reader.close()
        planner.stop(q.name)
    finally:
        nodes.close()
        planner.close()
        _drop_keys(redis_url, q.name)
    drain_s = (last_emit - t_submit) / 1000.0
    check = check_results(want.results, reader.snapshot())
    return {"began_utc": began, "ended_utc": _utc(),
            "how": "a backlog per site drained by the soak's services (a node per site, Redis windows, checkpoints, "
                   "the same plan and selectivity scaling) just before the soak: sustained = events / (last result "
                   "- submission)",
            "backlog_s_per_site": seconds, "density_per_site": density, "selectivity": f, "events": n_events,
            "results": count, "reference_results": want.count, "same_count": count == want.count,
            "results_exact": check["exact"], "drain_s": round(drain_s, 2), "events_per_s": round(n_events / drain_s, 1)}


def _utc() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _drop_keys(redis_url: str, query: str) -> int:
    """Delete what a run of ``query`` left in Redis (nodes stopped by SIGTERM keep their checkpoints), so
    that the soak's Redis memory is the soak's."""
    import redis
    c = redis.Redis.from_url(redis_url)
    try:
        keys = list(c.scan_iter(match=f"*joinlib:{query}:*", count=1000))
        for i in range(0, len(keys), 500):
            c.unlink(*keys[i:i + 500])
        return len(keys)
    finally:
        c.close()


# --------------------------------------------------------------------------- the soak


def soak(bs: str, redis_url: str, rate: float, minutes: float, every: float, logs: Path, plan: str,
         malformed_every: int = 0, drain_timeout_s: float = 120.0, quiet: bool = False,
         trace_memory_s: Optional[float] = None, check_mode: str = "after", trace_frames: int = 8,
         node_env: Optional[dict[str, str]] = None) -> dict:
    """One soak (see the module docstring).  ``check_mode``: "after" -- the check reads the source topics once the
    input has ended, while the nodes finish the last epochs, so that its CPU (~12-25 us a record) does not compete
    with the nodes during the measured part; "live" -- a thread reads them beside the nodes, at nice 19 (the
    topics then keep only a few minutes)."""
    import redis
    from soak_check import SourceCheck, TalliedResults

    from joinlib.adapters.kafka import ensure_topics, make_admin
    from joinlib.query import dump_query
    from services.planner.service import PlannerService
    t = tag()
    sites = [f"s1{t}", f"s2{t}", f"s3{t}"]
    topics = [f"fig7soak.{t}.{i}" for i in (1, 2, 3)]
    ensure_topics(make_admin(bs), topics, partitions=PARTITIONS, config=source_topic_config(minutes, check_mode))
    f = selectivity(rate)
    q = fig7_query(f"soak{t}", sites, topics, f=f, rate=rate, start="latest", idle="2s")
    logs.mkdir(parents=True, exist_ok=True)
    qfile = logs / f"{q.name}.yaml"
    dump_query(q, qfile)
    rcli = redis.Redis.from_url(redis_url)
    nodes = Nodes(bs, redis_url, sites, logs / f"soak-{t}", trace_memory_s, trace_frames, node_env)
    planner = PlannerService(bs)
    gen: Optional[subprocess.Popen] = None
    samples: list[dict] = []
    reader: Optional[TalliedResults] = None
    source: Optional[SourceCheck] = None
    try:
        ready_s = nodes.wait_ready()
        time.sleep(2.0)
        import yaml

        from joinlib.query import query_to_dict
        began = _utc()
        out = planner.submit(yaml.safe_dump(query_to_dict(q)), plan_for(plan, sites), None, "now")
        if check_mode == "live":
            source = SourceCheck(bs, q, out["origin_ms"], PARTITIONS)
            source.start()
        reader = TalliedResults(bs, q, out["run"], out["origin_ms"])
        reader.start()
        gen = _generator(bs, qfile, rate, f, malformed_every, minutes * 60.0, logs / f"soak-{t}" / "generator.log")
        t0, self_cpu0 = time.monotonic(), time.process_time()
        cpu0 = nodes.cpu_s()
        prev_count, prev_t = 0, t0
        next_sample = t0 + every
        print(f"soak: {rate:,.0f} events/s per site ({3 * rate:,.0f} in all) for {minutes:g} min; "
              f"query {q.name}, plan {out.get('plan')}", flush=True)
        while gen.poll() is None:
            time.sleep(max(0.0, next_sample - time.monotonic()))
            next_sample += every
            if gen.poll() is not None:
                break   # the input has ended: the windows empty, which says nothing of the steady state
            now = time.monotonic()
            pairs, count = reader.take()
            sample = {"t_s": round(now - t0, 1), **_sample(nodes, rcli, sites, pairs, bool(trace_memory_s)),
                      "results_per_s": round((count - prev_count) / (now - prev_t), 1)}
            if source is not None:
                sample.update(checked_records=source.records, reference_results=source.want.total())
            prev_count, prev_t = count, now
            samples.append(sample)
            if not quiet and len(samples) % max(1, round(30 / every)) == 0:
                _print_sample(sample)
            if not all(sample["alive"].values()):
                print(f"a node process died: {sample['alive']}", flush=True)
                break
        wall = time.monotonic() - t0
        cpu = {k: round(v - cpu0[k], 1) for k, v in nodes.cpu_s().items()}
        self_cpu = time.process_time() - self_cpu0
        written = _generator_total(logs / f"soak-{t}" / "generator.log")
        print(f"input ended after {wall:.0f} s: checking every result against the reference", flush=True)
        check, source = _check(bs, q, out, source, reader, drain_timeout_s, quiet, check_mode)
        _, total = reader.take()
        status = planner.status(q.name) or {}
        planner.stop(q.name)
    finally:
        if gen is not None and gen.poll() is None:
            gen.terminate()
            gen.wait(20)
        if reader is not None:
            reader.close()
        if source is not None:
            source.stop.set()
        nodes.close()
        planner.close()
        rcli.close()
    stats = status.get("stats") or {}
    return {"began_utc": began, "query": q.name, "rate_per_site": rate, "selectivity": f, "nodes_ready_s": ready_s,
            "logs": str(logs / f"soak-{t}"), "node_malloc_env": {**NODE_MALLOC_ENV, **(node_env or {})},
            "malformed_every": malformed_every,
            "minutes": minutes, "wall_s": round(wall, 1), "events_written": written, "results": total,
            "node_cpu_s": cpu, "soak_process_cpu_s": round(self_cpu, 1), "dead_letters": stats.get("dead_letters"),
            "plan": out.get("plan"), "check": check, "samples": samples}


def _check(bs: str, q: Any, out: dict, source: Any, reader: Any, drain_timeout_s: float, quiet: bool,
           check_mode: str) -> tuple[dict, Any]:
    """After the input: every result and dead letter against the reference (bench/soak_check.py); with
    ``--check after`` (no ``source`` yet) the source topics are read now, while the nodes finish the last epochs."""
    from soak_check import SourceCheck, final_check
    t0 = time.monotonic()
    if source is None:   # nothing to yield the CPU to now: no nice 19 (a loaded machine would starve it)
        source = SourceCheck(bs, q, out["origin_ms"], PARTITIONS, yield_cpu=False)
        source.start()
    check = final_check(bs, q, out["run"], source, reader, drain_timeout_s,
                        **({"report": lambda _: None} if quiet else {}))
    check.update(mode=check_mode, wall_s=round(time.monotonic() - t0, 1))
    if not quiet:
        print(f"check ({check_mode}): {check['source']['records']:,} source records in {check['wall_s']} s, "
              f"its thread's CPU {check['source']['check_thread_cpu_s']} s", flush=True)
    return check, source


def _print_sample(sample: dict) -> None:
    print(f"  {sample['t_s']:>6.0f} s: RSS {sample['rss_mb']} MB, Redis {sample['redis']['used_mb']} MB, "
          f"lag {sample['lag']}, p99 {sample['latency_ms'].get('p99')} ms, "
          f"{sample['results_per_s']:,.0f} results/s, "
          + (f"{sample['checked_records']:,} records read by the check, " if "checked_records" in sample else "")
          + f"load {sample['loadavg'][0]}", flush=True)


def _generator(bs: str, qfile: Path, rate: float, f: float, malformed_every: int, seconds: float,
               log: Path) -> subprocess.Popen:
    """The generator process: real-time events of every stream, disorder below delta (none late)."""
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bs, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    with open(log, "wb") as glog:
        return subprocess.Popen(
            [sys.executable, "-m", "services.generator", "--query", str(qfile), "--rate", str(rate),
             "--distinct", str(round(1 / f)), "--payload-bytes", str(PAYLOAD), "--late-every", "0",
             "--malformed-every", str(malformed_every), "--duration", str(seconds)],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=glog, stdin=subprocess.DEVNULL)


def _sample(nodes: Nodes, rcli: Any, sites: list[str], pairs: list[tuple[float, int]], key_kinds: bool = False) -> dict:
    """One sample: RSS, Redis memory and keys, lags and the latency of the results emitted since the last one;
    ``key_kinds``: the Redis keys counted by kind too (a SCAN of them all: with --trace-memory only)."""
    lat = percentiles(pairs)
    m = {s: nodes.metrics(s) for s in sites}
    redis = {**redis_memory(rcli), "keys": rcli.dbsize()}
    if key_kinds:
        redis["key_kinds"] = redis_key_kinds(rcli)
    return {"rss_mb": nodes.rss_mb(), "redis": redis,
            "lag": {s: m[s].get("lag") for s in sites}, "source_lag": {s: m[s].get("source_lag") for s in sites},
            "watermark_lag_s": {s: m[s].get("watermark_lag_s") for s in sites},
            "latency_ms": {k: lat[k] for k in ("p50", "p99", "max") if k in lat},
            "loadavg": [round(x, 2) for x in os.getloadavg()], "alive": nodes.alive()}


def _generator_total(log: Path) -> Optional[int]:
    try:
        lines = [x for x in log.read_text().splitlines() if "events written" in x]
        return int(re.search(r"([\d,]+) events written", lines[-1]).group(1).replace(",", ""))  # type: ignore[union-attr]
    except (OSError, IndexError, AttributeError, ValueError):
        return None


# --------------------------------------------------------------------------- verdicts


def _flat(values: list[float]) -> dict:
    vals = [v for v in values if v == v]
    if not vals:
        return {"flat": False, "why": "no samples"}
    med = statistics.median(vals)
    lo, hi = min(vals), max(vals)
    dev = max(hi - med, med - lo) / med if med else float("inf")
    return {"median": round(med, 2), "min": round(lo, 2), "max": round(hi, 2),
            "max_deviation_pct": round(100 * dev, 1), "flat": dev <= FLAT_TOLERANCE}


def _flat_trend(ts: list[float], values: list[float], t0: float) -> dict:
    """Per-minute medians (from ``t0``) within +-10 % of the median of them all, and the last minute within
    +-10 % of the first: no growth, single-sample spikes smoothed out (they are in :func:`_flat`)."""
    per: dict[int, list[float]] = {}
    for t, v in zip(ts, values, strict=True):
        if v == v:
            per.setdefault(int((t - t0) // 60), []).append(v)
    meds = [statistics.median(per[k]) for k in sorted(per)]
    if not meds:
        return {"flat": False, "why": "no samples"}
    med = statistics.median(meds)
    dev = max(abs(m - med) for m in meds) / med if med else float("inf")
    growth = (meds[-1] - meds[0]) / meds[0] if meds[0] else float("inf")
    return {"minute_medians": [round(m, 2) for m in meds], "max_deviation_pct": round(100 * dev, 1),
            "growth_pct": round(100 * growth, 1), "flat": dev <= FLAT_TOLERANCE and abs(growth) <= FLAT_TOLERANCE}


def _slope(xs: list[float], ys: list[float]) -> float:
    if len(xs) < 2:
        return 0.0
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den if den else 0.0


def verdicts(run: dict, warmup_s: float, lag_bound_s: float, measured: Optional[dict] = None,
             p99_bound_ms: float = P99_BOUND_MS) -> dict:
    """The soak's verdicts (see the module docstring); ``measured``: the rate's measurement, whose results must be
    exact too."""
    # samples while the generator writes (runs recorded before this check sampled once after it had ended)
    end = run.get("minutes", math.inf) * 60.0
    after = [s for s in run["samples"] if warmup_s <= s["t_s"] <= end]
    exact = _exact(run, measured)
    if len(after) < 3:
        return {"ok": False, "why": f"only {len(after)} samples after the warm-up of {warmup_s:.0f} s",
                "results_exact": exact}
    sites = list(after[0]["rss_mb"])
    ts = [x["t_s"] for x in after]
    rss = {s: _flat([x["rss_mb"][s] for x in after]) for s in sites}
    redis_used = _flat([x["redis"]["used_mb"] for x in after])
    rss_trend = {s: _flat_trend(ts, [x["rss_mb"][s] for x in after], warmup_s) for s in sites}
    redis_trend = _flat_trend(ts, [x["redis"]["used_mb"] for x in after], warmup_s)
    rate = run["rate_per_site"]
    lag: dict[str, Any] = {}
    for s in sites:
        ys = [float(x["lag"].get(s) or 0.0) for x in after]
        slope = _slope(ts, ys)   # messages per second
        growth = slope * (ts[-1] - ts[0])
        # the lag counts records of the site's own source topic (rate/s) and inbound node messages (few)
        bound = lag_bound_s * rate
        lag[s] = {"max": max(ys), "mean": round(statistics.fmean(ys), 1), "trend_per_min": round(slope * 60, 1),
                  "growth_over_run": round(growth, 1), "bound": bound,
                  "bounded": max(ys) <= bound and growth < rate}
    p99 = [x["latency_ms"]["p99"] for x in after if "p99" in x["latency_ms"]]
    p99_minutes = _flat_trend([x["t_s"] for x in after if "p99" in x["latency_ms"]], p99, warmup_s).get(
        "minute_medians", [])
    lat = {"p99_median_ms": statistics.median(p99) if p99 else None, "p99_max_ms": max(p99) if p99 else None,
           "p99_minute_medians_ms": p99_minutes, "bound_ms": p99_bound_ms,
           "bounded": bool(p99_minutes) and max(p99_minutes) <= p99_bound_ms}
    bounded = all(v["bounded"] for v in lag.values())
    strict = all(v["flat"] for v in rss.values()) and redis_used["flat"]
    trend = all(v["flat"] for v in rss_trend.values()) and redis_trend["flat"]
    return {"warmup_s": warmup_s, "rss_flat": rss, "redis_used_memory_flat": redis_used,
            "rss_flat_trend": rss_trend, "redis_used_memory_flat_trend": redis_trend, "lag_bounded": lag,
            "latency_after_warmup": lat, "memory_flat_every_sample": strict, "memory_flat_per_minute": trend,
            "lag_is_bounded": bounded, "p99_is_bounded": lat["bounded"], "results_exact": exact,
            "ok": trend and bounded and lat["bounded"] and exact is True}


def _exact(run: dict, measured: Optional[dict]) -> Optional[bool]:
    """The soak's check and the measurement's, None for runs recorded before the check (issue 29)."""
    check = run.get("check")
    if check is None:
        return None
    return bool(check["exact"]) and (measured is None or measured.get("results_exact") is not False)


def plot(doc: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    run = doc["soak"]
    ss = run["samples"]
    t = [s["t_s"] / 60 for s in ss]
    sites = list(ss[0]["rss_mb"]) if ss else []
    fig, axes = plt.subplots(2, 2, figsize=(11, 7), sharex=True)
    ax = axes[0][0]
    for i, s in enumerate(sites):
        ax.plot(t, [x["rss_mb"][s] for x in ss], label=f"node {i + 1}")
    ax.set_ylabel("node RSS (MB)")
    ax.legend(fontsize=8)
    ax = axes[0][1]
    ax.plot(t, [x["redis"]["used_mb"] for x in ss], label="used_memory")
    ax.plot(t, [x["redis"]["rss_mb"] for x in ss], label="used_memory_rss", ls="--")
    ax.set_ylabel("Redis memory (MB)")
    ax.legend(fontsize=8)
    ax = axes[1][0]
    for i, s in enumerate(sites):
        ax.plot(t, [x["lag"].get(s) or 0 for x in ss], label=f"node {i + 1}")
    ax.set_ylabel("consumer lag (messages)")
    ax.set_xlabel("minutes")
    ax.legend(fontsize=8)
    ax = axes[1][1]
    ax.plot(t, [x["latency_ms"].get("p99", float("nan")) for x in ss], label="p99")
    ax.plot(t, [x["latency_ms"].get("p50", float("nan")) for x in ss], label="p50")
    ax.set_ylabel("event-to-result latency (ms)")
    ax.set_xlabel("minutes")
    ax.legend(fontsize=8)
    w = doc["verdicts"].get("warmup_s", 0) / 60
    for row in axes:
        for a in row:
            a.axvline(w, color="grey", ls=":", lw=1)
    fig.suptitle(f"joinlib soak: {run['rate_per_site']:,.0f} events/s per site x 3 sites, "
                 f"{run['minutes']:g} min, Redis windows (dotted: end of warm-up)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=10.0, help="length of the soak (default 10)")
    ap.add_argument("--rate", type=float, help="events/s per site (default: --fraction of a measured sustained rate)")
    ap.add_argument("--fraction", type=float, default=0.8, help="share of the measured sustained rate (default 0.8)")
    ap.add_argument("--measure-seconds", type=float, default=20.0, help="seconds of backlog per site to measure with")
    ap.add_argument("--measure-density", type=float, default=1000.0,
                    help="events/s per site of the measurement backlog (default 1000)")
    ap.add_argument("--probes", type=int, default=4,
                    help="short soaks searching the sustainable rate after the drain's measurement, from half the "
                         "drain's rate (bench/soak_ramp.py; default 4; 0: the drain's rate is the sustainable one, "
                         "as before -- a burst rate the soak's generator and check do not leave room for)")
    ap.add_argument("--probe-minutes", type=float, default=1.5, help="length of each probe (default 1.5)")
    ap.add_argument("--probe-p99-ms", type=float, default=1000.0,
                    help="a probe keeps up only if the median of its p99 latencies after its warm-up is below this "
                         "(default 1000 ms; a soak that keeps up runs at 300-600 ms; 7 s with the lag still under its "
                         "bound was a node seconds behind)")
    ap.add_argument("--probe-settle", type=float, default=30.0,
                    help="seconds to wait after a probe that fell behind, before the next probe or the soak "
                         "(default 30: the 21:45 soak began right after two failed probes, docs/reliability.md)")
    ap.add_argument("--every", type=float, default=5.0, help="sampling interval in seconds (default 5)")
    ap.add_argument("--warmup", type=float, help="seconds left out of the verdicts (default 20%% of the run, >= 60)")
    ap.add_argument("--p99-bound-ms", type=float, default=P99_BOUND_MS,
                    help=f"each minute's median p99 latency after the warm-up must stay below this (default "
                         f"{P99_BOUND_MS:.0f})")
    ap.add_argument("--lag-bound-s", type=float, default=5.0,
                    help="the lag after the warm-up must stay below this many seconds of input (default 5)")
    ap.add_argument("--plan", default="central", help="plan (default: central at the first site; any plan name)")
    ap.add_argument("--malformed-every", type=int, default=1000, metavar="N",
                    help="every N-th record the generator writes is malformed, a dead letter to account for "
                         "(default 1000; 0: none)")
    ap.add_argument("--drain-timeout", type=float, default=120.0,
                    help="seconds to wait after the input for the last results to match the reference (default 120)")
    ap.add_argument("--check", choices=CHECK_MODES, default="after",
                    help="when every result is checked: 'after' the input ends (default: the check reads the source "
                         "topics then, so its CPU does not compete with the nodes; the topics keep the whole run, "
                         "~1.3 kB of disk per event) or 'live', a thread reading them beside the nodes at nice 19 "
                         "(the topics keep 3 minutes)")
    ap.add_argument("--trace-memory", type=float, metavar="S",
                    help="find what a node's memory is made of: run the first site's node under tracemalloc, "
                         "writing a heap snapshot every S seconds to its log dir (bench/soak_memtrace.py; slows that "
                         "node), and count Redis keys by kind in every sample")
    ap.add_argument("--trace-frames", type=int, default=8,
                    help="frames per traced allocation with --trace-memory (default 8); 0: no tracemalloc, every "
                         "node's RSS and glibc malloc's heap figures only (no cost to the nodes)")
    ap.add_argument("--node-env", action="append", default=[], metavar="KEY=VALUE",
                    help=f"an environment variable of the node processes (repeatable; default {NODE_MALLOC_ENV})")
    ap.add_argument("--bootstrap", help="Kafka (default: a throw-away local broker)")
    ap.add_argument("--redis-url", help="Redis (default: a throw-away local redis-server)")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "soak")
    ap.add_argument("--name", default="soak")
    ap.add_argument("--from-json", type=Path, help="recompute the verdicts and the plot of a soak's JSON, run nothing")
    args = ap.parse_args()
    # a stopped soak (SIGTERM, a CI timeout) unwinds like Ctrl-C: its `finally` blocks stop the generator, the node
    # processes and its broker and Redis, which otherwise outlived it (a stopped soak's generator wrote on for 12 min)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    # the check keeps a chunk and a window of rows alive (hundreds of thousands of tuples at soak rates): with
    # the default thresholds the collector re-walks them every few hundred allocations, ~40 % of the check's CPU
    gc.set_threshold(*CHECK_GC_THRESHOLDS)
    if args.from_json is not None:
        doc = json.loads(args.from_json.read_text())
        minutes = doc["soak"]["minutes"]
        warmup = args.warmup if args.warmup is not None else max(60.0, 0.2 * minutes * 60)
        doc["verdicts"] = verdicts(doc["soak"], warmup, args.lag_bound_s, doc.get("measured"), args.p99_bound_ms)
        args.from_json.write_text(json.dumps(doc, indent=1) + "\n")
        plot(doc, args.from_json.with_suffix(".png"))
        print_verdicts(doc["verdicts"], doc["soak"].get("check"))
        return 0 if doc["verdicts"].get("ok") else 1
    cluster = None
    bs, redis_url = args.bootstrap, args.redis_url
    if not (bs and redis_url):
        from infra.local_cluster import LocalCluster
        cluster = LocalCluster.start(kafka=not bs, redis=not redis_url)
        bs = bs or cluster.kafka_bootstrap
        redis_url = redis_url or cluster.redis_url
    logs = ROOT / "bench" / "out" / f"{args.name}-logs"
    before = machine()
    try:
        measured = None
        rate = args.rate
        if rate is None:
            measured = measure(bs, redis_url, args.measure_seconds, args.measure_density, logs, args.plan)
            sustained = measured["events_per_s"] / 3
            print(f"measured at {measured['began_utc']}: {measured['events']:,} events drained in "
                  f"{measured['drain_s']} s = {measured['events_per_s']:,.0f} events/s with Redis windows "
                  f"({measured['results']:,} results, reference {measured['reference_results']:,}, "
                  f"{'exact' if measured['results_exact'] else 'NOT EXACT'})", flush=True)
            if args.probes > 0:
                measured["ramp"] = ramp(bs, redis_url, args, logs, round(sustained / 2, -1))
                measured["ended_utc"] = _utc()
                sustained = measured["ramp"]["sustainable_per_site"]
            rate = round(args.fraction * sustained, -1)
            print(f"soak at {args.fraction:.0%} of {sustained:,.0f}: {rate:,.0f}/s per site", flush=True)
        run = soak(bs, redis_url, rate, args.minutes, args.every, logs, args.plan, args.malformed_every,
                   args.drain_timeout, trace_memory_s=args.trace_memory, check_mode=args.check,
                   trace_frames=args.trace_frames, node_env=node_env(args.node_env))
    finally:
        if cluster is not None:
            cluster.stop()
    warmup = args.warmup if args.warmup is not None else max(60.0, 0.2 * args.minutes * 60)
    v = verdicts(run, warmup, args.lag_bound_s, measured, args.p99_bound_ms)
    doc = {"workload": {"query": "Fig. 7 at three sites (bench/live_common.py)", "tuple_bytes": PAYLOAD,
                        "window_ms": 3000, "tau_ms": 100, "delta_ms": 80, "partitions": 3,
                        "windows": "Redis, checkpoint every 1 s"},
           "command": "python " + " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
           "measured": measured, "rate_source": "--rate" if measured is None else
           f"{args.fraction:.0%} of the sustained rate measured ("
           f"{'searched with short soaks' if measured.get('ramp') else 'a drain'}) from {measured['began_utc']} to "
           f"{measured['ended_utc']}, just before the soak began at {run['began_utc']} (see measured)",
           "soak": run, "verdicts": v, "machine_before": before, "machine_after": machine()}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(doc, indent=1) + "\n")
    if run["samples"]:
        plot(doc, args.out / f"{args.name}.png")
    print_verdicts(v, run["check"])
    print(f"wrote {args.out / (args.name + '.json')} and .png")
    return 0 if v.get("ok") else 1


def node_env(pairs: list[str]) -> dict[str, str]:
    """``--node-env KEY=VALUE`` options as a dict."""
    out = {}
    for p in pairs:
        k, sep, v = p.partition("=")
        if not sep or not k:
            raise SystemExit(f"--node-env {p!r}: not KEY=VALUE")
        out[k] = v
    return out


def ramp(bs: str, redis_url: str, args: argparse.Namespace, logs: Path, start: float) -> dict:
    """The sustainable rate per site, searched with short soaks (bench/soak_ramp.py): a probe keeps up when its lag
    is bounded after a third of it, the median of its p99 latencies is under ``--probe-p99-ms`` and its results are
    exact; what each left in Redis is dropped."""
    from soak_ramp import find_sustainable

    def probe(rate: float) -> dict:
        run = soak(bs, redis_url, rate, args.probe_minutes, args.every, logs, args.plan, args.malformed_every,
                   drain_timeout_s=30.0, quiet=True, check_mode=args.check, node_env=node_env(args.node_env))
        _drop_keys(redis_url, run["query"])
        v = verdicts(run, args.probe_minutes * 60.0 / 3, args.lag_bound_s)
        lag = {s: x["max"] for s, x in v.get("lag_bounded", {}).items()}
        exact = bool(run["check"]["exact"])
        p99 = (v.get("latency_after_warmup") or {}).get("p99_median_ms")
        kept = bool(v.get("lag_is_bounded")) and exact and p99 is not None and p99 <= args.probe_p99_ms
        why = v.get("why") or f"max lag {lag}, p99 {p99} ms" + (
            "" if exact else ", results not exact (behind at the end)")
        if not kept:   # the broker and Redis still work through a failed probe's backlog: not the next run's load
            time.sleep(args.probe_settle)
        return {"kept_up": kept, "why": why, "max_lag": lag, "results_exact": exact,
                "latency_after_warmup": v.get("latency_after_warmup"), "node_cpu_s": run["node_cpu_s"]}
    return find_sustainable(probe, start, args.probes)


def print_verdicts(v: dict, check: Optional[dict]) -> None:
    print_check(check)
    if "rss_flat" not in v:
        print(f"results exact: {_yes(v.get('results_exact'))}; verdict: {v.get('why')}")
        return
    print(f"after the warm-up ({v['warmup_s']:.0f} s):")
    for s, r in v["rss_flat"].items():
        print(f"  RSS {s}: median {r['median']} MB, {r['min']}-{r['max']}, max deviation {r['max_deviation_pct']} % "
              f"-> {'FLAT' if r['flat'] else 'NOT FLAT'} (+-10 %)")
    r = v["redis_used_memory_flat"]
    print(f"  Redis used_memory: median {r['median']} MB, {r['min']}-{r['max']}, max deviation "
          f"{r['max_deviation_pct']} % -> {'FLAT' if r['flat'] else 'NOT FLAT'} (+-10 %)")
    for s, r in v["rss_flat_trend"].items():
        print(f"  RSS {s} per minute: {r['minute_medians']} MB, max deviation {r['max_deviation_pct']} %, "
              f"growth {r['growth_pct']} % -> {'FLAT' if r['flat'] else 'NOT FLAT'}")
    r = v["redis_used_memory_flat_trend"]
    print(f"  Redis used_memory per minute: {r['minute_medians']} MB, max deviation {r['max_deviation_pct']} %, "
          f"growth {r['growth_pct']} % -> {'FLAT' if r['flat'] else 'NOT FLAT'}")
    for s, r in v["lag_bounded"].items():
        print(f"  lag {s}: max {r['max']:.0f}, mean {r['mean']}, trend {r['trend_per_min']}/min -> "
              f"{'BOUNDED' if r['bounded'] else 'NOT BOUNDED'} (bound {r['bound']:.0f})")
    lat = v["latency_after_warmup"]
    print(f"  p99 latency: median {lat['p99_median_ms']} ms, max {lat['p99_max_ms']} ms, per minute "
          f"{lat.get('p99_minute_medians_ms')} ms -> {'BOUNDED' if lat.get('bounded') else 'NOT BOUNDED'} "
          f"(bound {lat.get('bound_ms')} ms)")
    print(f"memory flat, every sample within +-10 %: {'yes' if v['memory_flat_every_sample'] else 'no'} (recorded, "
          f"not decisive); per-minute medians within +-10 % and no growth: "
          f"{'yes' if v['memory_flat_per_minute'] else 'NO'}; lag bounded: {'yes' if v['lag_is_bounded'] else 'NO'}; "
          f"p99 bounded: {'yes' if v.get('p99_is_bounded') else 'NO'}; results exact: {_yes(v.get('results_exact'))}")
    print(f"verdict (memory flat per minute, lag and p99 bounded, results checked and exact): "
          f"{'PASS' if v['ok'] else 'FAIL'}" + (" (results not checked)" if v.get("results_exact") is None else ""))


def _yes(exact: Optional[bool]) -> str:
    return {True: "yes", False: "NO", None: "not checked"}[exact]


def print_check(check: Optional[dict]) -> None:
    if check is None:
        print("results: not checked (a run recorded before the check)")
        return
    r, d, src = check["results"], check["dead_letters"], check["source"]
    print(f"results: {r['got']:,} read, reference {r['reference']:,}, {r['chunks']} chunks of "
          f"{r['chunk_ms'] // 1000} s compared, {r['chunks_differing']} differ -> "
          f"{'EXACT' if r['exact'] else 'NOT EXACT'} "
          f"({check['batch_copies_dropped']} batch copies dropped)")
    for x in r["differing_examples"]:
        print(f"  chunk {x['chunk']} (heads from {x['head_from_ms']}): {x['got']:,} results, "
              f"reference {x['reference']:,}")
    print(f"dead letters: {d['places']} in dlq, {d['expected']} expected, missing {d['missing']}, extra {d['extra']}, "
          f"wrong reason {d['wrong_reason']}, wrong bytes {d['wrong_bytes']} -> {'OK' if d['ok'] else 'NOT OK'}")
    print(f"source records checked: {src['records']:,} ({src['on_time']:,} on time), offset gaps "
          f"{src['offset_gap_count']}, error {src['error']}, check thread CPU {src['check_thread_cpu_s']} s")
    print(f"check: {'every result and dead letter as the reference says' if check['exact'] else 'FAILED'}")


if __name__ == "__main__":
    sys.exit(main())
