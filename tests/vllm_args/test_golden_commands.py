"""Every engine command the renderer produces (the golden files of tests/unit/render) is accepted
by the real argument parser of the pinned vLLM release (`vllm serve`, including its validation).

The commands are taken from the goldens' `vllm` containers: `command` + `args` on leaders, and
the `/bin/sh -c "exec vllm serve ..."` line of workers with the shell arithmetic of the node
rank evaluated as the shell would. They are parsed in the vLLM Python named by
``SPARKRUN_VLLM_PYTHON`` (its own venv: its pins are not ours) by vLLM's own CLI entry point,
with the serve command's action replaced by a print, so nothing is loaded or started.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkrun_operator.api.workload import DEFAULT_ENGINE_IMAGE
from tests.vllm_args.parser import parse_commands

GOLDEN = Path(__file__).resolve().parents[1] / "unit" / "render" / "golden"
PYTHON = os.environ.get("SPARKRUN_VLLM_PYTHON", "")


def _shell_words(line: str, index: int) -> list[str]:
    """The words of a worker's `exec vllm serve ...` line for JOB_COMPLETION_INDEX=index."""
    line = re.sub(r"\$\(\(JOB_COMPLETION_INDEX\+(\d+)\)\)", lambda m: str(index + int(m[1])), line)
    assert "$" not in line, f"unexpected shell expansion left in {line!r}"
    words = shlex.split(line)
    assert words[:1] == ["exec"], words
    return words[1:]


def _commands(doc: dict[str, Any]) -> list[list[str]]:
    out = []
    if doc.get("kind") != "JobSet":
        return out
    for job in doc["spec"]["replicatedJobs"]:
        pod = job["template"]["spec"]["template"]["spec"]
        for container in pod["containers"]:
            if container["name"] != "vllm":
                continue
            command, args = container.get("command", []), container.get("args", [])
            if command[:2] == ["vllm", "serve"]:
                out.append(["serve", *args])
            elif command == ["/bin/sh", "-c"]:
                words = _shell_words(args[0], 0)
                assert words[:2] == ["vllm", "serve"], words
                out.append(["serve", *words[2:]])
            else:
                raise AssertionError(f"an engine command the renderer should not produce: {command}")
    return out


def _all_commands() -> dict[str, list[list[str]]]:
    found = {}
    for path in sorted(GOLDEN.glob("*.yaml")):
        commands = [c for doc in yaml.safe_load_all(path.read_text()) if doc for c in _commands(doc)]
        if commands:
            found[path.stem] = commands
    return found


def test_the_vllm_of_the_test_is_the_default_engine_release() -> None:
    version = subprocess.run(
        [PYTHON, "-c", "import vllm; print(vllm.__version__)"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert DEFAULT_ENGINE_IMAGE.endswith(f":v{version}"), (DEFAULT_ENGINE_IMAGE, version)


CASES = _all_commands()


@pytest.fixture(scope="module")
def verdicts() -> dict[str, list[dict[str, Any]]]:
    """Every command of every golden file, parsed by vLLM in one process (importing it is slow)."""
    flat = [command for commands in CASES.values() for command in commands]
    results, stderr = parse_commands(PYTHON, flat)
    out, at = {}, 0
    for case, commands in CASES.items():
        out[case] = results[at : at + len(commands)]
        at += len(commands)
    out["_stderr"] = [{"text": stderr}]
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden_commands_parse(case: str, verdicts: dict[str, list[dict[str, Any]]]) -> None:
    stderr = verdicts["_stderr"][0]["text"]
    for command, verdict in zip(CASES[case], verdicts[case], strict=True):
        assert verdict["ok"], f"{case}: vLLM refused {shlex.join(command)}: {verdict}\n{stderr[-3000:]}"
        assert verdict["model"] == command[1]
