"""``make live-demo``: the routers query on live Kafka topics, without Docker (after ``make up``).

Starts the planner service and one node service per site (subprocesses, ``--serve``), a generator
writing JSON router events to per-site topics (``services.generator``: a steady rate, out of order
within δ, a few late and malformed records), submits the query (``joinlib submit``), then every few
seconds prints the results that arrived and the bytes shipped between sites against what ``central``
would ship, until Ctrl-C (or ``--duration``); on the way out it stops the query and the services.
The query is ``examples/routers_live.sql`` by default: its results are rows on its sink topic, with the
matched destination (``row: {"dest": ...}``); a query without rows (``examples/routers_live.yaml``) prints
its results as ids (``result: {"ids": ...}``).

    python scripts/live_demo.py [--query examples/routers_live.sql] [--rate 200] [--plan NAME]
                                [--every 5] [--duration SECONDS] [--tag TAG] [--logs DIR]

Kafka and Redis: ``$KAFKA_BOOTSTRAP_SERVERS`` / ``$REDIS_URL``, else the local cluster of ``make up``
(``scripts/cluster.sh env``).  ``--tag`` renames the query, its sites and topics (several demos on
one broker, tests).  Logs of every process: ``--logs`` (default data/live-demo).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _cluster_env() -> dict[str, str]:
    out = {k: os.environ[k] for k in ("KAFKA_BOOTSTRAP_SERVERS", "REDIS_URL") if os.environ.get(k)}
    if "KAFKA_BOOTSTRAP_SERVERS" in out:
        return out
    try:
        text = subprocess.run(["bash", str(ROOT / "scripts" / "cluster.sh"), "env"], capture_output=True, text=True,
                              check=True, timeout=30).stdout
    except (subprocess.SubprocessError, OSError):
        sys.exit("error: no Kafka: run 'make up' first (or set KAFKA_BOOTSTRAP_SERVERS)")
    for line in text.splitlines():
        k, _, v = line.partition("=")
        if k in ("KAFKA_BOOTSTRAP_SERVERS", "REDIS_URL") and v:
            out.setdefault(k, v)
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str, timeout: float = 10) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


class Demo:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.env = {**os.environ, **_cluster_env(), "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
        self.logs = Path(args.logs)
        self.logs.mkdir(parents=True, exist_ok=True)
        self.procs: list[tuple[str, subprocess.Popen]] = []
        self.query_file, self.query = self._query()
        self.url = ""

    def _query(self) -> tuple[Path, Any]:
        from joinlib.query import dump_query, parse_query, query_to_dict
        from joinlib.sql import load_query_file
        q = load_query_file(self.args.query)
        if not self.args.tag:
            return Path(self.args.query), q
        d, tag = query_to_dict(q), self.args.tag
        d["name"] = f"{q.name}_{tag}"
        for spec in d["streams"].values():
            spec["site"] = f"{spec['site']}{tag}"
            if spec.get("source"):
                spec["source"]["topic"] = f"{spec['source']['topic']}.{tag}"
        if d.get("output", {}).get("topic"):
            d["output"]["topic"] = f"{d['output']['topic']}.{tag}"
        q = parse_query(d, str(self.args.query))
        path = self.logs / f"{q.name}.yaml"
        dump_query(q, path)
        return path, q

    def start(self, name: str, argv: list[str], **env: str) -> subprocess.Popen:
        log = open(self.logs / f"{name}.log", "wb")
        p = subprocess.Popen([sys.executable, *argv], cwd=ROOT, env={**self.env, **env}, stdout=log,
                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.procs.append((name, p))
        return p

    def run(self) -> int:
        a, q = self.args, self.query
        redis = self.env.get("REDIS_URL") or "(none: windows in memory)"
        print(f"Kafka {self.env['KAFKA_BOOTSTRAP_SERVERS']}, Redis {redis}; logs in {self.logs}/")
        port = _free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.start("planner", ["-m", "services.planner", "--port", str(port), "--metrics-port", str(_free_port())])
        for site in q.sites:
            self.start(f"node-{site}", ["-m", "services.node", "--site", site, "--serve"],
                       METRICS_PORT=str(_free_port()))
        self._wait_healthy()
        self.start("generator", ["-m", "services.generator", "--query", str(self.query_file), "--rate", str(a.rate),
                                 "--distinct", str(a.distinct)])
        print(f"planner {self.url}, nodes {', '.join(q.sites)}, generator: {a.rate:g} events/s per site")
        self._stop_earlier_run()
        from joinlib.cli.main import main as cli
        argv = ["submit", str(self.query_file), "--url", self.url] + (["--plan", a.plan] if a.plan else [])
        if cli(argv) != 0:
            return 2
        if q.output.sink_topic:
            print(f"rows go to topic {q.output.sink_topic} ('joinlib results {q.name} --follow --url {self.url}')")
        return self._tail()

    def _wait_healthy(self, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for name, p in self.procs:
                if p.poll() is not None:
                    sys.exit(f"error: {name} exited ({p.returncode}); see {self.logs / (name + '.log')}")
            try:
                urllib.request.urlopen(self.url + "/healthz", timeout=2).read()
                return
            except OSError:
                time.sleep(0.3)
        sys.exit(f"error: the planner did not answer within {timeout_s:.0f}s; see {self.logs / 'planner.log'}")

    def _stop_earlier_run(self) -> None:
        """A demo killed before it could stop its query leaves it 'running' on the control topic."""
        time.sleep(1.0)  # the planner reads the control topic
        try:
            st = _get(f"{self.url}/queries/{self.query.name}")
        except OSError:
            return
        if st.get("state") == "running":
            req = urllib.request.Request(f"{self.url}/queries/{self.query.name}/stop", data=b"", method="POST")
            urllib.request.urlopen(req, timeout=10).read()
            print(f"(stopped an earlier run of {self.query.name})")

    def _tail(self) -> int:
        a, name = self.args, self.query.name
        start, t0, shown, total = "beginning", time.monotonic(), 0, 0
        next_print = t0 + a.every
        while a.duration is None or time.monotonic() - t0 < a.duration:
            page = _get(f"{self.url}/queries/{name}/results?from={start}&max=50000&wait=1")
            start = str(page["next"])
            total += len(page["results"])
            for r in page["results"][: max(0, 3 - shown)]:
                print("row:" if self.query.output.sink_topic else "result:", json.dumps(r))
                shown += 1
            if time.monotonic() >= next_print:
                next_print += a.every
                print(self._line(total, time.monotonic() - t0), flush=True)
            for pname, p in self.procs:
                if p.poll() is not None:
                    print(f"error: {pname} exited ({p.returncode}); see {self.logs / (pname + '.log')}")
                    return 1
        return 0

    def _line(self, total: int, elapsed: float) -> str:
        st = (_get(f"{self.url}/queries/{self.query.name}").get("stats") or {})
        ratio = f" ({st['bytes_vs_central']:.0%})" if st.get("bytes_vs_central") is not None else ""
        rate = sum(v for v in (st.get("input_per_s") or {}).values() if v)
        p99 = f"p99 latency {st['p99_latency_ms']:.0f} ms" if st.get("p99_latency_ms") is not None else "p99 latency -"
        dead = sum((st.get("dead_letters") or {}).values())
        return (f"[{elapsed:5.0f}s] {total:,} results ({st.get('results_per_s') or 0:.0f}/s) "
                f"from {rate:,.0f} events/s; shipped {st.get('bytes', 0):,} bytes vs central "
                f"{st.get('central_bytes', 0):,}{ratio}; {p99}; {dead} dead letters")

    def close(self) -> None:
        if self.url:
            try:
                req = urllib.request.Request(f"{self.url}/queries/{self.query.name}/stop", data=b"", method="POST")
                urllib.request.urlopen(req, timeout=10).read()
                deadline, url = time.monotonic() + 15, f"{self.url}/queries/{self.query.name}"
                while time.monotonic() < deadline and _get(url)["state"] != "stopped":
                    time.sleep(0.5)
                print(f"query {self.query.name} stopped")
            except OSError:
                pass
        for _, p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for _, p in self.procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--query", default=str(ROOT / "examples" / "routers_live.sql"),
                    help="the query file, SQL or YAML (default examples/routers_live.sql)")
    ap.add_argument("--rate", type=float, default=200.0, help="events per second per site (default 200)")
    ap.add_argument("--distinct", type=int, default=2000, help="distinct destinations (default 2000)")
    ap.add_argument("--plan", help="plan name (default: the planner's default)")
    ap.add_argument("--every", type=float, default=5.0, help="seconds between figures (default 5)")
    ap.add_argument("--duration", type=float, help="stop after this many seconds (default: Ctrl-C)")
    ap.add_argument("--tag", help="suffix for the query name, its sites and topics")
    ap.add_argument("--logs", default=str(ROOT / "data" / "live-demo"))
    args = ap.parse_args(argv)
    demo = Demo(args)
    try:
        return demo.run()
    except KeyboardInterrupt:
        print()
        return 0
    finally:
        demo.close()


if __name__ == "__main__":
    sys.exit(main())
