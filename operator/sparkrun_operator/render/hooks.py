"""Recipe hooks and mods in the engine pods: the rendered wrapper around the engine's command.

sparkrun (``orchestration/hooks.py``, ``core/mods.py``) runs, for a trusted recipe only:

- each **mod** (a directory with ``run.sh``) copied into the container under
  ``/workspace/mods/<name>`` and run there as ``export WORKSPACE_DIR=$PWD && cd <dest> && chmod
  +x run.sh && ./run.sh``, before the ``pre_exec`` entries the recipe wrote (mods become
  ``pre_exec`` entries, so they share its trust and its fail-fast rule);
- **pre_exec** in every container of the workload (head and workers), in order, fail-fast;
- **post_exec** in the head's container once the server answers, in order, fail-fast;
- **post_commands** on the control machine (here: a Job, ``render/hookjob.py``).

Here the engine container's command becomes a small shell wrapper (:func:`wrap`): it copies each
mod from its read-only ConfigMap volume into a writable ``emptyDir`` (a pod's filesystem may be
read-only, and ``/workspace`` may not exist: the destination is ``MODS_DIR/<name>``), runs
``run.sh`` as sparkrun does, runs the ``pre_exec`` commands, starts the ``post_exec`` watcher on the
head, then ``exec`` s the engine command unchanged. A failing step exits the container with the
step's code and a line ``sparkrun hook failed: <stage>[<i>] ...`` (the pod's failure record, and
``status.startup``, name it); a failing ``post_exec`` stops the engine the same way. Each finished
stage prints one event line ``{"event":"sparkrun.hook",...}`` the operator may read.

Each command runs in ``bash -c`` (``sh -c`` where the image has no bash) under coreutils'
``timeout`` (default 3600 s, sparkrun's; ``timeout: 0`` on an entry: none), with the hook's
``SPARKRUN_*`` variables in its environment only (never the engine's).

Placeholders: a value made only of :data:`PLAIN` characters (model ids, numbers, URLs) is filled
in as written, as sparkrun does; any other value (a tenant's ``servedName`` may hold ``;``,
quotes, ``$(...)``) is filled in as ``$(printf '\\ooo...')``, its bytes in octal: wherever the
hook puts it (bare, in double quotes, in backquotes) the shell prints the value and never runs
it, and inside single quotes it stays inert text. Names in the script (a mod's, in a comment
and as its directory) are escaped or replaced the same way: no text of a registry or a tenant
becomes a line of the script.

Pure: same plan, same script.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

#: Where the mods' ConfigMaps are mounted (one directory each) and the writable copy.
MOD_SOURCE_DIR: Final = "/run/sparkrun/mod-src"
MODS_DIR: Final = "/run/sparkrun/mods"
VOLUME_MODS: Final = "sparkrun-mods"
#: sparkrun's default per-command limit (``DEFAULT_HOOK_TIMEOUT_S``) and its kill grace.
DEFAULT_TIMEOUT_S: Final = 3600
KILL_AFTER_S: Final = 10
#: The most characters the wrapper script may have (a pod spec is stored in etcd).
MAX_SCRIPT_CHARS: Final = 256 * 1024
#: The marker every event line of the wrapper begins with (``plan/logtail.py`` reads them).
EVENT: Final = "sparkrun.hook"
#: The prefix of the line a failing step writes last (read from the failure record).
FAILED_PREFIX: Final = "sparkrun hook failed: "
#: ``{name}`` placeholders (sparkrun's hook templates); a ``${...}`` shell expansion is left alone.
#: A mod's run.sh sees the container's working directory as ``WORKSPACE_DIR`` (sparkrun's).
WORKSPACE_ARG: Final = ' "WORKSPACE_DIR=$WORKSPACE_DIR"'
_PLACEHOLDER = re.compile(r"(?<!\$)\{([A-Za-z_][A-Za-z0-9_]{0,63})\}")
#: The characters of a placeholder value filled in as written (no shell gives any of them a meaning).
PLAIN: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._/:@+=,%-")


@dataclass(frozen=True, kw_only=True)
class ModFile:
    """One file of a mod: its key in the ConfigMap, its path in the mod's directory, its mode."""

    key: str
    path: str
    mode: int = 0o644


@dataclass(frozen=True, kw_only=True)
class ModSource:
    """A resolved mod: its ConfigMap (written by the recipe's RecipeRegistry) and its files."""

    #: As the recipe writes it (``mods/fix-x``).
    name: str
    config_map: str
    files: tuple[ModFile, ...]
    #: Digest of the ConfigMap's content: part of the serving revision, so a changed mod rolls.
    digest: str

    @property
    def dir_name(self) -> str:
        """The directory it is copied to (sparkrun: the basename of the reference; a basename that
        is no plain directory name, such as ``..``, gets one made from the name's hash)."""
        base = self.name.rstrip("/").rsplit("/", 1)[-1]
        if base in ("", ".", "..") or not base.isprintable() or len(base) > 255:
            return "mod-" + hashlib.sha256(self.name.encode()).hexdigest()[:12]
        return base


@dataclass(frozen=True, kw_only=True)
class HookStep:
    """One command entry: its (rendered) text and its timeout (0: none)."""

    command: str
    timeout_s: int = DEFAULT_TIMEOUT_S


@dataclass(frozen=True, kw_only=True)
class HookPlan:
    """What runs in a trusted recipe's engine pods (an untrusted recipe gets none)."""

    mods: tuple[ModSource, ...] = ()
    pre_exec: tuple[HookStep, ...] = ()
    post_exec: tuple[HookStep, ...] = ()
    #: ``SPARKRUN_*`` variables every hook sees (sparkrun's ``build_hook_env``, per pod).
    env: tuple[tuple[str, str], ...] = ()
    #: How long post_exec waits for the engine's ``/health`` (the startup probe's budget).
    health_wait_s: int = 3600
    port: int = 8000
    #: Where the mods' ConfigMaps are mounted and copied to (tests run the script elsewhere).
    source_root: str = MOD_SOURCE_DIR
    mods_root: str = MODS_DIR

    @property
    def empty(self) -> bool:
        return not (self.mods or self.pre_exec or self.post_exec)

    def identity(self) -> dict[str, Any]:
        """What the serving revision hashes (a changed hook or mod rolls the workload)."""
        return {
            "mods": [{"name": m.name, "configMap": m.config_map, "digest": m.digest} for m in self.mods],
            "preExec": [[s.command, s.timeout_s] for s in self.pre_exec],
            "postExec": [[s.command, s.timeout_s] for s in self.post_exec],
            "env": [list(kv) for kv in self.env],
        }


# -- entries ---------------------------------------------------------------------------------


def steps(entries: Sequence[Any] | None, *, context: Mapping[str, str]) -> tuple[list[HookStep], list[str]]:
    """Command entries as steps (placeholders filled from ``context``), and the entries that
    cannot run here (a ``copy`` entry names a path on sparkrun's control machine; a malformed
    one is refused as sparkrun refuses it), each as ``"<i>: why"``."""
    out: list[HookStep] = []
    problems: list[str] = []
    for i, entry in enumerate(entries or (), 1):
        if isinstance(entry, str):
            out.append(HookStep(command=render(entry, context)))
            continue
        if isinstance(entry, Mapping) and "copy" in entry:
            problems.append(f"{i}: a copy entry names a file on sparkrun's control machine")
            continue
        if (
            isinstance(entry, Mapping)
            and set(entry) <= {"command", "timeout"}
            and isinstance(entry.get("command"), str)
            and entry["command"].strip()
        ):
            timeout = entry.get("timeout", DEFAULT_TIMEOUT_S)
            if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout < 0:
                problems.append(f"{i}: timeout must be a number of seconds (0: none)")
                continue
            seconds = 0 if timeout == 0 else max(1, int(-(-timeout // 1)))
            out.append(HookStep(command=render(entry["command"], context), timeout_s=seconds))
            continue
        problems.append(f"{i}: not a command (a string, or a mapping with command and timeout)")
    return out, problems


def render(command: str, context: Mapping[str, str]) -> str:
    """``{key}`` placeholders filled from ``context``; unknown ones (and ``${...}``) kept as written.
    A value with a character outside :data:`PLAIN` is filled in as a command substitution that
    prints it (see the module's docstring): text, never code."""

    def fill(match: re.Match[str]) -> str:
        value = context.get(match.group(1))
        if value is None:
            return match.group(0)
        if all(ch in PLAIN for ch in value):
            return value
        return "$(printf '" + "".join(f"\\{byte:03o}" for byte in value.encode()) + "')"

    return _PLACEHOLDER.sub(fill, command)


def mod_digest(data: Mapping[str, str], binary: Mapping[str, str]) -> str:
    """Digest (16 hex) of a mod ConfigMap's ``data`` and ``binaryData``."""
    doc = json.dumps({"data": dict(data), "binaryData": dict(binary)}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(doc.encode()).hexdigest()[:16]


# -- the wrapper ------------------------------------------------------------------------------

_PRELUDE = r"""set -u
sparkrun_event() { printf '{"event":"%s","stage":"%s","outcome":"%s"}\n' EVENT "$1" "$2"; }
sparkrun_fail() { echo "FAILED$1 exited $2" >&2; sparkrun_event "$3" failed; exit "$2"; }
SPARKRUN_SHELL=$(command -v bash || echo /bin/sh)
sparkrun_run() {
  t=$1; shift
  if [ "$t" -gt 0 ] && command -v timeout >/dev/null 2>&1; then
    timeout -k KILL "$t" env "$@" "$SPARKRUN_SHELL" -c "$SPARKRUN_CMD"
  else
    env "$@" "$SPARKRUN_SHELL" -c "$SPARKRUN_CMD"
  fi
}
WORKSPACE_DIR=$PWD
"""


def _prelude() -> str:
    return (
        _PRELUDE.replace("EVENT", EVENT).replace("FAILED", FAILED_PREFIX).replace("KILL", str(KILL_AFTER_S))
    )


def _env_args(plan: HookPlan, hook: str) -> str:
    pairs = [("SPARKRUN_HOOK", hook), *plan.env]
    return " ".join(shlex.quote(f"{k}={v}") for k, v in pairs)


def _run_line(
    step: HookStep, *, plan: HookPlan, hook: str, label: str, stage: str, cwd: str | None, extra: str = ""
) -> str:
    """One step: the command in ``SPARKRUN_CMD`` (a shell variable, not exported), run under
    its timeout with the hook's variables, failing the container when it fails."""
    env = _env_args(plan, hook) + extra
    run = f"SPARKRUN_CMD={shlex.quote(step.command)}; sparkrun_run {step.timeout_s} {env}"
    if cwd is not None:
        run = f"cd {shlex.quote(cwd)} && {run}"
    return f"({run}) || sparkrun_fail {shlex.quote(label)} $? {stage}"


def _escaped(text: str) -> str:
    """``text`` on one line of printable ASCII (for a comment)."""
    return text.encode("unicode_escape").decode("ascii")


def _mods_lines(plan: HookPlan) -> list[str]:
    lines: list[str] = []
    for i, mod in enumerate(plan.mods):
        src = f"{plan.source_root}/{i}"
        dest = f"{plan.mods_root}/{mod.dir_name}"
        lines.append(f"# mod {i + 1}: {_escaped(mod.name)}")
        dirs = sorted({f"{dest}/{f.path}".rsplit("/", 1)[0] for f in mod.files})
        lines.append(
            "mkdir -p "
            + " ".join(shlex.quote(d) for d in dirs)
            + f" || sparkrun_fail {shlex.quote('mods[' + str(i + 1) + ']')} $? mods"
        )
        for f in mod.files:
            target = shlex.quote(f"{dest}/{f.path}")
            lines.append(
                f"cp {shlex.quote(f'{src}/{f.path}')} {target} && chmod {f.mode & 0o777:o} {target} "
                f"|| sparkrun_fail {shlex.quote(f'mods[{i + 1}] {mod.name}')} $? mods"
            )
        run = HookStep(command="chmod +x run.sh && ./run.sh")
        lines.append(
            _run_line(
                run,
                plan=plan,
                hook="pre_exec",
                label=f"mods[{i + 1}] {mod.name}",
                stage="mods",
                cwd=dest,
                extra=WORKSPACE_ARG,
            )
        )
    if plan.mods:
        lines.append("sparkrun_event mods ok")
    return lines


def _post_exec_lines(plan: HookPlan) -> list[str]:
    if not plan.post_exec:
        return []
    url = f"http://127.0.0.1:{plan.port}/health"
    probe = f"import urllib.request; urllib.request.urlopen({url!r}, timeout=5)"
    body = [
        "sparkrun_engine=$$",
        "(",
        f"  sparkrun_left={plan.health_wait_s}",
        f"  until python3 -c {shlex.quote(probe)} >/dev/null 2>&1; do",
        "    sparkrun_left=$((sparkrun_left - 5))",
        '    [ "$sparkrun_left" -gt 0 ] || { echo "'
        + FAILED_PREFIX
        + 'post_exec: the engine never answered" >&2; exit 0; }',
        "    sleep 5",
        "  done",
    ]
    for i, step in enumerate(plan.post_exec, 1):
        run = _run_line(
            step, plan=plan, hook="post_exec", label=f"post_exec[{i}]", stage="postExec", cwd=None
        )
        body.append(f"  ( {run} ) || {{ kill -TERM $sparkrun_engine; exit 1; }}")
    body += ["  sparkrun_event postExec ok", ") &"]
    return body


def script(
    plan: HookPlan, *, head: bool, then: str = 'exec "$@"', hook: str = "pre_exec", stage: str = "preExec"
) -> str:
    """The wrapper: mods, ``plan.pre_exec`` (run as ``hook``, reported as ``stage``: the
    post_commands Job runs its commands this way), the post_exec watcher (head only), then ``then``."""
    lines = [_prelude().rstrip("\n")]
    lines += _mods_lines(plan)
    for i, step in enumerate(plan.pre_exec, 1):
        lines.append(_run_line(step, plan=plan, hook=hook, label=f"{hook}[{i}]", stage=stage, cwd=None))
    if plan.pre_exec:
        lines.append(f"sparkrun_event {stage} ok")
    if head:
        lines += _post_exec_lines(plan)
    lines.append(then)
    text = "\n".join(lines) + "\n"
    if len(text) > MAX_SCRIPT_CHARS:
        raise ValueError(
            f"the recipe's hooks make a {len(text)}-character script (at most {MAX_SCRIPT_CHARS})"
        )
    return text


def wrap(container: dict[str, Any], plan: HookPlan, *, head: bool) -> dict[str, Any]:
    """``container`` (rendered by ``render/workload.py``) with its command wrapped and the mod
    volumes mounted; unchanged when the plan is empty."""
    if plan.empty:
        return container
    out = dict(container)
    command = list(container.get("command") or [])
    args = list(container.get("args") or [])
    if command == ["/bin/sh", "-c"] and len(args) == 1:
        out["command"] = ["/bin/sh", "-c"]
        out["args"] = [script(plan, head=head, then=args[0])]
    else:
        out["command"] = ["/bin/sh", "-c"]
        out["args"] = [script(plan, head=head), "sparkrun-hooks", *command, *args]
    if plan.mods:
        mounts = list(container.get("volumeMounts") or [])
        mounts.append({"name": VOLUME_MODS, "mountPath": plan.mods_root})
        mounts += [
            {"name": _mod_volume(i), "mountPath": f"{plan.source_root}/{i}", "readOnly": True}
            for i in range(len(plan.mods))
        ]
        out["volumeMounts"] = mounts
    return out


def _mod_volume(i: int) -> str:
    return f"sparkrun-mod-{i}"


def volumes(plan: HookPlan) -> list[dict[str, Any]]:
    """The pod's volumes for ``plan``'s mods: the writable copy and one ConfigMap each."""
    if not plan.mods:
        return []
    out: list[dict[str, Any]] = [{"name": VOLUME_MODS, "emptyDir": {}}]
    for i, mod in enumerate(plan.mods):
        items = [{"key": f.key, "path": f.path} for f in mod.files]
        out.append({"name": _mod_volume(i), "configMap": {"name": mod.config_map, "items": items}})
    return out


def apply(pod: dict[str, Any], plan: HookPlan | None, *, head: bool = False) -> dict[str, Any]:
    """A rendered engine pod spec with ``plan`` applied to its engine container (the first)."""
    if plan is None or plan.empty:
        return pod
    out = dict(pod)
    containers = list(pod["containers"])
    containers[0] = wrap(containers[0], plan, head=head)
    out["containers"] = containers
    out["volumes"] = [*pod.get("volumes", []), *volumes(plan)]
    return out
