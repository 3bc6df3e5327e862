"""The tool Job of a ``model_cache.*`` operation: one cache-tool or downloader command on a claim.

Pure. The Job runs the tools image (``python -m sparkrun_operator.runtime.cachetool ...`` or
``... runtime.download inspect|repair|resolve``) with the cache's claim mounted at the cache root
(read-only for the read-scoped verbs), the hub token as a file when one is configured (with the
origins it may be sent to: the downloader goes anonymous anywhere else, ADR 0040), no
ServiceAccount token, no retries (the operation reports a failure; the caller runs it again), a
deadline, and a TTL so finished Jobs do not pile up. It is owned by the DaemonJob, so deleting
the job record deletes it. Its last stdout line is the report the executor reads.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from sparkrun_operator.api.meta import API_VERSION
from sparkrun_operator.render import keys, podsecurity
from sparkrun_operator.render.modelcache import DEFAULT_TOOLS_IMAGE, TOKEN_FILE

TOOL_MODULE: Final = "sparkrun_operator.runtime.cachetool"
DOWNLOAD_MODULE: Final = "sparkrun_operator.runtime.download"
SCRATCH_VOLUME: Final = "scratch"


@dataclass(frozen=True, kw_only=True)
class ToolOptions:
    """Operator-wide settings of tool Jobs."""

    image: str = DEFAULT_TOOLS_IMAGE
    mount_path: str = keys.CACHE_MOUNT_PATH
    deadline_seconds: int = 3600
    ttl_seconds: int = 600
    #: ``nodeSelector`` / ``tolerations`` used when no ModelCache at the location says where.
    scheduling: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class ToolRun:
    """One command of one operation."""

    job_id: str
    job_uid: str
    namespace: str
    verb: str
    #: ``(module, args)``: the module's arguments after ``--root`` is added.
    module: str
    args: Sequence[str]
    claim: str | None = None
    sub_path: str = ""
    read_only: bool = True
    token_secret: tuple[str, str] | None = None
    #: The origins the token may be sent to (the downloader's ``--token-origins``, ADR 0040).
    token_origins: Sequence[str] = ()
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: Sequence[Mapping[str, Any]] = ()


def job_name(run: ToolRun, attempt: int = 0) -> str:
    """``mc-<verb>-<hash of the DaemonJob and attempt>`` (63 characters at most)."""
    digest = hashlib.sha256(f"{run.job_id}/{run.verb}/{attempt}".encode()).hexdigest()[:12]
    return f"mc-{run.verb}-{digest}"


def _token(
    secret: tuple[str, str],
    origins: Sequence[str],
    volumes: list[dict[str, Any]],
    mounts: list[dict[str, Any]],
) -> list[str]:
    """Mount the token's Secret key as a file; the downloader's arguments that read it and name
    the origins it may be sent to."""
    name, key = secret
    items = [{"key": key, "path": TOKEN_FILE}]
    volumes.append(
        {"name": keys.VOLUME_HF_TOKEN, "secret": {"secretName": name, "items": items, "defaultMode": 0o400}}
    )
    mounts.append({"name": keys.VOLUME_HF_TOKEN, "mountPath": keys.HF_TOKEN_DIR, "readOnly": True})
    return ["--token-file", f"{keys.HF_TOKEN_DIR}/{TOKEN_FILE}", "--token-origins", ",".join(origins)]


def render_tool_job(run: ToolRun, options: ToolOptions, attempt: int = 0) -> dict[str, Any]:
    labels = {keys.LABEL_CACHE_OPERATION: run.job_id, keys.LABEL_MANAGED_BY: keys.MANAGED_BY}
    volumes: list[dict[str, Any]]
    if run.claim is not None:
        volumes = [{"name": keys.VOLUME_CACHE, "persistentVolumeClaim": {"claimName": run.claim}}]
    else:
        volumes = [{"name": keys.VOLUME_CACHE, "emptyDir": {"sizeLimit": "64Mi"}}]
    mount: dict[str, Any] = {"name": keys.VOLUME_CACHE, "mountPath": options.mount_path}
    if run.claim is not None and run.read_only:
        mount["readOnly"] = True
    if sub := run.sub_path.strip("/"):
        mount["subPath"] = sub
    mounts = [mount]
    args = ["-m", run.module, *run.args[:1], "--root", options.mount_path, *run.args[1:]]
    if run.token_secret is not None:
        args += _token(run.token_secret, run.token_origins, volumes, mounts)
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,
        "securityContext": podsecurity.tools_pod_context(
            writes_volume=run.claim is not None and not run.read_only
        ),
        "containers": [
            {
                "name": keys.CONTAINER_CACHE_TOOL,
                "image": options.image,
                "command": ["python"],
                "args": args,
                "env": [
                    {"name": "PYTHONUNBUFFERED", "value": "1"},
                    {"name": "HF_HUB_DISABLE_TELEMETRY", "value": "1"},
                ],
                "securityContext": podsecurity.restricted_container(),
                "volumeMounts": mounts,
                "terminationMessagePolicy": "FallbackToLogsOnError",
            }
        ],
        "volumes": volumes,
    }
    selector = dict(options.scheduling.get("nodeSelector") or {}) | dict(run.node_selector)
    tolerations = list(run.tolerations) or list(options.scheduling.get("tolerations") or [])
    if selector:
        pod["nodeSelector"] = dict(sorted(selector.items()))
    if tolerations:
        pod["tolerations"] = tolerations
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_name(run, attempt),
            "namespace": run.namespace,
            "labels": labels,
            "ownerReferences": [
                {
                    "apiVersion": API_VERSION,
                    "kind": "DaemonJob",
                    "name": run.job_id,
                    "uid": run.job_uid,
                    "blockOwnerDeletion": False,
                }
            ],
        },
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": options.deadline_seconds,
            "ttlSecondsAfterFinished": options.ttl_seconds,
            "template": {"metadata": {"labels": labels}, "spec": pod},
        },
    }
