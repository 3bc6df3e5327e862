"""A request that reaches the connector after the gateway closed its upstream pool (shutdown)
gets the gateway's own 503 in its API family's shape, not an ``AssertionError`` answered as a
bare 500 (review of issue 25)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from sparkrun_operator.gateway.config import GatewaySettings
from sparkrun_operator.gateway.connector import Connector
from sparkrun_operator.gateway.errors import GatewayError
from sparkrun_operator.gateway.metrics import GatewayMetrics
from sparkrun_operator.gateway.request import Ctx
from sparkrun_operator.gateway.routing import Workload


def test_connect_after_close_is_the_gateways_503() -> None:
    async def scenario() -> GatewayError:
        connector = Connector(GatewaySettings(), GatewayMetrics())
        connector.open()
        await connector.close()
        workload = Workload(namespace="ns", name="w", served_name="m", endpoints=("http://127.0.0.1:9",))
        with pytest.raises(GatewayError) as raised:
            await connector.connect(
                cast(Ctx, cast(Any, object())), workload, "/v1/chat/completions", b"{}", None
            )
        return raised.value

    error = asyncio.run(scenario())
    assert (error.status, error.code) == (503, "service_unavailable")
