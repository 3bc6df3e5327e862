"""JobSets and the Service of an InferenceWorkload (``docs/resources/inferenceworkload.md``, ADR 0010).

One JobSet (``jobset.x-k8s.io/v1alpha2``) per replica, one ClusterIP Service per workload:

- a ``leader`` replicated job (1 pod) that serves HTTP on 8000 with startup, readiness and
  liveness probes on ``/health``; for ``nodes > 1`` a ``worker`` replicated job (``nodes - 1``
  pods, Indexed) running ``vllm serve ... --headless`` with ``--node-rank
  $((JOB_COMPLETION_INDEX+1))``, no ports, no probes, and an init container that waits for the
  leader's rendezvous port;
- every rank runs vLLM's multiprocessing backend (no Ray): ``--distributed-executor-backend mp
  --nnodes N --master-addr <leader host>.<jobset> --master-port 29501``;
- ``startupPolicyOrder: AnyOrder`` (InOrder deadlocks: the leader is Ready only after the workers
  joined); pods ``restartPolicy: Never``, Jobs ``backoffLimit: 0``, so any rank failure fails its
  Job and the JobSet failure policy recreates the whole group; a pod disruption (eviction,
  preemption: ``DisruptionTarget``) fails the Job with reason ``PodFailurePolicy``, which
  restarts the group without counting against ``maxRestarts``;
- ``spec.suspend`` carries ``state: Stopped`` (pods deleted, GPUs freed, fast resume).

Names and labels come from :mod:`~sparkrun_operator.render.names` and
:mod:`~sparkrun_operator.render.keys`. All functions are pure: same inputs, same manifests.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from sparkrun_operator import __version__
from sparkrun_operator.api.cluster import DEFAULT_GPU_RESOURCE
from sparkrun_operator.api.meta import API_VERSION, LabelSelector, Toleration
from sparkrun_operator.api.podoverride import PodOverride
from sparkrun_operator.api.workload import ENGINE_PORT, MASTER_PORT, SchedulingSpec
from sparkrun_operator.recipe.resolve import EffectiveSpec
from sparkrun_operator.render import keys, names, podsecurity
from sparkrun_operator.render.hooks import HookPlan, apply

#: Bump only when a rendering change must roll every workload (it is part of every revision).
RENDER_EPOCH: Final = 1


@dataclass(frozen=True, kw_only=True)
class Owner:
    """The InferenceWorkload children are owned by (controller owner reference)."""

    name: str
    uid: str
    kind: str = "InferenceWorkload"
    api_version: str = API_VERSION

    def reference(self) -> dict[str, Any]:
        """As ``metadata.ownerReferences[]``."""
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }


@dataclass(frozen=True, kw_only=True)
class Placement:
    """Where a workload may run, from its InferenceCluster.

    Node affinity derives from the cluster's *spec* (names or selector), never from the Nodes
    it currently matches, so adding a node to a cluster does not change any revision.
    """

    cluster: str
    gpu_resource: str = DEFAULT_GPU_RESOURCE
    node_names: tuple[str, ...] = ()
    node_selector: LabelSelector | None = None
    tolerations: tuple[Toleration, ...] = ()
    queue_name: str | None = None

    def identity(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "gpuResource": self.gpu_resource,
            "nodeNames": sorted(self.node_names),
            "nodeSelector": self.node_selector.to_wire() if self.node_selector else None,
            "tolerations": [t.to_wire() for t in self.tolerations],
            "queueName": self.queue_name,
        }


@dataclass(frozen=True, kw_only=True)
class CacheMount:
    """A Ready ModelCache mounted read-only as the engine's Hugging Face cache."""

    cache: str
    claim_name: str
    path: str = "/"
    revision: str | None = None
    #: The only node the cache's volume is reachable from: the pods are placed there.
    node: str | None = None

    @property
    def sub_path(self) -> str:
        return self.path.strip("/")

    def identity(self) -> dict[str, Any]:
        return {
            "cache": self.cache,
            "claimName": self.claim_name,
            "path": self.path,
            "revision": self.revision,
            **({"node": self.node} if self.node else {}),
        }


@dataclass(frozen=True, kw_only=True)
class ProbeTimings:
    """Leader probe budget. Startup allows an hour: weights can take many minutes to load."""

    startup_period: int = 5
    startup_failures: int = 720
    readiness_period: int = 5
    readiness_failures: int = 3
    liveness_period: int = 10
    liveness_failures: int = 6

    @property
    def startup_budget_seconds(self) -> int:
        return self.startup_period * self.startup_failures


@dataclass(frozen=True, kw_only=True)
class RenderOptions:
    """Operator-wide rendering settings (not part of any revision: they reach new JobSets only)."""

    max_restarts: int = 5
    probes: ProbeTimings = field(default_factory=ProbeTimings)
    #: Image of ModelCache download Jobs.
    tools_image: str = f"{keys.TOOLS_IMAGE_REPOSITORY}:{__version__}"
    #: Where a ModelCache's claim is mounted (download root; the engine's ``HF_HOME``).
    cache_mount_path: str = keys.CACHE_MOUNT_PATH


@dataclass(frozen=True, kw_only=True)
class ServingInputs:
    """Everything a replica's pods are rendered from; its hash is the serving revision."""

    spec: EffectiveSpec
    scheduling: SchedulingSpec = field(default_factory=SchedulingSpec)
    placement: Placement | None = None
    cache: CacheMount | None = None
    #: ``spec.pod``: the engine pods' securityContext, service account, labels and annotations.
    pod: PodOverride | None = None
    #: A trusted recipe's mods and hooks (``render/hooks.py``, issue 32); ``None``: none run.
    hooks: HookPlan | None = None

    def revision(self) -> str:
        """Stable hash (10 hex) of what changes the pods; replicas and state are not in it."""
        doc: dict[str, Any] = {
            "epoch": RENDER_EPOCH,
            "spec": self.spec.serving_identity(),
            "scheduling": self.scheduling.to_wire(),
            "placement": self.placement.identity() if self.placement else None,
            "cache": self.cache.identity() if self.cache else None,
        }
        if self.pod is not None:
            # NB: only when set, so the revisions of workloads without it stay what they were.
            doc["pod"] = self.pod.to_wire()
        if self.hooks is not None and not self.hooks.empty:
            doc["hooks"] = self.hooks.identity()
        raw = json.dumps(doc, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(raw.encode()).hexdigest()[: names.REVISION_LEN]

    @property
    def queue_name(self) -> str | None:
        """Kueue queue: the workload's own, else its cluster's."""
        if self.scheduling.queue_name:
            return self.scheduling.queue_name
        return self.placement.queue_name if self.placement else None

    @property
    def gpu_resource(self) -> str:
        return self.placement.gpu_resource if self.placement else DEFAULT_GPU_RESOURCE


# -- labels -------------------------------------------------------------------------------


def workload_labels(workload: str) -> dict[str, str]:
    """Labels on every child of ``workload``."""
    return {keys.LABEL_MANAGED_BY: keys.MANAGED_BY, keys.LABEL_WORKLOAD: workload}


def leader_selector(workload: str) -> dict[str, str]:
    """Labels selecting the workload's leader pods (Service, scale subresource, gateway)."""
    return {keys.LABEL_WORKLOAD: workload, keys.LABEL_ROLE: keys.ROLE_LEADER}


def selector_string(workload: str) -> str:
    """:func:`leader_selector` as a label-selector string (``status.selector``)."""
    return ",".join(f"{k}={v}" for k, v in sorted(leader_selector(workload).items()))


def replica_labels(*, workload: str, replica: int, revision: str) -> dict[str, str]:
    return {
        **workload_labels(workload),
        keys.LABEL_REPLICA: str(replica),
        keys.LABEL_REVISION: revision,
    }


# -- engine command line ------------------------------------------------------------------


def shared_args(*, spec: EffectiveSpec, cache: CacheMount | None, jobset: str) -> list[str]:
    """``vllm serve`` arguments every rank gets (before ``--node-rank``), model first."""
    revision = cache.revision if cache is not None and cache.revision else spec.model_revision
    args = [spec.model]
    if revision:
        args += ["--revision", revision]
    args += ["--served-model-name", spec.served_name, "--host", "0.0.0.0", "--port", str(ENGINE_PORT)]
    topo = spec.topology
    args += [
        "--tensor-parallel-size",
        str(topo.tensor_parallel),
        "--pipeline-parallel-size",
        str(topo.pipeline_parallel),
    ]
    if spec.max_model_len is not None:
        args += ["--max-model-len", str(spec.max_model_len)]
    if spec.gpu_memory_utilization is not None:
        args += ["--gpu-memory-utilization", _float(spec.gpu_memory_utilization)]
    if spec.enable_sleep_mode:
        args.append("--enable-sleep-mode")
    if topo.nodes > 1:
        args += [
            "--distributed-executor-backend",
            "mp",
            "--nnodes",
            str(topo.nodes),
            "--master-addr",
            names.leader_address(jobset=jobset),
            "--master-port",
            str(MASTER_PORT),
        ]
    return args


def _float(value: float) -> str:
    return repr(float(value))


def leader_args(*, spec: EffectiveSpec, cache: CacheMount | None, jobset: str) -> list[str]:
    """The leader's arguments after ``vllm serve`` (rank 0; user arguments last)."""
    args = shared_args(spec=spec, cache=cache, jobset=jobset)
    if spec.topology.nodes > 1:
        args += ["--node-rank", "0"]
    return [*args, *spec.engine_args]


def worker_script(*, spec: EffectiveSpec, cache: CacheMount | None, jobset: str) -> str:
    """The worker's shell command: every argument quoted, the node rank computed by the shell."""
    args = shared_args(spec=spec, cache=cache, jobset=jobset)
    return f"exec vllm serve {shlex.join(args)} --node-rank $((JOB_COMPLETION_INDEX+1)) --headless" + (
        f" {shlex.join(spec.engine_args)}" if spec.engine_args else ""
    )


def wait_leader_script(*, jobset: str) -> str:
    """Python that returns once the leader's rendezvous port accepts connections."""
    host = names.leader_address(jobset=jobset)
    return (
        "import socket, time\n"
        "while True:\n"
        "    try:\n"
        f"        socket.create_connection(({host!r}, {MASTER_PORT}), timeout=3).close()\n"
        "        break\n"
        "    except OSError:\n"
        "        time.sleep(2)\n"
    )


def engine_env(
    *, spec: EffectiveSpec, cache: CacheMount | None, options: RenderOptions
) -> list[dict[str, Any]]:
    """Environment of the engine container; the workload's (and recipe's) env wins by name."""
    env: list[dict[str, Any]] = [
        {"name": "VLLM_HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "VLLM_ENGINE_READY_TIMEOUT_S", "value": str(options.probes.startup_budget_seconds)},
    ]
    if spec.enable_sleep_mode:
        # /sleep and /wake_up exist only in dev mode; the gateway blocks them from clients.
        env.append({"name": "VLLM_SERVER_DEV_MODE", "value": "1"})
    if cache is not None:
        env += [
            # NB: the downloader writes the HF layout under the cache root (<root>/hub/...), so
            # the engine reads it as its own HF home, offline, at the pinned --revision.
            {"name": "HF_HOME", "value": options.cache_mount_path},
            {"name": "HF_HUB_OFFLINE", "value": "1"},
        ]
    own = {e.name for e in spec.env}
    return [e for e in env if e["name"] not in own] + [e.to_wire() for e in spec.env]


# -- pod and JobSet -----------------------------------------------------------------------


def _node_affinity(placement: Placement | None, cache_node: str | None = None) -> dict[str, Any] | None:
    terms = _placement_terms(placement) if placement is not None else []
    if cache_node is not None:
        # NB: terms are ORed and the requirements inside one term ANDed: the cache's node is
        # required in every term (or is the only term).
        on_node = {"key": "metadata.name", "operator": "In", "values": [cache_node]}
        terms = [{**t, "matchFields": [*t.get("matchFields", []), on_node]} for t in terms] or [
            {"matchFields": [on_node]}
        ]
    if not terms:
        return None
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}


def _placement_terms(placement: Placement) -> list[dict[str, Any]]:
    terms: list[dict[str, Any]] = []
    if placement.node_names:
        # NB: a node field selector takes exactly one value; terms are ORed, so one per node.
        terms.extend(
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [name]}]}
            for name in sorted(placement.node_names)
        )
    elif placement.node_selector is not None:
        exprs: list[dict[str, Any]] = [
            {"key": k, "operator": "In", "values": [v]}
            for k, v in sorted((placement.node_selector.match_labels or {}).items())
        ]
        for req in placement.node_selector.match_expressions or []:
            expr: dict[str, Any] = {"key": req.key, "operator": req.operator}
            if req.values:
                expr["values"] = list(req.values)
            exprs.append(expr)
        if exprs:
            terms.append({"matchExpressions": exprs})
    return terms


def _tolerations(inputs: ServingInputs) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    cluster = inputs.placement.tolerations if inputs.placement else ()
    for tol in (*cluster, *inputs.scheduling.tolerations):
        wire = tol.to_wire()
        if wire not in seen:
            seen.append(wire)
    return seen


def _pod_spec(
    *,
    inputs: ServingInputs,
    containers: list[dict[str, Any]],
    init_containers: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    volumes: list[dict[str, Any]] = [{"name": keys.VOLUME_SHM, "emptyDir": {"medium": "Memory"}}]
    if inputs.cache is not None:
        volumes.append(
            {
                "name": keys.VOLUME_CACHE,
                "persistentVolumeClaim": {"claimName": inputs.cache.claim_name, "readOnly": True},
            }
        )
    pod: dict[str, Any] = {"restartPolicy": "Never", "enableServiceLinks": False}
    pod.update(podsecurity.engine_pod_fields(inputs.pod))
    if init_containers:
        pod["initContainers"] = list(init_containers)
    pod["containers"] = containers
    pod["volumes"] = volumes
    if tolerations := _tolerations(inputs):
        pod["tolerations"] = tolerations
    if inputs.scheduling.node_selector:
        pod["nodeSelector"] = dict(sorted(inputs.scheduling.node_selector.items()))
    if affinity := _node_affinity(inputs.placement, inputs.cache.node if inputs.cache else None):
        pod["affinity"] = affinity
    if inputs.scheduling.priority_class_name:
        pod["priorityClassName"] = inputs.scheduling.priority_class_name
    return pod


def _engine_container(inputs: ServingInputs, options: RenderOptions) -> dict[str, Any]:
    spec = inputs.spec
    mounts: list[dict[str, Any]] = [{"name": keys.VOLUME_SHM, "mountPath": "/dev/shm"}]
    if inputs.cache is not None:
        mount: dict[str, Any] = {
            "name": keys.VOLUME_CACHE,
            "mountPath": options.cache_mount_path,
            "readOnly": True,
        }
        if inputs.cache.sub_path:
            mount["subPath"] = inputs.cache.sub_path
        mounts.append(mount)
    return {
        "name": keys.CONTAINER_ENGINE,
        "image": spec.image,
        "env": engine_env(spec=spec, cache=inputs.cache, options=options),
        "resources": {"limits": {inputs.gpu_resource: str(spec.topology.gpus_per_node)}},
        "securityContext": podsecurity.engine_container_context(inputs.pod),
        "volumeMounts": mounts,
        # NB: when the engine fails, the kubelet puts the end of its log in the termination
        # message, which the operator keeps as status.firstFailure (ADR 0046). Not part of the
        # serving revision: workloads made before it keep their pods on upgrade.
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }


def _probe(period: int, failures: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": "/health", "port": keys.PORT_NAME},
        "periodSeconds": period,
        "failureThreshold": failures,
        "timeoutSeconds": 5,
    }


def _job(*, completions: int, pod_meta: dict[str, Any], pod: dict[str, Any]) -> dict[str, Any]:
    return {
        "spec": {
            "completions": completions,
            "parallelism": completions,
            "completionMode": "Indexed",
            "backoffLimit": 0,
            # An eviction or preemption fails the Job with reason PodFailurePolicy, which the
            # JobSet failure policy answers without counting it against maxRestarts.
            "podFailurePolicy": {
                "rules": [{"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget"}]}]
            },
            "template": {"metadata": pod_meta, "spec": pod},
        }
    }


def render_jobset(
    *,
    namespace: str,
    workload: str,
    inputs: ServingInputs,
    replica: int,
    suspend: bool,
    owner: Owner | None = None,
    options: RenderOptions | None = None,
    revision: str | None = None,
) -> dict[str, Any]:
    """The JobSet of replica ``replica`` (``revision`` defaults to ``inputs.revision()``)."""
    opts = options or RenderOptions()
    rev = revision or inputs.revision()
    spec = inputs.spec
    nodes = spec.topology.nodes
    name = names.jobset_name(workload=workload, replica=replica, revision=rev)
    labels = replica_labels(workload=workload, replica=replica, revision=rev)

    replicated = [_leader_job(inputs, opts, jobset=name, labels=labels)]
    if nodes > 1:
        replicated.append(_worker_job(inputs, opts, jobset=name, labels=labels))

    js_labels = dict(labels)
    if queue := inputs.queue_name:
        js_labels[keys.LABEL_KUEUE_QUEUE] = queue
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": js_labels}
    if owner is not None:
        metadata["ownerReferences"] = [owner.reference()]
    network: dict[str, Any] = (
        {"enableDNSHostnames": True, "publishNotReadyAddresses": True, "subdomain": name}
        if nodes > 1
        else {"enableDNSHostnames": False}
    )
    return {
        "apiVersion": keys.JOBSET_API_VERSION,
        "kind": "JobSet",
        "metadata": metadata,
        "spec": {
            "suspend": suspend,
            "startupPolicy": {"startupPolicyOrder": "AnyOrder"},
            "network": network,
            "successPolicy": {"operator": "All", "targetReplicatedJobs": [keys.ROLE_LEADER]},
            "failurePolicy": {
                "maxRestarts": opts.max_restarts,
                "rules": [
                    {
                        "name": "disruption",
                        "action": "RestartJobSetAndIgnoreMaxRestarts",
                        "onJobFailureReasons": ["PodFailurePolicy"],
                    }
                ],
            },
            "replicatedJobs": replicated,
        },
    }


def _leader_job(
    inputs: ServingInputs, opts: RenderOptions, *, jobset: str, labels: dict[str, str]
) -> dict[str, Any]:
    """The leader replicated job: ``vllm serve`` with the engine port and its probes."""
    spec = inputs.spec
    leader = _engine_container(inputs, opts)
    leader["command"] = ["vllm", "serve"]
    leader["args"] = leader_args(spec=spec, cache=inputs.cache, jobset=jobset)
    leader["ports"] = [{"name": keys.PORT_NAME, "containerPort": ENGINE_PORT, "protocol": "TCP"}]
    probes = opts.probes
    leader["startupProbe"] = _probe(probes.startup_period, probes.startup_failures)
    leader["readinessProbe"] = _probe(probes.readiness_period, probes.readiness_failures)
    leader["livenessProbe"] = _probe(probes.liveness_period, probes.liveness_failures)
    return {
        "name": keys.ROLE_LEADER,
        "replicas": 1,
        "template": _job(
            completions=1,
            pod_meta=podsecurity.engine_metadata(inputs.pod, {**labels, keys.LABEL_ROLE: keys.ROLE_LEADER}),
            pod=apply(_pod_spec(inputs=inputs, containers=[_order(leader)]), inputs.hooks, head=True),
        ),
    }


def _worker_job(
    inputs: ServingInputs, opts: RenderOptions, *, jobset: str, labels: dict[str, str]
) -> dict[str, Any]:
    """The worker replicated job (nodes - 1 completions), each pod waiting for the leader first."""
    spec, hooks = inputs.spec, inputs.hooks
    worker = _engine_container(inputs, opts)
    worker["command"] = ["/bin/sh", "-c"]
    worker["args"] = [worker_script(spec=spec, cache=inputs.cache, jobset=jobset)]
    wait = {
        "name": keys.CONTAINER_WAIT_LEADER,
        "image": spec.image,
        "command": ["python3", "-c", wait_leader_script(jobset=jobset)],
        "securityContext": podsecurity.engine_container_context(inputs.pod),
    }
    return {
        "name": keys.ROLE_WORKER,
        "replicas": 1,
        "template": _job(
            completions=spec.topology.nodes - 1,
            pod_meta=podsecurity.engine_metadata(inputs.pod, {**labels, keys.LABEL_ROLE: keys.ROLE_WORKER}),
            pod=apply(_pod_spec(inputs=inputs, containers=[_order(worker)], init_containers=[wait]), hooks),
        ),
    }


_CONTAINER_ORDER = (
    "name",
    "image",
    "command",
    "args",
    "env",
    "ports",
    "resources",
    "securityContext",
    "volumeMounts",
    "terminationMessagePolicy",
    "startupProbe",
    "readinessProbe",
    "livenessProbe",
)


def _order(container: dict[str, Any]) -> dict[str, Any]:
    """Fields in a human reading order (goldens and ``kubectl get -o yaml`` read better)."""
    return {k: container[k] for k in _CONTAINER_ORDER if k in container}


def render_service(*, namespace: str, workload: str, owner: Owner | None = None) -> dict[str, Any]:
    """The ClusterIP Service ``<workload>`` selecting Ready leaders on port 8000."""
    metadata: dict[str, Any] = {
        "name": names.service_name(workload=workload),
        "namespace": namespace,
        "labels": workload_labels(workload),
    }
    if owner is not None:
        metadata["ownerReferences"] = [owner.reference()]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata,
        "spec": {
            "type": "ClusterIP",
            "selector": leader_selector(workload),
            "ports": [
                {"name": keys.PORT_NAME, "port": ENGINE_PORT, "targetPort": keys.PORT_NAME, "protocol": "TCP"}
            ],
            "publishNotReadyAddresses": False,
        },
    }


def endpoint_url(*, namespace: str, workload: str) -> str:
    """In-cluster base URL of the workload's Service."""
    return f"http://{names.service_name(workload=workload)}.{namespace}.svc:{ENGINE_PORT}"
