"""JSON that tenants can write and the product reads back is parsed within a bound (issue 23,
follow-up F5): the gateway's alias ConfigMap (any namespace the gateway watches), the daemon
API's copy of it (``proxy.*``), tool events in pod logs, an engine's tool-call arguments. A
deep, oversized or broken value is skipped or refused with a message, never a
``RecursionError`` out of a routing rebuild or a planner."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sparkrun_operator import safeload
from sparkrun_operator.gateway.kube import imperative_aliases
from sparkrun_operator.gateway.messages_api import _parse_arguments
from sparkrun_operator.ops.errors import Conflict
from sparkrun_operator.ops.executors.proxy import _value
from sparkrun_operator.ops.invocation import OperationContext
from sparkrun_operator.ops.settings import Settings
from sparkrun_operator.plan.logtail import last_event

DEEP = "[" * 5000 + "]" * 5000  # past Python's json recursion (about 1,000 levels)
DEEP_OBJECT = '{"a":' * 5000 + "1" + "}" * 5000


def _config_map(namespace: str, aliases: str) -> dict[str, Any]:
    return {
        "metadata": {"namespace": namespace, "name": "sparkrun-gateway-aliases"},
        "data": {"aliases.json": aliases},
    }


def test_one_bad_alias_config_map_does_not_stop_the_others() -> None:
    config_maps = [
        _config_map("good", json.dumps({"fast": "llama"})),
        _config_map("deep", DEEP_OBJECT),
        _config_map("big", json.dumps({"x": "y" * safeload.ALIAS_STATE.max_bytes})),
        _config_map("broken", "{"),
    ]
    assert imperative_aliases(config_maps) == {"good": {"fast": "llama"}}


def _ctx() -> OperationContext:
    return OperationContext(
        rest=None,  # type: ignore[arg-type]  # _value reads no object
        settings=Settings(namespace="ns"),
        principal="alice",
        job_id="j",
    )


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        (DEEP_OBJECT, "alias ConfigMap value nests deeper than 16 levels (5000)"),
        ("[1]", "not a JSON object"),
        ("{", "alias ConfigMap value is not valid JSON"),
    ],
)
def test_the_daemon_api_refuses_a_bad_state_config_map_by_name(raw: str, words: str) -> None:
    with pytest.raises(Conflict) as refused:
        _value(_ctx(), {"aliases.json": raw}, "aliases.json")
    assert refused.value.detail.startswith("ConfigMap sparkrun-gateway-aliases, key aliases.json: ")
    assert words in refused.value.detail
    assert refused.value.detail.endswith("; fix or delete it")
    assert _value(_ctx(), {"aliases.json": '{"a": "b"}'}, "aliases.json") == {"a": "b"}
    assert _value(_ctx(), {}, "loaded-models.json") == {}


def test_a_deep_log_line_is_not_an_event() -> None:
    good = json.dumps({"event": "report", "complete": True})
    assert last_event(f"{good}\n{DEEP_OBJECT}\n") == {"event": "report", "complete": True}
    assert last_event(DEEP_OBJECT) is None


def test_deep_tool_call_arguments_from_an_engine_stay_raw() -> None:
    assert _parse_arguments(DEEP) == {"_raw": DEEP}
    assert _parse_arguments('{"city": "Paris"}') == {"city": "Paris"}
