"""The shim's side of daemon jobs: submit (idempotently), find, list, cancel, answer.

Authorization is the caller's (the shim) business; this module applies the job rules:

- :meth:`JobService.submit` creates the DaemonJob. With an ``Idempotency-Key`` the name is
  derived from (principal, key), so a retry meets ``AlreadyExists``; the existing job is
  returned when its request digest matches, a 409 ``Conflict`` is raised when it does not or when
  the key's job has expired into a tombstone. Keys longer than 200 characters are refused (422),
  and so are arguments over a DaemonJob's bounds (``ops/jobargs.py``: 8 levels deep, ...).
- :meth:`JobService.cancel` sets ``spec.cancel`` and moves the status to ``cancelled`` (queued
  jobs) or ``cancelling``; a finished job is a 409.
- :meth:`JobService.answer` records an answer in ``spec.answers`` for the pending prompt (the
  chart's admission policy lets only the shim change ``spec.answers``). A secret answer goes
  into the answer Secret of the job and prompt (``ops/answers.py``: a name derived from both,
  their labels, owned by the DaemonJob; the spec holds only its reference; the executor reads
  that Secret alone and deletes it); approval/decision answers must be booleans. Every answer
  records who gave it, when and its comment (``ops/answerlog.py``), in the spec entry and in
  ``status.answers``. The same value again is a replay (recorded in ``status.answers``, also
  after the job finished); a different one a 409 ``already_answered``, as is a secret's once the
  executor used it (its value can no longer be compared) or when given again by a principal other
  than who gave it (a comparison would let it test guesses of the secret).
- Quota: a principal may have at most ``max_active_jobs`` unfinished jobs (queued or active,
  counted from the cache plus its submissions in flight); one more is a 429 ``RateLimited``
  with ``attrs.quota = "active_jobs"``. A repeated Idempotency-Key of an existing job is not
  a new job and is never refused by the quota.
"""

from __future__ import annotations

import datetime as dt
import hmac
import re
from collections.abc import Callable
from typing import Any

from sparkrun_operator.api.daemonjob import DaemonJobStatus
from sparkrun_operator.k8s import errors as k8s_errors
from sparkrun_operator.k8s.auth import UserInfo
from sparkrun_operator.k8s.client import retry_conflicts
from sparkrun_operator.k8s.daemonjobs import DAEMON_JOBS, DaemonJobs, JobCache
from sparkrun_operator.k8s.resources import SECRETS
from sparkrun_operator.ops import answerlog, answers, ifmatch, jobs
from sparkrun_operator.ops.catalog import Operation
from sparkrun_operator.ops.errors import Conflict, Invalid, TooManyRequests

__all__ = ["DEFAULT_MAX_ACTIVE_JOBS", "JOB_ID", "JobService"]

#: Unfinished jobs one principal may have at once.
DEFAULT_MAX_ACTIVE_JOBS = 32

#: Job ids are DaemonJob names: 32 lowercase hex characters.
JOB_ID = re.compile(r"^[0-9a-f]{32}$")
_ORDER = {"starting": 0, "running": 0, "waiting_input": 0, "cancelling": 0, "queued": 1}


def _created(obj: dict[str, Any]) -> str:
    return str(obj.get("metadata", {}).get("creationTimestamp") or "")


class JobService:
    """Job rules over the DaemonJobs of one namespace."""

    def __init__(
        self,
        daemonjobs: DaemonJobs,
        cache: JobCache,
        *,
        clock: Callable[[], dt.datetime] | None = None,
        max_active_jobs: int = DEFAULT_MAX_ACTIVE_JOBS,
    ) -> None:
        self.daemonjobs = daemonjobs
        self.cache = cache
        self.clock = clock or (lambda: dt.datetime.now(dt.UTC))
        self.max_active_jobs = max_active_jobs
        #: Submissions in flight per principal (not in the cache yet).
        self._submitting: dict[str, int] = {}

    def unfinished(self, principal: str) -> int:
        """The principal's queued and active jobs (cache and submissions in flight)."""
        wanted = jobs.principal_label(principal)
        count = self._submitting.get(principal, 0)
        for obj in self.cache.values():
            if (obj["metadata"].get("labels") or {}).get(jobs.LABEL_PRINCIPAL) != wanted:
                continue
            if (obj.get("spec", {}).get("principal") or {}).get("username") != principal:
                continue
            if jobs.state_of(obj) not in jobs.TERMINAL and not jobs.is_tombstone(obj):
                count += 1
        return count

    def _admit(self, principal: str, name: str, key: str | None) -> None:
        if key is not None and any(o["metadata"]["name"] == name for o in self.cache.values()):
            return  # a retry of an existing job
        if self.unfinished(principal) >= self.max_active_jobs:
            raise TooManyRequests(
                f"Active job quota reached ({self.max_active_jobs} unfinished jobs per principal)",
                retry_after=5.0,
                attrs={"quota": "active_jobs", "limit": self.max_active_jobs},
            )

    async def submit(
        self,
        op: Operation,
        arguments: dict[str, Any],
        *,
        user: UserInfo,
        manager: str,
        client: str | None,
        key: str | None,
        if_match: str | None = None,
    ) -> str:
        """Create (or find, for a repeated key) the job; returns its id. ``if_match``: the
        resourceVersion the job's write of its target must still find (``spec.ifMatch``)."""
        if key is not None and len(key) > jobs.MAX_KEY_LENGTH:
            raise Invalid(f"Idempotency key exceeds {jobs.MAX_KEY_LENGTH} characters")
        jobs.check_arguments(arguments)  # the CRD's bounds, as a 422 naming the path
        digest = jobs.request_digest(op.name, op.version, arguments, manager, if_match=if_match)
        name = jobs.job_name(user.username, key)
        obj = jobs.new_job(
            name=name,
            namespace=self.daemonjobs.namespace,
            operation=op.name,
            version=op.version,
            arguments=arguments,
            username=user.username,
            uid=user.uid,
            groups=user.groups,
            manager=manager,
            client=client,
            key=key,
            digest=digest,
            if_match=if_match,
        )
        self._admit(user.username, name, key)
        self._submitting[user.username] = self._submitting.get(user.username, 0) + 1
        try:
            return await self._create(obj, name, key=key, username=user.username, digest=digest)
        finally:
            left = self._submitting[user.username] - 1
            if left:
                self._submitting[user.username] = left
            else:
                del self._submitting[user.username]

    async def _create(
        self, obj: dict[str, Any], name: str, *, key: str | None, username: str, digest: str
    ) -> str:
        for _ in range(3):
            try:
                created = await self.daemonjobs.create(obj)
            except k8s_errors.KubeError as error:
                if not (isinstance(error, k8s_errors.KubeAlreadyExists) and key is not None):
                    raise
            else:
                await self.cache.observe(created)
                return name
            existing = await self.daemonjobs.get(name)
            if existing is None:
                continue  # deleted in between: create again
            await self.cache.observe(existing)
            if jobs.is_tombstone(existing):
                raise Conflict("The previous result expired; this idempotency key cannot execute again")
            spec = existing.get("spec", {})
            same_principal = (spec.get("principal") or {}).get("username") == username
            if not same_principal or spec.get("requestDigest") != digest:
                raise Conflict("Idempotency key was already used for different arguments")
            return name
        raise Conflict("The job for this idempotency key keeps changing; retry")

    async def find(self, job_id: str) -> dict[str, Any] | None:
        """The job, or ``None`` (unknown id, malformed id, or expired)."""
        if not JOB_ID.match(job_id):
            return None
        found = await self.cache.get(job_id)
        if found is None or jobs.is_tombstone(found):
            return None
        return found

    def listing(self, *, principal: str | None, state: str | None, limit: int) -> list[dict[str, Any]]:
        """Jobs (of ``principal`` unless ``None``), active first, then queued, newest first."""
        rows = self.matching(principal=principal, state=state)
        rows.sort(key=_created, reverse=True)
        rows.sort(key=lambda o: _ORDER.get(jobs.state_of(o), 2))
        return rows[: min(max(limit, 1), 1000)]

    def matching(self, *, principal: str | None, state: str | None) -> list[dict[str, Any]]:
        """Every job (of ``principal`` unless ``None``, in ``state`` unless ``None``), unordered:
        the listing above, and the cursor pages of ``/v1/jobs`` (``ops/paging.py``)."""
        wanted = jobs.principal_label(principal) if principal is not None else None
        rows = []
        for obj in self.cache.values():
            if jobs.is_tombstone(obj):
                continue
            if (
                wanted is not None
                and (obj["metadata"].get("labels") or {}).get(jobs.LABEL_PRINCIPAL) != wanted
            ):
                continue
            if (
                wanted is not None
                and (obj.get("spec", {}).get("principal") or {}).get("username") != principal
            ):
                continue
            current = jobs.state_of(obj)
            if state is not None and current != state:
                continue
            rows.append(obj)
        return rows

    async def cancel(self, obj: dict[str, Any], *, if_match: str | None = None) -> dict[str, Any]:
        """Request cancellation; returns the updated job. Raises ``Conflict`` when finished.

        The status moves first (``cancelling``, or ``cancelled`` for a queued job), then
        ``spec.cancel`` is set, which is what the executor acts on: the executor's terminal write
        can therefore never race ahead of the request that caused it. ``if_match`` (the
        resourceVersion an If-Match matched, ADR 0049): the status write is made at it, once; a
        job that changed since is ``PreconditionFailed``.
        """
        name = obj["metadata"]["name"]
        fresh = await self.daemonjobs.get(name) or obj
        if jobs.state_of(fresh) in jobs.TERMINAL:
            raise Conflict("Job is already finished")

        def mutate(status: DaemonJobStatus, current: dict[str, Any]) -> None:
            jobs.cancel(status, now=self.clock(), created=_created_at(current))

        if if_match is None:
            await self.daemonjobs.update_status(fresh, mutate)
        else:  # NB: If-Match (ADR 0049): once, at the version the caller saw; a 409 is a 412
            await ifmatch.unchanged(self.daemonjobs.kube, DAEMON_JOBS, fresh, if_match)
            async with ifmatch.write(
                self.daemonjobs.kube, DAEMON_JOBS, name, self.daemonjobs.namespace, if_match
            ):
                await self.daemonjobs.update_status(fresh, mutate, conditional=True)
        written = await self.daemonjobs.patch_spec(name, {"cancel": True})
        await self.cache.observe(written)
        return written

    async def answer(
        self,
        obj: dict[str, Any],
        prompt_id: str,
        value: Any,
        *,
        by: str,
        comment: str | None = None,
        if_match: str | None = None,
    ) -> bool:
        """Answer the pending prompt ``prompt_id`` as principal ``by`` (see the module docstring);
        ``True`` when it was answered already with this very value (a replay: recorded, nothing
        else changes, also after the job finished). A different value is a 409
        (``attrs.reason`` ``already_answered``)."""
        name = obj["metadata"]["name"]
        prompt = (obj.get("status") or {}).get("prompt") or {}
        recorded = obj.get("spec", {}).get("answers") or []
        previous = next((a for a in recorded if a.get("promptId") == prompt_id), None)
        if previous is not None:
            await self._replay(obj, previous, value, by=by, comment=comment)
            return True
        if jobs.state_of(obj) in jobs.TERMINAL:
            raise Conflict("Worker has finished; fetch the job result")
        if prompt.get("id") != prompt_id:
            raise Conflict("Prompt expired or unavailable")
        deadline = jobs.epoch(prompt.get("expiresAt"))
        now = self.clock()
        if deadline is not None and deadline < now.timestamp():
            raise Conflict("Prompt expired or unavailable")
        kind = prompt.get("kind")
        if kind == "secret":
            if value is not None and not isinstance(value, str):
                raise Invalid("Credential answer must be a string")
            secret = await self._store_secret(obj, prompt_id, value or "")
            ref = {"name": secret, "key": answers.SECRET_KEY}
            entry = answerlog.spec_entry(prompt_id, secret_ref=ref, by=by, at=now, comment=comment)
        else:
            if type(value) is not bool:
                raise Invalid("Approval answers must be boolean")
            entry = answerlog.spec_entry(prompt_id, value=value, by=by, at=now, comment=comment)

        async def attempt() -> dict[str, Any]:
            current = await self.daemonjobs.get(name)
            if current is None:
                raise Conflict("Worker has finished; fetch the job result")
            existing = current.get("spec", {}).get("answers") or []
            if any(a.get("promptId") == prompt_id for a in existing):
                return current  # NB: answered meanwhile: judged as a replay below
            return await self.daemonjobs.patch_spec(
                name,
                {"answers": [*existing, entry]},
                resource_version=if_match or current["metadata"]["resourceVersion"],
            )

        if if_match is None:
            written = await retry_conflicts(attempt)
        else:  # NB: If-Match (ADR 0049): once, at the version the caller saw; a 409 is a 412
            async with ifmatch.write(
                self.daemonjobs.kube, DAEMON_JOBS, name, self.daemonjobs.namespace, if_match
            ):
                written = await attempt()
        await self.cache.observe(written)
        mine = next(a for a in written["spec"]["answers"] if a.get("promptId") == prompt_id)
        if mine != entry:  # another answer won the race: this one is its replay, or refused
            await self._replay(written, mine, value, by=by, comment=comment)
            return True

        def note(status: DaemonJobStatus, _current: dict[str, Any]) -> None:
            answerlog.record(status, entry, kind=kind)

        await self._write_record(written, note)
        return False

    async def _replay(
        self, obj: dict[str, Any], previous: dict[str, Any], value: Any, *, by: str, comment: str | None
    ) -> None:
        """``value`` given again for the answer ``previous``: a 409 unless it is the same value;
        the same value is recorded as a replay by ``by``."""
        prompt_id = str(previous.get("promptId"))
        if "secretRef" in previous:
            # NB: compared only for who gave it: anyone else could test guesses of the secret
            if previous.get("answeredBy") != by:
                raise Conflict(
                    "Prompt was already answered; a secret answer is replayed only by who gave it",
                    attrs={"reason": "already_answered", "prompt_id": prompt_id},
                )
            same = isinstance(value, str) and await self._secret_is(obj, prompt_id, value)
        else:
            same = type(value) is bool and previous.get("value") is value
        if not same:
            raise Conflict(
                "Prompt was already answered with a different value",
                attrs={"reason": "already_answered", "prompt_id": prompt_id},
            )
        kind = ((obj.get("status") or {}).get("prompt") or {}).get("kind")
        now = self.clock()

        def note(status: DaemonJobStatus, _current: dict[str, Any]) -> None:
            answerlog.replay(status, previous, kind=kind, by=by, at=now, comment=comment)

        await self._write_record(obj, note)

    async def _secret_is(self, obj: dict[str, Any], prompt_id: str, value: str) -> bool:
        """Whether the answer Secret of ``prompt_id`` still holds ``value``: ``False`` once the
        executor read (and deleted) it, as the value can then no longer be compared."""
        name = answers.secret_name(str(obj["metadata"]["name"]), prompt_id)
        found = await self.daemonjobs.kube.get(SECRETS, name, self.daemonjobs.namespace)
        if found is None or answers.check_secret(found, obj, prompt_id) is not None:
            return False
        return hmac.compare_digest(answers.secret_value(found).encode(), value.encode())

    async def _write_record(
        self, obj: dict[str, Any], note: Callable[[DaemonJobStatus, dict[str, Any]], None]
    ) -> None:
        """Write the answer record into ``status.answers`` (``ops/answerlog.py``)."""
        written = await self.daemonjobs.update_status(obj, note)
        await self.cache.observe(written)

    async def _store_secret(self, obj: dict[str, Any], prompt_id: str, value: str) -> str:
        """Create the answer Secret of ``prompt_id`` (``ops/answers.py``); returns its name. A
        Secret already under that name is this answer's only if it passes the executor's check
        and holds the same value (a retry); otherwise the prompt cannot be answered (409)."""
        if not answers.valid_prompt_id(prompt_id):
            raise Conflict("Prompt expired or unavailable")
        namespace = self.daemonjobs.namespace
        secret = answers.secret_body(obj, prompt_id, value, namespace=namespace)
        name: str = secret["metadata"]["name"]
        try:
            await self.daemonjobs.kube.create(SECRETS, secret, namespace)
        except k8s_errors.KubeAlreadyExists:
            existing = await self.daemonjobs.kube.get(SECRETS, name, namespace)
            if existing is None or answers.check_secret(existing, obj, prompt_id) is not None:
                raise Conflict(
                    f"The answer Secret {name} exists and was not created by the daemon API; "
                    "this prompt cannot be answered"
                ) from None
            if answers.secret_value(existing) != value:
                raise Conflict(
                    "Prompt was already answered with a different value",
                    attrs={"reason": "already_answered", "prompt_id": prompt_id},
                ) from None
        return name


def _created_at(obj: dict[str, Any]) -> dt.datetime:
    raw = obj.get("metadata", {}).get("creationTimestamp")
    if not raw:
        return dt.datetime.now(dt.UTC)
    return dt.datetime.fromisoformat(str(raw).replace("Z", "+00:00"))
