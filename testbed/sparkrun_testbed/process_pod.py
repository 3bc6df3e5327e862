"""One pod on a process node, from sandbox to deletion: the kubelet's pod worker.

A :class:`PodWorker` owns one pod (by UID) and does, in order:

1. **Sandbox**: an address (and, in namespace mode, a network namespace) from the node's
   :class:`~sparkrun_testbed.netns.PodNetwork`; ``podIP``, ``hostIP`` and
   ``startTime`` go into the status; the pod's DNS record and hosts file are registered.
   A ``hostNetwork`` pod shares the node's address and namespaces (no hosts file, no mounts).
2. **Init containers**, one after the other; each must exit 0 before the next starts. A
   failed one is restarted with back-off unless ``restartPolicy`` is ``Never``, which fails the
   pod. An init container with ``restartPolicy: Always`` is a sidecar: it keeps running and
   the next one starts once it has started.
3. **Containers**, all at once, each supervised: on exit it is restarted as ``restartPolicy``
   says (``Always``; ``OnFailure`` if the exit code is not 0; ``Never``), after a back-off
   that doubles from ``backoff_initial`` to ``backoff_max`` (reason ``CrashLoopBackOff``); the
   first restart is immediate, as a kubelet does. Probes run for each running container
   (:mod:`.process_probes`): startup gates the others, readiness sets ``ready``, a failed
   startup or liveness probe kills the container, which is then restarted (or not) by policy.
4. **Terminal**: when no container runs or will run again, the phase is Succeeded or Failed,
   everything left in the sandbox is killed and the sandbox is released (the status keeps the
   pod IP, as a kubelet's does).
5. **Deletion** (``deletionTimestamp`` set): ``preStop`` hooks, SIGTERM to every container's
   process group, up to the pod's ``deletionGracePeriodSeconds``, then SIGKILL, then every
   process left in the sandbox is killed; the final status is written and the pod is deleted
   with grace 0 and a UID precondition, as a kubelet finishes a graceful deletion.

Each container runs as a process-group leader (its own session) with stdout and stderr appended
to ``<pod dir>/logs/<container>_<restart>.log`` (what ``kubectl logs`` reads); when the main
process exits, the rest of its group is killed, as a container runtime kills a container's
cgroup. A finished container's termination message is its ``terminationMessagePath`` file (a
file of its own mounted there when the path lies under ``/run`` and the pod has a mount
namespace), else with ``FallbackToLogsOnError`` and a failure the end of its log
(:func:`~.process_status.termination_message`). A container's environment and command come
from :mod:`.process_env`, its executable from :mod:`.process_images`. Every status change marks
the pod dirty; one writer task per pod patches ``pods/status`` (strategic merge, so conditions
owned by others survive) with the latest state, skipping writes that would change nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import datetime
import logging
import os
import secrets
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from sparkrun_testbed import (
    process_dns,
    process_env,
    process_images,
    process_probes,
    process_volumes,
)
from sparkrun_testbed.netns import PodNetwork, Sandbox
from sparkrun_testbed.process_api import call_json
from sparkrun_testbed.process_events import Events
from sparkrun_testbed.process_status import (
    FAILED,
    FALLBACK_LOG_BYTES,
    TERMINAL,
    TERMINATION_MESSAGE_BYTES,
    ContainerState,
    PodView,
    exit_reason,
    phase,
    pod_status,
    terminal_phase_after_kill,
    termination_message,
)

log = logging.getLogger("sparkrun.testbed.process")

_NOT_FOUND = 404
#: A container's ``terminationMessagePath`` when its spec names none.
DEFAULT_TERMINATION_PATH = "/dev/termination-log"


def _read(path: Path, *, head: int = 0, tail: int = 0) -> bytes | None:
    """The first ``head`` or last ``tail`` bytes of ``path``; ``None`` when it does not exist."""
    try:
        with path.open("rb") as f:
            if tail:
                f.seek(max(0, f.seek(0, os.SEEK_END) - tail))
                return f.read(tail)
            return f.read(head)
    except OSError:
        return None


@dataclass(frozen=True)
class Settings:
    """Kubelet knobs of the process runtime (seconds)."""

    backoff_initial: float = 1.0
    backoff_max: float = 60.0
    config_retry: float = 2.0
    sandbox_retry: float = 2.0


@dataclass
class Host:
    """What a pod worker needs from its node (built by the runtime)."""

    core: Any  # kubernetes_asyncio CoreV1Api
    node_name: str
    node_ip: str
    allocatable: Mapping[str, str]
    network: PodNetwork
    rules: Sequence[process_images.ImageRule]
    shim_dir: Path
    pods_dir: Path
    dns: process_dns.Registry
    events: Events
    probe_client: httpx.AsyncClient
    settings: Settings = field(default_factory=Settings)
    on_spawn: Callable[[int], None] | None = None
    # Where pods reach kube-apiserver (the `kubernetes` Service as pods see it); None: nowhere.
    api_endpoint: tuple[str, int] | None = None


class Backoff:
    """Delays between restarts of one container: 0, then ``initial`` doubling up to ``maximum``.

    A container that ran longer than twice ``maximum`` starts over with no delay.
    """

    def __init__(self, initial: float, maximum: float) -> None:
        self.initial = initial
        self.maximum = maximum
        self.failures = 0

    def next(self, ran_for: float) -> float:
        if ran_for > 2 * self.maximum:
            self.failures = 0
        delay = 0.0 if self.failures == 0 else min(self.initial * 2 ** (self.failures - 1), self.maximum)
        self.failures += 1
        return delay


def should_restart(policy: str, exit_code: int) -> bool:
    return policy == "Always" or (policy == "OnFailure" and exit_code != 0)


def exit_code_of(returncode: int) -> int:
    """A container exit code from a Popen return code (killed by signal N -> 128 + N)."""
    return 128 - returncode if returncode < 0 else returncode


@dataclass
class _Running:
    """One started container process."""

    proc: asyncio.subprocess.Process
    spec: Mapping[str, Any]
    state: ContainerState
    env: Mapping[str, str]
    cwd: str
    log_path: Path
    setup: Sequence[str] = ()
    probes: list[asyncio.Task[None]] = field(default_factory=list)
    killing: bool = False


class PodWorker:
    """The kubelet's work for one pod (see module docs). Use :meth:`start`, then let it finish."""

    def __init__(self, host: Host, pod: Mapping[str, Any]) -> None:
        self.host = host
        self.pod: dict[str, Any] = copy.deepcopy(dict(pod))
        meta = self.pod["metadata"]
        self.uid: str = meta["uid"]
        self.namespace: str = meta["namespace"]
        self.name: str = meta["name"]
        spec = self.pod["spec"]
        self.restart_policy: str = spec.get("restartPolicy") or "Always"
        self.init_specs: list[dict[str, Any]] = list(spec.get("initContainers") or ())
        self.specs: list[dict[str, Any]] = list(spec.get("containers") or ())
        self.init = [
            ContainerState(
                name=c["name"],
                image=c.get("image", ""),
                kind="sidecar" if c.get("restartPolicy") == "Always" else "init",
                waiting_reason="PodInitializing",
            )
            for c in self.init_specs
        ]
        self.containers = [
            ContainerState(
                name=c["name"],
                image=c.get("image", ""),
                waiting_reason="PodInitializing" if self.init_specs else "ContainerCreating",
            )
            for c in self.specs
        ]
        self.dir = host.pods_dir / f"{self.namespace}_{self.name}_{self.uid}"
        self.sandbox: Sandbox | None = None
        self.start_time: datetime.datetime | None = None
        self.terminal_phase: str | None = None
        self.running: dict[str, _Running] = {}
        self.finished = asyncio.Event()
        self._dirty = asyncio.Event()
        self._deleting = asyncio.Event()
        self._stopping = False
        self._gone = False
        self._shutdown_grace: float | None = None
        self._sent: dict[str, Any] | None = None
        self._conditions: list[dict[str, Any]] = list((self.pod.get("status") or {}).get("conditions") or ())
        self._write_lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._log_paths: dict[str, dict[int, Path]] = {}
        self._sidecars: set[asyncio.Task[int]] = set()
        self._main_done = False
        self._released_ip: str | None = None
        self.volumes: dict[str, process_volumes.Volume] = {}
        self._token_refresher: asyncio.Task[None] | None = None
        self._reported: set[str] = set()

    # -- control from the runtime -----------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._lifecycle(), name=f"pod {self.namespace}/{self.name}"
        )
        if self.pod["metadata"].get("deletionTimestamp"):
            self._deleting.set()

    def observe(self, pod: Mapping[str, Any]) -> None:
        """A newer version of the pod from the watch; a deletion starts termination."""
        self.pod["metadata"] = copy.deepcopy(dict(pod["metadata"]))
        if pod["metadata"].get("deletionTimestamp"):
            self._deleting.set()

    def vanished(self) -> None:
        """The pod object is gone from the API: stop at once, write nothing back."""
        self._gone = True
        self.pod["metadata"]["deletionGracePeriodSeconds"] = 0
        self._deleting.set()

    async def shutdown(self, grace: float) -> None:
        """The runtime is stopping: stop the pod's processes within ``grace``, write nothing."""
        self._gone = True
        self._shutdown_grace = grace
        self._deleting.set()
        await self.finished.wait()

    # -- views for the kubelet API ----------------------------------------------------------------

    def log_path(self, container: str, *, previous: bool) -> Path | None:
        """The log of the current (or previous) run of ``container``; None if there is none."""
        state = self._state(container)
        runs = self._log_paths.get(container, {})
        if state is None or not runs:
            return None
        current = max(runs)
        return runs.get(current - 1) if previous else runs[current]

    def log_live(self, container: str, path: Path) -> bool:
        """True while the run that writes ``path`` is still running."""
        running = self.running.get(container)
        return running is not None and running.log_path == path and running.proc.returncode is None

    def container_names(self) -> list[str]:
        return [c["name"] for c in (*self.init_specs, *self.specs)]

    def _state(self, name: str) -> ContainerState | None:
        return next((c for c in (*self.init, *self.containers) if c.name == name), None)

    # -- lifecycle --------------------------------------------------------------------------------

    async def _lifecycle(self) -> None:
        writer = asyncio.create_task(self._status_writer())
        run = asyncio.create_task(self._run())
        deleting = asyncio.create_task(self._deleting.wait())
        try:
            await asyncio.wait({run, deleting}, return_when=asyncio.FIRST_COMPLETED)
            if run.done() and not run.cancelled() and run.exception() is not None:
                log.error("pod %s/%s: runtime error", self.namespace, self.name, exc_info=run.exception())
                self.terminal_phase = FAILED
            if not deleting.done():
                # Terminal on its own: release the sandbox now, wait for deletion to finish it.
                await self._stop_processes(grace=0)
                await self._release_sandbox()
                self._dirty.set()
                await deleting
            began = time.monotonic()
            log.info("pod %s/%s: stopping (grace %gs)", self.namespace, self.name, self._grace())
            await self._stop_processes(grace=self._grace())
            run.cancel()
            await asyncio.gather(run, return_exceptions=True)
            if self.terminal_phase is None:
                self.terminal_phase = terminal_phase_after_kill(self._view())
            await self._release_sandbox()
            if not self._gone:
                writer.cancel()
                await asyncio.gather(writer, return_exceptions=True)
                await self._write_status()
                await self._delete_pod()
            log.info(
                "pod %s/%s: done, %.2fs after the stop began",
                self.namespace,
                self.name,
                time.monotonic() - began,
            )
        finally:
            # Reached on cancellation too (the runtime is going away): nothing may outlive us.
            for task in (run, deleting, writer, self._token_refresher):
                if task is not None:
                    task.cancel()
            for running in list(self.running.values()):
                _signal_group(running.proc.pid, signal.SIGKILL)
            with contextlib.suppress(Exception):
                await asyncio.shield(self._release_sandbox())
            self.finished.set()

    def _grace(self) -> float:
        if self._shutdown_grace is not None:
            return self._shutdown_grace
        meta = self.pod["metadata"]
        grace = meta.get("deletionGracePeriodSeconds")
        if grace is None:
            grace = self.pod["spec"].get("terminationGracePeriodSeconds", 30)
        return float(grace)

    async def _run(self) -> None:
        self.start_time = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
        self.sandbox = await self._create_sandbox()
        log.info(
            "pod %s/%s: sandbox %s %s", self.namespace, self.name, self.sandbox.ip, self.sandbox.netns or ""
        )
        self._dirty.set()
        await self._prepare_volumes()
        if not await self._wait_for_volumes():
            return
        if not await self._run_init():
            self.terminal_phase = FAILED
            self._dirty.set()
            return
        for state in self.containers:
            state.wait("ContainerCreating")
        self._dirty.set()
        pairs = zip(self.specs, self.containers, strict=True)
        await asyncio.gather(*(self._supervise(spec, state, self.restart_policy) for spec, state in pairs))
        # Sidecars stop once the regular containers are done (and are not restarted then).
        self._main_done = True
        sidecars = [r for r in self.running.values() if r.state.kind == "sidecar"]
        await asyncio.gather(*(self._kill(r, grace=self._termination_grace()) for r in sidecars))
        await asyncio.gather(*self._sidecars, return_exceptions=True)
        final = phase(self._view())
        self.terminal_phase = final if final in TERMINAL else FAILED
        self._dirty.set()

    async def _create_sandbox(self) -> Sandbox:
        while True:
            if self.pod["spec"].get("hostNetwork"):
                # The node's network: the pod's IP is the node's, no namespace of its own.
                sandbox = Sandbox(key=self.uid, ip=self.host.node_ip)
                break
            try:
                sandbox = await self.host.network.create(self.uid)
            except Exception as e:
                log.warning("pod %s/%s: sandbox: %s", self.namespace, self.name, e)
                self.host.events.pod(self.pod, "FailedCreatePodSandBox", str(e), warning=True)
                await asyncio.sleep(self.host.settings.sandbox_retry)
                continue
            break
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "logs").mkdir(exist_ok=True)
        spec = self.pod["spec"]
        self.host.dns.add(
            self.uid,
            process_dns.Record(
                namespace=self.namespace,
                hostname=self.hostname,
                subdomain=str(spec.get("subdomain") or ""),
                ip=sandbox.ip,
            ),
            self.dir / "hosts",
        )
        return sandbox

    @property
    def hostname(self) -> str:
        return str(self.pod["spec"].get("hostname") or self.name)[:63]

    async def _release_sandbox(self) -> None:
        sandbox, self.sandbox = self.sandbox, None
        if sandbox is None:
            return
        self.host.dns.remove(self.uid)
        await self.host.network.destroy(sandbox)
        self._released_ip = sandbox.ip

    async def _run_init(self) -> bool:
        policy = "Never" if self.restart_policy == "Never" else "OnFailure"
        for spec, state in zip(self.init_specs, self.init, strict=True):
            if state.kind == "sidecar":
                started = asyncio.Event()
                task = asyncio.create_task(self._supervise(spec, state, "Always", started=started))
                self._sidecars.add(task)
                await started.wait()
                continue
            code = await self._supervise(spec, state, policy)
            if code != 0:
                return False
        return True

    async def _supervise(
        self,
        spec: Mapping[str, Any],
        state: ContainerState,
        policy: str,
        *,
        started: asyncio.Event | None = None,
    ) -> int:
        """Run one container until it exits for good; return its last exit code."""
        backoff = Backoff(self.host.settings.backoff_initial, self.host.settings.backoff_max)
        while True:
            began = time.monotonic()
            code = await self._run_once(spec, state, started=started)
            if self.stopping() or not should_restart(policy, code):
                return code
            if state.kind == "sidecar" and self._main_done:
                return code
            delay = backoff.next(time.monotonic() - began)
            if delay > 0:
                message = (
                    f"back-off {delay:g}s restarting failed container={state.name} "
                    f"pod={self.name}_{self.namespace}({self.uid})"
                )
                state.wait("CrashLoopBackOff", message)
                self._dirty.set()
                self.host.events.pod(
                    self.pod,
                    "BackOff",
                    "Back-off restarting failed container",
                    warning=True,
                    **self._ref(state),
                )
                await asyncio.sleep(delay)
            if self.stopping():
                return code
            state.restart_count += 1

    def stopping(self) -> bool:
        """True once the pod's processes are being stopped: nothing new may start."""
        # NB: a method, not the attribute, where it is read after an await (mypy narrows it).
        return self._stopping

    def _ref(self, state: ContainerState) -> dict[str, Any]:
        return {"container": state.name, "init": state.kind != "regular"}

    async def _run_once(
        self, spec: Mapping[str, Any], state: ContainerState, *, started: asyncio.Event | None
    ) -> int:
        prepared = await self._prepare(spec, state)
        if isinstance(prepared, process_images.Refusal):
            self.host.events.pod(self.pod, "Failed", prepared.message, warning=True, **self._ref(state))
            if not prepared.terminated:
                state.wait(prepared.reason, prepared.message)
                self._dirty.set()
                await asyncio.Event().wait()  # stays Waiting until the pod goes away
            state.run(_container_id())
            state.finish(128, reason=prepared.reason, message=prepared.message)
            self._dirty.set()
            return 128
        launch, env, cwd = prepared
        if self.stopping():
            return 0
        assert self.sandbox is not None
        log_path = self.dir / "logs" / f"{state.name}_{state.restart_count}.log"
        self._log_paths.setdefault(state.name, {})[state.restart_count] = log_path
        setup = self._mounts(spec, state)
        argv = self.sandbox.enter(
            launch.argv, hosts_file=self.dir / "hosts", hostname=self.hostname, setup=setup
        )
        try:
            with log_path.open("ab") as out:
                proc = await asyncio.create_subprocess_exec(
                    *argv,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=out,
                    stderr=asyncio.subprocess.STDOUT,
                    env=dict(env),
                    cwd=cwd,
                    start_new_session=True,
                )
        except OSError as e:
            state.run(_container_id())
            state.finish(128, reason=process_images.START_ERROR, message=str(e))
            self._dirty.set()
            return 128
        if self.host.on_spawn is not None:
            self.host.on_spawn(proc.pid)
        running = _Running(
            proc=proc, spec=spec, state=state, env=env, cwd=cwd, log_path=log_path, setup=setup
        )
        self.running[state.name] = running
        state.run(_container_id())
        self.host.events.pod(self.pod, "Started", f"Started container {state.name}", **self._ref(state))
        if self.stopping():
            _signal_group(proc.pid, signal.SIGKILL)
        self._start_probes(running, started)
        self._dirty.set()
        try:
            returncode = await proc.wait()
        finally:
            for task in running.probes:
                task.cancel()
            # The main process is gone: the rest of its group goes too (a container's cgroup).
            _signal_group(proc.pid, signal.SIGKILL)
            if self.running.get(state.name) is running:
                del self.running[state.name]
        code = exit_code_of(returncode)
        log.info("pod %s/%s: container %s exited %d", self.namespace, self.name, state.name, code)
        message = await asyncio.to_thread(self._termination_message, spec, state, log_path, code)
        state.finish(code, message=message)
        self._dirty.set()
        if started is not None and not started.is_set():
            started.set()  # a sidecar that died before starting must not block the pod
        return code

    async def _prepare(
        self, spec: Mapping[str, Any], state: ContainerState
    ) -> tuple[process_images.Launch, dict[str, str], str] | process_images.Refusal:
        """Environment, command and executable for one run (waits while config is missing)."""
        while True:
            try:
                env = await process_env.container_env(
                    self._pod_for_env(), spec, lookup=self._lookup, allocatable=self.host.allocatable
                )
            except process_env.ConfigError as e:
                state.wait("CreateContainerConfigError", str(e))
                self._dirty.set()
                await asyncio.sleep(self.host.settings.config_retry)
                continue
            except ValueError as e:
                return process_images.Refusal("CreateContainerConfigError", str(e))
            break
        rule = process_images.find_rule(str(spec.get("image") or ""), self.host.rules)
        base = {
            "PATH": process_images.pod_path(self.host.shim_dir),
            "HOSTNAME": self.hostname,
            "HOME": os.environ.get("HOME", "/root"),
            **self._service_env(),
        }
        full = {**base, **(rule.env if rule else {}), **env}
        if not full["PATH"].startswith(str(self.host.shim_dir)):
            # The image mapping relies on the shims; a pod-set PATH keeps them first.
            full["PATH"] = f"{self.host.shim_dir}{os.pathsep}{full['PATH']}"
        expanded = process_env.command_line(spec, full)
        resolved = process_images.resolve(expanded, self.host.rules, path=full["PATH"])
        if isinstance(resolved, process_images.Refusal):
            return resolved
        return resolved, full, _working_dir(spec, self.dir / "work" / state.name)

    def _service_env(self) -> dict[str, str]:
        """The ``kubernetes`` Service variables a kubelet gives every container (in-cluster config)."""
        if self.host.api_endpoint is None:
            return {}
        host, port = self.host.api_endpoint
        url = f"tcp://{host}:{port}"
        return {
            "KUBERNETES_SERVICE_HOST": host,
            "KUBERNETES_SERVICE_PORT": str(port),
            "KUBERNETES_SERVICE_PORT_HTTPS": str(port),
            "KUBERNETES_PORT": url,
            "KUBERNETES_PORT_443_TCP": url,
            "KUBERNETES_PORT_443_TCP_PROTO": "tcp",
            "KUBERNETES_PORT_443_TCP_PORT": str(port),
            "KUBERNETES_PORT_443_TCP_ADDR": host,
        }

    # -- volumes ----------------------------------------------------------------------------------

    async def _prepare_volumes(self) -> None:
        self.volumes = await process_volumes.prepare(
            self._pod_for_env(),
            self.dir,
            lookup=self._lookup,
            issue_token=self._issue_token,
            allocatable=self.host.allocatable,
        )

    async def _wait_for_volumes(self) -> bool:
        """Wait until no volume source is missing (False: the pod is being stopped meanwhile)."""
        reported: set[str] = set()
        while waiting := process_volumes.waiting(self.volumes):
            if self.stopping():
                return False
            message = "Unable to attach or mount volumes: unmounted volumes=[{}]: {}".format(
                ", ".join(sorted(waiting)), "; ".join(waiting[n] for n in sorted(waiting))
            )
            if message not in reported:  # NB: once per distinct problem, not once per retry
                reported.add(message)
                self.host.events.pod(self.pod, "FailedMount", message, warning=True)
            for state in self.containers:
                state.wait("ContainerCreating")
            self._dirty.set()
            await asyncio.sleep(self.host.settings.config_retry)
            await process_volumes.prepare_again(
                self.volumes,
                self._pod_for_env(),
                self.dir,
                lookup=self._lookup,
                issue_token=self._issue_token,
                allocatable=self.host.allocatable,
            )
        if any(v.tokens for v in self.volumes.values()):
            self._token_refresher = asyncio.create_task(self._refresh_tokens())
        return True

    async def _issue_token(
        self, service_account: str, audience: str | None, seconds: int
    ) -> tuple[str, datetime.datetime]:
        spec: dict[str, Any] = {
            "expirationSeconds": seconds,
            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": self.name, "uid": self.uid},
        }
        if audience:
            spec["audiences"] = [audience]
        create = self.host.core.create_namespaced_service_account_token
        answer = await call_json(create, service_account, self.namespace, {"spec": spec})
        expires = datetime.datetime.fromisoformat(
            answer["status"]["expirationTimestamp"].replace("Z", "+00:00")
        )
        return str(answer["status"]["token"]), expires

    async def _refresh_tokens(self) -> None:
        while True:
            await asyncio.sleep(30)
            for token in process_volumes.refresh_due(self.volumes, datetime.datetime.now(datetime.UTC)):
                try:
                    await process_volumes.refresh_token(token, self._issue_token)
                except Exception as e:  # the old token stays valid a while; retried next round
                    log.warning("pod %s/%s: token refresh failed: %s", self.namespace, self.name, e)

    def _mounts(self, spec: Mapping[str, Any], state: ContainerState) -> list[str]:
        """The sandbox setup lines for the container's volume mounts and its termination message
        file; problems become events."""
        extra = self._termination_mounts(spec, state)
        if not spec.get("volumeMounts"):
            return process_volumes.mount_script(extra) if extra else []
        if self.sandbox is None or self.sandbox.netns is None:
            self._report(
                "loopback",
                "FailedMount",
                "volumes are not mounted: the pod has no mount namespace (hostNetwork, or loopback network)",
                state,
            )
            return []
        mounts, problems = process_volumes.mounts_for(spec, self.volumes)
        for problem in problems:
            self._report(problem, "FailedMount", problem, state)
        return process_volumes.mount_script([*mounts, *extra])

    # -- termination messages ---------------------------------------------------------------------

    def _termination_file(self, state: ContainerState) -> Path:
        return self.dir / "termination" / f"{state.name}_{state.restart_count}"

    def _termination_mounts(
        self, spec: Mapping[str, Any], state: ContainerState
    ) -> list[process_volumes.Mount]:
        """The container's ``terminationMessagePath`` as a fresh file of its own, as a kubelet
        mounts one; here only where a mount point can be made (a mount namespace, a path under
        ``/run``): elsewhere (the default ``/dev/termination-log``) there is no file, and a
        ``FallbackToLogsOnError`` container's message is the end of its log."""
        target = os.path.realpath(str(spec.get("terminationMessagePath") or DEFAULT_TERMINATION_PATH))
        if self.sandbox is None or self.sandbox.netns is None:
            return []
        if not any(target.startswith(d + "/") for d in process_volumes.RUN_DIRS):
            return []
        host = self._termination_file(state)
        host.parent.mkdir(exist_ok=True)
        host.write_bytes(b"")
        return [process_volumes.Mount(target=target, source=str(host), file=True)]

    def _termination_message(
        self, spec: Mapping[str, Any], state: ContainerState, log_path: Path, code: int
    ) -> str:
        """``state.terminated.message`` of a finished run (blocking reads of a few KiB: run it in
        a worker thread)."""
        file_text = _read(self._termination_file(state), head=TERMINATION_MESSAGE_BYTES)
        return termination_message(
            policy=spec.get("terminationMessagePolicy"),
            exit_code=code,
            reason=exit_reason(code),
            file_text=file_text,
            log_end=_read(log_path, tail=FALLBACK_LOG_BYTES) or b"",
        )

    def _report(self, key: str, reason: str, message: str, state: ContainerState) -> None:
        # NB: once per pod and problem; restarts would repeat them otherwise.
        if key not in self._reported:
            self._reported.add(key)
            self.host.events.pod(self.pod, reason, message, warning=True, **self._ref(state))

    def _pod_for_env(self) -> dict[str, Any]:
        pod = copy.deepcopy(self.pod)
        status = pod.setdefault("status", {})
        if self.sandbox is not None:
            status["podIP"] = self.sandbox.ip
            status["podIPs"] = [{"ip": self.sandbox.ip}]
        status["hostIP"] = self.host.node_ip
        status["hostIPs"] = [{"ip": self.host.node_ip}]
        return pod

    async def _lookup(self, kind: str, name: str) -> Mapping[str, Any] | None:
        from kubernetes_asyncio.client.exceptions import ApiException

        core = self.host.core
        reads = {
            "ConfigMap": core.read_namespaced_config_map,
            "Secret": core.read_namespaced_secret,
            "PersistentVolumeClaim": core.read_namespaced_persistent_volume_claim,
        }
        try:
            if kind == "PersistentVolume":  # cluster-scoped
                return await call_json(core.read_persistent_volume, name)
            return await call_json(reads[kind], name, self.namespace)
        except ApiException as e:
            if e.status == _NOT_FOUND:
                return None
            raise

    # -- probes -----------------------------------------------------------------------------------

    def _start_probes(self, running: _Running, started: asyncio.Event | None) -> None:
        spec, state = running.spec, running.state
        startup = spec.get("startupProbe")
        readiness = spec.get("readinessProbe")
        liveness = spec.get("livenessProbe")
        state.has_readiness_probe = readiness is not None

        def prober(probe: Mapping[str, Any]) -> process_probes.Prober:
            assert self.sandbox is not None
            return process_probes.Prober(
                probe,
                spec,
                pod_ip=self.sandbox.ip,
                exec_runner=lambda argv, limit: self._exec_in(running, argv, limit),
                client=self.host.probe_client,
            )

        def spawn(loop: process_probes.ProbeLoop) -> None:
            running.probes.append(asyncio.create_task(loop.run()))

        def after_start() -> None:
            state.started = True
            if started is not None:
                started.set()
            if readiness is None:
                state.ready = True
            else:
                spawn(process_probes.ProbeLoop(prober(readiness), on_ready, on_failure=on_fail("Readiness")))
            if liveness is not None:
                spawn(process_probes.ProbeLoop(prober(liveness), on_live, on_failure=on_fail("Liveness")))
            self._dirty.set()

        def on_ready(ok: bool, message: str) -> None:
            state.ready = ok and state.started
            self._dirty.set()

        def on_live(ok: bool, message: str) -> None:
            if not ok:
                self._kill_soon(running, f"Container {state.name} failed liveness probe, will be restarted")

        def on_startup(ok: bool, message: str) -> None:
            if ok:
                after_start()
            else:
                self._kill_soon(running, f"Container {state.name} failed startup probe, will be restarted")

        def on_fail(kind: str) -> Any:
            last: list[float] = [0.0]

            def report(message: str) -> None:
                # NB: one event per probe per 10 s: a kubelet's recorder aggregates repeats.
                if time.monotonic() - last[0] >= 10:
                    last[0] = time.monotonic()
                    self.host.events.pod(
                        self.pod,
                        "Unhealthy",
                        f"{kind} probe failed: {message}",
                        warning=True,
                        **self._ref(state),
                    )

            return report

        if startup is not None:
            spawn(
                process_probes.ProbeLoop(
                    prober(startup), on_startup, on_failure=on_fail("Startup"), stop_after_success=True
                )
            )
        else:
            after_start()

    def _kill_soon(self, running: _Running, message: str) -> None:
        if running.killing:
            return
        self.host.events.pod(self.pod, "Killing", message, **self._ref(running.state))
        task = asyncio.create_task(self._kill(running, grace=self._termination_grace()))
        running.probes.append(task)

    def _termination_grace(self) -> float:
        return float(self.pod["spec"].get("terminationGracePeriodSeconds", 30))

    async def _exec_in(self, running: _Running, argv: Sequence[str], limit: float) -> tuple[int, str]:
        """Run ``argv`` in the container's sandbox and environment (exec probes, preStop hooks)."""
        if self.sandbox is None:
            return 126, "the pod has no sandbox"
        container = {"image": running.state.image, "command": list(argv)}
        resolved = process_images.resolve(container, self.host.rules, path=running.env["PATH"])
        if isinstance(resolved, process_images.Refusal):
            return 126, resolved.message
        wrapped = self.sandbox.enter(
            resolved.argv, hosts_file=self.dir / "hosts", hostname=self.hostname, setup=running.setup
        )
        return await process_probes.run_exec(wrapped, limit, env=running.env, cwd=running.cwd)

    # -- stopping ---------------------------------------------------------------------------------

    async def _kill(self, running: _Running, *, grace: float) -> None:
        """SIGTERM the container's group, SIGKILL it after ``grace`` seconds; wait for the exit."""
        running.killing = True
        proc = running.proc
        _signal_group(proc.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.shield(proc.wait()), grace)
        except TimeoutError:
            _signal_group(proc.pid, signal.SIGKILL)
            await proc.wait()

    async def _stop_processes(self, *, grace: float) -> None:
        """Stop every container of the pod (deletion or runtime shutdown), preStop hooks first."""
        self._stopping = True
        deadline = time.monotonic() + grace
        runs = list(self.running.values())
        if grace > 0:
            hooks = [
                self._pre_stop(r, deadline) for r in runs if (r.spec.get("lifecycle") or {}).get("preStop")
            ]
            if hooks:
                await asyncio.gather(*hooks, return_exceptions=True)
        for running in runs:
            self.host.events.pod(
                self.pod, "Killing", f"Stopping container {running.state.name}", **self._ref(running.state)
            )
        left = max(0.0, deadline - time.monotonic())
        await asyncio.gather(*(self._kill(r, grace=left) for r in runs), return_exceptions=True)
        # Give the supervisors a turn to record the exits before the status is computed.
        for _ in range(3):
            await asyncio.sleep(0)
        for running in runs:
            state = running.state
            if state.running and running.proc.returncode is not None:
                code = exit_code_of(running.proc.returncode)
                message = await asyncio.to_thread(
                    self._termination_message, running.spec, state, running.log_path, code
                )
                if state.running:
                    state.finish(code, message=message)
        if self.sandbox is not None:
            for pid in self.host.network.pids(self.sandbox):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        self._dirty.set()

    async def _pre_stop(self, running: _Running, deadline: float) -> None:
        hook = running.spec["lifecycle"]["preStop"]
        left = max(0.0, deadline - time.monotonic())
        if "exec" in hook:
            await self._exec_in(running, [str(a) for a in hook["exec"].get("command") or ()], left)
        elif "httpGet" in hook and self.sandbox is not None:
            prober = process_probes.Prober(
                {"httpGet": hook["httpGet"], "timeoutSeconds": left},
                running.spec,
                pod_ip=self.sandbox.ip,
                exec_runner=lambda argv, t: self._exec_in(running, argv, t),
                client=self.host.probe_client,
            )
            await prober.check()
        elif "sleep" in hook:
            await asyncio.sleep(min(left, float(hook["sleep"].get("seconds", 0))))

    async def _delete_pod(self) -> None:
        from kubernetes_asyncio.client.exceptions import ApiException

        body = {"gracePeriodSeconds": 0, "preconditions": {"uid": self.uid}}
        try:
            await call_json(self.host.core.delete_namespaced_pod, self.name, self.namespace, body=body)
        except ApiException as e:
            if e.status not in (_NOT_FOUND, 409):
                log.warning("pod %s/%s: delete failed: %s", self.namespace, self.name, e.reason)

    # -- status -----------------------------------------------------------------------------------

    def _view(self) -> PodView:
        gates = {
            g["conditionType"]: any(
                c.get("type") == g["conditionType"] and c.get("status") == "True"
                for c in (self.pod.get("status") or {}).get("conditions") or ()
            )
            for g in self.pod["spec"].get("readinessGates") or ()
        }
        return PodView(
            restart_policy=self.restart_policy,
            init=self.init,
            containers=self.containers,
            pod_ip=self.sandbox.ip if self.sandbox else self._released_ip,
            host_ip=self.host.node_ip,
            start_time=self.start_time,
            sandbox_ready=self.sandbox is not None,
            terminal_phase=self.terminal_phase,
            readiness_gates=gates,
        )

    async def _status_writer(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            if await self._write_status():
                # NB: coalesce bursts (a container start marks the pod dirty several times).
                await asyncio.sleep(0.05)
            else:
                await asyncio.sleep(1.0)

    async def _write_status(self) -> bool:
        """Patch the status if it changed; False if the write failed (it is retried)."""
        from kubernetes_asyncio.client.exceptions import ApiException

        async with self._write_lock:
            if self._gone:
                return True
            status = pod_status(self._view(), self._conditions)
            if status == self._sent:
                return True
            try:
                await call_json(
                    self.host.core.patch_namespaced_pod_status, self.name, self.namespace, {"status": status}
                )
            except ApiException as e:
                if e.status == _NOT_FOUND:
                    self.vanished()
                    return True
                log.warning(
                    "pod %s/%s: status write failed: %s %s", self.namespace, self.name, e.status, e.reason
                )
                self._dirty.set()
                return False
            except Exception as e:  # e.g. a dropped connection; retried
                log.warning("pod %s/%s: status write failed: %s", self.namespace, self.name, e)
                self._dirty.set()
                return False
            self._sent = status
            self._conditions = status["conditions"]
            return True


def _working_dir(spec: Mapping[str, Any], scratch: Path) -> str:
    """``workingDir`` if it exists on this machine, else a scratch directory of the container.

    NB: synchronous on purpose: a stat and a mkdir on local disk, far below a loop tick.
    """
    workdir = spec.get("workingDir")
    if workdir and Path(workdir).is_dir():
        return str(workdir)
    scratch.mkdir(parents=True, exist_ok=True)
    return str(scratch)


def _container_id() -> str:
    return f"process://{secrets.token_hex(16)}"


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
