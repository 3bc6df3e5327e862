"""Every label, annotation, field manager and well-known key the operator puts on objects.

One module for keys (as jobset's ``pkg/constants``): controllers, the gateway, the shim and the
tests read them from here, so a key is spelled in exactly one place. Changing a value is a
breaking change for selectors that already exist in clusters.
"""

from __future__ import annotations

from typing import Final

from sparkrun_operator.api.meta import GROUP

PREFIX: Final = GROUP

# -- labels on children (JobSets, their pods, Services) -----------------------------------
#: Name of the owning InferenceWorkload (the gateway and Service select on it).
LABEL_WORKLOAD: Final = f"{PREFIX}/workload"
#: ``leader`` (serves HTTP) or ``worker`` (headless rank).
LABEL_ROLE: Final = f"{PREFIX}/role"
#: Replica index of the JobSet (decimal string).
LABEL_REPLICA: Final = f"{PREFIX}/replica"
#: Serving revision (hash of the effective serving spec) the JobSet was rendered from.
LABEL_REVISION: Final = f"{PREFIX}/revision"
#: On a workload's engine NetworkPolicy: hash of the spec it was rendered with
#: (render/networkpolicy.py; the planner re-applies it when that differs).
ANNOTATION_POLICY_HASH: Final = f"{PREFIX}/policy-hash"
#: The standard "who manages this" label (Kubernetes recommended labels).
LABEL_MANAGED_BY: Final = "app.kubernetes.io/managed-by"
MANAGED_BY: Final = "sparkrun-operator"

ROLE_LEADER: Final = "leader"
ROLE_WORKER: Final = "worker"

#: Kueue's queue label, put on JobSets when a queue is named.
LABEL_KUEUE_QUEUE: Final = "kueue.x-k8s.io/queue-name"

# -- server-side apply: one field manager per process (ADR 0013) --------------------------
FIELD_MANAGER: Final = "sparkrun-operator"
#: The operator's writes of a workload's InferencePool and managed endpoint picker objects: a
#: manager of their own, so that a workload's Service applied as :data:`FIELD_MANAGER` can never
#: silently take over a picker Service of the same name (``<w>-epp``; the apiserver refuses the
#: second controller reference instead: ADR 0050).
POOL_MANAGER: Final = "sparkrun-operator-pool"
#: The gateway's writes (the wake patch of ``spec.state``).
GATEWAY_MANAGER: Final = "sparkrun-gateway"
#: The operator's autoscaler and idle policy: ``spec.replicas`` and ``spec.state`` of workloads
#: with ``spec.autoscaling`` or ``spec.idle`` (ADR 0045), as an HPA writes a Deployment's replicas.
AUTOSCALER_MANAGER: Final = "sparkrun-autoscaler"
#: The daemon API's writes: the shim's DaemonJobs and the operations its executor runs.
DAEMON_API_MANAGER: Final = "sparkrun-daemon-api"
#: ``app.kubernetes.io/managed-by`` of objects the shim itself creates (DaemonJobs, tombstones).
MANAGED_BY_SHIM: Final = "sparkrun-shim"
#: ``app.kubernetes.io/managed-by`` of objects daemon operations create.
MANAGED_BY_DAEMON_API: Final = DAEMON_API_MANAGER

# -- kopf bookkeeping (our own prefix rather than kopf.zalando.org) -----------------------
KOPF_PREFIX: Final = f"operator.{PREFIX}"

# -- annotations ------------------------------------------------------------------------
#: Set by ``workloads.reconcile`` and ``model_cache.reconcile`` (to the time asked): the
#: operator runs a pass of the object at once.
ANNOTATION_RECONCILE_REQUESTED: Final = f"{PREFIX}/reconcile-requested"
#: The owning identity of a workload for guarded daemon operations (``spec.manager`` default).
ANNOTATION_MANAGER: Final = f"{PREFIX}/manager"
#: The SSH user an InferenceCluster was created with (``cluster.create``; informational).
ANNOTATION_SSH_USER: Final = f"{PREFIX}/ssh-user"

# -- the daemon API (DaemonJobs and what operations create) -------------------------------
#: The DaemonJob an object belongs to or was created by (label on artifacts, annotation on
#: workloads a job launched). One spelling for both.
LABEL_DAEMON_JOB: Final = f"{PREFIX}/daemonjob"
#: The prompt a secret answer's Secret answers (with :data:`LABEL_DAEMON_JOB`, its job); set by
#: the shim on the one Secret it makes per job and prompt (``ops/answers.py``).
LABEL_PROMPT: Final = f"{PREFIX}/prompt"
#: Hashed principal of a DaemonJob (selects one caller's jobs).
LABEL_PRINCIPAL: Final = f"{PREFIX}/principal"
#: Operation name of a DaemonJob.
LABEL_OPERATION: Final = f"{PREFIX}/operation"
#: Marks a retention tombstone of a deleted DaemonJob.
LABEL_TOMBSTONE: Final = f"{PREFIX}/tombstone"
#: Lease of the DaemonJob executor.
LABEL_EXECUTOR: Final = f"{PREFIX}/executor"
#: Where a Recipe came from (``recipes.*`` operations) and whether it is kept on sync.
LABEL_RECIPE_SOURCE_KIND: Final = f"{PREFIX}/source-kind"
LABEL_RECIPE_RETAINED: Final = f"{PREFIX}/retained"

# -- the gateway --------------------------------------------------------------------------
#: Secrets with this label hold gateway API keys (``data.key``, optional ``data.models``).
LABEL_GATEWAY_KEY: Final = f"{PREFIX}/gateway-key"
#: The gateway's Deployment and Service (``proxy.*`` operations read them).
GATEWAY_NAME: Final = "sparkrun-gateway"
#: On the gateway Deployment, set by ``proxy.stop``: the replicas ``proxy.start`` restores.
ANNOTATION_REPLICAS_BEFORE_STOP: Final = f"{PREFIX}/replicas-before-stop"
#: The daemon API's imperative aliases (``proxy.add_alias``; ADR 0006), read by the gateway.
GATEWAY_ALIASES_CONFIG_MAP: Final = "sparkrun-gateway-aliases"

#: The node label ``examples/inferencecluster.yaml`` selects (the demo labels its nodes so).
LABEL_EXAMPLE_POOL: Final = f"{PREFIX}/pool"

# -- the operator -------------------------------------------------------------------------
#: kopf peering object (one active replica).
PEERING_NAME: Final = "sparkrun-operator"

# -- JobSet (jobset.x-k8s.io/v1alpha2, v0.12) ---------------------------------------------
JOBSET_GROUP: Final = "jobset.x-k8s.io"
JOBSET_VERSION: Final = "v1alpha2"
JOBSET_API_VERSION: Final = f"{JOBSET_GROUP}/{JOBSET_VERSION}"
JOBSET_PLURAL: Final = "jobsets"
#: Pod label the JobSet controller sets to the JobSet's name.
JOBSET_NAME_LABEL: Final = "jobset.sigs.k8s.io/jobset-name"
#: Pod label with the replicated job's name (``leader`` / ``worker``).
JOBSET_RJOB_LABEL: Final = "jobset.sigs.k8s.io/replicatedjob-name"
#: Pod annotation/label counting group restarts.
JOBSET_RESTART_ATTEMPT: Final = "jobset.sigs.k8s.io/restart-attempt"

# -- engine -------------------------------------------------------------------------------
CONTAINER_ENGINE: Final = "vllm"
CONTAINER_WAIT_LEADER: Final = "wait-leader"
PORT_NAME: Final = "http"
VOLUME_SHM: Final = "dshm"
VOLUME_CACHE: Final = "model-cache"
CACHE_MOUNT_PATH: Final = "/models"

# -- ModelCache ---------------------------------------------------------------------------
#: Name of the ModelCache a download Job (and its pod) or a created claim belongs to.
LABEL_MODEL_CACHE: Final = f"{PREFIX}/model-cache"
#: The download key (hash of source, storage, verify) a download Job was rendered for.
LABEL_CACHE_DOWNLOAD: Final = f"{PREFIX}/cache-download"
#: On a ModelCache (any value): deletion proceeds although workloads still claim the cache.
ANNOTATION_FORCE_DELETE: Final = f"{PREFIX}/force-delete"
#: Finalizer that holds a claimed ModelCache's deletion.
FINALIZER_MODEL_CACHE: Final = f"{PREFIX}/model-cache-in-use"
CONTAINER_DOWNLOAD: Final = "download"
#: On a model_cache operation's tool Job and pod: the DaemonJob it runs for.
LABEL_CACHE_OPERATION: Final = f"{PREFIX}/cache-operation"
CONTAINER_CACHE_TOOL: Final = "cache-tool"
#: On a ModelCache made by ``model_cache.adopt``: when its files were last used before adoption
#: (its age for pruning until a workload uses it).
ANNOTATION_ADOPTED_LAST_USED: Final = f"{PREFIX}/adopted-last-used"
#: On a ModelCache made by ``model_cache.adopt`` / ``model_cache.import``: which (any value).
LABEL_CACHE_ENROLLED_BY: Final = f"{PREFIX}/enrolled-by"
VOLUME_HF_TOKEN: Final = "hf-token"
#: Where the download pod finds the hub token (a Secret key mounted as a file, never env).
HF_TOKEN_DIR: Final = "/var/run/secrets/sparkrun.dev/hf-token"
# -- InferenceBenchmark -----------------------------------------------------------------------
#: Name of the InferenceBenchmark a scenario Job (and its pod) or raw-output ConfigMap belongs to.
LABEL_BENCHMARK: Final = f"{PREFIX}/benchmark"
#: The scenario a benchmark Job runs.
LABEL_BENCHMARK_SCENARIO: Final = f"{PREFIX}/benchmark-scenario"
#: The attempt (status.attempt) a benchmark Job was made for: a resume starts a new one.
LABEL_BENCHMARK_ATTEMPT: Final = f"{PREFIX}/benchmark-attempt"
#: On an InferenceBenchmark: a new value resumes a Failed one (its unfinished scenarios).
ANNOTATION_BENCHMARK_RESUME: Final = f"{PREFIX}/resume"
#: On a workload's ControllerRevision (its ``data`` is immutable, these are not; ADR 0046): when
#: the revision's pods first became Ready, and when a newer revision replaced it.
ANNOTATION_SERVED_FROM: Final = f"{PREFIX}/served-from"
ANNOTATION_SERVED_UNTIL: Final = f"{PREFIX}/served-until"
CONTAINER_BENCHMARK: Final = "benchmark"
#: On a rollout gate's InferenceBenchmark: the InferenceWorkload whose new revision it measures
#: (with :data:`LABEL_REVISION`: which revision).
LABEL_GATE_WORKLOAD: Final = f"{PREFIX}/gate-workload"
#: On a rollout gate's InferenceBenchmark: hash of the gate's benchmark template it was made from.
LABEL_GATE_TEMPLATE: Final = f"{PREFIX}/gate-template"
#: The tools image (downloader, benchmark runners) the download Jobs run.
TOOLS_IMAGE_REPOSITORY: Final = "ghcr.io/sparkrun/sparkrun-tools"
#: On every ownership Lease (ADR 0049; the operator watches Leases by it, nothing else).
LABEL_OWNERSHIP: Final = f"{PREFIX}/ownership"
#: On a workload whose ownership lease lapsed without deleteOnExit (``kubectl get -l``).
LABEL_ORPHANED: Final = f"{PREFIX}/orphaned"
#: On an ownership Lease: the client session of its holder (when one was given).
ANNOTATION_LEASE_SESSION: Final = f"{PREFIX}/lease-session"

# -- the Gateway API Inference Extension (issue 30, ADR 0050) ------------------------------
#: On the InferencePool the operator keeps per workload, and on its managed endpoint picker's
#: objects (Deployment, pods, Service, ServiceAccount, RoleBinding, ConfigMap): the workload.
#: Not :data:`LABEL_WORKLOAD`, which selects engine pods (Service, NetworkPolicy, gateway).
LABEL_INFERENCE_POOL: Final = f"{PREFIX}/inference-pool"
#: The component label of a managed endpoint picker's objects.
LABEL_COMPONENT: Final = "app.kubernetes.io/component"
COMPONENT_ENDPOINT_PICKER: Final = "endpoint-picker"
#: On an InferencePool another product created: the model name the gateway routes to it
#: (v1 pools carry no model name). One name; the name policy and the caller's rights apply.
ANNOTATION_POOL_MODEL: Final = f"{PREFIX}/model-name"
#: On the operator's InferencePool and its picker's objects: hash of what they were rendered
#: from (the planner re-applies them when it differs, as with the engine NetworkPolicy).
ANNOTATION_POOL_HASH: Final = f"{PREFIX}/pool-hash"
#: The request header of the Gateway API Inference Extension's convention: the model name a
#: gateway already resolved (our gateway uses it when it equals the body's model or the body
#: names none).
HEADER_GATEWAY_MODEL_NAME: Final = "x-gateway-model-name"

# issue 32 -- RecipeRegistry (H2): what its controller writes in the registry's targetNamespace
#: On every object a RecipeRegistry's controller writes (Recipes, mod and benchmark-profile
#: ConfigMaps): the registry's name (with a controller ownerReference, UID-checked by readers).
LABEL_REGISTRY: Final = f"{PREFIX}/registry"
#: On a registry-made Recipe: the catalog name as sparkrun forms it (path-qualified when two
#: files share a name), the file's path in the repository, and the commit it was written from.
ANNOTATION_CATALOG_NAME: Final = f"{PREFIX}/catalog-name"
ANNOTATION_REGISTRY_PATH: Final = f"{PREFIX}/registry-path"
ANNOTATION_REGISTRY_COMMIT: Final = f"{PREFIX}/registry-commit"
#: On a RecipeRegistry (set by ``catalog.refresh``, any new value): sync now.
ANNOTATION_SYNC_REQUESTED: Final = f"{PREFIX}/sync-requested"
#: On a mod ConfigMap: the mod's slug (label) and its name as recipes write it (``mods/fix-x``).
LABEL_MOD: Final = f"{PREFIX}/mod"
ANNOTATION_MOD_NAME: Final = f"{PREFIX}/mod-name"
#: On a benchmark-profile ConfigMap: the profile's slug (label) and its name in the registry.
LABEL_BENCHMARK_PROFILE: Final = f"{PREFIX}/benchmark-profile"
ANNOTATION_BENCHMARK_PROFILE_NAME: Final = f"{PREFIX}/benchmark-profile-name"
#: The field manager of a RecipeRegistry's writes (Recipes, ConfigMaps in its targetNamespace).
REGISTRY_MANAGER: Final = "sparkrun-registry"

# issue 32 -- recipe hooks (H4)
#: On a workload's post_commands Job and its pod: the workload (not LABEL_WORKLOAD, which would
#: make its pod one of the engine pods the workload indexes read).
LABEL_HOOK_WORKLOAD: Final = f"{PREFIX}/hook-workload"

# issue 33 -- the GPU telemetry agent (H7)
#: The field manager of the agent's node label patches (GFD's labels, where GFD does not run).
GPU_AGENT_MANAGER: Final = "sparkrun-gpu-agent"

# issue 33 -- the shim's external hostnames (H6)
#: On the shim's TLS Secret the chart generates (templates/shim/apiservice.yaml; only the chart
#: writes and reads it): the DNS names its certificate carries, comma-separated; an upgrade that
#: changes them (``shim.external.hostnames``) generates a new CA and certificate.
ANNOTATION_SHIM_TLS_NAMES: Final = f"{PREFIX}/tls-names"
