"""hack/pin-digests.py, the release step that pins the images' bases by digest (ADR 0017), against
a real OCI registry on loopback: go-containerregistry's in-memory registry (``hack/oci-registry``,
built by ``hack/oci-registry.sh``), seeded with random images, one of them multi-arch, behind
Docker Hub's token flow (401, WWW-Authenticate: Bearer, an anonymous token, then Bearer).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import hack_script
from tests.gobinary import go_tool

ROOT = Path(__file__).resolve().parents[2]
PIN = ROOT / "hack" / "pin-digests.py"
PYTHON_BASE = "library/python:3.12-slim-bookworm"
VLLM_BASE = "vllm/vllm-openai:v0.33.0"


pin = hack_script.load("pin-digests.py", "pin_digests")


@pytest.fixture(scope="module")
def oci_registry() -> Path:
    """``hack/oci-registry``: built by ``hack/oci-registry.sh`` when missing (Go needed)."""
    return go_tool("oci-registry")


@dataclass
class Registry:
    addr: str
    digests: dict[str, str]
    process: subprocess.Popen[str]

    @property
    def url(self) -> str:
        return f"http://{self.addr}"

    def stop(self) -> str:
        """Stop it; its standard error (the tokens it issued)."""
        assert self.process.stdin is not None
        assert self.process.stderr is not None
        self.process.stdin.close()
        err = self.process.stderr.read()
        self.process.wait(timeout=30)
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()
        return err


def _start(binary: Path, *args: str) -> Registry:
    process = subprocess.Popen(
        [str(binary), *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line:
        process.kill()
        pytest.fail(f"oci-registry did not start: {process.communicate(timeout=30)[1][-2000:]}")
    seeded = json.loads(line)
    return Registry(seeded["addr"], seeded["digests"], process)


@pytest.fixture
def hub(oci_registry: Path) -> Iterator[Registry]:
    """A Docker Hub stand-in: the images' bases, token auth."""
    registry = _start(oci_registry, "--auth", f"{PYTHON_BASE}=index", f"{VLLM_BASE}=image")
    yield registry
    if registry.process.poll() is None:
        registry.stop()


def _copy_dockerfiles(tmp_path: Path) -> list[Path]:
    copies = []
    for source in sorted((ROOT / "runtime-images").glob("*/Dockerfile")):
        target = tmp_path / source.parent.name / "Dockerfile"
        target.parent.mkdir()
        shutil.copy2(source, target)
        copies.append(target)
    return copies


def _cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(PIN), *map(str, args)], capture_output=True, text=True, check=False, timeout=120
    )


def test_the_images_bases_are_pinned_through_a_mirror_with_token_auth(hub: Registry, tmp_path: Path) -> None:
    files = _copy_dockerfiles(tmp_path)
    before = {f: f.read_text() for f in files}
    python_digest, vllm_digest = hub.digests[PYTHON_BASE], hub.digests[VLLM_BASE]

    unpinned = _cli("--check", "--registry-mirror", hub.url, *files)
    assert unpinned.returncode == 1, unpinned.stderr
    assert f"python:3.12-slim-bookworm has no digest; the tag resolves to {python_digest}" in unpinned.stderr
    assert {f: f.read_text() for f in files} == before  # --check changes nothing

    done = _cli("--registry-mirror", hub.url, *files)
    assert done.returncode == 0, done.stderr
    operator = (tmp_path / "operator" / "Dockerfile").read_text()
    assert f"FROM python:3.12-slim-bookworm@{python_digest} AS build\n" in operator
    assert f"FROM python:3.12-slim-bookworm@{python_digest}\n" in operator
    assert "COPY --from=build /venv /venv" in operator  # a stage is no image
    assert f"FROM vllm/vllm-openai:v0.33.0@{vllm_digest}\n" in (tmp_path / "vllm" / "Dockerfile").read_text()
    # Nothing but the FROM lines changed.
    for f in files:
        old, new = before[f].splitlines(), f.read_text().splitlines()
        changed = [(a, b) for a, b in zip(old, new, strict=True) if a != b]
        assert changed
        assert all(
            a.startswith("FROM ") and b.startswith(a.split(" AS ")[0] + "@sha256:") for a, b in changed
        )

    assert _cli("--check", "--registry-mirror", hub.url, *files).returncode == 0
    issued = hub.stop()
    assert "tokens issued" in issued
    assert " 0 tokens issued" not in issued


def test_the_multi_arch_base_pins_the_index_digest(hub: Registry) -> None:
    resolver = pin.Resolver({"docker.io": hub.url})
    digest = resolver.digest(pin.ImageRef.parse("python:3.12-slim-bookworm"))
    assert digest == hub.digests[PYTHON_BASE]
    assert resolver.tokens  # the 401 was answered with a token, reused afterwards
    assert resolver.digest(pin.ImageRef.parse("docker.io/library/python:3.12-slim-bookworm")) == digest


def test_a_stale_pin_is_reported_and_replaced(hub: Registry, tmp_path: Path) -> None:
    dockerfile = tmp_path / "Dockerfile"
    stale = "sha256:" + "0" * 64
    base = "FROM --platform=$BUILDPLATFORM vllm/vllm-openai:v0.33.0"
    dockerfile.write_text(f"{base}@{stale} AS engine\nRUN true\n")
    checked = _cli("--check", "--registry-mirror", f"docker.io={hub.url}", dockerfile)
    assert checked.returncode == 1
    assert f"has pinned {stale}; the tag resolves to {hub.digests[VLLM_BASE]}" in checked.stderr
    assert _cli("--registry-mirror", f"docker.io={hub.url}", dockerfile).returncode == 0
    assert dockerfile.read_text() == f"{base}@{hub.digests[VLLM_BASE]} AS engine\nRUN true\n"


def test_a_loopback_registry_is_asked_directly_and_scratch_and_args_are_left(
    oci_registry: Path, tmp_path: Path
) -> None:
    registry = _start(oci_registry, "team/base:1.0=index")
    try:
        dockerfile = tmp_path / "Dockerfile"
        dockerfile.write_text(
            f"ARG BASE=x\nFROM {registry.addr}/team/base:1.0 AS a\nFROM scratch\nFROM ${{BASE}}\nFROM a\n"
        )
        assert _cli(dockerfile).returncode == 0
        lines = dockerfile.read_text().splitlines()
        assert lines[1] == f"FROM {registry.addr}/team/base:1.0@{registry.digests['team/base:1.0']} AS a"
        assert lines[2:] == ["FROM scratch", "FROM ${BASE}", "FROM a"]
    finally:
        registry.stop()


def test_an_unknown_tag_fails_naming_it(hub: Registry, tmp_path: Path) -> None:
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("FROM python:3.99-nonesuch\n")
    result = _cli("--registry-mirror", hub.url, dockerfile)
    assert result.returncode == 2
    assert f"python:3.99-nonesuch: not found at {hub.url}" in result.stderr
    assert dockerfile.read_text() == "FROM python:3.99-nonesuch\n"


def test_nothing_listens_fails_with_the_registry_named(tmp_path: Path) -> None:
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("FROM 127.0.0.1:9/x/y:1\n")
    result = _cli("--timeout", "5", dockerfile)
    assert result.returncode == 2
    assert "x/y:1: cannot reach http://127.0.0.1:9" in result.stderr


@pytest.mark.parametrize(
    ("text", "registry", "repository", "tag"),
    [
        ("python:3.12-slim-bookworm", "docker.io", "library/python", "3.12-slim-bookworm"),
        ("vllm/vllm-openai", "docker.io", "vllm/vllm-openai", "latest"),
        ("ghcr.io/org/tool:v1@sha256:" + "a" * 64, "ghcr.io", "org/tool", "v1"),
        ("localhost:5000/x:2", "localhost:5000", "x", "2"),
    ],
)
def test_references_parse_as_docker_reads_them(text: str, registry: str, repository: str, tag: str) -> None:
    ref = pin.ImageRef.parse(text)
    assert (ref.registry, ref.repository, ref.tag) == (registry, repository, tag)


def test_the_challenge_parser_is_bounded_and_handles_quoting() -> None:
    scheme, params = pin.parse_challenge(
        'Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:a/b:pull"'
    )
    assert scheme == "bearer"
    assert params == {
        "realm": "https://auth.docker.io/token",
        "service": "registry.docker.io",
        "scope": "repository:a/b:pull",
    }
    assert pin.parse_challenge('Bearer realm="a\\"b", error=invalid_token')[1] == {
        "realm": 'a"b',
        "error": "invalid_token",
    }
    with pytest.raises(pin.PinError, match="too long"):
        pin.parse_challenge("Bearer " + "x=" * 5000)


def test_a_token_realm_must_be_https_for_an_https_registry() -> None:
    resolver = pin.Resolver({})
    with pytest.raises(pin.PinError, match="is not HTTPS"):
        resolver._token("https://registry.example", "a/b", 'Bearer realm="http://evil.example/token"')
