"""The services a route handler works with, handed to it on every call.

The request path goes one way: the dispatch (:mod:`.app`) calls a handler (:mod:`.routes`) with
the request (:class:`~.request.Ctx`) and these services; a handler calls the services and never
the application. The application builds them once, at construction, and opens and closes what
needs the event loop in its lifespan.
"""

from __future__ import annotations

from dataclasses import dataclass

from .accounting import Accounting
from .admission import Admission
from .cancellation import Cancellation
from .config import GatewaySettings
from .connector import Connector


@dataclass(frozen=True, slots=True)
class Services:
    """One gateway's services."""

    settings: GatewaySettings
    admission: Admission
    """Limits, keys and model resolution (wakes included)."""
    connector: Connector
    """Backend choice, upstream connections and passive health."""
    accounting: Accounting
    """Request, first-byte, token and wake metrics."""
    cancellation: Cancellation
    """The cancellable in-flight requests."""
