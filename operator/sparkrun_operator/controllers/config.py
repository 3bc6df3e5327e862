"""The operator's settings (its command-line flags), one frozen value per process."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from sparkrun_operator.api.credentials import CredentialEndpoints
from sparkrun_operator.api.namepolicy import NamePolicy
from sparkrun_operator.render.inferencepool import PoolSettings
from sparkrun_operator.render.networkpolicy import EnginePolicy
from sparkrun_operator.render.workload import RenderOptions

DEFAULT_DRIFT_SECONDS: Final = 300.0


@dataclass(frozen=True, kw_only=True)
class OperatorConfig:
    """Operator-wide settings (CLI flags)."""

    #: How often every object is reconciled even without events (drift repair).
    drift_seconds: float = DEFAULT_DRIFT_SECONDS
    #: Least time between two passes of one object (bursts of child events coalesce).
    debounce_seconds: float = 0.5
    #: How long to wait for the watch cache to show the operator's own writes.
    expectation_seconds: float = 10.0
    render: RenderOptions = field(default_factory=RenderOptions)
    #: Timeout of calls to engines (``/is_sleeping``, ``/sleep``, ``/wake_up``).
    engine_timeout: float = 10.0
    #: Passes running at once over all objects. Thousands of objects changing together (an
    #: operator restart, a mass apply) would otherwise queue thousands of requests at the
    #: apiserver, time out, and retry in a storm.
    max_concurrent_passes: int = 16
    #: API writes of the workload controller in flight at once, both lanes together, served
    #: readiness first, then actions, then progress reports (ADR 0030).
    #: A quarter of them only readiness writes may take (actions are slow at a busy apiserver).
    max_concurrent_writes: int = 32
    #: How long the status lane lets a progress-only status (no readiness change: scheduling,
    #: the startup timeline) settle, so that a pod's next steps coalesce into one write.
    #: Readiness changes are written at once (ADR 0030).
    status_settle_seconds: float = 1.0
    #: TLS connections of the operator's client to the apiserver.
    api_connections: int = 32
    #: ``nodeSelector``/``tolerations`` of ``model_cache.*`` tool Jobs at a location that no
    #: ModelCache places (``--cache-tool-scheduling``).
    cache_tool_scheduling: dict[str, Any] = field(default_factory=dict)
    #: ``(Secret, key)`` of the hub token of ``model_cache.resolve``/``import``/``repair``.
    hub_token_secret: tuple[str, str] | None = None
    #: ``--credential-endpoints``: where each credential the operator holds may go (ADR 0040).
    credential_endpoints: CredentialEndpoints = field(default_factory=CredentialEndpoints.default)
    #: In-cluster base URL of the gateway (``--gateway-url``): InferenceBenchmark ``via: Gateway``.
    gateway_url: str | None = None
    #: ``--workload-scheduling``, ``--benchmark-via``, ``--benchmark-scheduling``,
    #: ``--benchmark-hf-endpoint``: see ``ops.settings.Settings``.
    workload_scheduling: dict[str, Any] = field(default_factory=dict)
    benchmark_via: str = "Service"
    benchmark_scheduling: dict[str, Any] = field(default_factory=dict)
    benchmark_hf_endpoint: str | None = None
    #: The operator's own namespace (``--executor-namespace``): its DaemonJob executor's Lease.
    executor_namespace: str = "sparkrun-system"
    #: The namespaces kopf serves (``--namespace``; empty: every namespace): the DaemonJob
    #: executor's GPU occupancy lists pods only there (no cluster-wide pod list).
    served_namespaces: tuple[str, ...] = ()
    #: ``--engine-network-policy``: who may reach engine pods besides their own workload; the
    #: operator then makes one NetworkPolicy per workload (``None``: none).
    engine_policy: EnginePolicy | None = None
    #: ``--name-prefixes``: which model names each namespace may claim (api/namepolicy.py).
    name_policy: NamePolicy = field(default_factory=NamePolicy)
    #: ``--load-metric-workloads``: the most workloads with ``sparkrun_workload_*`` series (their
    #: state, and ``sparkrun_workload_load_per_replica`` in External autoscaling mode); later ones
    #: get none (``sparkrun_operator_workload_series_refused`` counts them).
    load_metric_workloads: int = 2000
    #: ``--inference-pools`` and ``--endpoint-picker`` (issue 30): whether the operator keeps an
    #: InferencePool (and a managed endpoint picker) per workload; ``served`` is decided once at
    #: start from the apiserver's discovery (``controllers/inferencepools.py``).
    inference_pools: PoolSettings = field(default_factory=PoolSettings)
