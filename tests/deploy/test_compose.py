"""docker-compose.yml: valid against the compose specification, and consistent with the repository
(files it mounts and builds exist), with docs/contracts.md (commands, env, ports) and with the
example query examples/routers.yaml (one node service per site)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.deploy.conftest import COMPOSE_FILE, REPO, find_tool, load_yaml, run

NODE_PREFIX = "node-"
# compose service -> row of the service table in docs/contracts.md
CONTRACT_ROWS = {"planner": "planner", "source": "source", "spark": "spark results job"}


def contract_env() -> dict[str, set[str]]:
    """Env vars per service from the table under '## Services' in docs/contracts.md."""
    text = (REPO / "docs" / "contracts.md").read_text(encoding="utf-8")
    section = text.split("## Services", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, set[str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or set(cells[0]) <= {"-", " "} or cells[0] == "service":
            continue
        name = re.sub(r"\s*\(.*\)$", "", cells[0])
        rows[name] = set(re.findall(r"`([A-Z][A-Z0-9_]+)`", " ".join(cells[1:])))
    assert {"node", "planner", "source", "spark results job"} <= set(rows), rows
    return rows


def query_sites(query_file: Path) -> list[str]:
    q = load_yaml(query_file)
    return sorted({s["site"] for s in q["streams"].values()})


def env_of(service: dict) -> dict[str, str]:
    env = service.get("environment", {})
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: str(v) for k, v in env.items()}


def test_compose_file_matches_compose_spec():
    tool = find_tool("check-jsonschema")
    res = run([tool, "--builtin-schema", "vendor.compose-spec", str(COMPOSE_FILE)])
    assert res.returncode == 0, f"compose-spec validation failed:\n{res.stdout}\n{res.stderr}"


def test_builds_and_bind_mounts_reference_existing_files(compose):
    for name, svc in compose["services"].items():
        build = svc.get("build")
        if build:
            context = REPO / build.get("context", ".")
            assert context.is_dir(), f"{name}: build context {context} missing"
            dockerfile = context / build.get("dockerfile", "Dockerfile")
            assert dockerfile.is_file(), f"{name}: {dockerfile} missing"
        for vol in svc.get("volumes", []):
            source = vol.split(":", 1)[0] if isinstance(vol, str) else vol.get("source", "")
            if source.startswith((".", "/")):
                assert (REPO / source).exists(), f"{name}: bind mount source {source} missing"
            else:
                assert source in (compose.get("volumes") or {}), f"{name}: named volume {source} not declared"


def test_images_are_pinned(compose):
    for name, svc in compose["services"].items():
        image = svc.get("image")
        assert image, f"{name}: no image (built images get a local tag so services share one build)"
        if "build" in svc:
            continue
        repo, _, tag = image.rpartition(":")
        assert repo and tag and tag != "latest" and re.search(r"\d", tag), f"{name}: image {image} not pinned"


def test_one_node_service_per_site_of_the_example_query(compose):
    sites = query_sites(REPO / "examples" / "routers.yaml")
    nodes = sorted(n for n in compose["services"] if n.startswith(NODE_PREFIX))
    assert nodes == [NODE_PREFIX + s for s in sites]
    need = contract_env()["node"]
    for site in sites:
        svc = compose["services"][NODE_PREFIX + site]
        assert svc["command"] == ["python", "-m", "services.node", "--site", site, "--serve"]
        env = env_of(svc)
        assert need <= set(env), f"node-{site} lacks {need - set(env)} (docs/contracts.md)"
        assert env["JOINLIB_SITE"] == site
        assert env["REDIS_URL"].startswith("redis://redis:")
        assert env["KAFKA_BOOTSTRAP_SERVERS"] == "kafka:9092"


@pytest.mark.parametrize("service, command", [
    ("planner", ["python", "-m", "services.planner"]),
    ("spark", ["python", "-m", "services.spark.results_job"]),
])
def test_service_commands_and_env_follow_the_contract(compose, service, command):
    svc = compose["services"][service]
    assert svc["command"] == command
    need = contract_env()[CONTRACT_ROWS[service]]
    assert need <= set(env_of(svc)), f"{service} lacks {need - set(env_of(svc))}"


def test_source_replays_the_example_query(compose):
    svc = compose["services"]["source"]
    cmd = svc["command"]
    assert cmd[:3] == ["python", "-m", "services.source"]
    assert cmd[cmd.index("--query") + 1] == "examples/routers.yaml"
    data = cmd[cmd.index("--data") + 1]
    gen = compose["services"]["datagen"]["command"]
    assert gen[:4] == ["python", "-m", "joinlib", "gen"] and gen[gen.index("--out") + 1] == data
    assert svc["depends_on"]["datagen"]["condition"] == "service_completed_successfully"
    assert contract_env()["source"] <= set(env_of(svc))


def test_planner_port_and_health(compose):
    svc = compose["services"]["planner"]
    assert env_of(svc)["PLANNER_PORT"] == "8080"
    assert any(str(p).endswith(":8080") for p in svc["ports"])
    assert "/healthz" in " ".join(svc["healthcheck"]["test"])


def test_depends_on_conditions_are_satisfiable(compose):
    services = compose["services"]
    for name, svc in services.items():
        for dep, cond in (svc.get("depends_on") or {}).items():
            assert dep in services, f"{name} depends on unknown {dep}"
            c = cond["condition"]
            if c == "service_healthy":
                assert "healthcheck" in services[dep], f"{name} waits for {dep} healthy, {dep} has no healthcheck"
            elif c == "service_completed_successfully":
                assert services[dep].get("restart", "no") == "no", f"{dep} must be one-shot"
            else:
                assert c == "service_started", c


def test_long_running_services_have_healthchecks(compose):
    one_shot = {n for n, s in compose["services"].items() if s.get("restart", "no") == "no"}
    for name, svc in compose["services"].items():
        if name not in one_shot:
            assert "healthcheck" in svc, f"{name}: no healthcheck"


def test_metrics_port_everywhere(compose):
    for name, svc in compose["services"].items():
        if svc.get("image", "").startswith("joinlib") and name not in ("datagen", "generator"):
            assert env_of(svc).get("METRICS_PORT") == "9100", f"{name}: METRICS_PORT"


def test_grafana_mounts_match_provisioning(compose):
    grafana = compose["services"]["grafana"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in grafana["volumes"] if v.startswith("./")}
    assert mounts["/etc/grafana/provisioning"] == "./monitoring/grafana/provisioning"
    provider = load_yaml(REPO / "monitoring/grafana/provisioning/dashboards/joinlib.yaml")["providers"][0]
    dash_dir = provider["options"]["path"]
    assert mounts[dash_dir] == "./monitoring/grafana/dashboards"
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home.startswith(dash_dir + "/") and (REPO / "monitoring/grafana/dashboards" / Path(home).name).is_file()
    ds = load_yaml(REPO / "monitoring/grafana/provisioning/datasources/prometheus.yaml")["datasources"][0]
    assert ds["url"] == "http://prometheus:9090" and "prometheus" in compose["services"]


def test_prometheus_mounts_its_config_and_rules(compose):
    prom = compose["services"]["prometheus"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in prom["volumes"] if v.startswith("./")}
    assert mounts["/etc/prometheus/prometheus.yml"] == "./monitoring/prometheus/prometheus.yml"
    assert "--config.file=/etc/prometheus/prometheus.yml" in prom["command"]
    config = load_yaml(REPO / "monitoring/prometheus/prometheus.yml")
    for rule_file in config.get("rule_files", []):
        assert mounts.get(f"/etc/prometheus/{rule_file}") == f"./monitoring/prometheus/{rule_file}"


def test_live_generator_feeds_the_live_example_on_the_node_services(compose):
    """`docker compose --profile live up`: the generator writes the sources of examples/routers_live.yaml,
    whose sites are the node services' (docs/live.md)."""
    svc = compose["services"]["generator"]
    cmd = svc["command"]
    assert cmd[:3] == ["python", "-m", "services.generator"] and svc["profiles"] == ["live"]
    assert cmd[cmd.index("--query") + 1] == "examples/routers_live.yaml"
    assert env_of(svc)["KAFKA_BOOTSTRAP_SERVERS"] == "kafka:9092"
    assert contract_env()["generator"] <= set(env_of(svc))
    live_sites = query_sites(REPO / "examples" / "routers_live.yaml")
    assert {NODE_PREFIX + s for s in live_sites} <= set(compose["services"])
