"""monitoring/: the metric catalogue equals docs/contracts.md; every Grafana panel and Prometheus
rule parses as PromQL and names only catalogued metrics; dashboards and datasource follow the
provisioning conventions; prometheus.yml scrapes exactly the compose services that serve metrics,
under the job names the Helm chart's ServiceMonitor produces."""
from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from tests.deploy.conftest import (
    MONITORING,
    REPO,
    base_metric_name,
    grafana_to_promql,
    iter_panels,
    load_yaml,
    metric_names,
)

DS = {"type": "prometheus", "uid": "prometheus"}
DASHBOARDS = sorted((MONITORING / "grafana" / "dashboards").glob("*.json"))
PROMETHEUS_YML = MONITORING / "prometheus" / "prometheus.yml"


def contract_metrics() -> dict[str, tuple[str, list[str]]]:
    text = (REPO / "docs" / "contracts.md").read_text(encoding="utf-8")
    section = text.split("## Metrics", 1)[1].split("\n## ", 1)[0]
    out = {}
    for line in section.splitlines():
        m = re.match(r"\|\s*(joinlib_\w+)\s*\|\s*([a-z]+)[^|]*\|\s*([^|]*)\|", line)
        if m:
            out[m.group(1)] = (m.group(2), [lb.strip() for lb in m.group(3).split(",") if lb.strip()])
    assert out, "no metric table found in docs/contracts.md"
    return out


def dashboard_exprs(dash: dict) -> list[tuple[str, str]]:
    """(where, expr) of every panel target and every query variable."""
    out = []
    for panel in iter_panels(dash["panels"]):
        for t in panel.get("targets", []):
            out.append((f"{dash['uid']}: panel {panel['title']!r} {t['refId']}", t["expr"]))
    return out


def variable_metrics(dash: dict) -> list[tuple[str, str]]:
    out = []
    for var in dash["templating"]["list"]:
        if var["type"] == "query":
            q = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            m = re.fullmatch(r"label_values\((\w+),\s*(\w+)\)", q)
            assert m, f"{dash['uid']}: variable {var['name']}: unsupported query {q!r}"
            out.append((var["name"], m.group(1)))
    return out


def rule_exprs() -> list[tuple[str, str]]:
    config = load_yaml(PROMETHEUS_YML)
    out = []
    for rf in config.get("rule_files", []):
        path = PROMETHEUS_YML.parent / rf
        assert path.is_file(), f"rule file {rf} missing"
        for group in load_yaml(path)["groups"]:
            for rule in group["rules"]:
                out.append((f"{rf}: {rule.get('alert') or rule.get('record')}", str(rule["expr"])))
    return out


# ------------------------------------------------------------------------------ catalogue

def test_catalogue_equals_the_contract(catalogue):
    want = contract_metrics()
    got = {m["name"]: (m["type"], m["labels"]) for m in catalogue["metrics"]}
    assert got == want


def test_catalogue_entries_are_well_formed(catalogue):
    names = [m["name"] for m in catalogue["metrics"]]
    assert len(names) == len(set(names))
    for m in catalogue["metrics"]:
        assert m["name"].startswith(catalogue["prefix"])
        assert set(m) >= {"name", "type", "labels", "help"} and m["help"].strip()
        assert m["type"] in ("counter", "gauge", "histogram")
        assert m["name"].endswith("_total") == (m["type"] == "counter"), m["name"]
        if m["type"] == "histogram":
            assert m["name"].endswith("_seconds")
            b = m["buckets"]
            assert b == sorted(b) and len(set(b)) == len(b) and b[0] <= 0.001, f"{m['name']}: buckets"
        else:
            assert "buckets" not in m
        for label, values in m.get("label_values", {}).items():
            assert label in m["labels"] and values, f"{m['name']}: label_values.{label}"
    enum_labels = set(catalogue["label_values"])
    assert enum_labels == {"kind", "operator", "store"}
    assert catalogue["label_values"]["kind"] == ["full", "partial", "update"]


# ------------------------------------------------------------------------------ dashboards

def test_dashboards_exist_and_are_generated_by_the_builder():
    assert DASHBOARDS, "no dashboards in monitoring/grafana/dashboards"
    res = subprocess.run([sys.executable, str(MONITORING / "grafana" / "build_dashboards.py"), "--check"],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_conventions(path):
    dash = json.loads(path.read_text(encoding="utf-8"))
    assert dash["id"] is None
    assert dash["uid"] == path.stem and re.fullmatch(r"[a-z0-9-]{1,40}", dash["uid"])
    ids = [p["id"] for p in iter_panels(dash["panels"])]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in iter_panels(dash["panels"]):
        gp = panel["gridPos"]
        assert 0 <= gp["x"] and gp["x"] + gp["w"] <= 24, f"{panel['title']}: gridPos"
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == DS, f"{panel['title']}: datasource"
        assert panel.get("description"), f"{panel['title']}: no description"
        assert panel["targets"], f"{panel['title']}: no targets"
        for t in panel["targets"]:
            assert t["datasource"] == DS, f"{panel['title']} {t['refId']}: datasource"
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs))
    for var in dash["templating"]["list"]:
        if var["type"] == "query":
            assert var["datasource"] == DS


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_promql_parses_and_uses_catalogued_metrics(path, catalogue, known_metric_names):
    dash = json.loads(path.read_text(encoding="utf-8"))
    for where, expr in dashboard_exprs(dash):
        try:
            names = metric_names(grafana_to_promql(expr))
        except Exception as e:  # promql_parser raises ValueError-like errors
            pytest.fail(f"{where}: does not parse: {e}\n  {expr}")
        assert names, f"{where}: names no metric"
        for n in names:
            assert base_metric_name(n, catalogue) in known_metric_names, \
                f"{where}: metric {n} is not in monitoring/metrics.yaml"
        if "rate(" in expr:
            assert "[$__rate_interval]" in expr or "[$__range]" in expr, f"{where}: use $__rate_interval"
    for var, metric in variable_metrics(dash):
        assert base_metric_name(metric, catalogue) in known_metric_names, f"variable {var}: {metric}"


def test_required_panels_are_present(catalogue):
    panels = [p for path in DASHBOARDS for p in iter_panels(json.loads(path.read_text())["panels"])
              if p["type"] != "row"]

    def exprs(p):
        return " ".join(t["expr"] for t in p["targets"])

    def find(pred, what):
        hits = [p for p in panels if pred(p)]
        assert hits, f"no panel shows {what}"
        return hits

    for q in ("0.5", "0.95", "0.99"):
        find(lambda p, q=q: f"histogram_quantile({q}" in exprs(p) and "joinlib_transmission_seconds_bucket" in exprs(p)
             and "by (le, src, dst, kind)" in exprs(p), f"transmission time quantile {q} per link and kind")
        find(lambda p, q=q: f"histogram_quantile({q}" in exprs(p) and "joinlib_processing_seconds_bucket" in exprs(p)
             and "by (le, site, operator)" in exprs(p), f"processing time quantile {q} per node and operator")
    find(lambda p: "joinlib_shipped_bytes_total" in exprs(p) and "joinlib_naive_bytes_total" in exprs(p)
         and p["type"] == "timeseries" and "by (src, dst, kind)" in exprs(p), "bytes per link and kind vs naive")
    find(lambda p: "joinlib_results_total" in exprs(p) and "rate(" in exprs(p), "results/s")
    find(lambda p: "joinlib_consumer_lag_messages" in exprs(p), "consumer lag")
    find(lambda p: "joinlib_window_tuples" in exprs(p), "window sizes")
    find(lambda p: "joinlib_late_messages_total" in exprs(p), "late messages")
    find(lambda p: "joinlib_input_tuples_total" in exprs(p) and "rate(" in exprs(p), "input tuples/s")
    plan = find(lambda p: "joinlib_plan_info" in exprs(p), "the current plan")
    assert plan[0]["type"] == "table" and plan[0]["targets"][0].get("format") == "table"
    used = {base_metric_name(n, catalogue) for p in panels for t in p["targets"]
            for n in metric_names(grafana_to_promql(t["expr"]))}
    missing = {m["name"] for m in catalogue["metrics"]} - used
    assert not missing, f"catalogued metrics on no dashboard: {missing}"


def test_every_panel_is_documented():
    doc = (REPO / "docs" / "deploy.md").read_text(encoding="utf-8")
    for path in DASHBOARDS:
        dash = json.loads(path.read_text())
        assert dash["uid"] in doc
        for p in iter_panels(dash["panels"]):
            if p["type"] != "row":
                assert p["title"] in doc, f"panel {p['title']!r} not described in docs/deploy.md"


def test_grafana_provisioning():
    ds_file = load_yaml(MONITORING / "grafana/provisioning/datasources/prometheus.yaml")
    assert ds_file["apiVersion"] == 1
    [ds] = ds_file["datasources"]
    assert (ds["uid"], ds["type"]) == (DS["uid"], DS["type"]) and ds["isDefault"] is True
    prov = load_yaml(MONITORING / "grafana/provisioning/dashboards/joinlib.yaml")
    assert prov["apiVersion"] == 1
    [provider] = prov["providers"]
    assert provider["type"] == "file" and provider["options"]["path"].startswith("/")
    scrape = load_yaml(PROMETHEUS_YML)["global"]["scrape_interval"]
    assert ds["jsonData"]["timeInterval"] == scrape


# ------------------------------------------------------------------------------ prometheus

def test_prometheus_rules_parse_and_use_catalogued_metrics(catalogue, known_metric_names):
    rules = rule_exprs()
    assert rules
    for where, expr in rules:
        try:
            names = metric_names(expr)
        except Exception as e:
            pytest.fail(f"{where}: does not parse: {e}\n  {expr}")
        for n in names:
            assert base_metric_name(n, catalogue) in known_metric_names, f"{where}: {n} not catalogued"


def test_prometheus_targets_are_the_compose_services_serving_metrics(compose):
    config = load_yaml(PROMETHEUS_YML)
    assert config["global"]["scrape_interval"]
    scraped: dict[str, str] = {}
    for job in config["scrape_configs"]:
        assert job.get("metrics_path", "/metrics") == "/metrics"
        for sc in job["static_configs"]:
            for t in sc["targets"]:
                host, _, port = t.rpartition(":")
                assert host in compose["services"], f"job {job['job_name']}: target {t} is no compose service"
                env = compose["services"][host].get("environment", {})
                assert port == str(env.get("METRICS_PORT")), f"{t}: port differs from METRICS_PORT"
                assert host not in scraped, f"{host} scraped twice"
                scraped[host] = job["job_name"]
    serving = {n for n, s in compose["services"].items()
               if "METRICS_PORT" in (s.get("environment") or {})}
    assert set(scraped) == serving
    for host, job in scraped.items():
        component = "node" if host.startswith("node-") else host
        assert job == f"joinlib-{component}"


def test_prometheus_jobs_equal_helm_service_monitor_jobs(helm_runner):
    jobs = {j["job_name"] for j in load_yaml(PROMETHEUS_YML)["scrape_configs"]}
    docs = helm_runner.template()
    helm_jobs = {d["metadata"]["labels"]["joinlib.io/job"] for d in docs
                 if d["kind"] == "Service" and d["metadata"]["labels"].get("joinlib.io/metrics") == "true"}
    assert jobs == helm_jobs


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_annotation_promql_parses_and_uses_catalogued_metrics(path, catalogue, known_metric_names):
    dash = json.loads(path.read_text(encoding="utf-8"))
    for ann in dash["annotations"]["list"]:
        if ann.get("builtIn"):
            continue
        assert ann["datasource"] == DS and ann["target"]["datasource"] == DS, ann["name"]
        assert ann["expr"] == ann["target"]["expr"], ann["name"]
        names = metric_names(grafana_to_promql(ann["expr"]))
        assert names and all(base_metric_name(n, catalogue) in known_metric_names for n in names), ann["name"]


def test_plan_changes_are_annotated_and_on_a_panel():
    """Adaptive re-planning (docs/adaptive.md): plan switches as an annotation and on panels."""
    [dash] = [json.loads(p.read_text()) for p in DASHBOARDS if p.stem == "joinlib-overview"]
    anns = [a for a in dash["annotations"]["list"] if "joinlib_plan_generation" in a.get("expr", "")]
    assert anns and anns[0]["enable"] and "changes(" in anns[0]["expr"]
    exprs = [t["expr"] for p in iter_panels(dash["panels"]) for t in p.get("targets", [])]
    for metric in ("joinlib_plan_generation", "joinlib_plan_changes_total", "joinlib_adaptive_triggers_total"):
        assert any(metric in e for e in exprs), metric
