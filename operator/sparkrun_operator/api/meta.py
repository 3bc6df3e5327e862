"""Shared building blocks of every resource: the base model, ``Condition`` and ``set_condition``.

Conventions (Kubernetes API conventions, as in jobset/lws/kueue):

- field names are camelCase on the wire (``by_alias``) and snake_case in Python;
- unknown fields are rejected by the models (the CRD schema rejects them at admission too);
- ``status.conditions`` use the ``metav1.Condition`` shape; ``set_condition`` changes
  ``lastTransitionTime`` only when the status flips and always stamps ``observedGeneration``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from sparkrun_operator.api import bounds
from sparkrun_operator.api.clip import clip

GROUP = "sparkrun.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
#: The daemon API's aggregated group (``APIService v1alpha1.daemon.sparkrun.dev``; the shim serves it).
DAEMON_API_GROUP = f"daemon.{GROUP}"
#: Where the aggregated daemon API lives on the apiserver.
DAEMON_API_PREFIX = f"/apis/{DAEMON_API_GROUP}/{VERSION}"
CATEGORY = "sparkrun"
#: The most characters of a condition's message (``metav1.Condition``'s bound); ``set_condition``
#: cuts a longer one with an ellipsis rather than fail the status write.
CONDITION_MESSAGE_MAX = 32768

#: DNS-1123 label: the shape of most Kubernetes object names we reference.
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
#: DNS-1123 subdomain (ConfigMap, Secret, PVC names ...).
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
#: A Kubernetes resource quantity such as ``500Gi`` or ``1.5Ti``.
QUANTITY = r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"


class KubeModel(BaseModel):
    """Base of every spec/status type: camelCase aliases, unknown fields forbidden."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        use_attribute_docstrings=False,
        validate_default=True,
    )

    def to_wire(self) -> dict[str, Any]:
        """Serialise as the API server stores it: camelCase keys, unset optionals omitted."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


ConditionStatus = Literal["True", "False", "Unknown"]


class Condition(KubeModel):
    """One aspect of the object's current state, in the ``metav1.Condition`` shape."""

    type: str = Field(
        description="Type of the condition in CamelCase, e.g. Ready, Progressing, Degraded.",
        max_length=316,
        pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
        r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
    )
    status: ConditionStatus = Field(description="Status of the condition: True, False or Unknown.")
    reason: str = Field(
        description="Machine-readable CamelCase reason for the last transition.",
        max_length=1024,
        min_length=1,
        pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
    )
    message: str = Field(
        default="",
        description="Human-readable explanation: what happened and what to do.",
        max_length=CONDITION_MESSAGE_MAX,
    )
    last_transition_time: dt.datetime = Field(
        description="When the condition last changed status (not when it was last checked)."
    )
    observed_generation: int | None = Field(
        default=None, ge=0, description="The .metadata.generation the condition was computed from."
    )


def parse_time(value: Any) -> dt.datetime | None:
    """An RFC 3339 timestamp as the apiserver writes it (``creationTimestamp``, a condition's or a
    container state's time, an annotation the operator stamped), else ``None``; a time without a
    zone is UTC. Longer than any timestamp (64 characters): ``None`` without parsing."""
    if not isinstance(value, str) or not 0 < len(value) <= 64:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def lease_record(lease: Mapping[str, Any]) -> tuple[str, str, str]:
    """What changes on every write of a ``coordination.k8s.io/v1`` Lease by its holder (a claim,
    a renew, a release): ``(holderIdentity, renewTime, resourceVersion)``. Observers time it on
    their own clock (``ops/leases.py``); resourceVersions are opaque: compared for equality only."""
    meta, spec = lease.get("metadata") or {}, lease.get("spec") or {}
    return (
        str(spec.get("holderIdentity") or ""),
        str(spec.get("renewTime") or ""),
        str(meta.get("resourceVersion") or ""),
    )


def utcnow() -> dt.datetime:
    """Now, in UTC, truncated to whole seconds as metav1.Time serialises it."""
    return dt.datetime.now(dt.UTC).replace(microsecond=0)


def set_condition(
    conditions: list[Condition],
    *,
    type: str,
    status: ConditionStatus,
    reason: str,
    message: str = "",
    observed_generation: int | None = None,
    now: dt.datetime | None = None,
) -> bool:
    """Insert or update the condition ``type`` in ``conditions`` (in place).

    ``lastTransitionTime`` changes only when ``status`` flips (or the condition is new);
    reason, message and ``observedGeneration`` are always refreshed. The clock is injected
    through ``now`` so callers (and tests) control time. A ``message`` over
    :data:`CONDITION_MESSAGE_MAX` characters (text quoted from a tool or an upstream) is cut
    with an ellipsis: the status write must never fail on it.

    Returns ``True`` when anything changed, so callers can skip a status write that would
    change nothing.
    """
    stamp = now if now is not None else utcnow()
    message = clip(message, CONDITION_MESSAGE_MAX)
    for i, existing in enumerate(conditions):
        if existing.type != type:
            continue
        transition = existing.last_transition_time if existing.status == status else stamp
        updated = existing.model_copy(
            update={
                "status": status,
                "reason": reason,
                "message": message,
                "observed_generation": observed_generation,
                "last_transition_time": transition,
            }
        )
        if updated == existing:
            return False
        conditions[i] = updated
        return True
    conditions.append(
        Condition(
            type=type,
            status=status,
            reason=reason,
            message=message,
            observed_generation=observed_generation,
            last_transition_time=stamp,
        )
    )
    return True


def find_condition(conditions: list[Condition], type: str) -> Condition | None:
    """The condition of ``type``, or ``None`` when absent."""
    return next((c for c in conditions if c.type == type), None)


def is_true(conditions: list[Condition], type: str) -> bool:
    """Whether condition ``type`` is present with status True."""
    found = find_condition(conditions, type)
    return found is not None and found.status == "True"


class LocalObjectReference(KubeModel):
    """A reference to an object in the same namespace."""

    name: str = Field(
        description="Name of the referenced object.", min_length=1, max_length=253, pattern=DNS_SUBDOMAIN
    )


class SecretKeyRef(KubeModel):
    """A key of a Secret in the same namespace."""

    name: str = Field(description="Name of the Secret.", min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)
    key: str = Field(
        default="token", description="Key within the Secret's data.", min_length=1, max_length=253
    )


class Toleration(KubeModel):
    """A Kubernetes toleration (core/v1 Toleration)."""

    key: str | None = Field(
        default=None,
        description="Taint key the toleration applies to; empty matches all keys.",
        json_schema_extra=bounds.schema_only(maxLength=bounds.LABEL_KEY_MAX_LENGTH),
    )
    operator: Literal["Exists", "Equal"] | None = Field(
        default=None, description="Exists or Equal (default Equal)."
    )
    value: str | None = Field(
        default=None,
        description="Taint value the toleration matches (operator Equal).",
        json_schema_extra=bounds.schema_only(maxLength=bounds.LABEL_VALUE_MAX_LENGTH),
    )
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        default=None, description="Taint effect to match; empty matches all effects."
    )
    toleration_seconds: int | None = Field(
        default=None, description="For NoExecute: how long the pod stays bound after the taint appears."
    )


class LabelSelectorRequirement(KubeModel):
    """One requirement of a label selector."""

    key: str = Field(
        description="Label key the selector applies to.",
        min_length=1,
        json_schema_extra=bounds.schema_only(maxLength=bounds.LABEL_KEY_MAX_LENGTH),
    )
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"] = Field(
        description="Relation of the key to the values: In, NotIn, Exists or DoesNotExist."
    )
    values: list[bounds.LabelValue] | None = Field(
        default=None,
        description="Values for In and NotIn; must be empty for Exists and DoesNotExist.",
        json_schema_extra=bounds.schema_only(maxItems=bounds.SELECTOR_MAX_VALUES),
    )


class LabelSelector(KubeModel):
    """A label query over a set of objects (metav1.LabelSelector)."""

    match_labels: dict[str, bounds.LabelValue] | None = Field(
        default=None,
        description="Labels that must all match exactly.",
        json_schema_extra=bounds.map_keys(
            bounds.LABEL_KEY_MAX_LENGTH, max_entries=bounds.SELECTOR_MAX_ENTRIES
        ),
    )
    match_expressions: list[LabelSelectorRequirement] | None = Field(
        default=None,
        description="Label requirements that must all hold.",
        json_schema_extra=bounds.schema_only(maxItems=bounds.SELECTOR_MAX_EXPRESSIONS),
    )


class EnvVar(KubeModel):
    """An environment variable for the engine container (literal value, or a reference)."""

    name: str = Field(
        description="Name of the variable.",
        min_length=1,
        max_length=256,
        pattern=r"^[-._a-zA-Z][-._a-zA-Z0-9]*$",
    )
    value: str | None = Field(
        default=None,
        description="Literal value.",
        json_schema_extra=bounds.schema_only(maxLength=bounds.ENV_VALUE_MAX_LENGTH),
    )
    value_from: dict[str, Any] | None = Field(
        default=None,
        description="A core/v1 EnvVarSource (secretKeyRef, configMapKeyRef, fieldRef ...), passed through: "
        "one source, nested at most 3 levels.",
        json_schema_extra=bounds.json_value(bounds.ENV_VALUE_FROM_DEPTH, max_properties=1),
    )


class ObjectReference(KubeModel):
    """A typed reference to an object, possibly in another namespace."""

    api_version: str | None = Field(default=None, description="API version of the referent.")
    kind: str = Field(description="Kind of the referent.")
    namespace: str | None = Field(
        default=None, description="Namespace of the referent (empty if cluster-scoped)."
    )
    name: str = Field(description="Name of the referent.")


Quantity = Annotated[
    str, Field(pattern=QUANTITY, json_schema_extra=bounds.schema_only(maxLength=bounds.QUANTITY_MAX_LENGTH))
]
