"""``spec.pod`` of an InferenceWorkload: what its author may set on the engine pods (and only on
them), in an allowed subset of the Kubernetes fields.

The operator renders engine pods that meet Pod Security ``baseline`` and as much of
``restricted`` as vLLM allows (``render/podsecurity.py``); this override is how a workload asks
for the rest (a non-root user its image has, a service account, labels a platform's tooling
reads). Only the fields listed here exist: no ``privileged``, no host namespaces, no volumes.
What is admitted beyond that is the namespace's Pod Security level's decision (its
``pod-security.kubernetes.io/enforce`` label), and a service account other than ``default``
the chart's admission policy's (``templates/workload-pod-admission.yaml``).

Label and annotation keys under the operator's, JobSet's, Kueue's and Kubernetes' own prefixes
are refused (``sparkrun.dev``, ``kubernetes.io``, ``k8s.io``, ``x-k8s.io`` and their
subdomains, and the Job controller's ``job-name`` / ``controller-uid``): the operator, the
gateway and the controllers select pods by them.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import ConfigDict, Field

from sparkrun_operator.api import bounds, cel
from sparkrun_operator.api.meta import DNS_SUBDOMAIN, KubeModel

#: Highest uid/gid Kubernetes accepts (``int32``).
MAX_ID: Final = 2147483647
#: Label and annotation key families the pod override may not use (prefixes and their subdomains).
RESERVED_DOMAINS: Final = ("sparkrun.dev", "kubernetes.io", "k8s.io", "x-k8s.io")
#: Unprefixed keys the Job controller sets on its pods.
RESERVED_NAMES: Final = ("job-name", "controller-uid")
#: Annotations under a reserved domain that only tune cluster tooling, so are allowed.
ALLOWED_ANNOTATIONS: Final = (
    "cluster-autoscaler.kubernetes.io/safe-to-evict",
    "kubectl.kubernetes.io/default-container",
)

Capability = Annotated[str, Field(max_length=bounds.CAPABILITY_MAX_LENGTH, pattern=r"^[A-Z][A-Z_]{0,63}$")]
Id = Annotated[int, Field(ge=0, le=MAX_ID)]
#: A label value Kubernetes accepts (empty, or alphanumerics around ``-_.``); bounded, no nested
#: repetition (no backtracking beyond the 63 characters).
LabelValue = Annotated[
    str,
    Field(
        max_length=bounds.LABEL_VALUE_MAX_LENGTH,
        pattern=r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$",
    ),
]
#: A label or annotation key Kubernetes accepts: an optional DNS-subdomain prefix and ``/``, then a
#: name of 1-63 characters (checked in CEL after the key's length, so never over a long key).
KEY_FORMAT: Final = (
    r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?" r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)


def _reserved(key: str) -> str:
    """CEL: ``key`` (a map key variable) is under a reserved domain or a reserved name."""
    domains = [f"{key}.startsWith('{d}/') || {key}.contains('.{d}/')" for d in RESERVED_DOMAINS]
    names = [f"{key} == '{n}'" for n in RESERVED_NAMES]
    return "(" + " || ".join(domains + names) + ")"


def _keys_rule(what: str, allowed: tuple[str, ...] = ()) -> dict[str, Any]:
    """``json_schema_extra`` of a label or annotation map: bounded keys, none reserved."""
    exempt = "".join(f" || k == '{a}'" for a in allowed)
    return {
        "maxProperties": bounds.POD_METADATA_MAX_ENTRIES,
        **cel.rules(
            cel.rule(
                f"self.all(k, k.size() <= {bounds.LABEL_KEY_MAX_LENGTH})",
                f"keys may not be longer than {bounds.LABEL_KEY_MAX_LENGTH} characters",
            ),
            cel.rule(
                f"self.all(k, k.size() > {bounds.LABEL_KEY_MAX_LENGTH} || k.matches('{KEY_FORMAT}'))",
                "keys are an optional DNS subdomain and '/', then 1-63 letters, digits, '-', '_' or '.', "
                "starting and ending with a letter or digit",
            ),
            cel.rule(
                f"self.all(k, !{_reserved('k')}{exempt})",
                f"{what} keys under sparkrun.dev, kubernetes.io, k8s.io or x-k8s.io (or a subdomain of "
                "them), job-name and controller-uid are the operator's and Kubernetes': choose another key",
                reason="FieldValueForbidden",
            ),
        ),
    }


class SeccompProfile(KubeModel):
    """A seccomp profile (``securityContext.seccompProfile``)."""

    model_config = ConfigDict(
        json_schema_extra=cel.rules(
            cel.rule(
                "(self.type == 'Localhost') == has(self.localhostProfile)",
                "localhostProfile is set exactly when type is Localhost",
                field_path=".localhostProfile",
            )
        )
    )

    type: Literal["RuntimeDefault", "Localhost", "Unconfined"] = Field(
        description="RuntimeDefault (the operator's default), Localhost (with localhostProfile) or "
        "Unconfined (refused by Pod Security baseline and restricted)."
    )
    localhost_profile: str | None = Field(
        default=None,
        description="The profile's path under the kubelet's seccomp directory (type Localhost only).",
        min_length=1,
        max_length=bounds.PROFILE_MAX_LENGTH,
    )


def _ids_rule() -> dict[str, Any]:
    return cel.rules(
        cel.rule(
            "!has(self.runAsNonRoot) || !self.runAsNonRoot || !has(self.runAsUser) || self.runAsUser != 0",
            "runAsNonRoot: true contradicts runAsUser: 0",
            field_path=".runAsUser",
        )
    )


class PodSecurityOverride(KubeModel):
    """The engine pods' ``securityContext``: only these fields."""

    model_config = ConfigDict(json_schema_extra=_ids_rule())

    run_as_user: Id | None = Field(default=None, description="UID every container runs as.")
    run_as_group: Id | None = Field(default=None, description="Primary GID of every container.")
    run_as_non_root: bool | None = Field(
        default=None,
        description="Refuse to start a container as uid 0 (Pod Security restricted needs true here or on "
        "every container). The vLLM image runs as root: set runAsUser too, to a user the image can run as.",
    )
    fs_group: Id | None = Field(default=None, description="Group that owns the pod's volumes.")
    supplemental_groups: list[Id] = Field(
        default_factory=list,
        description="Extra groups of every container.",
        max_length=bounds.SUPPLEMENTAL_GROUPS_MAX_ITEMS,
    )
    seccomp_profile: SeccompProfile | None = Field(
        default=None, description="Seccomp profile of every container; default RuntimeDefault."
    )


class Capabilities(KubeModel):
    """Linux capabilities added to and dropped from the engine containers."""

    add: list[Capability] = Field(
        default_factory=list,
        description="Capabilities added (e.g. IPC_LOCK for RDMA): beyond NET_BIND_SERVICE, refused by "
        "Pod Security restricted; beyond the container runtime's defaults, by baseline.",
        max_length=bounds.CAPABILITIES_MAX_ITEMS,
    )
    drop: list[Capability] = Field(
        default_factory=list,
        description="Capabilities dropped; unset keeps the default [ALL] (restricted needs ALL).",
        max_length=bounds.CAPABILITIES_MAX_ITEMS,
    )


class ContainerSecurityOverride(KubeModel):
    """The engine containers' ``securityContext``: only these fields."""

    model_config = ConfigDict(json_schema_extra=_ids_rule())

    run_as_user: Id | None = Field(default=None, description="UID the engine runs as.")
    run_as_group: Id | None = Field(default=None, description="Primary GID of the engine.")
    run_as_non_root: bool | None = Field(default=None, description="Refuse to start the engine as uid 0.")
    allow_privilege_escalation: bool | None = Field(
        default=None, description="Default false (no setuid gains; restricted needs false)."
    )
    read_only_root_filesystem: bool | None = Field(
        default=None,
        description="Mount the image read-only. vLLM writes caches under $HOME (torch, triton): point "
        "them at a writable path (engine.env) before setting it.",
    )
    capabilities: Capabilities | None = Field(
        default=None, description="add and drop, each replacing the default ({drop: [ALL]}) when set."
    )
    seccomp_profile: SeccompProfile | None = Field(
        default=None, description="Seccomp profile of the engine containers (the pod's when unset)."
    )


LabelMap = dict[str, LabelValue]
AnnotationMap = dict[str, bounds.AnnotationValue]


class PodOverride(KubeModel):
    """What the engine pods (leader and workers) get beyond what the operator renders.

    Applies to engine pods only: download, tool and benchmark pods keep the operator's
    restricted settings and its own service-account choice (none mounted)."""

    model_config = ConfigDict(
        json_schema_extra=cel.rules(
            cel.rule(
                "!has(self.automountServiceAccountToken) || !self.automountServiceAccountToken || "
                "(has(self.serviceAccountName) && self.serviceAccountName != 'default')",
                "automountServiceAccountToken: true needs a serviceAccountName other than default: the "
                "default account's token is every pod's of the namespace that names none",
                field_path=".automountServiceAccountToken",
                reason="FieldValueForbidden",
            )
        )
    )

    service_account_name: str | None = Field(
        default=None,
        description="ServiceAccount the engine pods run as (default: the namespace's default). One other "
        "than default is admitted only where the chart's tenancy.serviceAccounts allows it.",
        min_length=1,
        max_length=253,
        pattern=DNS_SUBDOMAIN,
    )
    automount_service_account_token: bool | None = Field(
        default=None,
        description="Mount the account's token into the engine pods. Default false (an engine needs no "
        "Kubernetes API); true only with a serviceAccountName other than default.",
    )
    security_context: PodSecurityOverride | None = Field(
        default=None,
        description="The pods' securityContext (allowed: runAsUser, runAsGroup, runAsNonRoot, fsGroup, "
        "supplementalGroups, seccompProfile); each field set replaces the operator's default.",
    )
    container_security_context: ContainerSecurityOverride | None = Field(
        default=None,
        description="The securityContext of the engine containers (the engine, and the workers' init "
        "container that waits for the leader; allowed: runAsUser, runAsGroup, runAsNonRoot, "
        "allowPrivilegeEscalation, readOnlyRootFilesystem, capabilities, seccompProfile); each field "
        "set replaces the operator's default.",
    )
    labels: LabelMap = Field(
        default_factory=dict,
        description="Extra labels of the engine pods (not under sparkrun.dev, kubernetes.io, k8s.io, "
        "x-k8s.io, job-name, controller-uid).",
        json_schema_extra=_keys_rule("label"),
    )
    annotations: AnnotationMap = Field(
        default_factory=dict,
        description="Extra annotations of the engine pods (same reserved keys as labels, except "
        "cluster-autoscaler.kubernetes.io/safe-to-evict and kubectl.kubernetes.io/default-container).",
        json_schema_extra=_keys_rule("annotation", ALLOWED_ANNOTATIONS),
    )
