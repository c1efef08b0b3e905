"""joinlib next to Apache Flink, the engine users would pick instead: same query, same topics, same machine.

The workloads are bench/spark_compare.py's, on bench/live_common.py's topics (JSON events on 3-partition
topics, one topic per site, out of order within delta, no late or malformed records, a sentinel per
partition 30 s after the data that moves every watermark past it):

* *fig7*: the Fig. 7 defaults at three sites (1,250-byte tuples, 300 events/s per site, f = ``--f``);
* *routers*: the live demo's (200 events/s per site, 2,000 destinations: f = 0.0005, 1,000-byte payloads),
  few matches, where semijoins pay off.

Flink 2.2 runs the 3-way chain S1.J = S2.J, S2.J = S3.J as a DataStream job (bench/flink/FlinkJoin.java,
jars from Maven Central, no Flink installation): a local mini-cluster in one JVM, parallelism
``--parallelism`` (2), heap (hashmap) state, a KafkaSource per topic bounded at the topics' end offsets
(the job ends once it has drained them), watermarks from ts with joinlib's bounded out-of-orderness
(max delay 80 ms), then two ``intervalJoin``s keyed by J within [-3000, +3000] ms (bounds inclusive): S1
with S2, then the pairs with S3, keeping S3 records within the window of both S1's and S2's ts.  That
is |t_i - t_j| <= window for the three pairs, joinlib's window semantics for equal windows.  A result
is three ids and a ts (the latest event time), as joinlib's results are: Flink parses past the 1 kB
payloads and drops them (``--flink-payload`` keeps them in its state and results).

For each engine and workload, after a bounded run over ``--backlog`` seconds of events per site:

* *results* against the reference join of the records (``want.count`` of ``prepare_backlog``; with
  ``--exact`` the (id1, id2, id3, ts) multiset, ts the latest of the three event times);
* *drain events/s*: input events / drain time.  joinlib: submission of the query to its running node
  services -> last result (bench/live_bench.py).  Flink: the job submitted to its mini-cluster (JVM and
  mini-cluster up) -> job finished (``executeAsync`` -> ``getJobExecutionResult``); the JSON also has the
  time with the mini-cluster's start (``execute_s``);
* *CPU seconds*: joinlib, its three node processes over the drain; Flink, its JVM over the same span
  (``cpu_s``; ``cpu_total_s``: the whole java process, JVM start and JIT included, from getrusage); and,
  where the bench started the broker itself, the broker's CPU over each engine's drain (``broker_cpu_s``,
  sampled every 0.1 s from /proc: serving the fetches and produce requests is part of a drain's cost);
* *bytes across sites*: joinlib, what its plan ships (``central_bytes``: what shipping every tuple would);
  Flink, like Spark, reads every record of the two sites that are not the join site, JSON as written;
  the join site is the one of the biggest stream (the three differ only by the lengths of their J values).

    python bench/flink_compare.py [--backlog 300] [--workloads fig7,routers] [--engines joinlib,flink]
                                  [--exact] [--f 0.01] [--plan NAME] [--parallelism 2] [--flink-heap 4g]
                                  [--flink-payload] [--warmup 60]
                                  [--bootstrap HOST:PORT] [--out results/flink] [--name flink_compare]
                                  [--table docs/results.md] [--rebuild]

Needs Java 17 and Maven: the job's jar is built on first use (``mvn -q -o package``, online if offline
fails) into bench/flink/target/.  Kafka: --bootstrap, $KAFKA_BOOTSTRAP_SERVERS, the ``make up`` cluster,
else a throw-away local broker; an unmeasured drain of each engine warms it up first (``--warmup``).
Writes <out>/<name>.json and .png; ``--table`` rewrites the section
"joinlib vs Apache Flink" of that markdown file: a table per run in <out> (every <out>/*.json of this script).
"""
from __future__ import annotations

import argparse
import json
import re
import resource
import shutil
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from live_bench import backlog_run, prepare_backlog  # noqa: E402
from live_bench import warm_up as warm_up_joinlib  # noqa: E402
from live_common import BASE_MS, RATE, ROOT, WINDOW_MS, F, broker_meter, kafka, machine  # noqa: E402
from spark_compare import DELAY_MS, ROUTERS, _remote_bytes  # noqa: E402  (the same workloads; no pyspark)

FLINK_DIR = ROOT / "bench" / "flink"
JAR = FLINK_DIR / "target" / "joinlib-flink-bench.jar"
MAIN_CLASS = "joinlib.bench.FlinkJoin"
SECTION = "## joinlib vs Apache Flink"
WORKLOADS = ("fig7", "routers")
ENGINES = ("joinlib", "flink")


# --------------------------------------------------------------------------- the Flink job


def build_jar(force: bool = False) -> Path:
    """bench/flink's shaded jar, (re)built when missing or older than its pom or sources."""
    sources = [FLINK_DIR / "pom.xml", *sorted((FLINK_DIR / "src").rglob("*"))]
    newest = max(p.stat().st_mtime for p in sources if p.is_file())
    if JAR.exists() and not force and JAR.stat().st_mtime >= newest:
        return JAR
    mvn = shutil.which("mvn")
    if mvn is None:
        raise SystemExit("mvn not found: it builds bench/flink (Flink from Maven Central); apt-get install -y maven")
    for offline in (True, False):   # offline first: the dependencies are usually in ~/.m2 already
        cmd = [mvn, "-q", "-B", "-Dstyle.color=never", *(["-o"] if offline else []), "-f",
               str(FLINK_DIR / "pom.xml"), "package"]
        print(f"building the Flink job: {' '.join(cmd)}", flush=True)
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode == 0 and JAR.exists():
            JAR.touch()
            return JAR
    raise SystemExit(f"mvn package failed (bench/flink):\n{(r.stdout + r.stderr)[-4000:]}")


def flink_backlog(bs: str, data: dict, workdir: Path, exact: bool, parallelism: int, heap: str,
                  keep_payload: bool = False) -> dict:
    """The Flink job over the topics of ``prepare_backlog``, once, in its own JVM."""
    t, q, rec, want = data["tag"], data["query"], data["rec"], data["want"]
    topics = [s.source.topic for s in q.streams]
    n = sum(len(v) for v in rec.written.values())
    ids = workdir / f"flink-ids-{t}"
    cmd = ["java", f"-Xmx{heap}", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", str(JAR), MAIN_CLASS,
           "--bootstrap", bs, "--topics", ",".join(topics), "--window", str(WINDOW_MS), "--delay", str(DELAY_MS),
           "--parallelism", str(parallelism), "--keep-payload", str(keep_payload).lower(),
           *(["--ids", str(ids)] if exact else [])]
    log = workdir / f"flink-{t}.log"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(log, "w") as err:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=err, text=True, timeout=1800)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    lines = [x for x in p.stdout.splitlines() if x.startswith('{"flink_version"')]
    if p.returncode != 0 or not lines:
        raise RuntimeError(f"the Flink job failed (exit {p.returncode}); see {log}:\n{log.read_text()[-3000:]}")
    j = json.loads(lines[-1])
    drain = (j["finished_ms"] - j["submitted_ms"]) / 1000
    ok = j["results"] == want.count
    out: dict[str, Any] = {}
    if exact:
        got: Counter = Counter()
        for f in sorted(workdir.glob(f"flink-ids-{t}.*")):
            with open(f) as fh:
                for line in fh:
                    a, b, c, ts = map(int, line.split())
                    got[((a, b, c), ts - BASE_MS)] += 1
            f.unlink()
        diff = (got - want.results) + (want.results - got)
        ok = ok and not diff
        out["differing_results"] = sum(diff.values())
    remote = _remote_bytes(rec.bytes)
    cpu_total = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return {"events": n, "records_read": j["records"], "results": j["results"], "reference_results": want.count,
            ("same_results" if exact else "same_count"): ok, **out,
            "drain_s": round(drain, 2), "events_per_s": round(n / drain, 1),
            "results_per_s": round(j["results"] / drain, 1),
            "execute_s": round((j["finished_ms"] - j["execute_ms"]) / 1000, 2),
            "first_record_to_last_result_s": round((j["last_result_ms"] - j["first_record_ms"]) / 1000, 2),
            "cpu_s": round(j["cpu_end_s"] - j["cpu_submitted_s"], 2), "cpu_total_s": round(cpu_total, 2),
            "window_ms": [j["submitted_ms"], j["finished_ms"]],
            "bytes_crossing_sites": remote["bytes"], "join_site_stream": remote["stream"],
            "json_bytes": sum(rec.bytes.values()),
            "flink_version": j["flink_version"], "parallelism": j["parallelism"], "keep_payload": j["keep_payload"],
            "state_backend": "hashmap (heap)",
            "heap": heap}


# --------------------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backlog", type=float, default=300.0,
                    help="seconds of events per site in each bounded run (default 300; 30 for a quick run)")
    ap.add_argument("--workloads", default=",".join(WORKLOADS),
                    help="comma-separated, among fig7 (Fig. 7 defaults) and routers (the live demo's); default both")
    ap.add_argument("--engines", default=",".join(ENGINES),
                    help="comma-separated, among joinlib and flink (default both; the reference is always computed)")
    ap.add_argument("--exact", action="store_true",
                    help="compare the (id1, id2, id3, ts) multisets with the reference, not only the counts "
                         "(the reference keeps every result in memory: use with short backlogs)")
    ap.add_argument("--f", type=float, default=F, help=f"selectivity of the fig7 workload (default {F})")
    ap.add_argument("--plan", help="joinlib's plan (default: the planner's default)")
    ap.add_argument("--parallelism", type=int, default=2, help="Flink's parallelism (every operator; default 2)")
    ap.add_argument("--flink-payload", action="store_true",
                    help="Flink keeps every record's payload in its join state and results (default: it parses "
                         "past the payload and drops it, as a result of either engine is three ids and a ts)")
    ap.add_argument("--flink-heap", default="4g", help="the Flink JVM's -Xmx (heap state lives there; default 4g)")
    ap.add_argument("--warmup", type=float, default=60.0,
                    help="seconds of backlog (the first workload's) each engine drains, unmeasured, before the "
                         "measured runs (default 60; 0: none).  Why: a broker just started compiles its hot paths "
                         "(JIT) during the first drains, and the engine that comes first pays for it -- joinlib's "
                         "routers drain went from ~20k to ~40k events/s between a fresh broker's first and third")
    ap.add_argument("--repeat", type=int, default=1,
                    help="drain each workload's backlog this many times per engine, the engines alternating, and "
                         "report the run with the median drain rate (each run's figures are kept in the JSON, "
                         "the table gives the range).  Why: on a shared 2-core machine one drain's rate varies by "
                         "up to 2x; the median of alternating runs is the comparison to read (default 1)")
    ap.add_argument("--rebuild", action="store_true", help="rebuild bench/flink's jar even if it is up to date")
    ap.add_argument("--bootstrap", help="Kafka bootstrap servers (default: $KAFKA_BOOTSTRAP_SERVERS, the "
                                        "`make up` cluster, else a throw-away local broker)")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "flink", help="output directory")
    ap.add_argument("--name", default="flink_compare", help="<out>/<name>.json and .png")
    ap.add_argument("--table", type=Path,
                    help=f"rewrite the section '{SECTION[3:]}' of this markdown file (e.g. docs/results.md): "
                         "a table for each run whose JSON is in --out")
    args = ap.parse_args()
    workloads = [w for w in args.workloads.split(",") if w]
    engines = [e for e in args.engines.split(",") if e]
    bad = [w for w in workloads if w not in WORKLOADS] + [e for e in engines if e not in ENGINES]
    if bad or not workloads:
        ap.error(f"unknown workload or engine: {bad}")
    if "flink" in engines:
        build_jar(args.rebuild)
    bs, cluster = kafka(args.bootstrap)
    meter = broker_meter(cluster)
    work = ROOT / "results" / "tmp" / f"{args.name}-work"   # logs (git-ignored)
    work.mkdir(parents=True, exist_ok=True)
    params = {"fig7": {"f": args.f, "rate": RATE, "payload": 1250}, "routers": dict(ROUTERS)}
    before = machine()
    runs: dict[str, dict] = {}
    try:
        if args.warmup > 0:
            warm_up(bs, args, params[workloads[0]], engines, work)
        runs = {w: measure(bs, args, w, params[w], engines, work, meter) for w in workloads}
    finally:
        if meter is not None:
            meter.close()
        if cluster is not None:
            cluster.stop()
    command = "python bench/flink_compare.py " + " ".join(sys.argv[1:])
    out = {"bench": "flink_compare", "command": command.strip(), "date": time.strftime("%Y-%m-%d"),
           "setup": {"backlog_s": args.backlog, "warmup_s": args.warmup, "repeat": args.repeat, "window_ms": WINDOW_MS,
                     "delta_ms": DELAY_MS, "partitions": 3, "exact": args.exact,
                     "join_site": "Flink (like Spark) runs at the site of the biggest stream (join_site_stream; "
                                  "the three differ by a few bytes per record, the lengths of the join values) "
                                  "and reads the other two sites' topics: their JSON bytes cross "
                                  "sites; joinlib's bytes are what its plan ships (central_bytes: every tuple "
                                  "to one site, its naive counters)",
                     "flink": f"DataStream interval joins, local mini-cluster, parallelism {args.parallelism}, "
                              f"hashmap (heap) state, -Xmx{args.flink_heap}, KafkaSource bounded at the end offsets, "
                              + ("payloads kept in state and results" if args.flink_payload else
                                 "payloads parsed past (a result: ids and ts, as joinlib's)")},
           "workloads": runs, "machine_before": before, "machine_after": machine()}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(out, indent=2) + "\n")
    plot(out, args.out / f"{args.name}.png")
    print(f"wrote {args.out / (args.name + '.json')} and .png")
    if args.table:
        write_table(args.table, args.out)
        print(f"rewrote '{SECTION[3:]}' in {args.table}")
    bad_runs = [f"{e} {w}" for w, r in runs.items() for e in ENGINES
                if e in r and not r[e].get("same_results", r[e].get("same_count"))]
    if bad_runs:
        print(f"results differ from the reference: {', '.join(bad_runs)}", file=sys.stderr)
        return 1
    return 0


def measure(bs: str, args: argparse.Namespace, w: str, p: dict, engines: list[str], work: Path,
            meter: Any) -> dict:
    """Workload ``w``'s backlog, drained ``args.repeat`` times by each engine in turn: per engine the run with the
    median drain rate, each run's figures under ``runs`` (and the broker's CPU over each drain)."""
    data = prepare_backlog(bs, args.backlog, p["f"], p["rate"], p["payload"], args.exact)
    out: dict[str, Any] = {**p, "reference_results": data["want"].count}
    runs: dict[str, list[dict]] = {e: [] for e in engines}
    for i in range(max(1, args.repeat)):
        tag = f" (run {i + 1} of {args.repeat})" if args.repeat > 1 else ""
        if "joinlib" in engines:
            jl = backlog_run(bs, args.backlog, p["f"], args.plan, work, args.exact, p["rate"], p["payload"],
                             data=data)
            jl["cpu_s"] = round(sum(jl["node_cpu_s"].values()), 2)
            jl["broker_cpu_s"] = meter.between(*jl["window_ms"]) if meter is not None else None
            runs["joinlib"].append(jl)
            _say(f"joinlib, {w}{tag}", jl)
        if "flink" in engines:
            fl = flink_backlog(bs, data, work, args.exact, args.parallelism, args.flink_heap, args.flink_payload)
            fl["broker_cpu_s"] = meter.between(*fl["window_ms"]) if meter is not None else None
            runs["flink"].append(fl)
            _say(f"Flink, {w}{tag}", fl)
    for e, rs in runs.items():
        out[e] = median_run(rs)
    return out


def median_run(rs: list[dict]) -> dict:
    """The run with the median drain rate (the lower middle one of an even count), with every run's figures
    under ``runs`` when there are several; a run whose results differ from the reference makes it the one
    reported (a wrong result is never hidden behind a median)."""
    bad = [r for r in rs if not r.get("same_results", r.get("same_count"))]
    pick = bad[0] if bad else sorted(rs, key=lambda r: r["events_per_s"])[(len(rs) - 1) // 2]
    if len(rs) > 1:
        pick = {**pick, "runs": [{k: r.get(k) for k in ("events_per_s", "drain_s", "cpu_s", "broker_cpu_s",
                                                           "results", "window_ms")} for r in rs]}
    return pick


def warm_up(bs: str, args: argparse.Namespace, p: dict, engines: list[str], work: Path) -> None:
    """Each engine drains ``args.warmup`` seconds of backlog once, unmeasured (see ``--warmup``)."""
    if "joinlib" in engines:
        r = warm_up_joinlib(bs, args.warmup, p["f"], args.plan, work, p["rate"], p["payload"])
        print(f"warm-up, joinlib: {r['events']:,} events at {r['events_per_s']:,.0f} events/s (not measured)",
              flush=True)
    if "flink" in engines:
        data = prepare_backlog(bs, args.warmup, p["f"], p["rate"], p["payload"], False)
        r = flink_backlog(bs, data, work, False, args.parallelism, args.flink_heap, args.flink_payload)
        print(f"warm-up, Flink: {r['events']:,} events at {r['events_per_s']:,.0f} events/s (not measured)",
              flush=True)


def _say(what: str, r: dict) -> None:
    same = r.get("same_results", r.get("same_count"))
    print(f"{what}: {r['events']:,} events, {r['results']:,} results (reference {r['reference_results']:,}"
          f"{', same' if same else ', DIFFERENT'}), {r['events_per_s']:,.0f} events/s, CPU {r['cpu_s']} s"
          f"{_broker(r)}, {_bytes(r):,} bytes across sites", flush=True)


def _broker(r: dict) -> str:
    """The local broker's CPU over the engine's drain, where the bench started the broker and measured it."""
    return f" (broker {r['broker_cpu_s']} s)" if r.get("broker_cpu_s") is not None else ""


def _rate(x: dict) -> str:
    """Drain events/s: the median run's, and the range over the runs where there were several."""
    rates = [r["events_per_s"] for r in x.get("runs", [])]
    spread = f" ({min(rates):,.0f}-{max(rates):,.0f}, {len(rates)} runs)" if len(rates) > 1 else ""
    return f"{x['events_per_s']:,.0f}{spread}"


def _bytes(r: dict) -> int:
    return r["bytes_crossing_sites"] if "bytes_crossing_sites" in r else (r.get("bytes") or 0)


# --------------------------------------------------------------------------- the table and the plot


def table(outs: list[dict]) -> str:
    """The section: what was measured, then one table per run (the JSON files of the output directory)."""
    s = outs[0]["setup"]
    text = [
        SECTION, "",
        "`python bench/flink_compare.py` (`make bench-flink`: 300 s of backlog per site): the same workloads as "
        "Spark above, each a bounded run over a backlog on the same 3-partition JSON topics and machine (2 "
        f"cores, shared), against Flink {_flink_version(outs[0])} as users would run it: {s['flink']}, two "
        f"`intervalJoin`s within [-{s['window_ms']}, +{s['window_ms']}] ms, watermarks ts - {s['delta_ms']} ms "
        "(bench/flink/).  *Drain*: joinlib from the submission of the query to its running node services to the "
        "last result; Flink from the job's submission to its running mini-cluster to the job's end.  *CPU s*: "
        "joinlib's three node processes over the drain; Flink's JVM over the drain (in parentheses: the whole "
        "java process, JVM start and JIT included; *broker*: the local broker's over the same drain, where the "
        "bench started the broker).  *MB across sites*: joinlib's plan; Flink runs at the site "
        "of the biggest stream and reads the other two sites' topics (JSON as written).  JSON and plots: "
        "`results/flink/`.  The load average of each run is mostly other work on the same two cores: "
        "drain rates vary by up to 2x between runs; bytes and results do not."]
    text[2] = textwrap.fill(text[2], 110, break_on_hyphens=False, break_long_words=False)
    for out in outs:
        s = out["setup"]
        text += ["", f"{s['backlog_s']:g} s of backlog per site{', ids and ts compared' if s['exact'] else ''}: "
                     f"`{out['command']}` ({out['date']}, load average before "
                     f"{out['machine_before']['loadavg'][0]:.1f}, `{s.get('file', '')}`):", "",
                 "| workload | engine | events | results (reference) | drain events/s | CPU s | MB across sites |",
                 "|---|---|---:|---:|---:|---:|---:|"]
        for w, r in out["workloads"].items():
            for e in ENGINES:
                if e not in r:
                    continue
                x = r[e]
                name = "joinlib" if e == "joinlib" else f"Flink {x['flink_version']}"
                same = x.get("same_results", x.get("same_count"))
                what = "same ids and ts" if "same_results" in x else "same count"
                cpu = f"{x['cpu_s']:.1f}" + (f" ({x['cpu_total_s']:.1f})" if "cpu_total_s" in x else "") + (
                    f"; broker {x['broker_cpu_s']:.1f}" if x.get("broker_cpu_s") is not None else "")
                text.append(f"| {w} | {name} | {x['events']:,} | {x['results']:,} ({x['reference_results']:,}: "
                            f"{what if same else 'DIFFERENT'}) | {_rate(x)} | {cpu} | "
                            f"{_bytes(x) / 1e6:.1f} |")
        ratios = [f"{w}: Flink drains {r['flink']['events_per_s'] / r['joinlib']['events_per_s']:.1f}x joinlib's "
                  f"events/s on {r['flink']['cpu_s'] / max(r['joinlib']['cpu_s'], 1e-9):.1f}x its CPU s, and joinlib "
                  f"ships {_bytes(r['joinlib']) / _bytes(r['flink']):.0%} of Flink's bytes"
                  for w, r in out["workloads"].items() if "joinlib" in r and "flink" in r and _bytes(r["flink"])]
        if ratios:
            text += ["", "; ".join(ratios) + "."]
    return "\n".join(text) + "\n"


def _flink_version(out: dict) -> str:
    return next((r["flink"]["flink_version"] for r in out["workloads"].values() if "flink" in r), "")


def write_table(path: Path, out_dir: Path) -> None:
    """Replaces the section (its heading to the next level-2 heading), or appends it, with the tables of
    every run in ``out_dir`` (longest backlog first)."""
    outs = []
    for f in sorted(out_dir.glob("*.json"), key=lambda f: f.stat().st_mtime):   # oldest first
        d = json.loads(f.read_text())
        if d.get("bench") == "flink_compare":
            d["setup"]["file"] = str(f.relative_to(ROOT) if f.is_relative_to(ROOT) else f)
            outs.append(d)
    outs.sort(key=lambda d: -d["setup"]["backlog_s"])   # stable: by time within a backlog
    text = path.read_text() if path.exists() else ""
    new = table(outs)
    m = re.search(rf"^{re.escape(SECTION)}\n.*?(?=^## |\Z)", text, flags=re.S | re.M)
    if m:
        text = text[:m.start()] + new + ("\n" if m.end() < len(text) else "") + text[m.end():]
    else:
        text = text.rstrip("\n") + "\n\n" + new
    path.write_text(text)


def plot(out: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ws = list(out["workloads"])
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.2))
    panels = (("drain events/s (bounded backlog)", lambda x: x["events_per_s"]),
              ("CPU seconds over the drain", lambda x: x["cpu_s"]),
              ("MB crossing sites", lambda x: _bytes(x) / 1e6))
    for ax, (title, value) in zip(axes, panels, strict=True):
        for i, (engine, color) in enumerate((("joinlib", "tab:blue"), ("flink", "tab:red"))):
            xs = [k + (i - 0.5) * 0.4 for k, w in enumerate(ws) if engine in out["workloads"][w]]
            vs = [value(out["workloads"][w][engine]) for w in ws if engine in out["workloads"][w]]
            bars = ax.bar(xs, vs, width=0.4, color=color, label="joinlib" if engine == "joinlib" else "Flink")
            ax.bar_label(bars, fmt="{:,.0f}" if "events" in title else "{:,.1f}", fontsize=8)
        ax.set_xticks(range(len(ws)), ws)
        ax.set_title(title)
        ax.legend()
    fig.suptitle(f"joinlib vs Apache Flink {_flink_version(out)}: {out['setup']['backlog_s']:g} s backlog per site, "
                 "3 sites, same topics and machine")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
