"""The InferencePool of an InferenceWorkload and its managed endpoint picker (pure; issue 30,
``docs/resources/inferenceworkload.md``, "InferencePool").

- the pool ``<workload>`` (``inference.networking.k8s.io/v1``): the workload's leader pods
  (:func:`~sparkrun_operator.render.workload.leader_selector`, the leader rank of every group)
  on the engine port, naming its endpoint picker;
- with mode ``Managed`` the reference picker (``cmd/epp`` of the Gateway API Inference
  Extension v1.5.0), one per pool because it serves exactly one (``--pool-name``): a
  ServiceAccount, a RoleBinding to the chart's picker ClusterRole, a Deployment (1 replica,
  Recreate, restricted securityContext, its plugin configuration in ``--config-text``: no
  volume), a Service and, with engine NetworkPolicies on (``--engine-network-policy``), a
  NetworkPolicy, all ``<workload>-epp``.

The picker's NetworkPolicy selects its pods and lets in only the platform gateway's peers
(``gatewayFrom``) on the ext-proc port and ``metricsFrom``'s on the metrics port; without peers
a port is closed to every pod (a gateway that can reach no engine needs no picker either, and
the metrics are unauthenticated and describe the tenant's traffic). The gRPC health port needs
no rule: the kubelet probes from the pod's node, whose traffic a NetworkPolicy never blocks.

Every object is owned by the workload (it goes with it) and carries a hash of what it was
rendered from (:data:`~sparkrun_operator.render.keys.ANNOTATION_POOL_HASH`): the planner
re-applies it only when that differs, however the apiserver defaults it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from sparkrun_operator.api.inferencepool import (
    POOL_API_VERSION,
    POOL_GROUP,
    POOL_KIND,
    InferencePoolSpec,
)
from sparkrun_operator.api.workload import ENGINE_PORT
from sparkrun_operator.render import keys, networkpolicy, podsecurity
from sparkrun_operator.render.networkpolicy import EnginePolicy, spec_hash
from sparkrun_operator.render.workload import Owner, leader_selector

#: The reference endpoint picker the operator deploys (mode Managed).
PICKER_IMAGE: Final = "registry.k8s.io/gateway-api-inference-extension/epp:v1.5.0"
#: The chart's ClusterRole of the pickers (pods; inferencepools; inferenceobjectives and
#: inferencemodelrewrites: get, list, watch), bound in the workload's namespace only.
DEFAULT_CLUSTER_ROLE: Final = "sparkrun-endpoint-picker"
#: The picker's ports: ext-proc gRPC (the gateway's), gRPC health, Prometheus metrics.
GRPC_PORT: Final = 9002
HEALTH_PORT: Final = 9003
METRICS_PORT: Final = 9090
#: The gRPC health service the v1.5 picker answers for a single replica.
HEALTH_SERVICE: Final = "inference-extension"
#: The user and group of the picker image (distroless ``nonroot``).
PICKER_UID: Final = 65532
_SUFFIX: Final = "-epp"
_CONTAINER: Final = "epp"

#: What a picker requests: measured idle and under the picker test (docs/install.md states the
#: cost); memory is limited (its indexes grow with the pool's pods and prompts), CPU is not.
DEFAULT_RESOURCES: Final[Mapping[str, Any]] = {
    "requests": {"cpu": "100m", "memory": "128Mi"},
    "limits": {"memory": "512Mi"},
}

#: The picker's plugins (``--config-text``): the v1.5.0 chart's default profile for vLLM. The
#: metrics data source scrapes each pod's ``/metrics`` on the pool's target port and the core
#: extractor reads vLLM's names (``vllm:num_requests_waiting``, ``vllm:num_requests_running``,
#: ``vllm:kv_cache_usage_perc``, ``vllm:lora_requests_info``, ``vllm:cache_config_info``);
#: queue depth and KV-cache use pick the less loaded pod, the prefix cache keeps a prompt's
#: prefix where it was served.
PICKER_CONFIG: Final = """\
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: prefix-cache-scorer
- type: metrics-data-source
  parameters:
    scheme: http
    path: /metrics
    insecureSkipVerify: true
- type: core-metrics-extractor
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
    weight: 2
  - pluginRef: kv-cache-utilization-scorer
    weight: 2
  - pluginRef: prefix-cache-scorer
    weight: 3
"""

PoolMode = Literal["auto", "off"]


@dataclass(frozen=True, kw_only=True)
class PickerSettings:
    """How the operator runs a Managed picker (``--endpoint-picker``)."""

    image: str = PICKER_IMAGE
    #: The container's ``resources`` (requests and limits), as written.
    resources: Mapping[str, Any] = field(default_factory=lambda: dict(DEFAULT_RESOURCES))
    node_selector: Mapping[str, str] = field(default_factory=dict)
    #: Pod tolerations, as written (core/v1 Toleration objects).
    tolerations: tuple[Mapping[str, Any], ...] = ()
    #: The ClusterRole each picker's RoleBinding grants (the chart's ``<release>-endpoint-picker``).
    cluster_role: str = DEFAULT_CLUSTER_ROLE


@dataclass(frozen=True, kw_only=True)
class PoolSettings:
    """Whether the operator keeps InferencePools (``--inference-pools``) and how."""

    #: ``auto``: when the apiserver serves the pool's API; ``off``: never (the chart's
    #: ``inferencePool.enabled: false``).
    mode: PoolMode = "auto"
    #: Whether the apiserver serves ``inferencepools.inference.networking.k8s.io/v1`` (looked up
    #: once at operator start).
    served: bool = False
    picker: PickerSettings = field(default_factory=PickerSettings)

    @property
    def manages(self) -> bool:
        """Whether the operator keeps pools now."""
        return self.mode == "auto" and self.served


# -- names and labels ---------------------------------------------------------------------


def pool_name(workload: str) -> str:
    """The pool: the workload's own name."""
    return workload


def picker_name(workload: str) -> str:
    """``<workload>-epp``: each of the Managed picker's objects (workload names are at most 35
    characters, so it stays a DNS-1035 label)."""
    return f"{workload}{_SUFFIX}"


def pool_labels(workload: str) -> dict[str, str]:
    """The labels of the pool."""
    return {keys.LABEL_MANAGED_BY: keys.MANAGED_BY, keys.LABEL_INFERENCE_POOL: workload}


def picker_selector(workload: str) -> dict[str, str]:
    """Labels selecting the Managed picker's pods (its Deployment's and Service's selector): the
    engine NetworkPolicy's, which lets exactly these pods in (one definition for both)."""
    return networkpolicy.picker_labels(workload)


def picker_labels(workload: str) -> dict[str, str]:
    """The labels of the picker's objects and pods (never :data:`~keys.LABEL_WORKLOAD`, which
    selects engine pods)."""
    return {keys.LABEL_MANAGED_BY: keys.MANAGED_BY, **picker_selector(workload)}


def _finish(obj: dict[str, Any], owner: Owner | None) -> dict[str, Any]:
    """``obj`` owned by ``owner`` and annotated with the hash of everything else it says."""
    meta = obj["metadata"]
    if owner is not None:
        meta["ownerReferences"] = [owner.reference()]
    meta["annotations"] = {keys.ANNOTATION_POOL_HASH: spec_hash(obj)}
    return obj


def _meta(name: str, namespace: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"name": name, "namespace": namespace, "labels": labels}


# -- the pool ---------------------------------------------------------------------------


def endpoint_picker_ref(workload: str, spec: InferencePoolSpec) -> dict[str, Any] | None:
    """The pool's ``endpointPickerRef``; ``None`` with mode ``None``."""
    picker = spec.endpoint_picker
    if picker.mode == "None":
        return None
    service = picker_name(workload) if picker.mode == "Managed" else picker.service
    port = GRPC_PORT if picker.mode == "Managed" else picker.effective_port
    return {
        "group": "",
        "kind": "Service",
        "name": service,
        "port": {"number": port},
        "failureMode": picker.failure_mode,
    }


def render_pool(
    *, namespace: str, workload: str, spec: InferencePoolSpec | None, owner: Owner | None = None
) -> dict[str, Any]:
    """The InferencePool ``<workload>`` (``spec``: ``spec.inferencePool``; unset: the defaults)."""
    spec = spec if spec is not None else InferencePoolSpec()
    body: dict[str, Any] = {
        "selector": {"matchLabels": leader_selector(workload)},
        "targetPorts": [{"number": ENGINE_PORT}],
        "appProtocol": "http",
    }
    ref = endpoint_picker_ref(workload, spec)
    if ref is not None:
        body["endpointPickerRef"] = ref
    obj = {
        "apiVersion": POOL_API_VERSION,
        "kind": POOL_KIND,
        "metadata": _meta(pool_name(workload), namespace, pool_labels(workload)),
        "spec": body,
    }
    return _finish(obj, owner)


# -- the Managed picker -----------------------------------------------------------------


def picker_args(*, namespace: str, workload: str) -> list[str]:
    """The picker's command line: its one pool, the plugins inline, no tracing, no profiling."""
    return [
        "--pool-name",
        pool_name(workload),
        "--pool-namespace",
        namespace,
        "--pool-group",
        POOL_GROUP,
        "--config-text",
        PICKER_CONFIG,
        "--tracing=false",
        "--metrics-endpoint-auth=false",
        "--enable-pprof=false",
        "--zap-encoder",
        "json",
    ]


def _probe(period: int, *, delay: int = 0) -> dict[str, Any]:
    probe: dict[str, Any] = {
        "grpc": {"port": HEALTH_PORT, "service": HEALTH_SERVICE},
        "periodSeconds": period,
    }
    if delay:
        probe["initialDelaySeconds"] = delay
    return probe


def _field_env(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def _container(*, namespace: str, workload: str, settings: PickerSettings) -> dict[str, Any]:
    context = podsecurity.restricted_container()
    context["readOnlyRootFilesystem"] = True
    return {
        "name": _CONTAINER,
        "image": settings.image,
        "imagePullPolicy": "IfNotPresent",
        "args": picker_args(namespace=namespace, workload=workload),
        "env": [_field_env("NAMESPACE", "metadata.namespace"), _field_env("POD_NAME", "metadata.name")],
        "ports": [
            {"name": "grpc", "containerPort": GRPC_PORT, "protocol": "TCP"},
            {"name": "grpc-health", "containerPort": HEALTH_PORT, "protocol": "TCP"},
            {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"},
        ],
        "readinessProbe": _probe(2),
        "livenessProbe": _probe(10, delay=5),
        "resources": _plain(settings.resources),
        "securityContext": dict(sorted(context.items())),
    }


def _plain(value: Any) -> Any:
    """A JSON-shaped copy (settings hold mappings and tuples; manifests are dicts and lists)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _deployment(*, namespace: str, workload: str, settings: PickerSettings) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "serviceAccountName": picker_name(workload),
        # The picker watches its pool and the pool's pods: it needs its token.
        "automountServiceAccountToken": True,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": PICKER_UID,
            "runAsGroup": PICKER_UID,
            "seccompProfile": dict(podsecurity.RUNTIME_DEFAULT),
        },
        "containers": [_container(namespace=namespace, workload=workload, settings=settings)],
    }
    if settings.node_selector:
        pod["nodeSelector"] = dict(sorted(settings.node_selector.items()))
    if settings.tolerations:
        pod["tolerations"] = _plain(settings.tolerations)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(picker_name(workload), namespace, picker_labels(workload)),
        "spec": {
            "replicas": 1,
            # One active picker: its prefix index is per process (upstream's advice).
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": picker_selector(workload)},
            "template": {"metadata": {"labels": picker_labels(workload)}, "spec": pod},
        },
    }


def _service(*, namespace: str, workload: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(picker_name(workload), namespace, picker_labels(workload)),
        "spec": {
            "type": "ClusterIP",
            "selector": picker_selector(workload),
            "ports": [
                {
                    "name": "grpc-ext-proc",
                    "port": GRPC_PORT,
                    "targetPort": "grpc",
                    "protocol": "TCP",
                    "appProtocol": "http2",
                },
                {"name": "http-metrics", "port": METRICS_PORT, "targetPort": "metrics", "protocol": "TCP"},
            ],
        },
    }


def _network_policy(*, namespace: str, workload: str, policy: EnginePolicy) -> dict[str, Any]:
    """The picker pods' ingress: ``gatewayFrom`` on the ext-proc port, ``metricsFrom`` on the
    metrics port, nobody else (no peer: no rule, the port is closed; no rule at all: no
    ``ingress`` field, the canonical deny-all, which every implementation reads alike)."""
    rules: list[dict[str, Any]] = []
    for peers, port in ((policy.gateway_from, GRPC_PORT), (policy.metrics_from, METRICS_PORT)):
        if peers:
            rules.append({"from": _plain(peers), "ports": [{"port": port, "protocol": "TCP"}]})
    spec: dict[str, Any] = {
        "podSelector": {"matchLabels": picker_selector(workload)},
        "policyTypes": ["Ingress"],
    }
    if rules:
        # NB: never "ingress: []": kube-network-policies v0.8 reads an empty, non-null list as
        # allow-all (the apiserver would store it as absent, but say what is meant)
        spec["ingress"] = rules
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(picker_name(workload), namespace, picker_labels(workload)),
        "spec": spec,
    }


def render_picker(
    *,
    namespace: str,
    workload: str,
    spec: InferencePoolSpec | None,
    settings: PickerSettings,
    owner: Owner | None = None,
    policy: EnginePolicy | None = None,
) -> list[dict[str, Any]]:
    """The Managed picker's ServiceAccount, RoleBinding, Deployment, Service and (with
    ``policy``, the engines' ``--engine-network-policy``) NetworkPolicy, in that order; ``[]``
    unless ``spec`` (unset: the defaults) asks for a Managed picker."""
    spec = spec if spec is not None else InferencePoolSpec()
    if not spec.enabled or spec.endpoint_picker.mode != "Managed":
        return []
    name = picker_name(workload)
    labels = picker_labels(workload)
    account: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": _meta(name, namespace, labels),
    }
    binding: dict[str, Any] = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": _meta(name, namespace, dict(labels)),
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": settings.cluster_role,
        },
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
    }
    objects = [
        account,
        binding,
        _deployment(namespace=namespace, workload=workload, settings=settings),
        _service(namespace=namespace, workload=workload),
    ]
    if policy is not None:
        objects.append(_network_policy(namespace=namespace, workload=workload, policy=policy))
    return [_finish(obj, owner) for obj in objects]
