"""A DaemonJob's arguments: their bounds, their canonical digest, and the check that pins them.

``spec.requestDigest`` is ``sha256`` of the canonical JSON of ``{op, version, arguments,
manager}`` (the idempotency check of ``ops/jobstore.py``). It also pins the arguments: the CRD
can bound their nesting depth or keep a CEL immutability rule on them, not both (a depth-bounded
schema has no CEL type), so ``requestDigest`` is required and immutable and the executor runs
only arguments whose digest it is (:func:`verified_arguments`; ADR 0006, amended). A change of
``arguments`` after creation is accepted by the apiserver and executed by nobody.

Canonical means: keys sorted, compact separators, and numbers and strings as the apiserver
returns them (a whole float such as ``1.0`` comes back as ``1``, an integer outside int64 as a
float, a lone surrogate as U+FFFD), so the digest of the stored arguments is the digest of the
submitted ones. :func:`check_arguments` applies the CRD's bounds of ``arguments``
(``api/bounds.py``) in the shim before a job is created (a 422 naming the path, not the
apiserver's) and in the executor before the digest is computed. Pure; no I/O.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any, Final

from sparkrun_operator.api import bounds
from sparkrun_operator.ops.errors import DaemonError, Invalid

__all__ = ["check_arguments", "request_digest", "verified_arguments"]

_INT64: Final = 2**63
_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def _stored(value: Any) -> Any:
    """``value`` as the apiserver stores and returns it (see the module docstring). Recursive:
    callers bound the depth first (:func:`check_arguments`)."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        if -_INT64 <= value < _INT64:
            return value
        try:
            value = float(value)
        except OverflowError:  # NB: beyond float64 the apiserver refuses the object anyway
            return value
    if isinstance(value, float):
        return int(value) if value.is_integer() and -_INT64 <= value < _INT64 else value
    if isinstance(value, str):
        return value if value.isascii() else _SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {_stored(key): _stored(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_stored(item) for item in value]
    return value


def request_digest(
    operation: str, version: int, arguments: Mapping[str, Any], manager: str, *, if_match: str | None = None
) -> str:
    """Digest of what makes two submissions the same request (canonical JSON, numbers and strings
    as stored: the digest of submitted arguments is the digest of the same arguments read back).
    ``if_match`` (``spec.ifMatch``, ADR 0049) is covered when set, and only then, so a job without
    one keeps the digest it always had: a conditional request is another request than the
    unconditional one (a reused Idempotency-Key answers 409), and its precondition is pinned as
    its arguments are."""
    document: dict[str, Any] = {
        "op": operation,
        "version": version,
        "arguments": _stored(dict(arguments)),
        "manager": manager,
    }
    if if_match is not None:
        document["ifMatch"] = if_match
    canonical = json.dumps(
        document,
        sort_keys=True,
        separators=(",", ":"),
        allow_nan=False,
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def check_arguments(arguments: Mapping[str, Any]) -> None:
    """The CRD's bounds of ``spec.arguments`` (``api/bounds.py``), walked without recursion:
    containers with entries at most ``ARGUMENTS_DEPTH`` levels deep (``arguments`` is level 1),
    at most 64 top-level keys and 2,048 keys or items at each nested level, strings of at most
    262,144 characters. Raises ``Invalid`` naming the first offending ``request.<path>``."""
    if len(arguments) > bounds.ARGUMENTS_MAX_PROPERTIES:
        raise Invalid(f"request: more than {bounds.ARGUMENTS_MAX_PROPERTIES} arguments")
    stack: list[tuple[Any, int, str]] = [(value, 2, f"request.{key}") for key, value in arguments.items()]
    while stack:
        value, level, path = stack.pop()
        if isinstance(value, str):
            if len(value) > bounds.ARGUMENT_STRING_MAX_LENGTH:
                raise Invalid(f"{path}: string longer than {bounds.ARGUMENT_STRING_MAX_LENGTH} characters")
            continue
        if not isinstance(value, dict | list) or not value:
            continue
        if level > bounds.ARGUMENTS_DEPTH:
            raise Invalid(f"{path}: nests deeper than {bounds.ARGUMENTS_DEPTH} levels (a job's bound)")
        if len(value) > bounds.ARGUMENTS_MAX_ENTRIES:
            raise Invalid(f"{path}: more than {bounds.ARGUMENTS_MAX_ENTRIES} entries")
        if isinstance(value, dict):
            stack.extend((item, level + 1, f"{path}.{key}") for key, item in value.items())
        else:
            stack.extend((item, level + 1, f"{path}[{i}]") for i, item in enumerate(value))


def verified_arguments(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments of a stored job's ``spec``, once they are within :func:`check_arguments`'
    bounds and their digest is ``spec.requestDigest``, the one the job was created with (the
    apiserver keeps that immutable). Raises ``Invalid`` (bounds) or a ``PermissionError`` (reason
    ``request_digest_missing`` or ``arguments_changed``): nothing of such a job is executed."""
    raw = spec.get("arguments") or {}
    if not isinstance(raw, dict):
        raise Invalid("request: the job's arguments are not an object")
    check_arguments(raw)
    recorded = spec.get("requestDigest")
    if not recorded:
        raise DaemonError(
            "The job has no spec.requestDigest, so its arguments cannot be verified; submit it again",
            attrs={"reason": "request_digest_missing"},
            type_name="PermissionError",
        )
    digest = request_digest(
        str(spec.get("operation", "")),
        int(spec.get("operationVersion", 1)),
        raw,
        str(spec.get("manager", "daemon")),
        if_match=spec.get("ifMatch"),
    )
    if digest != recorded:
        raise DaemonError(
            "The job's arguments are not the ones it was submitted with (their digest is not "
            "spec.requestDigest); nothing was executed",
            attrs={"reason": "arguments_changed"},
            type_name="PermissionError",
        )
    return dict(raw)
