"""docker-compose.secure.yml, the security overlay of docker-compose.yml (docs/security.md): valid
against the compose specification; every Kafka client of the base file gets SASL_SSL with its own user;
every credential is a compose secret (a file the services read through *_FILE variables, never a value in
the environment); the secret files are exactly what `python -m infra.secure_cluster prepare --compose`
writes. Offline: no Docker engine runs it here."""
from __future__ import annotations

import subprocess
import sys

import pytest

from tests.deploy.conftest import COMPOSE_FILE, REPO, find_tool, load_yaml, run
from tests.deploy.test_compose import env_of

OVERLAY = REPO / "docker-compose.secure.yml"
SECRET_DIR = "/run/secrets/"


@pytest.fixture(scope="module")
def overlay() -> dict:
    return load_yaml(OVERLAY)


def test_overlay_matches_compose_spec():
    tool = find_tool("check-jsonschema")
    res = run([tool, "--builtin-schema", "vendor.compose-spec", str(OVERLAY)])
    assert res.returncode == 0, f"compose-spec validation failed:\n{res.stdout}\n{res.stderr}"


def test_every_kafka_client_authenticates_with_its_own_user(compose, overlay):
    clients = [n for n, s in compose["services"].items() if "KAFKA_BOOTSTRAP_SERVERS" in env_of(s)]
    assert {"planner", "source", "spark", "generator"} <= set(clients) and any(n.startswith("node-") for n in clients)
    for name in clients:
        env = env_of(overlay["services"][name])
        assert env["KAFKA_SECURITY_PROTOCOL"] == "SASL_SSL" and env["KAFKA_SASL_MECHANISM"] == "SCRAM-SHA-512", name
        user = env["KAFKA_SASL_USERNAME"]
        assert env["KAFKA_SASL_PASSWORD_FILE"] == f"{SECRET_DIR}kafka-{user}.password", name
        assert env["KAFKA_SSL_CA_FILE"] == f"{SECRET_DIR}ca.crt", name
    for name in (n for n in clients if n.startswith("node-")):
        env = env_of(overlay["services"][name])
        assert env["REDIS_URL"].startswith("rediss://") and env["REDIS_USERNAME"] == "joinlib-node"
    assert env_of(overlay["services"]["planner"])["JOINLIB_PLANNER_TOKEN_FILE"] == f"{SECRET_DIR}planner.token"


def test_secrets_are_files_the_services_list_and_never_env_values(overlay):
    declared = overlay["secrets"]
    for name, svc in overlay["services"].items():
        listed = set(svc.get("secrets", []))
        assert listed <= set(declared), name
        for key, value in env_of(svc).items():
            assert not key.endswith(("_PASSWORD", "_TOKEN")), f"{name}: {key} carries a secret in the env"
            if value.startswith(SECRET_DIR):
                assert value[len(SECRET_DIR):] in listed, f"{name}: {key} names a secret it does not mount"


def test_secret_files_are_what_prepare_writes(overlay, tmp_path):
    out = tmp_path / "sec"
    res = subprocess.run([sys.executable, "-m", "infra.secure_cluster", "prepare", str(out), "--compose"],
                         cwd=REPO, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    for name, spec in overlay["secrets"].items():
        assert spec["file"] == f"./.secure-compose/{name}"
        assert (out / name).is_file(), name
        assert (out / name).stat().st_mode & 0o044, f"{name}: the containers' users must be able to read it"
    san = subprocess.run(["openssl", "x509", "-in", str(out / "server.crt"), "-noout", "-ext", "subjectAltName"],
                         capture_output=True, text=True).stdout
    assert "DNS:kafka" in san and "DNS:redis" in san


def test_kafka_start_script_is_valid_bash(overlay, tmp_path):
    script = overlay["services"]["kafka"]["command"][0].replace("$$", "$")
    (tmp_path / "start.sh").write_text(script)
    res = subprocess.run(["bash", "-n", str(tmp_path / "start.sh")], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert "--add-scram" in script and "server-secure.properties.template" in script


def test_every_kafka_client_starts_after_the_acls(compose, overlay):
    """The broker refuses users without ACLs: every Kafka client waits for the one-shot kafka-acls service."""
    acls = overlay["services"]["kafka-acls"]
    assert acls["entrypoint"][-3:] == ["apply", "kafka:9092", SECRET_DIR.rstrip("/")]
    assert {"ca.crt", "kafka-admin.password"} <= set(acls["secrets"])
    for name, svc in compose["services"].items():
        if "KAFKA_BOOTSTRAP_SERVERS" in env_of(svc):
            dep = overlay["services"][name]["depends_on"]["kafka-acls"]
            assert dep["condition"] == "service_completed_successfully", name


def test_base_file_stays_without_security(compose):
    assert "secrets" not in compose
    for name, svc in compose["services"].items():
        assert "KAFKA_SECURITY_PROTOCOL" not in env_of(svc), name
    assert COMPOSE_FILE.read_text().count("SASL") == 0
