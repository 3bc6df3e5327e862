"""Condition types, reasons and phases shared by the controllers, the shim and the CLI.

Reasons are CamelCase, stable, and documented in ``docs/concepts.md``: users and tools match
on them, so changing one is a breaking change.
"""

from __future__ import annotations

from typing import Final

# -- condition types ----------------------------------------------------------------------
READY: Final = "Ready"
PROGRESSING: Final = "Progressing"
DEGRADED: Final = "Degraded"
SCHEDULED: Final = "Scheduled"
CACHE_READY: Final = "CacheReady"
SLEEPING: Final = "Sleeping"
ROUTABLE: Final = "Routable"
RECIPE_RESOLVED: Final = "RecipeResolved"
VALID: Final = "Valid"
COMPLETE: Final = "Complete"
FAILED: Final = "Failed"
#: A gated rollout's verdict on the serving revision (``spec.rollout.gate``, ADR 0029).
PROMOTED: Final = "Promoted"
#: The pods run the desired settings (False: drift, ``status.drift``; ADR 0046).
UP_TO_DATE: Final = "UpToDate"
#: Every source of the effective settings exists (False: the newest revision keeps serving).
SOURCES_AVAILABLE: Final = "SourcesAvailable"
#: Whether an ownership lease (``spec.lease``) has a live holder (ADR 0049).
OWNED: Final = "Owned"
#: Whether a gateway accepted the workload's InferencePool (issue 30; with pools managed).
POOL_ACCEPTED: Final = "PoolAccepted"
#: Whether Kueue admitted the workload's JobSets (with a queue name; issue 32).
ADMITTED: Final = "Admitted"
#: Whether an InferenceCluster's ``queueName`` exists as a LocalQueue where its workloads run.
QUEUE_READY: Final = "QueueReady"

# -- reasons ------------------------------------------------------------------------------
# Ready
REASON_ALL_REPLICAS_READY: Final = "AllReplicasReady"
REASON_REPLICAS_NOT_READY: Final = "ReplicasNotReady"
REASON_STOPPED: Final = "Stopped"
#: Zero replicas because the idle policy or the autoscaler took them (not the user's Stopped).
REASON_SCALED_TO_ZERO: Final = "ScaledToZero"
REASON_ASLEEP: Final = "Asleep"
REASON_WAITING_FOR_CACHE: Final = "WaitingForCache"
REASON_NO_REPLICAS: Final = "NoReplicasDesired"
# Progressing
REASON_CREATING: Final = "Creating"
REASON_ROLLING_OUT: Final = "RollingOut"
REASON_SCALING: Final = "Scaling"
REASON_STABLE: Final = "Stable"
# Promoted (rollout gate)
REASON_THRESHOLDS_MET: Final = "ThresholdsMet"
REASON_THRESHOLD_MISSED: Final = "ThresholdMissed"
REASON_BENCHMARK_FAILED: Final = "BenchmarkFailed"
REASON_BENCHMARKING: Final = "Benchmarking"
REASON_WAITING_FOR_REPLICA: Final = "WaitingForReplica"
# Scheduled
REASON_INSUFFICIENT_GPU: Final = "InsufficientGPU"
REASON_NO_FITTING_NODES: Final = "NoFittingNodes"
#: No candidate node has the per-GPU memory a replica needs (plan/fit.py); no JobSet is created.
REASON_INSUFFICIENT_GPU_MEMORY: Final = "InsufficientGPUMemory"
REASON_CLUSTER_NOT_FOUND: Final = "ClusterNotFound"
REASON_PODS_PENDING: Final = "PodsPending"
REASON_ALL_PODS_SCHEDULED: Final = "AllPodsScheduled"
# Degraded
REASON_GROUP_RESTARTING: Final = "GroupRestarting"
REASON_GROUP_FAILED: Final = "GroupFailed"
REASON_AS_EXPECTED: Final = "AsExpected"
REASON_GROUP_COMPLETED: Final = "GroupCompleted"
# Sleeping
REASON_AWAKE: Final = "Awake"
REASON_FALLING_ASLEEP: Final = "FallingAsleep"
REASON_WAKING_UP: Final = "WakingUp"
# Routable (the gateway routes every model name the workload claims)
REASON_NAMES_ACCEPTED: Final = "NamesAccepted"
REASON_NAME_CONFLICT: Final = "NameConflict"
#: A name the workload serves is outside the prefixes its namespace may claim (the name policy,
#: ``--name-prefixes``): not routed, whatever the workload's age.
REASON_NAME_NOT_ALLOWED: Final = "NameNotAllowed"
# CacheReady
REASON_CACHE_NOT_FOUND: Final = "CacheNotFound"
REASON_CACHE_NOT_READY: Final = "CacheNotReady"
REASON_CACHE_READY: Final = "CacheReady"
#: The cache's claim can be mounted on one node only, and the workload spans several.
REASON_CACHE_NOT_SHAREABLE: Final = "CacheNotShareable"
REASON_NO_CACHE: Final = "NoCacheConfigured"
# RecipeResolved
REASON_RECIPE_NOT_FOUND: Final = "RecipeNotFound"
REASON_RECIPE_REVISION_MISMATCH: Final = "RecipeRevisionMismatch"
REASON_RECIPE_INVALID: Final = "RecipeInvalid"
REASON_RECIPE_RESOLVED: Final = "Resolved"
# InferenceCluster
REASON_ENOUGH_READY_NODES: Final = "MinReadyNodesReady"
REASON_NOT_ENOUGH_READY_NODES: Final = "NotEnoughReadyNodes"
REASON_DUPLICATE_DEFAULT: Final = "DuplicateDefault"
REASON_NODES_MISSING: Final = "NodesMissing"
REASON_NODES_NOT_READY: Final = "NodesNotReady"
# Recipe (Valid)
REASON_VALID: Final = "Valid"
REASON_INVALID: Final = "Invalid"
# UpToDate (workloads and clusters)
REASON_REVISION_CURRENT: Final = "RevisionCurrent"
REASON_DRIFT_PENDING: Final = "DriftPending"
REASON_REVISION_PINNED: Final = "RevisionPinned"
REASON_RECIPE_REVISION_PINNED: Final = "RecipeRevisionPinned"
#: spec.rollout.revision names a revision that is not kept (pruned, or never made).
REASON_REVISION_NOT_FOUND: Final = "RevisionNotFound"
# SourcesAvailable (False reasons are RecipeNotFound, RecipeInvalid, InvalidSpec)
REASON_SOURCES_AVAILABLE: Final = "AllSourcesAvailable"
# Owned (spec.lease)
REASON_LEASE_HELD: Final = "LeaseHeld"
REASON_LEASE_UNCLAIMED: Final = "LeaseUnclaimed"
REASON_LEASE_EXPIRED: Final = "LeaseExpired"
# PoolAccepted (False also carries a gateway's own reason: NotSupportedByParent,
# HTTPRouteNotAccepted, InvalidExtensionRef, ...)
REASON_POOL_ACCEPTED: Final = "Accepted"
#: No gateway lists the pool yet: an HTTPRoute must reference it.
REASON_NO_PARENT: Final = "NoParent"
#: ``spec.inferencePool.enabled: false``, or the operator runs with ``--inference-pools=off``.
REASON_POOL_DISABLED: Final = "Disabled"
#: The apiserver does not serve ``inferencepools.inference.networking.k8s.io/v1``.
REASON_POOL_CRD_NOT_INSTALLED: Final = "CRDNotInstalled"
#: An object of the pool's (or its picker's) name exists that the workload does not control.
REASON_POOL_NAME_TAKEN: Final = "PoolNameTaken"
#: The apiserver refused the pool (its message, clipped).
REASON_POOL_REFUSED: Final = "Refused"
#: A gateway's reason that is not a valid condition reason (shown in the message instead).
REASON_POOL_NOT_ACCEPTED: Final = "NotAccepted"
# Admitted (Kueue; also on Scheduled and Ready while queued) and QueueReady
REASON_ADMITTED_BY_KUEUE: Final = "AdmittedByKueue"
REASON_QUEUED_BY_KUEUE: Final = "QueuedByKueue"
#: The queue name names no LocalQueue in the namespace: Kueue admits nothing from it.
REASON_QUEUE_NOT_FOUND: Final = "QueueNotFound"
#: A queue name is set but Kueue's CRDs are not installed: nothing unsuspends the JobSets.
REASON_KUEUE_NOT_INSTALLED: Final = "KueueNotInstalled"
#: The operator has not read the queue yet, or could not (its message says why).
REASON_QUEUE_UNKNOWN: Final = "QueueUnknown"
REASON_QUEUE_EXISTS: Final = "QueueExists"
#: No workload on the cluster uses its queue name yet: nothing to check.
REASON_QUEUE_UNUSED: Final = "QueueUnused"
# generic
REASON_INVALID_SPEC: Final = "InvalidSpec"
REASON_RECONCILE_ERROR: Final = "ReconcileError"

# -- phases (a summary for humans and printer columns; controllers never branch on them) --
WORKLOAD_PHASES: Final = (
    "Pending",
    "Starting",
    "Running",
    "Updating",
    "Degraded",
    "Sleeping",
    "ScaledToZero",
    "Stopped",
    "Failed",
)
CACHE_PHASES: Final = ("Pending", "Resolving", "Downloading", "Verifying", "Ready", "Failed")
BENCHMARK_PHASES: Final = ("Pending", "Running", "Succeeded", "Failed")
JOB_STATES: Final = (
    "queued",
    "starting",
    "running",
    "waiting_input",
    "cancelling",
    "succeeded",
    "failed",
    "cancelled",
    "lost",
)
JOB_TERMINAL_STATES: Final = frozenset({"succeeded", "failed", "cancelled", "lost"})

# -- issue 32: RecipeRegistry (H2) ----------------------------------------------------------
#: Whether the registry's last sync fetched its ref and wrote its objects.
SYNCED: Final = "Synced"
REASON_SYNCED: Final = "Synced"
#: The repository could not be fetched (unreachable, gone, refused, too large, too slow).
REASON_FETCH_FAILED: Final = "FetchFailed"
#: Synced, but some recipes, mods or profiles were not written (``status.problems`` says which).
REASON_SYNCED_WITH_PROBLEMS: Final = "SyncedWithProblems"
#: ``spec.enabled`` is false: not fetched; the objects it wrote stay.
REASON_DISABLED: Final = "Disabled"
#: The credentials Secret is missing or lacks username/password or token.
REASON_CREDENTIALS_INVALID: Final = "CredentialsInvalid"
#: A namespaced operator does not serve ``spec.targetNamespace``.
REASON_TARGET_NOT_SERVED: Final = "TargetNamespaceNotServed"
#: Not synced yet.
REASON_SYNC_PENDING: Final = "SyncPending"

# -- issue 32: recipe hooks and mods (H4) ---------------------------------------------------
#: Whether the recipe's mods and hooks run (present only when the recipe declares some).
HOOKS_APPLIED: Final = "HooksApplied"
REASON_HOOKS_APPLIED: Final = "Applied"
#: The recipe is not trusted (no trusted RecipeRegistry wrote it as it is): nothing runs.
REASON_HOOKS_UNTRUSTED: Final = "Untrusted"
#: Some mods cannot be resolved (no registry, ConfigMap missing or unreadable) or some entries
#: cannot run here: the message names each; the rest runs.
REASON_MODS_UNRESOLVED: Final = "ModsUnresolved"
#: The hooks make a wrapper too large for a pod spec.
REASON_HOOKS_INVALID: Final = "HooksInvalid"
