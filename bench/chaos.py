"""Chaos: two live queries under a seeded random schedule of faults for ``--minutes`` (default 10), then every
output checked against the live contract (``make bench-chaos``; issue 29, item 5; docs/reliability.md "Chaos").

Setup: a throw-away broker and a durable redis-server (AOF, appendfsync always) of its own; three sites s1, s2,
s3, one JSON source topic each (3 partitions) written at a steady rate by a generator process
(``python -m services.generator``: disorder below δ, so no record is late, and every ``--malformed-every``-th
record malformed on purpose); node service processes with Redis windows and checkpoints; the planner service as
a process; two live queries on the same topics (the Fig. 7 chain of bench/live_common.py, small payloads),
submitted with ``joinlib submit``:

* ``chaos_reduce`` with plan ``reduce``, and
* ``chaos_pmjoin`` with ``pmjoin:hash:2 --scale-out``, s1's partitions shared by two instances
  (bench/chaos_stack.py has the node layout).

The rate: ``--rate`` events/s per site, else half (``--fraction``) of a sustainable rate measured first: a
backlog (``--measure-seconds`` per site) drained by the same layout running both queries.

Faults (bench/chaos_faults.py): SIGKILL and SIGSTOP/SIGCONT of node instances and of the planner, a broker
restart with its data kept, a Redis restart (SIGKILL, data kept in the AOF), ``joinlib replan`` of the reduction
query to ``pmjoin:hash:2`` and back.  ``--seed`` decides the order, the targets and the hold times; each kind
comes once before any repeats; a fault waits until the system recovered from the previous one (both queries'
results flowing again, their p99 latency within 3 x the warm-up's), at most ``--recovery-limit`` seconds.

At the end the generator stops, the queries drain, and the verdicts: for BOTH queries every result of the
reference join of every well-formed record written, once, none missing (results of every run of the query,
result batches written twice read once, as ``joinlib results`` does), and every malformed record in
``dlq.<query>`` with its reason and bytes (byte-identical copies at one place tolerated: docs/live.md); every
fault carried out and recovered from; no service process died by itself.  Exit status 1 when a verdict fails.

Written: ``results/chaos/chaos.json`` (seed, schedule, per-fault recovery time, lag and latency each second,
verdicts) and ``chaos.png`` (a timeline: faults as vertical markers, consumer lag, result latency); the
services' logs under ``bench/out/chaos-logs``.

    python bench/chaos.py [--minutes 10] [--seed N] [--rate R | --fraction 0.5] [--faults kill-node,replan,...]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import threading
import time
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))

from chaos_check import Results, check_dead_letters, dead_letters, expected, wait_exact  # noqa: E402
from chaos_faults import KINDS, Done, Faults, fencing_evidence, make_schedule  # noqa: E402
from chaos_stack import ROOT, Stack, wait_running, wait_state  # noqa: E402
from live_common import BASE_MS, fig7_query, machine, make_topics, percentiles, tag, write_backlog  # noqa: E402

SITES = ["s1", "s2", "s3"]
REDUCE, PMJOIN = "chaos_reduce", "chaos_pmjoin"
PAYLOAD = 100          # bytes of payload per event
WINDOW_S = 3.0         # fig7_query's windows


def queries(prefix: str, topics: list[str], rate: float, start: str) -> tuple[Any, Any]:
    """The two queries (same streams and join; ~1 result per event: distinct values = rate x window)."""
    f = 1.0 / max(1.0, round(rate * WINDOW_S))
    qs = tuple(fig7_query(f"{prefix}{kind}", SITES, topics, f=f, rate=rate, start=start, idle="2s", payload=PAYLOAD)
               for kind in ("reduce", "pmjoin"))
    return qs[0], qs[1]


class Sampler(threading.Thread):
    """Every second: each node's consumer lag, each query's results so far and the latency of those emitted in
    the second, which processes are alive, the load average."""

    def __init__(self, stack: Stack, results: dict[str, Results], t0: float) -> None:
        super().__init__(daemon=True, name="sampler")
        self.stack, self.results, self.t0 = stack, results, t0
        self.samples: list[dict] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(1.0):
            lat = {}
            for q, r in self.results.items():
                pairs, count = r.take()
                p = percentiles(pairs)
                lat[q] = {"results": count, "new": sum(n for _, n in pairs),
                          **{k: p[k] for k in ("p50", "p99", "max") if k in p}}
            s = {"t_s": round(time.monotonic() - self.t0, 1), "lag": self.stack.lags(), "queries": lat,
                 "alive": {n: p.alive() for n, p in self.stack.procs().items()},
                 "loadavg": round(os.getloadavg()[0], 2)}
            with self.lock:
                self.samples.append(s)

    def since(self, t_s: float) -> list[dict]:
        with self.lock:
            return [s for s in self.samples if s["t_s"] >= t_s]


def healthy(s: dict, lat_bound_ms: float) -> bool:
    """A sample of a recovered system: every process up, each query emitting results within the latency bound (a
    node behind on its input makes late results; the nodes' lag gauges are not used: labelled by site and topic,
    not by query, a gauge two queries' consumers share keeps a stale value when one of them stops updating it)."""
    if not all(s["alive"].values()):
        return False
    return all(v["new"] > 0 and v.get("p99", 1e12) <= lat_bound_ms for v in s["queries"].values())


def wait_recovered(sampler: Sampler, done: Done, lat_bound_ms: float, limit_s: float) -> None:
    """Until two healthy samples in a row after the fault was cleared (recovery time: to the first of them)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        ss = sampler.since(done.cleared_s)
        for a, b in zip(ss, ss[1:], strict=False):
            if healthy(a, lat_bound_ms) and healthy(b, lat_bound_ms):
                done.recovered_s = max(0.0, a["t_s"] - done.cleared_s)
                return
        time.sleep(1.0)


def baseline(samples: list[dict]) -> float:
    """The recovery bound from the warm-up's samples: 3 x its median p99 latency, at least 2 s."""
    p99 = sorted(v["p99"] for s in samples for v in s["queries"].values() if "p99" in v)
    return max(2000.0, 3 * p99[len(p99) // 2]) if p99 else 5000.0


def submit(stack: Stack, query: Any, qfile: Path, plan: str, since: str, scale_out: bool = False) -> dict:
    """``joinlib submit`` as a user runs it; the query's status (run, origin) from the planner."""
    from joinlib.query import dump_query
    dump_query(query, qfile)
    args = ["submit", str(qfile), "--plan", plan, "--since", since] + (["--scale-out"] if scale_out else [])
    r = stack.cli(*args)
    if r.returncode != 0:
        raise RuntimeError(f"joinlib submit {query.name} failed: {r.stdout}{r.stderr}")
    deadline = time.monotonic() + 30
    while not (st := stack.status(query.name) or {}).get("run"):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the planner does not show {query.name} after its submission")
        time.sleep(0.3)
    return st


# --------------------------------------------------------------------------- measuring the sustainable rate


def measure(bs: str, redis_url: str, seconds: float, density: float, logs: Path) -> dict:
    """Drain a backlog of ``seconds`` per site (``density`` events/s per site) with both queries on the chaos
    layout: sustained = events / (both queries complete - submission)."""
    from joinlib.ingest.contract import expected_output
    t = tag()
    topics = [f"chaosm.{t}.{i}" for i in (1, 2, 3)]
    make_topics(bs, topics, 3)
    qr, qp = queries(f"chaosm{t}_", topics, density, "earliest")
    f = 1.0 / max(1.0, round(density * WINDOW_S))
    rec = write_backlog(bs, qr, seconds, f=f, rate=density, payload=PAYLOAD)
    want = expected_output(qr, rec.written, BASE_MS, count_only=True).count
    events = sum(len(v) for v in rec.written.values())
    stack = Stack(bs, redis_url, SITES, qr.name, qp.name, logs / f"measure-{t}")
    readers: dict[str, Results] = {}
    try:
        stack.start()
        t_submit = time.monotonic()
        for q, plan, so in ((qr, "reduce", False), (qp, "pmjoin:hash:2", True)):
            st = submit(stack, q, logs / f"{q.name}.yaml", plan, str(BASE_MS), so)
            readers[q.name] = Results(bs, q, {st["run"]: st["origin_ms"]})
            readers[q.name].start()
        deadline = time.monotonic() + 120 + 10 * seconds
        while min(r.take()[1] for r in readers.values()) < want and time.monotonic() < deadline:
            time.sleep(0.5)
        drain = time.monotonic() - t_submit
        counts = {q: r.take()[1] for q, r in readers.items()}
        for q in readers:   # stopped: else the chaos run's nodes at s2 and s3 (no --query) would run them on
            stack.cli("stop", q)
        wait_state(stack, list(readers), "stopped")
    finally:
        for r in readers.values():
            r.close()
        stack.close()
    return {"backlog_s_per_site": seconds, "density_per_site": density, "events": events, "reference_results": want,
            "results": counts, "complete": all(c == want for c in counts.values()), "drain_s": round(drain, 1),
            "events_per_s": round(events / drain, 1)}


# --------------------------------------------------------------------------- the chaos run


class Chaos:
    """The run: topics, the stack, both queries, the generator, the sampler and the fault schedule."""

    def __init__(self, cluster: Any, redis: Any, rate: float, args: argparse.Namespace, logs: Path) -> None:
        self.cluster, self.redis, self.rate, self.args, self.logs = cluster, redis, rate, args, logs
        self.bs = cluster.kafka_bootstrap
        topics = [f"chaos.src.{i}" for i in (1, 2, 3)]
        make_topics(self.bs, topics, 3)
        self.qr, self.qp = queries("chaos_", topics, rate, "latest")
        self.stack = Stack(self.bs, redis.url, SITES, self.qr.name, self.qp.name, logs)
        self.runs: dict[str, list[str]] = {REDUCE: [], PMJOIN: []}
        self.origins: dict[str, int] = {}
        self.results: dict[str, Results] = {}
        self.gen: Any = None
        self.bound_ms = 0.0   # p99 latency of a recovered system: set after the warm-up

    def start(self) -> None:
        self.stack.start()
        for q, plan, so in ((self.qr, "reduce", False), (self.qp, "pmjoin:hash:2", True)):
            st = submit(self.stack, q, self.logs / f"{q.name}.yaml", plan, "now", so)
            self.runs[q.name].append(st["run"])
            self.origins[st["run"]] = st["origin_ms"]
            self.results[q.name] = Results(self.bs, q, {st["run"]: st["origin_ms"]})
            self.results[q.name].start()
        wait_running(self.stack, [REDUCE, PMJOIN])

    def on_run(self, run: str, origin_ms: int) -> None:
        """A replan's new run of the reduction query."""
        if run not in self.runs[REDUCE]:
            self.runs[REDUCE].append(run)
            self.origins[run] = origin_ms
        self.results[REDUCE].add_run(run, origin_ms)

    def start_generator(self, seconds: float) -> None:
        import subprocess
        a = self.args
        self.gen = subprocess.Popen(
            [sys.executable, "-m", "services.generator", "--query", str(self.logs / f"{REDUCE}.yaml"),
             "--rate", str(self.rate), "--distinct", str(round(self.rate * WINDOW_S)), "--payload-bytes",
             str(PAYLOAD), "--disorder", "60", "--late-every", "0", "--malformed-every", str(a.malformed_every),
             "--duration", str(seconds), "--seed", str(a.seed)],
            cwd=ROOT, env=self.stack.planner.env, stdin=subprocess.DEVNULL,
            stdout=open(self.logs / "generator.log", "ab"), stderr=subprocess.STDOUT)

    def faults(self, sampler: Sampler, t0: float, duration: float) -> list[Done]:
        """The schedule, each fault after the recovery from the one before (none after the cool-down's start)."""
        a = self.args
        warmup, cooldown, gap = timing(duration, len(a.faults), a.gap)
        schedule = make_schedule(a.seed, duration, a.faults, sorted(self.stack.nodes), warmup_s=warmup,
                                 cooldown_s=cooldown, gap_s=gap, shared=self.stack.shared())
        print("schedule: " + "; ".join(f"{f.at_s:.0f}s {f.kind} {f.target} ({f.hold_s}s)" for f in schedule),
              flush=True)
        clock = lambda: time.monotonic() - t0   # noqa: E731
        run = Faults(self.stack, self.cluster.kafka, self.redis, REDUCE, self.on_run, clock)
        time.sleep(max(0.0, warmup - clock()))
        self.bound_ms = baseline(sampler.since(min(10.0, warmup / 2)))
        print(f"warm-up over: recovered = both queries' p99 <= {self.bound_ms:.0f} ms", flush=True)
        done: list[Done] = []
        for f in schedule:
            time.sleep(max(0.0, f.at_s - clock()))
            if clock() > duration - cooldown:
                print(f"  {f.kind} {f.target}: skipped, the cool-down has begun", flush=True)
                continue
            d = run.run(f)
            wait_recovered(sampler, d, self.bound_ms, a.recovery_limit)
            done.append(d)
            print(f"  {d.began_s:6.1f}s {f.kind} {f.target}: cleared at {d.cleared_s:.1f}s, recovered "
                  f"{'in %.1f s' % d.recovered_s if d.recovered_s is not None else 'NOT within the limit'}"
                  + (f", ERROR {d.error}" if d.error else ""), flush=True)
        return done

    def check(self) -> dict:
        """After the input ended: the contract of both queries (results and dead letters)."""
        written = _written(self.bs, self.qr)
        values = {(s.source.topic, w.part, w.offset): w.value for s in self.qr.streams for w in written.get(s.name, [])}
        wants = {q.name: expected(q, written, self.origins[self.runs[q.name][0]]) for q in (self.qr, self.qp)}
        print(f"reference: {sum(len(v) for v in written.values()):,} records, "
              + ", ".join(f"{q} {w.count:,} results, {len(w.dead)} dead letters" for q, w in wants.items()), flush=True)
        res = wait_exact(self.results, {q: w.results for q, w in wants.items()}, self.args.drain_timeout)
        out = {}
        for q in (self.qr, self.qp):
            dead = dead_letters(self.bs, q, self.runs[q.name])
            out[q.name] = {"runs": self.runs[q.name], "results": res[q.name],
                           "batch_copies_dropped": self.results[q.name].copies,
                           "dead_letters": check_dead_letters(dead, wants[q.name].dead, values)}
        out["records"] = sum(len(v) for v in written.values())
        return out

    def close(self) -> None:
        if self.gen is not None and self.gen.poll() is None:
            self.gen.terminate()
            self.gen.wait(30)
        for r in self.results.values():
            r.close()
        self.stack.close()


def _written(bs: str, query: Any) -> dict[str, list]:
    from chaos_check import written_records
    return written_records(bs, query)


def timing(duration: float, kinds: int, gap: Optional[float]) -> tuple[float, float, float]:
    """(warm-up, cool-down, gap between faults) for a run of ``duration`` seconds with ``kinds`` fault kinds."""
    warmup, cooldown = min(45.0, 0.2 * duration), min(45.0, 0.15 * duration)
    return warmup, cooldown, gap or max(12.0, (duration - warmup - cooldown) / (kinds + 2))


# --------------------------------------------------------------------------- verdicts, output


def verdicts(checked: dict, done: list[Done], alive: dict[str, bool]) -> dict:
    v = {f"{q}_results_exact": checked[q]["results"]["exact"] for q in (REDUCE, PMJOIN)}
    v.update({f"{q}_dead_letters_accounted": checked[q]["dead_letters"]["ok"] for q in (REDUCE, PMJOIN)})
    v["faults_carried_out"] = all(d.error is None for d in done)
    v["faults_recovered"] = all(d.recovered_s is not None for d in done)
    v["no_process_died"] = all(alive.values())
    v["ok"] = all(v.values())
    return v


def run(args: argparse.Namespace) -> dict:
    import shutil

    from infra.local_cluster import LocalCluster, start_redis
    logs = args.logs or ROOT / "bench" / "out" / f"{args.name}-logs"
    shutil.rmtree(logs, ignore_errors=True)
    logs.mkdir(parents=True)
    before = machine()
    cluster = LocalCluster.start(kafka=True, redis=False)
    redis = start_redis(cluster.workdir, durable=True)
    try:
        measured, rate = None, args.rate
        if rate is None:
            measured = measure(cluster.kafka_bootstrap, redis.url, args.measure_seconds, args.measure_density, logs)
            rate = max(10.0, round(args.fraction * measured["events_per_s"] / 3, -1))
            print(f"measured: {measured['events']:,} events of backlog drained by both queries in "
                  f"{measured['drain_s']} s = {measured['events_per_s']:,.0f} events/s; chaos at {args.fraction:.0%}: "
                  f"{rate:,.0f} events/s per site", flush=True)
        chaos = Chaos(cluster, redis, rate, args, logs)
        try:
            chaos.start()
            duration = args.minutes * 60.0
            chaos.start_generator(duration)
            t0 = time.monotonic()
            sampler = Sampler(chaos.stack, chaos.results, t0)
            sampler.start()
            print(f"chaos: {rate:,.0f} events/s per site for {args.minutes:g} min, seed {args.seed}", flush=True)
            done = chaos.faults(sampler, t0, duration)
            chaos.gen.wait(max(60.0, duration - (time.monotonic() - t0) + 300))
            input_end = round(time.monotonic() - t0, 1)
            checked = chaos.check()
            alive = {n: p.alive() for n, p in chaos.stack.procs().items()}
            fences = {i: fencing_evidence(chaos.stack.nodes[d.fault.target].text()[d.detail.get("log_offset", 0):])
                      for i, d in enumerate(done) if d.fault.kind == "pause-node"}
            sampler.stop.set()
            sampler.join(5)
        finally:
            chaos.close()
    finally:
        redis.stop()
        cluster.stop()
    faults = [{**d.to_json(), **({"after_resume": fences[i]} if i in fences else {})} for i, d in enumerate(done)]
    for f in faults:
        f.pop("log_offset", None)
    return {"command": "python " + " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]), "seed": args.seed,
            "minutes": args.minutes, "rate_per_site": rate,
            "rate_source": "--rate" if args.rate is not None else f"{args.fraction:.0%} of the measured rate",
            "measured": measured, "workload": {"sites": SITES, "payload_bytes": PAYLOAD, "window_s": WINDOW_S,
                                              "malformed_every": args.malformed_every, "partitions": 3,
                                              "queries": {REDUCE: "reduce", PMJOIN: "pmjoin:hash:2 --scale-out"}},
            "recovery_p99_bound_ms": chaos.bound_ms,
            "input_end_s": input_end, "logs": str(logs), "faults": faults, "check": checked, "alive_at_end": alive,
            "verdicts": verdicts(checked, done, alive), "samples": sampler.samples,
            "machine_before": before, "machine_after": machine()}


def plot(doc: dict, path: Path) -> None:
    """Timeline: faults as vertical spans (began to cleared) with their names, consumer lag per node, result
    latency (p99) per query."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ss = doc["samples"]
    t = [s["t_s"] for s in ss]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(13, 7.5), sharex=True)
    for node in (ss[0]["lag"] if ss else {}):
        ax1.plot(t, [s["lag"].get(node) if s["lag"].get(node) is not None else float("nan") for s in ss],
                 label=node, lw=1)
    ax1.set_ylabel("consumer lag (messages)")
    ax1.legend(fontsize=7, ncol=5, loc="upper left")
    for q in (REDUCE, PMJOIN):
        ax2.plot(t, [s["queries"].get(q, {}).get("p99", float("nan")) for s in ss], label=f"{q} p99", lw=1)
    ax2.set_yscale("log")
    ax2.set_ylabel("result latency, p99 per second (ms)")
    ax2.set_xlabel("seconds after the generator's start")
    ax2.legend(fontsize=7, loc="upper left")
    colors = {k: plt.get_cmap("tab10")(i) for i, k in enumerate(KINDS)}
    for f in doc["faults"]:
        for ax in (ax1, ax2):
            ax.axvspan(f["began_s"], max(f["cleared_s"], f["began_s"] + 1), color=colors[f["kind"]], alpha=0.25)
            ax.axvline(f["began_s"], color=colors[f["kind"]], lw=1)
        ax1.annotate(f"{f['kind']}\n{f['target']}", (f["began_s"], 1.0), xycoords=("data", "axes fraction"),
                     fontsize=6, rotation=90, va="top", ha="right")
        if f["recovery_s"] is not None:   # recovered: a triangle on the latency panel
            ax2.plot([f["cleared_s"] + f["recovery_s"]], [1.0], marker="v", color=colors[f["kind"]],
                     transform=ax2.get_xaxis_transform(), clip_on=False)
    if doc.get("input_end_s"):
        for ax in (ax1, ax2):
            ax.axvline(doc["input_end_s"], color="k", ls=":", lw=1)
    v = doc["verdicts"]
    fig.suptitle(f"joinlib chaos: seed {doc['seed']}, {doc['rate_per_site']:,.0f} events/s per site, "
                 f"{len(doc['faults'])} faults -- {'PASS' if v['ok'] else 'FAIL'}\n(spans: fault to cleared, "
                 "triangles: recovered, dotted: end of input)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def report(doc: dict) -> None:
    for f in doc["faults"]:
        rec = "not recovered" if f["recovery_s"] is None else f"recovered in {f['recovery_s']} s"
        print(f"  {f['began_s']:6.1f}s {f['kind']:<14} {f['target']:<14} {rec}"
              + (f"  [{f['after_resume']}]" if f.get("after_resume") else "") + (f"  ERROR {f['error']}" if f["error"]
                                                                                   else ""))
    for q in (REDUCE, PMJOIN):
        r, d = doc["check"][q]["results"], doc["check"][q]["dead_letters"]
        print(f"  {q}: {r['got']:,} results of {r['reference']:,} (missing {r['missing']}, extra or duplicated "
              f"{r['extra_or_duplicated']}), dead letters {d['places']} of {d['expected']} "
              f"({d['identical_copies']} identical copies), runs {len(doc['check'][q]['runs'])}")
    print("verdicts: " + ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in doc["verdicts"].items() if k != "ok"))
    print(f"verdict: {'PASS' if doc['verdicts']['ok'] else 'FAIL'}")


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=10.0, help="how long the generator writes (default 10)")
    ap.add_argument("--seed", type=int, help="the fault schedule's seed (default: a random one, printed and written)")
    ap.add_argument("--rate", type=float, help="events/s per site (default: --fraction of a measured rate)")
    ap.add_argument("--fraction", type=float, default=0.5, help="share of the measured sustainable rate (default 0.5)")
    ap.add_argument("--measure-seconds", type=float, default=20.0, help="seconds of backlog per site to measure with")
    ap.add_argument("--measure-density", type=float, default=500.0, help="events/s per site of that backlog")
    ap.add_argument("--faults", default=",".join(KINDS),
                    help=f"comma-separated fault kinds to draw from (default all: {','.join(KINDS)})")
    ap.add_argument("--gap", type=float, help="seconds between planned faults (default: spread over the run)")
    ap.add_argument("--recovery-limit", type=float, default=120.0,
                    help="seconds a fault may take to recover from before the next one goes ahead (default 120)")
    ap.add_argument("--drain-timeout", type=float, default=300.0,
                    help="seconds to wait after the input's end for the outputs to be complete (default 300)")
    ap.add_argument("--malformed-every", type=int, default=400, help="every N-th record malformed (default 400)")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "chaos")
    ap.add_argument("--name", default="chaos", help="file name of the JSON and PNG (default chaos)")
    ap.add_argument("--logs", type=Path, help="the services' logs (default bench/out/NAME-logs, emptied first)")
    args = ap.parse_args(argv)
    kinds = tuple(k.strip() for k in args.faults.split(",") if k.strip())
    bad = [k for k in kinds if k not in KINDS]
    if bad or not kinds:
        ap.error(f"--faults: unknown kind(s) {bad}; choose from {', '.join(KINDS)}")
    if args.minutes <= 0 or (args.rate is not None and args.rate <= 0) or not 0 < args.fraction <= 1:
        ap.error("--minutes and --rate must be positive, --fraction in (0, 1]")
    args.faults = kinds
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1, 10**6)
    return args


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    print(f"chaos seed {args.seed} (rerun the same schedule with --seed {args.seed})", flush=True)
    doc = run(args)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(doc, indent=1) + "\n")
    plot(doc, args.out / f"{args.name}.png")
    report(doc)
    print(f"wrote {args.out / (args.name + '.json')} and .png; logs in {doc['logs']}")
    return 0 if doc["verdicts"]["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
