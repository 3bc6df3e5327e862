"""A workload's serving revisions as ControllerRevision objects (ADR 0046): read one from the
watch, tell whether it can serve, and write a new one.

A ControllerRevision of a workload is named ``<workload>-<number>`` (``revision`` is the number),
labelled with the workload and the serving revision's hash, owned by the workload (controller
ownerReference, so garbage collection removes it with the workload), and its ``data`` is a
:class:`~sparkrun_operator.api.history.ServingRevision`. The operator alone writes them (tenants
get no write on ControllerRevisions), yet one is used only after the same checks a spec gets:
``data`` validated by the pydantic model, its frozen inputs by ``render/frozen.py``, the names
its topology gives the children by ``render/names.py``, and only when its controller owner is
the workload's UID. A rollback to one (:func:`rollback_refused`) never brings back a
ServiceAccount or an env reference the spec does not name (admission checks those on the spec),
nor serves settings that fail the spec's state gate (Sleeping needs sleep mode).
Pure: no I/O.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from pydantic import ValidationError

from sparkrun_operator.api.clip import echo
from sparkrun_operator.api.history import ServingRevision
from sparkrun_operator.api.meta import EnvVar, parse_time
from sparkrun_operator.api.workload import InferenceWorkloadSpec
from sparkrun_operator.plan.workload.gates import state_refused
from sparkrun_operator.plan.workload.model import ObservedRevision
from sparkrun_operator.render import frozen, keys, names
from sparkrun_operator.render.workload import Owner, ServingInputs, workload_labels

#: The ControllerRevision API (apps/v1).
API_VERSION: Final = "apps/v1"
KIND: Final = "ControllerRevision"
#: The highest revision number read (15 digits): a ControllerRevision numbered above it (made by
#: hand: the operator counts up from 1) is no revision of the workload, so one near the int64
#: limit cannot make the next number overflow and stop every new revision.
MAX_NUMBER: Final = 10**15 - 1


@dataclass(frozen=True, kw_only=True)
class Kept:
    """A kept revision that can serve: the object, its data and its frozen inputs read back."""

    found: ObservedRevision
    data: ServingRevision
    inputs: ServingInputs

    @property
    def number(self) -> int:
        return self.found.number


def revision_name(workload: str, number: int) -> str:
    """``<workload>-<number>``: one name per number, so two passes (or two operators) that make
    the same revision make one object (the second gets AlreadyExists)."""
    return f"{workload}-{number}"


def number_in_name(name: str, workload: str) -> int | None:
    """The number a name ``<workload>-<number>`` takes (``None``: no such name), so that a
    revision numbered otherwise than its name says cannot make the next name collide."""
    prefix = f"{workload}-"
    digits = name[len(prefix) :] if name.startswith(prefix) else ""
    if not digits or len(digits) > len(str(MAX_NUMBER)) or not (digits.isascii() and digits.isdigit()):
        return None
    return int(digits)


def revision_from(body: Mapping[str, Any]) -> ObservedRevision | None:
    """The ControllerRevision ``body`` as the planner sees it (``data`` ``None`` when it is not a
    valid :class:`ServingRevision`); ``None`` when it is not a revision at all."""
    meta = body.get("metadata")
    if not isinstance(meta, Mapping):
        return None
    name, uid, number = meta.get("name"), meta.get("uid"), body.get("revision")
    if not isinstance(name, str) or not isinstance(uid, str):
        return None
    if not isinstance(number, int) or isinstance(number, bool) or not 1 <= number <= MAX_NUMBER:
        return None
    data: ServingRevision | None
    try:
        data = ServingRevision.model_validate(body.get("data"))
    except (ValidationError, ValueError, TypeError):
        data = None
    owner = next(
        (
            str(ref.get("uid"))
            for ref in _list(meta.get("ownerReferences"))
            if isinstance(ref, Mapping) and ref.get("controller") and ref.get("kind") == "InferenceWorkload"
        ),
        None,
    )
    annotations = _mapping(meta.get("annotations"))
    labels = meta.get("labels") or {}
    label = labels.get(keys.LABEL_REVISION) if isinstance(labels, Mapping) else None
    return ObservedRevision(
        name=name,
        uid=uid,
        number=number,
        hash=label if isinstance(label, str) else None,
        data=data,
        owner=owner,
        served_from=parse_time(annotations.get(keys.ANNOTATION_SERVED_FROM)),
        served_until=parse_time(annotations.get(keys.ANNOTATION_SERVED_UNTIL)),
        created=parse_time(meta.get("creationTimestamp")),
        deleting=bool(meta.get("deletionTimestamp")),
    )


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def usable(found: ObservedRevision, *, workload: str, uid: str) -> Kept | None:
    """``found`` when it may serve ``workload``: owned by it (its UID), not being deleted, its
    data a ServingRevision whose frozen inputs read back and give valid child names."""
    data = found.data
    if found.owner != uid or found.deleting or data is None:
        return None
    try:
        inputs = frozen.from_wire(data.inputs)
    except ValueError:
        return None
    if names.check_workload_name(workload=workload, nodes=inputs.spec.topology.nodes) is not None:
        return None
    return Kept(found=found, data=data, inputs=inputs)


def render_revision(
    *, namespace: str, workload: str, owner: Owner, number: int, data: ServingRevision
) -> dict[str, Any]:
    """The ControllerRevision of serving revision ``number`` of ``workload``."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": revision_name(workload, number),
            "namespace": namespace,
            "labels": {**workload_labels(workload), keys.LABEL_REVISION: data.hash},
            "ownerReferences": [owner.reference()],
        },
        "data": data.to_wire(),
        "revision": number,
    }


def stamp(now: dt.datetime) -> str:
    """A served-from/until annotation's value (RFC 3339, seconds, UTC)."""
    return now.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def rollback_refused(pin: int, target: ServingInputs, spec: InferenceWorkloadSpec) -> str | None:
    """Why a rollback to ``target`` may not be made while the spec is as it is: admission checks
    on the spec only who may run engines as a ServiceAccount (the chart's tenancy.serviceAccounts)
    and who may put a Secret or ConfigMap into their environment (the requester may read it,
    ADR 0041). A pin is no such check, so a rollback never brings back an account or a reference
    the spec does not name: an account since withdrawn, a Secret its author could read and the
    one who sets the pin cannot. Nor one whose settings fail the spec's own state gate
    (``gates.state_refused``: state Sleeping with a revision started without sleep mode)."""
    if (problem := state_refused(spec.state, target.spec)) is not None:
        return (
            f"spec.rollout.revision pins {pin}, whose settings cannot serve spec.state "
            f"{spec.state}: {problem} (that revision ran without it); change spec.state with the pin"
        )
    then = target.pod.service_account_name if target.pod is not None else None
    now = spec.pod.service_account_name if spec.pod is not None else None
    if then not in (None, "default") and then != now:
        return (
            f"spec.rollout.revision pins {pin}, whose engine pods ran as ServiceAccount {echo(then, 64)}: "
            f"a rollback never changes the account (admission checks it on the spec); "
            f"set spec.pod.serviceAccountName: {echo(then, 64)} with the pin"
        )
    missing = sorted(_references(target.spec.env) - _references(spec.engine.env))
    if missing:
        kind, name = missing[0]
        return (
            f"spec.rollout.revision pins {pin}, whose env names {kind} {echo(name, 64)} (and "
            f"{len(missing) - 1} more) that spec.engine.env does not: a rollback never brings a "
            "reference back (admission checks on the spec that it may be read); name it in "
            "spec.engine.env with the pin"
        )
    return None


#: ``valueFrom`` sources that name no object (the pod's own fields and resources).
_NO_OBJECT: Final = frozenset({"fieldRef", "resourceFieldRef"})


def _references(env: Iterable[EnvVar]) -> set[tuple[str, str]]:
    """The objects an env's ``valueFrom`` names: (source, name); a source that is neither a
    field of the pod nor a known reference counts by its whole value."""
    out: set[tuple[str, str]] = set()
    for var in env:
        for kind, ref in (var.value_from or {}).items():
            if kind in _NO_OBJECT:
                continue
            name = ref.get("name") if isinstance(ref, Mapping) else None
            out.add(
                (str(kind), name if isinstance(name, str) else json.dumps(ref, sort_keys=True, default=str))
            )
    return out
