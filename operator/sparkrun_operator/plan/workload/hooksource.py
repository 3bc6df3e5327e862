"""Where a served Recipe comes from, as the workload controller read it (issue 32): its trust
(``recipe/trust.py``) and the mod ConfigMaps its RecipeRegistry wrote, parsed and bounded. Pure."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from sparkrun_operator import safeload
from sparkrun_operator.api.clip import clip
from sparkrun_operator.recipe.trust import Trust
from sparkrun_operator.render import keys
from sparkrun_operator.render.hooks import ModFile, mod_digest

#: The most files one mod may have (a ConfigMap holds at most 1 MiB anyway).
MAX_MOD_FILES: Final = 256
_MANIFEST_LIMITS: Final = safeload.Bounds(what="a mod manifest", max_bytes=64 * 1024, max_depth=4)


@dataclass(frozen=True, kw_only=True)
class ObservedMod:
    """A mod ConfigMap a RecipeRegistry wrote (owner UID-checked by the controller)."""

    registry: str
    #: As its annotation says (``mods/fix-x``).
    name: str
    config_map: str
    files: tuple[ModFile, ...] = ()
    digest: str = ""
    #: Why it cannot be used (an unreadable manifest), else ``None``.
    problem: str | None = None


@dataclass(frozen=True, kw_only=True)
class HookSource:
    """What the controller read about where the served Recipe comes from."""

    trust: Trust
    mods: tuple[ObservedMod, ...] = ()


def manifest_files(
    data: Mapping[str, str], binary: Mapping[str, str]
) -> tuple[tuple[ModFile, ...], str | None]:
    """A mod ConfigMap's files from its ``manifest.json`` (keys ``f<N>``, relative paths), or why not."""
    try:
        doc = safeload.load_json(data.get("manifest.json", ""), _MANIFEST_LIMITS)
    except safeload.DocumentError as error:
        return (), f"manifest.json: {error}"
    entries = doc.get("files") if isinstance(doc, dict) else None
    if not isinstance(entries, list) or not entries or len(entries) > MAX_MOD_FILES:
        return (), f"manifest.json lists no files (or more than {MAX_MOD_FILES})"
    out: list[ModFile] = []
    for entry in entries:
        key, path, mode = (
            (entry.get(k) for k in ("key", "path", "mode")) if isinstance(entry, dict) else (None,) * 3
        )
        if not (isinstance(key, str) and (key in data or key in binary)) or not _safe_path(path):
            return (), f"manifest.json names a missing key or an unsafe path: {str(path)[:80]!r}"
        assert isinstance(path, str)
        out.append(
            ModFile(key=key, path=path, mode=mode if isinstance(mode, int) and 0 <= mode <= 0o777 else 0o644)
        )
    if not any(f.path == "run.sh" for f in out):
        return (), "the mod has no run.sh"
    return tuple(out), None


def _safe_path(path: Any) -> bool:
    if not isinstance(path, str) or not path or len(path) > 255 or path.startswith("/"):
        return False
    parts = path.split("/")
    return all(p not in ("", ".", "..") and p.isprintable() for p in parts)


def observed_mod(
    registry: str, name: str, config_map: str, data: Mapping[str, str], binary: Mapping[str, str]
) -> ObservedMod:
    files, problem = manifest_files(data, binary)
    return ObservedMod(
        registry=registry,
        name=name,
        config_map=config_map,
        files=files,
        digest=mod_digest(data, binary),
        problem=problem,
    )


@dataclass(frozen=True, kw_only=True)
class ObservedHookJob:
    """A workload's post_commands Job (``render/hookjob.py``), as the index read it."""

    name: str
    uid: str
    revision: str
    #: The UID its controller ownerReference names (the workload's, else it is not ours).
    owner_uid: str | None = None
    #: True: succeeded, False: failed, None: running.
    succeeded: bool | None = None
    message: str = ""
    time: dt.datetime | None = None


def hook_job_from(body: Mapping[str, Any]) -> tuple[tuple[str, str], ObservedHookJob] | None:
    """``((namespace, workload), job)`` of a post_commands Job, else ``None``."""
    meta = body.get("metadata") or {}
    labels = meta.get("labels") or {}
    workload, revision = labels.get(keys.LABEL_HOOK_WORKLOAD), labels.get(keys.LABEL_REVISION)
    if not isinstance(workload, str) or not isinstance(revision, str):
        return None
    owner = next((r.get("uid") for r in meta.get("ownerReferences") or [] if r.get("controller")), None)
    succeeded: bool | None = None
    message, when = "", None
    for cond in (body.get("status") or {}).get("conditions") or []:
        if cond.get("status") != "True" or cond.get("type") not in ("Complete", "Failed"):
            continue
        succeeded = cond.get("type") == "Complete"
        message = clip(str(cond.get("message") or cond.get("reason") or ""), 480)
        when = _time(cond.get("lastTransitionTime"))
    job = ObservedHookJob(
        name=str(meta.get("name")),
        uid=str(meta.get("uid")),
        revision=revision,
        owner_uid=owner if isinstance(owner, str) else None,
        succeeded=succeeded,
        message=message,
        time=when,
    )
    return (str(meta.get("namespace")), workload), job


def _time(value: Any) -> dt.datetime | None:
    try:
        return dt.datetime.fromisoformat(str(value).replace("Z", "+00:00")) if value else None
    except ValueError:
        return None
