"""Volumes of process-node pods: backing directories, and mounts inside the pod's sandbox.

Each volume of a pod gets a directory under ``<pod dir>/volumes/<name>`` (or a host path);
each ``volumeMount`` of a container becomes a bind mount in the container's private mount
namespace (see :mod:`.netns`), so nothing changes on the host's own filesystem view:

=========================  =======================================================================
``emptyDir``               a directory (``medium: Memory``: a tmpfs of ``sizeLimit``, one per container)
``hostPath``               the host path (must exist)
``persistentVolumeClaim``  the ``hostPath``/``local`` path of the bound PersistentVolume (no provisioner:
                           PVs are made by hand or by the test; ``DirectoryOrCreate`` is honoured)
``configMap``/``secret``   files written once at pod start (``items``, ``defaultMode``, ``optional``)
``downwardAPI``            files from ``fieldRef``/``resourceFieldRef``
``projected``              the above plus ``serviceAccountToken`` (TokenRequest, bound to the pod,
                           refreshed at 80 % of its lifetime): the ServiceAccount admission plugin's
                           ``kube-api-access-*`` volume, so in-cluster clients find their token,
                           ``ca.crt`` and ``namespace``
=========================  =======================================================================

A mount needs a mount point: ``mountPath`` must exist on this machine, or lie under ``/run``
(``/var/run``), where the sandbox mounts a fresh tmpfs first and creates mount points freely.
A volume whose source is not there yet (a claim not bound, a ConfigMap or Secret not created)
keeps the pod's containers waiting in ``ContainerCreating``, with a ``FailedMount`` event, and
is tried again, as a kubelet does: a container never starts without its volume (it would write
onto the host). Other mounts and unsupported volume types (CSI, ...), which no retry can fix on
a process node, are skipped; the runtime reports each as a Warning event on the pod.

:func:`mount_script` turns mounts into the shell lines the sandbox runs before ``exec``.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import os
import shlex
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkrun_testbed import process_env

RUN_DIRS = ("/run", "/var/run")
DEFAULT_MODE = 0o644

TokenIssuer = Callable[[str, str | None, int], Awaitable[tuple[str, datetime.datetime]]]
"""``issue(service_account, audience, expiration_seconds) -> (token, expires_at)``."""


@dataclass(frozen=True)
class Mount:
    """One mount in a container's sandbox: a bind of ``source``, or a tmpfs when ``source`` is None."""

    target: str
    source: str | None
    readonly: bool = False
    tmpfs_size: str | None = None
    file: bool = False


@dataclass
class Volume:
    """A prepared volume: where its content is, or why it cannot be mounted."""

    name: str
    path: Path | None = None
    memory: bool = False
    size_limit: str | None = None
    problem: str | None = None
    #: ``problem`` may go away (a claim not bound yet, a ConfigMap not created yet): the pod waits
    #: and tries again, as a kubelet does, instead of starting without the volume
    retry: bool = False
    readonly: bool = False
    tokens: list[_Token] = field(default_factory=list)


@dataclass
class _Token:
    path: Path
    service_account: str
    audience: str | None
    expiration: int
    expires_at: datetime.datetime | None = None


def _write(path: Path, data: bytes, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    tmp.chmod(mode)
    tmp.replace(path)


def _items(
    data: Mapping[str, bytes], items: Sequence[Mapping[str, Any]] | None, mode: int
) -> list[tuple[str, bytes, int]]:
    if not items:
        return [(key, value, mode) for key, value in data.items()]
    return [
        (str(item["path"]), data[item["key"]], int(item.get("mode", mode)))
        for item in items
        if item["key"] in data
    ]


async def _object_data(
    lookup: process_env.Lookup, kind: str, name: str, *, optional: bool
) -> dict[str, bytes] | None:
    obj = await lookup(kind, name)
    if obj is None:
        return {} if optional else None
    raw = {str(k): str(v) for k, v in (obj.get("data") or {}).items()}
    if kind == "Secret":
        return {k: base64.b64decode(v) for k, v in raw.items()}
    result = {k: v.encode() for k, v in raw.items()}
    result.update({str(k): base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()})
    return result


def _downward(
    pod: Mapping[str, Any], items: Sequence[Mapping[str, Any]], allocatable: Mapping[str, str]
) -> dict[str, bytes]:
    files = {}
    containers = [*(pod["spec"].get("initContainers") or ()), *(pod["spec"].get("containers") or ())]
    for item in items:
        if "fieldRef" in item:
            value = process_env.field_value(pod, item["fieldRef"]["fieldPath"])
        else:
            ref = item["resourceFieldRef"]
            target: Mapping[str, Any] = next(
                (c for c in containers if c.get("name") == ref.get("containerName")), {}
            )
            value = process_env.resource_value(target, ref["resource"], ref.get("divisor"), allocatable)
        files[str(item["path"])] = value.encode()
    return files


async def prepare(
    pod: Mapping[str, Any],
    pod_dir: Path,
    *,
    lookup: process_env.Lookup,
    issue_token: TokenIssuer,
    allocatable: Mapping[str, str],
) -> dict[str, Volume]:
    """Create every volume of ``pod`` under ``pod_dir/volumes`` (see module docs).

    Never raises for a volume that cannot be made: its :attr:`Volume.problem` says why.
    """
    volumes: dict[str, Volume] = {}
    for spec in pod["spec"].get("volumes") or ():
        volumes[spec["name"]] = await _prepare_one(spec, pod, pod_dir, lookup, issue_token, allocatable)
    return volumes


async def prepare_again(
    volumes: dict[str, Volume],
    pod: Mapping[str, Any],
    pod_dir: Path,
    *,
    lookup: process_env.Lookup,
    issue_token: TokenIssuer,
    allocatable: Mapping[str, str],
) -> None:
    """Prepare again, in place, every volume of ``volumes`` whose problem may have gone away."""
    for spec in pod["spec"].get("volumes") or ():
        old = volumes.get(spec["name"])
        if old is not None and old.problem is not None and old.retry:
            volumes[spec["name"]] = await _prepare_one(spec, pod, pod_dir, lookup, issue_token, allocatable)


def waiting(volumes: Mapping[str, Volume]) -> dict[str, str]:
    """The volumes a pod must wait for (name -> problem), as a kubelet waits before starting containers."""
    return {name: v.problem for name, v in volumes.items() if v.problem is not None and v.retry}


async def _prepare_one(
    spec: Mapping[str, Any],
    pod: Mapping[str, Any],
    pod_dir: Path,
    lookup: process_env.Lookup,
    issue_token: TokenIssuer,
    allocatable: Mapping[str, str],
) -> Volume:
    name = spec["name"]
    volume = Volume(name=name, path=pod_dir / "volumes" / name)
    service_account = str(pod["spec"].get("serviceAccountName") or "default")
    try:
        await _fill(volume, spec, pod, lookup, issue_token, allocatable, service_account)
    except Exception as e:  # reported on the pod, the other volumes still work
        volume.problem = f"volume {name!r}: {e}"
        volume.retry = True
    return volume


async def _claim_path(lookup: process_env.Lookup, claim_name: str) -> tuple[Path | None, str | None]:
    """The directory of a bound claim's volume (``hostPath`` or ``local``), or why there is none.

    There is no storage provisioner on the testbed: a claim binds to a PersistentVolume someone
    made (a test, or ``kubectl apply``), whose ``hostPath``/``local`` path holds the files, so every
    pod of the claim (a download Job's, then an engine's) sees the same directory.
    """
    claim = await lookup("PersistentVolumeClaim", claim_name)
    if claim is None:
        return None, f'persistentvolumeclaim "{claim_name}" not found'
    volume_name = (claim.get("spec") or {}).get("volumeName")
    if (claim.get("status") or {}).get("phase") != "Bound" or not volume_name:
        return None, f'persistentvolumeclaim "{claim_name}" is not bound'
    pv = await lookup("PersistentVolume", volume_name)
    source = (pv or {}).get("spec") or {}
    path = (source.get("hostPath") or source.get("local") or {}).get("path")
    if not path:
        return (
            None,
            f"persistentvolume {volume_name} has no hostPath or local path (unsupported on process nodes)",
        )
    host = Path(path)
    if not await asyncio.to_thread(host.is_dir):
        if (source.get("hostPath") or {}).get("type") == "DirectoryOrCreate":
            await asyncio.to_thread(host.mkdir, parents=True, exist_ok=True)
        else:
            return None, f"persistentvolume {volume_name}: {host} is not a directory on this machine"
    return host, None


async def _fill(
    volume: Volume,
    spec: Mapping[str, Any],
    pod: Mapping[str, Any],
    lookup: process_env.Lookup,
    issue_token: TokenIssuer,
    allocatable: Mapping[str, str],
    service_account: str,
) -> None:
    assert volume.path is not None
    if "emptyDir" in spec:
        await asyncio.to_thread(volume.path.mkdir, parents=True, exist_ok=True)
        empty = spec["emptyDir"] or {}
        volume.memory = empty.get("medium") == "Memory"
        volume.size_limit = empty.get("sizeLimit")
        return
    if "hostPath" in spec:
        host = Path(spec["hostPath"]["path"])
        if not await asyncio.to_thread(host.exists):
            volume.problem = f"hostPath {host} does not exist on this machine"
        volume.path = host
        return
    if "persistentVolumeClaim" in spec:
        source = spec["persistentVolumeClaim"]
        volume.path, volume.problem = await _claim_path(lookup, source["claimName"])
        volume.retry = volume.problem is not None
        volume.readonly = bool(source.get("readOnly"))
        return
    sources: list[Mapping[str, Any]]
    if "projected" in spec:
        sources = list(spec["projected"].get("sources") or ())
        mode = int(spec["projected"].get("defaultMode", DEFAULT_MODE))
    elif any(k in spec for k in ("configMap", "secret", "downwardAPI")):
        sources = [spec]
        kind = next(k for k in ("configMap", "secret", "downwardAPI") if k in spec)
        mode = int((spec[kind] or {}).get("defaultMode", DEFAULT_MODE))
    else:
        kinds = ", ".join(k for k in spec if k != "name")
        volume.problem = f"volume type {kinds} is not supported on process nodes"
        return
    await asyncio.to_thread(volume.path.mkdir, parents=True, exist_ok=True)
    for source in sources:
        files: list[tuple[str, bytes, int]] = []
        if "configMap" in source or "secret" in source:
            key = "configMap" if "configMap" in source else "secret"
            ref = source[key]
            name = ref.get("name") or ref.get("secretName")
            data = await _object_data(
                lookup,
                "ConfigMap" if key == "configMap" else "Secret",
                name,
                optional=bool(ref.get("optional")),
            )
            if data is None:
                raise FileNotFoundError(f'{key.lower()} "{name}" not found')
            files = _items(data, ref.get("items"), int(ref.get("defaultMode", mode)))
        elif "downwardAPI" in source:
            data = _downward(pod, source["downwardAPI"].get("items") or (), allocatable)
            files = [(path, value, mode) for path, value in data.items()]
        elif "serviceAccountToken" in source:
            ref = source["serviceAccountToken"]
            token = _Token(
                path=volume.path / ref["path"],
                service_account=service_account,
                audience=ref.get("audience"),
                expiration=int(ref.get("expirationSeconds", 3600)),
            )
            await refresh_token(token, issue_token, mode)
            volume.tokens.append(token)
        for path, value, file_mode in files:
            await asyncio.to_thread(_write, volume.path / path, value, file_mode)


async def refresh_token(token: _Token, issue_token: TokenIssuer, mode: int = DEFAULT_MODE) -> None:
    """Request a new token for ``token`` and replace its file."""
    value, expires_at = await issue_token(token.service_account, token.audience, token.expiration)
    await asyncio.to_thread(_write, token.path, value.encode(), mode)
    token.expires_at = expires_at


def refresh_due(volumes: Mapping[str, Volume], now: datetime.datetime) -> list[_Token]:
    """Tokens past 80 % of their lifetime (when a kubelet rotates them)."""
    due = []
    for volume in volumes.values():
        for token in volume.tokens:
            if token.expires_at is None:
                continue
            renew_at = token.expires_at - datetime.timedelta(seconds=token.expiration * 0.2)
            if now >= renew_at:
                due.append(token)
    return due


def mounts_for(container: Mapping[str, Any], volumes: Mapping[str, Volume]) -> tuple[list[Mount], list[str]]:
    """The mounts of one container, and a message for each ``volumeMount`` that cannot be made."""
    mounts: list[Mount] = []
    problems: list[str] = []
    for vm in container.get("volumeMounts") or ():
        name, target = vm["name"], str(vm["mountPath"])
        volume = volumes.get(name)
        if volume is None:
            problems.append(f"volumeMount {name!r}: no such volume")
            continue
        if volume.problem is not None:
            problems.append(volume.problem)
            continue
        real = os.path.realpath(target)
        under_run = any(real == d or real.startswith(d + "/") for d in RUN_DIRS)
        if not under_run and not os.path.exists(real):
            problems.append(
                f"volumeMount {name!r}: {target} does not exist on this machine (only existing paths "
                "and paths under /run can be mount points on a process node)"
            )
            continue
        readonly = bool(vm.get("readOnly")) or volume.readonly
        if volume.memory and not vm.get("subPath"):
            mounts.append(
                Mount(target=real, source=None, readonly=readonly, tmpfs_size=volume.size_limit or "")
            )
            continue
        assert volume.path is not None
        source = volume.path / vm["subPath"] if vm.get("subPath") else volume.path
        if vm.get("subPath") and not source.exists():
            source.mkdir(parents=True, exist_ok=True)
        mounts.append(Mount(target=real, source=str(source), readonly=readonly, file=source.is_file()))
    return mounts, problems


def mount_script(mounts: Sequence[Mount]) -> list[str]:
    """Shell lines that make ``mounts`` inside a private mount namespace (``set -e`` assumed)."""
    lines: list[str] = []
    if any(m.target == d or m.target.startswith(d + "/") for m in mounts for d in RUN_DIRS):
        # NB: a fresh /run: mount points under it can be created without touching the host.
        lines.append("mount -t tmpfs -o mode=0755 sparkrun-run /run")
    for m in mounts:
        target = shlex.quote(m.target)
        parent = shlex.quote(os.path.dirname(m.target) or "/")
        if m.source is None:
            size = f",size={process_env.parse_quantity(m.tmpfs_size):.0f}" if m.tmpfs_size else ""
            lines.append(f"mkdir -p {target} && mount -t tmpfs -o mode=1777{size} sparkrun-emptydir {target}")
            continue
        make = f"mkdir -p {parent} && touch {target}" if m.file else f"mkdir -p {target}"
        lines.append(
            f"{{ [ -e {target} ] || {{ {make}; }}; }} && mount --bind {shlex.quote(m.source)} {target}"
        )
        if m.readonly:
            lines.append(f"mount -o remount,bind,ro {target}")
    return lines
