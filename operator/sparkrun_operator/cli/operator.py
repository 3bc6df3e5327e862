"""``sparkrun-k8s operator run``: run the InferenceWorkload, InferenceCluster and Recipe controllers."""

from __future__ import annotations

import argparse
import json
import logging
import os
from typing import Any

from sparkrun_operator import runner
from sparkrun_operator.api import namepolicy
from sparkrun_operator.api.credentials import CredentialEndpoints
from sparkrun_operator.api.namepolicy import NamePolicy
from sparkrun_operator.cli import operator_stop
from sparkrun_operator.controllers.config import DEFAULT_DRIFT_SECONDS, OperatorConfig
from sparkrun_operator.controllers.operator import PEERING_NAME, RunOptions, describe, run
from sparkrun_operator.render import keys, networkpolicy
from sparkrun_operator.render.inferencepool import PickerSettings, PoolSettings
from sparkrun_operator.render.modelcache import DEFAULT_TOOLS_IMAGE
from sparkrun_operator.render.networkpolicy import EnginePolicy
from sparkrun_operator.render.workload import RenderOptions

EPILOG = """\
examples:
  sparkrun-k8s operator run --standalone --namespace team-a    # one replica, one namespace
  sparkrun-k8s operator run --help                      # every option (gateway, caches, pools)

exit codes:
  0  stopped cleanly (SIGTERM)
  2  usage
  130 interrupted (Ctrl-C)
"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``operator`` command to the top-level parser."""
    parser = subparsers.add_parser(
        "operator",
        help="run the operator (controllers for the sparkrun.dev kinds)",
        description="Run the operator: the kopf controllers of the sparkrun.dev kinds (InferenceWorkload,\n"
        "InferenceCluster, ModelCache, InferenceBenchmark, ...), in the cluster (the chart's Deployment)\n"
        "or from a workstation against a kubeconfig (standalone, one namespace or all).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="operator_command", metavar="SUBCOMMAND", required=True)
    operator_stop.register(commands)
    runner = commands.add_parser("run", help="run the controllers until interrupted")
    runner.add_argument(
        "--kubeconfig", default=None, help="kubeconfig file (default: in-cluster, else $KUBECONFIG)"
    )
    runner.add_argument("--context", default=None, help="kubeconfig context")
    scope = runner.add_mutually_exclusive_group()
    scope.add_argument(
        "-n", "--namespace", action="append", default=[], help="serve only this namespace (repeatable)"
    )
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="serve every namespace (default)")
    runner.add_argument(
        "--standalone", action="store_true", help="no peering: for a single replica (no HA) or development"
    )
    runner.add_argument(
        "--priority",
        type=int,
        default=None,
        help="peering priority (default: random, so one replica is active)",
    )
    runner.add_argument(
        "--peering-name", default=PEERING_NAME, help="ClusterKopfPeering object (%(default)s)"
    )
    runner.add_argument(
        "--peering-lifetime",
        type=int,
        default=60,
        help="seconds until a silent replica counts as dead and another takes over (%(default)s)",
    )
    runner.add_argument(
        "--liveness",
        default=os.environ.get("SPARKRUN_OPERATOR_LIVENESS"),
        help="liveness endpoint URL, e.g. http://0.0.0.0:8080/healthz",
    )
    runner.add_argument(
        "--metrics-port", type=int, default=None, help="serve Prometheus /metrics on this port"
    )
    runner.add_argument("--metrics-host", default="0.0.0.0", help="address for /metrics (%(default)s)")
    runner.add_argument(
        "--drift-seconds",
        type=float,
        default=DEFAULT_DRIFT_SECONDS,
        help="reconcile every object at least this often (%(default)s)",
    )
    runner.add_argument(
        "--max-restarts", type=int, default=5, help="JobSet maxRestarts for new replicas (%(default)s)"
    )
    runner.add_argument(
        "--tools-image",
        default=DEFAULT_TOOLS_IMAGE,
        help="image of ModelCache download Jobs (%(default)s)",
    )
    runner.add_argument(
        "--cache-mount-path",
        default=keys.CACHE_MOUNT_PATH,
        help="where model caches are mounted in download and engine pods: HF_HOME (%(default)s)",
    )
    _cache_flags(runner)
    _autoscaling_flags(runner)
    _lane_flags(runner)
    _name_flags(runner)
    _pool_flags(runner)
    runner.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    runner.set_defaults(func=_run)


def _name_flags(runner: argparse.ArgumentParser) -> None:
    """The name policy (issue 26): which model names each namespace may claim."""
    runner.add_argument(
        "--name-prefixes",
        type=namepolicy.flag,
        default=NamePolicy(),
        metavar="JSON",
        help="model names each namespace may claim, by prefix, e.g. "
        '\'{"team-a": ["a-"], "*": []}\' ("*": every namespace not listed; "" allows every name); '
        "a workload serving another name gets Routable=False NameNotAllowed (default {}: any name)",
    )


def _pool_flags(runner: argparse.ArgumentParser) -> None:
    """InferencePools (issue 30): one per workload, and its managed endpoint picker."""
    runner.add_argument(
        "--inference-pools",
        choices=["auto", "off"],
        default="auto",
        help="keep an InferencePool (inference.networking.k8s.io/v1) per workload: auto when the "
        "apiserver serves them (discovered at start), off: none (%(default)s)",
    )
    runner.add_argument(
        "--endpoint-picker",
        type=_endpoint_picker,
        default=PickerSettings(),
        metavar="JSON",
        help="the managed endpoint pickers' image, resources, nodeSelector, tolerations and the "
        'ClusterRole their RoleBinding names, e.g. \'{"image": "...", "clusterRole": '
        '"sparkrun-endpoint-picker", "resources": {...}}\' (default: the chart\'s settings)',
    )


#: ``--endpoint-picker``'s keys and the :class:`PickerSettings` fields they set.
_PICKER_KEYS = {
    "image": "image",
    "resources": "resources",
    "nodeSelector": "node_selector",
    "tolerations": "tolerations",
    "clusterRole": "cluster_role",
}


def _endpoint_picker(raw: str) -> PickerSettings:
    try:
        doc = json.loads(raw)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"not JSON: {error}") from None
    if not isinstance(doc, dict) or set(doc) - set(_PICKER_KEYS):
        raise argparse.ArgumentTypeError(f"an object with some of {sorted(_PICKER_KEYS)}")
    for key in ("image", "clusterRole"):
        if key in doc and (not isinstance(doc[key], str) or not 0 < len(doc[key]) <= 512):
            raise argparse.ArgumentTypeError(f"{key}: a non-empty string")
    selector = doc.get("nodeSelector", {})
    if not isinstance(selector, dict) or not all(isinstance(v, str) for v in selector.values()):
        raise argparse.ArgumentTypeError("nodeSelector: an object of strings")
    tolerations = doc.get("tolerations", [])
    if not isinstance(tolerations, list) or not all(isinstance(t, dict) for t in tolerations):
        raise argparse.ArgumentTypeError("tolerations: a list of objects")
    resources = doc.get("resources", {})
    if not isinstance(resources, dict) or set(resources) - {"requests", "limits"}:
        raise argparse.ArgumentTypeError('resources: an object with "requests" and/or "limits"')
    values: dict[str, Any] = {field: doc[key] for key, field in _PICKER_KEYS.items() if key in doc}
    if "tolerations" in values:
        values["tolerations"] = tuple(values["tolerations"])
    return PickerSettings(**values)


def _lane_flags(runner: argparse.ArgumentParser) -> None:
    """How many passes of each lane run at once, and how long progress settles (ADR 0030)."""
    runner.add_argument(
        "--max-concurrent-passes",
        type=int,
        default=OperatorConfig.max_concurrent_passes,
        help="reconcile passes running at once over all objects (%(default)s)",
    )
    runner.add_argument(
        "--max-concurrent-writes",
        type=int,
        default=OperatorConfig.max_concurrent_writes,
        help="workload API writes in flight at once, both lanes, readiness first (%(default)s)",
    )
    runner.add_argument(
        "--status-settle-seconds",
        type=float,
        default=OperatorConfig.status_settle_seconds,
        help="how long a status change other than readiness settles before it is written (%(default)s)",
    )


def _autoscaling_flags(runner: argparse.ArgumentParser) -> None:
    """What the autoscaler exports for an HPA or KEDA (ADR 0045)."""
    runner.add_argument(
        "--load-metric-workloads",
        type=int,
        default=2000,
        metavar="N",
        help="the most workloads with sparkrun_workload_* series (their state; in autoscaling mode "
        "External their load per replica) at /metrics (%(default)s; later ones get none and "
        "sparkrun_operator_workload_series_refused counts them)",
    )


def _cache_flags(runner: argparse.ArgumentParser) -> None:
    runner.add_argument(
        "--cache-tool-scheduling",
        type=_scheduling,
        default={},
        metavar="JSON",
        help="nodeSelector/tolerations of model_cache.* tool Jobs where no ModelCache says where, e.g. "
        '\'{"nodeSelector": {"pool": "cpu"}, "tolerations": [...]}\'',
    )
    runner.add_argument(
        "--hub-token-secret",
        type=_secret_key,
        default=None,
        metavar="SECRET[/KEY]",
        help="Secret (key 'token' unless given) with the hub token of model_cache.resolve/import/repair",
    )
    runner.add_argument(
        "--credential-endpoints",
        type=_credential_endpoints,
        default=CredentialEndpoints.default(),
        metavar="JSON",
        help="where each credential the operator holds may be sent; elsewhere requests are anonymous "
        '(default \'{"huggingFace": ["https://huggingface.co"]}\'; ADR 0040)',
    )
    runner.add_argument(
        "--executor-namespace",
        default=None,
        metavar="NAMESPACE",
        help="the operator's own namespace, where its DaemonJob executor keeps its Lease (default: "
        "$POD_NAMESPACE, else the in-cluster service account's namespace, else the first --namespace, "
        "else sparkrun-system); the shim's /v1/reservations reads Leases there",
    )
    runner.add_argument(
        "--gateway-url",
        default=None,
        metavar="URL",
        help="in-cluster base URL of the gateway (InferenceBenchmark target.via: Gateway)",
    )
    runner.add_argument(
        "--engine-network-policy",
        type=_engine_policy,
        default=None,
        metavar="JSON",
        help="make one NetworkPolicy per workload letting only its own pods, the release's gateway, "
        "operator and shim, the namespace's benchmark runners and these peers reach its engines, e.g. "
        '\'{"releaseNamespace": "sparkrun-system", "releaseLabels": {"app.kubernetes.io/instance": '
        '"sparkrun"}, "extraIngress": [...], "egress": null}\' (render/networkpolicy.py; default: none)',
    )
    runner.add_argument(
        "--workload-scheduling",
        type=_scheduling,
        default={},
        metavar="JSON",
        help="nodeSelector/tolerations of the workloads workloads.run and benchmarks.run launch",
    )
    runner.add_argument(
        "--benchmark-via",
        default="Service",
        choices=["Service", "Endpoint", "Gateway"],
        help="how benchmarks.run reaches the workload (InferenceBenchmark target.via)",
    )
    runner.add_argument(
        "--benchmark-scheduling",
        type=_scheduling,
        default={},
        metavar="JSON",
        help="nodeSelector/tolerations of the benchmark pods benchmarks.run starts",
    )
    runner.add_argument(
        "--benchmark-hf-endpoint",
        default=None,
        metavar="URL",
        help="Hub the benchmark tokenizers of benchmarks.run come from (default: the tools image's)",
    )


def _scheduling(raw: str) -> dict[str, Any]:
    try:
        doc = json.loads(raw)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"not JSON: {error}") from None
    if not isinstance(doc, dict) or set(doc) - {"nodeSelector", "tolerations"}:
        raise argparse.ArgumentTypeError('an object with "nodeSelector" and/or "tolerations"')
    if not isinstance(doc.get("nodeSelector", {}), dict) or not isinstance(doc.get("tolerations", []), list):
        raise argparse.ArgumentTypeError("nodeSelector is an object, tolerations a list")
    return doc


def _credential_endpoints(raw: str) -> CredentialEndpoints:
    try:
        return CredentialEndpoints.parse(json.loads(raw))
    except ValueError as error:  # NB: json.JSONDecodeError is a ValueError
        raise argparse.ArgumentTypeError(str(error)) from None


def _engine_policy(raw: str) -> EnginePolicy:
    try:
        return networkpolicy.parse(json.loads(raw))
    except ValueError as error:  # NB: json.JSONDecodeError is a ValueError
        raise argparse.ArgumentTypeError(str(error)) from None


def _secret_key(raw: str) -> tuple[str, str]:
    name, _, key = raw.partition("/")
    if not name or "/" in key:
        raise argparse.ArgumentTypeError("SECRET or SECRET/KEY")
    return name, key or "token"


#: The namespace of an in-cluster pod's service account (the kubelet mounts it).
SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def executor_namespace(args: argparse.Namespace) -> str:
    """``--executor-namespace``, else where this pod runs, else the first served namespace."""
    if args.executor_namespace:
        return str(args.executor_namespace)
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    try:
        with open(SERVICE_ACCOUNT_NAMESPACE, encoding="utf-8") as handle:
            found = handle.read(254).strip()
    except OSError:
        found = ""
    if found:
        return found
    return str(args.namespace[0]) if args.namespace else "sparkrun-system"


def _run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not args.verbose:
        # kopf logs every handler and index call at INFO: one line per pod event.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    options = RunOptions(
        kubeconfig=args.kubeconfig,
        context=args.context,
        namespaces=tuple(args.namespace),
        standalone=args.standalone,
        priority=args.priority,
        peering_name=args.peering_name,
        peering_lifetime=args.peering_lifetime,
        liveness_endpoint=args.liveness,
        metrics_host=args.metrics_host,
        metrics_port=args.metrics_port,
        config=OperatorConfig(
            drift_seconds=args.drift_seconds,
            render=RenderOptions(
                max_restarts=args.max_restarts,
                tools_image=args.tools_image,
                cache_mount_path=args.cache_mount_path,
            ),
            max_concurrent_passes=args.max_concurrent_passes,
            cache_tool_scheduling=args.cache_tool_scheduling,
            hub_token_secret=args.hub_token_secret,
            credential_endpoints=args.credential_endpoints,
            gateway_url=args.gateway_url,
            workload_scheduling=args.workload_scheduling,
            benchmark_via=args.benchmark_via,
            benchmark_scheduling=args.benchmark_scheduling,
            benchmark_hf_endpoint=args.benchmark_hf_endpoint,
            executor_namespace=executor_namespace(args),
            served_namespaces=tuple(args.namespace),
            engine_policy=args.engine_network_policy,
            name_policy=args.name_prefixes,
            inference_pools=PoolSettings(mode=args.inference_pools, picker=args.endpoint_picker),
            load_metric_workloads=max(0, args.load_metric_workloads),
            status_settle_seconds=args.status_settle_seconds,
            max_concurrent_writes=args.max_concurrent_writes,
            api_connections=max(32, 2 * args.max_concurrent_passes + args.max_concurrent_writes),
        ),
    )
    for line in describe(options):
        logging.getLogger("sparkrun.operator").info("%s", line)
    try:
        runner.run(run(options))
    except KeyboardInterrupt:
        return 130
    return 0
