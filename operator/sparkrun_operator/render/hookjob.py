"""The ``post_commands`` Job of a trusted recipe (issue 32): sparkrun runs them on its control
machine once the server answers; here a Job in the workload's namespace, once per serving
revision after it is Ready.

The tools image, Pod Security ``restricted`` (``render/podsecurity.py``), no ServiceAccount token,
``backoffLimit: 0`` (fail-fast, as sparkrun: a failed command is reported, not retried), an
``activeDeadlineSeconds`` of the commands' timeouts (bounded), owned by the workload and named by
the revision (``<workload>-post-<rev10>``). The commands run by the same wrapper as the pods'
hooks (``render/hooks.py``), with ``SPARKRUN_BASE_URL`` the workload's Service. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from sparkrun_operator.render import hooks, keys, podsecurity
from sparkrun_operator.render.workload import Owner

#: The container's name, and the Job's deadline bounds (seconds).
CONTAINER: Final = "post-commands"
MIN_DEADLINE_S: Final = 60
MAX_DEADLINE_S: Final = 6 * 3600
TTL_S: Final = 7 * 24 * 3600


def job_name(*, workload: str, revision: str) -> str:
    """``<workload>-post-<revision>``: at most 35 + 6 + 10 characters, a DNS label."""
    return f"{workload}-post-{revision}"


def deadline(commands: Sequence[hooks.HookStep]) -> int:
    """The Job's ``activeDeadlineSeconds``: the commands' timeouts (0 counts as the default) plus
    a minute, within ``MIN_DEADLINE_S..MAX_DEADLINE_S``."""
    total = sum(s.timeout_s or hooks.DEFAULT_TIMEOUT_S for s in commands) + 60
    return max(MIN_DEADLINE_S, min(MAX_DEADLINE_S, total))


def render_post_commands_job(
    *,
    namespace: str,
    workload: str,
    revision: str,
    commands: Sequence[hooks.HookStep],
    env: Sequence[tuple[str, str]],
    image: str,
    owner: Owner | None = None,
    node_selector: Mapping[str, str] | None = None,
    tolerations: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The Job running ``commands`` in order, fail-fast, placed like the workload's pods (its
    ``nodeSelector`` and tolerations; no GPU)."""
    plan = hooks.HookPlan(pre_exec=tuple(commands), env=tuple(env))
    script = hooks.script(plan, head=False, then="exit 0", hook="post_commands", stage="postCommands")
    labels = {
        keys.LABEL_MANAGED_BY: keys.MANAGED_BY,
        keys.LABEL_HOOK_WORKLOAD: workload,
        keys.LABEL_REVISION: revision,
    }
    metadata: dict[str, Any] = {
        "name": job_name(workload=workload, revision=revision),
        "namespace": namespace,
        "labels": labels,
    }
    if owner is not None:
        metadata["ownerReferences"] = [owner.reference()]
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,
        "securityContext": podsecurity.tools_pod_context(),
        "containers": [
            {
                "name": CONTAINER,
                "image": image,
                "command": ["/bin/sh", "-c"],
                "args": [script],
                "securityContext": podsecurity.restricted_container(),
                "terminationMessagePolicy": "FallbackToLogsOnError",
            }
        ],
    }
    if node_selector:
        pod["nodeSelector"] = dict(sorted(node_selector.items()))
    if tolerations:
        pod["tolerations"] = [dict(t) for t in tolerations]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": deadline(commands),
            "ttlSecondsAfterFinished": TTL_S,
            "template": {"metadata": {"labels": labels}, "spec": pod},
        },
    }
