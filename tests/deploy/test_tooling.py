"""scripts/install-helm.sh and deploy.mk: the pieces that install and run these checks."""
from __future__ import annotations

import os
import re
import subprocess

from tests.deploy.conftest import REPO, find_helm, run

SCRIPT = REPO / "scripts" / "install-helm.sh"


def test_install_helm_script_syntax_and_pin():
    res = run(["bash", "-n", str(SCRIPT)])
    assert res.returncode == 0, res.stderr
    pin = re.search(r'HELM_VERSION="\$\{HELM_VERSION:-(v[0-9.]+)\}"', SCRIPT.read_text())
    assert pin and re.fullmatch(r"v3\.\d+\.\d+", pin.group(1)), "helm must be pinned to a v3.x.y release"
    assert "go\" install" in SCRIPT.read_text() or '"$GO_BIN" install' in SCRIPT.read_text()


def test_install_helm_path_honours_the_cache(tmp_path):
    env = {**os.environ, "JOINLIB_CACHE": str(tmp_path)}
    res = subprocess.run(["bash", str(SCRIPT), "--path"], capture_output=True, text=True, env=env, timeout=30)
    assert res.returncode == 0 and res.stdout.strip() == str(tmp_path / "bin" / "helm")


def test_helm_found_is_a_v3(helm_runner):
    res = run([find_helm(), "version", "--short"])
    assert res.returncode == 0 and res.stdout.startswith("v3."), res.stdout + res.stderr


def test_deploy_mk_targets_are_documented():
    text = (REPO / "deploy.mk").read_text()
    for target in ("deploy-check", "helm-install-tool"):
        assert re.search(rf"^{target}:.*## \S", text, re.M), f"deploy.mk: {target} missing or without ## help"
    assert "tests/deploy" in text and "install-helm.sh" in text
    # included from the top-level Makefile: must not steal the default goal
    assert ".DEFAULT_GOAL := $(_DEPLOY_MK_PREV_GOAL)" in text
