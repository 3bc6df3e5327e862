"""Executors of the enabled daemon operations, one module per family.

:data:`EXECUTORS` maps every enabled operation of the catalog to its executor (a unit test
checks the two sets are equal). Each module's docstring says how its operations map onto
Kubernetes resources.
"""

from __future__ import annotations

from sparkrun_operator.ops.context import Executor
from sparkrun_operator.ops.executors import (
    benchmarks,
    clusters,
    diagnostics,
    gateway_deployment,
    kubernetes,
    modelcache,
    proxy,
    recipes,
    workloads,
)

__all__ = ["EXECUTORS"]

EXECUTORS: dict[str, Executor] = {
    **clusters.EXECUTORS,
    **workloads.EXECUTORS,
    **diagnostics.EXECUTORS,
    **proxy.EXECUTORS,
    **gateway_deployment.EXECUTORS,
    **kubernetes.EXECUTORS,
    **recipes.EXECUTORS,
    **modelcache.EXECUTORS,
    **benchmarks.EXECUTORS,
}
