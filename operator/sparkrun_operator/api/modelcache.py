"""``ModelCache``: a Hugging Face model revision on shared storage, an inventory with verbs."""

from __future__ import annotations

import datetime as dt
from typing import Literal

from pydantic import ConfigDict, Field

from sparkrun_operator.api import bounds, cel
from sparkrun_operator.api.meta import DNS_SUBDOMAIN, Condition, KubeModel, Quantity, SecretKeyRef, Toleration
from sparkrun_operator.api.modelshape import ModelShape

CachePhase = Literal["Pending", "Resolving", "Downloading", "Verifying", "Ready", "Failed"]
AccessMode = Literal["ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod"]


class HuggingFaceSource(KubeModel):
    """A repository revision on a Hugging Face-compatible hub."""

    repo: str = Field(
        description="Repository id, e.g. Qwen/Qwen3-8B.",
        min_length=1,
        max_length=256,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$",
    )
    revision: str = Field(
        default="main",
        description="Branch, tag or commit; resolved once to a full commit SHA (status.resolvedRevision).",
        min_length=1,
        max_length=128,
    )
    endpoint: str | None = Field(
        default=None,
        description="Hub base URL (HF_ENDPOINT); unset uses huggingface.co.",
        pattern=r"^https?://",
        max_length=2048,
    )
    token_secret_ref: SecretKeyRef | None = Field(
        default=None, description="Secret key holding a hub token, for gated or private repositories."
    )
    allow_patterns: list[bounds.FilePattern] = Field(
        default_factory=list, description="Glob patterns of files to include (all when empty).", max_length=64
    )
    ignore_patterns: list[bounds.FilePattern] = Field(
        default_factory=list, description="Glob patterns of files to skip.", max_length=64
    )


class ModelSource(KubeModel):
    """Where the model comes from."""

    hugging_face: HuggingFaceSource = Field(description="A Hugging Face-compatible hub repository.")


def _rwx() -> list[AccessMode]:
    return ["ReadWriteMany"]


class StorageCreate(KubeModel):
    """A PersistentVolumeClaim the operator creates and owns."""

    storage_class_name: str | None = Field(
        default=None, description="StorageClass of the claim; unset uses the cluster default.", max_length=253
    )
    size: Quantity = Field(description="Requested size, e.g. 200Gi.")
    access_modes: list[AccessMode] = Field(
        default_factory=_rwx,
        description="Access modes; ReadWriteMany or ReadOnlyMany lets many nodes mount the cache.",
        min_length=1,
        max_length=4,
    )


class StorageSpec(KubeModel):
    """Where the weights live: an existing claim, or one the operator creates."""

    model_config = ConfigDict(
        json_schema_extra=cel.rules(
            cel.rule(
                "has(self.claimName) != has(self.create)",
                "set exactly one of storage.claimName or storage.create",
            )
        )
    )

    claim_name: str | None = Field(
        default=None,
        description="An existing PersistentVolumeClaim in the namespace.",
        max_length=253,
        pattern=DNS_SUBDOMAIN,
    )
    create: StorageCreate | None = Field(default=None, description="Create a claim owned by this cache.")
    path: str = Field(
        default="/",
        description="Directory inside the volume under which the model is stored.",
        pattern=r"^/",
        max_length=1024,
    )


class RetentionSpec(KubeModel):
    """When an unused cache may be evicted."""

    min_age_days: int = Field(
        default=7, description="Never evict before this many days since last use.", ge=0, le=3650
    )


class DownloadScheduling(KubeModel):
    """Where the download Job's pod may run (e.g. nodes with egress, or the node of a local volume)."""

    node_selector: dict[str, bounds.LabelValue] = Field(
        default_factory=dict,
        description="Node labels the pod must match.",
        json_schema_extra=bounds.map_keys(
            bounds.LABEL_KEY_MAX_LENGTH, max_entries=bounds.SELECTOR_MAX_ENTRIES
        ),
    )
    tolerations: list[Toleration] = Field(
        default_factory=list, description="Tolerations of the download pod.", max_length=32
    )


class ModelCacheSpec(KubeModel):
    """Desired state of a cached model revision."""

    source: ModelSource = Field(
        description="Where the model comes from. Immutable: a different model is a different cache.",
        json_schema_extra={"x-kubernetes-validations": [cel.immutable("source")]},
    )
    storage: StorageSpec = Field(
        description="Where the weights are stored. Immutable.",
        json_schema_extra={"x-kubernetes-validations": [cel.immutable("storage")]},
    )
    pinned: bool = Field(default=False, description="Never evict this cache.")
    verify: Literal["none", "size", "sha256"] = Field(
        default="size",
        description="How files are checked after download: none, size, or sha256 (slow, exact).",
    )
    retention: RetentionSpec = Field(default_factory=RetentionSpec, description="Eviction policy.")
    download: DownloadScheduling = Field(
        default_factory=DownloadScheduling, description="Placement of the download Job's pod."
    )


class CacheManifest(KubeModel):
    """Summary of the files of the resolved revision."""

    files: int = Field(default=0, description="Number of files.", ge=0)
    total_bytes: int = Field(default=0, description="Total size in bytes.", ge=0)


class CacheProgress(KubeModel):
    """Download progress (as the downloader last reported it, at most every few seconds)."""

    bytes_done: int = Field(default=0, description="Bytes present and verified so far.", ge=0)
    bytes_total: int = Field(default=0, description="Bytes of the whole revision.", ge=0)
    files_done: int | None = Field(default=None, description="Files present and verified so far.", ge=0)
    files_total: int | None = Field(default=None, description="Files of the revision.", ge=0)
    bytes_per_second: int | None = Field(
        default=None, description="Download rate over the last seconds.", ge=0
    )
    eta_seconds: int | None = Field(
        default=None, description="Estimated seconds until every byte is there.", ge=0
    )


class ModelCacheStatus(KubeModel):
    """Observed state of the cache."""

    observed_generation: int | None = Field(
        default=None, description="Generation this status describes.", ge=0
    )
    phase: CachePhase | None = Field(
        default=None, description="Pending, Resolving, Downloading, Verifying, Ready or Failed."
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Ready and Progressing.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    resolved_revision: str | None = Field(
        default=None, description="Full commit SHA the revision resolved to.", pattern=r"^[0-9a-f]{40}$"
    )
    manifest: CacheManifest | None = Field(default=None, description="Files of the resolved revision.")
    model_shape: ModelShape | None = Field(
        default=None,
        description="What the download Job read of the revision's config.json (layers, KV heads, head "
        "size, dtype, context length) and the weight files' size: the memory fit check of workloads "
        "using this cache. Unset or partial: unknown (never blocks).",
    )
    progress: CacheProgress | None = Field(default=None, description="Download progress.")
    missing: list[str] = Field(default_factory=list, description="Files not present.", max_length=1000)
    invalid: list[str] = Field(
        default_factory=list, description="Files that failed verification.", max_length=1000
    )
    claims: list[str] = Field(default_factory=list, description="InferenceWorkloads using this cache.")
    claim_name: str | None = Field(default=None, description="The PersistentVolumeClaim holding the files.")
    access_modes: list[AccessMode] = Field(
        default_factory=list, description="Access modes of the bound claim."
    )
    node_name: str | None = Field(
        default=None,
        description="The only node the files are reachable from: the node affinity of a node-local "
        "volume, or the node that wrote a ReadWriteOnce claim. Workloads are placed there.",
    )
    message: str | None = Field(default=None, description="What is happening or what went wrong.")
    last_used: dt.datetime | None = Field(default=None, description="When a workload last used the cache.")
    last_verified: dt.datetime | None = Field(default=None, description="When the files were last verified.")
