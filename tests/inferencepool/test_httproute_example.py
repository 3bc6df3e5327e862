"""The HTTPRoute example of docs/install.md ("InferencePool and your gateway") is valid: the doc
includes ``docs/examples/inferencepool-httproute.yaml`` verbatim, and the testbed's apiserver,
with Gateway API's standard CRDs and the InferencePool CRD installed, accepts it in a server-side
dry run (its OpenAPI schema and CEL rules are the lint). A deliberately broken copy is refused,
so the check can fail. The testbed runs no Gateway implementation: the route is validated, not
exercised (docs/install.md says so).
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkrun_testbed.kubeapi import ApiError, KubeApi

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "docs" / "examples" / "inferencepool-httproute.yaml"
INSTALL = REPO / "docs" / "install.md"
SECTION = "## InferencePool and your gateway"


def _yaml_blocks(markdown: str) -> list[str]:
    """The ```yaml blocks of ``markdown`` (fences on their own lines; a linear scan)."""
    blocks: list[str] = []
    current: list[str] | None = None
    for line in markdown.splitlines(keepends=True):
        if current is None and line.rstrip() == "```yaml":
            current = []
        elif current is not None and line.rstrip() == "```":
            blocks.append("".join(current))
            current = None
        elif current is not None:
            current.append(line)
    return blocks


def _dry_run(kube: KubeApi, manifest: dict[str, Any], namespace: str) -> dict[str, Any]:
    """Server-side apply with ``dryRun=All``: validated and defaulted, never stored."""
    path = kube.resource_path(
        manifest["apiVersion"], manifest["kind"], namespace=namespace, name=manifest["metadata"]["name"]
    )
    response = kube.request(
        "PATCH",
        path,
        params={"fieldManager": "docs-lint", "dryRun": "All", "force": "true"},
        content=json.dumps(manifest),
        headers={"Content-Type": "application/apply-patch+yaml"},
    )
    result: dict[str, Any] = response.json()
    return result


def test_the_install_doc_includes_the_example_verbatim() -> None:
    doc = INSTALL.read_text()
    start = doc.index(SECTION)
    end = doc.find("\n## ", start + len(SECTION))
    section = doc[start : end if end >= 0 else None]
    assert EXAMPLE.read_text() in _yaml_blocks(section)
    assert re.search(r"no Gateway implementation", section), "the doc must say the testbed has none"


def test_the_httproute_example_passes_the_apiservers_validation(
    kube: KubeApi, namespace: str, gateway_api_crds: list[str]
) -> None:
    assert "httproutes.gateway.networking.k8s.io" in gateway_api_crds
    docs = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]
    assert [(d["apiVersion"], d["kind"]) for d in docs] == [("gateway.networking.k8s.io/v1", "HTTPRoute")]
    route = docs[0]
    stored = _dry_run(kube, route, namespace)
    backend = stored["spec"]["rules"][0]["backendRefs"][0]
    assert (backend["group"], backend["kind"], backend["name"]) == (
        "inference.networking.k8s.io",
        "InferencePool",
        "team-chat",
    )
    assert stored["metadata"]["namespace"] == namespace
    # a dry run stores nothing
    assert kube.get(route["apiVersion"], "HTTPRoute", route["metadata"]["name"], namespace=namespace) is None


@pytest.mark.parametrize(
    ("breakage", "message"),
    [
        # CEL: a Service backend must name a port (an InferencePool backend need not)
        (lambda r: r["spec"]["rules"][0]["backendRefs"][0].update(group="", kind="Service"), "port"),
        # schema: a route's timeouts are durations
        (lambda r: r["spec"]["rules"][0]["timeouts"].update(request="five minutes"), "request"),
    ],
)
def test_a_broken_copy_is_refused(
    kube: KubeApi, namespace: str, gateway_api_crds: list[str], breakage: Any, message: str
) -> None:
    route = copy.deepcopy(yaml.safe_load(EXAMPLE.read_text()))
    breakage(route)
    with pytest.raises(ApiError) as refused:
        _dry_run(kube, route, namespace)
    assert refused.value.status == 422, refused.value
    assert message in str(refused.value)
