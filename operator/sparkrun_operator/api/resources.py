"""The seven kinds: their names, scope, schema types, printer columns and subresources.

This table drives CRD generation (``crdgen``) and is what the controllers, the shim and the
CLI use to address resources, so names live in exactly one place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel

from sparkrun_operator.api.benchmark import InferenceBenchmarkSpec, InferenceBenchmarkStatus
from sparkrun_operator.api.cluster import InferenceClusterSpec, InferenceClusterStatus
from sparkrun_operator.api.daemonjob import DaemonJobSpec, DaemonJobStatus
from sparkrun_operator.api.meta import API_VERSION, CATEGORY, GROUP, VERSION
from sparkrun_operator.api.modelcache import ModelCacheSpec, ModelCacheStatus
from sparkrun_operator.api.recipe import RecipeSpec, RecipeStatus
from sparkrun_operator.api.registry import RecipeRegistrySpec, RecipeRegistryStatus
from sparkrun_operator.api.workload import InferenceWorkloadSpec, InferenceWorkloadStatus


@dataclass(frozen=True)
class PrinterColumn:
    """One ``additionalPrinterColumns`` entry."""

    name: str
    json_path: str
    type: Literal["string", "integer", "number", "boolean", "date"] = "string"
    description: str = ""
    priority: int = 0

    def to_crd(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "type": self.type, "jsonPath": self.json_path}
        if self.description:
            out["description"] = self.description
        if self.priority:
            out["priority"] = self.priority
        return out


def _condition(type_: str) -> str:
    return f'.status.conditions[?(@.type=="{type_}")].status'


READY_COLUMN = PrinterColumn("Ready", _condition("Ready"), description="Ready condition")
AGE_COLUMN = PrinterColumn("Age", ".metadata.creationTimestamp", "date")


@dataclass(frozen=True)
class Kind:
    """A custom resource kind of group ``sparkrun.dev``."""

    kind: str
    plural: str
    short_names: tuple[str, ...]
    scope: Literal["Namespaced", "Cluster"]
    spec: type[BaseModel]
    status: type[BaseModel]
    description: str
    columns: tuple[PrinterColumn, ...] = ()
    scale: bool = False
    spec_required: bool = True

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def crd_name(self) -> str:
        return f"{self.plural}.{GROUP}"

    @property
    def group(self) -> str:
        return GROUP

    @property
    def version(self) -> str:
        return VERSION

    @property
    def api_version(self) -> str:
        return API_VERSION

    @property
    def namespaced(self) -> bool:
        return self.scope == "Namespaced"


INFERENCE_WORKLOAD = Kind(
    kind="InferenceWorkload",
    plural="inferenceworkloads",
    short_names=("iw",),
    scope="Namespaced",
    spec=InferenceWorkloadSpec,
    status=InferenceWorkloadStatus,
    description="One served model: vLLM on GPU nodes, run as JobSets behind a Service.",
    columns=(
        READY_COLUMN,
        PrinterColumn("Phase", ".status.phase"),
        PrinterColumn("Replicas", ".status.readyReplicas", "integer", "Ready replicas"),
        PrinterColumn("Desired", ".spec.replicas", "integer", "Desired replicas"),
        # NB: the resolved names (plan/served.py), so a recipe-based workload shows its recipe's
        # model and served name; Served is what clients send as 'model'.
        PrinterColumn("Model", ".status.model.name", description="The model the engine loads"),
        PrinterColumn("Served", ".status.model.servedName", description="The name clients send as 'model'"),
        # NB: False when a name is lost to an older claim (NameConflict) or withheld by the name
        # policy (NameNotAllowed): Served is then what the engine serves, not what routes to it.
        PrinterColumn(
            "Routable",
            '.status.conditions[?(@.type=="Routable")].status',
            description="Whether the gateway routes every name the workload claims",
        ),
        PrinterColumn("State", ".spec.state", priority=1),
        PrinterColumn("Nodes", ".spec.topology.nodes", "integer", "Nodes per replica", priority=1),
        AGE_COLUMN,
    ),
    scale=True,
)

INFERENCE_CLUSTER = Kind(
    kind="InferenceCluster",
    plural="inferenceclusters",
    short_names=("ic",),
    scope="Cluster",
    spec=InferenceClusterSpec,
    status=InferenceClusterStatus,
    description="A named pool of GPU nodes that workloads can target.",
    columns=(
        READY_COLUMN,
        PrinterColumn("Nodes", ".status.totals.readyNodes", "integer", "Ready member nodes"),
        PrinterColumn("GPUs", ".status.totals.gpus.allocatable", "integer", "Allocatable GPUs"),
        PrinterColumn("Free", ".status.totals.gpus.free", "integer", "Free GPUs"),
        PrinterColumn("Product", ".status.gpuProduct"),
        PrinterColumn("Default", ".spec.default", "boolean", priority=1),
        PrinterColumn("Drain", ".status.drain.state", description="Drain and replace state", priority=1),
        AGE_COLUMN,
    ),
)

MODEL_CACHE = Kind(
    kind="ModelCache",
    plural="modelcaches",
    short_names=("mc",),
    scope="Namespaced",
    spec=ModelCacheSpec,
    status=ModelCacheStatus,
    description="A Hugging Face model revision downloaded to shared storage, verified and tracked.",
    columns=(
        READY_COLUMN,
        PrinterColumn("Phase", ".status.phase"),
        PrinterColumn("Model", ".spec.source.huggingFace.repo"),
        PrinterColumn("Revision", ".status.resolvedRevision", priority=1),
        PrinterColumn("Bytes", ".status.manifest.totalBytes", "integer", priority=1),
        AGE_COLUMN,
    ),
)

INFERENCE_BENCHMARK = Kind(
    kind="InferenceBenchmark",
    plural="inferencebenchmarks",
    short_names=("ib",),
    scope="Namespaced",
    spec=InferenceBenchmarkSpec,
    status=InferenceBenchmarkStatus,
    description="A load test against a served model; results are kept in status.",
    columns=(
        PrinterColumn("Complete", _condition("Complete")),
        PrinterColumn("Phase", ".status.phase"),
        PrinterColumn("Target", ".spec.target.workloadRef.name"),
        PrinterColumn("Framework", ".spec.framework"),
        PrinterColumn("TTFT-ms", ".status.headline.ttftP50Ms", "number", "TTFT p50 of the first scenario"),
        PrinterColumn("ITL-ms", ".status.headline.itlP50Ms", "number", "ITL p50 of the first scenario"),
        PrinterColumn("Tok/s", ".status.headline.outputTokensPerSecond", "number", "Output tokens/s"),
        PrinterColumn("Req/s", ".status.headline.requestsPerSecond", "number", priority=1),
        PrinterColumn("vs-prev", ".status.headline.ttftRatio", "number", "TTFT / baseline", priority=1),
        PrinterColumn("Model", ".spec.target.model", priority=1),
        AGE_COLUMN,
    ),
)

RECIPE = Kind(
    kind="Recipe",
    plural="recipes",
    short_names=("rcp",),
    scope="Namespaced",
    spec=RecipeSpec,
    status=RecipeStatus,
    description="A sparkrun recipe (format v2) that workloads can serve.",
    columns=(
        PrinterColumn("Valid", _condition("Valid")),
        PrinterColumn("Model", ".spec.model"),
        PrinterColumn("Runtime", ".spec.runtime"),
        PrinterColumn("Revision", ".status.revision"),
        AGE_COLUMN,
    ),
)

DAEMON_JOB = Kind(
    kind="DaemonJob",
    plural="daemonjobs",
    short_names=("dj",),
    scope="Namespaced",
    spec=DaemonJobSpec,
    status=DaemonJobStatus,
    description="One job of the daemon-compatible API; its status is the job.",
    columns=(
        PrinterColumn("Operation", ".spec.operation"),
        PrinterColumn("State", ".status.state"),
        PrinterColumn("User", ".spec.principal.username", priority=1),
        AGE_COLUMN,
    ),
)

RECIPE_REGISTRY = Kind(
    kind="RecipeRegistry",
    plural="reciperegistries",
    short_names=("rreg",),
    scope="Cluster",
    spec=RecipeRegistrySpec,
    status=RecipeRegistryStatus,
    description="A git repository of sparkrun recipes, synced as Recipes into one namespace (admins only).",
    columns=(
        PrinterColumn("Synced", _condition("Synced")),
        PrinterColumn("Trusted", ".spec.trusted", "boolean"),
        PrinterColumn("Enabled", ".spec.enabled", "boolean"),
        PrinterColumn("Recipes", ".status.counts.valid", "integer", "Valid recipes"),
        PrinterColumn("Invalid", ".status.counts.invalid", "integer", "Invalid recipes", priority=1),
        PrinterColumn("Commit", ".status.commit", priority=1),
        PrinterColumn("Namespace", ".spec.targetNamespace", description="Where its Recipes are"),
        PrinterColumn("URL", ".spec.url", priority=1),
        AGE_COLUMN,
    ),
)

KINDS: tuple[Kind, ...] = (
    INFERENCE_WORKLOAD,
    INFERENCE_CLUSTER,
    MODEL_CACHE,
    INFERENCE_BENCHMARK,
    RECIPE,
    DAEMON_JOB,
    RECIPE_REGISTRY,
)
KINDS_BY_NAME: dict[str, Kind] = {k.kind: k for k in KINDS}

__all__ = ["CATEGORY", "KINDS", "KINDS_BY_NAME", "Kind", "PrinterColumn"]
