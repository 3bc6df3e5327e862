"""The name policy (``api/namepolicy.py``, issue 26): the rule as a table, its parse bounds, and
the chart's admission CEL (``templates/workload-names-admission.yaml``, rendered by the pinned
helm) evaluated over the same table, so admission and the operator and gateway apply one rule.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import celpy
import pytest
from celpy import celtypes
from celpy.adapter import json_to_cel

from sparkrun_operator.api import namepolicy
from sparkrun_operator.api.namepolicy import NamePolicy
from sparkrun_operator.cli.main import build_parser
from tests.deploy.chart import CHART, helm, render, require_helm

POLICY = {"team-a": ["a-", "shared/"], "team-b": ["b-"], "open": [""], "closed": [], "*": ["any-"]}
NO_STAR = {"team-a": ["a-"]}

# (policy, namespace, name, allowed)
TABLE: list[tuple[dict[str, list[str]], str, str, bool]] = [
    ({}, "team-a", "anything", True),
    ({}, "x", "b-chat", True),
    (POLICY, "team-a", "a-chat", True),
    (POLICY, "team-a", "shared/llama", True),
    (POLICY, "team-a", "a-", True),
    (POLICY, "team-a", "b-chat", False),
    (POLICY, "team-a", "A-chat", False),  # case matters: names match exactly
    (POLICY, "team-a", "xa-chat", False),  # a prefix, not a substring
    (POLICY, "team-b", "b-chat", True),
    (POLICY, "team-b", "a-chat", False),
    (POLICY, "open", "a-chat", True),
    (POLICY, "closed", "a-chat", False),
    (POLICY, "closed", "any-chat", False),  # listed: "*" does not apply
    (POLICY, "elsewhere", "any-chat", True),
    (POLICY, "elsewhere", "a-chat", False),
    (NO_STAR, "elsewhere", "a-chat", False),  # not listed, no "*": no name
    (NO_STAR, "team-a", "a-\u0430", True),
]


@pytest.mark.parametrize(("policy", "namespace", "name", "allowed"), TABLE)
def test_the_rule(policy: dict[str, list[str]], namespace: str, name: str, allowed: bool) -> None:
    parsed = namepolicy.parse(policy)
    assert parsed.allows(namespace, name) is allowed
    assert parsed.refused(namespace, [name, name]) == (() if allowed else (name, name))


def test_describe_and_wire() -> None:
    parsed = namepolicy.parse_json(json.dumps(POLICY))
    assert parsed.enabled
    assert not NamePolicy().enabled
    assert parsed.describe("team-a") == "names starting with 'a-', 'shared/'"
    assert parsed.describe("open") == "any name"
    assert "no model name" in parsed.describe("closed")
    assert parsed.describe("elsewhere") == "names starting with 'any-'"
    assert NamePolicy().describe("x") == "any name"
    assert namepolicy.parse(parsed.to_wire()) == parsed
    assert namepolicy.parse_json("") == NamePolicy() == namepolicy.parse_json("{}")
    assert namepolicy.parse({"a": ["x-", "x-"]}).prefixes["a"] == ("x-",)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("[1]", "an object"),
        ("{", "not valid JSON"),
        ('{"a": [["x"]]}', "deeper than 2"),
        ('{"Team": ["x"]}', "'Team': a namespace name"),
        ('{"a.b": ["x"]}', "'a.b': a namespace name"),
        ('{"' + "a" * 64 + '": ["x"]}', "a namespace name"),
        ('{"a": "x-"}', "a list of prefixes"),
        ('{"a": [1]}', "is not a string"),
        ('{"a": [" x"]}', "whitespace"),
        ('{"a": ["x\\u202e"]}', "control or format"),
        ('{"a": ["' + "x" * 257 + '"]}', "at most 256"),
        (json.dumps({"a": [f"p{i}" for i in range(33)]}), "33 prefixes, at most 32"),
        (json.dumps({f"n{i}": [] for i in range(257)}), "257 namespaces, at most 256"),
        ("[" * 60_000, "deeper than 2"),
        ('{"a": ["' + "x" * 70_000 + '"]}', "at most 65536"),
    ],
)
def test_bounded_parse_with_clear_errors(raw: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)) as caught:
        namepolicy.parse_json(raw)
    assert len(str(caught.value)) < 600  # the value is quoted cut, never whole


def test_a_prefix_may_end_in_a_space_and_be_as_long_as_a_name() -> None:
    parsed = namepolicy.parse({"a": ["team a ", "x" * 256]})
    assert parsed.allows("a", "team a chat")
    assert parsed.allows("a", "x" * 256)


# -- the chart's CEL, over the same table --------------------------------------------------------


def _policy_doc(rendered_docs: list[dict[str, Any]]) -> dict[str, Any] | None:
    found = [
        d
        for d in rendered_docs
        if d["kind"] == "ValidatingAdmissionPolicy" and "names" in d["metadata"]["name"]
    ]
    return found[0] if found else None


@pytest.fixture(scope="module")
def helm_bin() -> str:
    return require_helm()


def _evaluate(vap: dict[str, Any], obj: dict[str, Any], old: dict[str, Any] | None) -> str | None:
    """The policy's refusal message for ``obj`` (``None``: admitted), as CEL evaluates it."""
    env = celpy.Environment()
    activation: dict[str, Any] = {
        "object": json_to_cel(obj),
        "oldObject": json_to_cel(old),
        "request": json_to_cel({"operation": "UPDATE" if old is not None else "CREATE"}),
    }

    def run(expr: str) -> Any:
        return env.program(env.compile(expr)).evaluate(activation)

    spec = vap["spec"]
    assert all(bool(run(c["expression"])) for c in spec["matchConditions"])
    values: dict[Any, Any] = {}
    for variable in spec["variables"]:
        activation["variables"] = celtypes.MapType(values)
        values[celtypes.StringType(variable["name"])] = run(variable["expression"])
    activation["variables"] = celtypes.MapType(values)
    (validation,) = spec["validations"]
    if bool(run(validation["expression"])):
        return None
    return str(run(validation["messageExpression"]))


def _spec_names(namespace: str, name: str) -> list[dict[str, Any]]:
    """Workloads naming ``name`` in each of the three places admission reads."""
    meta = {"name": "w", "namespace": namespace}
    return [
        {"metadata": meta, "spec": {"model": {"name": "org/m", "servedName": name}}},
        {"metadata": meta, "spec": {"recipe": {"name": "r"}, "model": {"name": "org/m", "aliases": [name]}}},
        {"metadata": meta, "spec": {"model": {"name": name}}},
    ]


def test_empty_map_renders_no_policy(helm_bin: str, tmp_path: Path) -> None:
    assert _policy_doc(render(helm_bin, tmp_path).docs) is None
    assert _policy_doc(render(helm_bin, tmp_path, {"tenancy": {"names": {"prefixes": {}}}}).docs) is None


@pytest.mark.parametrize("policy", [POLICY, NO_STAR])
def test_the_chart_cel_is_the_rule(helm_bin: str, tmp_path: Path, policy: dict[str, list[str]]) -> None:
    rendered = render(helm_bin, tmp_path, {"tenancy": {"names": {"prefixes": policy}}})
    vap = _policy_doc(rendered.docs)
    assert vap is not None
    containers = [d["spec"]["template"]["spec"]["containers"][0] for d in rendered.of("Deployment")]
    flags = [a.split("=", 1)[1] for c in containers for a in c["args"] if a.startswith("--name-prefixes=")]
    rule = namepolicy.parse(policy)
    assert len(flags) == 3  # the operator, the gateway and the shim (proxy.models)
    assert all(namepolicy.parse_json(f) == rule for f in flags)
    for _, namespace, name, _ in TABLE:
        allowed = rule.allows(namespace, name)
        for obj in _spec_names(namespace, name):
            message = _evaluate(vap, obj, None)
            assert (message is None) is allowed, (namespace, name, message)
            if message is not None:
                assert f'"{name}"' in message
                assert namespace in message


def test_the_names_admission_sees(helm_bin: str, tmp_path: Path) -> None:
    vap = _policy_doc(render(helm_bin, tmp_path, {"tenancy": {"names": {"prefixes": NO_STAR}}}).docs)
    assert vap is not None
    plain = {"metadata": {"namespace": "team-a"}, "spec": {"model": {"name": "org/m"}}}
    # without a recipe and a servedName, the model's name is the served name
    assert '"org/m"' in (_evaluate(vap, plain, None) or "")
    # with a recipe, the served name may come from it: the operator's to check
    recipe = {
        "metadata": {"namespace": "team-a"},
        "spec": {"recipe": {"name": "r"}, "model": {"name": "org/m"}},
    }
    assert _evaluate(vap, recipe, None) is None
    assert (
        _evaluate(vap, {"metadata": {"namespace": "team-a"}, "spec": {"recipe": {"name": "r"}}}, None) is None
    )
    # an update keeps the names the old object claimed (a workload from before the map can be
    # stopped, scaled and deleted), and refuses a new one
    stopped = {**plain, "spec": {"model": {"name": "org/m"}, "state": "Stopped"}}
    assert _evaluate(vap, stopped, plain) is None
    renamed = {"metadata": plain["metadata"], "spec": {"model": {"name": "org/m", "aliases": ["b-x"]}}}
    assert '"b-x"' in (_evaluate(vap, renamed, plain) or "")
    message = _evaluate(
        vap, {"metadata": {"namespace": "elsewhere"}, "spec": {"model": {"name": "a-m"}}}, None
    )
    assert message is not None
    assert "may claim no model name" in message


def test_the_operator_flag() -> None:
    base = ["operator", "run"]
    assert build_parser().parse_args(base).name_prefixes == NamePolicy()
    parsed = build_parser().parse_args([*base, "--name-prefixes", json.dumps(POLICY)]).name_prefixes
    assert parsed == namepolicy.parse(POLICY)
    for bad in ("[]", "{", '{"Team": []}', '{"a": [" x"]}'):
        with pytest.raises(SystemExit):
            build_parser().parse_args([*base, "--name-prefixes", bad])


def test_the_chart_refuses_what_the_rule_refuses(helm_bin: str, tmp_path: Path) -> None:
    for bad in (
        {"Team": ["x"]},
        {"a": "x-"},
        {"a": [1]},
        {"a": [f"p{i}" for i in range(33)]},
        {"a": ["x" * 257]},
    ):
        with pytest.raises(ValueError):  # noqa: PT011 - the rule's message is checked above
            namepolicy.parse(bad)
        done = helm(
            helm_bin,
            "template",
            "x",
            str(CHART),
            "--set-json",
            f"tenancy.names.prefixes={json.dumps(bad)}",
            check=False,
        )
        assert done.returncode != 0, bad
        assert "tenancy.names.prefixes" in done.stderr, done.stderr
