"""``python -m sparkrun_operator.runtime.bench``: run ONE scenario of an InferenceBenchmark with a
real framework (tools image) and print its result as the last line of the log.

Input: ``--plan JSON`` (what ``render/benchmark.py`` writes): framework, profile, bench_args, the
scenario, the target's OpenAI base URL and model names, the tokenizer (a local path, or a repo id
fetched from the Hub at ``hfEndpoint``/``HF_ENDPOINT`` with ``huggingface_hub``: only the
tokenizer files; llama-benchy is never left to pick one, so it never falls back to downloading
``gpt2``).

Output (stdout, one JSON object per line): ``{"event": "started", ...}``, then
``{"event": "result", "scenario", "framework", "frameworkVersion", "result": {...}, "raw": "..."}``
(the result in ``api.benchmark.ScenarioResult``'s wire shape, ``raw`` the framework's own
output bounded to ``benchparse.RAW_LIMIT``) or ``{"event": "error", "reason", "message"}``.
Exit status 0 with a result; 2 when the framework measured nothing or failed; 3 on a bad plan
(including one over ``safeload.BENCH_PLAN``: 1 MiB, 32 levels of nesting).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Final

from sparkrun_operator import safeload
from sparkrun_operator.api.benchmark import LLAMA_BENCHY, TOOL_EVAL_BENCH
from sparkrun_operator.api.clip import MESSAGE_MAX, clip
from sparkrun_operator.runtime import benchframeworks, benchparse

PACKAGES: Final = {LLAMA_BENCHY: "llama-benchy", TOOL_EVAL_BENCH: "tool-eval-bench"}
TOKENIZER_FILES: Final = ["tokenizer.json", "tokenizer_config.json", "*.model", "vocab*", "merges.txt"]
EXIT_FAILED: Final = 2
EXIT_BAD_PLAN: Final = 3


def emit(event: str, **fields: Any) -> None:
    """One JSON line; a ``message`` (it may quote the Hub's or the framework's words) is cut at
    ``MESSAGE_MAX`` characters."""
    if isinstance(fields.get("message"), str):
        fields["message"] = clip(fields["message"], MESSAGE_MAX)
    print(json.dumps({"event": event, **fields}, separators=(",", ":")), flush=True)


def framework_version(framework: str) -> str | None:
    """The installed version, asked of the interpreter that runs the framework."""
    code = f"import importlib.metadata as m; print(m.version({PACKAGES[framework]!r}))"
    try:
        out = subprocess.run(
            [benchframeworks.python(), "-c", code], capture_output=True, text=True, timeout=60, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def resolve_tokenizer(name: str, workdir: Path, endpoint: str | None) -> str:
    """A local directory holding ``tokenizer.json``: ``name`` itself, or its files from the Hub."""
    if Path(name).exists():
        return name
    from huggingface_hub import snapshot_download

    target = workdir / "tokenizer"
    snapshot_download(
        repo_id=name,
        allow_patterns=TOKENIZER_FILES,
        local_dir=str(target),
        endpoint=endpoint or os.environ.get("HF_ENDPOINT") or None,
        token=os.environ.get("HF_TOKEN") or None,
    )
    if not (target / "tokenizer.json").exists():
        raise FileNotFoundError(f"{name}: the repository has no tokenizer.json")
    return str(target)


def _run(argv: tuple[str, ...], timeout: float, log: Path) -> int:
    """Run the framework in the scratch directory (tool-eval-bench keeps a ./data/ database)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with log.open("wb") as out:
        try:
            proc = subprocess.run(
                argv, stdout=out, stderr=subprocess.STDOUT, timeout=timeout, env=env, cwd=log.parent
            )
        except subprocess.TimeoutExpired:
            return -1
    return proc.returncode


def run_scenario(plan: dict[str, Any], workdir: Path) -> int:
    framework = benchframeworks.check_framework(str(plan["framework"]))
    scenario = dict(plan.get("scenario") or {})
    args = benchframeworks.merged_args(
        framework,
        profile=plan.get("profile"),
        bench_args={**(plan.get("benchArgs") or {}), **(scenario.get("args") or {})},
        scenario=scenario,
    )
    tokenizer = None
    if framework == LLAMA_BENCHY:
        wanted = args.pop("tokenizer", None) or plan.get("tokenizer") or plan.get("modelId") or plan["model"]
        try:
            tokenizer = resolve_tokenizer(str(wanted), workdir, plan.get("hfEndpoint"))
        except Exception as error:  # NB: whatever the Hub client raises: the run cannot start
            emit("error", reason="TokenizerUnavailable", message=f"{wanted}: {type(error).__name__}: {error}")
            return EXIT_FAILED
    call = benchframeworks.invocation(
        framework,
        base_url=str(plan["baseUrl"]).rstrip("/"),
        model=str(plan.get("modelId") or plan["model"]),
        served_name=str(plan["model"]),
        tokenizer=tokenizer,
        args=args,
        workdir=str(workdir),
    )
    version = framework_version(framework)
    emit("started", scenario=scenario.get("name"), framework=framework, frameworkVersion=version, args=args)
    log = workdir / "output.log"
    began = time.monotonic()
    code = _run(call.argv, float(plan.get("timeoutSeconds") or 3600), log)
    raw = benchparse.bounded(log.read_text(errors="replace") if log.exists() else "")
    result_text = Path(call.result_file).read_text() if Path(call.result_file).exists() else ""
    if framework == LLAMA_BENCHY:
        progress = Path(call.progress_file or "")
        text = progress.read_text() if call.progress_file and progress.exists() else ""
        result = benchparse.llama_benchy(text, result_text)
    else:
        try:
            result = benchparse.tool_eval_bench(result_text)
        except ValueError as error:
            emit("error", reason="UnparsableOutput", message=str(error), raw=raw)
            return EXIT_FAILED
    result["wallSeconds"] = round(time.monotonic() - began, 3)
    if code == -1:
        emit("error", reason="FrameworkTimeout", message=f"{framework} ran past its timeout", raw=raw)
        return EXIT_FAILED
    if not result["requests"]:
        reason = "FrameworkFailed" if code else "NothingMeasured"
        message = (
            f"{framework} exited {code} and measured no request ({result['errorsByKind'] or 'no errors'})"
        )
        emit("error", reason=reason, message=message, raw=raw, result=result)
        return EXIT_FAILED
    emit(
        "result",
        scenario=scenario.get("name"),
        framework=framework,
        frameworkVersion=version,
        exitCode=code,
        result=result,
        raw=raw,
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sparkrun_operator.runtime.bench")
    parser.add_argument("--plan", required=True, help="the scenario's plan as JSON (or @FILE)")
    parser.add_argument("--workdir", default=None, help="scratch directory (default: a temporary one)")
    opts = parser.parse_args(argv)
    text = Path(opts.plan[1:]).read_text() if opts.plan.startswith("@") else opts.plan
    try:
        plan = safeload.load_json(text, safeload.BENCH_PLAN)
        if not isinstance(plan, dict):
            raise ValueError("the plan is not a JSON object")
        with tempfile.TemporaryDirectory(dir=opts.workdir) as tmp:
            return run_scenario(plan, Path(tmp))
    except (benchframeworks.FrameworkError, ValueError, KeyError, OSError) as error:
        emit("error", reason="InvalidPlan", message=f"{type(error).__name__}: {error}")
        return EXIT_BAD_PLAN


if __name__ == "__main__":
    sys.exit(main())
