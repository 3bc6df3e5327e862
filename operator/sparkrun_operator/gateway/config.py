"""Gateway settings (limits and timeouts); every field has a safe default."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class GatewaySettings:
    """Limits and timeouts. Seconds unless the name says otherwise."""

    max_body_bytes: int = 16 * 1024 * 1024
    """Request bodies above this are refused with 413 (checked on Content-Length and while reading)."""
    body_timeout: float = 30.0
    """A client must deliver its whole body within this time (408 otherwise)."""
    header_timeout: float = 10.0
    """A client must deliver its request head within this time after connecting, or it is cut off."""
    connect_timeout: float = 5.0
    """Default upstream connect timeout (a workload's ``timeouts.connect`` overrides it)."""
    read_timeout: float = 600.0
    """Default upstream read timeout: the longest silence between two upstream bytes."""
    wake_timeout: float = 300.0
    """How long a request for a Sleeping/Stopped workload is held while it wakes."""
    max_attempts: int = 3
    """Distinct backends tried when connecting fails (never retried after the first byte)."""
    eject_base: float = 1.0
    eject_max: float = 30.0
    max_upstream_body_bytes: int = 64 * 1024 * 1024
    """Largest non-streamed upstream body the gateway buffers."""
    version: str = "0.1.0"
