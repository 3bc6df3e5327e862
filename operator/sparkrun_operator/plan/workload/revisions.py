"""A workload's serving revisions as ControllerRevision objects (ADR 0046): read one from the
watch, tell whether it can serve, and write a new one.

A ControllerRevision of a workload is named ``<workload>-<number>`` (``revision`` is the number),
labelled with the workload and the serving revision's hash, owned by the workload (controller
ownerReference, so garbage collection removes it with the workload), and its ``data`` is a
:class:`~sparkrun_operator.api.history.ServingRevision`. The operator alone writes them (tenants
get no write on ControllerRevisions), yet one is used only after the same checks a spec gets:
``data`` validated by the pydantic model, its frozen inputs by ``render/frozen.py``, the names
its topology gives the children by ``render/names.py``, and only when its controller owner is
the workload's UID. Pure: no I/O.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from pydantic import ValidationError

from sparkrun_operator.api.history import ServingRevision
from sparkrun_operator.plan.workload.model import ObservedRevision
from sparkrun_operator.render import frozen, keys, names
from sparkrun_operator.render.workload import Owner, ServingInputs, workload_labels

#: The ControllerRevision API (apps/v1).
API_VERSION: Final = "apps/v1"
KIND: Final = "ControllerRevision"


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


def revision_from(body: Mapping[str, Any]) -> ObservedRevision | None:
    """The ControllerRevision ``body`` as the planner sees it (``data`` ``None`` when it is not a
    valid :class:`ServingRevision`); ``None`` when it is not a revision at all."""
    meta = body.get("metadata")
    if not isinstance(meta, Mapping):
        return None
    name, uid, number = meta.get("name"), meta.get("uid"), body.get("revision")
    if not isinstance(name, str) or not isinstance(uid, str):
        return None
    if not isinstance(number, int) or isinstance(number, bool) or number < 1:
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
        served_from=_time(annotations.get(keys.ANNOTATION_SERVED_FROM)),
        served_until=_time(annotations.get(keys.ANNOTATION_SERVED_UNTIL)),
        created=_time(meta.get("creationTimestamp")),
        deleting=bool(meta.get("deletionTimestamp")),
    )


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _time(value: Any) -> dt.datetime | None:
    """An RFC 3339 timestamp (an annotation, ``creationTimestamp``), else ``None``.

    NB: not ``plan/observe.py``'s twin: that module imports the planner's package."""
    if not isinstance(value, str) or not value or len(value) > 64:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


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
