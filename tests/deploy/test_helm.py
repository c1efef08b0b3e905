"""helm/joinlib: `helm lint` and `helm template` with the default values and with overrides
(five sites, every optional feature), rendered manifests valid for Kubernetes 1.30
(kubernetes-validate, strict), wiring that matches docs/contracts.md, and a values schema that
rejects bad values."""
from __future__ import annotations

import json
import shutil
from typing import Any

import pytest
import yaml

from tests.deploy.conftest import CHART, K8S_VERSION, load_yaml, require_module

FIVE_SITES: dict[str, Any] = {
    "sites": ["s1", "s2", {"name": "s3", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                           "nodeSelector": {"topology.kubernetes.io/zone": "a"},
                           "extraEnv": [{"name": "FOO", "value": "bar"}]}, "s4", "s5"],
    "kafka": {"bootstrapServers": "kafka-0.kafka:9092,kafka-1.kafka:9092"},
    "redis": {"url": "redis://redis-master:6379/2"},
}
EVERYTHING = {
    **FIVE_SITES,
    "sites": ["s1", {"name": "s2", "replicas": 3}, *FIVE_SITES["sites"][2:]],   # scale-out: 3 instances of s2
    "redis": {"url": "redis://unused:6379/0", "urlSecret": {"name": "redis-auth", "key": "url"}},
    "query": {"file": "examples/star4.yaml", "inline": "name: q\nstreams: {}\n"},
    "metrics": {"port": 9200, "serviceMonitor": {"enabled": True, "labels": {"release": "kps"}}},
    "source": {"kind": "Deployment", "fast": True, "data": {"existingClaim": "data", "subPath": "star4"}},
    "spark": {"persistence": {"existingClaim": "spark-out"}, "livenessProbe": {"enabled": True}},
    "imagePullSecrets": [{"name": "regcred"}],
    "extraEnv": [{"name": "LOG_LEVEL", "value": "debug"}],
    "node": {"tolerations": [{"key": "k", "operator": "Exists"}]},
}
VARIANTS = {"default": None, "five-sites": FIVE_SITES, "everything": EVERYTHING}
NO_K8S_SCHEMA = {"ServiceMonitor"}  # CRDs: checked by hand below


def variant_args(runner, name: str) -> tuple[str, ...]:
    values = VARIANTS[name]
    return () if values is None else ("-f", str(runner.values_file(name, values)))


def by_kind(docs: list[dict], kind: str) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def pod_spec(workload: dict) -> dict:
    return workload["spec"]["template"]["spec"]


def container_env(workload: dict, docs: list[dict]) -> dict[str, str]:
    """Effective env of the first container: envFrom ConfigMaps, then env (secret refs as 'secret:')."""
    c = pod_spec(workload)["containers"][0]
    maps = by_kind(docs, "ConfigMap")
    env: dict[str, str] = {}
    for src in c.get("envFrom", []):
        env.update(maps[src["configMapRef"]["name"]]["data"])
    for e in c.get("env", []):
        env[e["name"]] = e.get("value", "secret:" + json.dumps(e.get("valueFrom", {}), sort_keys=True))
    return env


# ------------------------------------------------------------------------------ lint/template

@pytest.mark.parametrize("variant", VARIANTS)
def test_helm_lint(helm_runner, variant):
    res = helm_runner.lint(*variant_args(helm_runner, variant))
    assert res.returncode == 0, f"helm lint ({variant}) failed:\n{res.stdout}\n{res.stderr}"


@pytest.mark.parametrize("variant", VARIANTS)
def test_rendered_manifests_validate_for_k8s_130(helm_runner, variant):
    kv = require_module("kubernetes_validate")
    docs = helm_runner.template(*variant_args(helm_runner, variant))
    assert docs
    for doc in docs:
        name = f"{doc['kind']}/{doc['metadata']['name']}"
        if doc["kind"] in NO_K8S_SCHEMA:
            continue
        try:
            kv.validate(doc, K8S_VERSION, strict=True)
        except kv.ValidationError as e:
            path = ".".join(str(p) for p in e.path)
            pytest.fail(f"{variant}: {name} invalid for Kubernetes {K8S_VERSION}: {path}: {e.message}")
        except kv.SchemaNotFoundError:
            pytest.fail(f"{variant}: {name}: no Kubernetes {K8S_VERSION} schema for {doc['apiVersion']}")


def test_default_render_has_the_example_sites_and_every_service(helm_runner):
    docs = helm_runner.template()
    deployments = by_kind(docs, "Deployment")
    assert set(deployments) == {"demo-joinlib-node-r1", "demo-joinlib-node-r2", "demo-joinlib-node-r3",
                                "demo-joinlib-planner", "demo-joinlib-spark"}
    assert set(by_kind(docs, "Job")) == {"demo-joinlib-source"}
    assert not by_kind(docs, "ServiceMonitor"), "ServiceMonitor must be opt-in"
    env = container_env(deployments["demo-joinlib-node-r1"], docs)
    assert env["KAFKA_BOOTSTRAP_SERVERS"] == "kafka:9092" and env["REDIS_URL"] == "redis://redis:6379/0"


def test_five_sites_give_five_node_deployments_wired_per_contract(helm_runner):
    docs = helm_runner.template(*variant_args(helm_runner, "five-sites"))
    deployments = by_kind(docs, "Deployment")
    services = by_kind(docs, "Service")
    for site in ["s1", "s2", "s3", "s4", "s5"]:
        name = f"demo-joinlib-node-{site}"
        d = deployments[name]
        assert d["spec"]["replicas"] == 1 and d["spec"]["strategy"]["type"] == "Recreate"
        c = pod_spec(d)["containers"][0]
        assert c["command"] == ["python", "-m", "services.node", "--site", site, "--serve"]
        env = container_env(d, docs)
        assert env["JOINLIB_SITE"] == site
        assert env["KAFKA_BOOTSTRAP_SERVERS"] == "kafka-0.kafka:9092,kafka-1.kafka:9092"
        assert env["REDIS_URL"] == "redis://redis-master:6379/2"
        assert env["METRICS_PORT"] == "9100"
        port = {p["name"]: p["containerPort"] for p in c["ports"]}["metrics"]
        assert port == 9100
        for probe in ("livenessProbe", "readinessProbe"):
            assert c[probe]["httpGet"] == {"path": "/metrics", "port": "metrics"}
        assert services[name]["metadata"]["labels"]["joinlib.io/job"] == "joinlib-node"
    s3 = deployments["demo-joinlib-node-s3"]
    assert pod_spec(s3)["containers"][0]["resources"]["requests"] == {"cpu": "1", "memory": "1Gi"}
    assert pod_spec(s3)["containers"][0]["resources"]["limits"] == {"memory": "1Gi"}  # from node defaults
    assert pod_spec(s3)["nodeSelector"] == {"topology.kubernetes.io/zone": "a"}
    assert container_env(s3, docs)["FOO"] == "bar"


def test_planner_source_spark_commands_and_probes(helm_runner):
    docs = helm_runner.template()
    dep = by_kind(docs, "Deployment")
    planner = pod_spec(dep["demo-joinlib-planner"])["containers"][0]
    assert planner["command"] == ["python", "-m", "services.planner"]
    assert container_env(dep["demo-joinlib-planner"], docs)["PLANNER_PORT"] == "8080"
    assert planner["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert planner["livenessProbe"]["httpGet"] == {"path": "/metrics", "port": "metrics"}
    svc = by_kind(docs, "Service")["demo-joinlib-planner"]
    assert {p["name"]: p["port"] for p in svc["spec"]["ports"]} == {"http": 8080, "metrics": 9100}

    job = by_kind(docs, "Job")["demo-joinlib-source"]
    src = pod_spec(job)["containers"][0]["command"]
    assert src[:3] == ["python", "-m", "services.source"]
    assert src[src.index("--query") + 1] == "examples/routers.yaml"
    gen = pod_spec(job)["initContainers"][0]["command"]
    assert gen[:4] == ["python", "-m", "joinlib", "gen"]
    assert gen[gen.index("--out") + 1] == src[src.index("--data") + 1]

    spark = dep["demo-joinlib-spark"]
    assert pod_spec(spark)["containers"][0]["command"] == ["python", "-m", "services.spark.results_job"]
    assert pod_spec(spark)["containers"][0]["image"].startswith("joinlib-spark:")
    assert container_env(spark, docs)["SPARK_OUTPUT_DIR"] == "/data/spark-output"
    # Ivy may write /opt/spark-ivy in the Spark container; everything else runs read-only
    assert pod_spec(spark)["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is False
    for d in [*dep.values(), job]:
        if d is not spark:
            assert pod_spec(d)["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True


def test_everything_variant(helm_runner):
    docs = helm_runner.template(*variant_args(helm_runner, "everything"))
    dep = by_kind(docs, "Deployment")
    env = container_env(dep["demo-joinlib-node-s1"], docs)
    assert env["REDIS_URL"].startswith("secret:") and "redis-auth" in env["REDIS_URL"]
    assert env["LOG_LEVEL"] == "debug" and env["METRICS_PORT"] == "9200"
    source = dep["demo-joinlib-source"]
    cmd = pod_spec(source)["containers"][0]["command"]
    assert "--fast" in cmd and cmd[cmd.index("--query") + 1] == "/etc/joinlib/query.yaml"
    assert "initContainers" not in pod_spec(source)
    assert by_kind(docs, "ConfigMap")["demo-joinlib-query"]["data"]["query.yaml"] == "name: q\nstreams: {}\n"
    sm = by_kind(docs, "ServiceMonitor")["demo-joinlib"]
    assert sm["apiVersion"] == "monitoring.coreos.com/v1" and sm["metadata"]["labels"]["release"] == "kps"
    assert sm["spec"]["jobLabel"] == "joinlib.io/job"
    selected = [s for s in by_kind(docs, "Service").values()
                if sm["spec"]["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()]
    assert len(selected) == 5 + 3  # nodes, planner, source, spark
    for s in selected:
        assert any(p["name"] == sm["spec"]["endpoints"][0]["port"] for p in s["spec"]["ports"])
    spark = pod_spec(dep["demo-joinlib-spark"])["containers"][0]
    assert spark["livenessProbe"]["initialDelaySeconds"] == 120
    s2, s1 = dep["demo-joinlib-node-s2"], dep["demo-joinlib-node-s1"]   # replicas share scaled-out plans only
    assert s2["spec"]["replicas"] == 3 and s2["spec"]["strategy"]["type"] == "RollingUpdate"
    assert pod_spec(s2)["containers"][0]["command"][-2:] == ["--serve", "--shared"]
    assert s1["spec"]["replicas"] == 1 and pod_spec(s1)["containers"][0]["command"][-1] == "--serve"


@pytest.mark.parametrize("variant", VARIANTS)
def test_selectors_match_pod_labels(helm_runner, variant):
    docs = helm_runner.template(*variant_args(helm_runner, variant))
    pods = [d["spec"]["template"]["metadata"]["labels"] for d in docs if d["kind"] in ("Deployment", "Job")]
    for d in docs:
        if d["kind"] == "Deployment":
            sel = d["spec"]["selector"]["matchLabels"]
            assert sel.items() <= d["spec"]["template"]["metadata"]["labels"].items()
            assert sum(sel.items() <= p.items() for p in pods) == 1, f"{d['metadata']['name']}: selector not unique"
        if d["kind"] == "Service":
            sel = d["spec"]["selector"]
            assert sum(sel.items() <= p.items() for p in pods) == 1, f"Service {d['metadata']['name']}"
            assert len(d["metadata"]["name"]) <= 63, f"Service name {d['metadata']['name']} > 63 chars"


# ------------------------------------------------------------------------------- values schema

@pytest.mark.parametrize("bad, why", [
    (["--set", "sites=r1"], "sites as a string"),
    (["--set", "sites[0]=R_1"], "site name that is no DNS label"),
    (["--set", "kafka.brokers=x:9092"], "unknown key"),
    (["--set", "source.kind=CronJob"], "source kind"),
    (["--set", "metrics.port=70000"], "port range"),
    (["--set", "redis.url=http://x"], "redis URL scheme"),
    (["--set", "sites[0].name=r1", "--set", "sites[0].replicas=0"], "zero replicas"),
])
def test_values_schema_rejects(helm_runner, bad, why):
    res = helm_runner.template_raw(*bad)
    assert res.returncode != 0, f"helm template accepted {why}: {bad}"
    assert "schema" in res.stderr.lower(), f"{why}: expected a schema error, got:\n{res.stderr}"


def test_duplicate_sites_fail(helm_runner):
    res = helm_runner.template_raw("--set", "sites[0]=r1", "--set", "sites[1].name=r1")
    assert res.returncode != 0 and 'site "r1" is listed twice' in res.stderr


def test_values_yaml_satisfies_its_schema_and_schema_is_strict():
    jsonschema = require_module("jsonschema")
    schema = json.loads((CHART / "values.schema.json").read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    validator = jsonschema.Draft7Validator(schema)
    values = load_yaml(CHART / "values.yaml")
    assert not list(validator.iter_errors(values))
    assert schema["additionalProperties"] is False
    for key, sub in schema["properties"].items():
        if sub.get("type") == "object" and key not in ("global", "podSecurityContext", "securityContext"):
            assert sub.get("additionalProperties") is False, f"{key}: additionalProperties not false"
    assert list(validator.iter_errors({**values, "sites": "r1 r2"}))


def test_notes_render(helm_runner, tmp_path):
    """NOTES.txt is not output by `helm template`; render it through tpl in a copy of the chart."""
    chart = tmp_path / "joinlib"
    shutil.copytree(CHART, chart)
    (chart / "notes-under-test.txt").write_text((CHART / "templates" / "NOTES.txt").read_text())
    (chart / "templates" / "zz-notes.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\ndata:\n"
        "  notes: {{ tpl (.Files.Get \"notes-under-test.txt\") . | quote }}\n")
    for variant in VARIANTS:
        res = helm_runner.template_raw(*variant_args(helm_runner, variant), "--show-only",
                                       "templates/zz-notes.yaml", chart=chart)
        assert res.returncode == 0, res.stderr
        notes = yaml.safe_load(res.stdout)["data"]["notes"]
        assert "python -m joinlib submit" in notes
        sites = ["r1", "r2", "r3"] if variant == "default" else ["s1", "s2", "s3", "s4", "s5"]
        for site in sites:
            assert f"deployment/demo-joinlib-node-{site}" in notes
