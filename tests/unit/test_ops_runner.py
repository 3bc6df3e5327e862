"""Driving one job to a terminal state (``ops/runner.py``), with an in-memory job host.

The host (:class:`MemoryControl`) keeps the DaemonJob as the apiserver would (a resourceVersion
bumped on every write) and lets the test act as the shim: set ``spec.cancel``, append answers.
The runner, the status transitions, the catalog and the result schemas are the real ones;
executors are small test functions.

Tested: success; a failure's typed error; an unexpected exception becomes an opaque internal
error; an invalid result fails with ``invalid_operation_result``; cancellation of a running
executor (no effect after the terminal state); cancellation before start; a job of another
(dead) executor becomes ``lost`` and its executor never runs; approval prompts answered and
timed out; a secret answer is read, its Secret deleted, and its value redacted from events and
results; a secret answer naming any Secret but the shim's answer Secret of the job and prompt
(or a Secret planted under that name) fails the job unread; a disabled operation fails with
``FeatureDisabled``; queries run inline with a timeout.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import Callable
from typing import Any

import pytest

from sparkrun_operator.api.daemonjob import DaemonJobStatus
from sparkrun_operator.ops import answers, catalog, jobs
from sparkrun_operator.ops.errors import DaemonError, NotFound, OperationTimeout
from sparkrun_operator.ops.invocation import Executor, OperationContext
from sparkrun_operator.ops.runner import run_job, run_query
from sparkrun_operator.ops.settings import Settings

OPS = catalog.load()
CLUSTER = {
    "name": "lab",
    "description": "",
    "host_count": 1,
    "hosts": ["a"],
    "default": False,
}


class MemoryControl:
    """A DaemonJob host in memory."""

    def __init__(self, obj: dict[str, Any]) -> None:
        self._obj = obj
        self.version = 1
        self.changed_event = asyncio.Event()
        #: Secrets of the job's namespace by name; the names read and (name, uid) deleted.
        self.secrets: dict[str, dict[str, Any]] = {}
        self.read: list[str] = []
        self.deleted: list[tuple[str, str]] = []
        self.writes = 0

    @property
    def obj(self) -> dict[str, Any]:
        return self._obj

    async def write(self, mutate: Callable[[DaemonJobStatus, dict[str, Any]], None]) -> None:
        status = DaemonJobStatus.model_validate(self._obj.get("status") or {})
        mutate(status, self._obj)
        self._obj = {**self._obj, "status": status.to_wire()}
        self.writes += 1
        self.changed_event.set()

    async def changed(self, wait: float) -> None:
        self.changed_event.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.changed_event.wait(), wait)

    async def read_secret(self, name: str) -> dict[str, Any] | None:
        self.read.append(name)
        return self.secrets.get(name)

    async def delete_secret(self, name: str, uid: str) -> None:
        self.deleted.append((name, uid))

    # -- the shim's side ---------------------------------------------------------------------

    def set_spec(self, **fields: Any) -> None:
        self._obj = {**self._obj, "spec": {**self._obj["spec"], **fields}}
        self.changed_event.set()

    def state(self) -> str:
        return jobs.state_of(self._obj)

    async def reach(self, state: str) -> None:
        """Return once the job is in ``state`` (woken by every write)."""
        while self.state() != state:
            await self.changed(1.0)

    def events(self) -> list[dict[str, Any]]:
        return jobs.events(self._obj)[0]


def _job(operation: str, arguments: dict[str, Any], **status: Any) -> dict[str, Any]:
    obj = jobs.new_job(
        name="b" * 32,
        namespace="ns",
        operation=operation,
        version=1,
        arguments=arguments,
        username="alice",
        uid=None,
        groups=[],
        manager="daemon",
        client=None,
        key=None,
        digest=jobs.request_digest(operation, 1, arguments, "daemon"),
    )
    obj["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    obj["metadata"]["uid"] = "uid-1"
    if status:
        obj["status"] = status
    return obj


def _context(obj: dict[str, Any]) -> OperationContext:
    return OperationContext(
        rest=None,  # type: ignore[arg-type]  # these executors never call Kubernetes
        settings=Settings(namespace="ns"),
        principal="alice",
        job_id=obj["metadata"]["name"],
    )


async def _run(
    control: MemoryControl, executors: dict[str, Executor], *, prompt_timeout: float = 300.0
) -> None:
    await run_job(
        control,
        catalog=OPS,
        executors=executors,
        make_context=_context,
        executor_id="me",
        prompt_timeout=prompt_timeout,
    )


def _states(control: MemoryControl) -> list[str]:
    return [e["state"] for e in control.events() if e["type"] == "state"]


async def test_success_records_the_result_and_states() -> None:
    async def clusters(ctx: OperationContext, args: dict[str, Any]) -> Any:
        await ctx.feedback("listing", stage="list")
        return [CLUSTER]

    control = MemoryControl(_job("catalog.clusters", {}))
    await _run(control, {"catalog.clusters": clusters})
    assert control.state() == "succeeded"
    assert jobs.result_of(control.obj["status"]) == [CLUSTER]
    assert _states(control) == ["queued", "starting", "running", "succeeded"]
    kinds = [e["type"] for e in control.events()]
    assert kinds == ["state", "state", "state", "feedback", "result", "state"]
    assert control.obj["status"]["executor"] == "me"


async def test_failures_are_stored_as_typed_errors() -> None:
    async def missing(ctx: OperationContext, args: dict[str, Any]) -> Any:
        raise NotFound("Unknown cluster: lab")

    async def broken(ctx: OperationContext, args: dict[str, Any]) -> Any:
        raise RuntimeError("secret internals")

    control = MemoryControl(_job("cluster.delete", {"name": "lab"}))
    await _run(control, {"cluster.delete": missing})
    assert control.obj["status"]["error"] == {
        "type": "LookupError",
        "message": "Unknown cluster: lab",
        "retryable": False,
    }
    control = MemoryControl(_job("cluster.delete", {"name": "lab"}))
    await _run(control, {"cluster.delete": broken})
    error = control.obj["status"]["error"]
    assert error["type"] == "InternalError"
    assert "secret internals" not in json.dumps(control.obj)


async def test_an_invalid_result_fails_with_invalid_operation_result() -> None:
    async def wrong(ctx: OperationContext, args: dict[str, Any]) -> Any:
        return {"name": 7}

    control = MemoryControl(_job("catalog.clusters", {}))
    await _run(control, {"catalog.clusters": wrong})
    assert control.state() == "failed"
    error = control.obj["status"]["error"]
    assert error["type"] == "ResultContractError"
    assert error["details"] == {"code": "invalid_operation_result"}


async def test_cancelling_a_running_executor() -> None:
    started = asyncio.Event()
    effects: list[str] = []

    async def slow(ctx: OperationContext, args: dict[str, Any]) -> Any:
        started.set()
        await asyncio.sleep(60)
        effects.append("after")
        return None

    control = MemoryControl(_job("cluster.delete", {"name": "lab"}))
    runner = asyncio.create_task(_run(control, {"cluster.delete": slow}))
    await started.wait()
    control.set_spec(cancel=True)
    await asyncio.wait_for(runner, 5)
    assert control.state() == "cancelled"
    assert effects == []


async def test_cancelled_before_it_started() -> None:
    ran: list[bool] = []

    async def never(ctx: OperationContext, args: dict[str, Any]) -> Any:
        ran.append(True)

    obj = _job("cluster.delete", {"name": "lab"})
    obj["spec"]["cancel"] = True
    control = MemoryControl(obj)
    await _run(control, {"cluster.delete": never})
    assert control.state() == "cancelled"
    assert ran == []


async def test_a_job_of_a_dead_executor_is_lost_not_rerun() -> None:
    ran: list[bool] = []

    async def never(ctx: OperationContext, args: dict[str, Any]) -> Any:
        ran.append(True)

    control = MemoryControl(_job("cluster.delete", {"name": "lab"}, state="running", executor="someone-else"))
    await _run(control, {"cluster.delete": never})
    assert control.state() == "lost"
    assert control.obj["status"]["error"]["type"] == "WorkerLost"
    assert ran == []


async def test_a_resumable_job_of_a_dead_executor_runs_again_and_says_so() -> None:
    ran: list[str] = []

    async def validate(ctx: OperationContext, args: dict[str, Any]) -> Any:
        ran.append(args["recipe"])
        return []

    control = MemoryControl(
        _job("recipes.validate", {"recipe": "r"}, state="running", executor="old", attempts=1)
    )
    await _run(control, {"recipes.validate": validate})
    assert ran == ["r"]
    assert control.state() == "succeeded"
    status = control.obj["status"]
    assert (status["executor"], status["attempts"]) == ("me", 2)
    [handover] = [e for e in status["events"] if e["type"] == "feedback"]
    assert "the executor old stopped" in handover["data"]["message"]
    assert handover["data"]["attempt"] == 2


@pytest.mark.parametrize(
    ("operation", "arguments", "status", "why"),
    [
        ("cluster.delete", {"name": "lab"}, {"state": "running"}, "cluster.delete is not resumable"),
        ("workloads.stop", {"workload_id": "w"}, {"state": "waiting_input"}, "waiting for input"),
        ("workloads.stop", {"workload_id": "w"}, {"state": "running", "attempts": 3}, "started 3 times"),
    ],
)
async def test_a_job_that_cannot_be_resumed_is_lost_with_a_retryable_reason(
    operation: str, arguments: dict[str, Any], status: dict[str, Any], why: str
) -> None:
    ran: list[bool] = []

    async def never(ctx: OperationContext, args: dict[str, Any]) -> Any:
        ran.append(True)

    control = MemoryControl(_job(operation, arguments, executor="old", **status))
    await _run(control, {operation: never})
    assert ran == []
    assert control.state() == "lost"
    error = control.obj["status"]["error"]
    assert error["type"] == "WorkerLost"
    assert error["retryable"] is True
    assert why in error["message"]
    assert "(old) stopped" in error["message"]
    assert error["details"]["operation"] == operation


async def test_an_approval_prompt_is_answered() -> None:
    async def ask(ctx: OperationContext, args: dict[str, Any]) -> Any:
        if not await ctx.ask("approval", "Delete cluster lab?", default=False):
            raise DaemonError("declined", type_name="InterruptedError")
        return None

    control = MemoryControl(_job("cluster.delete", {"name": "lab"}))
    runner = asyncio.create_task(_run(control, {"cluster.delete": ask}))
    await asyncio.wait_for(control.reach("waiting_input"), 5)
    prompt = control.obj["status"]["prompt"]
    assert prompt["kind"] == "approval"
    control.set_spec(answers=[{"promptId": prompt["id"], "value": True}])
    await asyncio.wait_for(runner, 5)
    assert control.state() == "succeeded"
    assert _states(control) == ["queued", "starting", "running", "waiting_input", "running", "succeeded"]
    assert "prompt" not in control.obj["status"]


async def test_an_unanswered_prompt_times_out() -> None:
    async def ask(ctx: OperationContext, args: dict[str, Any]) -> Any:
        await ctx.ask("approval", "Proceed?")

    control = MemoryControl(_job("cluster.delete", {"name": "lab"}))
    await asyncio.wait_for(_run(control, {"cluster.delete": ask}, prompt_timeout=0.3), 5)
    assert control.state() == "failed"
    assert control.obj["status"]["error"]["type"] == OperationTimeout.type_name
    assert "prompt_expired" in [e["type"] for e in control.events()]


def _stored(body: dict[str, Any], uid: str = "secret-uid") -> dict[str, Any]:
    """A Secret as the apiserver returns it (``stringData`` folded into ``data``, a UID)."""
    data = {k: base64.b64encode(v.encode()).decode() for k, v in body.pop("stringData").items()}
    return {**body, "metadata": {**body["metadata"], "uid": uid}, "data": data}


async def _login(seen: list[str], ctx: OperationContext) -> Any:
    secret = await ctx.ask("secret", "Sudo password", default="ignored-for-secrets")
    seen.append(secret)
    await ctx.feedback(f"logged in with {secret}")
    return [{**CLUSTER, "description": f"pw={secret}"}]


async def test_a_secret_answer_is_used_redacted_and_its_secret_deleted() -> None:
    seen: list[str] = []
    control = MemoryControl(_job("catalog.clusters", {}))
    runner = asyncio.create_task(_run(control, {"catalog.clusters": lambda ctx, _a: _login(seen, ctx)}))
    await asyncio.wait_for(control.reach("waiting_input"), 5)
    prompt = control.obj["status"]["prompt"]
    assert prompt.get("default") is None
    body = answers.secret_body(control.obj, prompt["id"], "hunter2", namespace="ns")
    name = body["metadata"]["name"]
    control.secrets[name] = _stored(body)
    control.set_spec(answers=[{"promptId": prompt["id"], "secretRef": {"name": name, "key": "token"}}])
    await asyncio.wait_for(runner, 5)
    assert seen == ["hunter2"]
    assert control.read == [name]
    assert control.deleted == [(name, "secret-uid")]
    assert control.state() == "succeeded"
    assert "hunter2" not in json.dumps(control.obj)
    assert "[redacted]" in json.dumps(control.obj["status"]["result"])


def _planted(kind: str, obj: dict[str, Any], prompt_id: str) -> tuple[str, str, dict[str, Any] | None]:
    """(name the answer names, its key, the Secret stored under the answer Secret's name)."""
    body = _stored(answers.secret_body(obj, prompt_id, "stolen-value", namespace="ns"))
    name = body["metadata"]["name"]
    if kind == "another Secret":
        return "hub-token", "token", body
    if kind == "another key":
        return name, "password", body
    if kind == "missing":
        return name, "token", None
    meta = body["metadata"]
    if kind == "no labels":
        del meta["labels"]
    elif kind == "labels of another prompt":
        meta["labels"] = {**meta["labels"], "sparkrun.dev/prompt": "0" * 16}
    elif kind == "owner of another uid":
        meta["ownerReferences"] = [{**meta["ownerReferences"][0], "uid": "uid-2"}]
    elif kind == "no owner":
        del meta["ownerReferences"]
    return name, "token", body


@pytest.mark.parametrize(
    "kind",
    [
        "another Secret",
        "another key",
        "missing",
        "no labels",
        "labels of another prompt",
        "owner of another uid",
        "no owner",
    ],
)
async def test_a_secret_answer_is_read_only_from_the_shims_answer_secret(kind: str) -> None:
    """A reference to any other Secret or key is refused before anything is read; a Secret under
    the answer Secret's name without the job's labels and owner reference is read but refused:
    the executor never gets its value, nothing is deleted, the job fails with a typed error."""
    seen: list[str] = []
    control = MemoryControl(_job("catalog.clusters", {}))
    control.secrets["hub-token"] = _stored(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "hub-token"},
            "stringData": {"token": "hub"},
        }
    )
    runner = asyncio.create_task(_run(control, {"catalog.clusters": lambda ctx, _a: _login(seen, ctx)}))
    await asyncio.wait_for(control.reach("waiting_input"), 5)
    prompt_id = control.obj["status"]["prompt"]["id"]
    name, key, planted = _planted(kind, control.obj, prompt_id)
    expected = answers.secret_name("b" * 32, prompt_id)
    if planted is not None:
        control.secrets[expected] = planted
    control.set_spec(answers=[{"promptId": prompt_id, "secretRef": {"name": name, "key": key}}])
    await asyncio.wait_for(runner, 5)
    assert seen == []
    assert control.deleted == []
    assert control.read == ([] if kind in ("another Secret", "another key") else [expected])
    assert control.state() == "failed"
    error = control.obj["status"]["error"]
    assert error["type"] == "PermissionError"
    assert error["details"] == {"reason": "answer_secret_refused", "prompt_id": prompt_id}
    assert "stolen-value" not in json.dumps(control.obj)
    refused = [e for e in control.events() if e["type"] == "prompt_refused"]
    assert [(e["prompt_id"], e["reason"]) for e in refused] == [(prompt_id, "answer_secret_refused")]
    assert control.obj["status"].get("prompt") is None


async def test_a_disabled_operation_fails_without_running() -> None:
    control = MemoryControl(_job("tailscale.status", {}))
    await _run(control, {})
    assert control.state() == "failed"
    assert control.obj["status"]["error"]["type"] == "FeatureDisabled"


async def test_arguments_are_checked_again_before_execution() -> None:
    ran: list[bool] = []

    async def never(ctx: OperationContext, args: dict[str, Any]) -> Any:
        ran.append(True)

    control = MemoryControl(_job("cluster.delete", {"name": "lab", "zzz": 1}))
    await _run(control, {"cluster.delete": never})
    assert control.state() == "failed"
    assert control.obj["status"]["error"]["message"] == "request: unknown fields: zzz"
    assert ran == []


async def test_queries_run_inline_with_a_timeout() -> None:
    async def quick(ctx: OperationContext, args: dict[str, Any]) -> Any:
        return [CLUSTER]

    async def stuck(ctx: OperationContext, args: dict[str, Any]) -> Any:
        await asyncio.sleep(60)

    op = OPS.get("catalog.clusters")
    ctx = _context(_job("catalog.clusters", {}))
    assert await run_query(op, {}, ctx, {"catalog.clusters": quick}, limit=1) == [CLUSTER]
    with pytest.raises(OperationTimeout):
        await run_query(op, {}, ctx, {"catalog.clusters": stuck}, limit=0.1)
