"""The benchmark frameworks the runner drives (``llama-benchy``, ``tool-eval-bench``): how a
scenario's arguments become the framework's own command line.

Arguments merge as sparkrun merges them: the framework's defaults, then the named profile's
``args``, then ``bench_args`` (the user's ``-b key=value``), then what the scenario pins
(concurrency, prompt and output lengths, request count). Keys are the framework's own flag names
with ``_`` for ``-``; a list becomes several values after one flag (llama-benchy) or one
comma-separated value (tool-eval-bench's csv arguments); ``true`` is a bare flag, ``false``
drops it. The runner owns the flags that wire the framework to the target and to its output
files (``base_url``, ``model``, ``save_result``, ...): a user value for one of them is refused.

Pure: no I/O. The framework *names* are ``api.benchmark.FRAMEWORKS``.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from sparkrun_operator.api.benchmark import FRAMEWORKS, LLAMA_BENCHY, TOOL_EVAL_BENCH


class FrameworkError(ValueError):
    """An unknown framework, profile or argument: the message names what is known."""


@dataclass(frozen=True)
class Invocation:
    """What the runner executes for one scenario, and the files the framework writes."""

    argv: tuple[str, ...]
    result_file: str
    progress_file: str | None = None
    args: Mapping[str, Any] = field(default_factory=dict)


# sparkrun's defaults per framework (llama-benchy: pp 2048, depth 0, prefix caching measured;
# tool-eval-bench: one scenario at a time, 120 s per request, 8 turns, temperature 0).
DEFAULTS: Final[Mapping[str, Mapping[str, Any]]] = {
    LLAMA_BENCHY: {"pp": [2048], "depth": [0], "enable_prefix_caching": True},
    TOOL_EVAL_BENCH: {"parallel": 1, "timeout": 120, "max_turns": 8, "temperature": 0.0},
}

# Built-in profiles (sparkrun's profile is a named {framework, args}; a registry holds them there,
# this table here).
PROFILES: Final[Mapping[str, Mapping[str, Any]]] = {
    "quick": {"framework": LLAMA_BENCHY, "args": {"pp": [512], "tg": [32], "runs": 1}},
    "standard": {"framework": LLAMA_BENCHY, "args": {"pp": [2048], "tg": [128], "runs": 3}},
    "long-context": {
        "framework": LLAMA_BENCHY,
        "args": {"pp": [2048], "tg": [128], "depth": [0, 4096, 16384], "runs": 3},
    },
    "tools-short": {"framework": TOOL_EVAL_BENCH, "args": {"short": True}},
    "tools-full": {"framework": TOOL_EVAL_BENCH, "args": {}},
}

_ALIASES: Final = {"prefix_caching": "enable_prefix_caching"}
_OWNED: Final = {
    LLAMA_BENCHY: frozenset(
        {"base_url", "model", "served_model_name", "format", "save_result", "emit_progress", "api_key"}
    ),
    TOOL_EVAL_BENCH: frozenset({"base_url", "model", "json", "json_file", "api_key", "output_dir"}),
}
_LLAMA_LISTS: Final = frozenset({"pp", "tg", "depth", "concurrency"})
_TOOL_LISTS: Final = frozenset({"scenarios", "categories"})  # several values after one flag
_TOOL_CSV: Final = frozenset({"depth", "concurrency", "spec_prompts", "mmlu_subjects"})
# tool-eval-bench modes that exit before writing --json-file (sparkrun refuses them too).
_TOOL_NO_ARTIFACT: Final = frozenset(
    {
        "needle_only",
        "decision_bench_only",
        "decision_live",
        "perf_only",
        "gsm8k_only",
        "mmlu_only",
        "ifeval_only",
        "skip_tool_eval",
        "spec_bench",
        "spec_live",
        "context_pressure_sweep",
        "dry_run",
        "history",
        "leaderboard",
        "probe",
        "compare",
        "export",
    }
)


BENCH_PYTHON: Final = "/opt/bench/bin/python"  # the tools image's framework venv


def python() -> str:
    """The interpreter that has the frameworks: ``SPARKRUN_BENCH_PYTHON``, the tools image's
    ``/opt/bench`` venv, else this one (a development install has them through ``[bench]``)."""
    chosen = os.environ.get("SPARKRUN_BENCH_PYTHON")
    if chosen:
        return chosen
    return BENCH_PYTHON if os.path.exists(BENCH_PYTHON) else sys.executable


def check_framework(name: str) -> str:
    if name not in FRAMEWORKS:
        raise FrameworkError(f"unknown benchmark framework {name!r}; known: {', '.join(FRAMEWORKS)}")
    return name


def profile_args(framework: str, profile: str | None) -> dict[str, Any]:
    """The profile's arguments; a profile of another framework or an unknown one is refused."""
    if not profile:
        return {}
    known = PROFILES.get(profile)
    if known is None:
        raise FrameworkError(f"unknown benchmark profile {profile!r}; known: {', '.join(sorted(PROFILES))}")
    if known["framework"] != framework:
        raise FrameworkError(f"profile {profile!r} is for {known['framework']}, not {framework}")
    return dict(known["args"])


def merged_args(
    framework: str,
    *,
    profile: str | None,
    bench_args: Mapping[str, Any],
    scenario: Mapping[str, Any],
) -> dict[str, Any]:
    """defaults <- profile <- bench_args <- the scenario's pinned figures."""
    check_framework(framework)
    args: dict[str, Any] = dict(DEFAULTS[framework])
    for source in (profile_args(framework, profile), bench_args):
        for key, value in source.items():
            args[_ALIASES.get(key, key)] = value
    owned = sorted(k for k in args if k in _OWNED[framework])
    if owned:
        raise FrameworkError(f"{framework}: the runner sets {', '.join(owned)}; remove it from bench_args")
    if framework == LLAMA_BENCHY:
        _pin_llama(args, scenario)
    else:
        _pin_tool(args, scenario)
    return args


def _pin_llama(args: dict[str, Any], scenario: Mapping[str, Any]) -> None:
    concurrency = scenario.get("concurrency")
    if concurrency:
        args["concurrency"] = [int(concurrency)]
    if scenario.get("inputTokens"):
        args["pp"] = [int(scenario["inputTokens"])]
    if scenario.get("outputTokens"):
        args["tg"] = [int(scenario["outputTokens"])]
    if scenario.get("requests"):
        # NB: llama-benchy sends `concurrency` requests per run.
        per_run = int(concurrency or 1)
        args["runs"] = max(1, math.ceil(int(scenario["requests"]) / per_run))


def _pin_tool(args: dict[str, Any], scenario: Mapping[str, Any]) -> None:
    refused = sorted(k for k in _TOOL_NO_ARTIFACT if args.get(k) not in (None, False))
    if refused:
        raise FrameworkError(f"tool-eval-bench modes without a JSON result: {', '.join(refused)}")
    if scenario.get("concurrency"):
        args["parallel"] = int(scenario["concurrency"])


def _flags(key: str, value: Any, *, lists: frozenset[str], csv: frozenset[str]) -> list[str]:
    flag = "--" + key.replace("_", "-")
    if isinstance(value, bool):
        return [flag] if value else []
    if value is None:
        return []
    if isinstance(value, list | tuple):
        if key in csv:
            return [flag, ",".join(str(v) for v in value)]
        if key in lists or lists is _LLAMA_LISTS:
            return [flag, *(str(v) for v in value)] if value else []
        return [flag, ",".join(str(v) for v in value)]
    if isinstance(value, dict):
        return [flag, json.dumps(value, separators=(",", ":"))]
    return [flag, str(value)]


def invocation(
    framework: str,
    *,
    base_url: str,
    model: str,
    served_name: str,
    tokenizer: str | None,
    args: Mapping[str, Any],
    workdir: str,
) -> Invocation:
    """The framework's command line against ``base_url`` (the OpenAI root, ``.../v1``)."""
    check_framework(framework)
    interpreter = python()
    result_file = f"{workdir}/result.json"
    if framework == LLAMA_BENCHY:
        progress = f"{workdir}/progress.jsonl"
        argv = [interpreter, "-m", "llama_benchy", "--base-url", base_url, "--model", model]
        argv += ["--served-model-name", served_name, "--format", "json"]
        argv += ["--save-result", result_file, "--emit-progress", progress]
        rest = dict(args)
        if tokenizer:
            rest["tokenizer"] = tokenizer
        for key, value in rest.items():
            argv += _flags(key, value, lists=_LLAMA_LISTS, csv=frozenset())
        return Invocation(tuple(argv), result_file, progress, args)
    argv = [interpreter, "-m", "tool_eval_bench", "--base-url", base_url, "--model", served_name]
    argv += ["--json", "--json-file", result_file, "--no-live", "--output-dir", f"{workdir}/runs"]
    for key, value in args.items():
        argv += _flags(key, value, lists=_TOOL_LISTS, csv=_TOOL_CSV)
    return Invocation(tuple(argv), result_file, None, args)
