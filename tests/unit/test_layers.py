"""The import contracts of pyproject.toml are real: every package of joinlib is in a layer, and a deliberate
violation fails them (import-linter once skipped a contract whose source overlapped its forbidden modules, so
"the core imports no adapter" was never checked; these tests keep that from coming back)."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[2]
EDGES = {"joinlib.adapters", "joinlib.node", "joinlib.cli", "joinlib.__main__", "joinlib.__init__", "joinlib.api"}


def _contracts() -> list[dict[str, Any]]:
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return list(cfg["tool"]["importlinter"]["contracts"])


def _core_sources() -> set[str]:
    core = next(c for c in _contracts() if str(c["name"]).startswith("core:"))
    return set(core["source_modules"])


def test_every_package_of_joinlib_is_in_a_layer() -> None:
    children = {f"joinlib.{p.stem if p.is_file() else p.name}" for p in (ROOT / "joinlib").iterdir()
                if (p.suffix == ".py" or (p / "__init__.py").is_file())}
    missing = children - _core_sources() - EDGES
    assert not missing, f"add {sorted(missing)} to the core contract of pyproject.toml (or to an edge layer)"


def test_no_contract_overlaps_its_forbidden_modules() -> None:
    for c in _contracts():
        for src in c["source_modules"]:
            for forbidden in c["forbidden_modules"]:
                assert not str(forbidden).startswith(src + ".") and forbidden != src, (c["name"], src, forbidden)


def _lint_copy(tmp_path: Path, module: str, line: str) -> subprocess.CompletedProcess[str]:
    """lint-imports on a copy of the tree with ``line`` appended to ``module`` (a dotted name)."""
    for name in ("joinlib", "services"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path.joinpath(*module.split(".")).with_suffix(".py")
    target.write_text(target.read_text() + "\n" + line + "\n")
    code = "import sys; sys.path.insert(0, '.'); from importlinter.cli import lint_imports_command as c; c()"
    return subprocess.run([sys.executable, "-c", code, "--no-cache"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize(("module", "line", "contract"), [
    ("joinlib.plan.logical", "import joinlib.adapters.kafka  # noqa", "core:"),
    ("joinlib.runtime.host", "import redis  # noqa", "core:"),
    ("joinlib.adapters.kafka", "import joinlib.node.cluster  # noqa", "adapters:"),
    ("joinlib.node.control", "import joinlib.cli.main  # noqa", "node:"),
    ("joinlib.node.control", "import confluent_kafka  # noqa", "node:"),
    ("joinlib.node.cluster_nodes", "from prometheus_client import REGISTRY  # noqa", "node:"),
])
def test_a_deliberate_violation_fails_the_contracts(tmp_path: Path, module: str, line: str, contract: str) -> None:
    run = _lint_copy(tmp_path, module, line)
    assert run.returncode != 0, run.stdout
    summary = run.stdout.split("Broken contracts")[0].replace("\n", " ")
    verdicts = {name.strip().split(":")[0] + ":": verdict for name, verdict in
                ((part.rsplit(" ", 1)[0], part.rsplit(" ", 1)[-1]) for part in _verdicts(summary))}
    assert verdicts.get(contract) == "BROKEN", run.stdout
    assert f"{module} -> " in run.stdout, run.stdout


def _verdicts(summary: str) -> list[str]:
    """'name KEPT' / 'name BROKEN' pieces of import-linter's summary (its lines wrap, so the text is joined)."""
    return [m.group(0) for m in re.finditer(r"\b(core|adapters|node|services):.*?\b(KEPT|BROKEN)\b", summary)]


def _doc_layers() -> list[list[str]]:
    """The core's layers as docs/architecture.md's table lists them, bottom first."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    table = text.split("| layer | packages |", 1)[1].split("\n\n", 1)[0]
    rows = [r for r in table.splitlines() if r.startswith("| ") and not r.startswith("|---")]
    return [re.findall(r"`(\w+)`", r.split("|")[2]) for r in rows]


def test_the_documented_layers_cover_the_core_and_hold() -> None:
    layers = _doc_layers()
    level = {p: i for i, row in enumerate(layers) for p in row}
    level.update({"adapters": len(layers), "node": len(layers) + 1, "cli": len(layers) + 2, "api": len(layers) + 2})
    core = {s.split(".")[1] for s in _core_sources()}
    assert core <= set(level), f"docs/architecture.md's layer table lacks {sorted(core - set(level))}"
    graph = grimp.build_graph("joinlib", cache_dir=None)
    upward = set()
    for m in graph.modules:
        if m.count(".") == 0 or m.endswith(".__main__"):
            continue  # the package root and entry points sit above every layer
        for t in graph.find_modules_directly_imported_by(m):
            a, b = m.split(".")[1], t.split(".")[1] if "." in t else "__init__"
            if a != b and b in level and level[b] > level[a]:
                upward.add(f"{m} -> {t}")
    assert not upward, f"imports from a lower layer to a higher one: {sorted(upward)[:5]}"
