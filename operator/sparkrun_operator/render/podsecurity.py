"""The securityContext of every pod the operator creates (``docs/security.md``, "Pod Security").

Pure. Two levels:

- **tools pods** (download, tool and benchmark Jobs: the tools image, ``USER 65532:65532``)
  meet Pod Security ``restricted``: non-root uid and gid 65532 (set, not only required, so an
  operator-configured image without a numeric ``USER`` runs too), no privilege escalation,
  every capability dropped, seccomp ``RuntimeDefault``, no ServiceAccount token. A claim they
  write is given group 65532 (``fsGroup``, changed only when its root does not have it already,
  so a large cache is not walked on every Job).
- **engine pods** (the JobSets' leader and workers) meet ``baseline`` and every ``restricted``
  rule but one: the upstream vLLM image runs as root, so ``runAsNonRoot`` is not set unless the
  workload's ``spec.pod`` asks (with a user its image has, e.g. the project's ``sparkrun-vllm``
  image's 65532). No ServiceAccount token unless ``spec.pod`` asks for one.

:func:`engine_pod_fields` and :func:`engine_container_context` merge ``spec.pod`` over the
defaults field by field: each field the workload sets replaces the default of that field.
"""

from __future__ import annotations

from typing import Any, Final

from sparkrun_operator.api.podoverride import ContainerSecurityOverride, PodOverride

#: The tools image's user and group (``runtime-images/tools/Dockerfile``: ``USER 65532:65532``).
TOOLS_UID: Final = 65532
TOOLS_GID: Final = 65532
RUNTIME_DEFAULT: Final = {"type": "RuntimeDefault"}


def restricted_container() -> dict[str, Any]:
    """A container's securityContext under ``restricted`` (the pod sets user and seccomp)."""
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def tools_pod_context(*, writes_volume: bool = False) -> dict[str, Any]:
    """The pod securityContext of a tools-image pod; ``writes_volume``: it writes a claim."""
    context: dict[str, Any] = {"runAsNonRoot": True, "runAsUser": TOOLS_UID, "runAsGroup": TOOLS_GID}
    if writes_volume:
        context["fsGroup"] = TOOLS_GID
        context["fsGroupChangePolicy"] = "OnRootMismatch"
    context["seccompProfile"] = dict(RUNTIME_DEFAULT)
    return context


def engine_pod_fields(override: PodOverride | None) -> dict[str, Any]:
    """The engine pod spec's ``serviceAccountName``, ``automountServiceAccountToken`` and
    ``securityContext``: the defaults with ``spec.pod`` over them."""
    fields: dict[str, Any] = {}
    if override is not None and override.service_account_name:
        fields["serviceAccountName"] = override.service_account_name
    token = override.automount_service_account_token if override is not None else None
    fields["automountServiceAccountToken"] = bool(token)
    context: dict[str, Any] = {"seccompProfile": dict(RUNTIME_DEFAULT)}
    if override is not None and override.security_context is not None:
        wire = override.security_context.to_wire()
        if not wire.get("supplementalGroups"):
            wire.pop("supplementalGroups", None)
        context.update(wire)
    fields["securityContext"] = dict(sorted(context.items()))
    return fields


def engine_container_context(override: PodOverride | None) -> dict[str, Any]:
    """The securityContext of the engine containers (engine and wait-for-leader init)."""
    context = restricted_container()
    sc: ContainerSecurityOverride | None = override.container_security_context if override else None
    if sc is None:
        return context
    wire = sc.to_wire()
    caps = wire.pop("capabilities", None)
    context.update(wire)
    if caps is not None:
        merged = dict(context["capabilities"])
        for key in ("add", "drop"):
            if caps.get(key):
                merged[key] = list(caps[key])
        context["capabilities"] = dict(sorted(merged.items()))
    return dict(sorted(context.items()))


def engine_metadata(override: PodOverride | None, labels: dict[str, str]) -> dict[str, Any]:
    """The engine pod template's metadata: ``spec.pod``'s labels under the operator's (which win;
    admission refuses the operator's keys anyway) and its annotations."""
    meta: dict[str, Any] = {"labels": labels}
    if override is None:
        return meta
    if override.labels:
        meta["labels"] = {**dict(sorted(override.labels.items())), **labels}
    if override.annotations:
        meta["annotations"] = dict(sorted(override.annotations.items()))
    return meta
