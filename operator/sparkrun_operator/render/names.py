"""Names of a workload's children and the length budget that keeps them valid.

Children of InferenceWorkload ``W``:

- JobSet per replica ``i``: ``W-<i>-<rev5>`` (``rev5``: first 5 hex of the serving revision);
- Jobs the JobSet controller creates: ``<jobset>-<rjob>-<jobIndex>`` (``leader`` / ``worker``,
  one Job each, so jobIndex is always 0);
- Pods of those Indexed Jobs: ``<job>-<podIndex>-<random5>``, host name ``<job>-<podIndex>``;
- the JobSet's headless Service, named after the subdomain (= the JobSet name);
- the ClusterIP Service ``W``.

JobSet's validating webhook (v0.12, ``pkg/webhooks/jobset_webhook.go``) requires the longest
generated *pod name*, ``<jobset>-<rjob>-<maxJobIndex>-<maxPodIndex>-abcde``, to be a DNS-1035
label (at most 63 characters, starting with a letter). With at most 1000 replicas (index: 3
digits) and 64 nodes per replica (worker pod index up to 62: 2 digits) that is
``len(W) + len("-999-abcde") + len("-worker-0-62-abcde") = len(W) + 28``, so ``W`` may have at
most 35 characters. ``api/crdgen.py`` enforces the same number at admission; a unit test keeps
the two equal.
"""

from __future__ import annotations

import re
from typing import Final

from sparkrun_operator.api.workload import MAX_NODES
from sparkrun_operator.render import keys

DNS_LABEL_MAX: Final = 63
REVISION_LEN: Final = 10
REVISION_NAME_LEN: Final = 5
#: Highest replica index: ``spec.replicas`` is at most 1000.
MAX_REPLICA_INDEX: Final = 999
#: The random suffix the Job controller appends to pod names (JobSet's webhook checks with it).
POD_SUFFIX: Final = "-abcde"

_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def jobset_name(*, workload: str, replica: int, revision: str) -> str:
    """The JobSet of replica ``replica`` at serving revision ``revision``."""
    if replica < 0:
        raise ValueError(f"replica index must be >= 0, got {replica}")
    if len(revision) < REVISION_NAME_LEN:
        raise ValueError(f"revision {revision!r} is shorter than {REVISION_NAME_LEN} characters")
    return f"{workload}-{replica}-{revision[:REVISION_NAME_LEN]}"


def job_name(*, jobset: str, role: str) -> str:
    """The (single) Job JobSet creates for replicated job ``role``."""
    return f"{jobset}-{role}-0"


def pod_hostname(*, jobset: str, role: str, index: int) -> str:
    """Host name of pod ``index`` of replicated job ``role`` (``<job>-<index>``)."""
    return f"{job_name(jobset=jobset, role=role)}-{index}"


def leader_address(*, jobset: str) -> str:
    """DNS name of the leader pod inside the JobSet's subdomain (resolved via the pod's search path).

    JobSet's headless Service (named after the subdomain, publishing not-ready addresses) makes
    ``<host>.<subdomain>`` resolvable before the leader is Ready, which it only becomes after the
    workers joined.
    """
    return f"{pod_hostname(jobset=jobset, role=keys.ROLE_LEADER, index=0)}.{jobset}"


def service_name(*, workload: str) -> str:
    """The ClusterIP Service selecting the workload's ready leaders."""
    return workload


def longest_child_names(*, workload: str, nodes: int) -> list[str]:
    """The longest names JobSet validates for ``workload`` with ``nodes`` per replica.

    Worst case over every replica index and the 5-character revision prefix.
    """
    jobset = f"{workload}-{MAX_REPLICA_INDEX}-{'f' * REVISION_NAME_LEN}"
    names = [
        jobset,
        job_name(jobset=jobset, role=keys.ROLE_LEADER),
        pod_hostname(jobset=jobset, role=keys.ROLE_LEADER, index=0) + POD_SUFFIX,
    ]
    if nodes > 1:
        names.append(job_name(jobset=jobset, role=keys.ROLE_WORKER))
        names.append(pod_hostname(jobset=jobset, role=keys.ROLE_WORKER, index=nodes - 2) + POD_SUFFIX)
    return names


def _max_workload_name() -> int:
    longest = longest_child_names(workload="", nodes=MAX_NODES)
    return DNS_LABEL_MAX - max(len(n) for n in longest)


#: Longest InferenceWorkload name whose children all stay valid DNS-1035 labels.
WORKLOAD_NAME_MAX: Final = _max_workload_name()


def check_workload_name(*, workload: str, nodes: int) -> str | None:
    """``None`` when every child name of ``workload`` is valid, else a message saying why not."""
    if not _DNS1035.match(workload):
        return (
            f"name {workload!r} must start with a lowercase letter and contain only lowercase letters, "
            "digits and '-' (JobSet names its Jobs and pods after it)"
        )
    for name in longest_child_names(workload=workload, nodes=nodes):
        if len(name) > DNS_LABEL_MAX:
            return (
                f"name {workload!r} is too long: child name {name!r} would have {len(name)} characters "
                f"(at most {DNS_LABEL_MAX}); use at most {WORKLOAD_NAME_MAX} characters"
            )
    return None
