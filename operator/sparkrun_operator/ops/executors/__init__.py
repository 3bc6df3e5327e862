"""Executors of the enabled daemon operations, one module per family.

:data:`EXECUTORS` maps every enabled operation of the catalog to its executor (a unit test
checks the two sets are equal). Each module's docstring says how its operations map onto
Kubernetes resources.
:data:`ARGUMENT_CHECKS` holds the pure argument checks some job operations have (every key is
an enabled job operation; a unit test checks it).
Importing this package also fills ``ops.ifmatch.TABLE`` (the operations that take ``If-Match``,
:mod:`.targets`).
"""

from __future__ import annotations

from sparkrun_operator.ops.executors import (
    benchmarks,
    clusters,
    diagnostics,
    drain,
    gateway_deployment,
    kubernetes,
    modelcache,
    objects,
    ownership,
    proxy,
    realize,
    recipes,
    registries,
    rollout,
    targets,  # noqa: F401  (registers the If-Match targets, ops/ifmatch.py)
    workloads,
)
from sparkrun_operator.ops.invocation import ArgumentCheck, Executor

__all__ = ["ARGUMENT_CHECKS", "EXECUTORS"]

EXECUTORS: dict[str, Executor] = {
    **clusters.EXECUTORS,
    **workloads.EXECUTORS,
    **diagnostics.EXECUTORS,
    **proxy.EXECUTORS,
    **gateway_deployment.EXECUTORS,
    **kubernetes.EXECUTORS,
    **recipes.EXECUTORS,
    **registries.EXECUTORS,
    **realize.EXECUTORS,
    **modelcache.EXECUTORS,
    **benchmarks.EXECUTORS,
    **rollout.EXECUTORS,
    **objects.EXECUTORS,
    **ownership.EXECUTORS,
    **drain.EXECUTORS,
}

#: The job operations whose arguments the daemon API checks at submission (422 before the 202).
ARGUMENT_CHECKS: dict[str, ArgumentCheck] = {
    **workloads.CHECKS,
    **modelcache.CHECKS,
    **benchmarks.CHECKS,
    **recipes.CHECKS,
    **registries.CHECKS,
    **realize.CHECKS,
}
