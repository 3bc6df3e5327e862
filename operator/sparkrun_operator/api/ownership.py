"""Ownership leases of ephemeral InferenceWorkloads (ADR 0049, Skyward's ``lease``).

A workload with ``spec.lease`` is owned while a client renews its ownership Lease: a
``coordination.k8s.io/v1`` Lease in the workload's namespace, named :func:`lease_name` of the
workload, owned by it (``ownerReferences``, the workload's UID) and labelled
``sparkrun.dev/ownership`` (``render/keys.py``). The renew record is that Lease, not a field of
the workload: a renew every ``ttlSeconds / 3`` must not bump the workload's ``resourceVersion``
(every ``If-Match`` ETag would go stale), trigger reconciles, or show as GitOps drift.

The operator judges lapse on its own clock (``ops/ownership.py``); a lapsed lease with
``deleteOnExit`` deletes the workload (Event ``Abandoned``), one without it marks the workload an
orphan (condition ``Owned=False``, label ``sparkrun.dev/orphaned``). ``status.lease`` changes only
on a transition (holder or state), never on a renew, for the same reason.

Pure: names, bounds, the spec and status types and the daemon operations' request and result
models (``plugins.sparkrun-k8s.workloads.lease|release|leases``).
"""

from __future__ import annotations

import datetime as dt
import hashlib
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from sparkrun_operator.api.meta import KubeModel

#: ``spec.lease.ttlSeconds`` bounds: renewed every third of it, so 10 s means a renew every ~3 s
#: (the floor a client on a slow link can keep); a week is the longest a lease may be silent.
MIN_TTL_SECONDS: Final = 10
MAX_TTL_SECONDS: Final = 7 * 86_400
DEFAULT_TTL_SECONDS: Final = 600

LEASE_PREFIX: Final = "sparkrun-lease-"
#: A client session id: at most this long, of :data:`SESSION_CHARS` only.
MAX_SESSION: Final = 64
SESSION_CHARS: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
#: Kubernetes object names (a DNS subdomain) are at most this long.
_MAX_NAME = 253

LeaseState = Literal["Held", "Unclaimed", "Lapsed"]
HELD: Final = "Held"
UNCLAIMED: Final = "Unclaimed"
LAPSED: Final = "Lapsed"


def lease_name(workload: str) -> str:
    """The ownership Lease's name for ``workload``: deterministic, at most 253 characters (a long
    name is cut and suffixed with a hash of the whole, so two long names never share one)."""
    name = LEASE_PREFIX + workload
    if len(name) <= _MAX_NAME:
        return name
    digest = hashlib.sha256(workload.encode()).hexdigest()[:12]
    return name[: _MAX_NAME - 13] + "-" + digest


def check_session(session: str | None) -> str | None:
    """``session`` when it is a safe client session id (``None`` stays ``None``); ``ValueError``
    otherwise. Plain string checks (no regular expression over caller text)."""
    if session is None:
        return None
    if not 1 <= len(session) <= MAX_SESSION or not set(session) <= SESSION_CHARS:
        raise ValueError(f"session must be 1-{MAX_SESSION} characters of [A-Za-z0-9._-]")
    return session


def shown_holder(value: object) -> str | None:
    """A Lease's ``holderIdentity`` as status, conditions, Events and listings show it (``None``
    when empty): anyone with write on the namespace's Leases can write it, so each character a
    terminal would not print as itself (controls and escape sequences, bidirectional overrides,
    zero-width characters, line breaks) becomes ``?``, and it is cut at 512 characters."""
    if not isinstance(value, str) or not value:
        return None
    return "".join(ch if ch.isprintable() else "?" for ch in value[:512])


def holder_identity(principal: str, session: str | None) -> str:
    """The Lease's ``holderIdentity``: the authenticated principal, with ``#<session>`` when the
    client named a session (two scripts of one principal are then two holders)."""
    return principal if session is None else f"{principal}#{session}"


class LeaseSpec(KubeModel):
    """An ownership lease (an ephemeral workload): a client renews it; when nobody does for
    ``ttlSeconds`` the workload is deleted (``deleteOnExit``) or marked an orphan."""

    ttl_seconds: int = Field(
        default=DEFAULT_TTL_SECONDS,
        description="Seconds without a renew after which the lease lapses (clients renew every third).",
        ge=MIN_TTL_SECONDS,
        le=MAX_TTL_SECONDS,
    )
    delete_on_exit: bool = Field(
        default=False,
        description="Delete the workload when the lease lapses (Event Abandoned); false: it stays, marked "
        "an orphan (condition Owned=False LeaseExpired, label sparkrun.dev/orphaned=true).",
    )


class LeaseStatus(KubeModel):
    """The ownership lease as the operator last judged it; written on transitions only (a renew
    changes the Lease object, never this)."""

    state: LeaseState = Field(description="Held (a live holder), Unclaimed (none yet) or Lapsed.")
    holder: str | None = Field(
        default=None, description="The Lease's holderIdentity (principal[#session]).", max_length=512
    )
    acquired: dt.datetime | None = Field(default=None, description="The Lease's acquireTime.")
    since: dt.datetime | None = Field(
        default=None, description="When the operator observed the current state begin."
    )
    ttl_seconds: int = Field(description="spec.lease.ttlSeconds judged with.", ge=1)
    delete_on_exit: bool = Field(description="spec.lease.deleteOnExit judged with.")
    lease: str = Field(description="The ownership Lease's name.", max_length=_MAX_NAME)
    squatted: bool = Field(
        default=False,
        description="A Lease of that name exists but is not owned by this workload: ignored, never renewed.",
    )


# -- daemon operations (plugins.sparkrun-k8s.workloads.lease | release | leases) ------------


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Result(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


_WORKLOAD = "The workload: its name, or its sparkrun workload id (status.workloadId), in the API's namespace."


class LeaseClaimRequest(_Request):
    """Claim or renew a workload's ownership lease as the authenticated principal."""

    workload: str = Field(description=_WORKLOAD, min_length=1, max_length=253)
    ttl_seconds: int | None = Field(
        default=None,
        description="When given, must equal spec.lease.ttlSeconds (the spec is the one source: opting in or "
        "changing the TTL is a spec change, not a claim).",
        ge=MIN_TTL_SECONDS,
        le=MAX_TTL_SECONDS,
    )
    session: str | None = Field(
        default=None,
        description="Client session id ([A-Za-z0-9._-], at most 64): the holder is principal#session.",
        min_length=1,
        max_length=MAX_SESSION,
    )


class LeaseReleaseRequest(_Request):
    """Drop the caller's claim on a workload's ownership lease (destroys nothing)."""

    workload: str = Field(description=_WORKLOAD, min_length=1, max_length=253)
    session: str | None = Field(
        default=None, description="The session the claim was made with.", min_length=1, max_length=MAX_SESSION
    )


class LeasesRequest(_Request):
    """Which leased workloads to list."""

    owned: bool | None = Field(
        default=None,
        description="true: workloads with a live holder; false: orphans (no live holder: unclaimed or "
        "lapsed); absent: all workloads with spec.lease.",
    )


class LeaseInfo(_Result):
    """One workload's ownership lease."""

    workload: str = Field(description="The workload's name.", max_length=253)
    namespace: str = Field(description="Its namespace.", max_length=63)
    owner: str | None = Field(default=None, description="The live holder (Skyward's owner).", max_length=512)
    state: str = Field(description="Held, Unclaimed or Lapsed (the operator's judgement, else Unclaimed).")
    ttl_seconds: int = Field(description="spec.lease.ttlSeconds.", ge=1)
    delete_on_exit: bool = Field(description="spec.lease.deleteOnExit.")
    renewed: str | None = Field(
        default=None, description="The Lease's renewTime (the renewer's clock).", max_length=64
    )
    expires_at: str | None = Field(
        default=None,
        description="renewTime + ttlSeconds: an estimate on the renewer's clock; the operator judges lapse "
        "on its own.",
        max_length=64,
    )
    orphaned: bool = Field(description="Whether the workload carries sparkrun.dev/orphaned=true.")


class LeaseClaimResult(LeaseInfo):
    """The lease after the claim or renew."""

    claimed: bool = Field(description="True: a new claim (acquireTime set now); false: a renew.")


class LeaseReleaseResult(_Result):
    """What the release did."""

    workload: str = Field(description="The workload's name.", max_length=253)
    released: bool = Field(description="False: the caller did not hold it (nothing written).")


class LeasesResult(_Result):
    """The leased workloads of the API's namespace, by name."""

    leases: list[LeaseInfo] = Field(description="One entry per workload with spec.lease.", max_length=10_000)
