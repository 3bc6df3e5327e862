"""Where kopf posts the Events of a cluster-scoped object (an InferenceCluster's drain steps):
kopf takes the login's ``default_namespace``, else ``default``. A namespaced operator
(``watchNamespaces``) has the right to create Events only in the namespaces it serves, so its
login names its own namespace; a cluster-wide one keeps Kubernetes' ``default``."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from sparkrun_operator.controllers import operator
from sparkrun_operator.controllers.config import OperatorConfig


class _Configuration:
    host = "https://127.0.0.1:6443"
    ssl_ca_cert = None
    verify_ssl = True
    cert_file = None
    key_file = None

    async def get_api_key_with_prefix(self, name: str) -> str:
        return "Bearer t0ken"


def _login(config: OperatorConfig) -> Any:
    registry = operator.build_registry(config)
    (handler,) = [h for h in registry._activities.get_all_handlers() if h.id == "login"]
    kube = SimpleNamespace(api=SimpleNamespace(configuration=_Configuration()))
    memo = SimpleNamespace(ctx=SimpleNamespace(kube=kube))
    return asyncio.run(handler.fn(memo=memo))


def test_a_namespaced_operator_posts_cluster_events_in_its_own_namespace() -> None:
    served = _login(OperatorConfig(served_namespaces=("team-a",), executor_namespace="sparkrun-x"))
    assert served.default_namespace == "sparkrun-x"
    assert served.token == "t0ken"
    assert _login(OperatorConfig(executor_namespace="sparkrun-x")).default_namespace is None
