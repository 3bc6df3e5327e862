"""Executing operations: jobs to a terminal state (for the DaemonJob controller), queries inline.

:func:`run_job` drives one DaemonJob, through a :class:`JobControl` given by its host (the
controller), from ``queued`` to a terminal state:

- a job whose executor stopped (upgrade, crash: another executor was running it) is resumed —
  run again from the start, ``status.attempts`` counting — when its operation is resumable
  (``Operation.resumable``, ADR 0025) and it was not waiting for input, at most
  :data:`MAX_ATTEMPTS` times; otherwise it is ``lost`` with a retryable ``WorkerLost`` error
  that names the operation and the executor;
- ``queued`` -> ``starting`` -> ``running`` (one status write), unless cancellation was
  requested first (-> ``cancelled``);
- before anything runs (on every attempt), the arguments must be within a job's bounds and
  their digest must be ``spec.requestDigest`` (``ops/jobargs.py``): arguments changed after
  creation fail the job with ``PermissionError`` (reason ``arguments_changed``), unexecuted;
- the executor runs as a task; ``spec.cancel`` cancels it (-> ``cancelled``, recorded after the
  task has unwound, so no effect happens after the terminal state);
- prompts set ``waiting_input`` with a deadline (default 300 s); an answer in ``spec.answers``
  resumes the job; a secret answer is read from the one answer Secret the shim made for this job
  and prompt (``ops/answers.py``: its name is recomputed, its labels and owner reference checked;
  a reference to anything else fails the job with ``PermissionError``, reason
  ``answer_secret_refused``, after a ``prompt_refused`` event, and nothing is read), the Secret
  is deleted, and the value is redacted from every later event, result and error; an expired
  prompt fails the job;
- the result is checked against the operation's result schema (``invalid_operation_result``
  otherwise) and its size (2 MiB), then stored; failures are stored as the job's error.

:func:`run_query` runs a query-kind operation inline with the query timeout and checks its
result the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Protocol

from sparkrun_operator.api.daemonjob import DaemonJobStatus
from sparkrun_operator.k8s import errors as k8s_errors
from sparkrun_operator.ops import answers, jobs
from sparkrun_operator.ops.catalog import Catalog, Operation
from sparkrun_operator.ops.errors import (
    Conflict,
    DaemonError,
    FeatureDisabled,
    Invalid,
    KubernetesUnavailable,
    NotFound,
    OperationTimeout,
)
from sparkrun_operator.ops.invocation import Executor, OperationContext
from sparkrun_operator.ops.redact import off_loop
from sparkrun_operator.ops.schema import request_validator, result_validator

__all__ = ["KUBE_TO_DAEMON", "JobControl", "Redactor", "as_daemon_error", "run_job", "run_query"]

log = logging.getLogger(__name__)

#: Executions of one job at most (the first and resumptions after its executor stopped).
MAX_ATTEMPTS = 3
LOST_MESSAGE = (
    "The operator executing this job stopped before it finished; its effects are uncertain. "
    "Inspect and reconcile them before starting another mutation."
)


class JobControl(Protocol):
    """The host of a running job (the DaemonJob controller)."""

    @property
    def obj(self) -> dict[str, Any]:
        """The latest known DaemonJob (kept current by the host's watch)."""
        ...

    async def write(self, mutate: Callable[[DaemonJobStatus, dict[str, Any]], None]) -> None:
        """Apply ``mutate`` to the status and write it (resourceVersion-guarded, retried)."""
        ...

    async def changed(self, wait: float) -> None:
        """Return when the object may have changed, or after ``wait`` seconds."""
        ...

    async def read_secret(self, name: str) -> dict[str, Any] | None:
        """The Secret ``name`` of the job's namespace (``None`` when missing). Asked only for the
        answer Secret of a prompt of this job (``ops/answers.py``), never for another name."""
        ...

    async def delete_secret(self, name: str, uid: str) -> None:
        """Delete the Secret ``name`` if its UID is still ``uid`` (already gone: nothing to do)."""
        ...


class Redactor:
    """Replaces secret answers in any JSON value with ``[redacted]``."""

    def __init__(self) -> None:
        self.secrets: set[str] = set()

    def add(self, value: str) -> None:
        if value:
            self.secrets.add(value)

    def __call__(self, value: Any) -> Any:
        if not self.secrets:
            return value
        if isinstance(value, str):
            for secret in self.secrets:
                value = value.replace(secret, "[redacted]")
            return value
        if isinstance(value, dict):
            return {key: self(item) for key, item in value.items()}
        if isinstance(value, list):
            return [self(item) for item in value]
        return value

    async def apply(self, value: Any) -> Any:
        """``self(value)``; in a worker thread when it is large (``ops.redact.off_loop``)."""
        return await off_loop(self, value, passes=len(self.secrets)) if self.secrets else value


def _kube_unavailable(error: k8s_errors.KubeError, detail: str) -> DaemonError:
    retry_after = error.retry_after if isinstance(error, k8s_errors.KubeTooManyRequests) else None
    return KubernetesUnavailable(detail, retry_after=retry_after)


#: Each Kubernetes error class -> its daemon error (``detail`` given); ``as_daemon_error`` takes
#: the first class of an error's MRO found here, so a subclass (``KubeAlreadyExists``) maps as its
#: parent unless listed, and every ``KubeError`` maps (the last row). The operator's own account
#: lacking a permission (403) is not the caller's fault: a typed 500, not the detail-only 403.
KUBE_TO_DAEMON: Final[
    Mapping[type[k8s_errors.KubeError], Callable[[k8s_errors.KubeError, str], DaemonError]]
] = {
    k8s_errors.KubeNotFound: lambda _, detail: NotFound(detail),
    k8s_errors.KubeConflict: lambda _, detail: Conflict(detail),
    k8s_errors.KubeBadRequest: lambda _, detail: Invalid(detail),
    k8s_errors.KubeInvalid: lambda _, detail: Invalid(detail),
    k8s_errors.KubeForbidden: lambda _, detail: DaemonError(detail, type_name="PermissionError"),
    k8s_errors.KubeUnavailable: _kube_unavailable,
    k8s_errors.KubeError: lambda _, detail: DaemonError(detail),
}


def as_daemon_error(error: BaseException) -> DaemonError:
    """Map any failure of an executor to the daemon's error vocabulary: a ``KubeError`` by its
    class (:data:`KUBE_TO_DAEMON`), a timeout to ``OperationTimeout``, anything else to an
    opaque 500 (its details stay in the operator's log)."""
    if isinstance(error, DaemonError):
        return error
    if isinstance(error, k8s_errors.KubeError):
        detail = f"Kubernetes API: {error.message or error.reason or error.status}"
        factory = next(KUBE_TO_DAEMON[cls] for cls in type(error).__mro__ if cls in KUBE_TO_DAEMON)
        return factory(error, detail)
    if isinstance(error, TimeoutError):
        return OperationTimeout(str(error) or "Operation timed out")
    return DaemonError("Operation failed; see operator logs")


def _check_enabled(op: Operation | None, name: str, executors: Mapping[str, Executor]) -> Operation:
    if op is None:
        raise NotFound(f"Unknown operation: {name}")
    if not op.enabled:
        raise FeatureDisabled(op.availability.describe(op.name), attrs={"reason": op.availability.code})
    if op.name not in executors:
        raise NotFound(f"Operation {name} has no executor")
    return op


async def run_query(
    op: Operation,
    arguments: dict[str, Any],
    ctx: OperationContext,
    executors: Mapping[str, Executor],
    *,
    limit: float,
) -> Any:
    """Run a query inline; returns its checked result. Raises ``DaemonError``."""
    _check_enabled(op, op.name, executors)
    try:
        async with asyncio.timeout(limit):
            result = await executors[op.name](ctx, arguments)
    except Exception as error:
        mapped = as_daemon_error(error)
        if isinstance(mapped, KubernetesUnavailable):  # an outage or throttling: no traceback each
            log.warning("query %s: %s", op.name, mapped.detail)
        elif mapped.status >= 500 and not isinstance(error, DaemonError):
            log.exception("query %s failed", op.name)
        raise mapped from error
    result_validator(op.name, op.version, op.result_schema).check_result(op.name, result)
    return result


def _created(obj: Mapping[str, Any]) -> dt.datetime:
    raw = obj.get("metadata", {}).get("creationTimestamp")
    if not raw:
        return dt.datetime.now(dt.UTC)
    return dt.datetime.fromisoformat(str(raw).replace("Z", "+00:00"))


class _Job:
    def __init__(
        self,
        control: JobControl,
        *,
        executor_id: str,
        prompt_timeout: float,
        clock: Callable[[], dt.datetime],
    ) -> None:
        self.control = control
        self.executor_id = executor_id
        self.prompt_timeout = prompt_timeout
        self.clock = clock
        self.redact = Redactor()
        self.created = _created(control.obj)

    def cancel_requested(self) -> bool:
        return bool(self.control.obj.get("spec", {}).get("cancel"))

    async def write(self, mutate: Callable[[DaemonJobStatus, dict[str, Any]], None]) -> None:
        await self.control.write(mutate)

    async def emit(self, kind: str, data: Mapping[str, Any]) -> None:
        payload = self.redact(dict(data))

        def mutate(status: DaemonJobStatus, _obj: dict[str, Any]) -> None:
            jobs.add_event(status, kind, payload, now=self.clock(), created=self.created)

        await self.write(mutate)

    async def finish(self, state: str, *, result: Any = None, error: DaemonError | None = None) -> None:
        if error is not None:
            error = DaemonError(
                self.redact(error.detail),
                attrs=self.redact(error.attrs),
                retryable=error.retryable,
                type_name=error.error_type,
            )
        result = await self.redact.apply(result)

        def mutate(status: DaemonJobStatus, _obj: dict[str, Any]) -> None:
            jobs.finish(status, state, now=self.clock(), created=self.created, result=result, error=error)  # type: ignore[arg-type]

        await self.write(mutate)

    async def prompt(self, kind: str, message: str, *, default: Any = None) -> Any:
        prompt_id = uuid.uuid4().hex[:16]
        expires = self.clock() + dt.timedelta(seconds=self.prompt_timeout)
        if kind == "secret":
            default = None
        event = {
            "prompt_id": prompt_id,
            "kind": kind,
            "message": message,
            "default": default,
            "deadline": expires.timestamp(),
        }

        def ask(status: DaemonJobStatus, _obj: dict[str, Any]) -> None:
            now = self.clock()
            status.prompt = jobs.new_prompt(prompt_id, kind, message, default=default, expires=expires)
            jobs.add_event(status, "prompt", event, now=now, created=self.created)
            jobs.set_state(status, "waiting_input", now=now, created=self.created)

        await self.write(ask)
        while True:
            answer = next(
                (
                    a
                    for a in self.control.obj.get("spec", {}).get("answers") or ()
                    if a.get("promptId") == prompt_id
                ),
                None,
            )
            if answer is not None:
                break
            if self.cancel_requested():
                raise asyncio.CancelledError
            if self.clock() >= expires:

                def expire(status: DaemonJobStatus, _obj: dict[str, Any]) -> None:
                    status.prompt = None
                    now = self.clock()
                    jobs.add_event(
                        status, "prompt_expired", {"prompt_id": prompt_id}, now=now, created=self.created
                    )
                    jobs.set_state(status, "running", now=now, created=self.created)

                await self.write(expire)
                raise OperationTimeout(
                    f"Prompt {prompt_id} was not answered within {self.prompt_timeout:g} seconds"
                )
            await self.control.changed(0.5)
        if "secretRef" in answer:
            value: Any = await self._secret_answer(prompt_id, answer["secretRef"])
        else:
            value = answer.get("value")

        def answered(status: DaemonJobStatus, _obj: dict[str, Any]) -> None:
            now = self.clock()
            status.prompt = None
            jobs.add_event(status, "answered", {"prompt_id": prompt_id}, now=now, created=self.created)
            jobs.set_state(status, "running", now=now, created=self.created)

        await self.write(answered)
        return value

    async def _secret_answer(self, prompt_id: str, ref: Any) -> str:
        """The value of a secret answer: read only from the shim's answer Secret of this job and
        prompt, which is deleted once read (UID precondition). Raises ``AnswerRefused``."""
        job = self.control.obj
        name = answers.secret_name(str(job["metadata"]["name"]), prompt_id)
        why = answers.check_reference(ref, name)
        secret = None
        if why is None:
            secret = await self.control.read_secret(name)
            why = answers.check_secret(secret, job, prompt_id)
        if why is not None or secret is None:
            await self._refuse(prompt_id, why or "no answer Secret")
            raise answers.AnswerRefused(f"Prompt {prompt_id} was refused: {why}", prompt_id=prompt_id)
        value = answers.secret_value(secret)
        self.redact.add(value)
        await self.control.delete_secret(name, str(secret["metadata"]["uid"]))
        return value

    async def _refuse(self, prompt_id: str, why: str) -> None:
        def refuse(status: DaemonJobStatus, _obj: dict[str, Any]) -> None:
            status.prompt = None
            now = self.clock()
            data = {"prompt_id": prompt_id, "reason": "answer_secret_refused", "message": why}
            jobs.add_event(status, "prompt_refused", data, now=now, created=self.created)
            jobs.set_state(status, "running", now=now, created=self.created)

        await self.write(refuse)
        name = self.control.obj["metadata"]["name"]
        log.warning("DaemonJob %s: prompt %s refused: %s", name, prompt_id, why)


async def run_job(
    control: JobControl,
    *,
    catalog: Catalog,
    executors: Mapping[str, Executor],
    make_context: Callable[[dict[str, Any]], OperationContext],
    executor_id: str,
    prompt_timeout: float = 300.0,
    clock: Callable[[], dt.datetime] | None = None,
    authorize: Callable[[Operation, dict[str, Any]], Awaitable[None]] | None = None,
) -> None:
    """Drive one job to a terminal state (see the module docstring). Never raises for job failures.

    ``authorize(op, obj)`` runs right before the executor starts (after validation); a
    ``DaemonError`` it raises fails the job without executing it (ADR 0021: the principal's
    scope is checked again at execution).
    """
    now = clock or (lambda: dt.datetime.now(dt.UTC))
    while True:
        job = _Job(control, executor_id=executor_id, prompt_timeout=prompt_timeout, clock=now)
        claimed = await _claim(job, control, catalog=catalog, executor_id=executor_id, now=now)
        if claimed is not None:
            break
        # Cancelled (or claimed) between our read and write: start over from the new state.
    if not claimed:
        return
    admitted = await _admit(job, control, catalog=catalog, executors=executors, authorize=authorize)
    if admitted is None:
        return
    op, arguments = admitted
    ctx = make_context(control.obj)
    ctx.emit = job.emit
    ctx.prompt = job.prompt
    await _execute(job, control, op, ctx, executors[op.name](ctx, arguments))


async def _claim(
    job: _Job, control: JobControl, *, catalog: Catalog, executor_id: str, now: Callable[[], dt.datetime]
) -> bool | None:
    """Take the job: ``True`` to run it, ``False`` when it is settled (terminal, lost,
    cancelled before it started), ``None`` when the claim lost a race (read again)."""
    obj = control.obj
    state = jobs.state_of(obj)
    status = obj.get("status") or {}
    if state in jobs.TERMINAL:
        return False
    if state in jobs.ACTIVE and status.get("executor") != executor_id:
        return await _take_over(job, control, catalog=catalog, executor_id=executor_id, now=now)
    if state != "queued":
        return True
    if job.cancel_requested():
        await job.finish("cancelled")
        return False

    def claim(st: DaemonJobStatus, current: dict[str, Any]) -> None:
        if jobs.state_of(current) != "queued":
            raise Conflict("job was claimed or cancelled concurrently")
        t = now()
        st.executor = executor_id
        st.started_at = t
        st.attempts = 1
        jobs.set_state(st, "starting", now=t, created=job.created)
        jobs.set_state(st, "running", now=t, created=job.created)

    try:
        await job.write(claim)
    except Conflict:
        return None
    return True


async def _take_over(
    job: _Job, control: JobControl, *, catalog: Catalog, executor_id: str, now: Callable[[], dt.datetime]
) -> bool | None:
    """A job whose executor stopped: resume it (``True``), or record it ``lost`` (``False``)."""
    obj = control.obj
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    name, previous = str(spec.get("operation", "")), status.get("executor")
    attempts = int(status.get("attempts") or 1)
    op = catalog.find(name)
    why = ""
    if op is None or not op.resumable:
        why = f"{name} is not resumable (a second run could repeat its effects)"
    elif jobs.state_of(obj) == "waiting_input":
        why = "it was waiting for input, and answers belong to the executor that asked"
    elif attempts >= MAX_ATTEMPTS:
        why = f"it was already started {attempts} times"
    if why:
        detail = (
            f"The operator executing this job ({previous or 'unknown'}) stopped before it finished; "
            f"{why}. Its effects may be partial: inspect them, then submit it again."
        )
        attrs = {"operation": name, "executor": previous, "attempts": attempts, "resumable": False}
        await job.finish(
            "lost", error=DaemonError(detail, type_name="WorkerLost", attrs=attrs, retryable=True)
        )
        return False

    def resume(st: DaemonJobStatus, current: dict[str, Any]) -> None:
        if (current.get("status") or {}).get("executor") != previous or jobs.state_of(
            current
        ) not in jobs.ACTIVE:
            raise Conflict("job was taken over or settled concurrently")
        st.executor = executor_id
        st.attempts = attempts + 1
        message = (
            f"resumed by {executor_id} (attempt {attempts + 1}): the executor {previous} stopped "
            "before the job finished; the operation runs again from the start"
        )
        data = {"feedback_version": 1, "message": message, "stage": "handover", "attempt": attempts + 1}
        jobs.add_event(st, "feedback", data, now=now(), created=job.created)

    try:
        await job.write(resume)
    except Conflict:
        return None
    log.info("DaemonJob %s: resumed %s after executor %s stopped", obj["metadata"]["name"], name, previous)
    return True


async def _admit(
    job: _Job,
    control: JobControl,
    *,
    catalog: Catalog,
    executors: Mapping[str, Executor],
    authorize: Callable[[Operation, dict[str, Any]], Awaitable[None]] | None,
) -> tuple[Operation, dict[str, Any]] | None:
    """The operation and its validated arguments, or ``None`` after failing the job."""
    spec = control.obj.get("spec", {})
    name = str(spec.get("operation", ""))
    try:
        op = _check_enabled(catalog.find(name), name, executors)
        if int(spec.get("operationVersion", 1)) != op.version:
            raise Invalid(f"Operation {name} version {spec.get('operationVersion')} is not supported")
        arguments = jobs.verified_arguments(spec)  # NB: what the job was created with, or nothing
        request_validator(op.name, op.version, op.request_schema).check_request(arguments)
        if authorize is not None:
            await authorize(op, control.obj)
    except DaemonError as error:
        await job.finish("failed", error=error)
        return None
    except k8s_errors.KubeError as error:
        await job.finish("failed", error=as_daemon_error(error))
        return None
    return op, arguments


async def _execute(
    job: _Job, control: JobControl, op: Operation, ctx: OperationContext, work: Awaitable[Any]
) -> None:
    """Run the executor until it ends or the job is cancelled; settle the job with its outcome."""
    task: asyncio.Task[Any] = asyncio.ensure_future(work)
    task.set_name(f"daemonjob-{ctx.job_id}")
    cancelled = False
    try:
        while not task.done():
            if job.cancel_requested():
                cancelled = True
                task.cancel()
                break
            waiter = asyncio.create_task(control.changed(1.0))
            await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await waiter
    except asyncio.CancelledError:
        # The host is stopping (operator shutdown): stop the executor, leave the job to be found
        # lost by the next executor, as a real worker death would.
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        raise
    try:
        result = await task
    except asyncio.CancelledError:
        if cancelled or job.cancel_requested():
            await job.finish("cancelled")
        else:
            await job.finish("failed", error=DaemonError("Operation was interrupted"))
        return
    except Exception as error:
        mapped = as_daemon_error(error)
        if isinstance(mapped, KubernetesUnavailable):  # an outage or throttling: no traceback each
            log.warning("job %s (%s): %s", ctx.job_id, op.name, mapped.detail)
        elif mapped.status >= 500 and not isinstance(error, DaemonError):
            log.exception("job %s (%s) failed", ctx.job_id, op.name)
        await job.finish("failed", error=mapped)
        return
    await _settle(job, op, result)


async def _settle(job: _Job, op: Operation, result: Any) -> None:
    result = await job.redact.apply(result)
    try:
        result_validator(op.name, op.version, op.result_schema).check_result(op.name, result)
    except DaemonError as error:
        await job.finish("failed", error=error)
        return
    if job.cancel_requested():
        # The executor finished before it saw the cancellation: its effects happened.
        await job.emit("warning", {"message": "Cancellation arrived after the operation completed."})
    await job.finish("succeeded", result=result)
