"""Pod DNS names for process-node pods, served through per-pod ``/etc/hosts`` files.

The testbed has no cluster DNS. A pod with ``spec.hostname`` and ``spec.subdomain`` (JobSet
sets both when ``network.enableDNSHostnames`` is on) is reachable in a real cluster as
``<hostname>.<subdomain>.<namespace>.svc.cluster.local``, and as ``<hostname>.<subdomain>``
from its own namespace (through the resolver's search path). Here every pod sandbox gets its
own hosts file, bind-mounted over ``/etc/hosts`` (see :mod:`.netns`), holding:

- ``localhost`` and the pod's own name (its FQDN too, when it has a subdomain), as a kubelet
  writes it;
- every pod with a DNS hostname and an address on this runtime: all four name forms for pods
  of the same namespace, the ``<namespace>``-qualified forms for the others;
- every Service with a ClusterIP (:mod:`.process_services` serves those addresses):
  ``<svc>.<ns>.svc.cluster.local``, ``<svc>.<ns>.svc``, ``<svc>.<ns>``, and ``<svc>`` from its
  own namespace.

Files are rewritten whenever a record changes. glibc reads the hosts file on every lookup, so a
new leader address is visible to waiting workers at once. The file is bind-mounted (the mount
pins its inode), so it is rewritten in place: one ``pwrite`` from offset 0 and never a
truncation (shorter content is padded with blank lines), so a reader never finds it empty. A
lookup racing the write could in principle read a mix of old and new bytes; the processes that
resolve pod names (workers waiting for a leader) retry.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

CLUSTER_DOMAIN = "cluster.local"


@dataclass(frozen=True)
class Record:
    """One pod's DNS identity."""

    namespace: str
    hostname: str
    subdomain: str
    ip: str

    def names(self, *, from_namespace: str) -> list[str]:
        if not self.subdomain:
            return []
        base = f"{self.hostname}.{self.subdomain}.{self.namespace}"
        full = [f"{base}.svc.{CLUSTER_DOMAIN}", f"{base}.svc", base]
        if from_namespace == self.namespace:
            full.append(f"{self.hostname}.{self.subdomain}")
        return full


@dataclass
class _HostsFile:
    path: Path
    namespace: str
    hostname: str
    subdomain: str
    ip: str


class Registry:
    """DNS records of the runtime's pods, and the hosts files that publish them."""

    def __init__(self) -> None:
        self._records: dict[str, Record] = {}
        self._files: dict[str, _HostsFile] = {}
        self._written: dict[str, str] = {}
        self._services: dict[tuple[str, str], str] = {}

    def set_services(self, services: dict[tuple[str, str], str]) -> None:
        """The Services' ClusterIPs ((namespace, name) -> IP); rewrites the files on a change."""
        if services != self._services:
            self._services = dict(services)
            self._refresh(None)

    def add(self, key: str, record: Record, hosts_file: Path) -> None:
        """Register a pod (``key``: its UID) and write its hosts file; refresh the others'."""
        self._records[key] = record
        self._files[key] = _HostsFile(
            hosts_file, record.namespace, record.hostname, record.subdomain, record.ip
        )
        # NB: a pod without a subdomain has no DNS record: only its own file changes.
        self._refresh(None if record.subdomain else key)

    def remove(self, key: str) -> None:
        """Forget a pod; its name stops resolving in the other pods' files."""
        record = self._records.pop(key, None)
        self._files.pop(key, None)
        self._written.pop(key, None)
        if record is not None and record.subdomain:
            self._refresh(None)

    def render(self, key: str) -> str:
        """The hosts file content for the pod ``key``."""
        own = self._files[key]
        lines = [
            "# Kubernetes-managed hosts file (sparkrun testbed process runtime).",
            "127.0.0.1\tlocalhost",
            "::1\tlocalhost ip6-localhost ip6-loopback",
        ]
        own_names = [own.hostname]
        if own.subdomain:
            own_names.insert(0, f"{own.hostname}.{own.subdomain}.{own.namespace}.svc.{CLUSTER_DOMAIN}")
        lines.append(f"{own.ip}\t{' '.join(own_names)}")
        for other_key, record in sorted(
            self._records.items(), key=lambda kv: (kv[1].namespace, kv[1].hostname)
        ):
            if other_key == key:
                continue
            names = record.names(from_namespace=own.namespace)
            if names:
                lines.append(f"{record.ip}\t{' '.join(names)}")
        for (namespace, name), ip in sorted(self._services.items()):
            base = f"{name}.{namespace}"
            names = [f"{base}.svc.{CLUSTER_DOMAIN}", f"{base}.svc", base]
            lines.append(f"{ip}\t{' '.join(names + ([name] if namespace == own.namespace else []))}")
        return "\n".join(lines) + "\n"

    def _refresh(self, only: str | None) -> None:
        # NB: every file lists the other namespaces' FQDNs too, so a record change touches all
        # files; files whose content stays the same are not written again.
        for key, hosts in self._files.items():
            if only is not None and key != only:
                continue
            text = self.render(key)
            if self._written.get(key) != text:
                write_in_place(hosts.path, text)
                self._written[key] = text


def write_in_place(path: Path, text: str) -> None:
    """Replace ``path``'s content without changing its inode and without truncating it."""
    data = text.encode()
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        if len(data) < size:
            data += b"\n" * (size - len(data))
        os.pwrite(fd, data, 0)
    finally:
        os.close(fd)
