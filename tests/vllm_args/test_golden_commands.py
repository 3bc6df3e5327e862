"""Every engine command the renderer produces (the golden files of tests/unit/render) is accepted
by the real argument parser of the pinned vLLM release (`vllm serve`, including its validation).

The commands are taken from the goldens' `vllm` containers: `command` + `args` on leaders, and
the `/bin/sh -c "exec vllm serve ..."` line of workers with the shell arithmetic of the node
rank evaluated as the shell would. They are parsed in the vLLM Python named by
``SPARKRUN_VLLM_PYTHON`` (its own venv: its pins are not ours) by vLLM's own CLI entry point,
with the serve command's action replaced by a print, so nothing is loaded or started.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkrun_operator.api.workload import DEFAULT_ENGINE_IMAGE

GOLDEN = Path(__file__).resolve().parents[1] / "unit" / "render" / "golden"
PYTHON = os.environ.get("SPARKRUN_VLLM_PYTHON", "")

# Runs in the vLLM venv: vLLM's CLI main with `serve` made a no-op that records what it parsed.
# Without a GPU vLLM cannot infer a device, and building the serve parser needs one: use the CPU
# platform, as vLLM's own `vllm bench` does on such machines.
_PARSE = r"""
import json, sys
from vllm import platforms
from vllm.platforms.cpu import CpuPlatform
if platforms.current_platform.is_unspecified():
    platforms.current_platform = CpuPlatform()
from vllm.entrypoints.cli import main as cli_main
from vllm.entrypoints.cli import serve as serve_mod
parsed = []
serve_mod.ServeSubcommand.cmd = staticmethod(lambda args: parsed.append(args.model_tag))
results = []
for argv in json.loads(sys.stdin.read()):
    sys.argv = ["vllm", *argv]
    parsed.clear()
    try:
        cli_main.main()
        results.append({"ok": bool(parsed), "model": parsed[0] if parsed else None})
    except SystemExit as exc:
        results.append({"ok": False, "error": f"exit {exc.code}"})
    except Exception as exc:
        results.append({"ok": False, "error": repr(exc)})
print("RESULTS " + json.dumps(results))
"""


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
    run = subprocess.run(
        [PYTHON, "-c", _PARSE], input=json.dumps(flat), capture_output=True, text=True, timeout=900
    )
    lines = [line for line in run.stdout.splitlines() if line.startswith("RESULTS ")]
    assert run.returncode == 0, run.stderr[-5000:]
    assert lines, run.stderr[-5000:]
    results: list[dict[str, Any]] = json.loads(lines[-1].removeprefix("RESULTS "))
    assert len(results) == len(flat)
    out, at = {}, 0
    for case, commands in CASES.items():
        out[case] = results[at : at + len(commands)]
        at += len(commands)
    out["_stderr"] = [{"text": run.stderr}]
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden_commands_parse(case: str, verdicts: dict[str, list[dict[str, Any]]]) -> None:
    stderr = verdicts["_stderr"][0]["text"]
    for command, verdict in zip(CASES[case], verdicts[case], strict=True):
        assert verdict["ok"], f"{case}: vLLM refused {shlex.join(command)}: {verdict}\n{stderr[-3000:]}"
        assert verdict["model"] == command[1]
