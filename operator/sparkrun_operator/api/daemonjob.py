"""``DaemonJob``: one accepted job of the daemon-compatible API; its status *is* the job.

Created by the API shim, executed by the operator. ``spec`` records the request and is
immutable except that ``cancel`` may be set (never withdrawn); answers to prompts arrive in
``spec.answers`` (secret answers only as references to Secrets, never as values). ``arguments``
is bounded in depth by its schema, which leaves it no CEL type and so no CEL immutability rule:
the required, immutable ``requestDigest`` pins it instead (the executor refuses arguments whose
digest differs; ``ops/jobs.py`` ``verify_digest``). ``ifMatch`` (ADR 0049), the resourceVersion an
``If-Match`` matched at submission, is set only at creation, immutable, and covered by the digest
when present (a job without it keeps the digest it always had).

Each answer carries who gave it (the principal the daemon API authenticated), when, and an
optional comment; ``status.answers`` repeats that record per prompt with the prompt's kind and
the answer's replays (the same answer given again), never a secret's value (issue 29).

``status.result`` holds any JSON value (operation results may be objects, arrays, scalars or
null). Results whose JSON encoding exceeds :data:`RESULT_INLINE_BYTES` are stored gzip-compressed
and base64-encoded in ``status.resultGzip`` instead, so a result up to the daemon's 2 MiB limit
fits into one object (etcd's per-object limit is about 1.5 MiB).
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from pydantic import ConfigDict, Field

from sparkrun_operator.api import bounds, cel
from sparkrun_operator.api.meta import Condition, KubeModel, ObjectReference, SecretKeyRef

JobState = Literal[
    "queued", "starting", "running", "waiting_input", "cancelling", "succeeded", "failed", "cancelled", "lost"
]

MAX_EVENTS = 200
#: The longest comment an answer (or a replay of it) keeps, in characters.
ANSWER_COMMENT_MAX = 500
#: Replays of one answer kept in ``status.answers[].replays`` (the newest; ``replayCount`` counts all).
MAX_ANSWER_REPLAYS = 8
#: Results whose JSON encoding is larger than this are stored compressed (``status.resultGzip``).
RESULT_INLINE_BYTES = 256 * 1024


def _any_json(schema: dict[str, Any]) -> None:
    """Schema of a field holding any JSON value: preserved as is, no (null) default in the CRD."""
    schema.pop("default", None)
    schema["x-kubernetes-preserve-unknown-fields"] = True


class Principal(KubeModel):
    """Who submitted the job (from TokenReview or the front-proxy headers)."""

    username: str = Field(description="Kubernetes user name.", min_length=1, max_length=1024)
    uid: str | None = Field(
        default=None,
        description="User UID, when the authenticator gives one.",
        json_schema_extra=bounds.schema_only(maxLength=bounds.PRINCIPAL_UID_MAX_LENGTH),
    )
    groups: list[bounds.GroupName] = Field(
        default_factory=list,
        description="Groups of the user.",
        json_schema_extra=bounds.schema_only(maxItems=bounds.GROUPS_MAX_ITEMS),
    )


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
    answered_by: str | None = Field(
        default=None,
        description="The principal the daemon API authenticated for the answer (never a name the caller "
        "gave); absent on answers recorded before it was kept.",
        max_length=1024,
    )
    answered_at: dt.datetime | None = Field(
        default=None,
        description="When the daemon API took the answer.",
        # An RFC 3339 time is at most 35 characters; the bound keeps every spec string bounded.
        json_schema_extra={"maxLength": 64},
    )
    comment: str | None = Field(
        default=None,
        description="The answer's comment (X-Sparkrun-Comment header): at most "
        f"{ANSWER_COMMENT_MAX} characters, no control characters.",
        max_length=ANSWER_COMMENT_MAX,
    )


class DaemonJobSpec(KubeModel):
    """The accepted request."""

    model_config = ConfigDict(
        json_schema_extra=cel.rules(
            # NB: a job stored before the digest was required cannot be given one later (its
            # arguments would then run under a digest written after creation).
            cel.rule(
                "has(self.requestDigest) == has(oldSelf.requestDigest)",
                "requestDigest cannot be added or removed",
                field_path=".requestDigest",
            ),
            cel.rule(
                "has(self.ifMatch) == has(oldSelf.ifMatch)",
                "ifMatch cannot be added or removed",
                field_path=".ifMatch",
            ),
        )
    )

    operation: str = Field(
        description="Operation name, e.g. workloads.run, or a plugin's, plugins.<plugin-id>.<local name> "
        "(a plugin id has hyphens: plugins.sparkrun-k8s.workloads.rollback).",
        min_length=1,
        max_length=128,
        # NB: a hyphen only in a plugin id (ADR 0048), as the reference names operations
        pattern=r"^([a-z0-9_]+(\.[a-z0-9_]+)+|plugins\.[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9_]+)+)$",
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
        description="Validated operation arguments (free-form; the op's request schema applies), nested "
        f"at most {bounds.ARGUMENTS_DEPTH} levels. Pinned by requestDigest: the operator executes only "
        "arguments whose digest is the one the job was created with.",
        # NB: a value whose schema bounds its nesting has no CEL type, so no rule can sit on it or
        # name it (spec's own rules cannot say "all but cancel and answers unchanged"):
        # immutability is the digest's, required and immutable, recomputed by the executor
        # (ADR 0006, amended).
        json_schema_extra=bounds.json_value(
            bounds.ARGUMENTS_DEPTH,
            max_properties=bounds.ARGUMENTS_MAX_PROPERTIES,
            strings=bounds.ARGUMENT_STRING_MAX_LENGTH,
            entries=bounds.ARGUMENTS_MAX_ENTRIES,
        ),
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
    request_digest: str = Field(
        description="sha256 (hex) of the canonical JSON of {op, version, arguments, manager} "
        "(and ifMatch when set; docs/daemon-api.md): the idempotency check, and what pins arguments "
        "(the operator refuses to execute arguments whose digest differs).",
        pattern=r"^[0-9a-f]{64}$",
        min_length=64,
        max_length=64,
        json_schema_extra={"x-kubernetes-validations": [cel.immutable("requestDigest")]},
    )
    if_match: str | None = Field(
        default=None,
        description="The resourceVersion the operation's target must still have when the job writes it "
        "(the If-Match the daemon API checked, ADR 0049): the write carries it as a precondition, so a "
        "change in between fails the job with revision_conflict. Covered by requestDigest when set.",
        min_length=1,
        max_length=128,
        pattern=r"^[!#-~]+$",
        json_schema_extra={"x-kubernetes-validations": [cel.immutable("ifMatch")]},
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


class AnswerReplay(KubeModel):
    """The same answer given again (a retry, or a second principal confirming it): nothing changed."""

    by: str = Field(description="The principal the daemon API authenticated.", min_length=1, max_length=1024)
    at: dt.datetime = Field(description="When.")
    comment: str | None = Field(
        default=None, description="The replay's comment (X-Sparkrun-Comment).", max_length=ANSWER_COMMENT_MAX
    )


class AnswerRecord(KubeModel):
    """Who answered a prompt, when, with which comment; never a secret answer's value."""

    prompt_id: str = Field(description="The prompt answered.", min_length=1, max_length=128)
    kind: str = Field(description="The prompt's kind: approval, decision, secret, ...", max_length=64)
    value: bool | None = Field(default=None, description="The approval or decision value (never a secret's).")
    answered_by: str = Field(
        description="The principal the daemon API authenticated for the answer.",
        min_length=1,
        max_length=1024,
    )
    answered_at: dt.datetime = Field(description="When the daemon API took the answer.")
    comment: str | None = Field(
        default=None, description="The answer's comment (X-Sparkrun-Comment).", max_length=ANSWER_COMMENT_MAX
    )
    replay_count: int = Field(default=0, description="How often the same answer was given again.", ge=0)
    replays: list[AnswerReplay] = Field(
        default_factory=list,
        description=f"The newest replays (at most {MAX_ANSWER_REPLAYS}).",
        max_length=MAX_ANSWER_REPLAYS,
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
    answers: list[AnswerRecord] = Field(
        default_factory=list,
        description="Who answered each prompt, when, with which comment, and its replays (written by the "
        "daemon API; the chart's admission policy lets nobody else change them).",
        max_length=64,
    )
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
