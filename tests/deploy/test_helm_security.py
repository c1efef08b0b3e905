"""helm/joinlib security (docs/security.md): off by default (the default render has no credentials),
on in values-production.yaml -- every component gets its Kafka SASL_SSL user, the nodes their Redis
ACL user, the planner its API token, all as files of one Secret, never as values in the manifests --
and both render to valid Kubernetes 1.30 manifests that pass `helm lint --strict`."""
from __future__ import annotations

import base64

import pytest

from tests.deploy.conftest import CHART, K8S_VERSION, load_yaml, require_module
from tests.deploy.test_helm import by_kind, container_env, pod_spec

PRODUCTION = CHART / "values-production.yaml"
SECRET_DIR = "/etc/joinlib/secrets"
WORKLOADS = {"node": "Deployment", "planner": "Deployment", "source": "Job", "spark": "Deployment"}
TEST_CREDENTIALS = {
    "security": {
        "credentials": {"kafka-node-password": "Secret-N-0", "kafka-planner-password": "Secret-P-1",
                        "kafka-source-password": "Secret-S-2", "kafka-spark-password": "Secret-K-3",
                        "redis-node-password": "Secret-R-4", "planner-token": "Secret-T-5"},
        "kafka": {"protocol": "SASL_SSL", "mechanism": "SCRAM-SHA-512",
                  "users": {"node": "u-node", "planner": "u-planner", "source": "u-source", "spark": "u-spark"},
                  "caFromSecret": False, "verifyHostname": False},
        "redis": {"user": "joinlib-node", "caFromSecret": False},
        "planner": {"tokenFromSecret": True},
    },
}


def workloads(docs: list[dict]) -> dict[str, dict]:
    """component -> its first workload (a node Deployment for 'node')."""
    out = {}
    for d in docs:
        comp = d["metadata"].get("labels", {}).get("app.kubernetes.io/component")
        if d["kind"] in ("Deployment", "Job") and comp in WORKLOADS and comp not in out:
            out[comp] = d
    return out


def credential_files(workload: dict) -> dict[str, str]:
    """path in SECRET_DIR -> Secret key, from the pod's credentials volume (and its mount)."""
    spec = pod_spec(workload)
    mounts = {m["name"]: m for m in spec["containers"][0].get("volumeMounts", [])}
    vols = {v["name"]: v for v in spec.get("volumes", [])}
    if "credentials" not in vols:
        assert "credentials" not in mounts
        return {}
    assert mounts["credentials"]["mountPath"] == SECRET_DIR and mounts["credentials"]["readOnly"]
    return {i["path"]: i["key"] for i in vols["credentials"]["secret"]["items"]}


def secret_name(workload: dict) -> str:
    return next(v for v in pod_spec(workload)["volumes"] if v["name"] == "credentials")["secret"]["secretName"]


def test_production_values_lint(helm_runner):
    res = helm_runner.lint("-f", str(PRODUCTION))
    assert res.returncode == 0, f"helm lint (production) failed:\n{res.stdout}\n{res.stderr}"


@pytest.mark.parametrize("variant", ["production", "test-credentials"])
def test_secure_renders_validate_for_k8s_130(helm_runner, variant):
    kv = require_module("kubernetes_validate")
    args = (("-f", str(PRODUCTION)) if variant == "production"
            else ("-f", str(helm_runner.values_file("creds", TEST_CREDENTIALS))))
    for doc in helm_runner.template(*args):
        if doc["kind"] != "ServiceMonitor":
            kv.validate(doc, K8S_VERSION, strict=True)


def test_default_render_has_no_credentials(helm_runner):
    docs = helm_runner.template()
    assert not by_kind(docs, "Secret")
    for comp, w in workloads(docs).items():
        env = container_env(w, docs)
        assert not any(k.startswith(("KAFKA_S", "REDIS_USERNAME", "REDIS_PASSWORD", "JOINLIB_PLANNER_TOKEN"))
                       for k in env), (comp, env)
        assert credential_files(w) == {}


def test_production_values_turn_everything_on(helm_runner):
    values = load_yaml(PRODUCTION)
    assert values["security"]["kafka"]["protocol"] == "SASL_SSL"
    assert values["redis"]["url"].startswith("rediss://")
    docs = helm_runner.template("-f", str(PRODUCTION))
    assert not by_kind(docs, "Secret")  # production names an existing Secret; the chart creates none
    ws = workloads(docs)
    assert set(ws) == set(WORKLOADS)
    for comp, w in ws.items():
        env = container_env(w, docs)
        files = credential_files(w)
        assert secret_name(w) == "joinlib-credentials"
        assert env["KAFKA_SECURITY_PROTOCOL"] == "SASL_SSL" and env["KAFKA_SASL_MECHANISM"] == "SCRAM-SHA-512"
        assert env["KAFKA_SASL_USERNAME"] == f"joinlib-{comp}"
        assert env["KAFKA_SASL_PASSWORD_FILE"] == f"{SECRET_DIR}/kafka-password"
        assert files["kafka-password"] == f"kafka-{comp}-password"
        assert env["KAFKA_SSL_CA_FILE"] == f"{SECRET_DIR}/kafka-ca.crt" and files["kafka-ca.crt"] == "kafka-ca.crt"
        if comp == "node":
            assert env["REDIS_URL"].startswith("rediss://") and env["REDIS_USERNAME"] == "joinlib-node"
            assert env["REDIS_PASSWORD_FILE"] == f"{SECRET_DIR}/redis-password"
            assert env["REDIS_SSL_CA_FILE"] == f"{SECRET_DIR}/redis-ca.crt"
            assert files["redis-password"] == "redis-node-password" and files["redis-ca.crt"] == "redis-ca.crt"
        else:
            assert "REDIS_PASSWORD_FILE" not in env and "redis-password" not in files
        if comp == "planner":
            assert env["JOINLIB_PLANNER_TOKEN_FILE"] == f"{SECRET_DIR}/planner-token"
            assert files["planner-token"] == "planner-token"
        else:
            assert "JOINLIB_PLANNER_TOKEN_FILE" not in env and "planner-token" not in files


def test_credentials_value_creates_the_secret_and_no_manifest_carries_a_password(helm_runner):
    docs = helm_runner.template("-f", str(helm_runner.values_file("creds", TEST_CREDENTIALS)))
    secret = by_kind(docs, "Secret")["demo-joinlib-credentials"]
    creds = TEST_CREDENTIALS["security"]["credentials"]
    assert {k: base64.b64decode(v).decode() for k, v in secret["data"].items()} == creds
    for comp, w in workloads(docs).items():
        assert secret_name(w) == "demo-joinlib-credentials"
        assert container_env(w, docs).get("KAFKA_SSL_VERIFY_HOSTNAME") == "false"
        text = repr(w)
        assert not any(pw in text for pw in creds.values()), comp


def test_security_without_a_secret_fails_with_the_keys_to_provide(helm_runner):
    bad = {"security": {"kafka": {"protocol": "SASL_SSL"}}}
    res = helm_runner.template_raw("-f", str(helm_runner.values_file("bad-sec", bad)))
    assert res.returncode != 0 and "needs Secret keys kafka-" in res.stderr and "existingSecret" in res.stderr
    missing = {"security": {**TEST_CREDENTIALS["security"],
                            "credentials": {"kafka-node-password": "x"}}}
    res = helm_runner.template_raw("-f", str(helm_runner.values_file("missing-sec", missing)))
    assert res.returncode != 0 and "is missing" in res.stderr


@pytest.mark.parametrize("bad", [
    {"security": {"kafka": {"protocol": "TLS"}}},
    {"security": {"credentials": {"kafka-password": "x"}}},
    {"security": {"planner": {"token": "inline"}}},
])
def test_schema_rejects_bad_security_values(helm_runner, bad):
    res = helm_runner.template_raw("-f", str(helm_runner.values_file("bad-schema", bad)))
    assert res.returncode != 0 and "schema" in res.stderr.lower(), res.stderr


def acl_job(docs: list[dict]) -> dict:
    return next(d for d in docs if d["kind"] == "Job" and d["metadata"]["name"].endswith("-acls"))


def test_production_values_create_the_acls_in_a_hook_job(helm_runner):
    """security.acls: a post-install/upgrade Job applies infra/kafka_acls.py's matrix as the admin user."""
    docs = helm_runner.template("-f", str(PRODUCTION))
    job = acl_job(docs)
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "post-install,post-upgrade"
    container = pod_spec(job)["containers"][0]
    assert container["command"] == ["python", "-m", "infra.kafka_acls", "apply", "--env"]
    env, files = container_env(job, docs), credential_files(job)
    assert env["KAFKA_SASL_USERNAME"] == "admin" and files["kafka-password"] == "kafka-admin-password"
    assert env["KAFKA_BOOTSTRAP_SERVERS"] and "REDIS_PASSWORD_FILE" not in env
    assert not any(d["kind"] == "Job" and d["metadata"]["name"].endswith("-acls") for d in helm_runner.template())


def test_mutual_tls_values_give_each_component_its_certificate(helm_runner):
    """protocol SSL with clientCertFromSecret: no password, the certificate and key of each component's
    keys kafka-<component>.crt/.key (the ACL job's: kafka-admin.*); renders valid for Kubernetes 1.30."""
    kv = require_module("kubernetes_validate")
    mtls = {"security": {"existingSecret": "creds", "acls": {"enabled": True},
                         "kafka": {"protocol": "SSL", "caFromSecret": True, "clientCertFromSecret": True}}}
    docs = helm_runner.template("-f", str(helm_runner.values_file("mtls", mtls)))
    for comp, w in [*workloads(docs).items(), ("admin", acl_job(docs))]:
        env, files = container_env(w, docs), credential_files(w)
        assert env["KAFKA_SECURITY_PROTOCOL"] == "SSL" and "KAFKA_SASL_USERNAME" not in env, comp
        assert env["KAFKA_SSL_CERT_FILE"] == f"{SECRET_DIR}/kafka-client.crt"
        assert env["KAFKA_SSL_KEY_FILE"] == f"{SECRET_DIR}/kafka-client.key"
        assert files["kafka-client.crt"] == f"kafka-{comp}.crt" and files["kafka-client.key"] == f"kafka-{comp}.key"
        assert "kafka-password" not in files
    for doc in docs:
        if doc["kind"] != "ServiceMonitor":
            kv.validate(doc, K8S_VERSION, strict=True)


def test_acls_need_an_authenticated_kafka(helm_runner):
    plain = {"security": {"acls": {"enabled": True}}}
    res = helm_runner.template_raw("-f", str(helm_runner.values_file("acl-plain", plain)))
    assert res.returncode != 0 and "security.acls.enabled needs an authenticated Kafka" in res.stderr
