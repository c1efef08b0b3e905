"""Generate the Grafana dashboards in monitoring/grafana/dashboards/ from the panel list below.

    python monitoring/grafana/build_dashboards.py          # rewrite the JSON files
    python monitoring/grafana/build_dashboards.py --check  # exit 1 if a file is out of date

The JSON files are committed (Grafana provisions them as they are); tests/deploy checks that they
equal this script's output, that every expression parses and that every metric it names is in
monitoring/metrics.yaml. Edit panels here, not in the JSON.

Conventions: stable dashboard `uid`, `"id": null`, every panel and target on the provisioned
datasource {"type": "prometheus", "uid": "prometheus"}; `$__rate_interval` in every rate().
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Optional

OUT_DIR = Path(__file__).resolve().parent / "dashboards"
DS = {"type": "prometheus", "uid": "prometheus"}
SCHEMA_VERSION = 39

# label filters bound to the dashboard variables
LINK = 'src=~"$src", dst=~"$dst"'
LINK_KIND = 'src=~"$src", dst=~"$dst", kind=~"$kind"'
SITE = 'site=~"$site"'
RI = "$__rate_interval"


def target(expr: str, legend: str = "", ref: str = "A", *, instant: bool = False,
           table: bool = False) -> dict[str, Any]:
    t: dict[str, Any] = {"datasource": DS, "editorMode": "code", "expr": expr, "refId": ref,
                         "legendFormat": legend or "__auto", "range": not instant, "instant": instant}
    if table:
        t["format"] = "table"
    return t


class Layout:
    """Places panels left to right on Grafana's 24-column grid, wrapping into new lines."""

    def __init__(self) -> None:
        self.panels: list[dict[str, Any]] = []
        self.x = self.y = self.line_h = 0

    def _next_id(self) -> int:
        return len(self.panels) + 1

    def row(self, title: str) -> None:
        self.y += self.line_h
        self.x = self.line_h = 0
        self.panels.append({"type": "row", "id": self._next_id(), "title": title, "collapsed": False,
                            "gridPos": {"h": 1, "w": 24, "x": 0, "y": self.y}, "panels": []})
        self.y += 1

    def add(self, panel: dict[str, Any], w: int, h: int) -> None:
        if self.x + w > 24:
            self.y += self.line_h
            self.x = self.line_h = 0
        panel["id"] = self._next_id()
        panel["gridPos"] = {"h": h, "w": w, "x": self.x, "y": self.y}
        self.panels.append(panel)
        self.x += w
        self.line_h = max(self.line_h, h)


def timeseries(title: str, description: str, targets: list[dict], unit: str, *,
               overrides: Optional[list] = None, stack: bool = False) -> dict[str, Any]:
    return {
        "type": "timeseries", "title": title, "description": description, "datasource": DS,
        "targets": targets,
        "fieldConfig": {
            "defaults": {
                "unit": unit, "min": 0,
                "custom": {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10 if stack else 0,
                           "showPoints": "never", "spanNulls": False,
                           "stacking": {"mode": "normal" if stack else "none", "group": "A"}},
            },
            "overrides": overrides or [],
        },
        "options": {"legend": {"displayMode": "table", "placement": "right", "showLegend": True,
                               "calcs": ["lastNotNull", "max"]},
                    "tooltip": {"mode": "multi", "sort": "desc"}},
    }


def stat(title: str, description: str, targets: list[dict], unit: str, *,
         decimals: Optional[int] = None, thresholds: Optional[list] = None) -> dict[str, Any]:
    defaults: dict[str, Any] = {"unit": unit, "color": {"mode": "thresholds"},
                                "thresholds": {"mode": "absolute",
                                               "steps": thresholds or [{"color": "green", "value": None}]}}
    if decimals is not None:
        defaults["decimals"] = decimals
    return {
        "type": "stat", "title": title, "description": description, "datasource": DS,
        "targets": targets,
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                    "colorMode": "value", "graphMode": "area", "justifyMode": "auto",
                    "textMode": "auto", "orientation": "auto"},
    }


def quantile_expr(metric: str, q: float, by: str, selector: str) -> str:
    return (f"histogram_quantile({q}, sum by (le, {by}) "
            f"(rate({metric}_bucket{{{selector}}}[{RI}])))")


def naive_dashed() -> list[dict]:
    return [{"matcher": {"id": "byRegexp", "options": "^naive .*"},
             "properties": [{"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}},
                            {"id": "custom.lineWidth", "value": 2}]}]


def overview_panels(L: Layout) -> None:
    L.row("Overview")
    L.add(timeseries(
        "Input tuples/s", "Source tuples per second arriving at each site's node, per stream.",
        [target(f"sum by (site, stream) (rate(joinlib_input_tuples_total{{{SITE}}}[{RI}]))",
                "{{site}} {{stream}}")], "short"), 8, 8)
    L.add(timeseries(
        "Results/s and rows/s", "Join results per second emitted by each node, per query; and, for a query "
        "with a SELECT list and a sink topic, the rows per second written there (joinlib_rows_written_total: "
        "equal to the results once the node has caught up).",
        [target(f'sum by (site, query) (rate(joinlib_results_total{{{SITE}, query=~"$query"}}[{RI}]))',
                "{{query}} @ {{site}}"),
         target(f'sum by (site, query, topic) (rate(joinlib_rows_written_total{{{SITE}, query=~"$query"}}[{RI}]))',
                "rows {{query}} @ {{site}} → {{topic}}", "B")], "short"), 8, 8)
    L.add(stat(
        "Shipped / naive bytes", "Bytes actually shipped between sites over the selected time range, "
        "as a fraction of what shipping every tuple to every other site would have cost "
        "(joinlib_naive_bytes_total). Below 100% is the saving of the plan.",
        [target(f"sum(increase(joinlib_shipped_bytes_total{{{LINK}}}[$__range])) / "
                f"sum(increase(joinlib_naive_bytes_total{{{LINK}}}[$__range]))", "shipped / naive",
                instant=True)], "percentunit", decimals=1,
        thresholds=[{"color": "green", "value": None}, {"color": "orange", "value": 0.5},
                    {"color": "red", "value": 1}]), 4, 8)
    L.add(stat(
        "Targets up", "Scrape targets of each joinlib job that answer /metrics (Prometheus `up`).",
        [target('sum by (job) (up{job=~"joinlib-.+"})', "{{job}}", instant=True)], "short",
        decimals=0, thresholds=[{"color": "red", "value": None}, {"color": "green", "value": 1}]), 4, 8)
    plan = {
        "type": "table", "title": "Current plan",
        "description": "joinlib_plan_info: the plan each query currently runs, one row per head "
                       "stream with its join sequence (S2:SM-S1,S3:SP-D = join S2 with SM-S1, then S3 "
                       "with SP-D; @site/ prefix: the sequence starts at another site).",
        "datasource": DS,
        "targets": [target('max by (query, head, sequence) (joinlib_plan_info{query=~"$query"})',
                           instant=True, table=True)],
        "fieldConfig": {"defaults": {"custom": {"align": "auto"}}, "overrides": []},
        "options": {"showHeader": True, "cellHeight": "sm",
                    "sortBy": [{"displayName": "query", "desc": False}]},
        "transformations": [{"id": "organize", "options": {
            "excludeByName": {"Time": True, "Value": True},
            "indexByName": {"query": 0, "head": 1, "sequence": 2},
            "renameByName": {}}}],
    }
    L.add(plan, 24, 6)


def network_panels(L: Layout) -> None:
    L.row("Network: links between sites")
    for q in ("0.5", "0.95", "0.99"):
        pct = f"p{round(float(q) * 100)}"
        L.add(timeseries(
            f"Transmission time {pct} per link and kind",
            f"{pct} of the time from sending a message at site src until site dst received it "
            "(joinlib_transmission_seconds), per link and message kind (full, partial, update).",
            [target(quantile_expr("joinlib_transmission_seconds", float(q), "src, dst, kind", LINK_KIND),
                    "{{src}}→{{dst}} {{kind}}")], "s"), 8, 9)
    L.add(timeseries(
        "Bytes/s per link and kind vs naive",
        "Bytes per second shipped on each link per message kind (solid), next to "
        "joinlib_naive_bytes_total (dashed, 'naive'): what shipping every tuple would have cost.",
        [target(f"sum by (src, dst, kind) (rate(joinlib_shipped_bytes_total{{{LINK_KIND}}}[{RI}]))",
                "{{src}}→{{dst}} {{kind}}"),
         target(f"sum by (src, dst) (rate(joinlib_naive_bytes_total{{{LINK}}}[{RI}]))",
                "naive {{src}}→{{dst}}", "B")], "Bps", overrides=naive_dashed()), 12, 9)
    L.add(timeseries(
        "Messages/s per link and kind", "Messages per second shipped on each link, per message kind.",
        [target(f"sum by (src, dst, kind) (rate(joinlib_shipped_messages_total{{{LINK_KIND}}}[{RI}]))",
                "{{src}}→{{dst}} {{kind}}")], "short"), 12, 9)
    L.add({
        "type": "bargauge", "title": "Bytes per link over the range vs naive",
        "description": "Total bytes shipped per link in the selected time range, next to the naive "
                       "cost of shipping every tuple on that link.",
        "datasource": DS,
        "targets": [
            target(f"sum by (src, dst) (increase(joinlib_shipped_bytes_total{{{LINK}}}[$__range]))",
                   "{{src}}→{{dst}}", instant=True),
            target(f"sum by (src, dst) (increase(joinlib_naive_bytes_total{{{LINK}}}[$__range]))",
                   "naive {{src}}→{{dst}}", "B", instant=True)],
        "fieldConfig": {"defaults": {"unit": "decbytes", "min": 0, "color": {"mode": "palette-classic"}},
                        "overrides": []},
        "options": {"displayMode": "gradient", "orientation": "horizontal", "showUnfilled": True,
                    "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}},
    }, 12, 9)
    L.add(timeseries(
        "Mean message size per link and kind",
        "Bytes per message on each link and kind (shipped bytes / shipped messages).",
        [target(f"sum by (src, dst, kind) (rate(joinlib_shipped_bytes_total{{{LINK_KIND}}}[{RI}])) / "
                f"sum by (src, dst, kind) (rate(joinlib_shipped_messages_total{{{LINK_KIND}}}[{RI}]))",
                "{{src}}→{{dst}} {{kind}}")], "decbytes"), 12, 9)


def node_panels(L: Layout) -> None:
    L.row("Nodes: processing, state, lag")
    for q in ("0.5", "0.95", "0.99"):
        pct = f"p{round(float(q) * 100)}"
        L.add(timeseries(
            f"Processing time {pct} per node and operator",
            f"{pct} of the time one operator invocation takes on a node "
            "(joinlib_processing_seconds; operators tick, probe, semijoin, sync, ship).",
            [target(quantile_expr("joinlib_processing_seconds", float(q), "site, operator", SITE),
                    "{{site}} {{operator}}")], "s"), 8, 9)
    L.add(timeseries(
        "Processing load per node and operator",
        "Seconds spent in each operator per second of wall time (1 = one core fully busy).",
        [target(f"sum by (site, operator) (rate(joinlib_processing_seconds_sum{{{SITE}}}[{RI}]))",
                "{{site}} {{operator}}")], "percentunit", stack=True), 12, 9)
    L.add(timeseries(
        "Consumer lag", "Messages the consumer of each query's run at each node is behind the end of each topic "
        "(joinlib_consumer_lag_messages); growing lag means the node cannot keep up.",
        [target(f"max by (site, query, topic) (joinlib_consumer_lag_messages{{{SITE}}})",
                "{{site}} {{query}} {{topic}}")], "short"), 12, 9)
    L.add(timeseries(
        "Window sizes", "Tuples held in each node's window stores per stream and store "
        "(home window, SP-S, SM-S1, SM-S2, SM-D1).",
        [target(f"sum by (site, stream, store) (joinlib_window_tuples{{{SITE}}})",
                "{{site}} {{stream}} {{store}}")], "short"), 12, 9)
    L.add(timeseries(
        "Late messages/s", "Messages per second that arrived after the allowed delay (max_delay), "
        "per node and kind (full, partial, update; input = source tuples after their epoch closed). "
        "Anything above zero can mean missing results.",
        [target(f"sum by (site, kind) (rate(joinlib_late_messages_total{{{SITE}}}[{RI}]))",
                "{{site}} {{kind}}")], "short"), 8, 9)
    L.add(stat(
        "Late messages in range", "All late messages in the selected time range.",
        [target(f"sum(increase(joinlib_late_messages_total{{{SITE}}}[$__range]))", "late",
                instant=True)], "short", decimals=0,
        thresholds=[{"color": "green", "value": None}, {"color": "red", "value": 1}]), 4, 9)
    L.add(timeseries(
        "Checkpoint time p99 per node", "p99 of the time a node takes to save a checkpoint: producer flush "
        "plus an atomic Redis snapshot of its windows and state (joinlib_checkpoint_seconds; nodes with "
        "REDIS_URL only).",
        [target(quantile_expr("joinlib_checkpoint_seconds", 0.99, "site", SITE), "{{site}}")], "s"), 12, 8)
    L.add(timeseries(
        "Resumes from checkpoints", "Runs a node resumed from its last checkpoint after a restart, over the "
        "selected range (joinlib_resumes_total): each is a crash the run survived without losing or "
        "duplicating results.",
        [target(f'sum by (site, query) (increase(joinlib_resumes_total{{{SITE}}}[$__range]))',
                "{{site}} {{query}}")], "short"), 12, 8)
    L.add(timeseries(
        "Checkpoint age per node", "Seconds since each node saved its last checkpoint "
        "(time() - joinlib_checkpoint_timestamp_seconds; nodes with REDIS_URL only): about the checkpoint "
        "interval (1 s by default); growing means a node stopped checkpointing and a restart would redo more.",
        [target(f"time() - max by (site) (joinlib_checkpoint_timestamp_seconds{{{SITE}}})", "{{site}}")], "s"),
        12, 8)


def live_panels(L: Layout) -> None:
    L.row("Live sources: dead letters, watermarks")
    L.add(timeseries(
        "Dead letters/s", "Records of the users' topics written to dlq.<query> per second, per query, stream "
        "and reason: late (event time below the partition's watermark), bad_json, bad_avro, missing_field, "
        "wrong_type, no_value, duplicate_id, too_far_ahead (joinlib_dead_letters_total).",
        [target(f"sum by (query, stream, reason) (rate(joinlib_dead_letters_total{{{SITE}}}[{RI}]))",
                "{{query}} {{stream}} {{reason}}")], "short"), 12, 8)
    L.add(timeseries(
        "Watermark lag per live stream", "Processing time minus the event-time watermark of each live stream "
        "at its site (joinlib_watermark_lag_seconds): about max_delay plus the sources' own delay; it grows "
        "by the idle timeout when a site goes silent, and without bound when a node falls behind.",
        [target(f"max by (site, query, stream) (joinlib_watermark_lag_seconds{{{SITE}}})",
                "{{site}} {{query}} {{stream}}")], "s"), 12, 8)
    L.add(timeseries(
        "Rejected messages/s", "Messages of joinlib's own topics (control, node.<query>.<site>, "
        "src.<query>.<stream>) that a node or the planner rejected per second, per reader, topic and reason: "
        "undecodable, invalid, bad_header (joinlib_rejected_messages_total). Each is logged and ignored; "
        "anything above zero is a misconfigured or hostile writer.",
        [target(f"sum by (site, topic, reason) (rate(joinlib_rejected_messages_total[{RI}]))",
                "{{site}} {{topic}} {{reason}}")], "short"), 12, 8)
    L.add(timeseries(
        "Re-partition gain and moves", "Per live partitioned query submitted with --repartition: at the "
        "planner's latest check, the rate model's bytes/s of its running partition function over one fitted to "
        "its current per-value rates (joinlib_repartition_gain; it moves past 1 + threshold), and the moves over "
        "the selected range (joinlib_repartitions_total).",
        [target("max by (query) (joinlib_repartition_gain)", "gain {{query}}"),
         target("sum by (query) (increase(joinlib_repartitions_total[$__range]))", "moves {{query}}", "B")],
        "short"), 12, 8)


QUERY = 'query=~"$query"'


def adaptive_panels(L: Layout) -> None:
    L.row("Adaptive re-planning (--plan adaptive)")
    L.add(timeseries(
        "Plan generation per node", "The plan generation each node runs per query (joinlib_plan_generation: 0 is "
        "the initial plan, +1 per plan change). All nodes of a query step up together: they switch at one "
        "agreed head epoch. The dashboard's 'Plan changes' annotations mark the steps on every panel.",
        [target(f"max by (site, query) (joinlib_plan_generation{{{SITE}, {QUERY}}})", "{{query}} @ {{site}}")],
        "short"), 8, 8)
    L.add(stat(
        "Plan changes in range", "Plan changes per query in the selected time range (joinlib_plan_changes_total; "
        "every node counts each change once, so the maximum over the nodes).",
        [target(f"max by (query) (increase(joinlib_plan_changes_total{{{QUERY}}}[$__range]))", "{{query}}",
                instant=True)], "short", decimals=0), 4, 8)
    L.add(timeseries(
        "Re-planning triggers per stream", "Statistics changes past the threshold per stream "
        "(joinlib_adaptive_triggers_total): its rate, tuple size or a selectivity moved by more than the "
        "threshold for persistence intervals in a row and its node asked for re-planning.",
        [target(f"sum by (query, stream) (increase(joinlib_adaptive_triggers_total{{{SITE}, {QUERY}}}[{RI}]))",
                "{{query}} {{stream}}")], "short"), 12, 8)
    L.add(timeseries(
        "Measured stream rates", "Each stream's rate as its node measures it per measurement interval "
        "(joinlib_measured_rate, tuples/s): what re-planning decides on.",
        [target(f"max by (query, stream) (joinlib_measured_rate{{{SITE}, {QUERY}}})", "{{query}} {{stream}}")],
        "short"), 12, 8)
    L.add(timeseries(
        "Measured tuple sizes", "Mean encoded tuple size per stream per measurement interval "
        "(joinlib_measured_tuple_bytes).",
        [target(f"max by (query, stream) (joinlib_measured_tuple_bytes{{{SITE}, {QUERY}}})",
                "{{query}} {{stream}}")], "decbytes"), 6, 8)
    L.add(timeseries(
        "Measured selectivities", "Per stream and join attribute, the chance that two tuples share the value "
        "(joinlib_measured_selectivity).",
        [target(f"max by (query, stream, attribute) (joinlib_measured_selectivity{{{SITE}, {QUERY}}})",
                "{{query}} {{stream}}.{{attribute}}")], "short"), 6, 8)
    L.add(timeseries(
        "Adaptive protocol messages/s", "Messages/s of the re-planning and migration protocol per node and the "
        "paper's category: modification (statistics reports, plan updates, DNU relays), migration (window "
        "requests and copies), sync (LOCAL_READY / GLOBAL_READY) (joinlib_adaptive_messages_total).",
        [target(f"sum by (site, category) (rate(joinlib_adaptive_messages_total{{{SITE}}}[{RI}]))",
                "{{site}} {{category}}")], "short", stack=True), 12, 8)


def plan_change_annotation() -> dict[str, Any]:
    """A Grafana annotation on every panel where a query's plan generation changed."""
    expr = f"max by (query) (changes(joinlib_plan_generation{{{QUERY}}}[{RI}])) > 0"
    return {"name": "Plan changes", "datasource": DS, "enable": True, "hide": False,
            "iconColor": "rgba(163, 82, 204, 1)", "expr": expr, "step": "15s",
            "target": {"datasource": DS, "expr": expr, "refId": "PlanChanges"},
            "titleFormat": "plan change", "textFormat": "{{query}}: adaptive re-planning switched the plan",
            "tagKeys": "query", "useValueForTime": False}


def variable(name: str, label: str, query: str) -> dict[str, Any]:
    return {"name": name, "label": label, "type": "query", "datasource": DS,
            "query": {"qryType": 1, "query": query, "refId": f"var-{name}"},
            "definition": query, "refresh": 2, "sort": 1, "multi": True, "includeAll": True,
            "allValue": ".*", "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
            "options": [], "hide": 0, "regex": ""}


def overview() -> dict[str, Any]:
    L = Layout()
    overview_panels(L)
    network_panels(L)
    node_panels(L)
    live_panels(L)
    adaptive_panels(L)
    kind = {"name": "kind", "label": "message kind", "type": "custom", "query": "full,partial,update",
            "multi": True, "includeAll": True, "allValue": ".*",
            "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
            "options": [], "hide": 0}
    return {
        "id": None,
        "uid": "joinlib-overview",
        "title": "joinlib / overview",
        "description": "Distributed sliding-window joins: what crosses the links (bytes, messages, "
                       "transmission time) against the naive cost, node processing, windows, lag, "
                       "late data and the current plan. Panels: docs/deploy.md.",
        "tags": ["joinlib"],
        "timezone": "browser",
        "editable": False,
        "graphTooltip": 1,
        "refresh": "10s",
        "time": {"from": "now-15m", "to": "now"},
        "timepicker": {},
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "links": [],
        "annotations": {"list": [{
            "builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"}, "enable": True,
            "hide": True, "iconColor": "rgba(0, 211, 255, 1)", "name": "Annotations & Alerts",
            "type": "dashboard"}, plan_change_annotation()]},
        "templating": {"list": [
            variable("query", "query", "label_values(joinlib_plan_info, query)"),
            variable("site", "site", "label_values(joinlib_processing_seconds_count, site)"),
            variable("src", "from site", "label_values(joinlib_shipped_bytes_total, src)"),
            variable("dst", "to site", "label_values(joinlib_shipped_bytes_total, dst)"),
            kind,
        ]},
        "panels": L.panels,
    }


DASHBOARDS = {"joinlib-overview.json": overview}


def render(build) -> str:
    return json.dumps(build(), indent=2, ensure_ascii=False) + "\n"


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only report files that differ")
    args = ap.parse_args(argv)
    stale = []
    for name, build in DASHBOARDS.items():
        path = OUT_DIR / name
        text = render(build)
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(path)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            print(path)
    for path in stale:
        print(f"out of date: {path} (run python monitoring/grafana/build_dashboards.py)", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
