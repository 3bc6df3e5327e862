"""``sparkrun-k8s operator stop-replicas``: scale the operator's Deployment to zero and wait until
its pods are gone (the chart's ``pre-delete`` hook runs it on ``helm uninstall``).

Helm deletes a release's Deployments and, right after, its RBAC and ServiceAccounts, while the
pods are still stopping: an operator stopping then can no longer withdraw from its peering or
release its daemon-job executor Leases (they would stay behind, one per namespace that had
jobs). Stopping the replicas first, while their RBAC still exists, lets each one shut down
cleanly: running jobs are cancelled, Leases released, the peering entry removed.

It never fails an uninstall for a reason that is not a usage error: a missing Deployment is
"nothing to stop", and pods still there at ``--timeout`` are reported and left to Helm.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from sparkrun_operator.k8s import errors
from sparkrun_operator.k8s.client import Kube
from sparkrun_operator.k8s.resources import DEPLOYMENTS, PODS

FIELD_MANAGER = "sparkrun-operator-stop"
POLL_SECONDS = 1.0


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``stop-replicas`` under ``sparkrun-k8s operator``."""
    parser = commands.add_parser(
        "stop-replicas",
        help="scale the operator Deployment to 0 and wait for its pods to go (before helm uninstall)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--namespace", required=True, help="namespace of the operator Deployment")
    parser.add_argument("--deployment", required=True, help="name of the operator Deployment")
    parser.add_argument(
        "--timeout", type=float, default=90.0, help="seconds to wait for the pods to go (%(default)s)"
    )
    parser.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: in-cluster)")
    parser.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    if args.timeout <= 0:
        print("--timeout must be positive")
        return 2
    return asyncio.run(_stop(args))


def _selector(deployment: dict[str, Any]) -> str:
    labels = ((deployment.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items()))


async def _stop(args: argparse.Namespace) -> int:
    kube = await Kube.connect(field_manager=FIELD_MANAGER, kubeconfig=args.kubeconfig)
    try:
        await stop_replicas(kube, args.namespace, args.deployment, wait_seconds=args.timeout)
    except errors.KubeError as error:
        print(f"could not stop the operator replicas: {error}; Helm deletes them itself")
    finally:
        await kube.close()
    return 0


async def stop_replicas(kube: Kube, namespace: str, name: str, *, wait_seconds: float) -> int:
    """Scale ``namespace/name`` to 0; wait up to ``wait_seconds`` for its pods to go.

    Returns how many pods were left at the end (-1: no such Deployment)."""
    deployment = await kube.get(DEPLOYMENTS, name, namespace)
    if deployment is None:
        print(f"Deployment {namespace}/{name} not found: nothing to stop")
        return -1
    selector = _selector(deployment)
    if not selector:
        print(f"Deployment {namespace}/{name} has no matchLabels selector: not waiting for its pods")
    was = int((deployment.get("spec") or {}).get("replicas", 1) or 0)
    await kube.merge_patch(DEPLOYMENTS, name, {"spec": {"replicas": 0}}, namespace, subresource="scale")
    print(f"scaled Deployment {namespace}/{name} from {was} to 0 replicas")
    if not selector:
        return 0
    started = time.monotonic()
    while True:
        pods = await kube.list(PODS, namespace, label_selector=selector)
        if not pods:
            print(f"every operator pod is gone after {time.monotonic() - started:.1f} s")
            return 0
        if time.monotonic() - started >= wait_seconds:
            names = ", ".join(sorted(str(p["metadata"]["name"]) for p in pods))
            print(
                f"{len(pods)} operator pod(s) still there after {wait_seconds:.0f} s ({names}): left to Helm"
            )
            return len(pods)
        await asyncio.sleep(POLL_SECONDS)
