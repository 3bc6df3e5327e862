"""The Secret behind a secret prompt's answer: one per job and prompt, made by the shim only.

Prompt answers come only through the daemon API (ADR 0006, ADR 0021 as amended for issue 23):
the chart's admission policy refuses a change of a DaemonJob's ``spec.answers`` by anyone but the
shim, which answers after its own authorization (the job's scope, plus ``answer-secret`` for a
secret prompt). A secret answer's value never enters the spec: the shim stores it in one Secret
of the job's namespace and records only a reference to it. That Secret is

- named :func:`secret_name` of (job, prompt id) and nothing else, so a reference can name no
  other Secret;
- labelled ``sparkrun.dev/daemonjob: <job>`` and ``sparkrun.dev/prompt: <prompt id>``
  (:data:`~sparkrun_operator.render.keys.LABEL_PROMPT`), managed by ``sparkrun-shim``;
- owned by the DaemonJob (a controller owner reference carrying its UID): collected with it;
- the value under :data:`SECRET_KEY`.

The executor reads only that Secret (:func:`check_reference` before the read,
:func:`check_secret` after it) and deletes it, with a UID precondition, once read. A reference
to any other name or key, and a Secret under that name without the labels or the owner
reference (planted by someone allowed to create Secrets in the namespace), fail the prompt with
:class:`AnswerRefused`; nothing else is read. The shim applies :func:`check_secret` too, when
the name is already taken. Both checks are pure functions of the objects.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Mapping
from typing import Any, Final

from sparkrun_operator.api.meta import API_VERSION
from sparkrun_operator.api.resources import DAEMON_JOB
from sparkrun_operator.ops.errors import DaemonError
from sparkrun_operator.render import keys

__all__ = [
    "SECRET_KEY",
    "AnswerRefused",
    "check_reference",
    "check_secret",
    "secret_body",
    "secret_name",
    "secret_value",
    "valid_prompt_id",
]

#: The data key of the value in an answer Secret.
SECRET_KEY: Final = "token"
#: A Secret name is a DNS subdomain: at most 253 characters.
_NAME_MAX: Final = 253
_INFIX: Final = "-answer-"
_DIGEST_LEN: Final = 20
#: Prompt ids the shim answers with a Secret: label values (the executor makes 16 hex).
_PROMPT_ID = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


class AnswerRefused(DaemonError):
    """A secret answer that does not come from the shim's answer Secret (the job fails)."""

    status = 403
    type_name = "PermissionError"

    def __init__(self, detail: str, *, prompt_id: str) -> None:
        super().__init__(detail, attrs={"reason": "answer_secret_refused", "prompt_id": prompt_id})


def valid_prompt_id(prompt_id: str) -> bool:
    """Whether ``prompt_id`` can label an answer Secret (a Kubernetes label value)."""
    return bool(_PROMPT_ID.match(prompt_id))


def secret_name(job: str, prompt_id: str) -> str:
    """``<job>-answer-<20 hex of sha256(job NUL prompt id)>``: the one Secret a secret answer to
    prompt ``prompt_id`` of DaemonJob ``job`` may be read from. Depends on nothing else; the job
    name (a DNS subdomain) is shortened when needed to keep the name within 253 characters."""
    digest = hashlib.sha256(f"{job}\0{prompt_id}".encode()).hexdigest()[:_DIGEST_LEN]
    stem = job[: _NAME_MAX - len(_INFIX) - _DIGEST_LEN].rstrip("-.")
    return f"{stem}{_INFIX}{digest}"


def secret_body(job: Mapping[str, Any], prompt_id: str, value: str, *, namespace: str) -> dict[str, Any]:
    """The answer Secret the shim creates for prompt ``prompt_id`` of ``job`` (a DaemonJob)."""
    meta = job["metadata"]
    name = str(meta["name"])
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": secret_name(name, prompt_id),
            "namespace": namespace,
            "labels": {
                keys.LABEL_DAEMON_JOB: name,
                keys.LABEL_PROMPT: prompt_id,
                keys.LABEL_MANAGED_BY: keys.MANAGED_BY_SHIM,
            },
            "ownerReferences": [
                {
                    "apiVersion": API_VERSION,
                    "kind": DAEMON_JOB.kind,
                    "name": name,
                    "uid": meta["uid"],
                    "controller": True,
                }
            ],
        },
        "stringData": {SECRET_KEY: value},
    }


def check_reference(ref: Any, expected: str) -> str | None:
    """Why the ``secretRef`` of an answer is not the answer Secret ``expected``; ``None`` if it is."""
    if not isinstance(ref, Mapping):
        return "the answer's secretRef is not an object"
    name, key = ref.get("name"), ref.get("key", SECRET_KEY)
    if name != expected:
        shown = str(name)[:_NAME_MAX]
        return f"the answer names Secret {shown!r}; only the daemon API's answer Secret {expected} is read"
    if key != SECRET_KEY:
        return f"the answer names key {str(key)[:_NAME_MAX]!r} of its Secret; only {SECRET_KEY!r} is read"
    return None


def check_secret(secret: Mapping[str, Any] | None, job: Mapping[str, Any], prompt_id: str) -> str | None:
    """Why ``secret`` (the object under the answer Secret's name, ``None``: missing) is not the
    answer Secret the shim created for prompt ``prompt_id`` of ``job``; ``None`` if it is."""
    job_meta = job.get("metadata") or {}
    job_name, job_uid = job_meta.get("name"), job_meta.get("uid")
    if secret is None:
        return f"the answer Secret {secret_name(str(job_name), prompt_id)} does not exist"
    meta = secret.get("metadata") or {}
    name = meta.get("name")
    if name != secret_name(str(job_name), prompt_id):
        return f"Secret {str(name)[:_NAME_MAX]!r} is not the answer Secret of this job and prompt"
    labels = meta.get("labels") or {}
    if labels.get(keys.LABEL_DAEMON_JOB) != job_name or labels.get(keys.LABEL_PROMPT) != prompt_id:
        return f"Secret {name} lacks this job's and prompt's labels: the daemon API did not create it"
    owned = any(
        ref.get("kind") == DAEMON_JOB.kind
        and str(ref.get("apiVersion", "")).split("/")[0] == API_VERSION.split("/")[0]
        and ref.get("name") == job_name
        and job_uid is not None
        and ref.get("uid") == job_uid
        and ref.get("controller") is True
        for ref in meta.get("ownerReferences") or ()
        if isinstance(ref, Mapping)
    )
    if not owned:
        return f"Secret {name} is not owned by this DaemonJob (UID {job_uid}): not the daemon API's"
    if _decode(secret) is None:
        return f"Secret {name} holds no text under {SECRET_KEY!r}"
    return None


def _decode(secret: Mapping[str, Any]) -> str | None:
    raw = (secret.get("data") or {}).get(SECRET_KEY)
    if not isinstance(raw, str):
        return None
    try:
        return base64.b64decode(raw, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None


def secret_value(secret: Mapping[str, Any]) -> str:
    """The answer in a Secret that passed :func:`check_secret`."""
    value = _decode(secret)
    if value is None:
        raise ValueError(f"the answer Secret holds no text under {SECRET_KEY!r}")
    return value
