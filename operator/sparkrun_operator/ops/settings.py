"""The daemon API's settings: the namespace it serves and the operator-wide choices its
operations read (images, scheduling, credentials' endpoints), one frozen value per process."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sparkrun_operator.api.credentials import CredentialEndpoints
from sparkrun_operator.api.namepolicy import NamePolicy
from sparkrun_operator.render import keys
from sparkrun_operator.render.modelcache import DEFAULT_TOOLS_IMAGE


@dataclass(frozen=True)
class Settings:
    """Where and how operations act; one per shim/operator process."""

    #: Namespace of DaemonJobs and of the workloads, recipes and aliases the API manages.
    namespace: str = "sparkrun-system"
    #: Namespaces whose pods count in the GPU occupancy of nodes (the chart's watchNamespaces
    #: and :attr:`namespace`), each listed on its own so that no cluster-wide pod list is needed;
    #: empty: every namespace (one list).
    pod_namespaces: tuple[str, ...] = ()
    #: Which model names each namespace may claim (``--name-prefixes``, the chart's
    #: ``tenancy.names.prefixes``): ``proxy.models`` lists only names the gateway routes.
    name_policy: NamePolicy = field(default_factory=NamePolicy)
    #: The gateway's Service (``proxy.*`` operations read its state).
    gateway_service: str = keys.GATEWAY_NAME
    gateway_namespace: str | None = None
    gateway_port: int = 8080
    #: Name of the ConfigMap holding gateway model aliases (ADR 0006).
    aliases_config_map: str = keys.GATEWAY_ALIASES_CONFIG_MAP
    #: How long ``workloads.run``/``ensure_ready`` wait for Ready by default.
    ready_timeout: float = 1800.0
    #: Default prompt timeout (the daemon's 300 s).
    prompt_timeout: float = 300.0
    #: Bound of one inline query.
    query_timeout: float = 30.0
    #: Poll interval while waiting on resources.
    poll_interval: float = 1.0
    #: Image and cache mount path of the ``model_cache.*`` tool Jobs (those of ModelCaches).
    tools_image: str = DEFAULT_TOOLS_IMAGE
    cache_mount_path: str = keys.CACHE_MOUNT_PATH
    #: ``nodeSelector``/``tolerations`` of tool Jobs at a location no ModelCache places.
    cache_tool_scheduling: Mapping[str, Any] = field(default_factory=dict)
    #: Bound of one tool Job; how long its pod may fail to start before the operation fails.
    cache_tool_timeout: float = 900.0
    cache_tool_start_seconds: float = 120.0
    #: ``(Secret, key)`` of the hub token ``model_cache.resolve``/``import``/``repair`` use
    #: (the daemon's "server-side HF credentials"); ``None``: anonymous.
    hub_token_secret: tuple[str, str] | None = None
    #: Where each credential the operator holds may be sent (``--credential-endpoints``; default
    #: the public Hub only): any other endpoint gets anonymous requests (ADR 0040).
    credential_endpoints: CredentialEndpoints = field(default_factory=CredentialEndpoints.default)
    #: ``model_cache.reconcile``: how long since a claim was last seen in use before it may be
    #: released, plus the clock-skew allowance between the operator and the apiserver.
    claim_min_age: float = 600.0
    clock_skew: float = 120.0
    #: ``nodeSelector``/``tolerations`` of the InferenceWorkloads ``workloads.run`` and
    #: ``benchmarks.run`` launch (a GPU pool); empty: wherever the scheduler puts them.
    workload_scheduling: Mapping[str, Any] = field(default_factory=dict)
    #: ``benchmarks.run``: how the benchmark reaches the workload (``target.via``), where its pods
    #: run, and the Hub its tokenizer comes from (``None``: the tools image's ``HF_ENDPOINT``).
    benchmark_via: str = "Service"
    benchmark_scheduling: Mapping[str, Any] = field(default_factory=dict)
    benchmark_hf_endpoint: str | None = None

    @property
    def gateway_ns(self) -> str:
        return self.gateway_namespace or self.namespace
