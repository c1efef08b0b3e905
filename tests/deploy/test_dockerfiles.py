"""services/Dockerfile and services/spark/Dockerfile, read without a Docker engine: pinned base
images, COPY sources that exist in the build context (the repository root, as docker-compose.yml
builds them) and are not filtered out by the Dockerfile's own .dockerignore, a non-root user, and
pyspark pinned to the Spark image's version."""
from __future__ import annotations

import fnmatch
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.deploy.conftest import REPO

SERVICES_DOCKERFILE = REPO / "services" / "Dockerfile"
SPARK_DOCKERFILE = REPO / "services" / "spark" / "Dockerfile"
APP_DIRS = ["joinlib/", "services/", "schemas/", "examples/"]


@dataclass
class Dockerfile:
    path: Path
    args: dict[str, str] = field(default_factory=dict)   # ARG defaults (global and per stage)
    stages: list[dict] = field(default_factory=list)      # {"image", "name", "instructions": [(op, rest)]}

    @classmethod
    def parse(cls, path: Path) -> "Dockerfile":
        df = cls(path)
        text = re.sub(r"\\\n", " ", path.read_text(encoding="utf-8"))
        for line in text.splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            op, _, rest = line.partition(" ")
            op, rest = op.upper(), rest.strip()
            if op == "ARG":
                name, _, default = rest.partition("=")
                df.args.setdefault(name.strip(), default.strip())
            if op == "FROM":
                parts = rest.split()
                stage = parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" else None
                df.stages.append({"image": df.expand(parts[0]), "name": stage, "instructions": []})
            elif df.stages:
                df.stages[-1]["instructions"].append((op, rest))
        return df

    def expand(self, s: str) -> str:
        return re.sub(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", lambda m: self.args.get(m.group(1), m.group(0)), s)

    @property
    def final(self) -> dict:
        return self.stages[-1]

    def ops(self, op: str, stage: dict | None = None) -> list[str]:
        return [rest for o, rest in (stage or self.final)["instructions"] if o == op]

    def copies(self) -> list[tuple[list[str], str]]:
        """(sources, destination) of every COPY/ADD from the build context (not --from)."""
        out = []
        for stage in self.stages:
            for op, rest in stage["instructions"]:
                if op not in ("COPY", "ADD"):
                    continue
                words = shlex.split(rest)
                if any(w.startswith("--from=") for w in words):
                    continue
                words = [w for w in words if not w.startswith("--")]
                out.append((words[:-1], words[-1]))
        return out


def dockerignore_patterns(dockerfile: Path) -> list[str]:
    ignore = dockerfile.with_name(dockerfile.name + ".dockerignore")
    assert ignore.is_file(), f"{ignore} missing (BuildKit reads <Dockerfile>.dockerignore)"
    return [ln.strip() for ln in ignore.read_text().splitlines() if ln.strip() and not ln.startswith("#")]


def ignored(rel: str, patterns: list[str]) -> bool:
    rel = rel.rstrip("/")
    for p in patterns:
        p = p.rstrip("/")
        if p.startswith("**/"):
            if fnmatch.fnmatch(Path(rel).name, p[3:]):
                return True
        elif rel == p or rel.startswith(p + "/") or fnmatch.fnmatch(rel, p):
            return True
    return False


def image_is_pinned(image: str) -> bool:
    name, _, tag = image.rpartition(":")
    return bool(name) and "/" not in tag and tag not in ("", "latest") and bool(re.search(r"\d", tag))


@pytest.mark.parametrize("path", [SERVICES_DOCKERFILE, SPARK_DOCKERFILE], ids=["services", "spark"])
def test_copy_sources_exist_and_are_not_ignored(path):
    df = Dockerfile.parse(path)
    patterns = dockerignore_patterns(path)
    copied = []
    for sources, _dest in df.copies():
        for src in sources:
            assert (REPO / src).exists(), f"{path.relative_to(REPO)}: COPY {src}: not in the build context"
            assert not ignored(src, patterns), f"{path.relative_to(REPO)}: COPY {src} is excluded by .dockerignore"
            copied.append(src)
    for d in APP_DIRS + ["requirements.txt"]:
        assert d in copied, f"{path.relative_to(REPO)} does not copy {d}"


@pytest.mark.parametrize("path", [SERVICES_DOCKERFILE, SPARK_DOCKERFILE], ids=["services", "spark"])
def test_base_images_pinned_and_user_unprivileged(path):
    df = Dockerfile.parse(path)
    for stage in df.stages:
        assert image_is_pinned(stage["image"]), f"{path.relative_to(REPO)}: FROM {stage['image']} is not pinned"
    users = df.ops("USER")
    assert users and users[-1] not in ("root", "0"), f"{path.relative_to(REPO)}: runs as root"
    assert any("9100" in e.split() for e in df.ops("EXPOSE")), "METRICS_PORT 9100 not exposed"
    cmd = df.ops("CMD")[-1]
    assert cmd.startswith("["), "CMD must be exec form (signals reach python)"
    assert any("pip install" in r and "requirements.txt" in r for r in df.ops("RUN"))


def test_services_image_is_python_311_slim():
    df = Dockerfile.parse(SERVICES_DOCKERFILE)
    assert [s["image"] for s in df.stages] == ["python:3.11-slim"] * len(df.stages)
    assert "8080" in " ".join(df.ops("EXPOSE"))


def test_services_image_carries_the_compiled_kernels_without_a_compiler():
    """The C kernels (every Extension of setup.py) are built in a stage of their own (same Python as the final
    image, so the same EXT_SUFFIX) and only the shared objects reach the image, next to their modules."""
    df = Dockerfile.parse(SERVICES_DOCKERFILE)
    kernels = next(s for s in df.stages if s["name"] == "kernels")
    sources = re.findall(r'"(joinlib/[\w/]+\.c)"', (REPO / "setup.py").read_text())
    assert sources, "setup.py lists no kernel"
    built = " ".join(df.ops("RUN", kernels))
    assert "EXT_SUFFIX" in built and all(src in built for src in sources)
    copied = " ".join(df.ops("COPY", kernels))
    assert all(src in copied for src in sources)
    assert any(r.startswith("--from=kernels") and r.endswith(" joinlib/") for r in df.ops("COPY"))
    assert not any("gcc" in r for r in df.ops("RUN")), "the final image needs no compiler"


def test_spark_image_pins_pyspark_to_the_spark_version():
    df = Dockerfile.parse(SPARK_DOCKERFILE)
    spark_stage = next(s for s in df.stages if s["image"].startswith(("spark:", "apache/spark:")))
    tag = re.match(r"(?:apache/)?spark:(\d+\.\d+\.\d+)", spark_stage["image"])
    assert tag, spark_stage["image"]
    spark_version = tag.group(1)
    assert df.final["image"].startswith("python:3.11"), "joinlib needs Python >= 3.11"
    req = REPO / "requirements-spark.txt"
    assert req.is_file(), "requirements-spark.txt missing (services/spark/Dockerfile installs pyspark from it)"
    pins = dict(re.findall(r"^\s*([A-Za-z0-9_.-]+)\s*==\s*([^\s#;]+)", req.read_text(), re.M))
    assert pins.get("pyspark") == spark_version, \
        f"requirements-spark.txt pins pyspark=={pins.get('pyspark')}, the Spark image is {spark_version}"
    run = " ".join(df.ops("RUN"))
    assert "requirements-spark.txt" in run and "spark-sql-kafka-0-10_2.13" in run and "spark-avro_2.13" in run


def test_compose_builds_these_dockerfiles(compose):
    built = {svc["build"]["dockerfile"] for svc in compose["services"].values() if "build" in svc}
    assert built == {"services/Dockerfile", "services/spark/Dockerfile"}
    for svc in compose["services"].values():
        if "build" in svc:
            assert svc["build"].get("context", ".") == "."
