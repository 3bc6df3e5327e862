"""The DaemonJob controller: executes the jobs the daemon API shim accepted.

One :class:`JobExecutor` per operator process (kept in kopf's ``memo``) is fed by a kopf event
handler (``on.event``: no finalizers, no kopf bookkeeping on the objects). It

- starts one task per non-terminal job it sees (:func:`~sparkrun_operator.ops.runner.run_job`),
  handing it the latest object of every later event (cancellation and prompt answers arrive as
  spec changes);
- takes over the active jobs whose executor is dead (its Lease expired or was released): a
  resumable one runs again from the start, the others are recorded ``lost`` with a retryable
  error (``ops.runner``, ADR 0025); jobs of a live executor (another replica) are left alone;
- renews its own executor Lease every few seconds (``ops.leases``), so ``/v1/reservations``
  can tell live claims from dead ones;
- applies retention every few minutes: finished jobs older than 7 days are deleted or, when
  submitted with an idempotency key, reduced to tombstones kept 30 days.

On shutdown running tasks are cancelled and the executor's Leases deleted, so the next
executor takes their jobs over without waiting for the Leases to expire.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import datetime as dt
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from typing import Any

import kopf

from sparkrun_operator.api.daemonjob import DaemonJobStatus
from sparkrun_operator.api.meta import GROUP, VERSION
from sparkrun_operator.api.resources import DAEMON_JOB
from sparkrun_operator.k8s import errors as k8s_errors
from sparkrun_operator.k8s.auth import Authorizer
from sparkrun_operator.k8s.client import DAEMON_API_MANAGER, Kube
from sparkrun_operator.k8s.daemonjobs import DaemonJobs
from sparkrun_operator.k8s.resources import SECRETS
from sparkrun_operator.ops import authz, jobs, leases
from sparkrun_operator.ops import catalog as catalog_mod
from sparkrun_operator.ops.catalog import Operation
from sparkrun_operator.ops.executors import EXECUTORS
from sparkrun_operator.ops.invocation import Executor, OperationContext
from sparkrun_operator.ops.runner import run_job
from sparkrun_operator.ops.settings import Settings
from sparkrun_operator.retry import Attempts, Backoff

__all__ = ["JobExecutor", "register"]

log = logging.getLogger("sparkrun.daemonjobs")

#: How long an executor's Lease stays valid without renewal (``$SPARKRUN_EXECUTOR_LEASE_SECONDS``);
#: a job whose executor's Lease expired is lost. Renewed every third of it.
LEASE_ENV = "SPARKRUN_EXECUTOR_LEASE_SECONDS"
RETENTION_SECONDS = 300.0
#: How long a principal's scope check is reused (positive and negative): revocation is seen
#: by the next job within this.
AUTHZ_TTL = 2.0
#: Seconds a job's own write outranks watch events that do not carry it yet.
WRITE_HOLD = 5.0


def executor_identity() -> str:
    """``<pod or host>/<pid>/<random>``: unique per process start."""
    host = os.environ.get("POD_NAME") or socket.gethostname()
    return f"{host}/{os.getpid()}/{uuid.uuid4().hex[:8]}"


class _Control:
    """:class:`~sparkrun_operator.ops.runner.JobControl` of one job."""

    def __init__(self, executor: JobExecutor, obj: dict[str, Any]) -> None:
        self.executor = executor
        self._obj = obj
        self.event = asyncio.Event()
        #: resourceVersion of our last write until the watch delivers it, and since when.
        self._written: tuple[str, float] | None = None
        #: resourceVersions the watch delivered lately (our write may arrive before it returns).
        self._offered: collections.deque[str] = collections.deque(maxlen=16)

    @property
    def obj(self) -> dict[str, Any]:
        return self._obj

    def offer(self, obj: dict[str, Any]) -> None:
        """A copy from a watch event. resourceVersions are opaque (never compared for order):
        a watch delivers one object's events in order, so after our own write every event
        before the one carrying our write's resourceVersion is older than what we hold and is
        ignored; from that event on, the watch is current again. If the watch never shows it
        (a relist skipped it), it is trusted again after :data:`WRITE_HOLD` seconds."""
        version = _rv(obj)
        self._offered.append(version)
        if self._written is not None:
            written, since = self._written
            if version != written and time.monotonic() - since < WRITE_HOLD:
                return
            self._written = None
        self._accept(obj)

    def _accept(self, obj: dict[str, Any]) -> None:
        self._obj = obj
        self.event.set()

    async def write(self, mutate: Callable[[DaemonJobStatus, dict[str, Any]], None]) -> None:
        jobs_client = self.executor.jobs_in(self._obj["metadata"]["namespace"])
        written = await jobs_client.update_status(self._obj, mutate)
        version = _rv(written)
        if version in self._offered:
            # NB: the watch delivered our write (and maybe later changes, e.g. a cancel) while the
            # call returned: what we hold is as new as the write or newer; keep it.
            self._written = None
            self.event.set()
            return
        self._written = (version, time.monotonic())
        self._accept(written)

    async def changed(self, wait: float) -> None:
        self.event.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.event.wait(), wait)

    async def read_secret(self, name: str) -> dict[str, Any] | None:
        # NB: the runner asks only for the answer Secret of this job's prompt (ops/answers.py)
        # and checks what it gets before using it.
        return await self.executor.rest.get(SECRETS, name, self._obj["metadata"]["namespace"])

    async def delete_secret(self, name: str, uid: str) -> None:
        namespace = self._obj["metadata"]["namespace"]
        try:
            await self.executor.rest.delete(SECRETS, name, namespace, propagation="Background", uid=uid)
        except k8s_errors.KubeConflict:
            # Replaced since it was read: the new object is not the one read; leave it.
            log.warning("answer Secret %s/%s was replaced after it was read; not deleted", namespace, name)


def _rv(obj: dict[str, Any]) -> str:
    return str(obj.get("metadata", {}).get("resourceVersion") or "")


class JobExecutor:
    """Runs DaemonJobs; one per operator process."""

    def __init__(
        self,
        rest: Kube,
        *,
        settings: Settings | None = None,
        executors: dict[str, Executor] | None = None,
        executor_id: str | None = None,
        clock: Callable[[], dt.datetime] | None = None,
        verify_principals: bool = True,
    ) -> None:
        self.rest = rest
        #: Check each job's principal with SubjectAccessReviews before executing (ADR 0021).
        self.verify_principals = verify_principals
        self._authorizers: dict[str, Authorizer] = {}
        self.settings = settings or Settings()
        self.catalog = catalog_mod.load()
        self.executors = executors if executors is not None else EXECUTORS
        self.executor_id = executor_id or executor_identity()
        #: The operator's own namespace: its executor Lease lives here, whatever namespace a job
        #: is in (the chart grants Leases only in the release namespace; the shim reads them there).
        self.home = self.settings.namespace
        #: The operator's Pod, owner of the Lease (collected with the Pod; ``None`` outside one).
        self.owner = leases.pod_owner(self.home)
        #: Whether this executor has written its Lease (then :meth:`stop` releases it).
        self.leased = False
        self.clock = clock or (lambda: dt.datetime.now(dt.UTC))
        self.controls: dict[tuple[str, str], _Control] = {}
        self.tasks: dict[tuple[str, str], asyncio.Task[None]] = {}
        self.namespaces: set[str] = set()
        self._background: list[asyncio.Task[None]] = []
        self._clients: dict[str, DaemonJobs] = {}
        self.lease_seconds = max(3, int(os.environ.get(LEASE_ENV, leases.LEASE_SECONDS)))
        #: Active jobs of other executors that were alive when last checked.
        self.foreign: dict[tuple[str, str], dict[str, Any]] = {}

    def jobs_in(self, namespace: str) -> DaemonJobs:
        client = self._clients.get(namespace)
        if client is None:
            client = self._clients[namespace] = DaemonJobs(self.rest, namespace)
        return client

    def start(self) -> None:
        """Start lease renewal and retention (call once, inside the event loop)."""
        if not self._background:
            self._background = [
                asyncio.create_task(self._renew_leases(), name="daemonjob-lease"),
                asyncio.create_task(self._retention(), name="daemonjob-retention"),
            ]

    async def stop(self) -> None:
        """Cancel background work and running jobs, then release this executor's Leases: the
        next executor resumes the resumable jobs (and records the others lost) at once."""
        tasks = [*self._background, *self.tasks.values()]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._background.clear()
        self.tasks.clear()
        if not self.leased:
            return  # NB: it never saw a job: no Lease to release (and maybe no right to)
        try:
            await leases.release(self.rest, self.home, self.executor_id)
        except Exception:  # NB: best effort: the Lease then expires by itself
            log.warning("releasing the executor lease in %s failed", self.home, exc_info=True)

    async def observe(self, kind: str, obj: dict[str, Any]) -> None:
        """Handle one watch event of a DaemonJob."""
        meta = obj.get("metadata") or {}
        key = (meta.get("namespace", ""), meta.get("name", ""))
        if kind == "DELETED":
            self.foreign.pop(key, None)
            task = self.tasks.pop(key, None)
            if task is not None:
                task.cancel()
            self.controls.pop(key, None)
            return
        self.namespaces.add(key[0])
        control = self.controls.get(key)
        if control is not None:
            control.offer(obj)
            return
        self.foreign.pop(key, None)
        state = jobs.state_of(obj)
        if state in jobs.TERMINAL or jobs.is_tombstone(obj):
            await self._observe_finished(obj)
            return
        status = obj.get("status") or {}
        if state in jobs.ACTIVE and status.get("executor") != self.executor_id:
            owner = status.get("executor")
            alive = await leases.executor_liveness(self.rest, self.home)
            if owner and alive.get(owner):
                self.foreign[key] = obj  # a live executor (another replica) runs it; checked again later
                return
        self._spawn(key, obj)

    async def _observe_finished(self, obj: dict[str, Any]) -> None:
        """Stamp ``observedGeneration`` on a finished job whose spec changed after it ended (a
        late ``cancel``): nothing is left to do for it, and saying so keeps GitOps health checks
        (kstatus's generation rule) from waiting on it forever. A job finished before
        ``observedGeneration`` was written and never changed since is left alone (no mass
        rewrite on upgrade: without the field the rule does not apply)."""
        generation = (obj.get("metadata") or {}).get("generation")
        observed = (obj.get("status") or {}).get("observedGeneration")
        if not isinstance(generation, int) or generation <= (observed if isinstance(observed, int) else 1):
            return
        client = self.jobs_in(obj["metadata"]["namespace"])
        try:
            await client.update_status(obj, _unchanged)
        except (k8s_errors.KubeError, LookupError, RuntimeError) as error:
            log.info("observedGeneration of DaemonJob %s not written: %s", obj["metadata"]["name"], error)

    def _spawn(self, key: tuple[str, str], obj: dict[str, Any]) -> None:
        control = self.controls[key] = _Control(self, obj)
        self.tasks[key] = asyncio.create_task(self._run(key, control), name=f"daemonjob-{key[1]}")

    def _context(self, obj: dict[str, Any]) -> OperationContext:
        meta, spec = obj["metadata"], obj.get("spec") or {}
        return OperationContext(
            rest=self.rest,
            settings=dataclasses.replace(self.settings, namespace=meta["namespace"]),
            principal=(spec.get("principal") or {}).get("username", ""),
            manager=spec.get("manager", "daemon"),
            operation=spec.get("operation", ""),
            job_id=meta["name"],
            job_uid=meta.get("uid"),
            user=authz.principal_of(spec),
            if_match=spec.get("ifMatch"),
        )

    def authorizer_in(self, namespace: str) -> Authorizer:
        found = self._authorizers.get(namespace)
        if found is None:
            found = self._authorizers[namespace] = Authorizer(
                self.rest, namespace, ttl=AUTHZ_TTL, negative_ttl=AUTHZ_TTL
            )
        return found

    async def _authorize(self, op: Operation, obj: dict[str, Any]) -> None:
        """The job must be in the daemon API's namespace and its principal must hold the
        operation's scope now (ADR 0021).

        Jobs run only in :attr:`home` (the namespace of the operator and the shim): the daemon
        scopes mean something only there (``daemon-roles.yaml``), and an operation takes the job's
        namespace as the API's, so a job elsewhere would let a tenant's own namespace stand in
        for it (``plugins.k8s.configure_service_account`` binding a cluster role, ``cluster.*``).
        ``spec.principal`` is trusted as far as admission lets it be written
        (``manifests/daemonjob-admission.yaml``: only the shim writes another user's principal);
        the scope is checked again here, with the principal's own identity.
        """
        namespace = obj["metadata"]["namespace"]
        if namespace != self.home:
            raise authz.PrincipalNotAuthorized(
                f"DaemonJobs run only in the daemon API's namespace {self.home!r}; this job is in "
                f"{namespace!r}: submit it through the daemon API (POST /v1/ops/{op.name})",
                attrs={"reason": "namespace_not_served", "namespace": namespace},
            )
        if not self.verify_principals:
            return
        user = authz.principal_of(obj.get("spec") or {})
        if user is None:
            raise authz.PrincipalNotAuthorized(
                "The job names no principal", attrs={"reason": "principal_missing"}
            )
        await authz.check_scope(self.authorizer_in(namespace), user, op.scope, secret=op.secret)

    async def _run(self, key: tuple[str, str], control: _Control) -> None:
        try:
            await self._renew()
            await run_job(
                control,
                catalog=self.catalog,
                executors=self.executors,
                make_context=self._context,
                executor_id=self.executor_id,
                prompt_timeout=self.settings.prompt_timeout,
                clock=self.clock,
                authorize=self._authorize,
            )
        except asyncio.CancelledError:
            raise
        except LookupError:
            log.info("DaemonJob %s/%s disappeared while running", *key)
        except Exception:
            log.exception("DaemonJob %s/%s: executor failed", *key)
        finally:
            self.tasks.pop(key, None)
            self.controls.pop(key, None)

    async def _renew_leases(self) -> None:
        period = self.lease_seconds / 3
        # NB: a failed renewal is retried sooner (jittered back-off up to the period).
        failures = Attempts(Backoff(initial=min(0.5, period), maximum=period))
        while True:
            failed = False
            try:
                if self.namespaces:
                    await self._renew()
                    await self._recheck_foreign()
            except Exception:
                failed = True
                log.warning("renewing the executor lease in %s failed", self.home, exc_info=True)
            if failed:
                await failures.wait()
            else:
                failures.reset()
                await asyncio.sleep(period)

    async def _renew(self) -> None:
        self.leased = True  # NB: before the call: a renewal that reached the apiserver may have written it
        await leases.renew(
            self.rest, self.home, self.executor_id, duration=self.lease_seconds, owner=self.owner
        )

    async def _recheck_foreign(self) -> None:
        """Take over (as lost) the active jobs of executors that died since we last looked."""
        waiting = list(self.foreign)
        if not waiting:
            return
        alive = await leases.executor_liveness(self.rest, self.home)
        for key in waiting:
            obj = self.foreign[key]
            owner = (obj.get("status") or {}).get("executor")
            if not (owner and alive.get(owner)) and key not in self.controls:
                del self.foreign[key]
                self._spawn(key, obj)

    async def _retention(self) -> None:
        while True:
            await asyncio.sleep(RETENTION_SECONDS)
            for namespace in sorted(self.namespaces):
                try:
                    await self.apply_retention(namespace)
                except Exception:
                    log.warning("DaemonJob retention in %s failed", namespace, exc_info=True)

    async def apply_retention(self, namespace: str) -> list[tuple[str, str]]:
        """Tombstone or delete expired jobs of ``namespace``; returns what was done."""
        client = self.jobs_in(namespace)
        objects = await client.list_all()
        actions = jobs.retention_actions(objects, now=self.clock())
        by_name = {o["metadata"]["name"]: o for o in objects}
        for name, action in actions:
            obj = by_name[name]
            try:
                if action == "delete":
                    await client.delete(name, uid=obj["metadata"].get("uid"))
                else:
                    await _tombstone(client, obj)
            except (k8s_errors.KubeError, LookupError) as error:
                log.info("retention of DaemonJob %s/%s: %s", namespace, name, error)
        return list(actions)


def _unchanged(_status: DaemonJobStatus, _current: dict[str, Any]) -> None:
    """A status write that changes nothing but ``observedGeneration`` (``DaemonJobs.update_status``)."""


async def _tombstone(client: DaemonJobs, obj: dict[str, Any]) -> None:
    def strip(status: DaemonJobStatus, _current: dict[str, Any]) -> None:
        status.result = None
        status.result_gzip = None
        status.events = []
        status.prompt = None

    await client.update_status(obj, strip)
    await client.label(obj["metadata"]["name"], {jobs.LABEL_TOMBSTONE: "true"})


def register(
    registry: kopf.OperatorRegistry,
    *,
    settings: Settings | None = None,
    rest_factory: Callable[[Any], Kube] | None = None,
) -> None:
    """Add the DaemonJob handlers to ``registry``.

    The executor is created at startup on the operator's connection pool (``memo.ctx.kube``),
    writing as field manager ``sparkrun-daemon-api`` (it runs daemon operations), unless
    ``rest_factory(memo)`` is given, and kept as ``memo.daemonjobs``.
    """

    @kopf.on.startup(id="daemonjob-executor-start", registry=registry)
    async def start(*, memo: Any, **_: Any) -> None:
        rest = (
            rest_factory(memo) if rest_factory is not None else memo.ctx.kube.as_manager(DAEMON_API_MANAGER)
        )
        executor = JobExecutor(rest, settings=settings)
        executor.start()
        memo.daemonjobs = executor

    @kopf.on.cleanup(id="daemonjob-executor-stop", registry=registry)
    async def stop(*, memo: Any, **_: Any) -> None:
        executor = getattr(memo, "daemonjobs", None)
        if executor is not None:
            await executor.stop()

    @kopf.on.event(GROUP, VERSION, DAEMON_JOB.plural, id="daemonjob-events", registry=registry)
    async def event(*, type: str | None, body: Any, memo: Any, **_: Any) -> None:
        executor: JobExecutor | None = getattr(memo, "daemonjobs", None)
        if executor is None:
            return
        await executor.observe(type or "ADDED", _plain(body))


def _plain(value: Any) -> Any:
    """A deep plain-dict copy of a kopf body (so later events do not mutate what a job holds)."""
    if isinstance(value, dict) or hasattr(value, "items"):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
