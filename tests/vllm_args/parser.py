"""vLLM's own command-line parser, run in the vLLM Python named by ``SPARKRUN_VLLM_PYTHON`` (its
own venv: its pins are not ours), on many ``vllm`` argument lists in one process (importing vLLM
is slow): ``serve``'s action is replaced by a record of what it parsed, so nothing is loaded or
started."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

# Runs in the vLLM venv: vLLM's CLI main with `serve` made a no-op that records what it parsed.
# Without a GPU vLLM cannot infer a device, and building the serve parser needs one: use the CPU
# platform, as vLLM's own `vllm bench` does on such machines.
PARSE = r"""
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


def parse_commands(
    python: str, commands: list[list[str]], *, cwd: Path | None = None
) -> tuple[list[dict[str, Any]], str]:
    """One verdict per argument list (``{"ok", "model"}`` or ``{"ok": False, "error"}``), and
    vLLM's stderr (its refusals name the offending argument there). ``cwd``: where relative
    paths in the arguments are looked up (vLLM checks that a path-like ``--chat-template`` exists)."""
    run = subprocess.run(
        [python, "-c", PARSE],
        input=json.dumps(commands),
        capture_output=True,
        text=True,
        timeout=900,
        cwd=cwd,
    )
    lines = [line for line in run.stdout.splitlines() if line.startswith("RESULTS ")]
    assert run.returncode == 0, run.stderr[-5000:]
    assert lines, run.stderr[-5000:]
    results: list[dict[str, Any]] = json.loads(lines[-1].removeprefix("RESULTS "))
    assert len(results) == len(commands)
    return results, run.stderr
