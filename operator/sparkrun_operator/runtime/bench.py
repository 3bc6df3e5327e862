"""``python -m sparkrun_operator.runtime.bench``: run ONE scenario of an InferenceBenchmark with a
real framework (tools image) and print its result as the last line of the log.

Input: ``--plan JSON`` (what ``render/benchmark.py`` writes): framework, profile, bench_args, the
scenario, the target's OpenAI base URL and model names, the tokenizer, and ``modelCache`` (the
ModelCache the target serves from, mounted read-only: its root and the model's snapshot there).

llama-benchy is never left to pick a tokenizer (so it never falls back to downloading ``gpt2``)
nor a text (so it never fetches its default book). The tokenizer (a directory holding
``tokenizer.json``) comes from the first of these places that has one:

1. ``spec.tokenizer`` (or ``benchArgs.tokenizer``): a path is read only inside the cache mount
   (relative to it, or absolute under it, symlinks resolved); a repo id is looked up in the cache
   when the cache holds that repository;
2. the target's ModelCache: the model's snapshot directory;
3. the Hub (``hfEndpoint``, else ``HF_ENDPOINT``, else huggingface.co), tokenizer files only, and
   only when an endpoint was configured, the target serves no ModelCache, or ``spec.tokenizer``
   names a repository the cache does not hold: an air-gapped cluster never waits on the public Hub.

None has one: ``{"event": "error", "reason": "TokenizerUnavailable"}``, the message naming each
place looked at and why it failed. The prompt text is the one the tools image ships
(:data:`PROMPT_TEXT`, ``runtime-images/tools/bench-text/``) unless ``benchArgs.book_url`` names
another; it reaches llama-benchy through its own text cache (``~/.cache/llama-benchy/<md5 of the
URL>.txt``, under a scratch ``HOME``) with a ``file://`` URL, which it can never download.

Output (stdout, one JSON object per line): ``{"event": "started", ...}``, then
``{"event": "result", "scenario", "framework", "frameworkVersion", "result": {...}, "raw": "..."}``
(the result in ``api.benchmark.ScenarioResult``'s wire shape, ``raw`` the framework's own
output bounded to ``benchparse.RAW_LIMIT``) or ``{"event": "error", "reason", "message"}``.
Exit status 0 with a result; 2 when the framework measured nothing or failed; 3 on a bad plan
(including one over ``safeload.BENCH_PLAN``: 1 MiB, 32 levels of nesting).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.parse
from dataclasses import dataclass, field
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
PUBLIC_HUB: Final = "https://huggingface.co"
#: The prompt text in the tools image (runtime-images/tools/Dockerfile copies it there).
PROMPT_TEXT: Final = "/opt/bench/share/sparkrun/the-adventures-of-sherlock-holmes-i-iv.txt"
PROMPT_TEXT_ENV: Final = "SPARKRUN_BENCH_TEXT"
#: A source checkout's copy (development installs and the testbed run the runner from one).
_CHECKOUT_TEXT: Final = (
    Path(__file__).resolve().parents[3] / "runtime-images" / "tools" / "bench-text" / Path(PROMPT_TEXT).name
)
#: Characters of one place's failure kept in the TokenizerUnavailable message.
_WHY_MAX: Final = 300


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


class TokenizerUnavailable(Exception):
    """No place had a tokenizer: the message names each place and why."""

    def __init__(self, tried: list[str]) -> None:
        super().__init__("no tokenizer: " + "; ".join(tried) if tried else "no tokenizer: no place to look")


@dataclass
class _Search:
    """Where the runner looks for a tokenizer, and what it found so far."""

    cache: dict[str, Any] | None
    endpoint: str | None
    workdir: Path
    tried: list[str] = field(default_factory=list)

    def fail(self, place: str, why: str) -> None:
        self.tried.append(f"{place}: {clip(why, _WHY_MAX)}")

    def root(self) -> Path | None:
        return Path(str(self.cache["root"])).resolve() if self.cache else None

    def inside(self, place: str, candidate: Path) -> str | None:
        """``candidate`` when it holds a ``tokenizer.json`` that lies (symlinks resolved) in the mount."""
        root = self.root()
        if root is None:
            self.fail(place, "a local path is read only inside the target's ModelCache, and it serves none")
            return None
        try:  # NB: the volume is the tenant's: symlink loops, names too long, NUL bytes
            real = candidate.resolve()
            if real != root and root not in real.parents:
                self.fail(place, f"outside the ModelCache mount {root}")
                return None
            file = (real / "tokenizer.json").resolve()
            is_file = file.is_file()
        except (OSError, ValueError, RuntimeError) as error:
            self.fail(place, f"unreadable: {type(error).__name__}: {error}")
            return None
        if root not in file.parents:
            self.fail(place, "its tokenizer.json leads outside the ModelCache mount")
        elif not is_file:
            self.fail(place, f"no tokenizer.json in {real}")
        else:
            return str(real)
        return None

    def hub(self, repo: str) -> str | None:
        endpoint = self.endpoint or PUBLIC_HUB
        place = f"the Hub {shown(endpoint)} ({repo})"
        try:
            from huggingface_hub import snapshot_download

            # NB: a directory not there yet: snapshot_download answers an existing one when the
            # Hub fails, as if it had fetched it
            target = Path(tempfile.mkdtemp(dir=self.workdir, prefix="hub-")) / "tokenizer"
            snapshot_download(
                repo_id=repo,
                allow_patterns=TOKENIZER_FILES,
                local_dir=str(target),
                endpoint=endpoint,
                token=os.environ.get("HF_TOKEN") or None,
                etag_timeout=10,
            )
        except Exception as error:  # NB: whatever the Hub client raises is one place's failure
            self.fail(place, hide_userinfo(f"{type(error).__name__}: {error}", endpoint))
            return None
        if not (target / "tokenizer.json").is_file():
            self.fail(place, "the repository has no tokenizer.json")
            return None
        return str(target)


def shown(url: str) -> str:
    """``url`` without the credentials of its ``user:password@`` part (never printed)."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:  # NB: "http://[x": no place to cut, so nothing of it is shown
        return "(an unparsable URL)"
    if "@" not in parts.netloc:
        return url
    return urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def hide_userinfo(text: str, url: str) -> str:
    """``text`` with ``url``'s ``user:password@`` removed wherever it appears (one linear pass)."""
    try:
        userinfo = urllib.parse.urlsplit(url).netloc.rpartition("@")[0]
    except ValueError:
        return text
    return text.replace(userinfo + "@", "") if userinfo else text


def _is_path(name: str) -> bool:
    """A path (absolute, ``./``/``../``, or more than one ``/``), not a repository id."""
    return name.startswith(("/", "./", "../")) or name.count("/") > 1


def resolve_tokenizer(
    explicit: str | None,
    default_repo: str,
    *,
    cache: dict[str, Any] | None,
    endpoint: str | None,
    workdir: Path,
) -> tuple[str, str]:
    """``(directory holding tokenizer.json, where it came from)``; raises
    :class:`TokenizerUnavailable` naming every place looked at (the module's docstring: the order)."""
    search = _Search(cache=cache, endpoint=endpoint, workdir=workdir)
    cache_repo = str(cache["repo"]) if cache else None
    cache_place = f"ModelCache {cache['name']} ({cache_repo})" if cache else ""
    hub_repo: str | None = default_repo
    if explicit and _is_path(explicit):
        root = search.root()
        found = search.inside(f"spec.tokenizer {explicit}", (root / explicit) if root else Path(explicit))
        if found:
            return found, f"spec.tokenizer {explicit}"
        hub_repo = None  # NB: a path is no repository id to ask a Hub for
    elif explicit:
        hub_repo = explicit
        if cache and explicit != cache_repo:
            search.fail(cache_place, f"holds {cache_repo}, not {explicit}")
    if cache and (not explicit or explicit == cache_repo or hub_repo is None):
        found = search.inside(cache_place, Path(str(cache["path"])))
        if found:
            return found, f"{cache_place} at {found}"
    allowed = bool(endpoint) or cache is None or (explicit is not None and explicit != cache_repo)
    if hub_repo and allowed:
        found = search.hub(hub_repo)
        if found:
            return found, f"the Hub {shown(endpoint or PUBLIC_HUB)} ({hub_repo})"
    elif hub_repo:
        search.fail(
            "the Hub",
            "not asked: the target serves a ModelCache and no hfEndpoint is set "
            "(set spec.hfEndpoint, or spec.tokenizer to a repository or a path in the cache)",
        )
    raise TokenizerUnavailable(search.tried)


def prompt_text() -> tuple[Path | None, list[str]]:
    """The shipped prompt text: ``SPARKRUN_BENCH_TEXT``, the image's copy, a checkout's copy."""
    chosen = os.environ.get(PROMPT_TEXT_ENV)
    places = [Path(chosen)] if chosen else [Path(PROMPT_TEXT), _CHECKOUT_TEXT]
    for place in places:
        if place.is_file():
            return place, []
    return None, [f"{p}: not a file" for p in places]


def seed_prompt_text(text: Path, home: Path) -> str:
    """Put ``text`` where llama-benchy looks for the book of a ``file://`` URL; that URL."""
    url = text.resolve().as_uri()
    cache = home / ".cache" / "llama-benchy"
    cache.mkdir(parents=True, exist_ok=True)
    digest = hashlib.md5(url.encode(), usedforsecurity=False).hexdigest()  # llama-benchy's cache key
    (cache / f"{digest}.txt").write_text(text.read_text(encoding="utf-8"), encoding="utf-8")
    return url


def _run(argv: tuple[str, ...], timeout: float, log: Path, home: Path | None = None) -> int:
    """Run the framework in the scratch directory (tool-eval-bench keeps a ./data/ database)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **({"HOME": str(home)} if home else {})}
    with log.open("wb") as out:
        try:
            proc = subprocess.run(
                argv, stdout=out, stderr=subprocess.STDOUT, timeout=timeout, env=env, cwd=log.parent
            )
        except subprocess.TimeoutExpired:
            return -1
    return proc.returncode


class _Refused(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason, self.message = reason, message


def _prepare_llama(plan: dict[str, Any], args: dict[str, Any], workdir: Path) -> tuple[str, str, Path | None]:
    """llama-benchy's tokenizer (where from) and, unless ``book_url`` is given, the shipped text
    seeded under a scratch ``HOME`` (returned) with ``args["book_url"]`` set to it."""
    explicit = args.pop("tokenizer", None) or plan.get("tokenizer")
    cache = plan.get("modelCache") if isinstance(plan.get("modelCache"), dict) else None
    try:
        tokenizer, source = resolve_tokenizer(
            str(explicit) if explicit else None,
            str(plan.get("modelId") or plan["model"]),
            cache=cache,
            endpoint=plan.get("hfEndpoint") or os.environ.get("HF_ENDPOINT") or None,
            workdir=workdir,
        )
    except TokenizerUnavailable as error:
        raise _Refused("TokenizerUnavailable", str(error)) from None
    if args.get("book_url"):
        return tokenizer, source, None
    text, missing = prompt_text()
    if text is None:
        raise _Refused("PromptTextUnavailable", "no prompt text: " + "; ".join(missing))
    home = workdir / "home"
    args["book_url"] = seed_prompt_text(text, home)
    return tokenizer, source, home


def run_scenario(plan: dict[str, Any], workdir: Path) -> int:
    framework = benchframeworks.check_framework(str(plan["framework"]))
    scenario = dict(plan.get("scenario") or {})
    args = benchframeworks.merged_args(
        framework,
        profile=plan.get("profile"),
        bench_args={**(plan.get("benchArgs") or {}), **(scenario.get("args") or {})},
        scenario=scenario,
    )
    tokenizer = source = None
    home: Path | None = None
    if framework == LLAMA_BENCHY:
        try:
            tokenizer, source, home = _prepare_llama(plan, args, workdir)
        except _Refused as refused:
            emit("error", reason=refused.reason, message=refused.message)
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
    emit(
        "started",
        scenario=scenario.get("name"),
        framework=framework,
        frameworkVersion=version,
        args=args,
        **({"tokenizer": {"path": tokenizer, "from": source}} if tokenizer else {}),
    )
    log = workdir / "output.log"
    began = time.monotonic()
    code = _run(call.argv, float(plan.get("timeoutSeconds") or 3600), log, home)
    raw = benchparse.bounded(log.read_text(errors="replace") if log.exists() else "")
    result_text = Path(call.result_file).read_text() if Path(call.result_file).exists() else ""
    if framework == LLAMA_BENCHY:
        progress = Path(call.progress_file or "")
        events = progress.read_text() if call.progress_file and progress.exists() else ""
        result = benchparse.llama_benchy(events, result_text)
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
