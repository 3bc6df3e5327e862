"""``model_cache.inspect``, ``repair``, ``resolve`` and ``import``: a revision's files against its
manifest, run by the downloader and the cache tool in tool Jobs (ADR 0023).

- ``inspect`` (read; the claim mounted read-only): every selected file of the revision's manifest
  is present and valid (size; sha256 / git blob sha1 with ``checksums: true``), or a failure.
- ``repair`` (operate): inspect, then re-fetch only what is missing or invalid (the downloader's
  ``repair``), then report the repaired revision; ``dry_run`` and ``offline`` only inspect.
- ``resolve`` (read): the origin's immutable manifest of a revision (no cache needed).
- ``import`` (operate): save a supplied manifest — or, with ``fetch_manifest: true``, one resolved
  from the origin — on the volume and report how complete the cache is; never downloads weights.

The revision is a commit or a ref; ``file_selection`` is ``auto`` (safetensors weights when the
revision has them), ``all`` or ``safetensors``. ``projector``, ``local_cache_dir`` and the
host-to-host ``transfer_mode`` values name things that do not exist on Kubernetes and are refused.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from sparkrun_operator import safeload
from sparkrun_operator.api.clip import ECHO_MAX, clip, echo
from sparkrun_operator.api.credentials import origin_of
from sparkrun_operator.api.paths import MAX_PATH, safe_relative_path
from sparkrun_operator.ops.errors import Invalid
from sparkrun_operator.ops.executors.modelcache import steps
from sparkrun_operator.ops.executors.modelcache.location import Location, locate, parse_cache_dir
from sparkrun_operator.ops.invocation import ArgumentCheck, Executor, OperationContext
from sparkrun_operator.ops.settings import Settings
from sparkrun_operator.render.cachetool import DOWNLOAD_MODULE, TOOL_MODULE

#: Bound of a supplied manifest: its compact JSON is one argument of the tool Job's command,
#: which Linux caps at 128 KiB (``safeload.MANIFEST``: 120 KiB).
MAX_MANIFEST_BYTES = safeload.MANIFEST.max_bytes
ACCESS_CONTEXT = "kubernetes-job"


def _refuse_host_only(args: Mapping[str, Any]) -> None:
    if args.get("projector"):
        raise Invalid(
            "projector is not supported here: select files with file_selection (auto, all, safetensors)"
        )
    if args.get("local_cache_dir"):
        raise Invalid("local_cache_dir is a path on the daemon's host; here repair fetches from the origin")
    if args.get("transfer_mode", "auto") not in ("auto", "pull"):
        raise Invalid(
            f"transfer_mode {echo(args['transfer_mode'])} moves files between hosts; "
            "here only auto/pull exist"
        )


def check_files(args: Mapping[str, Any], _settings: Settings | None = None) -> None:
    """What ``inspect``, ``repair`` and ``resolve`` refuse before they start a tool Job."""
    _refuse_host_only(args)
    if args.get("cache_dir") is not None:
        parse_cache_dir(str(args["cache_dir"]))
    _endpoint(args)


def check_import(args: Mapping[str, Any], _settings: Settings | None = None) -> None:
    """``import``: the file checks, a cache location, and a supplied manifest or the way to get one."""
    check_files(args)
    parse_cache_dir(str(args.get("cache_dir") or ""))
    manifest = args.get("manifest")
    if manifest is not None:
        _checked_manifest(manifest, str(args.get("model")), args.get("revision"))
    elif args.get("offline"):
        raise Invalid("offline: true requires a supplied manifest (even with fetch_manifest)")
    elif not args.get("fetch_manifest"):
        raise Invalid(
            "supply manifest (e.g. a model_cache.resolve result), or fetch_manifest: true to resolve it "
            "from the origin once"
        )


def _level(args: Mapping[str, Any]) -> str:
    return "sha256" if args.get("checksums") else "size"


def _revision_args(args: Mapping[str, Any]) -> list[str]:
    revision = args.get("revision")
    if revision is None:
        return []
    return ["--commit", str(revision)] if steps.is_commit(str(revision)) else ["--revision", str(revision)]


def _endpoint(args: Mapping[str, Any]) -> list[str]:
    """``--endpoint`` of the downloader; an endpoint a client could read differently from the
    allowlist's parser (user information, backslashes, ...) is refused (ADR 0040)."""
    endpoint = args.get("endpoint")
    if endpoint is None:
        return []
    try:
        origin_of(endpoint)
    except ValueError as error:
        raise Invalid(str(error)) from None
    return ["--endpoint", str(endpoint)]


def validation_report(event: Mapping[str, Any], host: str, *, repo: str) -> dict[str, Any]:
    """The daemon's validation report from the downloader's ``inspect`` event."""
    failures = [
        {"path": p, "reason": kind}
        for kind in ("missing", "invalid", "unreadable")
        for p in event.get(kind) or ()
    ]
    clean = not failures
    detail = (
        f"{event.get('files', 0)} files checked at {event.get('verify')}: all present and valid"
        if clean
        else f"{len(failures)} of {event.get('files', 0)} files missing, invalid or unreadable"
    )
    return {
        "host": host,
        "manifest_id": f"{repo}@{event.get('commit')}",
        "level": str(event.get("verify") or "size"),
        "status": "complete" if clean else "incomplete",
        "complete": clean,
        "checked_files": int(event.get("files") or 0),
        "failures": sorted(failures, key=lambda f: f["path"]),
        "detail": detail,
        "access_context": ACCESS_CONTEXT,
    }


async def _inspect(
    ctx: OperationContext, loc: Location, args: Mapping[str, Any], *, step: str = "inspect"
) -> tuple[dict[str, Any], str]:
    model = str(args["model"])
    tool_args = [
        "inspect",
        "--repo",
        model,
        *_revision_args(args),
        "--verify",
        _level(args),
        "--selection",
        str(args.get("file_selection", "auto")),
        "--print-manifest",
        "--quiet",
    ]
    run = steps.tool(ctx, loc, step, tool_args, module=DOWNLOAD_MODULE)
    return await steps.run_checked(
        ctx, run, f"inspecting {clip(model, ECHO_MAX)} at {loc.cache_dir}", ok=("inspect",)
    )


async def inspect(ctx: OperationContext, args: dict[str, Any]) -> list[dict[str, Any]]:
    check_files(args)
    loc = await locate(ctx, args)
    event, host = await _inspect(ctx, loc, args)
    return [validation_report(event, host, repo=str(args["model"]))]


async def repair(ctx: OperationContext, args: dict[str, Any]) -> dict[str, Any]:
    check_files(args)
    loc = await locate(ctx, args)
    model = str(args["model"])
    event, host = await _inspect(ctx, loc, args)
    report = validation_report(event, host, repo=model)
    if not (args.get("dry_run") or args.get("offline")) and not report["complete"]:
        tool_args = [
            "repair",
            "--repo",
            model,
            "--commit",
            str(event["commit"]),
            "--verify",
            _level(args),
            "--selection",
            str(args.get("file_selection", "auto")),
            "--print-manifest",
            "--quiet",
            *_endpoint(args),
        ]
        run = await steps.downloader(ctx, loc, "repair", tool_args, args.get("endpoint"), read_only=False)
        await steps.run_checked(
            ctx, run, f"repairing {clip(model, ECHO_MAX)} at {loc.cache_dir}", ok=("result",)
        )
        event, host = await _inspect(ctx, loc, args, step="verify")
        report = validation_report(event, host, repo=model)
    manifest = event.get("manifest_daemon") or {}
    binding = {
        "model": model,
        "host": host,
        "cache_root": loc.cache_dir,
        "manifest": manifest,
        "report": report,
        "snapshot_override": None,
    }
    return {"manifest": manifest, "bindings": [binding]}


async def _resolve(ctx: OperationContext, loc: Location | None, args: Mapping[str, Any]) -> dict[str, Any]:
    model = str(args["model"])
    revision = args.get("revision")
    tool_args = [
        "resolve",
        "--repo",
        model,
        *(["--revision", str(revision)] if revision else []),
        "--selection",
        str(args.get("file_selection", "auto")),
        "--quiet",
        *_endpoint(args),
    ]
    run = await steps.downloader(ctx, None, "resolve", tool_args, args.get("endpoint"))
    if loc is not None:  # placed like the location's tools (nodes with egress), root still scratch
        selector, tolerations = loc.scheduling()
        run = dataclasses.replace(run, node_selector=selector, tolerations=tolerations)
    event, _host = await steps.run_checked(ctx, run, f"resolving {clip(model, ECHO_MAX)}", ok=("manifest",))
    manifest: dict[str, Any] = event["manifest"]
    return manifest


async def resolve(ctx: OperationContext, args: dict[str, Any]) -> dict[str, Any]:
    check_files(args)
    loc = await locate(ctx, args) if args.get("cache_dir") else None
    return await _resolve(ctx, loc, args)


def _checked_manifest(manifest: Any, model: str, revision: str | None) -> dict[str, Any]:
    if not isinstance(manifest, dict):
        raise Invalid("manifest must be an object (a model_cache.resolve result)")
    try:
        safeload.check_tree(manifest, safeload.MANIFEST)
    except safeload.LimitExceeded as error:
        raise Invalid(f"{error} (the manifest is one argument of the tool's command)") from None
    except safeload.DocumentError as error:
        raise Invalid(str(error)) from None
    if manifest.get("repo") != model:
        raise Invalid(f"manifest.repo {echo(manifest.get('repo'))} is not model {echo(model)}")
    commit = str(manifest.get("revision") or "")
    if not steps.is_commit(commit):
        raise Invalid("manifest.revision must be the full commit the manifest was resolved at")
    if revision is not None and steps.is_commit(revision) and revision != commit:
        raise Invalid(f"manifest.revision {commit} is not the requested revision {revision}")
    files = manifest.get("files")
    if not isinstance(files, list) or not files:
        raise Invalid("manifest.files must list the revision's files")
    for item in files:
        found = item.get("path") if isinstance(item, dict) else None
        if not safe_relative_path(found):
            raise Invalid(
                f"manifest.files path {echo(found)} must be relative, without '.', '..' or empty parts, "
                f"backslashes or control characters, at most {MAX_PATH} characters"
            )
    return manifest


def import_arguments(manifest: Mapping[str, Any], level: str) -> list[str]:
    """The cache tool's ``import`` arguments for a checked manifest: its compact JSON is one
    argument, at most ``MAX_MANIFEST_BYTES`` (``_checked_manifest``), within Linux's 128 KiB."""
    encoded = json.dumps(manifest, separators=(",", ":"), allow_nan=False)
    return ["import", "--commit", str(manifest["revision"]), "--manifest-json", encoded, "--verify", level]


async def import_manifest(ctx: OperationContext, args: dict[str, Any]) -> list[dict[str, Any]]:
    check_import(args)
    model = str(args["model"])
    manifest = args.get("manifest")
    loc = await locate(ctx, args)
    if manifest is None:
        manifest = await _resolve(ctx, loc, args)
    checked = _checked_manifest(manifest, model, args.get("revision"))
    tool_args = import_arguments(checked, _level(args))
    run = steps.tool(ctx, loc, "import", tool_args, module=TOOL_MODULE, read_only=False)
    event, host = await steps.run_checked(
        ctx, run, f"importing {clip(model, ECHO_MAX)} at {loc.cache_dir}", ok=("report",)
    )
    failures = list(event.get("failures") or [])
    complete = bool(event.get("complete"))
    return [
        {
            "host": host,
            "manifest_id": f"{model}@{checked['revision']}",
            "level": _level(args),
            "status": "complete" if complete else "incomplete",
            "complete": complete,
            "checked_files": int(event.get("checked_files") or 0),
            "failures": failures,
            "detail": (
                "manifest saved; every file present and valid"
                if complete
                else f"manifest saved; {len(failures)} files missing or invalid (repair fetches them)"
            ),
            "access_context": ACCESS_CONTEXT,
        }
    ]


CHECKS: dict[str, ArgumentCheck] = {
    "model_cache.inspect": check_files,
    "model_cache.repair": check_files,
    "model_cache.resolve": check_files,
    "model_cache.import": check_import,
}

EXECUTORS: dict[str, Executor] = {
    "model_cache.inspect": inspect,
    "model_cache.repair": repair,
    "model_cache.resolve": resolve,
    "model_cache.import": import_manifest,
}
