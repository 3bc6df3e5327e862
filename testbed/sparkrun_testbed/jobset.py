"""JobSet controller configuration and webhook registration for an out-of-cluster controller.

The controller always serves its webhooks (there is no flag to turn them off), and its
defaulting matters (Indexed completion mode, success policy, DNS hostnames), so the testbed
serves them on 127.0.0.1 with a certificate from the testbed CA and registers them by URL
instead of by Service. The pod webhooks keep upstream's ``objectSelector`` (from
``config/components/webhook/patches``) so pods that are not JobSet's never depend on the
controller being up. Pure: builds dicts only.
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

_POD_WEBHOOK_SELECTOR = {
    "matchExpressions": [{"key": "jobset.sigs.k8s.io/jobset-name", "operator": "Exists"}],
}
# NB: upstream installs with kustomize namePrefix "jobset-"; keep the real names.
_NAME_PREFIX = "jobset-"


def controller_config(*, webhook_port: int, health_port: int, cert_dir: Path) -> dict[str, Any]:
    """The ``config.jobset.x-k8s.io/v1alpha1`` Configuration for a loopback-only controller.

    Leader election and the internal cert manager (which wants a Secret and a Service) are
    off; metrics are disabled (``bindAddress: "0"``) because they would want TLS files.
    """
    return {
        "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
        "kind": "Configuration",
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "metrics": {"bindAddress": "0"},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
    }


def webhook_configurations(
    upstream: Iterable[Mapping[str, Any]], *, base_url: str, ca_pem: bytes
) -> list[dict[str, Any]]:
    """Upstream's webhook configurations with each ``clientConfig.service`` turned into a URL.

    ``upstream`` is the parsed ``config/components/webhook/manifests.yaml``; ``base_url`` is
    ``https://127.0.0.1:<port>``. Webhooks on pods get JobSet's objectSelector.
    """
    ca_bundle = base64.b64encode(ca_pem).decode()
    result = []
    for doc in upstream:
        config = copy.deepcopy(dict(doc))
        config["metadata"] = {"name": _NAME_PREFIX + config["metadata"]["name"]}
        for hook in config.get("webhooks", []):
            service = hook["clientConfig"].get("service")
            if service is None:
                raise ValueError(f"webhook {hook['name']} has no clientConfig.service to rewrite")
            hook["clientConfig"] = {"url": base_url + service["path"], "caBundle": ca_bundle}
            if any("pods" in rule.get("resources", []) for rule in hook.get("rules", [])):
                hook["objectSelector"] = copy.deepcopy(_POD_WEBHOOK_SELECTOR)
        result.append(config)
    return result
