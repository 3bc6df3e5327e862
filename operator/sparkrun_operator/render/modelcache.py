"""Children of a ModelCache: the claim (``storage.create``) and the download Job.

Pure. The Job runs the tools image's downloader (``python -m sparkrun_operator.runtime.download
download``) with the claim mounted read-write at the cache root and the hub token, when there is
one, mounted as a file from its Secret: the token is never an environment variable or an
argument, so it is in no pod spec, log or event. Progress is JSON lines on stdout (the pod log,
which the controller tails); see ``docs/decisions/0018-model-cache-controller.md``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, ClassVar, Final

from sparkrun_operator import __version__
from sparkrun_operator.api.modelcache import ModelCacheSpec, StorageCreate
from sparkrun_operator.render import keys, podsecurity
from sparkrun_operator.render.owner import Owner

DEFAULT_TOOLS_IMAGE: Final = f"{keys.TOOLS_IMAGE_REPOSITORY}:{__version__}"
DOWNLOAD_MODULE: Final = "sparkrun_operator.runtime.download"
TOKEN_FILE: Final = "token"
#: The downloader's exit codes that no pod retry can fix (docs/model-cache.md).
FATAL_EXIT_CODES: Final = (2, 3, 4, 5, 6, 9, 10)


@dataclass(frozen=True, kw_only=True)
class CacheOwner(Owner):
    """The ModelCache its children are owned by."""

    kind: ClassVar[str] = "ModelCache"


@dataclass(frozen=True, kw_only=True)
class DownloadOptions:
    """Operator-wide settings of download Jobs."""

    image: str = DEFAULT_TOOLS_IMAGE
    #: Where the claim is mounted (the downloader's ``--root``; the engine's ``HF_HOME``).
    mount_path: str = keys.CACHE_MOUNT_PATH
    #: Pod retries of one Job: the downloader resumes where a killed pod stopped.
    backoff_limit: int = 3
    active_deadline_seconds: int = 6 * 3600
    progress_interval: float = 2.0


def claim_name(owner_name: str, spec: ModelCacheSpec) -> str:
    """The claim the files live on: the named one, or the created one (named after the cache)."""
    return spec.storage.claim_name or owner_name


def labels(owner: CacheOwner) -> dict[str, str]:
    return {keys.LABEL_MODEL_CACHE: owner.name, keys.LABEL_MANAGED_BY: keys.MANAGED_BY}


def render_claim(owner: CacheOwner, create: StorageCreate) -> dict[str, Any]:
    """The PersistentVolumeClaim of ``storage.create`` (owned: deleted with the cache)."""
    spec: dict[str, Any] = {
        "accessModes": list(create.access_modes),
        "resources": {"requests": {"storage": str(create.size)}},
    }
    if create.storage_class_name is not None:
        spec["storageClassName"] = create.storage_class_name
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": owner.name,
            "namespace": owner.namespace,
            "labels": labels(owner),
            "ownerReferences": [owner.reference()],
        },
        "spec": spec,
    }


def job_name(owner_name: str, key: str) -> str:
    """``<cache>-download-<key>`` (key: a hash of what it downloads), shortened to fit 63 characters."""
    suffix = f"-download-{key}"
    if len(owner_name) + len(suffix) <= 63:
        return owner_name + suffix
    digest = hashlib.sha256(owner_name.encode()).hexdigest()[:8]
    return f"{owner_name[: 63 - len(suffix) - 9]}-{digest}{suffix}"


def download_args(spec: ModelCacheSpec, options: DownloadOptions) -> list[str]:
    """The downloader's arguments (no secret among them: the token is a file)."""
    source = spec.source.hugging_face
    args = [
        "-m",
        DOWNLOAD_MODULE,
        "download",
        "--root",
        options.mount_path,
        "--repo",
        source.repo,
        "--revision",
        source.revision,
        "--verify",
        spec.verify,
        "--progress-interval",
        repr(float(options.progress_interval)),
    ]
    if source.endpoint:
        args += ["--endpoint", source.endpoint]
    if source.token_secret_ref is not None:
        args += ["--token-file", f"{keys.HF_TOKEN_DIR}/{TOKEN_FILE}"]
    for pattern in source.allow_patterns:
        args += ["--allow", pattern]
    for pattern in source.ignore_patterns:
        args += ["--ignore", pattern]
    return args


def render_job(
    owner: CacheOwner, *, key: str, spec: ModelCacheSpec, options: DownloadOptions
) -> dict[str, Any]:
    """The download Job for download ``key`` (one at a time per cache; the planner decides when)."""
    source = spec.source.hugging_face
    volumes: list[dict[str, Any]] = [
        {"name": keys.VOLUME_CACHE, "persistentVolumeClaim": {"claimName": claim_name(owner.name, spec)}}
    ]
    mount: dict[str, Any] = {"name": keys.VOLUME_CACHE, "mountPath": options.mount_path}
    if sub := spec.storage.path.strip("/"):
        mount["subPath"] = sub
    mounts = [mount]
    if source.token_secret_ref is not None:
        ref = source.token_secret_ref
        volumes.append(
            {
                "name": keys.VOLUME_HF_TOKEN,
                "secret": {
                    "secretName": ref.name,
                    "items": [{"key": ref.key, "path": TOKEN_FILE}],
                    "defaultMode": 0o400,
                },
            }
        )
        mounts.append({"name": keys.VOLUME_HF_TOKEN, "mountPath": keys.HF_TOKEN_DIR, "readOnly": True})
    container = {
        "name": keys.CONTAINER_DOWNLOAD,
        "image": options.image,
        "command": ["python"],
        "args": download_args(spec, options),
        "env": [
            {"name": "PYTHONUNBUFFERED", "value": "1"},
            {"name": "HF_HUB_DISABLE_TELEMETRY", "value": "1"},
        ],
        "securityContext": podsecurity.restricted_container(),
        "volumeMounts": mounts,
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    pod_labels = {**labels(owner), keys.LABEL_CACHE_DOWNLOAD: key}
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,
        "securityContext": podsecurity.tools_pod_context(writes_volume=True),
        "containers": [container],
        "volumes": volumes,
    }
    if spec.download.node_selector:
        pod["nodeSelector"] = dict(sorted(spec.download.node_selector.items()))
    if spec.download.tolerations:
        pod["tolerations"] = [t.to_wire() for t in spec.download.tolerations]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_name(owner.name, key),
            "namespace": owner.namespace,
            "labels": pod_labels,
            "ownerReferences": [owner.reference()],
        },
        "spec": {
            "backoffLimit": options.backoff_limit,
            "activeDeadlineSeconds": options.active_deadline_seconds,
            # NB: errors no retry can fix (gated, not found, bad arguments, storage) fail the Job
            # at once; transient ones (Hub unavailable, a file still invalid) use the backoff.
            "podFailurePolicy": {
                "rules": [
                    {
                        "action": "FailJob",
                        "onExitCodes": {
                            "containerName": keys.CONTAINER_DOWNLOAD,
                            "operator": "In",
                            "values": list(FATAL_EXIT_CODES),
                        },
                    }
                ]
            },
            "template": {"metadata": {"labels": pod_labels}, "spec": pod},
        },
    }
