"""The process runtime: a kubelet for the testbed's *process nodes* (``docs/testbed.md``, ADR 0004).

KWOK fakes every other node: their pods turn Running without running anything. Pods bound to a
process node run for real, as local processes: this runtime watches the pods of its nodes and,
for each, does a kubelet's job (:mod:`.process_pod`): a sandbox with its own address
(:mod:`.netns`, ADR 0004), init containers then containers as processes with the pod's
environment and the command its image maps to (:mod:`.process_images`), real probes,
restart policies with back-off, status written like a kubelet's, graceful deletion. It also
keeps the nodes registered and heartbeating (:mod:`.process_node`) and serves each node's
kubelet API for ``kubectl logs`` (:mod:`.process_kubelet`).

Run it as a daemon of a testbed (``testbed up`` does, for the topology's process nodes)::

    python -m sparkrun_testbed.process_runtime --run-dir RUN_DIR --node proc-0 \\
        [--node proc-1 ...] [--health-port PORT] [--loopback]

It uses ``RUN_DIR/kubeconfig``, the testbed CA in ``RUN_DIR/pki`` (to issue each node's
kubelet serving certificate) and writes under ``RUN_DIR/process/``: ``network.json`` (what to
remove if it dies), ``shims/``, ``pki/``, ``pids`` and ``pods/<ns>_<name>_<uid>/`` (logs,
hosts file, scratch directories). SIGTERM or SIGINT stops every pod's processes (SIGTERM, then
SIGKILL after ``--stop-grace`` seconds) and removes the network; pods are left in the API as
they were, as when a node goes down. :func:`cleanup` removes whatever a runtime that was
killed outright left behind.

What the control plane calls (``testbed/plane.py``): :func:`prepare_credentials` and
:func:`apiserver_args` (kubelet client credentials for kube-apiserver), :func:`launch`,
:func:`health_url` and :func:`cleanup`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
import time
import urllib.parse
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from sparkrun_testbed import daemons, netns, pki, process_images
from sparkrun_testbed.daemons import Daemon
from sparkrun_testbed.process_api import call_json
from sparkrun_testbed.process_dns import Registry
from sparkrun_testbed.process_events import Events
from sparkrun_testbed.process_kubelet import KubeletServer, health_app, server_context
from sparkrun_testbed.process_node import RUNTIME_LABEL, RUNTIME_PROCESS, NodeAgent
from sparkrun_testbed.process_pod import Host, PodWorker, Settings
from sparkrun_testbed.process_probes import http_client
from sparkrun_testbed.process_services import ServiceProxy, pipe
from sparkrun_testbed.process_status import TERMINAL

log = logging.getLogger("sparkrun.testbed.process")

PROCESS_RUNTIME = "process-runtime"
RUNTIME_FILE = "runtime.json"
STATE_SUBDIR = "process"
KUBELET_CLIENT = "kube-apiserver-kubelet-client"
_WATCH_SECONDS = 240
_KWOK_ANNOTATION = "kwok.x-k8s.io/node"
_NOT_FOUND = 404


# -- the control plane's side ---------------------------------------------------------------------


def prepare_credentials(pki_dir: Path) -> None:
    """Issue kube-apiserver's kubelet client certificate from the testbed CA in ``pki_dir``."""
    ca = pki.CertificateAuthority.load(pki_dir / "ca.crt", pki_dir / "ca.key")
    ca.issue(KUBELET_CLIENT, organizations=("system:masters",), client=True).write(
        pki_dir / f"{KUBELET_CLIENT}.crt", pki_dir / f"{KUBELET_CLIENT}.key"
    )


def apiserver_args(pki_dir: Path) -> list[str]:
    """kube-apiserver flags for talking to process nodes' kubelet APIs (``kubectl logs``).

    With ``--kubelet-certificate-authority`` kube-apiserver verifies the kubelet's serving
    certificate (without it, it would skip verification); the client certificate is what the
    kubelet API requires. Needs :func:`prepare_credentials` first.
    """
    return [
        f"--kubelet-certificate-authority={pki_dir / 'ca.crt'}",
        f"--kubelet-client-certificate={pki_dir / f'{KUBELET_CLIENT}.crt'}",
        f"--kubelet-client-key={pki_dir / f'{KUBELET_CLIENT}.key'}",
    ]


def launch(
    run_dir: Path,
    nodes: Sequence[str],
    *,
    health_port: int,
    env: Mapping[str, str] | None = None,
    extra_args: Sequence[str] = (),
    log: Path | None = None,
) -> Daemon:
    """Start the runtime for ``nodes`` as a daemon of the testbed in ``run_dir``.

    ``extra_args`` are more command-line options (see :func:`main`); ``log`` defaults to
    ``run_dir/logs/process-runtime.log``.
    """
    argv = [
        sys.executable,
        "-m",
        "sparkrun_testbed.process_runtime",
        f"--run-dir={run_dir}",
        f"--health-port={health_port}",
        *(f"--node={name}" for name in nodes),
        *extra_args,
    ]
    environ = dict(env if env is not None else os.environ)
    environ["KUBECONFIG"] = str(run_dir / "kubeconfig")
    log = log or run_dir / "logs" / f"{PROCESS_RUNTIME}.log"
    return daemons.start(PROCESS_RUNTIME, argv, log=log, env=environ)


def health_url(health_port: int) -> str:
    return f"http://127.0.0.1:{health_port}/healthz"


def cleanup(run_dir: Path, *, state_dir: Path | None = None) -> None:
    """Remove what a runtime of ``run_dir`` left: processes of its pods, its network. Idempotent.

    Call it after the runtime's daemon was stopped; a runtime stopped by SIGTERM has cleaned up
    already, one killed by SIGKILL has not. ``state_dir`` as given to the runtime, if not the
    default ``run_dir/process``.
    """
    state_dir = state_dir or run_dir / STATE_SUBDIR
    netns.cleanup_record(state_dir / "network.json")
    _kill_tracked(state_dir / "pids")


# -- the daemon -----------------------------------------------------------------------------------


@dataclass
class _Node:
    name: str
    ip: str
    agent: NodeAgent | None = None
    server: KubeletServer | None = None
    host: Host | None = None
    synced: bool = False
    watch: asyncio.Task[None] | None = None
    heartbeat: asyncio.Task[None] | None = None


@dataclass
class RuntimeOptions:
    run_dir: Path
    nodes: list[str]
    health_port: int = 0
    loopback: bool = False
    stop_grace: float = 5.0
    settings: Settings = field(default_factory=Settings)
    images_file: Path | None = None
    state_dir: Path | None = None
    service_cidr: str = ""


class ProcessRuntime:
    """The daemon's state: nodes, pod workers, network (see module docs)."""

    def __init__(self, options: RuntimeOptions) -> None:
        self.options = options
        self.state_dir = options.state_dir or options.run_dir / STATE_SUBDIR
        self.nodes = [_Node(name=name, ip="") for name in options.nodes]
        self.workers: dict[str, PodWorker] = {}
        self.finished: dict[str, None] = {}
        self.network: netns.PodNetwork = netns.choose(
            self.state_dir / "network.json", force_loopback=options.loopback
        )
        if isinstance(self.network, netns.NamespaceNetwork):
            self.network.service_cidr = options.service_cidr
        self.dns = Registry()
        self.services = ServiceProxy(self.network, self.dns)
        self.rules = process_images.load_rules(options.images_file)
        self._health: web.AppRunner | None = None
        self._pids = self.state_dir / "pids"
        self._background: set[asyncio.Task[None]] = set()
        self._api_proxy: asyncio.Server | None = None
        self._services: asyncio.Task[None] | None = None

    def ready(self) -> bool:
        return all(node.synced for node in self.nodes)

    async def run(self, stop: asyncio.Event) -> None:
        """Serve until ``stop`` is set, then stop every pod and remove the network."""
        from kubernetes_asyncio import client, config

        self.state_dir.mkdir(parents=True, exist_ok=True)
        shim_dir = self.state_dir / "shims"
        process_images.write_shims(shim_dir)
        configuration = client.Configuration()
        await config.load_kube_config(
            config_file=str(self.options.run_dir / "kubeconfig"), client_configuration=configuration
        )
        probe_client = http_client()
        async with client.ApiClient(configuration) as api:
            core = client.CoreV1Api(api)
            coordination = client.CoordinationV1Api(api)
            version = (await client.VersionApi(api).get_code()).git_version
            await self.network.setup(len(self.nodes))
            if self.network.mode != "netns":
                log.warning("pod network: %s", self.network.limitations)
            else:
                log.info("pod network: namespaces, %s", self.network.describe())
            _write_json(
                self.state_dir / RUNTIME_FILE,
                {
                    "pid": os.getpid(),
                    "network": self.network.mode,
                    "description": self.network.describe(),
                    "limitations": self.network.limitations,
                    "nodes": self.options.nodes,
                },
            )
            manifests = _node_manifests(self.options.run_dir)
            api_endpoint = await self._expose_api(core, str(configuration.host))
            ca = pki.CertificateAuthority.load(
                self.options.run_dir / "pki" / "ca.crt", self.options.run_dir / "pki" / "ca.key"
            )
            try:
                for index, node in enumerate(self.nodes):
                    node.ip = self.network.node_ip(index)
                    node.server = await self._serve_kubelet(node, ca)
                    node.agent = NodeAgent(
                        core=core,
                        coordination=coordination,
                        name=node.name,
                        ip=node.ip,
                        kubelet_port=node.server.port,
                        manifest=manifests.get(node.name),
                        kubelet_version=version,
                    )
                    await node.agent.register()
                    node.host = Host(
                        core=core,
                        node_name=node.name,
                        node_ip=node.ip,
                        allocatable=node.agent.allocatable,
                        network=self.network,
                        rules=self.rules,
                        shim_dir=shim_dir,
                        pods_dir=self.state_dir / "pods",
                        dns=self.dns,
                        events=Events(core, node.name),
                        probe_client=probe_client,
                        settings=self.options.settings,
                        on_spawn=self._track,
                        api_endpoint=api_endpoint,
                    )
                    node.heartbeat = asyncio.create_task(node.agent.heartbeat())
                    node.watch = asyncio.create_task(self._watch(node, core))
                self._services = asyncio.create_task(self.services.run(core, client.DiscoveryV1Api(api)))
                await self._serve_health()
                log.info("process runtime ready: nodes %s", ", ".join(n.name for n in self.nodes))
                await stop.wait()
            finally:
                await self._stop(probe_client)

    async def _serve_kubelet(self, node: _Node, ca: pki.CertificateAuthority) -> KubeletServer:
        pki_dir = self.state_dir / "pki"
        pki_dir.mkdir(parents=True, exist_ok=True)
        cert, key = pki_dir / f"{node.name}.crt", pki_dir / f"{node.name}.key"
        ca.issue(node.name, hosts=(node.ip, node.name)).write(cert, key)
        server = KubeletServer(
            node_name=node.name,
            find_pod=lambda ns, name: self._find(node.name, ns, name),
            list_pods=lambda: [w.pod for w in self.workers.values() if w.host.node_name == node.name],
        )
        context = server_context(cert, key, self.options.run_dir / "pki" / "ca.crt")
        await server.start(node.ip, 0, context)
        return server

    async def _serve_health(self) -> None:
        if not self.options.health_port:
            return
        self._health = web.AppRunner(health_app(self.ready), access_log=None, handle_signals=False)
        await self._health.setup()
        await web.TCPSite(self._health, "127.0.0.1", self.options.health_port, reuse_address=True).start()

    async def _expose_api(self, core: Any, server: str) -> tuple[str, int] | None:
        """Make kube-apiserver reachable from pods at the ``kubernetes`` Service's ClusterIP.

        There is no kube-proxy: the ClusterIP (which kube-apiserver's certificate names) becomes
        an address of the testbed namespace's bridge, where this runtime accepts connections and
        relays the bytes to kube-apiserver on 127.0.0.1, TLS untouched. With loopback pod
        addresses pods reach kube-apiserver on 127.0.0.1 directly. None if neither works.
        """
        upstream = urllib.parse.urlsplit(server)
        upstream_host, upstream_port = upstream.hostname or "127.0.0.1", upstream.port or 443
        try:
            service = await call_json(core.read_namespaced_service, "kubernetes", "default")
            ip = service["spec"]["clusterIP"]
            port = int(service["spec"]["ports"][0]["port"])
            sock = await self.network.listen_for_pods(ip, port)
        except Exception as e:
            log.warning("pods get no in-cluster API access: %s", e)
            return None
        if sock is None:
            return upstream_host, upstream_port

        async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                up_reader, up_writer = await asyncio.open_connection(upstream_host, upstream_port)
            except OSError:
                writer.close()
                return
            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
            for w in (writer, up_writer):
                w.close()

        self._api_proxy = await asyncio.start_server(relay, sock=sock)
        log.info("pods reach kube-apiserver at %s:%d", ip, port)
        return ip, port

    def _find(self, node: str, namespace: str, name: str) -> PodWorker | None:
        found = [
            w
            for w in self.workers.values()
            if w.host.node_name == node and w.namespace == namespace and w.name == name
        ]
        return found[-1] if found else None

    async def _stop(self, probe_client: Any) -> None:
        for node in self.nodes:
            for task in (node.watch, node.heartbeat):
                if task is not None:
                    task.cancel()
        workers = list(self.workers.values())
        if workers:
            log.info("stopping %d pod(s)", len(workers))
            await asyncio.gather(
                *(w.shutdown(self.options.stop_grace) for w in workers), return_exceptions=True
            )
        for node in self.nodes:
            if node.server is not None:
                await node.server.stop()
            if node.host is not None:
                await node.host.events.drain(seconds=1.0)
        if self._health is not None:
            await self._health.cleanup()
        if self._api_proxy is not None:
            self._api_proxy.close()
        if self._services is not None:
            self._services.cancel()
            await asyncio.gather(self._services, return_exceptions=True)
        await probe_client.aclose()
        await self.network.teardown()
        _kill_tracked(self._pids)
        log.info("stopped: no pod process and no pod network left")

    # -- pods -----------------------------------------------------------------------------------

    async def _watch(self, node: _Node, core: Any) -> None:
        """List and watch the pods bound to ``node``; relist after any error."""
        selector = f"spec.nodeName={node.name}"
        version: str | None = None
        while True:
            try:
                if version is None:
                    body = await call_json(core.list_pod_for_all_namespaces, field_selector=selector)
                    self._sync(node, body.get("items") or [])
                    version = body["metadata"]["resourceVersion"]
                    node.synced = True
                version = await self._watch_once(node, core, selector, version)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("node %s: pod watch failed (%s); listing again", node.name, e)
                version = None
                await asyncio.sleep(1.0)

    async def _watch_once(self, node: _Node, core: Any, selector: str, version: str) -> str | None:
        """One watch request; returns the version to resume from (None: list again)."""
        response = await core.list_pod_for_all_namespaces(
            field_selector=selector,
            watch=True,
            resource_version=version,
            allow_watch_bookmarks=True,
            timeout_seconds=_WATCH_SECONDS,
            _preload_content=False,
            _request_timeout=aiohttp.ClientTimeout(sock_connect=10, sock_read=_WATCH_SECONDS + 30),
        )
        buffer = b""
        async with response:
            if response.status != 200:
                raise RuntimeError(f"watch answered {response.status}: {(await response.read())[:500]!r}")
            async for chunk in response.content.iter_any():
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    kind, obj = event.get("type"), event.get("object") or {}
                    if kind == "ERROR":
                        log.info("node %s: watch ended: %s", node.name, obj.get("message"))
                        return None
                    version = obj.get("metadata", {}).get("resourceVersion", version)
                    if kind == "DELETED":
                        worker = self.workers.get(obj["metadata"]["uid"])
                        if worker is not None:
                            worker.vanished()
                    elif kind in ("ADDED", "MODIFIED"):
                        self._handle(node, obj)
        return version

    def _sync(self, node: _Node, pods: Sequence[dict[str, Any]]) -> None:
        present = {p["metadata"]["uid"] for p in pods}
        for uid, worker in list(self.workers.items()):
            if worker.host.node_name == node.name and uid not in present:
                worker.vanished()
        for pod in pods:
            self._handle(node, pod)

    def _handle(self, node: _Node, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        uid = meta["uid"]
        worker = self.workers.get(uid)
        if worker is not None:
            worker.observe(pod)
            return
        if uid in self.finished:
            return
        if (pod.get("status") or {}).get("phase") in TERMINAL:
            # A pod this runtime did not run (or no longer tracks) that is already over: a
            # kubelet only completes its deletion.
            if meta.get("deletionTimestamp"):
                self._remember(uid)
                assert node.host is not None
                self._spawn(_delete(node.host.core, pod))
            return
        assert node.host is not None
        worker = PodWorker(node.host, pod)
        self.workers[uid] = worker
        worker.start()
        self._spawn(self._forget_when_done(worker))

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _forget_when_done(self, worker: PodWorker) -> None:
        await worker.finished.wait()
        self.workers.pop(worker.uid, None)
        self._remember(worker.uid)

    def _remember(self, uid: str) -> None:
        self.finished[uid] = None
        while len(self.finished) > 10_000:
            self.finished.pop(next(iter(self.finished)))

    def _track(self, pid: int) -> None:
        # NB: a record of every container process (pid and start time), so cleanup() can kill
        # leftovers even without network namespaces (loopback mode) after a SIGKILL.
        with self._pids.open("a") as f:
            f.write(f"{pid} {_start_time(pid)}\n")


async def _delete(core: Any, pod: Mapping[str, Any]) -> None:
    from kubernetes_asyncio.client.exceptions import ApiException

    meta = pod["metadata"]
    body = {"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}}
    with contextlib.suppress(ApiException):
        await call_json(core.delete_namespaced_pod, meta["name"], meta["namespace"], body=body)


def _node_manifests(run_dir: Path) -> dict[str, dict[str, Any]]:
    """Node manifests of the testbed topology by name, made fit for process nodes."""
    from sparkrun_testbed.state import State
    from sparkrun_testbed.topology import Topology, node_manifests

    state = State.load(run_dir)
    if state is None:
        return {}
    result = {}
    for manifest in node_manifests(Topology.from_dict(state.topology)):
        meta = manifest["metadata"]
        # KWOK must never manage a process node: no annotation, no kwok type label.
        (meta.get("annotations") or {}).pop(_KWOK_ANNOTATION, None)
        labels = meta.setdefault("labels", {})
        if labels.get("type") == "kwok":
            del labels["type"]
        labels[RUNTIME_LABEL] = RUNTIME_PROCESS
        result[meta["name"]] = manifest
    return result


def read_info(run_dir: Path, *, state_dir: Path | None = None) -> dict[str, Any] | None:
    """What the runtime of ``run_dir`` reported at start (``network``: ``netns`` or ``loopback``,
    ``description``, ``limitations``, ``nodes``), or None if it has not started."""
    try:
        path = (state_dir or run_dir / STATE_SUBDIR) / RUNTIME_FILE
        info: dict[str, Any] = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return None
    return info


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(path)


def _start_time(pid: int) -> int:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return -1
    return int(raw[raw.rindex(")") + 2 :].split()[19])


def _kill_tracked(path: Path) -> None:
    """SIGKILL the process groups recorded in ``path`` whose leader is still the same process."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return
    for line in lines:
        with contextlib.suppress(ValueError):
            pid, start = (int(x) for x in line.split())
            if start >= 0 and _start_time(pid) == start:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)
    path.unlink(missing_ok=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sparkrun_testbed.process_runtime")
    parser.add_argument("--run-dir", type=Path, required=True, help="the testbed's run directory")
    parser.add_argument("--node", action="append", required=True, help="a process node (repeatable)")
    parser.add_argument("--health-port", type=int, default=0, help="serve /healthz on 127.0.0.1:PORT")
    parser.add_argument("--loopback", action="store_true", help="loopback pod addresses (no namespaces)")
    parser.add_argument("--stop-grace", type=float, default=5.0, help="seconds pods get when it stops")
    parser.add_argument("--backoff-initial", type=float, default=Settings.backoff_initial)
    parser.add_argument("--backoff-max", type=float, default=Settings.backoff_max)
    parser.add_argument("--images", type=Path, default=None, help="image rules YAML (process_images)")
    parser.add_argument("--service-cidr", default="", help="the Service range pods route to the runtime")
    parser.add_argument(
        "--state-dir", type=Path, default=None, help="where its files go (default: RUN_DIR/process)"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s [process-runtime] %(message)s",
        stream=sys.stderr,
    )
    # NB: httpx logs every probe request at INFO; a busy node would drown its own log.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    options = RuntimeOptions(
        run_dir=args.run_dir.resolve(),
        nodes=list(args.node),
        health_port=args.health_port,
        loopback=args.loopback,
        stop_grace=args.stop_grace,
        settings=Settings(backoff_initial=args.backoff_initial, backoff_max=args.backoff_max),
        images_file=args.images,
        service_cidr=args.service_cidr,
        state_dir=args.state_dir.resolve() if args.state_dir else None,
    )

    async def serve() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await ProcessRuntime(options).run(stop)

    started = time.monotonic()
    try:
        asyncio.run(serve())
    except Exception:
        log.exception("process runtime failed after %.1f s", time.monotonic() - started)
        cleanup(options.run_dir, state_dir=options.state_dir)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
