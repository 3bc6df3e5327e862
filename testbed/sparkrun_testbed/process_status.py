"""Pod status as a kubelet writes it, computed from the process runtime's view of a pod.

:class:`ContainerState` is the runtime's record of one container (init, sidecar or regular);
:func:`pod_status` turns a pod's records into the ``status`` the runtime patches onto the pod:
``phase``, the conditions a kubelet owns (``PodReadyToStartContainers``, ``Initialized``,
``ContainersReady``, ``Ready``), ``initContainerStatuses``/``containerStatuses`` (``state``
waiting/running/terminated, ``lastState``, ``ready``, ``started``, ``restartCount``, ids),
``podIP(s)``, ``hostIP(s)`` and ``startTime``; a finished container's termination message
(:func:`termination_message`: its file, else with ``FallbackToLogsOnError`` the end of its log).
``PodScheduled`` (the scheduler's) and any condition another component set are left alone:
conditions are patched by ``type``.

Phase follows the kubelet's rules: Pending until every init container succeeded and some
container started; Running while a container runs or will be restarted; Succeeded when every
container exited 0 and none will restart; Failed when a container (or, with restartPolicy Never,
an init container) failed and none will restart. Pure functions, no I/O.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

PENDING = "Pending"
RUNNING = "Running"
SUCCEEDED = "Succeeded"
FAILED = "Failed"
TERMINAL = frozenset({SUCCEEDED, FAILED})

OWNED_CONDITIONS = ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready")


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC).replace(microsecond=0)


def rfc3339(moment: datetime.datetime | None) -> str | None:
    return None if moment is None else moment.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Terminated:
    """One finished run of a container."""

    exit_code: int
    reason: str
    started_at: datetime.datetime | None
    finished_at: datetime.datetime
    container_id: str = ""
    message: str = ""
    signal: int = 0

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "exitCode": self.exit_code,
            "reason": self.reason,
            "startedAt": rfc3339(self.started_at),
            "finishedAt": rfc3339(self.finished_at),
        }
        if self.signal:
            body["signal"] = self.signal
        if self.message:
            body["message"] = self.message
        if self.container_id:
            body["containerID"] = self.container_id
        return body


#: The kubelet's bounds on a termination message: the file's first bytes (``MaxContainer
#: TerminationMessageLength``), and with ``FallbackToLogsOnError`` the log's last lines and bytes.
TERMINATION_MESSAGE_BYTES = 4096
FALLBACK_LOG_LINES = 80
FALLBACK_LOG_BYTES = 2048
FALLBACK_TO_LOGS = "FallbackToLogsOnError"
#: A container that could not be started has no log to fall back to.
CANNOT_RUN = "ContainerCannotRun"


def log_tail(data: bytes) -> str:
    """The end of a container log as the kubelet puts it in a termination message: its last
    :data:`FALLBACK_LOG_LINES` lines, of which the last :data:`FALLBACK_LOG_BYTES` bytes (the
    first line may be cut, even inside a character). ``data`` needs to hold only the log's last
    :data:`FALLBACK_LOG_BYTES` bytes."""
    data = data[-FALLBACK_LOG_BYTES:]
    lines = data.splitlines(keepends=True)
    return b"".join(lines[-FALLBACK_LOG_LINES:]).decode("utf-8", "replace")


def termination_message(
    *, policy: str | None, exit_code: int, reason: str, file_text: bytes | None, log_end: bytes
) -> str:
    """``state.terminated.message`` as the kubelet fills it: the container's termination message
    file (at most :data:`TERMINATION_MESSAGE_BYTES` bytes; ``None``: there is none), else, with
    ``terminationMessagePolicy: FallbackToLogsOnError`` and a failure (a non-zero exit of a
    container that ran), the end of its log (:func:`log_tail`; ``log_end``: the log's last
    :data:`FALLBACK_LOG_BYTES` bytes at least)."""
    if file_text:
        return file_text[:TERMINATION_MESSAGE_BYTES].decode("utf-8", "replace")
    if policy == FALLBACK_TO_LOGS and exit_code != 0 and reason != CANNOT_RUN:
        return log_tail(log_end)
    return ""


def exit_reason(exit_code: int) -> str:
    return "Completed" if exit_code == 0 else "Error"


@dataclass
class ContainerState:
    """The runtime's record of one container; exactly one of waiting/running/terminated holds."""

    name: str
    image: str
    kind: str = "regular"  # "init", "sidecar" (init with restartPolicy Always) or "regular"
    restart_count: int = 0
    waiting_reason: str | None = "ContainerCreating"
    waiting_message: str = ""
    running_since: datetime.datetime | None = None
    terminated: Terminated | None = None
    last_terminated: Terminated | None = None
    ready: bool = False
    started: bool = False
    container_id: str = ""
    has_readiness_probe: bool = False

    def wait(self, reason: str, message: str = "") -> None:
        """Waiting (not yet started, or between restarts): the last run moves to lastState."""
        if self.terminated is not None:
            self.last_terminated = self.terminated
            self.terminated = None
        self.waiting_reason, self.waiting_message = reason, message
        self.running_since = None
        self.ready = self.started = False

    def run(self, container_id: str, at: datetime.datetime | None = None) -> None:
        if self.terminated is not None:
            self.last_terminated = self.terminated
            self.terminated = None
        self.waiting_reason, self.waiting_message = None, ""
        self.container_id = container_id
        self.running_since = at or now()
        self.ready = False
        self.started = False

    def finish(
        self, exit_code: int, *, reason: str | None = None, message: str = "", signal: int = 0
    ) -> None:
        self.terminated = Terminated(
            exit_code=exit_code,
            reason=reason or exit_reason(exit_code),
            started_at=self.running_since,
            finished_at=now(),
            container_id=self.container_id,
            message=message,
            signal=signal,
        )
        self.waiting_reason, self.waiting_message = None, ""
        self.running_since = None
        self.ready = self.started = False

    @property
    def running(self) -> bool:
        return self.running_since is not None

    @property
    def succeeded(self) -> bool:
        return self.terminated is not None and self.terminated.exit_code == 0

    @property
    def failed(self) -> bool:
        """Terminated non-zero, or waiting to restart after a non-zero exit."""
        last = self.terminated or (self.last_terminated if self.waiting_reason else None)
        return last is not None and last.exit_code != 0

    def to_dict(self) -> dict[str, Any]:
        state: dict[str, Any]
        if self.running_since is not None:
            state = {"running": {"startedAt": rfc3339(self.running_since)}}
        elif self.terminated is not None:
            state = {"terminated": self.terminated.to_dict()}
        else:
            waiting: dict[str, Any] = {"reason": self.waiting_reason or "ContainerCreating"}
            if self.waiting_message:
                waiting["message"] = self.waiting_message
            state = {"waiting": waiting}
        body: dict[str, Any] = {
            "name": self.name,
            "image": self.image,
            "imageID": f"process://{self.image}",
            "state": state,
            "lastState": {"terminated": self.last_terminated.to_dict()} if self.last_terminated else {},
            "ready": self.ready,
            "restartCount": self.restart_count,
            "started": self.started,
        }
        if self.container_id:
            body["containerID"] = self.container_id
        return body


@dataclass
class PodView:
    """Everything :func:`pod_status` needs about one pod."""

    restart_policy: str
    init: Sequence[ContainerState]
    containers: Sequence[ContainerState]
    pod_ip: str | None = None
    host_ip: str | None = None
    start_time: datetime.datetime | None = None
    sandbox_ready: bool = False
    terminal_phase: str | None = None
    readiness_gates: Mapping[str, bool] = field(default_factory=dict)


def phase(view: PodView) -> str:
    """The pod phase by the kubelet's rules (see module docs)."""
    if view.terminal_phase is not None:
        return view.terminal_phase
    pending_init = failed_init = pending_sidecars = 0
    for c in view.init:
        if c.kind == "sidecar":
            if (c.running and not c.started) or (c.waiting_reason and c.last_terminated is None):
                pending_sidecars += 1
        elif c.running or (c.waiting_reason and c.last_terminated is None):
            pending_init += 1
        elif c.failed:
            failed_init += 1
    running = waiting = stopped = succeeded = 0
    for c in view.containers:
        if c.running:
            running += 1
        elif c.terminated is not None:
            stopped += 1
            succeeded += c.terminated.exit_code == 0
        elif c.last_terminated is not None:
            stopped += 1  # waiting to be restarted
        else:
            waiting += 1
    running += sum(1 for c in view.init if c.kind == "sidecar" and c.running)
    initialized = pending_init == 0 and failed_init == 0
    if failed_init and view.restart_policy == "Never":
        return FAILED
    if pending_init or (pending_sidecars and not initialized) or waiting:
        return PENDING
    if running:
        return RUNNING
    if stopped:
        if view.restart_policy == "Always":
            return RUNNING
        if stopped == succeeded:
            return SUCCEEDED
        if view.restart_policy == "Never":
            return FAILED
        return RUNNING
    return PENDING


def terminal_phase_after_kill(view: PodView) -> str:
    """The phase a pod ends in once its processes were stopped for deletion."""
    if all(c.succeeded for c in view.containers) and view.containers:
        return SUCCEEDED
    return FAILED


def _condition(kind: str, ok: bool, reason: str = "", message: str = "") -> dict[str, Any]:
    # NB: explicit nulls: the status is patched by strategic merge, which would otherwise keep
    # the reason and message of the condition's previous (False) state.
    return {
        "type": kind,
        "status": "True" if ok else "False",
        "reason": reason if not ok and reason else None,
        "message": message if not ok and message else None,
    }


def conditions(view: PodView, pod_phase: str) -> list[dict[str, Any]]:
    """The four conditions the kubelet owns, without timestamps (see :func:`stamp`)."""
    plain_init = [c for c in view.init if c.kind == "init"]
    pending_init = [c.name for c in plain_init if not c.succeeded]
    initialized = not pending_init
    unready = [
        c.name for c in (*view.containers, *(c for c in view.init if c.kind == "sidecar")) if not c.ready
    ]
    terminal = pod_phase in TERMINAL
    containers_ready = not unready and not terminal
    gates_missing = [name for name, ok in view.readiness_gates.items() if not ok]
    result = [_condition("PodReadyToStartContainers", view.sandbox_ready and not terminal)]
    result.append(
        _condition(
            "Initialized",
            initialized,
            "ContainersNotInitialized",
            f"containers with incomplete status: [{' '.join(pending_init)}]",
        )
    )
    if terminal:
        result.append(_condition("ContainersReady", False, "PodCompleted"))
        result.append(_condition("Ready", False, "PodCompleted"))
        return result
    message = f"containers with unready status: [{' '.join(unready)}]"
    result.append(_condition("ContainersReady", containers_ready, "ContainersNotReady", message))
    if containers_ready and gates_missing:
        result.append(
            _condition(
                "Ready",
                False,
                "ReadinessGatesNotReady",
                f"corresponding condition of pod readiness gate {gates_missing[0]!r} does not exist.",
            )
        )
    else:
        result.append(_condition("Ready", containers_ready, "ContainersNotReady", message))
    return result


def stamp(
    new: Sequence[dict[str, Any]], old: Sequence[Mapping[str, Any]], at: datetime.datetime
) -> list[dict[str, Any]]:
    """Give each condition its ``lastTransitionTime``: kept from ``old`` unless the status changed."""
    previous = {c.get("type"): c for c in old}
    result = []
    for cond in new:
        before = previous.get(cond["type"])
        keep = (
            before is not None and before.get("status") == cond["status"] and before.get("lastTransitionTime")
        )
        stamped = dict(cond)
        stamped["lastProbeTime"] = None
        stamped["lastTransitionTime"] = before["lastTransitionTime"] if keep and before else rfc3339(at)
        result.append(stamped)
    return result


def pod_status(view: PodView, old_conditions: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """The ``status`` body to patch (see module docs)."""
    pod_phase = phase(view)
    status: dict[str, Any] = {
        "phase": pod_phase,
        "conditions": stamp(conditions(view, pod_phase), old_conditions, now()),
        "containerStatuses": [c.to_dict() for c in view.containers],
    }
    if view.init:
        status["initContainerStatuses"] = [c.to_dict() for c in view.init]
    if view.host_ip:
        status["hostIP"] = view.host_ip
        status["hostIPs"] = [{"ip": view.host_ip}]
    if view.pod_ip:
        status["podIP"] = view.pod_ip
        status["podIPs"] = [{"ip": view.pod_ip}]
    if view.start_time is not None:
        status["startTime"] = rfc3339(view.start_time)
    return status
