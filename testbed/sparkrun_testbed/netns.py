"""Pod addresses for process nodes: the testbed's own network namespaces (ADR 0004).

Kubernetes refuses loopback addresses in EndpointSlices, so pods that run as local processes
need real, non-loopback addresses that the host can reach and that lead nowhere else.

:class:`NamespaceNetwork` (needs root, or ``CAP_NET_ADMIN`` + ``CAP_SYS_ADMIN``, and iproute2):

- one *testbed* network namespace ``sptb-<id>`` holding a bridge ``br0``, with no address and
  no routes of its own: it only switches frames between its ports;
- one veth pair from the host into that bridge (host end ``sph<id>``), which carries the host's
  address ``.1`` of the testbed's private ``/20`` and thereby the host's only route to it;
- one network namespace per pod (``sptb-<id>-<n>``, its own loopback and ports, as in a real
  pod), joined to the bridge by a veth pair whose pod end is ``eth0`` with one address of the
  ``/20``. Pods have no default route: anything outside the ``/20`` is unreachable from them.
- each process node gets an address of its own on the host end (for its kubelet API), so pods'
  ``hostIP`` differs per node as on a real cluster.

Nothing forwards or translates between the ``/20`` and any other network, on the host or
anywhere. The ``/20`` is carved out of a private supernet (``$SPARKRUN_TESTBED_POD_SUPERNET``,
default ``172.30.0.0/16``) such that it overlaps no route on the host; testbeds running side by
side take different blocks, coordinated through ``/run/sparkrun-testbed/net`` (a tmpfs, so the
record disappears with the namespaces on reboot). A record whose owning process is dead is
reclaimed, namespaces included, by the next testbed that allocates.

:class:`LoopbackNetwork` is the fallback without that privilege: pods get distinct 127.x
addresses in the host's network namespace. Then EndpointSlices stay empty (the apiserver
refuses loopback endpoints), two pods that bind the same port on ``0.0.0.0`` collide, DNS
hostnames of pods do not resolve and nothing outlives a pod is enforced by process groups only.

Commands that change the network run ``ip`` as a subprocess (asynchronously, never blocking the
event loop); :func:`cleanup_record` is the synchronous variant for ``testbed down``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ctypes
import fcntl
import ipaddress
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

SUPERNET_ENV = "SPARKRUN_TESTBED_POD_SUPERNET"
DEFAULT_SUPERNET = "172.30.0.0/16"
BLOCK_PREFIX = 20
REGISTRY_ENV = "SPARKRUN_TESTBED_NET_REGISTRY"
DEFAULT_REGISTRY = Path("/run/sparkrun-testbed/net")
NETNS_DIR = Path("/run/netns")
NAME_PREFIX = "sptb-"
BRIDGE = "br0"
POD_IFNAME = "eth0"
MAX_NODES = 250
_CLONE_NEWNET = 0x40000000

# How a pod process enters its sandbox: the pod's network namespace, then private mount and UTS
# namespaces in which the pod's hosts file is bind-mounted over /etc/hosts (cluster DNS names of
# pods resolve through it), the hostname is the pod's and the container's volumes are mounted.
# `exec` keeps the pid, so the process we start *is* the container's main process.
_ENTER_HEAD = ("set -e", 'mount --bind "$1" /etc/hosts', 'hostname "$2"')
_ENTER_TAIL = ("shift 2", 'exec "$@"')


class NetworkError(RuntimeError):
    """A network operation failed; the message names the command and its output."""


@dataclass(frozen=True)
class Sandbox:
    """One pod's network identity: its address and, in namespace mode, its namespace."""

    key: str
    ip: str
    netns: str | None = None
    host_ifname: str | None = None

    def enter(
        self, argv: Sequence[str], *, hosts_file: Path, hostname: str, setup: Sequence[str] = ()
    ) -> list[str]:
        """``argv`` wrapped so that it runs inside this sandbox (unchanged without a namespace).

        ``setup``: shell lines run in the sandbox's mount namespace before ``exec`` (mounts).
        """
        if self.netns is None:
            return list(argv)
        return [
            "nsenter",
            f"--net={NETNS_DIR / self.netns}",
            "--",
            "unshare",
            "--mount",
            "--uts",
            "--propagation",
            "private",
            "--",
            "/bin/sh",
            "-c",
            "\n".join((*_ENTER_HEAD, *setup, *_ENTER_TAIL)),
            "pod-sandbox",
            str(hosts_file),
            hostname,
            *argv,
        ]


class PodNetwork(Protocol):
    """What the process runtime needs from a pod network."""

    mode: str
    limitations: str

    def node_ip(self, index: int) -> str:
        """The address of the ``index``-th process node (where its kubelet API listens)."""
        ...

    def describe(self) -> str:
        """One line for logs and ``testbed status``."""
        ...

    async def setup(self, node_count: int) -> None: ...

    async def teardown(self) -> None: ...

    async def create(self, key: str) -> Sandbox: ...

    async def destroy(self, sandbox: Sandbox) -> None: ...

    async def listen_for_pods(self, ip: str, port: int) -> socket.socket | None:
        """A listening socket on ``ip:port`` that every pod can reach, served by this process.

        None where pods share the host's network (they reach the host's loopback directly).
        """
        ...

    def pids(self, sandbox: Sandbox) -> list[int]:
        """Every process inside the sandbox (empty where the network cannot tell)."""
        ...


@dataclass(frozen=True)
class AddressPlan:
    """How one testbed's ``/20`` is used: ``.1`` host, ``.2``-``.251`` nodes, the rest pods.

    ``x.y.0.0/24`` (host and nodes) and the pod range do not overlap; the pod range starts at
    the second ``/24`` of the block.
    """

    subnet: ipaddress.IPv4Network

    @property
    def host_ip(self) -> str:
        return str(self.subnet[1])

    def node_ip(self, index: int) -> str:
        if not 0 <= index < MAX_NODES:
            raise ValueError(f"node index {index} out of range (at most {MAX_NODES} process nodes)")
        return str(self.subnet[2 + index])

    def pod_ips(self) -> Iterator[str]:
        for i in range(256, self.subnet.num_addresses - 1):
            # NB: x.y.z.0 and x.y.z.255 are valid in a /20 but look like network and broadcast
            # addresses to people and to some tools; leave them out.
            if i % 256 not in (0, 255):
                yield str(self.subnet[i])


class IpPool:
    """Hands out addresses: never-used ones first, then the ones released longest ago.

    NB: so a new pod rarely inherits the address of one that just went away (stale
    endpoints, stale connections).
    """

    def __init__(self, addresses: Iterator[str]) -> None:
        self._fresh = addresses
        self._released: collections.deque[str] = collections.deque()
        self.used: set[str] = set()

    def take(self) -> str:
        ip = next(self._fresh, None)
        if ip is None:
            if not self._released:
                raise NetworkError("the pod address range is exhausted")
            ip = self._released.popleft()
        self.used.add(ip)
        return ip

    def give_back(self, ip: str) -> None:
        if ip in self.used:
            self.used.discard(ip)
            self._released.append(ip)


# -- namespace mode -------------------------------------------------------------------------------


@dataclass
class NamespaceNetwork:
    """The testbed's own network namespaces (see the module docs)."""

    record_path: Path
    supernet: ipaddress.IPv4Network = field(
        default_factory=lambda: ipaddress.IPv4Network(os.environ.get(SUPERNET_ENV, DEFAULT_SUPERNET))
    )
    registry: Path = field(default_factory=lambda: registry_dir())
    mode: str = "netns"
    limitations: str = ""
    net_id: str = ""
    plan: AddressPlan | None = None
    _pool: IpPool | None = None
    _counter: int = 0
    _node_count: int = 0
    _service_ips: list[str] = field(default_factory=list)
    # The Service ClusterIP range: every pod routes it to the bridge, where the runtime answers
    # the ClusterIPs it serves (process_services.py). Empty: only the ClusterIPs known when a
    # pod starts are routed.
    service_cidr: str = ""
    _bridge_ips: set[str] = field(default_factory=set)

    @property
    def testbed_netns(self) -> str:
        return f"{NAME_PREFIX}{self.net_id}"

    @property
    def host_ifname(self) -> str:
        return f"sph{self.net_id}"

    def node_ip(self, index: int) -> str:
        assert self.plan is not None, "setup() first"
        return self.plan.node_ip(index)

    def describe(self) -> str:
        if self.plan is None:
            return "namespaces (not set up)"
        return (
            f"pods in {self.plan.subnet} (namespaces {self.testbed_netns}-*), "
            f"host {self.plan.host_ip} on {self.host_ifname}"
        )

    async def setup(self, node_count: int) -> None:
        """Create the testbed namespace, bridge and host link; reserve a free ``/20``.

        Raises :class:`NetworkError` if a command fails (whatever was created is removed).
        """
        self._node_count = node_count
        self.net_id, subnet = await asyncio.to_thread(_reserve_block, self.registry, self.supernet)
        self.plan = AddressPlan(subnet)
        self._pool = IpPool(self.plan.pod_ips())
        record = NetRecord(
            net_id=self.net_id,
            subnet=str(subnet),
            owner_pid=os.getpid(),
            owner_start=_start_time(os.getpid()),
        )
        record.save(self.record_path)
        tb, host = self.testbed_netns, self.host_ifname
        prefix = subnet.prefixlen
        try:
            await _ip("netns", "add", tb)
            await _ip_batch(
                tb,
                [
                    f"link add {BRIDGE} type bridge",
                    f"link set {BRIDGE} up",
                    "link set lo up",
                ],
            )
            await _ip("link", "add", host, "type", "veth", "peer", "name", "uplink", "netns", tb)
            await _ip_batch(tb, [f"link set uplink master {BRIDGE}", "link set uplink up"])
            # NB: node addresses are /32 secondaries: the /20 of the primary already routes.
            host_cmds = [f"address add {self.plan.host_ip}/{prefix} dev {host}"]
            host_cmds += [f"address add {self.plan.node_ip(i)}/32 dev {host}" for i in range(node_count)]
            host_cmds.append(f"link set {host} up")
            await _ip_batch(None, host_cmds)
            _disable_ipv6(host)
        except BaseException:
            await asyncio.to_thread(cleanup_record, self.record_path)
            raise

    async def teardown(self) -> None:
        """Kill every process in the testbed's namespaces and delete them and the host link."""
        await asyncio.to_thread(cleanup_record, self.record_path)

    async def create(self, key: str) -> Sandbox:
        """A new pod namespace with one address, joined to the bridge."""
        if self.plan is None or self._pool is None:
            raise RuntimeError("NamespaceNetwork.setup() was not called")
        self._counter += 1
        name = f"{self.testbed_netns}-{self._counter:x}"
        veth = f"p{self._counter:x}"
        ip = self._pool.take()
        try:
            await _ip("netns", "add", name)
            await _ip_batch(
                self.testbed_netns,
                [
                    f"link add {veth} type veth peer name {POD_IFNAME} netns {name}",
                    f"link set {veth} master {BRIDGE}",
                    f"link set {veth} up",
                ],
            )
            await _ip_batch(
                name,
                [
                    f"address add {ip}/{self.plan.subnet.prefixlen} dev {POD_IFNAME}",
                    f"link set {POD_IFNAME} up",
                    "link set lo up",
                    *(f"route add {service}/32 dev {POD_IFNAME}" for service in self._service_ips),
                    *([f"route add {self.service_cidr} dev {POD_IFNAME}"] if self.service_cidr else []),
                ],
            )
        except BaseException:
            self._pool.give_back(ip)
            await asyncio.to_thread(_delete_netns, name)
            raise
        return Sandbox(key=key, ip=ip, netns=name, host_ifname=veth)

    async def destroy(self, sandbox: Sandbox) -> None:
        """Kill whatever still runs in the pod's namespace, then delete it (and its veth)."""
        if sandbox.netns is not None:
            await asyncio.to_thread(_kill_and_delete, sandbox.netns)
        if self._pool is not None:
            self._pool.give_back(sandbox.ip)

    def pids(self, sandbox: Sandbox) -> list[int]:
        return netns_pids(sandbox.netns) if sandbox.netns is not None else []

    async def listen_for_pods(self, ip: str, port: int) -> socket.socket | None:
        """Listen on ``ip:port`` on the bridge of the testbed namespace (see the module docs).

        ``ip`` (e.g. the ``kubernetes`` Service's ClusterIP) becomes an address of ``br0`` inside
        the testbed namespace only, never of the host, and every pod gets a route to it over its
        ``eth0``. The socket is created inside the testbed namespace by a helper thread that
        enters it and comes back; the caller accepts on it from the host namespace, where its
        own outgoing connections (to 127.0.0.1) are made.
        """
        if self.plan is None:
            raise RuntimeError("NamespaceNetwork.setup() was not called")
        # NB: the route lets the namespace answer pods' ARP requests (the kernel checks the
        # way back to the sender) and reach them; it leads nowhere but the bridge.
        if ip not in self._bridge_ips:
            first = not self._bridge_ips
            route = [f"route add {self.plan.subnet} dev {BRIDGE}"] if first else []
            await _ip_batch(self.testbed_netns, [f"address add {ip}/32 dev {BRIDGE}", *route])
            self._bridge_ips.add(ip)
            if not self.service_cidr or not _within(ip, self.service_cidr):
                self._service_ips.append(ip)
        return await asyncio.to_thread(_listen_in, NETNS_DIR / self.testbed_netns, ip, port)


# -- loopback mode --------------------------------------------------------------------------------


@dataclass
class LoopbackNetwork:
    """Fallback: every pod gets its own 127.x address in the host namespace (see module docs)."""

    reason: str
    base: ipaddress.IPv4Network = field(
        default_factory=lambda: ipaddress.IPv4Network(f"127.{secrets.randbelow(200) + 30}.0.0/16")
    )
    mode: str = "loopback"
    limitations: str = ""
    _pool: IpPool | None = None

    def __post_init__(self) -> None:
        self.limitations = (
            f"loopback pod addresses ({self.reason}): Services get no endpoints (the apiserver "
            "refuses loopback addresses), pods share the host's ports, pod DNS hostnames do not "
            "resolve, and leftover processes are found by process group only"
        )

    def node_ip(self, index: int) -> str:
        return "127.0.0.1"

    def describe(self) -> str:
        return f"loopback pod addresses in {self.base}"

    async def setup(self, node_count: int) -> None:
        self._pool = IpPool(str(self.base[i]) for i in range(256, self.base.num_addresses - 1))

    async def teardown(self) -> None:
        return None

    async def create(self, key: str) -> Sandbox:
        assert self._pool is not None, "setup() first"
        return Sandbox(key=key, ip=self._pool.take())

    async def listen_for_pods(self, ip: str, port: int) -> socket.socket | None:
        return None

    async def destroy(self, sandbox: Sandbox) -> None:
        if self._pool is not None:
            self._pool.give_back(sandbox.ip)

    def pids(self, sandbox: Sandbox) -> list[int]:
        return []


def choose(record_path: Path, *, force_loopback: bool = False) -> PodNetwork:
    """The namespace network if this process may create namespaces, else the loopback fallback."""
    if force_loopback:
        return LoopbackNetwork(reason="loopback requested")
    problem = namespace_support()
    if problem is not None:
        return LoopbackNetwork(reason=problem)
    return NamespaceNetwork(record_path=record_path)


def namespace_support() -> str | None:
    """None if network namespaces can be made here, else why not (one line)."""
    for tool in ("ip", "nsenter", "unshare", "mount", "hostname"):
        if shutil.which(tool) is None:
            package = "iproute2" if tool == "ip" else "util-linux"
            return f"`{tool}` not found (Debian package {package})"
    probe = f"{NAME_PREFIX}probe-{os.getpid()}-{secrets.token_hex(2)}"
    result = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        return f"cannot create a network namespace: {result.stderr.strip() or 'permission denied'}"
    _delete_netns(probe)
    return None


# -- the on-disk record and cleanup ---------------------------------------------------------------


@dataclass(frozen=True)
class NetRecord:
    """What a namespace network created, so another process can remove it."""

    net_id: str
    subnet: str
    owner_pid: int
    owner_start: int

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(vars(self)) + "\n")
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> NetRecord | None:
        try:
            data = json.loads(path.read_text())
            return cls(
                net_id=str(data["net_id"]),
                subnet=str(data["subnet"]),
                owner_pid=int(data["owner_pid"]),
                owner_start=int(data["owner_start"]),
            )
        except (FileNotFoundError, ValueError, KeyError, TypeError):
            return None

    def owner_alive(self) -> bool:
        return _start_time(self.owner_pid) == self.owner_start


def cleanup_record(record_path: Path) -> bool:
    """Remove everything the network in ``record_path`` created; True if there was something.

    Kills every process left in its pod namespaces (SIGKILL: their pods are gone), deletes the
    namespaces, the host link and the registry entry. Idempotent, synchronous.
    """
    record = NetRecord.load(record_path)
    if record is None or not record.net_id:
        return False
    _cleanup(record.net_id)
    with contextlib.suppress(FileNotFoundError):
        (registry_dir() / f"{record.net_id}.json").unlink()
    with contextlib.suppress(FileNotFoundError):
        record_path.unlink()
    return True


def _cleanup(net_id: str) -> None:
    prefix = f"{NAME_PREFIX}{net_id}"
    names = [n for n in list_netns() if n == prefix or n.startswith(prefix + "-")]
    # NB: pods first, the testbed namespace (the bridge) last.
    for name in sorted(names, key=lambda n: n == prefix):
        _kill_and_delete(name)
    # Deleting the namespace destroys the veth pair only once the kernel releases it (lazily in
    # some sandboxes such as gVisor), so the host end is removed explicitly.
    subprocess.run(["ip", "link", "del", f"sph{net_id}"], capture_output=True, check=False)


def registry_dir() -> Path:
    return Path(os.environ.get(REGISTRY_ENV, str(DEFAULT_REGISTRY)))


def _reserve_block(registry: Path, supernet: ipaddress.IPv4Network) -> tuple[str, ipaddress.IPv4Network]:
    """Pick a ``/20`` of ``supernet`` that no live testbed and no host route uses; record it."""
    if supernet.prefixlen > BLOCK_PREFIX or not supernet.is_private:
        raise NetworkError(f"{SUPERNET_ENV}={supernet} must be a private range of /{BLOCK_PREFIX} or larger")
    registry.mkdir(parents=True, exist_ok=True)
    with (registry / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        taken: list[ipaddress.IPv4Network] = []
        for path in registry.glob("*.json"):
            record = NetRecord.load(path)
            if record is None:
                continue
            if record.owner_alive():
                taken.append(ipaddress.IPv4Network(record.subnet))
            else:
                # A testbed that died without cleaning up: reclaim its namespaces and block.
                _cleanup(record.net_id)
                path.unlink(missing_ok=True)
        taken += host_routes()
        for block in supernet.subnets(new_prefix=BLOCK_PREFIX):
            if not any(block.overlaps(other) for other in taken):
                net_id = secrets.token_hex(3)
                NetRecord(net_id, str(block), os.getpid(), _start_time(os.getpid())).save(
                    registry / f"{net_id}.json"
                )
                return net_id, block
    raise NetworkError(f"no free /{BLOCK_PREFIX} left in {supernet} (set {SUPERNET_ENV} to another range)")


def host_routes() -> list[ipaddress.IPv4Network]:
    """Destinations of every IPv4 route in the host's main table, default route excluded."""
    result = subprocess.run(["ip", "-4", "route", "show", "table", "all"], capture_output=True, text=True)
    routes = []
    for line in result.stdout.splitlines():
        words = line.split()
        if words and words[0] in ("local", "broadcast", "unreachable", "prohibit", "blackhole"):
            words = words[1:]
        if not words or words[0] == "default":
            continue
        with contextlib.suppress(ValueError):
            net = ipaddress.IPv4Network(words[0], strict=False)
            if not net.is_loopback:
                routes.append(net)
    return routes


# -- processes in namespaces ----------------------------------------------------------------------


def list_netns() -> list[str]:
    try:
        return sorted(p.name for p in NETNS_DIR.iterdir())
    except FileNotFoundError:
        return []


def netns_pids(name: str) -> list[int]:
    """Every process whose network namespace is ``name`` (as ``ip netns pids`` finds them)."""
    try:
        target = os.stat(NETNS_DIR / name)
    except FileNotFoundError:
        return []
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            st = os.stat(entry / "ns" / "net")
        except (FileNotFoundError, ProcessLookupError, PermissionError, NotADirectoryError):
            continue
        if st.st_ino == target.st_ino and st.st_dev == target.st_dev:
            pids.append(int(entry.name))
    return pids


def _kill_and_delete(name: str) -> None:
    deadline = time.monotonic() + 5.0
    while (pids := netns_pids(name)) and time.monotonic() < deadline:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)
    _delete_netns(name)


def _within(ip: str, cidr: str) -> bool:
    return ipaddress.IPv4Address(ip) in ipaddress.IPv4Network(cidr, strict=False)


def _listen_in(netns_path: Path, ip: str, port: int) -> socket.socket:
    """A listening TCP socket bound inside the network namespace at ``netns_path``.

    Runs in a thread of its own: ``setns`` switches only the calling thread, which switches
    back before returning (if it cannot, the process is in an unknown state and exits).
    """
    result: list[socket.socket] = []
    errors: list[BaseException] = []

    def work() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        own = os.open(f"/proc/self/task/{threading.get_native_id()}/ns/net", os.O_RDONLY)
        target = os.open(netns_path, os.O_RDONLY)
        try:
            if libc.setns(target, _CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), f"setns({netns_path}) failed")
            try:
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((ip, port))
                sock.listen(128)
                sock.setblocking(False)
                result.append(sock)
            except BaseException as e:
                errors.append(e)
            finally:
                if libc.setns(own, _CLONE_NEWNET) != 0:
                    os._exit(70)  # NB: a thread stuck in the wrong namespace must not run on
        except BaseException as e:
            errors.append(e)
        finally:
            os.close(own)
            os.close(target)

    thread = threading.Thread(target=work, name="netns-listen")
    thread.start()
    thread.join()
    if errors:
        raise NetworkError(f"cannot listen on {ip}:{port} in {netns_path}: {errors[0]}") from errors[0]
    return result[0]


def _delete_netns(name: str) -> None:
    subprocess.run(["ip", "netns", "delete", name], capture_output=True, check=False)


def _start_time(pid: int) -> int:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return -1
    return int(raw[raw.rindex(")") + 2 :].split()[19])


def _disable_ipv6(ifname: str) -> None:
    # NB: keeps IPv6 link-local chatter (router solicitations, MLD) off the testbed link.
    with contextlib.suppress(OSError):
        Path(f"/proc/sys/net/ipv6/conf/{ifname}/disable_ipv6").write_text("1\n")


async def _ip(*args: str) -> None:
    await _run(["ip", *args])


async def _ip_batch(netns: str | None, commands: Sequence[str]) -> None:
    argv = ["ip"] + (["-n", netns] if netns else []) + ["-batch", "-"]
    await _run(argv, stdin="\n".join(commands) + "\n")


async def _run(argv: list[str], *, stdin: str | None = None) -> None:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await proc.communicate(stdin.encode() if stdin is not None else None)
    if proc.returncode != 0:
        shown = " ".join(argv) + (f" <<< {stdin.strip()!r}" if stdin else "")
        raise NetworkError(f"`{shown}` exited {proc.returncode}: {out.decode(errors='replace').strip()}")
