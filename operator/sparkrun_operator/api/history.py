"""Day two (ADR 0046): serving revisions kept as ``ControllerRevision`` objects, rollback, the
effective spec with the source of each field, drift applied on request, and the first failure of
a group kept.

Who writes what:

- the operator writes the ``ControllerRevision`` objects of a workload (owned by it, named
  ``<workload>-<number>``, labelled with the workload and the serving revision's hash). Their
  ``data`` is a :class:`ServingRevision` (immutable, as the apiserver keeps a ControllerRevision's
  ``data``); when a revision served is in its annotations (``render/keys.py`` ``ANNOTATION_SERVED_FROM``,
  ``ANNOTATION_SERVED_UNTIL``);
- a user, Git, the daemon API (``plugins.sparkrun-k8s.workloads.rollback`` / ``.apply_drift``) or
  the CLI (``sparkrun-k8s rollout undo|apply``) writes ``spec.rollout.revision`` (a rollback: serve
  the settings recorded in that revision) and ``spec.rollout.approve`` (under ``apply:
  OnRequest``, apply the pending drift whose desired revision has that hash);
- the planner writes ``status.history``, ``status.effective``, ``status.drift``,
  ``status.firstFailure`` and ``status.lastFailure``, within :data:`STATUS_BUDGET_BYTES` together
  (every list and string below is bounded so the budget holds for any input).

**The newest revision serves.** The ControllerRevision with the highest number is what the
workload's pods are rendered from: with ``apply: Immediate`` a new one is made as soon as the
spec, its recipe, cluster or cache resolve to other pods; with ``OnRequest`` such a change is
``status.drift`` until approved; a rollback is a new revision carrying an old one's settings
(``rollbackOf``). While the desired settings cannot be resolved (a deleted Recipe, an invalid
edit), the newest revision keeps serving and ``SourcesAvailable`` is False.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Annotated, Any, Final, Literal

from pydantic import Field

from sparkrun_operator.api.meta import API_VERSION, KubeModel

#: The one version of a ServingRevision document.
_API_VERSION: Final = "^" + re.escape(API_VERSION) + "$"

#: Hash of the serving settings (``status.revision``): 10 lowercase hex digits.
REVISION_HASH_PATTERN: Final = r"^[0-9a-f]{10}$"
#: ``data.kind`` of a workload's ControllerRevision.
SERVING_REVISION_KIND: Final = "ServingRevision"
#: Label of a ControllerRevision: the serving revision hash (also on the JobSets it renders).
#: The workload label is ``keys.LABEL_WORKLOAD`` as on every child.
DEFAULT_HISTORY_LIMIT: Final = 10
MAX_HISTORY_LIMIT: Final = 100
#: Upper bound of the day-two status fields together (history, effective, drift, first and last
#: failure), serialized as JSON: readiness at scale is sensitive to object size.
STATUS_BUDGET_BYTES: Final = 8192
#: Log lines kept with a failure, and their bytes together (after redaction).
FAILURE_LOG_LINES: Final = 20
FAILURE_LOG_BYTES: Final = 2048
FAILURE_LOG_LINE_CHARS: Final = 256

ApplyMode = Literal["Immediate", "OnRequest"]
#: Where an effective field's value came from.
#: ``workload``: the workload's own spec; ``recipe``: the Recipe's own field (model, container,
#: nodes, env, command); ``recipeDefaults``: the Recipe's ``defaults`` block (its preset);
#: ``default``: the operator's default (the CRD schema or this version's code); ``merged``: a list
#: built from more than one (engine arguments, env), each item's source in the revision object.
#: ``cluster``: the InferenceCluster (placement); ``modelCache``: the ModelCache (the cache mount).
FieldSourceKind = Literal[
    "workload", "recipe", "recipeDefaults", "default", "merged", "cluster", "modelCache"
]
#: Why the pods do not follow the desired settings.
DriftReason = Literal["OnRequest", "RevisionPinned", "RecipeRevisionPinned"]
#: What made a revision (``TrustWithdrawn``: a copy of the serving one without recipe hooks that
#: may no longer run, ``plan/workload/hooktrust.py``).
RevisionCause = Literal[
    "Created", "SpecChanged", "SourceChanged", "Rollback", "DriftApplied", "TrustWithdrawn"
]


class FieldSource(KubeModel):
    """One effective setting and where its value came from."""

    field: str = Field(
        description="The effective field, e.g. engine.image, topology, engineArgs.", max_length=64
    )
    source: FieldSourceKind = Field(
        description="workload, recipe, recipeDefaults, default, merged, cluster or modelCache."
    )
    detail: str | None = Field(
        default=None,
        description="Which one: the Recipe and its revision, the spec path, or the default's origin.",
        max_length=128,
    )


class SourcedValue(KubeModel):
    """An effective setting's value with its source (in the revision object, not the status)."""

    field: str = Field(description="The effective field.", max_length=64)
    value: Any = Field(default=None, description="Its value (JSON; absent: none).")
    source: FieldSourceKind = Field(description="Where the value came from.")
    detail: str | None = Field(
        default=None, description="Which one (see FieldSource.detail).", max_length=128
    )
    items: list[FieldSource] | None = Field(
        default=None,
        description="For merged lists (engineArgs, env): each item's source, in order; field is the item.",
        max_length=1024,
    )


class Change(KubeModel):
    """A field that differs between two revisions (or between the serving and desired settings)."""

    field: str = Field(description="The effective field that changed.", max_length=64)
    source: FieldSourceKind = Field(description="Where the new value comes from.")
    detail: str | None = Field(
        default=None, description="Which one (see FieldSource.detail).", max_length=128
    )
    before: str | None = Field(
        default=None, description="The old value, JSON, clipped to 160 characters.", max_length=160
    )
    after: str | None = Field(
        default=None, description="The new value, JSON, clipped to 160 characters.", max_length=160
    )


class ServingRevision(KubeModel):
    """``data`` of a workload's ControllerRevision: everything its pods are rendered from, frozen.

    ``inputs`` is the serving inputs as the renderer takes them (the effective spec, scheduling,
    placement, cache mount and pod override), so a JobSet of this revision can be made again
    byte for byte after the Recipe, the cluster or the defaults changed, or after a rollback.
    """

    api_version: str = Field(
        default=API_VERSION,
        alias="apiVersion",
        description="Schema version of this data.",
        pattern=_API_VERSION,
    )
    kind: Literal["ServingRevision"] = Field(default="ServingRevision", description="Always ServingRevision.")
    hash: str = Field(
        description="The serving revision hash (status.revision).", pattern=REVISION_HASH_PATTERN
    )
    cause: RevisionCause = Field(description="What made this revision.")
    rollback_of: int | None = Field(
        default=None, description="The revision whose settings a rollback copied.", ge=1
    )
    generation: int | None = Field(
        default=None, description="The workload's generation it was made at.", ge=0
    )
    inputs: dict[str, Any] = Field(description="The serving inputs, frozen (render/frozen.py's wire form).")
    effective: list[SourcedValue] = Field(
        default_factory=list, description="The effective settings, each with its source.", max_length=32
    )
    changes: list[Change] = Field(
        default_factory=list, description="What differs from the revision before it.", max_length=32
    )
    recipe: str | None = Field(
        default=None, description="The Recipe served, name@revision, when one is.", max_length=320
    )


class RevisionRef(KubeModel):
    """A pointer to one kept revision."""

    number: int = Field(description="The ControllerRevision's revision number.", ge=1)
    hash: str = Field(description="The serving revision hash.", pattern=REVISION_HASH_PATTERN, max_length=10)
    name: str = Field(description="The ControllerRevision's name.", max_length=253)


class HistoryStatus(KubeModel):
    """Pointers into the kept revisions (``kubectl get controllerrevisions -l
    sparkrun.dev/workload=NAME`` lists them; ``sparkrun-k8s rollout history NAME`` shows them)."""

    current: RevisionRef | None = Field(default=None, description="The newest revision: what serves.")
    previous: RevisionRef | None = Field(
        default=None, description="The revision before it (where `rollout undo` goes by default)."
    )
    kept: int = Field(
        default=0, description="Revisions kept (bounded by spec.rollout.revisionHistoryLimit).", ge=0
    )
    cause: RevisionCause | None = Field(default=None, description="What made the current revision.")
    rollback_of: int | None = Field(
        default=None, description="When the current revision is a rollback, the revision it copies.", ge=1
    )
    changes: list[Annotated[str, Field(max_length=96)]] = Field(
        default_factory=list,
        description="What the current revision changed, as 'field (source)'; the revision object has "
        "the values.",
        max_length=8,
    )


class EffectiveStatus(KubeModel):
    """Where the effective settings of the serving revision come from (a summary; the revision
    object ``status.history.current.name`` has every value and source)."""

    recipe: str | None = Field(
        default=None, description="name@revision of the Recipe served.", max_length=320
    )
    sources: list[FieldSource] = Field(
        default_factory=list, description="Each effective field and its source.", max_length=16
    )


class DriftStatus(KubeModel):
    """Desired settings the pods do not run yet, and why."""

    reason: DriftReason = Field(
        description="OnRequest (spec.rollout.apply), RevisionPinned (spec.rollout.revision holds a "
        "rollback), "
        "RecipeRevisionPinned (spec.recipe.revision pins an older Recipe revision)."
    )
    revision: str | None = Field(
        default=None,
        description="Hash of the desired settings: the value spec.rollout.approve takes to apply them "
        "(absent while they cannot be resolved).",
        pattern=REVISION_HASH_PATTERN,
        max_length=10,
    )
    since: dt.datetime = Field(description="When this drift was first seen.")
    changes: list[Change] = Field(
        default_factory=list, description="What would change (the first 8).", max_length=8
    )
    more: int = Field(default=0, description="Changes left out of the list.", ge=0)


class ClusterDriftItem(KubeModel):
    """An InferenceCluster field whose new value is recorded, not applied."""

    field: str = Field(description="The spec field, e.g. gpuResource.", max_length=64)
    applied: str | None = Field(default=None, description="The value in use.", max_length=256)
    desired: str | None = Field(default=None, description="The value in the spec.", max_length=256)


class ClusterDrift(KubeModel):
    """Changes to an InferenceCluster's apply-on-request fields, waiting for ``spec.approve``."""

    revision: str = Field(
        description="Hash of the desired values: what spec.approve takes.", pattern=REVISION_HASH_PATTERN
    )
    since: dt.datetime = Field(description="When this drift was first seen.")
    items: list[ClusterDriftItem] = Field(
        default_factory=list, description="Each drifted field.", max_length=8
    )
