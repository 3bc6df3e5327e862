"""``plugins.k8s.*``: the sparkrun Kubernetes plugin's operations, on the operator's own cluster.

The reference plugin drives a *client-side* kubectl/kubeconfig. Here the operator already is in
the cluster, so every operation acts on it with the operator's identity: ``kubeconfig`` and
``context`` (which select another cluster) are refused, ``namespace`` defaults to the API
namespace. Acting in any other namespace needs the *principal's own* Kubernetes permission
there (a SubjectAccessReview, ``ops.authz.require_access``): the operator's cluster-wide rights
are never lent across namespaces (ADR 0021). Installing Kueue or JobSet (``setup_kueue install:
true``) is refused (install them with their Helm charts); writing Kueue's queues needs the
principal's own permission to write ResourceFlavors and ClusterQueues (cluster-scoped quota)
and the chart value ``operator.rbac.kueueProvisioning`` (without it a typed
``FeatureDisabled`` names it, not the apiserver's bare 403); ``ensure_kubectl`` is disabled
(``ops/catalog.py``: the operator runs no kubectl and its image has none); writing a
kubeconfig file on the server is refused (clients cannot choose server output paths).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import yaml

from sparkrun_operator.api.cluster import DEFAULT_GPU_RESOURCE
from sparkrun_operator.k8s import errors as k8s_errors
from sparkrun_operator.k8s.client import DAEMON_API_MANAGER
from sparkrun_operator.k8s.resources import (
    CLUSTER_QUEUES,
    CLUSTER_ROLE_BINDINGS,
    CRDS,
    JOBSETS,
    KUEUE_GROUP,
    LOCAL_QUEUES,
    NAMESPACES,
    NODES,
    RESOURCE_FLAVORS,
    SERVICE_ACCOUNTS,
)
from sparkrun_operator.ops import authz, kube
from sparkrun_operator.ops.errors import FeatureDisabled, Invalid, NotFound
from sparkrun_operator.ops.executors.clusters import _hardware
from sparkrun_operator.ops.invocation import Executor, OperationContext
from sparkrun_operator.plan.cluster import GPU_PRODUCT_LABEL
from sparkrun_operator.plan.queue import served_version

__all__ = ["EXECUTORS"]

FIELD_MANAGER = DAEMON_API_MANAGER
#: The chart value that grants the operator the writes of ``setup_kueue`` (its own ClusterRole).
KUEUE_PROVISIONING_VALUE = "operator.rbac.kueueProvisioning"


async def _target_namespace(
    ctx: OperationContext,
    args: dict[str, Any],
    *,
    verb: str,
    group: str,
    resource: str,
    name: str | None = None,
) -> str:
    """``args.namespace`` (default: the API's); outside the API's namespace the principal itself
    must be allowed ``verb`` on ``resource`` there."""
    namespace = kube.check_name(args.get("namespace") or ctx.namespace, "namespace")
    if namespace != ctx.namespace:
        await authz.require_access(
            ctx.rest, ctx.user, verb=verb, group=group, resource=resource, namespace=namespace, name=name
        )
    return namespace


def _no_client_config(args: dict[str, Any]) -> None:
    for key in ("kubeconfig", "context"):
        if args.get(key):
            raise Invalid(
                f"{key} selects a client-side cluster; the operator acts on its own cluster "
                "with its own identity"
            )


async def _server_version(ctx: OperationContext) -> str | None:
    try:
        found = await ctx.rest.request("GET", "/version")
    except k8s_errors.KubeError:
        return None
    return str(found.get("gitVersion")) if isinstance(found, dict) else None


async def cluster_info(ctx: OperationContext, args: dict[str, Any]) -> Any:
    _no_client_config(args)
    from importlib import metadata

    version = await _server_version(ctx)
    try:
        client = "kubernetes-asyncio " + metadata.version("kubernetes_asyncio")
    except metadata.PackageNotFoundError:
        client = None
    message = None
    if args.get("pin"):
        message = "pin has no effect: the operator uses the Kubernetes API directly, not kubectl"
    return {
        "reachable": version is not None,
        "current_context": "in-cluster",
        "namespace": args.get("namespace") or ctx.namespace,
        "server_version": version,
        "client_version": client,
        "message": message,
    }


def _manifests(name: str, namespace: str, *, create_namespace: bool) -> list[dict[str, Any]]:
    role = "sparkrun-daemon-operate"
    docs: list[dict[str, Any]] = []
    if create_namespace:
        docs.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    docs.append(
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {"app.kubernetes.io/managed-by": FIELD_MANAGER},
            },
        }
    )
    docs.append(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {
                "name": f"{name}-{namespace}-daemon-operate",
                "labels": {"app.kubernetes.io/managed-by": FIELD_MANAGER},
            },
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        }
    )
    return docs


async def configure_service_account(ctx: OperationContext, args: dict[str, Any]) -> Any:
    _no_client_config(args)
    if args.get("write_kubeconfig"):
        raise Invalid("write_kubeconfig is not available: the server does not write files for clients")
    name = kube.check_name(args.get("name") or "sparkrun", "service account")
    namespace = await _target_namespace(ctx, args, verb="create", group="", resource="serviceaccounts")
    docs = _manifests(name, namespace, create_namespace=bool(args.get("create_namespace")))
    applied = False
    if not args.get("dry_run"):
        for doc in docs:
            resource = {
                "Namespace": NAMESPACES,
                "ServiceAccount": SERVICE_ACCOUNTS,
                "ClusterRoleBinding": CLUSTER_ROLE_BINDINGS,
            }[doc["kind"]]
            await ctx.rest.apply(
                resource,
                doc,
                namespace=namespace if resource.namespaced else None,
            )
            await ctx.feedback(f"Applied {doc['kind']} {doc['metadata']['name']}", stage="apply")
        applied = True
    return {
        "name": name,
        "namespace": namespace,
        "cluster_role": "sparkrun-daemon-operate",
        "binding": docs[-1]["metadata"]["name"],
        "manifests_yaml": yaml.safe_dump_all(docs, sort_keys=False),
        "dry_run": bool(args.get("dry_run")),
        "applied": applied,
        "server": ctx.rest.host,
        "kubeconfig_path": None,
    }


async def jobset_status(ctx: OperationContext, args: dict[str, Any]) -> Any:
    _no_client_config(args)
    namespace = await _target_namespace(
        ctx, args, verb="get", group=JOBSETS.group, resource=JOBSETS.plural, name=args["name"]
    )
    found = await ctx.rest.get(JOBSETS, args["name"], namespace)
    if found is None:
        raise NotFound(f"JobSet {namespace}/{args['name']} not found")
    return {"name": found["metadata"]["name"], "namespace": namespace, "status": found.get("status") or {}}


async def _installed(ctx: OperationContext) -> tuple[dict[str, Any] | None, bool]:
    """Kueue's ClusterQueue CRD (``None``: Kueue is not installed) and whether JobSet is."""
    kueue = await ctx.rest.get(CRDS, f"clusterqueues.{KUEUE_GROUP}")
    jobset = await ctx.rest.get(CRDS, "jobsets.jobset.x-k8s.io")
    return kueue, jobset is not None


async def kueue_status(ctx: OperationContext, args: dict[str, Any]) -> Any:
    _no_client_config(args)
    kueue, jobset = await _installed(ctx)
    return {"kueue_installed": kueue is not None, "jobset_installed": jobset}


async def list_nodes(ctx: OperationContext, args: dict[str, Any]) -> Any:
    _no_client_config(args)
    rows = []
    try:
        nodes = await ctx.rest.list(NODES, label_selector=args.get("selector") or None)
    except k8s_errors.KubeError as error:
        if isinstance(error, k8s_errors.KubeBadRequest):
            raise Invalid(f"invalid label selector: {error.message}") from error
        raise
    for raw in sorted(nodes, key=lambda n: n["metadata"]["name"]):
        node = kube.node_view(raw)
        capacity = node.capacity.get(DEFAULT_GPU_RESOURCE, 0)
        if args.get("gpu_only") and capacity == 0:
            continue
        rows.append(
            {
                "name": node.name,
                "hardware": _hardware(node, DEFAULT_GPU_RESOURCE),
                "labels": dict(node.labels),
                "allocatable_gpus": node.allocatable.get(DEFAULT_GPU_RESOURCE, 0),
                "capacity_gpus": capacity,
                "schedulable": node.ready and not node.unschedulable,
            }
        )
    return rows


async def setup_kueue(ctx: OperationContext, args: dict[str, Any]) -> Any:
    _no_client_config(args)
    kueue, jobset = await _installed(ctx)
    # NB: the newest of Kueue's API versions it serves (v1beta1 is deprecated from Kueue 0.15)
    version = served_version(kueue) or ("v1beta1" if kueue else "v1beta2")
    if args.get("install") and not (kueue and jobset):
        raise Invalid("installing Kueue or JobSet is done with their Helm charts, not through the daemon API")
    namespace = await _target_namespace(ctx, args, verb="create", group=KUEUE_GROUP, resource="localqueues")
    flavors = _gpu_flavors(await ctx.rest.list(NODES))
    if not flavors and not args.get("dry_run"):
        raise Invalid(f"no node has allocatable {DEFAULT_GPU_RESOURCE}: a ClusterQueue needs a GPU quota")
    docs = _kueue_manifests(flavors, namespace, version)
    provisioned = False
    if not args.get("dry_run") and kueue:
        await _may_write_quota(ctx)
        await _apply_kueue(ctx, docs, namespace, version)
        provisioned = True
    return {
        "namespace": namespace,
        "cluster_queue": "sparkrun",
        "local_queue": "sparkrun",
        "flavors": flavors,
        "manifests_yaml": yaml.safe_dump_all(docs, sort_keys=False),
        "dry_run": bool(args.get("dry_run")),
        "kueue_version": (args.get("kueue_version") or "installed") if kueue else "",
        "jobset_version": (args.get("jobset_version") or "installed") if jobset else "",
        "installed_kueue": False,
        "installed_jobset": False,
        "provisioned": provisioned,
    }


async def _may_write_quota(ctx: OperationContext) -> None:
    """The principal itself may write Kueue's cluster-scoped kinds: the ClusterQueue is quota
    every namespace may feed (``namespaceSelector: {}``) and the apply takes over fields an
    administrator set, so the daemon's admin scope in one namespace does not suffice and the
    operator's ClusterRole (``operator.rbac.kueueProvisioning``) is never lent (ADR 0021)."""
    for resource in (RESOURCE_FLAVORS, CLUSTER_QUEUES):
        for verb in ("create", "patch"):
            await authz.require_access(
                ctx.rest,
                ctx.user,
                verb=verb,
                group=KUEUE_GROUP,
                resource=resource.plural,
                namespace="",
                because="Kueue's ResourceFlavors and ClusterQueues are cluster-wide quota, so the "
                "daemon's admin scope alone does not suffice (a dry run answers the manifests)",
                reason="cluster_not_authorized",
            )


async def _apply_kueue(
    ctx: OperationContext, docs: list[dict[str, Any]], namespace: str, version: str
) -> None:
    """Server-side apply ``docs`` as the operator; a 403 (the chart did not grant it) becomes a
    typed refusal naming the chart value that does."""
    for doc in docs:
        resource = {
            "ResourceFlavor": RESOURCE_FLAVORS,
            "ClusterQueue": CLUSTER_QUEUES,
            "LocalQueue": LOCAL_QUEUES,
        }[doc["kind"]]
        try:
            await ctx.rest.apply(
                replace(resource, version=version),
                doc,
                namespace=namespace if resource.namespaced else None,
            )
        except k8s_errors.KubeForbidden as error:
            raise FeatureDisabled(
                f"plugins.k8s.setup_kueue may not write Kueue's {resource.plural} here: the operator "
                f"is not granted it (Kubernetes API: {error.message or error.reason or error.status}). "
                f"Set the chart value {KUEUE_PROVISIONING_VALUE}=true, or apply the manifests_yaml of "
                "a dry run yourself.",
                attrs={
                    "reason": "not_granted",
                    "alternative": f"helm upgrade with --set {KUEUE_PROVISIONING_VALUE}=true, or run "
                    "with dry_run: true and apply its manifests_yaml with kubectl",
                    "feature_flag": KUEUE_PROVISIONING_VALUE,
                },
            ) from error
        await ctx.feedback(f"Applied {doc['kind']} {doc['metadata']['name']}", stage="apply")


def _gpu_flavors(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One Kueue ResourceFlavor per GPU product, with the GPUs allocatable on its nodes."""
    products: dict[str, tuple[int, dict[str, str]]] = {}
    for raw in nodes:
        node = kube.node_view(raw)
        gpus = node.allocatable.get(DEFAULT_GPU_RESOURCE, 0)
        if gpus <= 0:
            continue
        product = node.labels.get(GPU_PRODUCT_LABEL, "gpu")
        total, labels = products.get(
            product, (0, {GPU_PRODUCT_LABEL: product} if GPU_PRODUCT_LABEL in node.labels else {})
        )
        products[product] = (total + gpus, labels)
    flavors = []
    for product, (quota, labels) in sorted(products.items()):
        slug = kube.check_name(
            "".join(c if c.isalnum() else "-" for c in product.lower()).strip("-") or "gpu", "flavor"
        )
        flavors.append({"name": slug, "node_labels": labels, "gpu_quota": quota, "model": product})
    return flavors


def _kueue_manifests(
    flavors: list[dict[str, Any]], namespace: str, version: str = "v1beta2"
) -> list[dict[str, Any]]:
    """The ResourceFlavors, the ``sparkrun`` ClusterQueue over them and its LocalQueue."""
    docs: list[dict[str, Any]] = [
        {
            "apiVersion": f"{KUEUE_GROUP}/{version}",
            "kind": "ResourceFlavor",
            "metadata": {"name": flavor["name"]},
            "spec": {"nodeLabels": flavor["node_labels"]},
        }
        for flavor in flavors
    ]
    quotas = [
        {"name": f["name"], "resources": [{"name": DEFAULT_GPU_RESOURCE, "nominalQuota": f["gpu_quota"]}]}
        for f in flavors
    ]
    docs.append(
        {
            "apiVersion": f"{KUEUE_GROUP}/{version}",
            "kind": "ClusterQueue",
            "metadata": {"name": "sparkrun"},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [{"coveredResources": [DEFAULT_GPU_RESOURCE], "flavors": quotas}],
            },
        }
    )
    docs.append(
        {
            "apiVersion": f"{KUEUE_GROUP}/{version}",
            "kind": "LocalQueue",
            "metadata": {"name": "sparkrun", "namespace": namespace},
            "spec": {"clusterQueue": "sparkrun"},
        }
    )
    return docs


async def stop_jobset(ctx: OperationContext, args: dict[str, Any]) -> Any:
    _no_client_config(args)
    namespace = await _target_namespace(
        ctx, args, verb="delete", group=JOBSETS.group, resource=JOBSETS.plural, name=args["name"]
    )
    found = await ctx.rest.get(JOBSETS, args["name"], namespace)
    # NB: the JobSet read, by its UID: a same-named one created since is not deleted (409)
    if found is None or not await ctx.rest.delete(
        JOBSETS, args["name"], namespace, uid=found["metadata"].get("uid"), propagation="Foreground"
    ):
        raise NotFound(f"JobSet {namespace}/{args['name']} not found")
    return True


EXECUTORS: dict[str, Executor] = {
    "plugins.k8s.cluster_info": cluster_info,
    "plugins.k8s.configure_service_account": configure_service_account,
    "plugins.k8s.jobset_status": jobset_status,
    "plugins.k8s.kueue_status": kueue_status,
    "plugins.k8s.list_nodes": list_nodes,
    "plugins.k8s.setup_kueue": setup_kueue,
    "plugins.k8s.stop_jobset": stop_jobset,
}
