"""The node labels of GPU feature discovery (GFD), written by the agent where GFD does not run.

:func:`desired` turns a sample into GFD's labels (``nvidia.com/gpu.product``, ``gpu.memory`` in
MiB, ``gpu.count``, ``cuda.driver-version.full`` and ``cuda.driver.major/minor/rev``); the
:class:`Publisher` writes them to the agent's own node with a JSON merge patch of labels only:

- never where GFD runs (its ``nvidia.com/gfd.timestamp`` label is on the node): GFD owns them;
- only what differs from the node as read just before (no write when nothing changed), and the
  node is read again only when the wanted labels change or every ``recheck_seconds``;
- never without a GPU read (NVML unavailable: the labels stay as they are).

Values are made valid label values (at most 63 characters of ``[A-Za-z0-9._-]``, starting and
ending alphanumeric); NVML's text is the driver's, not a tenant's, but is bounded all the same.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from sparkrun_operator.api import telemetry
from sparkrun_operator.api.telemetry import NodeSample
from sparkrun_operator.k8s.client import Kube
from sparkrun_operator.k8s.resources import NODES

log = logging.getLogger("sparkrun.agent.labels")

#: Longest label value.
MAX_VALUE: Final = 63
#: Seconds between two reads of the node while the wanted labels stay the same (someone may
#: have removed them, or GFD may have started).
RECHECK_SECONDS: Final = 300.0
_ALLOWED: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")


def label_value(raw: str) -> str:
    """``raw`` as a valid label value: other characters as ``-``, cut to 63, alphanumeric ends."""
    value = "".join(c if c in _ALLOWED else "-" for c in raw[: MAX_VALUE * 4])[:MAX_VALUE]
    start, end = 0, len(value)
    while start < end and not value[start].isalnum():
        start += 1
    while end > start and not value[end - 1].isalnum():
        end -= 1
    return value[start:end]


def desired(sample: NodeSample) -> dict[str, str]:
    """GFD's labels for ``sample`` (empty without a GPU read)."""
    if not sample.nvml.available or not sample.gpus:
        return {}
    first = sample.gpus[0]
    labels = {telemetry.GPU_COUNT_LABEL: str(len(sample.gpus))}
    if first.name:
        labels[telemetry.GPU_PRODUCT_LABEL] = label_value(first.name.replace(" ", "-"))
    if first.memory_total_bytes is not None:
        labels[telemetry.GPU_MEMORY_LABEL] = str(first.memory_total_bytes // (1024 * 1024))
    driver = sample.nvml.driver_version
    if driver:
        labels[telemetry.DRIVER_VERSION_LABEL] = label_value(driver)
        parts = [*driver.split(".", 2), "", ""][:3]
        for key, part in zip(
            (telemetry.DRIVER_MAJOR_LABEL, telemetry.DRIVER_MINOR_LABEL, telemetry.DRIVER_REV_LABEL),
            parts,
            strict=True,
        ):
            labels[key] = label_value(part)
    return {k: v for k, v in labels.items() if v}


@dataclass
class Publisher:
    """Writes :func:`desired` labels to ``node`` through ``kube`` (get and patch nodes)."""

    kube: Kube
    node: str
    recheck_seconds: float = RECHECK_SECONDS
    clock: Callable[[], float] = time.monotonic
    _written: dict[str, str] | None = field(default=None, init=False)
    _checked: float = field(default=float("-inf"), init=False)
    #: What the last call did: ``patched``, ``unchanged``, ``gfd``, ``no-gpus``, ``skipped``.
    last: str = field(default="", init=False)

    async def publish(self, sample: NodeSample) -> str:
        """Label the node for ``sample`` when needed; returns what it did (see :attr:`last`)."""
        wanted = desired(sample)
        now = self.clock()
        if not wanted:
            self.last = "no-gpus"
        elif wanted == self._written and now - self._checked < self.recheck_seconds:
            self.last = "skipped"
        else:
            self.last = await self._reconcile(wanted)
            self._written, self._checked = wanted, now
        return self.last

    async def _reconcile(self, wanted: dict[str, str]) -> str:
        node = await self.kube.get(NODES, self.node)
        if node is None:
            raise LookupError(f"node {self.node} not found")
        labels = (node.get("metadata") or {}).get("labels") or {}
        if telemetry.GFD_TIMESTAMP_LABEL in labels:
            return "gfd"
        changed = {k: v for k, v in wanted.items() if labels.get(k) != v}
        if not changed:
            return "unchanged"
        await self.kube.merge_patch(NODES, self.node, {"metadata": {"labels": changed}})
        log.info("labelled node %s: %s", self.node, changed)
        return "patched"
