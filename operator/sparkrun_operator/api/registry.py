"""``RecipeRegistry``: a git repository of sparkrun recipes, kept in sync as Recipe objects.

Cluster-scoped and for cluster administrators only (the chart grants no tenant role on it):
whoever creates one decides which code the cluster fetches, and trusting one lets its recipes'
hooks and mods run in engine pods. Its controller (``controllers/registry.py``) fetches the ref
shallowly (``gitfetch``), validates every recipe as ``recipes.validate`` does and writes the
Recipes, mod ConfigMaps and benchmark-profile ConfigMaps into ``targetNamespace``, owned by the
registry. Trust (``recipe/trust.py``) is recorded here: ``spec.trusted`` and, per Recipe, the
digest of the spec the controller wrote (``status.recipes[].digest``).
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Literal

from pydantic import ConfigDict, Field

from sparkrun_operator.api import cel
from sparkrun_operator.api.meta import DNS_LABEL, DNS_SUBDOMAIN, Condition, KubeModel, LocalObjectReference

#: The URL schemes a registry may be fetched over (``gitfetch`` refuses any other), with no user
#: information (credentials come from ``credentialsSecret`` only), query or fragment. RE2 (the
#: apiserver's and the offline admission's): linear in the text.
URL_PATTERN = r"^(https?|git)://[^/@?#\s\\]+(/[^?#\s\\]*)?$"
#: A git ref: a branch, a tag or a full commit id (no whitespace, ``..``-free segments checked by CEL).
REF_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._/+-]*$"
#: A path inside the repository: relative segments, no ``.`` or ``..`` (CEL).
SUBPATH_PATTERN = r"^([A-Za-z0-9._@+-]+(/[A-Za-z0-9._@+-]+)*)?$"
_DOT_SEGMENT = r"(^|/)\.\.?(/|$)"
COMMIT_PATTERN = r"^[0-9a-f]{40}([0-9a-f]{24})?$"
DIGEST_PATTERN = r"^[0-9a-f]{64}$"
#: The most recipes a registry writes (and lists in status); more are reported, not written.
MAX_RECIPES = 2048
#: The most problems listed in status (the counts stay exact).
MAX_PROBLEMS = 256
#: The most mods, benchmark profiles and tuning configs listed in status.
MAX_LISTED = 1024
DEFAULT_SYNC_SECONDS = 3600
#: A mod, benchmark profile or tuning config as status lists it.
ListedName = Annotated[str, Field(max_length=512)]


class RecipeRegistrySpec(KubeModel):
    """Desired state of a recipe registry."""

    model_config = ConfigDict(
        json_schema_extra=cel.rules(
            cel.rule(
                "!self.trusted || self.acknowledgeTrust",
                "trusted needs acknowledgeTrust: true (the hooks and mods of a trusted registry's recipes "
                "run in engine pods)",
                field_path=".trusted",
            ),
        )
    )

    url: str = Field(
        description="The repository: https://, http:// or git:// (no user@ in it: credentials come from "
        "credentialsSecret).",
        min_length=1,
        max_length=2048,
        json_schema_extra=cel.rules(
            cel.rule(
                f"self.matches(r'{URL_PATTERN}')",
                "url must be https://, http:// or git://host/path, without user information, query or "
                "fragment",
            )
        ),
    )
    ref: str | None = Field(
        default=None,
        description="Branch, tag or full commit id to sync; unset: the repository's HEAD.",
        max_length=255,
        pattern=REF_PATTERN,
        json_schema_extra=cel.rules(cel.rule("!self.contains('..')", "ref must not contain '..'")),
    )
    subpath: str = Field(
        default="",
        description="Directory of the registry inside the repository (where .sparkrun/registry.yaml's "
        "subpaths start); empty: the root.",
        max_length=1024,
        pattern=SUBPATH_PATTERN,
        json_schema_extra=cel.rules(
            cel.rule(f"!self.matches(r'{_DOT_SEGMENT}')", "subpath must not contain '.' or '..' segments")
        ),
    )
    description: str | None = Field(default=None, description="Free text for humans.", max_length=1024)
    enabled: bool = Field(
        default=True,
        description="Sync it. A disabled registry is not fetched; the objects it wrote stay as they are.",
    )
    visible: bool = Field(default=True, description="List its recipes in catalog searches (the daemon API).")
    trusted: bool = Field(
        default=False,
        description="Run its recipes' hooks (pre_exec, post_exec, post_commands) and mods. Needs "
        "acknowledgeTrust.",
    )
    acknowledge_trust: bool = Field(
        default=False,
        description="That whoever set trusted knows its recipes' hooks and mods run code in engine pods.",
    )
    sync_interval_seconds: int = Field(
        default=DEFAULT_SYNC_SECONDS,
        description="Seconds between syncs (a change of the spec or of the sync-requested annotation syncs "
        "at once).",
        ge=60,
        le=604_800,
    )
    credentials_secret: LocalObjectReference | None = Field(
        default=None,
        description="A Secret in the operator's namespace with username + password, or token (sent as "
        "password of user x-access-token); sent only to the url's origin over http(s).",
    )
    target_namespace: str = Field(
        description="Namespace that receives its Recipes and ConfigMaps (immutable).",
        min_length=1,
        max_length=63,
        pattern=DNS_LABEL,
        json_schema_extra=cel.rules(cel.immutable("targetNamespace")),
    )


class RegistryCounts(KubeModel):
    """What the last successful sync found."""

    recipes: int = Field(default=0, description="Recipe files found.", ge=0)
    valid: int = Field(default=0, description="Recipes that validate (and are written).", ge=0)
    invalid: int = Field(default=0, description="Recipes that do not validate.", ge=0)
    mods: int = Field(default=0, description="Mods found.", ge=0)
    benchmark_profiles: int = Field(default=0, description="Benchmark profiles found.", ge=0)


class RegistryRecipeEntry(KubeModel):
    """One recipe of the registry and the Recipe object it is served as."""

    name: str = Field(
        description="The Recipe object in targetNamespace.", max_length=253, pattern=DNS_SUBDOMAIN
    )
    catalog_name: str = Field(description="The catalog name, as sparkrun forms it.", max_length=512)
    path: str = Field(description="The recipe file's path in the repository.", max_length=1024)
    digest: str | None = Field(
        default=None,
        description="sha256 of the Recipe spec the operator wrote (recipe/trust.py); unset while none "
        "was written.",
        pattern=DIGEST_PATTERN,
        max_length=64,
    )
    valid: bool = Field(description="Whether the file at the synced commit validates.")


class RegisteredConfigMap(KubeModel):
    """A ConfigMap the registry wrote (a mod or a benchmark profile) and the digest of its data:
    readers run or use it only while its data still has this digest (``recipe/trust.py``)."""

    name: str = Field(description="The ConfigMap in targetNamespace.", max_length=253, pattern=DNS_SUBDOMAIN)
    kind: Literal["mod", "benchmarkProfile"] = Field(description="What it holds.")
    item: str = Field(
        description="The mod or profile name, as recipes and benchmarks name it.", max_length=512
    )
    digest: str = Field(description="sha256 of its data and binaryData as written.", pattern=DIGEST_PATTERN)


class RegistryProblem(KubeModel):
    """A file or object the last sync could not use, and why."""

    path: str = Field(default="", description="The file's path in the repository.", max_length=1024)
    catalog_name: str | None = Field(default=None, description="The recipe's catalog name.", max_length=512)
    message: str = Field(description="What is wrong.", max_length=2048)


class RecipeRegistryStatus(KubeModel):
    """Observed state of the registry."""

    observed_generation: int | None = Field(
        default=None, description="Generation this status describes.", ge=0
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Synced (the last sync's outcome) and Ready.",
        max_length=8,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    commit: str | None = Field(
        default=None, description="The commit the objects were last written from.", pattern=COMMIT_PATTERN
    )
    last_sync_time: dt.datetime | None = Field(default=None, description="When the last sync succeeded.")
    last_attempt_time: dt.datetime | None = Field(
        default=None, description="When the last sync was tried (successful or not)."
    )
    sync_request: str | None = Field(
        default=None,
        description="The sparkrun.dev/sync-requested annotation the last sync answered.",
        max_length=256,
    )
    counts: RegistryCounts = Field(default_factory=RegistryCounts, description="What the last sync found.")
    recipes: list[RegistryRecipeEntry] = Field(
        default_factory=list, description="Its recipes, by catalog name.", max_length=MAX_RECIPES
    )
    problems: list[RegistryProblem] = Field(
        default_factory=list,
        description="Files and objects the last sync could not use.",
        max_length=MAX_PROBLEMS,
    )
    config_maps: list[RegisteredConfigMap] = Field(
        default_factory=list,
        description="The mod and benchmark-profile ConfigMaps written, with their data's digests.",
        max_length=2 * MAX_LISTED,
    )
    mods: list[ListedName] = Field(
        default_factory=list,
        description="Mods written (as recipes name them).",
        max_length=MAX_LISTED,
    )
    benchmark_profiles: list[ListedName] = Field(
        default_factory=list,
        description="Benchmark profiles written (usable as @<registry>/<name>).",
        max_length=MAX_LISTED,
    )
    tuning: list[ListedName] = Field(
        default_factory=list,
        description="Tuning configs found (listed only).",
        max_length=MAX_LISTED,
    )
