"""``plugins.sparkrun-k8s.objects.get`` (ADR 0049): the request and result of the query that answers
the ETag of any object a conditional operation changes (the "matching query" of ``If-Match``).

An ETag is the object's ``metadata.resourceVersion`` as a strong, quoted entity tag
(``"<resourceVersion>"``); the daemon API sends it as the ``ETag`` header too. The kinds are the
targets of the conditional operations (``ops/executors/targets.py``): InferenceWorkload (by name,
or by sparkrun workload id as ``workloads.stop`` addresses it), InferenceCluster, ModelCache and
DaemonJob (a job id), each in the daemon API's namespace except the cluster-scoped
InferenceCluster. Pure: no I/O (``ops/executors/objects.py`` reads).
"""

from __future__ import annotations

from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["KINDS", "ObjectGetRequest", "ObjectGetResult", "ObjectKind"]

ObjectKind = Literal["InferenceWorkload", "InferenceCluster", "ModelCache", "DaemonJob"]
#: The kinds ``objects.get`` answers, in the order the documentation lists them.
KINDS: Final[tuple[str, ...]] = ("InferenceWorkload", "InferenceCluster", "ModelCache", "DaemonJob")


class ObjectGetRequest(BaseModel):
    """Which object's ETag to read."""

    model_config = ConfigDict(extra="forbid")

    kind: ObjectKind = Field(description="The object's kind.")
    name: str = Field(
        description="Its name; for an InferenceWorkload its sparkrun workload id (status.workloadId) "
        "works too, for a DaemonJob its job id.",
        min_length=1,
        max_length=1024,
    )


class ObjectGetResult(BaseModel):
    """The object's identity and versions."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    kind: ObjectKind = Field(description="The object's kind.")
    name: str = Field(description="Its name (metadata.name).", max_length=253)
    namespace: str | None = Field(
        default=None, description="Its namespace (absent for a cluster-scoped kind).", max_length=63
    )
    uid: str = Field(
        description="metadata.uid: tells a recreated object of the same name apart.", max_length=128
    )
    etag: str = Field(
        description='The ETag to send as If-Match: "<metadata.resourceVersion>" (quotes included).',
        max_length=130,
    )
    generation: int | None = Field(default=None, description="metadata.generation.", ge=0)
    observed_generation: int | None = Field(
        default=None,
        description="status.observedGeneration: the generation the controller last acted on.",
        ge=0,
    )
