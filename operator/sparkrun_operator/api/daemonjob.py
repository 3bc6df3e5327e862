"""``DaemonJob``: one accepted job of the daemon-compatible API; its status *is* the job.

Created by the API shim, executed by the operator. ``spec`` records the request and is
immutable except that ``cancel`` may be set (never withdrawn); answers to prompts arrive in
``spec.answers`` (secret answers only as references to Secrets, never as values).

``status.result`` holds any JSON value (operation results may be objects, arrays, scalars or
null). Results whose JSON encoding exceeds :data:`RESULT_INLINE_BYTES` are stored gzip-compressed
and base64-encoded in ``status.resultGzip`` instead, so a result up to the daemon's 2 MiB limit
fits into one object (etcd's per-object limit is about 1.5 MiB).
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from pydantic import ConfigDict, Field

from sparkrun_operator.api import cel
from sparkrun_operator.api.meta import Condition, KubeModel, ObjectReference, SecretKeyRef

JobState = Literal[
    "queued", "starting", "running", "waiting_input", "cancelling", "succeeded", "failed", "cancelled", "lost"
]

MAX_EVENTS = 200
#: Results whose JSON encoding is larger than this are stored compressed (``status.resultGzip``).
RESULT_INLINE_BYTES = 256 * 1024


def _any_json(schema: dict[str, Any]) -> None:
    """Schema of a field holding any JSON value: preserved as is, no (null) default in the CRD."""
    schema.pop("default", None)
    schema["x-kubernetes-preserve-unknown-fields"] = True


class Principal(KubeModel):
    """Who submitted the job (from TokenReview or the front-proxy headers)."""

    username: str = Field(description="Kubernetes user name.", min_length=1, max_length=1024)
    uid: str | None = Field(default=None, description="User UID, when the authenticator gives one.")
    groups: list[str] = Field(default_factory=list, description="Groups of the user.")


class PromptAnswer(KubeModel):
    """An answer to a prompt of the job."""

    model_config = ConfigDict(
        json_schema_extra=cel.rules(
            cel.rule(
                "has(self.value) != has(self.secretRef)",
                "an answer has exactly one of value or secretRef",
            )
        )
    )

    prompt_id: str = Field(description="The prompt answered.", min_length=1, max_length=128)
    value: bool | None = Field(default=None, description="Approval or decision value.")
    secret_ref: SecretKeyRef | None = Field(default=None, description="Secret holding a secret answer.")


class DaemonJobSpec(KubeModel):
    """The accepted request."""

    operation: str = Field(
        description="Operation name, e.g. workloads.run.",
        min_length=1,
        max_length=128,
        pattern=r"^[a-z0-9_]+(\.[a-z0-9_]+)+$",
        json_schema_extra={"x-kubernetes-validations": [cel.immutable("operation")]},
    )
    operation_version: int = Field(
        default=1,
        description="Version of the operation's contract.",
        ge=1,
        json_schema_extra={"x-kubernetes-validations": [cel.immutable("operationVersion")]},
    )
    arguments: dict[str, Any] = Field(
        default_factory=dict,
        description="Validated operation arguments (free-form; the op's request schema applies).",
        json_schema_extra={**cel.FREE_FORM, "x-kubernetes-validations": [cel.immutable("arguments")]},
    )
    principal: Principal = Field(
        description="Submitter.", json_schema_extra={"x-kubernetes-validations": [cel.immutable("principal")]}
    )
    manager: str = Field(
        default="daemon",
        description="Manager identity the job acts as.",
        min_length=1,
        max_length=253,
        json_schema_extra={"x-kubernetes-validations": [cel.immutable("manager")]},
    )
    client: str | None = Field(
        default=None,
        description="Advisory client label (X-Sparkrun-Client); no effect on authorization or ownership.",
        max_length=100,
        json_schema_extra={"x-kubernetes-validations": [cel.immutable("client")]},
    )
    idempotency_key: str | None = Field(
        default=None,
        description="Idempotency-Key of the request.",
        max_length=256,
        json_schema_extra={"x-kubernetes-validations": [cel.immutable("idempotencyKey")]},
    )
    request_digest: str | None = Field(
        default=None,
        description="Digest of (operation, version, arguments, manager) for idempotency checks.",
        pattern=r"^[0-9a-f]{64}$",
    )
    cancel: bool = Field(
        default=False,
        description="Request cancellation. Cannot be withdrawn; effects already made are not rolled back.",
        json_schema_extra={
            "x-kubernetes-validations": [cel.rule("!oldSelf || self", "cancel cannot be withdrawn")]
        },
    )
    answers: list[PromptAnswer] = Field(
        default_factory=list, description="Answers to prompts.", max_length=64
    )


class JobError(KubeModel):
    """Why the job failed."""

    type: str = Field(description="Typed error, e.g. invalid_operation_result, not_found, conflict.")
    message: str = Field(description="Human-readable message.")
    retryable: bool = Field(default=False, description="Whether retrying with a new key may succeed.")
    details: dict[str, Any] | None = Field(
        default=None, description="Details.", json_schema_extra=cel.FREE_FORM
    )


class JobPrompt(KubeModel):
    """A question the job waits on (state waiting_input)."""

    id: str = Field(description="Prompt id to answer with.")
    kind: Literal["approval", "decision", "secret", "text"] = Field(
        description="What kind of answer is expected."
    )
    message: str = Field(description="The question.")
    expires_at: dt.datetime | None = Field(default=None, description="When the prompt times out.")
    default: Any = Field(
        default=None,
        description="Value suggested to the person answering (never a secret).",
        json_schema_extra=_any_json,
    )
    details: dict[str, Any] | None = Field(
        default=None, description="Extra data.", json_schema_extra=cel.FREE_FORM
    )


class JobEvent(KubeModel):
    """One entry of the job's bounded event log."""

    id: int = Field(description="Monotonic event id (SSE id).", ge=0)
    time: dt.datetime = Field(description="When it happened.")
    type: str = Field(description="Event type, e.g. state, progress, log, prompt, result.")
    data: dict[str, Any] = Field(
        default_factory=dict, description="Event payload.", json_schema_extra=cel.FREE_FORM
    )


class DaemonJobStatus(KubeModel):
    """The job."""

    observed_generation: int | None = Field(
        default=None, description="Generation this status describes.", ge=0
    )
    state: JobState | None = Field(
        default=None,
        description="queued, starting, running, waiting_input, cancelling (non-terminal); succeeded, "
        "failed, cancelled, lost (terminal).",
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Complete and Failed.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    result: Any = Field(
        default=None,
        description="Operation result, any JSON value (validated against the operation's result schema).",
        json_schema_extra=_any_json,
    )
    result_gzip: str | None = Field(
        default=None,
        description="The result as base64 of gzip of its JSON encoding, used instead of result when that "
        f"encoding exceeds {RESULT_INLINE_BYTES} bytes.",
        max_length=3 * 1024 * 1024,
    )
    error: JobError | None = Field(default=None, description="Failure, when state is failed or lost.")
    prompt: JobPrompt | None = Field(default=None, description="Pending prompt.")
    events: list[JobEvent] = Field(
        default_factory=list, description=f"Most recent events (at most {MAX_EVENTS}).", max_length=MAX_EVENTS
    )
    first_event_id: int = Field(default=0, description="Id of the oldest event still kept.", ge=0)
    next_event_id: int = Field(default=0, description="Id the next event will get.", ge=0)
    target: ObjectReference | None = Field(default=None, description="The resource the job acts on.")
    executor: str | None = Field(default=None, description="Operator instance executing the job.")
    attempts: int = Field(
        default=0,
        description="Executions started: above 1 when a new executor resumed the job after the one "
        "running it stopped (upgrade, crash).",
        ge=0,
    )
    started_at: dt.datetime | None = Field(default=None, description="When execution started.")
    finished_at: dt.datetime | None = Field(
        default=None, description="When the job reached a terminal state."
    )
    cancelled_at: dt.datetime | None = Field(default=None, description="When cancellation was requested.")
    updated_at: dt.datetime | None = Field(default=None, description="When the status last changed.")
