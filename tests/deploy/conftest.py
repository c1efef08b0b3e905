"""Shared helpers of the offline deployment checks (docker-compose, Dockerfiles, Helm, monitoring).

Nothing here needs a Docker engine, a Kubernetes cluster or the network. Tools that are missing
make a test FAIL (never skip) with the command that installs them:

* ``helm``: on PATH or in ``${JOINLIB_CACHE:-~/.cache/joinlib}/bin`` -> ``make helm-install-tool``;
* ``check-jsonschema``, ``kubernetes-validate``, ``promql-parser``: requirements-dev.txt ->
  ``make deps``.
"""
from __future__ import annotations

import importlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Iterable, Optional

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "joinlib"
COMPOSE_FILE = REPO / "docker-compose.yml"
MONITORING = REPO / "monitoring"
K8S_VERSION = "1.30.0"

HELM_HINT = "run make helm-install-tool (builds the pinned helm into ${JOINLIB_CACHE:-~/.cache/joinlib}/bin)"
DEV_HINT = "run make deps (pip install -r requirements-dev.txt)"


def cache_dir() -> Path:
    return Path(os.environ.get("JOINLIB_CACHE") or Path.home() / ".cache" / "joinlib")


def find_helm() -> str:
    """Path of the helm binary: $HELM, PATH, then the cache that scripts/install-helm.sh fills.
    Fails the calling test with the make target to run when there is none."""
    candidates = [os.environ.get("HELM"), shutil.which("helm"), str(cache_dir() / "bin" / "helm")]
    for c in candidates:
        if c and Path(c).is_file() and os.access(c, os.X_OK):
            return c
    pytest.fail(f"helm not found (HELM, PATH, {cache_dir() / 'bin' / 'helm'}): {HELM_HINT}", pytrace=False)


def find_tool(name: str, hint: str = DEV_HINT) -> str:
    """A console script of an installed Python package: next to this interpreter, else PATH."""
    here = Path(sys.executable).parent / name
    if here.is_file():
        return str(here)
    found = shutil.which(name)
    if found:
        return found
    pytest.fail(f"{name} not found next to {sys.executable} or on PATH: {hint}", pytrace=False)


def require_module(name: str, hint: str = DEV_HINT) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError as e:
        pytest.fail(f"cannot import {name} ({e}): {hint}", pytrace=False)


def run(cmd: list[str], *, timeout: float = 120, input: Optional[str] = None) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout, input=input)


def load_yaml(path: Path) -> Any:
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)


# ---------------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="session")
def helm() -> str:
    return find_helm()


class HelmRunner:
    """`helm lint` / `helm template` of the chart, with rendered manifests cached per argument list."""

    def __init__(self, binary: str, tmp: Path) -> None:
        self.binary = binary
        self.tmp = tmp
        self._cache: dict[tuple, list[dict]] = {}

    def values_file(self, name: str, values: dict) -> Path:
        path = self.tmp / f"{name}.yaml"
        path.write_text(yaml.safe_dump(values, sort_keys=False), encoding="utf-8")
        return path

    def lint(self, *args: str) -> subprocess.CompletedProcess:
        return run([self.binary, "lint", "--strict", "--kube-version", K8S_VERSION, str(CHART), *args])

    def template_raw(self, *args: str, chart: Path = CHART) -> subprocess.CompletedProcess:
        return run([self.binary, "template", "demo", str(chart), "--namespace", "joinlib",
                    "--kube-version", K8S_VERSION, *args])

    def template(self, *args: str) -> list[dict]:
        if args not in self._cache:
            res = self.template_raw(*args)
            assert res.returncode == 0, f"helm template {' '.join(args)} failed:\n{res.stderr}"
            self._cache[args] = [d for d in yaml.safe_load_all(res.stdout) if d]
        return self._cache[args]


@pytest.fixture(scope="session")
def helm_runner(helm: str, tmp_path_factory: pytest.TempPathFactory) -> HelmRunner:
    return HelmRunner(helm, tmp_path_factory.mktemp("helm"))


@pytest.fixture(scope="session")
def compose() -> dict:
    return load_yaml(COMPOSE_FILE)


@pytest.fixture(scope="session")
def catalogue() -> dict:
    return load_yaml(MONITORING / "metrics.yaml")


@pytest.fixture(scope="session")
def known_metric_names(catalogue: dict) -> set[str]:
    return {m["name"] for m in catalogue["metrics"]} | {m["name"] for m in catalogue.get("prometheus_builtin", [])}


# --------------------------------------------------------------------------- PromQL helpers

# Grafana's global variables that stand for durations; replaced before parsing.
_GRAFANA_DURATIONS = re.compile(r"\$(__rate_interval|__interval|__range|__range_s)\b"
                                r"|\$\{(__rate_interval|__interval|__range)\}")
_HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def grafana_to_promql(expr: str) -> str:
    """Replace Grafana duration variables with a literal duration. Other variables may only appear
    inside label-matcher strings (e.g. site=~"$site"), where they are plain text to the parser."""
    return _GRAFANA_DURATIONS.sub("5m", expr)


def metric_names(expr: str) -> set[str]:
    """Metric names referenced by a PromQL expression (parsed with promql_parser)."""
    pp = require_module("promql_parser")
    ast = pp.parse(expr)
    names: set[str] = set()

    def visit(node: Any) -> None:
        if isinstance(node, pp.VectorSelector):
            if node.name:
                names.add(node.name)
            for m in node.matchers.matchers:
                if m.name == "__name__":
                    names.add(m.value)

    pp.walk(ast, visit)
    return names


def base_metric_name(name: str, catalogue: dict) -> str:
    """joinlib_x_seconds_bucket -> joinlib_x_seconds when joinlib_x_seconds is a histogram."""
    histograms = {m["name"] for m in catalogue["metrics"] if m["type"] == "histogram"}
    for suffix in _HISTOGRAM_SUFFIXES:
        if name.endswith(suffix) and name[: -len(suffix)] in histograms:
            return name[: -len(suffix)]
    return name


def iter_panels(panels: Iterable[dict]) -> Iterable[dict]:
    for p in panels:
        yield p
        yield from iter_panels(p.get("panels", []))
