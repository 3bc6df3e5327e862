"""The one table of Kubernetes REST resources the project reads and writes (ADR 0013).

:class:`Resource` names where a kind lives in the REST API; :func:`resource_of` gives it for
the project's own kinds. Re-exported by :mod:`sparkrun_operator.k8s.client`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final
from urllib.parse import quote

from sparkrun_operator.api.resources import Kind
from sparkrun_operator.render import keys

__all__ = [
    "CLAIMS",
    "CLUSTER_PEERINGS",
    "CLUSTER_QUEUES",
    "CLUSTER_ROLES",
    "CLUSTER_ROLE_BINDINGS",
    "CONFIG_MAPS",
    "CONTROLLER_REVISIONS",
    "CRDS",
    "DEPLOYMENTS",
    "ENDPOINT_SLICES",
    "EVENTS",
    "INFERENCE_POOLS",
    "JOBS",
    "JOBSETS",
    "KUEUE_GROUP",
    "LEASES",
    "LOCAL_QUEUES",
    "NAMESPACES",
    "NETWORK_POLICIES",
    "NODES",
    "PEERINGS",
    "PODS",
    "RESOURCE_FLAVORS",
    "ROLE_BINDINGS",
    "SECRETS",
    "SERVICES",
    "SERVICE_ACCOUNTS",
    "VOLUMES",
    "Resource",
    "resource_of",
]


@dataclass(frozen=True)
class Resource:
    """A REST resource: ``group`` (``""`` for core), ``version``, ``plural``, scope and kind."""

    group: str
    version: str
    plural: str
    namespaced: bool
    kind: str = ""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str | None = None
    ) -> str:
        """The collection (across namespaces when ``namespace`` is None) or one object's path."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{quote(namespace, safe='')}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{quote(name, safe='')}"
            if subresource:
                base += f"/{subresource}"
        return base


def resource_of(kind: Kind) -> Resource:
    """The REST resource of one of our kinds."""
    return Resource(kind.group, kind.version, kind.plural, kind.namespaced, kind.kind)


NODES: Final = Resource("", "v1", "nodes", False, "Node")
NAMESPACES: Final = Resource("", "v1", "namespaces", False, "Namespace")
PODS: Final = Resource("", "v1", "pods", True, "Pod")
JOBS: Final = Resource("batch", "v1", "jobs", True, "Job")
DEPLOYMENTS: Final = Resource("apps", "v1", "deployments", True, "Deployment")
#: A workload's serving revisions (ADR 0046).
CONTROLLER_REVISIONS: Final = Resource("apps", "v1", "controllerrevisions", True, "ControllerRevision")
CLAIMS: Final = Resource("", "v1", "persistentvolumeclaims", True, "PersistentVolumeClaim")
VOLUMES: Final = Resource("", "v1", "persistentvolumes", False, "PersistentVolume")
SERVICES: Final = Resource("", "v1", "services", True, "Service")
SECRETS: Final = Resource("", "v1", "secrets", True, "Secret")
CONFIG_MAPS: Final = Resource("", "v1", "configmaps", True, "ConfigMap")
SERVICE_ACCOUNTS: Final = Resource("", "v1", "serviceaccounts", True, "ServiceAccount")
EVENTS: Final = Resource("", "v1", "events", True, "Event")
ENDPOINT_SLICES: Final = Resource("discovery.k8s.io", "v1", "endpointslices", True, "EndpointSlice")
NETWORK_POLICIES: Final = Resource("networking.k8s.io", "v1", "networkpolicies", True, "NetworkPolicy")
LEASES: Final = Resource("coordination.k8s.io", "v1", "leases", True, "Lease")
JOBSETS: Final = Resource(keys.JOBSET_GROUP, keys.JOBSET_VERSION, keys.JOBSET_PLURAL, True, "JobSet")
CRDS: Final = Resource(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", False, "CustomResourceDefinition"
)
CLUSTER_ROLES: Final = Resource("rbac.authorization.k8s.io", "v1", "clusterroles", False, "ClusterRole")
CLUSTER_ROLE_BINDINGS: Final = Resource(
    "rbac.authorization.k8s.io", "v1", "clusterrolebindings", False, "ClusterRoleBinding"
)
ROLE_BINDINGS: Final = Resource("rbac.authorization.k8s.io", "v1", "rolebindings", True, "RoleBinding")
#: The Gateway API Inference Extension's pool (issue 30): served only where its CRD is installed.
INFERENCE_POOLS: Final = Resource(
    "inference.networking.k8s.io", "v1", "inferencepools", True, "InferencePool"
)
CLUSTER_PEERINGS: Final = Resource("kopf.dev", "v1", "clusterkopfpeerings", False, "ClusterKopfPeering")
PEERINGS: Final = Resource("kopf.dev", "v1", "kopfpeerings", True, "KopfPeering")
KUEUE_GROUP: Final = "kueue.x-k8s.io"
RESOURCE_FLAVORS: Final = Resource(KUEUE_GROUP, "v1beta1", "resourceflavors", False, "ResourceFlavor")
CLUSTER_QUEUES: Final = Resource(KUEUE_GROUP, "v1beta1", "clusterqueues", False, "ClusterQueue")
LOCAL_QUEUES: Final = Resource(KUEUE_GROUP, "v1beta1", "localqueues", True, "LocalQueue")
