"""The project's own daemon operations (ADR 0048): declared in the reference daemon's plugin
namespace, ``plugins.sparkrun-k8s.<local name>``, with request and result schemas from the pydantic
types below (the project's one schema source).

The reference daemon's 94 operations come from its captured declarations (ADR 0005); operations
the reference does not have must not take core names a future reference release may define
differently. The daemon API document reserves ``plugins.<plugin-id>.`` for operations that are not
the host's: owner ``<plugin-id>``, HTTP alias ``POST /v1/plugins/<plugin-id>/ops/<local/name>``
(the local name's dots become slashes). ``hack/gen-ops-catalog.py`` merges :func:`declarations`
into ``ops/data/daemon-ops.json``; :func:`daemon_schema` turns a pydantic schema into the
document's schema vocabulary (inline, no ``$ref``, ``const``, ``allOf``, ``oneOf`` or ``format``;
``additionalProperties: false`` on every object with properties), refusing anything else so a
type the vocabulary cannot express fails the generator, not a client.

Pure: no I/O (the generator writes the file; ``ops/rollout.py`` does the work).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from sparkrun_operator.api.drain import DrainRequest, DrainResult
from sparkrun_operator.api.history import (
    REVISION_HASH_PATTERN,
    ApplyMode,
    Change,
    ClusterDriftItem,
    DriftStatus,
    HistoryStatus,
    RevisionCause,
)
from sparkrun_operator.api.objects import ObjectGetRequest, ObjectGetResult
from sparkrun_operator.api.ownership import (
    LeaseClaimRequest,
    LeaseClaimResult,
    LeaseReleaseRequest,
    LeaseReleaseResult,
    LeasesRequest,
    LeasesResult,
)

#: The plugin id the project's operations are declared under (the CLI's name).
PLUGIN_ID: Final = "sparkrun-k8s"
PLUGIN_PREFIX: Final = f"plugins.{PLUGIN_ID}."
#: The HTTP alias prefix of the project's operations.
PLUGIN_PATH: Final = f"/v1/plugins/{PLUGIN_ID}/ops/"

_NAME = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
_WORKLOAD = "The workload: its name, or its sparkrun workload id (status.workloadId), in the API's namespace."


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Result(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class HistoryRequest(_Request):
    """Which workload's revisions to list."""

    workload: str = Field(description=_WORKLOAD, min_length=1, max_length=253)


class RevisionEntry(_Result):
    """One kept revision of a workload (a ControllerRevision it owns), without its frozen inputs."""

    number: int = Field(description="The ControllerRevision's revision number.", ge=1)
    name: str = Field(description="The ControllerRevision's name.", max_length=253)
    hash: str = Field(description="The serving revision hash.", pattern=REVISION_HASH_PATTERN, max_length=10)
    cause: RevisionCause = Field(description="What made this revision.")
    rollback_of: int | None = Field(default=None, description="The revision a rollback copied.", ge=1)
    created: str | None = Field(default=None, description="When it was made (RFC 3339).", max_length=64)
    served_from: str | None = Field(default=None, description="When it started serving.", max_length=64)
    served_until: str | None = Field(
        default=None, description="When a newer revision replaced it.", max_length=64
    )
    current: bool = Field(description="Whether this is the newest revision: the one that serves.")
    recipe: str | None = Field(default=None, description="The Recipe served, name@revision.", max_length=320)
    changes: list[Change] = Field(
        default_factory=list, description="What differs from the revision before it.", max_length=32
    )


class HistoryResult(_Result):
    """A workload's kept revisions, oldest first, with its history and drift status."""

    workload: str = Field(description="The workload's name.", max_length=253)
    namespace: str = Field(description="Its namespace.", max_length=63)
    apply: ApplyMode = Field(description="spec.rollout.apply.")
    pinned: int | None = Field(default=None, description="spec.rollout.revision: a rollback held.", ge=1)
    approved: str | None = Field(default=None, description="spec.rollout.approve.", max_length=16)
    revisions: list[RevisionEntry] = Field(description="The kept revisions, oldest first.", max_length=200)
    history: HistoryStatus | None = Field(default=None, description="status.history, as written.")
    drift: DriftStatus | None = Field(default=None, description="status.drift, as written.")


class RollbackRequest(_Request):
    """Which workload to roll back, to which revision."""

    workload: str = Field(description=_WORKLOAD, min_length=1, max_length=253)
    revision: int | None = Field(
        default=None,
        description="The kept revision to serve again (default: status.history.previous).",
        ge=1,
    )
    clear: bool = Field(
        default=False, description="Remove spec.rollout.revision instead: follow the spec again."
    )


class RollbackResult(_Result):
    """What the rollback wrote."""

    workload: str = Field(description="The workload's name.", max_length=253)
    namespace: str = Field(description="Its namespace.", max_length=63)
    revision: int | None = Field(
        default=None, description="spec.rollout.revision now (absent after clear).", ge=1
    )
    before: int | None = Field(default=None, description="spec.rollout.revision before.", ge=1)
    changed: bool = Field(description="Whether the spec was written (false: it already said so).")


class ApplyDriftRequest(_Request):
    """Which workload's pending drift to apply."""

    workload: str = Field(description=_WORKLOAD, min_length=1, max_length=253)
    revision: str | None = Field(
        default=None,
        description="The pending drift's hash (status.drift.revision) the caller saw; a different "
        "pending hash is refused (409) so what was reviewed is what rolls out. Default: the pending one.",
        pattern=REVISION_HASH_PATTERN,
        max_length=10,
    )


class ApplyDriftResult(_Result):
    """The drift approved."""

    workload: str = Field(description="The workload's name.", max_length=253)
    namespace: str = Field(description="Its namespace.", max_length=63)
    approved: str = Field(
        description="spec.rollout.approve now.", pattern=REVISION_HASH_PATTERN, max_length=10
    )
    unpinned: int | None = Field(
        default=None, description="The rollback pin (spec.rollout.revision) removed to apply it.", ge=1
    )
    changes: list[Change] = Field(default_factory=list, description="What rolls out.", max_length=8)
    changed: bool = Field(description="Whether the spec was written (false: already approved).")


class ClusterApplyDriftRequest(_Request):
    """Which InferenceCluster's pending drift to apply."""

    cluster: str = Field(
        description="The InferenceCluster's name.", min_length=1, max_length=253, pattern=_NAME
    )
    revision: str | None = Field(
        default=None,
        description="The pending drift's hash (status.drift.revision) the caller saw. Default: the "
        "pending one.",
        pattern=REVISION_HASH_PATTERN,
        max_length=10,
    )


class ClusterApplyDriftResult(_Result):
    """The cluster drift approved."""

    cluster: str = Field(description="The InferenceCluster's name.", max_length=253)
    approved: str = Field(description="spec.approve now.", pattern=REVISION_HASH_PATTERN, max_length=10)
    items: list[ClusterDriftItem] = Field(
        default_factory=list, description="The fields applied.", max_length=8
    )
    changed: bool = Field(description="Whether the spec was written (false: already approved).")


@dataclass(frozen=True)
class PluginOperation:
    """One project operation's declaration (the reference's ``DaemonOp`` fields)."""

    local_name: str
    kind: Literal["query", "job"]
    scope: Literal["read", "operate", "admin"]
    description: str
    request: type[BaseModel]
    result: type[BaseModel]

    @property
    def name(self) -> str:
        return PLUGIN_PREFIX + self.local_name

    @property
    def http_path(self) -> str:
        return PLUGIN_PATH + self.local_name.replace(".", "/")


#: The project's operations. Writes are jobs the operator executes (the daemon API's own process
#: has no write access to workloads or clusters, ADR 0021); reading history is an inline query.
OPERATIONS: Final = (
    PluginOperation(
        "workloads.history",
        "query",
        "read",
        "List a workload's kept serving revisions (its ControllerRevisions: number, hash, cause, what "
        "changed, when each served) with status.history and status.drift.",
        HistoryRequest,
        HistoryResult,
    ),
    PluginOperation(
        "workloads.rollback",
        "job",
        "operate",
        "Roll a workload back: set spec.rollout.revision to a kept revision (default: the previous one), "
        "which the operator serves as a new revision; clear removes the pin.",
        RollbackRequest,
        RollbackResult,
    ),
    PluginOperation(
        "workloads.apply_drift",
        "job",
        "operate",
        "Apply a workload's pending drift (apply: OnRequest, or a rollback pin): set spec.rollout.approve "
        "to status.drift.revision.",
        ApplyDriftRequest,
        ApplyDriftResult,
    ),
    PluginOperation(
        "objects.get",
        "query",
        "read",
        'Read the ETag ("<metadata.resourceVersion>", also the ETag header) of an InferenceWorkload, '
        "InferenceCluster, ModelCache or DaemonJob, with its uid and generations: what a conditional "
        "operation's If-Match names (ADR 0049).",
        ObjectGetRequest,
        ObjectGetResult,
    ),
    PluginOperation(
        "clusters.apply_drift",
        "job",
        "admin",
        "Apply an InferenceCluster's pending drift (gpuResource): set spec.approve to status.drift.revision.",
        ClusterApplyDriftRequest,
        ClusterApplyDriftResult,
    ),
    PluginOperation(
        "clusters.drain",
        "job",
        "admin",
        "Drain an InferenceCluster's cordoned nodes: write a new spec.drain.request; the operator moves "
        "the serving groups there one at a time (out of routing, evicted, Ready elsewhere). Follows "
        "status.drain with a feedback event per group until Done or Blocked (wait: false returns at once).",
        DrainRequest,
        DrainResult,
    ),
    PluginOperation(
        "workloads.lease",
        "query",
        "operate",
        "Claim or renew an ephemeral workload's ownership lease (spec.lease) as the authenticated "
        "principal (optionally principal#session): a compare-and-swap, 409 lease_held while another live "
        "holder has it. Renew every ttl/3; unrenewed for ttlSeconds it lapses (deleteOnExit deletes the "
        "workload).",
        LeaseClaimRequest,
        LeaseClaimResult,
    ),
    PluginOperation(
        "workloads.release",
        "query",
        "operate",
        "Release the caller's claim on a workload's ownership lease (orderly detach): destroys nothing; the "
        "lease is unclaimed and anyone may claim it at once.",
        LeaseReleaseRequest,
        LeaseReleaseResult,
    ),
    PluginOperation(
        "workloads.leases",
        "query",
        "read",
        "List the ephemeral workloads (spec.lease) with their owner, state and renew time; owned=false lists "
        "orphans (no live owner), owned=true the owned ones.",
        LeasesRequest,
        LeasesResult,
    ),
)


class SchemaVocabularyError(ValueError):
    """A pydantic schema uses a keyword the daemon API's schema vocabulary does not have."""


_VALIDATION = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "anyOf",
        "enum",
        "minimum",
        "maximum",
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
        "pattern",
    }
)
_ANNOTATIONS = frozenset({"description", "default", "examples", "deprecated", "readOnly", "writeOnly"})
#: Dropped: pydantic's titles (noise), ``format`` (not in the vocabulary; the pattern or the
#: description says it).
_DROPPED = frozenset({"title", "format"})


def _inline(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    all_of = node.get("allOf")
    if ref is None and isinstance(all_of, list) and len(all_of) == 1 and "$ref" in all_of[0]:
        ref = all_of[0]["$ref"]
    if ref is None:
        return node
    target: dict[str, Any] = copy.deepcopy(defs[str(ref).rsplit("/", 1)[-1]])
    target.update({k: v for k, v in node.items() if k not in {"$ref", "allOf"}})
    return target


def _convert(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    node = _inline(node, defs)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROPPED:
            continue
        if key == "const":
            out["enum"] = [value]
        elif key == "properties":
            out[key] = {name: _convert(child, defs) for name, child in value.items()}
        elif key == "items" or (key == "additionalProperties" and isinstance(value, dict)):
            out[key] = _convert(value, defs)
        elif key == "anyOf":
            out[key] = [_convert(branch, defs) for branch in value]
        elif key in _VALIDATION or key in _ANNOTATIONS:
            out[key] = value
        else:
            raise SchemaVocabularyError(f"keyword {key!r} is not in the daemon API's schema vocabulary")
    if "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


def daemon_schema(model: type[BaseModel], *, mode: Literal["validation", "serialization"]) -> dict[str, Any]:
    """``model``'s JSON schema (camelCase where the model has aliases) in the daemon's vocabulary."""
    schema = model.model_json_schema(by_alias=True, mode=mode)
    defs = schema.pop("$defs", {})
    return _convert(schema, defs)


def declarations() -> list[dict[str, Any]]:
    """Every project operation as a catalog entry (``ops/data/daemon-ops.json``'s shape)."""
    return [
        {
            "name": op.name,
            "owner": PLUGIN_ID,
            "local_name": op.local_name,
            "version": 1,
            "kind": op.kind,
            "cacheable": False,
            "scope": op.scope,
            "description": op.description,
            "resources": "none",
            "http_path": op.http_path,
            "feature_flag": None,
            "secret": False,
            "request_schema": daemon_schema(op.request, mode="validation"),
            "result_schema": daemon_schema(op.result, mode="serialization"),
        }
        for op in sorted(OPERATIONS, key=lambda o: o.local_name)
    ]
