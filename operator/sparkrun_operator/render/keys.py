"""Every label, annotation, field manager and well-known key the operator puts on objects.

One module for keys (as jobset's ``pkg/constants``): controllers, the gateway, the shim and the
tests read them from here, so a key is spelled in exactly one place. Changing a value is a
breaking change for selectors that already exist in clusters.
"""

from __future__ import annotations

from typing import Final

PREFIX: Final = "sparkrun.dev"

# -- labels on children (JobSets, their pods, Services) -----------------------------------
#: Name of the owning InferenceWorkload (the gateway and Service select on it).
LABEL_WORKLOAD: Final = f"{PREFIX}/workload"
#: ``leader`` (serves HTTP) or ``worker`` (headless rank).
LABEL_ROLE: Final = f"{PREFIX}/role"
#: Replica index of the JobSet (decimal string).
LABEL_REPLICA: Final = f"{PREFIX}/replica"
#: Serving revision (hash of the effective serving spec) the JobSet was rendered from.
LABEL_REVISION: Final = f"{PREFIX}/revision"
#: The standard "who manages this" label (Kubernetes recommended labels).
LABEL_MANAGED_BY: Final = "app.kubernetes.io/managed-by"
MANAGED_BY: Final = "sparkrun-operator"

ROLE_LEADER: Final = "leader"
ROLE_WORKER: Final = "worker"

#: Kueue's queue label, put on JobSets when a queue is named.
LABEL_KUEUE_QUEUE: Final = "kueue.x-k8s.io/queue-name"

#: On objects a DaemonJob made (diagnostic bundles, answer Secrets): the job's name.
LABEL_DAEMONJOB: Final = f"{PREFIX}/daemonjob"

# -- server-side apply --------------------------------------------------------------------
FIELD_MANAGER: Final = "sparkrun-operator"

# -- kopf bookkeeping (our own prefix rather than kopf.zalando.org) -----------------------
KOPF_PREFIX: Final = f"operator.{PREFIX}"

# -- annotations ------------------------------------------------------------------------
#: Set by ``workloads.reconcile`` (to the time asked): the operator runs a pass at once.
ANNOTATION_RECONCILE_REQUESTED: Final = f"{PREFIX}/reconcile-requested"

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
