"""Whether the apiserver serves a resource: one read of its group version's discovery document.

Used where a component watches a resource only some clusters install (the operator's and the
gateway's InferencePools, issue 30): a watch of a resource the apiserver does not serve fails,
so they ask first, once at start.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from sparkrun_operator.k8s import errors
from sparkrun_operator.k8s.client import Kube
from sparkrun_operator.k8s.resources import Resource

#: The most entries of a discovery document's ``resources`` looked at.
MAX_RESOURCES: Final = 256


async def serves(kube: Kube, resource: Resource) -> bool:
    """Whether the apiserver serves ``resource`` (its plural in its group and version): one
    discovery GET; a group version it does not serve (404), or discovery refused (403), is
    ``False``. Other errors (the apiserver unreachable) are raised."""
    base = f"/apis/{resource.group}/{resource.version}" if resource.group else f"/api/{resource.version}"
    try:
        found = await kube.request("GET", base)
    except (errors.KubeNotFound, errors.KubeForbidden):
        return False
    listed = found.get("resources") if isinstance(found, Mapping) else None
    if not isinstance(listed, list):
        return False
    return any(isinstance(r, Mapping) and r.get("name") == resource.plural for r in listed[:MAX_RESOURCES])
