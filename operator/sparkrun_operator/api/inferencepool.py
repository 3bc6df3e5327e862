"""``spec.inferencePool`` and ``status.inferencePool`` of an InferenceWorkload: the Gateway API
Inference Extension's ``InferencePool`` the operator keeps per workload (issue 30;
``docs/resources/inferenceworkload.md``, "InferencePool").

The pool (``inference.networking.k8s.io/v1``, same name and namespace as the workload, owned by
it) selects the workload's serving pods (the leader rank of every group) on the engine port, so a
platform's own Inference-Extension gateway (Istio, kgateway, agentgateway, NGINX Gateway Fabric,
GKE) can route to it through an HTTPRoute. A v1.5 pool must name an endpoint picker, and the
reference picker serves exactly one pool: by default the operator deploys one per workload
(``Managed``); ``External`` names the platform's own; ``None`` names none (a v1.6+ CRD).
"""

from __future__ import annotations

from typing import Annotated, Final, Literal

from pydantic import ConfigDict, Field

from sparkrun_operator.api import cel
from sparkrun_operator.api.meta import ConditionStatus, KubeModel

#: The Inference Extension's API of the pool.
POOL_GROUP: Final = "inference.networking.k8s.io"
POOL_VERSION: Final = "v1"
POOL_API_VERSION: Final = f"{POOL_GROUP}/{POOL_VERSION}"
POOL_KIND: Final = "InferencePool"
POOL_PLURAL: Final = "inferencepools"
#: The gRPC (ext-proc) port of an endpoint picker, the reference picker's and the default.
DEFAULT_PICKER_PORT: Final = 9002
#: The most parents (gateways) ``status.inferencePool.parents`` lists.
MAX_POOL_PARENTS: Final = 8
#: DNS-1035 label: a Service name.
DNS_1035_LABEL: Final = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"

PickerMode = Literal["Managed", "External", "None"]
FailureMode = Literal["FailOpen", "FailClose"]


class EndpointPickerSpec(KubeModel):
    """The endpoint picker the pool names (the gateway asks it which pod serves each request)."""

    model_config = ConfigDict(
        json_schema_extra=cel.rules(
            cel.rule(
                "self.mode != 'External' || has(self.service)",
                "mode External needs service (the Service of the platform's endpoint picker)",
                reason="FieldValueRequired",
                field_path=".service",
            ),
            cel.rule(
                "self.mode == 'External' || !has(self.service)",
                "service is only for mode External (a Managed picker's Service is <workload>-epp)",
                reason="FieldValueForbidden",
                field_path=".service",
            ),
            cel.rule(
                "self.mode == 'External' || !has(self.port)",
                "port is only for mode External (a Managed picker listens on 9002)",
                reason="FieldValueForbidden",
                field_path=".port",
            ),
        )
    )

    mode: PickerMode = Field(
        default="Managed",
        description="Managed: the operator deploys the reference endpoint picker for this workload "
        "(Deployment, Service, ServiceAccount and RoleBinding <workload>-epp; about 100m CPU and 128Mi "
        "memory requested). External: the platform runs the picker; name its Service in service. "
        "None: the pool names no picker (the gateway balances over the pods itself); needs the "
        "Inference Extension's CRD v1.6 or later (a v1.5 CRD refuses such a pool and condition "
        "PoolAccepted says so).",
    )
    service: str | None = Field(
        default=None,
        description="mode External: the Service of the platform's endpoint picker, in the workload's "
        "namespace.",
        min_length=1,
        max_length=63,
        pattern=DNS_1035_LABEL,
    )
    port: int | None = Field(
        default=None,
        description=f"mode External: the picker Service's gRPC port (default {DEFAULT_PICKER_PORT}).",
        ge=1,
        le=65535,
    )
    failure_mode: FailureMode = Field(
        default="FailClose",
        description="What the gateway does when the picker does not answer: FailClose refuses the "
        "request, FailOpen sends it to a pod of its own choice. Ignored with mode None.",
    )

    @property
    def effective_port(self) -> int:
        """The port the pool's ``endpointPickerRef`` names."""
        return self.port if self.port is not None else DEFAULT_PICKER_PORT


class InferencePoolSpec(KubeModel):
    """The workload's InferencePool (Gateway API Inference Extension)."""

    enabled: bool = Field(
        default=True,
        description="Keep an InferencePool (and with mode Managed its endpoint picker) for this "
        "workload. false: the operator deletes the pool and picker objects it made.",
    )
    endpoint_picker: EndpointPickerSpec = Field(
        default_factory=EndpointPickerSpec,
        description="The endpoint picker the pool names: Managed (default), External or None.",
    )


class PoolParentStatus(KubeModel):
    """What one gateway (a parent of the pool) reports about it."""

    parent: str = Field(description="The parent as Kind/namespace/name (a Gateway).", max_length=600)
    accepted: ConditionStatus = Field(description="The parent's Accepted condition on the pool.")
    resolved_refs: ConditionStatus = Field(description="The parent's ResolvedRefs condition on the pool.")
    reason: str | None = Field(
        default=None,
        description="The reason of the first of the two that is not True (else Accepted's).",
        max_length=64,
    )


class PickerStatus(KubeModel):
    """The endpoint picker the pool names."""

    mode: PickerMode = Field(description="Managed, External or None (spec.inferencePool.endpointPicker).")
    service: str | None = Field(default=None, description="The picker's Service.", max_length=63)
    ready: bool | None = Field(
        default=None,
        description="Managed: whether the picker's Deployment has a Ready replica. Unset: not known "
        "(External, None).",
    )


class InferencePoolStatus(KubeModel):
    """The workload's InferencePool as last observed."""

    name: str = Field(
        description="The InferencePool (same name and namespace as the workload).", max_length=253
    )
    endpoint_picker: PickerStatus | None = Field(default=None, description="The picker the pool names.")
    parents: list[PoolParentStatus] = Field(
        default_factory=list,
        description=f"The gateways that list the pool (at most {MAX_POOL_PARENTS}); empty: no HTTPRoute "
        "of an Inference-Extension gateway references it yet.",
        max_length=MAX_POOL_PARENTS,
    )


#: The workload's ``spec.inferencePool`` field (declared here: its description is the user's doc).
InferencePoolField = Annotated[
    InferencePoolSpec | None,
    Field(
        description="The InferencePool the operator keeps for this workload so that a platform's "
        "Inference-Extension gateway can route to it (unset: enabled, with a Managed endpoint picker, "
        "when the operator manages pools). docs/install.md, 'InferencePool and your gateway'.",
    ),
]
#: The workload's ``status.inferencePool`` field.
InferencePoolStatusField = Annotated[
    InferencePoolStatus | None,
    Field(
        description="The workload's InferencePool, its endpoint picker and the gateways that list it "
        "(with condition PoolAccepted)."
    ),
]
