"""``catalog.import`` admits the Recipe it would create as the apiserver will (issue 23, follow-up
F2): content within ``safeload.RECIPE`` (32 levels) but over a Recipe CRD bound (``defaults``
6 levels, ``metadata`` 5, a 32 KiB string) or against its CEL rules is a 422 at submission
naming the field path, not the apiserver's 422 inside the job (``tests/shim/test_tenant_documents.py``
has the end-to-end case)."""

from __future__ import annotations

import pytest

from sparkrun_operator.api import bounds
from sparkrun_operator.ops.errors import Invalid
from sparkrun_operator.ops.executors import ARGUMENT_CHECKS
from sparkrun_operator.ops.executors.recipes import parse_recipe
from sparkrun_operator.ops.settings import Settings

HEADER = "model: Qwen/Qwen3-0.6B\nruntime: vllm\ncontainer: vllm/vllm-openai:v0.11.0\n"
PREFIX = "recipe content makes an invalid Recipe: "


def _flow(depth: int) -> str:
    """A YAML flow mapping nested ``depth`` levels (``{a: {a: 1}}`` is 2)."""
    return "{a: " * depth + "1" + "}" * depth


@pytest.mark.parametrize(
    ("content", "refusal"),
    [
        (
            HEADER + f"defaults:\n  deep: {_flow(bounds.RECIPE_DEFAULTS_DEPTH)}\n",
            "spec.defaults.deep.a.a.a.a.a: Too many: 1: must have at most 0 items",
        ),
        (
            HEADER + f"metadata:\n  deep: {_flow(bounds.RECIPE_METADATA_DEPTH)}\n",
            "spec.metadata.deep.a.a.a.a: Too many: 1: must have at most 0 items",
        ),
        (HEADER + "min_nodes: 2\nmax_nodes: 1\n", "spec.maxNodes: maxNodes must be at least minNodes"),
        (
            HEADER + "defaults:\n  chat_template: " + "x" * 32769 + "\n",
            "spec.defaults.chat_template: Too long: may not be more than 32768 bytes",
        ),
    ],
    ids=["defaults-7-levels", "metadata-6-levels", "cel-rule", "string-over-32-kib"],
)
def test_content_that_makes_an_invalid_recipe_is_refused_with_the_path(content: str, refusal: str) -> None:
    check = ARGUMENT_CHECKS["catalog.import"]
    with pytest.raises(Invalid) as caught:
        check({"content": content}, Settings(namespace="default"))
    assert caught.value.detail.startswith(PREFIX + refusal), caught.value.detail
    assert len(caught.value.detail) < 400  # the offending value is not echoed whole
    with pytest.raises(Invalid) as again:
        parse_recipe(content)  # what the executor runs
    assert again.value.detail == caught.value.detail


def test_content_at_the_recipe_bounds_is_imported() -> None:
    content = (
        HEADER
        + f"defaults:\n  deep: {_flow(bounds.RECIPE_DEFAULTS_DEPTH - 1)}\n  chat_template: {'x' * 32768}\n"
        + f"metadata:\n  deep: {_flow(bounds.RECIPE_METADATA_DEPTH - 1)}\n"
    )
    ARGUMENT_CHECKS["catalog.import"]({"content": content}, Settings(namespace="default"))
    _name, spec = parse_recipe(content)
    assert spec.defaults is not None
    assert len(spec.defaults["chat_template"]) == 32768
