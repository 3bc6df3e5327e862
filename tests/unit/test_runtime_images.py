"""The runtime images' Dockerfiles (runtime-images/) as code: their commands exist and they
follow the image rules of ADR 0017 (they cannot be built here: no registry is reachable)."""

from __future__ import annotations

import importlib
import importlib.util
import json
import re
import sys
import tomllib
from pathlib import Path

import pytest

from sparkrun_operator.api.workload import DEFAULT_ENGINE_IMAGE
from sparkrun_operator.cli.main import main

REPO = Path(__file__).resolve().parents[2]
IMAGES = REPO / "runtime-images"
DOCKERFILES = sorted(IMAGES.glob("*/Dockerfile"))
_SECRETISH = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|CREDENTIAL)", re.I)


def _instructions(path: Path) -> list[tuple[str, str]]:
    """``(INSTRUCTION, argument)`` pairs, continuation lines joined, comments dropped."""
    logical, current = [], ""
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("#") and not current:
            continue
        current += line.rstrip("\\").strip() + " "
        if not line.rstrip().endswith("\\"):
            logical.append(current.strip())
            current = ""
    pairs = []
    for item in filter(None, logical):
        word, _, rest = item.partition(" ")
        pairs.append((word.upper(), rest.strip()))
    return pairs


def _final_stage(path: Path) -> list[tuple[str, str]]:
    pairs = _instructions(path)
    last = max(i for i, (word, _) in enumerate(pairs) if word == "FROM")
    return pairs[last:]


def test_there_are_the_three_images() -> None:
    assert [p.parent.name for p in DOCKERFILES] == ["operator", "tools", "vllm"]


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_image_rules(dockerfile: Path) -> None:
    pairs = _instructions(dockerfile)
    for word, arg in pairs:
        if word == "FROM":
            image = arg.split()[0]
            assert ":" in image, f"pin a tag: {image}"
            assert not image.endswith(":latest"), f"pin a tag: {image}"
        if word in {"ARG", "ENV"}:
            assert not _SECRETISH.search(arg), f"no secrets in layers: {word} {arg}"
    final = dict(_final_stage(dockerfile))
    user = final.get("USER", "")
    assert user, "the final stage names its user"
    assert user.split(":")[0] not in {"0", "root"}, "the final stage runs as non-root"
    env = " ".join(arg for word, arg in _final_stage(dockerfile) if word == "ENV")
    assert "PYTHONUNBUFFERED=1" in env


def test_operator_image_entrypoint_is_the_console_script() -> None:
    final = dict(_final_stage(IMAGES / "operator" / "Dockerfile"))
    entrypoint = json.loads(final["ENTRYPOINT"])
    assert entrypoint == ["sparkrun-k8s"]
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, func = scripts[entrypoint[0]].partition(":")
    assert callable(getattr(importlib.import_module(module), func))
    cmd = json.loads(final["CMD"])
    with pytest.raises(SystemExit) as done:
        main(cmd)
    assert done.value.code == 0
    # The build stage proves the testbed is not in the image.
    run = " ".join(arg for word, arg in _instructions(IMAGES / "operator" / "Dockerfile") if word == "RUN")
    assert "sparkrun_testbed" in run
    assert "sparkrun_operator.testbed" in run


def _python_modules(dockerfile: Path) -> set[str]:
    text = " ".join(arg for word, arg in _instructions(dockerfile) if word in {"RUN", "CMD", "ENTRYPOINT"})
    found = set(re.findall(r"python\S*\"?,? +\"?-m\"?,? +\"?([a-z_][\w.]*)", text))
    return {m for m in found if m.split(".")[0] not in sys.stdlib_module_names}


_DOWNLOAD = "sparkrun_operator.runtime.download"


@pytest.mark.parametrize("module", [_DOWNLOAD])
def test_tools_image_modules_exist(module: str) -> None:
    assert _python_modules(IMAGES / "tools" / "Dockerfile") == {module}
    assert importlib.util.find_spec(module) is not None


def test_tools_image_benchmarks_are_pinned_and_run_at_build() -> None:
    pins = [
        line.split("==")
        for line in (IMAGES / "tools" / "requirements-bench.txt").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    assert {name for name, _ in pins} == {"llama-benchy", "tool-eval-bench"}
    assert all(re.fullmatch(r"\d+(\.\d+)+", version) for _, version in pins)
    run = " ".join(arg for word, arg in _instructions(IMAGES / "tools" / "Dockerfile") if word == "RUN")
    for name, _ in pins:
        assert f"/opt/bench/bin/{name} --help" in run


def test_vllm_image_is_the_default_engine_image() -> None:
    pairs = _instructions(IMAGES / "vllm" / "Dockerfile")
    (base,) = [arg.split()[0] for word, arg in pairs if word == "FROM"]
    assert base == DEFAULT_ENGINE_IMAGE
    assert DEFAULT_ENGINE_IMAGE == "vllm/vllm-openai:v0.33.0"
