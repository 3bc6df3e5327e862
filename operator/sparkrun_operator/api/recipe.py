"""``Recipe``: a sparkrun recipe (format v2, see ``docs/recipes.md``) as a resource.

Keys are the v2 keys in camelCase; ``to_v2()`` gives sparkrun's snake_case mapping, which is
what the revision fingerprint and intent id are computed over.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, ConfigDict, Field

from sparkrun_operator.api import bounds, cel
from sparkrun_operator.api.meta import Condition, KubeModel


def _as_sparkrun_env_value(value: Any) -> Any:
    """A number or boolean as sparkrun renders a recipe's env value: ``str()`` (``1`` -> ``"1"``,
    ``true`` -> ``"True"``, ``1.5`` -> ``"1.5"``). Anything else is left to the string check."""
    if isinstance(value, bool | int | float):
        return str(value)
    return value


#: A Recipe env value: a string, or a number or boolean taken as sparkrun takes it (the CRD
#: stores strings; ``catalog.import`` converts a recipe file's numbers and booleans).
RecipeEnvValue = Annotated[bounds.EnvValue, BeforeValidator(_as_sparkrun_env_value)]


class RecipeBenchmark(KubeModel):
    """Default benchmark settings for workloads served from this recipe."""

    framework: str | None = Field(
        default=None, description="Benchmark framework, e.g. llama-benchy.", max_length=64
    )
    timeout: int | None = Field(default=None, description="Timeout in seconds.", ge=1, le=604_800)
    args: dict[str, Any] | None = Field(
        default=None,
        description="Framework arguments (free-form).",
        json_schema_extra=bounds.json_value(bounds.BENCH_ARGS_DEPTH),
    )


class RecipeSpec(KubeModel):
    """A sparkrun v2 recipe."""

    model_config = ConfigDict(
        json_schema_extra=cel.rules(
            cel.rule(
                "!has(self.maxNodes) || self.maxNodes >= self.minNodes",
                "maxNodes must be at least minNodes",
                field_path=".maxNodes",
            )
        )
    )

    recipe_version: Literal["2"] = Field(
        default="2", description="Recipe format version. Only 2 is supported."
    )
    model: str = Field(
        description="Hugging Face id, 'repo:QUANT' (GGUF) or an absolute path (trusted recipes only).",
        min_length=1,
        max_length=512,
    )
    model_revision: str | None = Field(
        default=None, description="Model commit or ref the recipe was written for.", max_length=128
    )
    runtime: str = Field(
        default="vllm",
        description="Runtime: vllm (also vllm-distributed, vllm-ray, sglang, llama-cpp, trtllm, ...). "
        "This operator serves vllm runtimes.",
        min_length=1,
        max_length=64,
        pattern=r"^[a-z0-9][a-z0-9._-]*$",
    )
    runtime_version: str | None = Field(
        default=None, description="Runtime version constraint.", max_length=64
    )
    container: str | None = Field(default=None, description="Container image.", max_length=512)
    min_nodes: int = Field(default=1, description="Fewest nodes the recipe runs on.", ge=1, le=64)
    max_nodes: int | None = Field(default=None, description="Most nodes (1 = single node only).", ge=1, le=64)
    metadata: dict[str, Any] | None = Field(
        default=None,
        description="Description, maintainer, model facts (free-form; not part of the revision).",
        json_schema_extra=bounds.json_value(bounds.RECIPE_METADATA_DEPTH),
    )
    defaults: dict[str, Any] | None = Field(
        default=None,
        description="Serve settings (port, tensor_parallel, gpu_memory_utilization, max_model_len, "
        "served_model_name, ...), overridable per workload (free-form, snake_case keys).",
        json_schema_extra=bounds.json_value(bounds.RECIPE_DEFAULTS_DEPTH),
    )
    env: dict[str, RecipeEnvValue] | None = Field(
        default=None,
        description="Literal environment variables (a recipe file's numbers and booleans are "
        'imported as sparkrun renders them: 1 -> "1", true -> "True").',
        json_schema_extra=bounds.map_keys(
            bounds.ENV_NAME_MAX_LENGTH, max_entries=bounds.RECIPE_ENV_MAX_ENTRIES
        ),
    )
    command: str | None = Field(
        default=None,
        description="Command template with {key} placeholders filled from the resolved settings.",
        max_length=16384,
    )
    pre_exec: list[Any] | None = Field(
        default=None,
        description="Hooks run before the engine (need trust).",
        json_schema_extra=bounds.json_items(bounds.RECIPE_HOOK_DEPTH, max_items=bounds.HOOKS_MAX_ITEMS),
    )
    post_exec: list[Any] | None = Field(
        default=None,
        description="Hooks run after the engine is up (need trust).",
        json_schema_extra=bounds.json_items(bounds.RECIPE_HOOK_DEPTH, max_items=bounds.HOOKS_MAX_ITEMS),
    )
    post_commands: list[Any] | None = Field(
        default=None,
        description="Commands run after launch (need trust).",
        json_schema_extra=bounds.json_items(bounds.RECIPE_HOOK_DEPTH, max_items=bounds.HOOKS_MAX_ITEMS),
    )
    benchmark: RecipeBenchmark | None = Field(default=None, description="Default benchmark settings.")
    runtime_config: dict[str, Any] | None = Field(
        default=None,
        description="Runtime settings outside the v2 keys (sparkrun puts unknown top-level keys here).",
        json_schema_extra=bounds.json_value(bounds.RECIPE_RUNTIME_CONFIG_DEPTH),
    )

    def to_v2(self) -> dict[str, Any]:
        """The recipe as sparkrun's v2 mapping (snake_case top-level keys, unset keys omitted)."""
        out: dict[str, Any] = {}
        for name, value in self.model_dump(exclude_none=True, mode="json").items():
            if name == "runtime_config":
                out.update(value)  # sparkrun keeps unknown top-level keys at the top level
            else:
                out[name] = value
        return out


class RecipeIssue(KubeModel):
    """One validation finding (the daemon's recipes.validate result)."""

    severity: Literal["error", "warning"] = Field(description="error blocks serving; warning does not.")
    message: str = Field(description="What is wrong and how to fix it.")
    field: str | None = Field(default=None, description="Field path the finding refers to.")


class RecipeStatus(KubeModel):
    """Observed state of the recipe."""

    observed_generation: int | None = Field(
        default=None, description="Generation this status describes.", ge=0
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Valid.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    revision: str | None = Field(
        default=None, description="sparkrun recipe revision fingerprint (12 hex).", pattern=r"^[0-9a-f]{12}$"
    )
    intent_id: str | None = Field(
        default=None, description="sparkrun intent id (16 hex).", pattern=r"^[0-9a-f]{16}$"
    )
    issues: list[RecipeIssue] = Field(
        default_factory=list, description="Validation findings.", max_length=256
    )
