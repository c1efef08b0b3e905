"""Monitoring that is proven (issue 16, item 4): a real Prometheus server (Debian's ``prometheus``,
``make prometheus-install``) scrapes a real cluster run, and every Grafana panel query, every template
variable and every alerting and recording rule of monitoring/ is evaluated against it through its HTTP
API.

The run: a planner and three node services as processes (Redis checkpoints, metrics on random ports),
a live 3-site query on JSON topics with real-time events (a few late and malformed), for ~40 s; meanwhile
one node is killed (SIGKILL) and started again (it resumes from its checkpoint: up == 0 for a while,
late messages after it), a burst of malformed records goes to the dead-letter topic and garbage to a
node topic and the control topic (rejected messages).  Prometheus runs with the repository's
prometheus.yml (its rule files, its job names) with the targets replaced by the local processes, a
1 s scrape and evaluation interval and a temporary TSDB, on a random free port; it is stopped at the end
of the test session.

Every query must return data (a series with at least one number that is not NaN, over the run), except
those naming a metric of :data:`NO_DATA` -- listed with the reason such a run has none.  Every rule must
evaluate without error; each alert's signal (its expression without the thresholds) must return data
(same exceptions), and the alerts the run provokes must have fired (pending or firing).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any, Optional

import pytest
import yaml

from tests.integration.test_hostile_input import Garbage, Stack
from tests.integration.test_live import Recorder, _free_port, generator, live_query, make_topics

REPO = Path(__file__).resolve().parents[2]
MONITORING = REPO / "monitoring"
RUN_S = 40.0

#: metrics such a run legitimately has no samples of (a query naming one may return nothing)
NO_DATA = {
    "joinlib_plan_changes_total": "adaptive re-planning (joinlib run --plan adaptive, docs/adaptive.md) runs "
                                  "embedded; node services run the planner's fixed plans",
    "joinlib_plan_generation": "adaptive re-planning only (see joinlib_plan_changes_total)",
    "joinlib_adaptive_triggers_total": "adaptive re-planning only",
    "joinlib_measured_rate": "adaptive re-planning only",
    "joinlib_measured_tuple_bytes": "adaptive re-planning only",
    "joinlib_measured_selectivity": "adaptive re-planning only",
    "joinlib_adaptive_messages_total": "adaptive re-planning only",
    "joinlib_rows_written_total": "rows on a sink topic only (a query with a SELECT list and a topic); this run's "
                                  "query writes ids, and tests/integration/test_live_rows.py checks the counter",
    "joinlib_repartitions_total": "the planner's automatic re-partition only (a live pmjoin:rate|range|site query "
                                  "submitted with --repartition); tests/unit/test_repartition.py checks the metrics",
    "joinlib_repartition_gain": "the automatic re-partition only (see joinlib_repartitions_total)",
}
#: alerts this run provokes: they must have been pending or firing
PROVOKED = {
    "JoinlibNodeDown": "one node is killed for ~5 s",
    "JoinlibRejectedMessages": "garbage is written to a node topic and to control",
    "JoinlibDeadLetterRate": "a burst of 600 malformed records: over 1 dead letter/s over 5 min",
}
#: alerts that stay silent in this run (their signals are still evaluated and must have data)
SILENT = {
    "JoinlibPlannerDown": "the planner is not stopped",
    "JoinlibConsumerLagGrowing": "lag stays far below 10,000 messages",
    "JoinlibConsumerLagGrowingFast": "lag does not grow by 100 messages/s for 2 min",
    "JoinlibLateMessages": "late messages after the restart may or may not last the 'for' (5 min): not asserted",
    "JoinlibTransmissionSlow": "the restarted node's backlog may push p99 above 1 s: not asserted",
    "JoinlibNoResults": "results flow",
    "JoinlibCheckpointStale": "nodes checkpoint every 0.5 s; a 60 s gap needs a longer run",
    "JoinlibFallingBehind": "real-time events: the watermark lag stays near max_delay",
}


# ----------------------------------------------------------------------------- Prometheus

def prometheus_binary() -> str:
    binary = os.environ.get("PROMETHEUS_BIN") or shutil.which("prometheus")
    if not binary:
        pytest.fail("no prometheus binary: run 'make prometheus-install' (Debian: apt-get install -y prometheus) "
                    "or set PROMETHEUS_BIN", pytrace=False)
    return binary


class Prometheus:
    """A Prometheus server on a random port with a temporary TSDB, scraping ``targets`` (job -> host:port
    list) every second with the repository's rule files."""

    def __init__(self, tmp: Path, targets: dict[str, list[str]]) -> None:
        config = yaml.safe_load((MONITORING / "prometheus" / "prometheus.yml").read_text())
        config["global"].update(scrape_interval="1s", scrape_timeout="900ms", evaluation_interval="1s")
        config["rule_files"] = [str(MONITORING / "prometheus" / f) for f in config.get("rule_files", [])]
        config["scrape_configs"] = [{**job, "static_configs": [{"targets": targets.get(job["job_name"], [])}]}
                                    for job in config["scrape_configs"]]
        (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tmp / "prometheus.log"
        with open(self.log, "ab") as fh:
            self.proc = subprocess.Popen(
                [prometheus_binary(), f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'tsdb'}",
                 f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=1h"],
                stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while True:
            try:
                if urllib.request.urlopen(f"{self.url}/-/ready", timeout=2).status == 200:
                    break
            except OSError:
                pass
            assert self.proc.poll() is None, f"prometheus exited: {self.log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"prometheus not ready: {self.log.read_text()[-3000:]}"
            time.sleep(0.3)

    def api(self, path: str, **params: Any) -> Any:
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params, doseq=True)}"
        try:
            with urllib.request.urlopen(url, timeout=30) as r:
                body = json.loads(r.read())
        except urllib.error.HTTPError as e:
            body = json.loads(e.read())
        assert body.get("status") == "success", f"{path} {params}: {body.get('error')}"
        return body["data"]

    def range(self, expr: str, start: float, end: float, step: str = "2s") -> list[dict]:
        return self.api("query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}", step=step)["result"]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


_servers: list[Prometheus] = []


@pytest.fixture(scope="session")
def _prometheus_servers():
    """Stops every Prometheus server this module started at the end of the test session."""
    yield _servers
    for p in _servers:
        p.stop()


# ----------------------------------------------------------------------------- the run

@pytest.fixture(scope="module")
def observed(kafka_bootstrap, redis_url, make_topic_module, tmp_path_factory, _prometheus_servers):
    tmp = tmp_path_factory.mktemp("prometheus-eval")
    stack = Stack(kafka_bootstrap, redis_url, tmp)
    try:
        prom = Prometheus(tmp, {"joinlib-node": [f"127.0.0.1:{stack.metrics[s]}" for s in stack.sites],
                                "joinlib-planner": [f"127.0.0.1:{stack.metrics['planner']}"]})
        _prometheus_servers.append(prom)
        t_start = time.time()
        q = live_query(f"pe{stack.sites[0]}", stack.sites, make_topics(make_topic_module, 3, partitions=2),
                       window="2s", idle="2s")
        out = stack.submit(q, "SM-S1", since="now")
        rec = Recorder()
        gen = generator(kafka_bootstrap, q, rec, rate=80.0, late_every=50, late_by_ms=800, malformed_every=60,
                        time_base_ms=None)
        t = threading.Thread(target=gen.run, args=(RUN_S,))
        t.start()
        events = provoke(stack, q, out["run"], kafka_bootstrap)
        t.join()
        time.sleep(4)   # the last scrapes and rule evaluations
        t_end = time.time()
        stack.assert_alive()
        yield {"prom": prom, "start": t_start, "end": t_end, "stack": stack, "events": events}
    finally:
        stack.close()


@pytest.fixture(scope="module")
def make_topic_module(kafka_admin):
    from tests.cluster_fixtures import create_topics, delete_topics, unique_topic_name
    made: list[str] = []

    def _make(hint: str, partitions: int = 1) -> str:
        name = unique_topic_name(hint)
        create_topics(kafka_admin, [name], partitions=partitions)
        made.append(name)
        return name
    yield _make
    delete_topics(kafka_admin, made)


def provoke(stack: Stack, q, run: str, bootstrap: str) -> list[str]:
    """During the run: kill and restart a node, a burst of malformed records, garbage on a node topic
    and on control."""
    from joinlib.adapters.kafka import CONTROL_TOPIC, make_producer, node_topic
    events = []
    time.sleep(8)
    victim = stack.sites[1]
    stack.kill(victim)
    events.append(f"{time.time():.0f} killed {victim}")
    time.sleep(5)
    stack.restart(victim)
    events.append(f"{time.time():.0f} restarted {victim}")
    p = make_producer(bootstrap)
    topic = q.stream("S1").source.topic
    for i in range(600):
        p.produce(topic, b"{not json " + str(i).encode(), b"k", partition=i % 2)
    g = Garbage(7)
    for burst in range(2):   # two bursts a few scrapes apart: a counter whose series is born with its whole count
        for _ in range(20):  # between two scrapes never shows an increase to rate(), and its alert would not fire
            _, src, key, value, headers = g.envelope(stack.sites, stack.sites[0])
            p.produce(node_topic(q.name, stack.sites[0], src), value, key, headers=[("run", run.encode()), *headers])
            _, key, value = g.control(q.name, run, {"query": {}, "plan": {}, "run": run})
            p.produce(CONTROL_TOPIC, value, key)
        assert p.flush(30) == 0
        if burst == 0:
            time.sleep(4)
    events.append(f"{time.time():.0f} wrote 600 malformed records, 40 garbage envelopes, 40 garbage control messages")
    return events


# ----------------------------------------------------------------------------- queries

def grafana_expr(expr: str, range_s: int) -> str:
    """A panel's expression with Grafana's variables bound: every multi-value variable to all values,
    $__rate_interval to 4 scrape intervals, $__range to the run."""
    for var in ("site", "query", "src", "dst", "kind"):
        expr = expr.replace(f"${var}", ".*").replace(f"${{{var}}}", ".*")
    for var, value in (("__rate_interval", "5s"), ("__interval", "2s"), ("__range_s", str(range_s)),
                       ("__range", f"{range_s}s")):
        expr = expr.replace(f"${{{var}}}", value).replace(f"${var}", value)
    return expr


def names_in(expr: str) -> set[str]:
    import promql_parser as pp
    names: set[str] = set()

    def visit(node: Any) -> None:
        if isinstance(node, pp.VectorSelector) and node.name:
            names.add(node.name)
    pp.walk(pp.parse(expr), visit)
    bases = {n.rsplit("_", 1)[0] for n in names if n.endswith(("_bucket", "_sum", "_count"))}
    return names | bases


def has_numbers(result: list[dict]) -> bool:
    return any(v[1] not in ("NaN", "+Inf", "-Inf") for r in result for v in r.get("values", [r.get("value")]) if v)


def allowed_empty(expr: str) -> Optional[str]:
    hits = [NO_DATA[n] for n in names_in(expr) if n in NO_DATA]
    return hits[0] if hits else None


def dashboard_queries() -> list[tuple[str, str]]:
    out = []
    for path in sorted((MONITORING / "grafana" / "dashboards").glob("*.json")):
        dash = json.loads(path.read_text())

        def walk(panels):
            for p in panels:
                yield p
                yield from walk(p.get("panels", []))
        for panel in walk(dash["panels"]):
            for t in panel.get("targets", []):
                out.append((f"{dash['uid']} / {panel['title']} [{t['refId']}]", t["expr"]))
        for ann in dash.get("annotations", {}).get("list", []):
            if ann.get("expr"):
                out.append((f"{dash['uid']} / annotation {ann['name']}", ann["expr"]))
            elif isinstance(ann.get("target"), dict) and ann["target"].get("expr"):
                out.append((f"{dash['uid']} / annotation {ann['name']}", ann["target"]["expr"]))
    return out


def rules() -> list[dict]:
    config = yaml.safe_load((MONITORING / "prometheus" / "prometheus.yml").read_text())
    out = []
    for f in config["rule_files"]:
        for group in yaml.safe_load((MONITORING / "prometheus" / f).read_text())["groups"]:
            out.extend(group["rules"])
    return out


def signals(expr: str) -> list[str]:
    """An alert expression without its thresholds: the operands of its comparisons with a number, and
    of its and/or/unless, as PromQL text."""
    import promql_parser as pp
    comparisons = {">", "<", ">=", "<=", "==", "!="}

    def walk(node: Any) -> list[str]:
        if isinstance(node, pp.ParenExpr):
            return walk(node.expr)
        if isinstance(node, pp.BinaryExpr):
            op = str(node.op).strip().lower()
            if op in ("and", "or", "unless"):
                return walk(node.lhs) + walk(node.rhs)
            if op in comparisons:
                if isinstance(node.rhs, pp.NumberLiteral):
                    return walk(node.lhs)
                if isinstance(node.lhs, pp.NumberLiteral):
                    return walk(node.rhs)
        return [str(node)]
    return walk(pp.parse(expr))


# ----------------------------------------------------------------------------- tests

def test_every_dashboard_query_returns_data(observed):
    prom, start, end = observed["prom"], observed["start"], observed["end"]
    range_s = int(end - start) + 5
    report, empty = [], []
    for where, expr in dashboard_queries():
        result = prom.range(grafana_expr(expr, range_s), start, end)
        ok = has_numbers(result)
        report.append(f"{'data' if ok else 'EMPTY':5} {len(result):3} series  {where}")
        if not ok and not allowed_empty(grafana_expr(expr, range_s)):
            empty.append(f"{where}: {expr}")
    print("\n" + "\n".join(report) + "\n" + "\n".join(observed["events"]))
    assert len(report) >= 30
    assert not empty, "dashboard queries without data:\n" + "\n".join(empty)


def test_every_template_variable_has_values(observed):
    prom, start, end = observed["prom"], observed["start"], observed["end"]
    for path in sorted((MONITORING / "grafana" / "dashboards").glob("*.json")):
        for var in json.loads(path.read_text())["templating"]["list"]:
            if var["type"] != "query":
                continue
            q = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            metric, label = q.removeprefix("label_values(").removesuffix(")").replace(" ", "").split(",")
            values = prom.api(f"label/{label}/values", **{"match[]": metric, "start": f"{start:.0f}",
                                                           "end": f"{end:.0f}"})
            assert values or metric in NO_DATA, f"variable {var['name']}: no {label} values of {metric}"


def test_every_rule_evaluates_and_every_alert_signal_has_data(observed):
    prom, start, end = observed["prom"], observed["start"], observed["end"]
    loaded = {r.get("name"): r for g in prom.api("rules")["groups"] for r in g["rules"]}
    mine = rules()
    assert {r.get("alert") or r.get("record") for r in mine} == set(loaded), "Prometheus did not load every rule"
    for name, r in loaded.items():
        assert r["health"] == "ok" and not r.get("lastError"), f"rule {name}: {r.get('lastError')}"
    alerts = [r for r in mine if "alert" in r]
    assert set(PROVOKED) | set(SILENT) == {r["alert"] for r in alerts}, "list every alert in PROVOKED or SILENT"
    missing = []
    for r in alerts:
        for sig in signals(r["expr"]):
            if not has_numbers(prom.range(sig, start, end)) and not allowed_empty(sig):
                missing.append(f"{r['alert']}: {sig}")
    assert not missing, "alert signals without data:\n" + "\n".join(missing)
    fired: Counter[str] = Counter()
    for res in prom.range("ALERTS", start, end):
        fired[res["metric"]["alertname"]] += 1
    print(f"\nalerts pending/firing during the run: {dict(fired)}")
    for name, why in PROVOKED.items():
        assert fired[name], f"{name} never went pending although {why}"


def test_every_recording_rule_records_data(observed):
    prom, start, end = observed["prom"], observed["start"], observed["end"]
    for r in rules():
        if "record" in r:
            assert has_numbers(prom.range(r["expr"], start, end)), f"{r['record']}: {r['expr']}"
            assert has_numbers(prom.range(r["record"], start, end)), f"{r['record']} was not recorded"


def test_prometheus_is_running_on_its_own_port(observed):
    prom = observed["prom"]
    assert prom.proc.poll() is None and f"127.0.0.1:{prom.port}" in prom.url
    targets = prom.api("targets")["activeTargets"]
    assert {t["labels"]["job"] for t in targets} == {"joinlib-node", "joinlib-planner"}
    assert all(t["health"] == "up" for t in targets), [(t["scrapeUrl"], t["lastError"]) for t in targets]
