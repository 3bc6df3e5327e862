"""Raw-JSON calls through kubernetes_asyncio, for the process runtime.

The runtime works on plain dicts (the objects as the apiserver sends them), not on the client's
generated models, so it calls the API with ``_preload_content=False``. The client raises
:class:`~kubernetes_asyncio.client.exceptions.ApiException` for error statuses only when it
preloads; :func:`call_json` restores that: any non-2xx answer raises ``ApiException`` with the
status, reason and body.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any


async def call_json(method: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> dict[str, Any]:
    """``await method(*args, **kwargs)`` and return the JSON body; raise ``ApiException`` on non-2xx."""
    from kubernetes_asyncio.client.exceptions import ApiException

    response = await method(*args, _preload_content=False, **kwargs)
    async with response:
        raw = await response.read()
        if not 200 <= response.status < 300:
            error = ApiException(status=response.status, reason=response.reason)
            error.body = raw.decode(errors="replace")
            raise error
    body: dict[str, Any] = json.loads(raw)
    return body
