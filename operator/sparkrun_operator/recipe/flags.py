"""``vllm serve`` arguments of a recipe: operator-owned flags, command templates, default flags.

The operator renders some flags itself (port, parallelism, multi-node rendezvous, served name,
sleep mode; :data:`OWNED_FLAGS`): they are taken out of a recipe's ``command`` template and may
not appear in ``spec.engine.args``. A recipe without a template gets the flags of the
``defaults`` it knows (:func:`default_flags`).

Pure: no I/O.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping
from typing import Any, Final, Literal

from sparkrun_operator.api.recipe import RecipeIssue

Severity = Literal["error", "warning"]


#: ``vllm serve`` flags the operator renders itself; users and templates may not set them.
#: Value: whether the flag takes a value (``--served-model-name`` takes one or more).
OWNED_FLAGS: Final[Mapping[str, bool]] = {
    "--model": True,
    "--host": True,
    "--port": True,
    "--served-model-name": True,
    "--tensor-parallel-size": True,
    "-tp": True,
    "--pipeline-parallel-size": True,
    "-pp": True,
    "--distributed-executor-backend": True,
    "--nnodes": True,
    "--node-rank": True,
    "--master-addr": True,
    "--master-port": True,
    "--headless": False,
    "--enable-sleep-mode": False,
    "--revision": True,
    "--max-model-len": True,
    "--gpu-memory-utilization": True,
}

_WHERE_OWNED: Final[Mapping[str, str]] = {
    "--model": "spec.model.name",
    "--revision": "spec.model.revision",
    "--served-model-name": "spec.model.servedName",
    "--tensor-parallel-size": "spec.topology.tensorParallel",
    "-tp": "spec.topology.tensorParallel",
    "--pipeline-parallel-size": "spec.topology.pipelineParallel",
    "-pp": "spec.topology.pipelineParallel",
    "--enable-sleep-mode": "spec.engine.enableSleepMode",
    "--max-model-len": "spec.engine.maxModelLen",
    "--gpu-memory-utilization": "spec.engine.gpuMemoryUtilization",
}

#: Recipe ``defaults`` keys the operator consumes itself (not turned into extra flags).
_CONSUMED_DEFAULTS: Final = frozenset(
    {
        "port",
        "host",
        "tensor_parallel",
        "pipeline_parallel",
        "served_model_name",
        "max_model_len",
        "gpu_memory_utilization",
        "model",
        "model_revision",
        "distributed_executor_backend",
    }
)

#: Recipe ``defaults`` keys rendered as ``vllm serve`` flags when the recipe has no command
#: template. ``None``: a value flag; ``"bool"``: a switch (``True`` sets it);
#: ``"optional-bool"``: vLLM's ``--x`` / ``--no-x`` pair.
_DEFAULT_FLAGS: Final[Mapping[str, str | None]] = {
    "max_num_batched_tokens": None,
    "max_num_seqs": None,
    "dtype": None,
    "quantization": None,
    "kv_cache_dtype": None,
    "load_format": None,
    "tool_call_parser": None,
    "reasoning_parser": None,
    "chat_template": None,
    "swap_space": None,
    "block_size": None,
    "seed": None,
    "trust_remote_code": "bool",
    "enforce_eager": "bool",
    "enable_auto_tool_choice": "bool",
    "enable_prefix_caching": "optional-bool",
    "enable_chunked_prefill": "optional-bool",
}

#: One step of the template scan (sparkrun's brace rules): an escape pair, a ``{...}`` span
#: without braces inside (a placeholder when a setting has that name), or a lone brace.
_TEMPLATE_TOKEN = re.compile(r"\{\{|\}\}|\{[^{}]*\}|[{}]")
#: The template's own literal braces while references are resolved (NUL cannot reach an argv).
_OPEN, _CLOSE = "\x00(", "\x00)"
#: Substitution passes (a value may name another setting).
_MAX_PASSES: Final = 10
#: The most characters a filled command template may make, checked while it is filled (before
#: the command is split or rendered): the engine's arguments are in every JobSet twice (the
#: leader's ``args``, a worker's shell line), under etcd's 1.5 MiB object limit with the rest of
#: the pods, and they are resolved on the operator's and the shim's event loops. Two arguments of
#: ``spec.engine.args``' own bound (32,768 characters) fit.
MAX_FILLED_COMMAND: Final = 65536
#: The most words (``vllm serve``, the model and the arguments) a filled command may have: a
#: real recipe has a few dozen; ``spec.engine.args`` has at most 128 items.
MAX_COMMAND_WORDS: Final = 1024
_TRAILING_BLANK_CONTINUATION = re.compile(r"\\[ \t]+\n")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class Issues:
    """Issues found while resolving, in order."""

    def __init__(self) -> None:
        self.items: list[RecipeIssue] = []

    def add(self, severity: Severity, message: str, field: str | None = None) -> None:
        self.items.append(RecipeIssue(severity=severity, message=message, field=field))

    @property
    def failed(self) -> bool:
        return any(i.severity == "error" for i in self.items)


def flag_name(token: str) -> str | None:
    """The normalised flag of an argument (``--max_model_len=8`` -> ``--max-model-len``), else None."""
    if not token.startswith("-") or token == "-" or token == "--":
        return None
    name = token.split("=", 1)[0]
    if name.startswith("--"):
        return "--" + name[2:].replace("_", "-")
    return name


def check_user_args(args: Iterable[str], *, path: str = "spec.engine.args") -> list[RecipeIssue]:
    """Errors for user arguments that set a flag the operator owns."""
    issues: list[RecipeIssue] = []
    for i, arg in enumerate(args):
        name = flag_name(arg)
        if name is not None and name in OWNED_FLAGS:
            where = _WHERE_OWNED.get(name)
            hint = f"set {where} instead" if where else "the operator sets it"
            issues.append(
                RecipeIssue(
                    severity="error", message=f"{path} may not set {name}: {hint}", field=f"{path}[{i}]"
                )
            )
    return issues


def strip_owned(tokens: Iterable[str]) -> list[str]:
    """``tokens`` without any flag in :data:`OWNED_FLAGS` (and the values those flags take)."""
    out: list[str] = []
    skipping_values = False
    multi = False
    for token in tokens:
        name = flag_name(token)
        if skipping_values:
            if name is None:
                if multi:
                    continue
                skipping_values = False
                continue
            skipping_values = False
        if name is not None and name in OWNED_FLAGS:
            takes_value = OWNED_FLAGS[name]
            if takes_value and "=" not in token:
                skipping_values = True
                multi = name == "--served-model-name"
            continue
        out.append(token)
    return out


def fill_template(template: str, *, settings: Mapping[str, Any]) -> tuple[str, list[str]]:
    """Fill ``{key}`` placeholders as sparkrun's ``Recipe.render_command`` does; returns the text
    and the placeholders of the template no setting fills.

    - ``{{``/``}}`` are escapes (one literal brace) only in a template that contains ``{{``;
      otherwise they are literal text, so inline JSON (``'{"a": {"b": 1}}'``) keeps its braces.
      The rule applies to the template's own text, never to a substituted value.
    - A ``{...}`` span without braces inside is a placeholder when a setting has that name (any
      name, ``{a.b}`` included); else it stays literal, and an identifier there is reported missing.
    - A substituted value may name further settings (``http://h:{port}``): up to
      :data:`_MAX_PASSES` passes resolve them; text that still changes after them refers to itself.
    - Values are rendered with ``str()`` (``True``, ``0.5``), as sparkrun's template engine does.

    Raises ``ValueError`` for text that does not settle, grows past :data:`MAX_FILLED_COMMAND`
    characters (checked before each value is added), or holds a NUL character (which no engine
    argument can carry).
    """
    missing: list[str] = []
    escapes = "{{" in template
    budget = _Budget(MAX_FILLED_COMMAND - len(template))

    def first(match: re.Match[str]) -> str:
        token = match.group(0)
        if token in ("{{", "}}"):
            return (_OPEN if token == "{{" else _CLOSE) * (1 if escapes else 2)
        if token in ("{", "}"):
            return _OPEN if token == "{" else _CLOSE
        key = token[1:-1]
        if settings.get(key) is not None:
            return budget.spend(settings[key])
        if _IDENTIFIER.fullmatch(key):
            missing.append(key)
        return token

    text = _TEMPLATE_TOKEN.sub(first, _no_nul(template))
    for _ in range(_MAX_PASSES):
        budget.left = MAX_FILLED_COMMAND - len(text)
        after = _resolve_references(text, settings, budget)
        if after == text:
            return text.replace(_OPEN, "{").replace(_CLOSE, "}"), missing
        text = after
    raise ValueError(f"a setting refers to itself: the command still changes after {_MAX_PASSES} passes")


def _resolve_references(text: str, settings: Mapping[str, Any], budget: _Budget) -> str:
    """One pass over filled text: each shortest ``{...}`` on one line (braces inside included, as
    sparkrun's later passes match it, so a JSON value's own braces make it miss) whose content,
    without its outer braces, names a setting is replaced by that setting.

    Linear in the text (a regex ``\\{(.*?)\\}`` rescans a line for every ``{`` without a ``}``):
    the next ``}`` and the next line break are found once and reused while they lie ahead.
    """
    out: list[str] = []
    copied = 0
    close = newline = -1
    at = text.find("{")
    while at != -1:
        if close < at:
            close = text.find("}", at)
            if close == -1:
                break
        if newline < at:
            newline = text.find("\n", at)
            newline = len(text) if newline == -1 else newline
        if newline < close:  # no "}" on this line: no "{" before the line break matches
            at = text.find("{", newline + 1)
            continue
        value = settings.get(text[at : close + 1].strip("{}"))
        if value is not None:
            out += [text[copied:at], budget.spend(value)]
            copied = close + 1
        at = text.find("{", close + 1)
    out.append(text[copied:])
    return "".join(out)


class _Budget:
    """Characters substituted values may still add in one pass (checked before they are added)."""

    def __init__(self, left: int = MAX_FILLED_COMMAND) -> None:
        self.left = left

    def spend(self, value: Any) -> str:
        text = _no_nul(str(value))
        self.left -= len(text)
        if self.left < 0:
            raise ValueError(f"the filled command grows past {MAX_FILLED_COMMAND} characters")
        return text


def _no_nul(text: str) -> str:
    if "\x00" in text:
        raise ValueError("a NUL character cannot be passed to the engine")
    return text


def _format_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def template_args(command: str, *, settings: Mapping[str, Any], issues: Issues) -> list[str] | None:
    """Arguments after the model from a ``vllm serve`` command template, owned flags removed."""
    try:
        text, missing = fill_template(command, settings=settings)
    except ValueError as error:
        issues.add("error", f"command template cannot be filled: {error}", "command")
        return None
    for key in dict.fromkeys(missing):
        issues.add("error", f"command template uses {{{key}}}, which no default or field provides", "command")
    # NB: as the shell reads it: a backslash-newline joins lines (one with blanks between the two
    # is repaired first, as sparkrun does); the operator runs no shell, so no expansion happens.
    text = _TRAILING_BLANK_CONTINUATION.sub("\\\n", text).replace("\\\n", "")
    try:
        tokens = _words(text)
    except ValueError as error:
        issues.add("error", f"command template is not valid shell syntax: {error}", "command")
        return None
    if tokens is None:
        issues.add("error", f"command template makes more than {MAX_COMMAND_WORDS} words", "command")
        return None
    if tokens[:2] != ["vllm", "serve"]:
        shown = " ".join(tokens[:2]) or "(empty)"
        issues.add(
            "error",
            f"command must start with 'vllm serve' (this operator runs vLLM), not {shown!r}",
            "command",
        )
        return None
    rest = tokens[2:]
    if rest and flag_name(rest[0]) is None:
        rest = rest[1:]  # the positional model: the operator renders it
    return strip_owned(rest)


def _words(text: str) -> list[str] | None:
    """``shlex.split(text)``, read word by word: ``None`` once it passes :data:`MAX_COMMAND_WORDS`
    (the rest is not read)."""
    lexer = shlex.shlex(text, posix=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    words: list[str] = []
    for word in lexer:
        if len(words) == MAX_COMMAND_WORDS:
            return None
        words.append(word)
    return words


def default_flags(defaults: Mapping[str, Any], *, issues: Issues) -> list[str]:
    """``vllm serve`` flags for recipe defaults the operator knows (no command template)."""
    out: list[str] = []
    for key in sorted(defaults):
        value = defaults[key]
        if key in _CONSUMED_DEFAULTS or value is None:
            continue
        if key not in _DEFAULT_FLAGS:
            issues.add(
                "warning",
                f"default {key!r} maps to no vllm serve flag the operator knows; without a command "
                "template it is not passed to the engine",
                f"defaults.{key}",
            )
            continue
        flag = "--" + key.replace("_", "-")
        kind = _DEFAULT_FLAGS[key]
        if kind is None:
            out += [flag, _format_value(value)]
        elif bool(value):
            out.append(flag)
        elif kind == "optional-bool":
            out.append("--no-" + flag[2:])
    return out
