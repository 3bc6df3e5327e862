"""Benchmark profiles from recipe registries: ``profile: "@<registry>/<name>"`` (issue 32).

A RecipeRegistry's controller writes each benchmark profile of its repository as a ConfigMap in
the registry's ``targetNamespace`` (label ``sparkrun.dev/registry=<registry>`` and
``sparkrun.dev/benchmark-profile=<slug>``, annotation ``sparkrun.dev/benchmark-profile-name``,
key ``profile.yaml``, a controller ownerReference to the registry). Here, pure: which of those
ConfigMaps a scoped name picks (as sparkrun's ``find_benchmark_profile`` does: the name, else a
unique file stem; several matches are refused, never guessed), whether it is really the
registry's (the ownerReference's UID is the registry's, the registry's ``status.configMaps``
lists it) and still as the registry wrote it (the digest recorded there: a tenant who may edit
ConfigMaps in the target namespace cannot change a registry's profile, ``recipe/trust.py``), and
what its document says, read as
sparkrun's ``BenchmarkSpec.load`` reads a standalone profile (the ``benchmark:`` block or the
top level; ``args`` plus every unknown key swept into them). The document is tenant text: it is
loaded within :data:`BOUNDS` (size, depth, no anchors) and its arguments are counted.

The merge is sparkrun's: the framework's defaults, then the profile's ``args``, then the
caller's ``bench_args`` (``runtime/benchframeworks.py``); a profile of another framework than
the benchmark's is refused.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from sparkrun_operator import safeload
from sparkrun_operator.api.clip import clip
from sparkrun_operator.recipe.registry_tree import slug
from sparkrun_operator.recipe.trust import config_map_intact, registry_owner
from sparkrun_operator.render import keys
from sparkrun_operator.render.registry import profile_config_map_name

__all__ = [
    "BOUNDS",
    "PROFILE_KEY",
    "ProfileError",
    "RegistryProfile",
    "ScopedName",
    "candidates",
    "choose",
    "parse_document",
    "recorded_items",
    "scoped",
]

#: The ConfigMap key of the profile's YAML.
PROFILE_KEY: Final = "profile.yaml"
#: A profile document: 64 KiB, 16 levels, no anchors or aliases.
BOUNDS: Final = safeload.Bounds("benchmark profile YAML", 64 * safeload.KIB, 16)
#: Most framework arguments one profile may set.
MAX_ARGS: Final = 128
#: Most ConfigMaps read for one scoped name (its exact name, the profiles of its file stem).
MAX_CANDIDATES: Final = 16
# Keys of a benchmark block that are not framework arguments (sparkrun's _KNOWN_BENCHMARK_KEYS).
_NOT_ARGS: Final = frozenset({"framework", "args", "metadata", "timeout", "schedule", "category"})


class ProfileError(ValueError):
    """A registry profile that cannot be used; ``reason`` is a condition reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class ScopedName:
    """``@<registry>/<name>``: the registry and the name looked up in it."""

    registry: str
    name: str

    def __str__(self) -> str:
        return f"@{self.registry}/{self.name}"


@dataclass(frozen=True)
class RegistryProfile:
    """A profile read from its registry's ConfigMap."""

    reference: str
    framework: str
    args: Mapping[str, Any] = field(default_factory=dict)
    timeout: int | None = None
    #: ``<namespace>/<ConfigMap name>`` it was read from.
    source: str = ""


def scoped(profile: str | None) -> ScopedName | None:
    """The registry-scoped name of ``profile`` (``@reg/name``), or ``None`` for any other value."""
    if not profile or not profile.startswith("@") or "/" not in profile:
        return None
    registry, name = profile[1:].split("/", 1)
    return ScopedName(registry, name) if registry and name else None


def parse_document(text: str, reference: str) -> RegistryProfile:
    """A profile document as sparkrun's ``BenchmarkSpec.load`` reads a standalone profile."""
    try:
        data = safeload.load_yaml(text, BOUNDS)
    except safeload.DocumentError as error:
        raise ProfileError("ProfileInvalid", f"benchmark profile {reference}: {error}") from None
    if not isinstance(data, dict):
        raise ProfileError("ProfileInvalid", f"benchmark profile {reference} is not a YAML mapping")
    block = data.get("benchmark")
    if not isinstance(block, dict):
        if "framework" not in data:
            raise ProfileError(
                "ProfileInvalid", f"benchmark profile {reference} has no 'benchmark' mapping and no framework"
            )
        block = data
    framework = block.get("framework")
    if not isinstance(framework, str) or not framework:
        raise ProfileError("ProfileInvalid", f"benchmark profile {reference}: framework must be a string")
    raw_args = block.get("args") or {}
    if not isinstance(raw_args, dict):
        raise ProfileError("ProfileInvalid", f"benchmark profile {reference}: args must be a mapping")
    args = {str(k): v for k, v in raw_args.items()}
    for key, value in block.items():
        if key not in _NOT_ARGS and str(key) not in args:
            args[str(key)] = value
    if len(args) > MAX_ARGS:
        raise ProfileError(
            "ProfileInvalid", f"benchmark profile {reference} sets {len(args)} arguments (at most {MAX_ARGS})"
        )
    timeout = block.get("timeout")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int) or timeout < 1):
        raise ProfileError(
            "ProfileInvalid", f"benchmark profile {reference}: timeout must be a positive integer"
        )
    return RegistryProfile(reference=reference, framework=framework, args=args, timeout=timeout)


def _owned_by(obj: Mapping[str, Any], registry: Mapping[str, Any]) -> bool:
    meta = registry.get("metadata") or {}
    uid, name = meta.get("uid"), meta.get("name")
    return bool(uid) and registry_owner(obj) == (name, uid)


def _entries(registry: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The benchmark-profile entries of the registry's ``status.configMaps``."""
    entries = (registry.get("status") or {}).get("configMaps")
    return [
        entry
        for entry in (entries if isinstance(entries, list) else ())
        if isinstance(entry, Mapping) and entry.get("kind") == "benchmarkProfile"
    ]


def _recorded(registry: Mapping[str, Any]) -> frozenset[str]:
    """The benchmark-profile ConfigMaps the registry's status says it wrote (by name)."""
    return frozenset(str(entry.get("name")) for entry in _entries(registry))


def recorded_items(registry: Mapping[str, Any]) -> list[str]:
    """The profile names the registry's status records (an item the status budget cut: none)."""
    return [str(e["item"]) for e in _entries(registry) if isinstance(e.get("item"), str) and e["item"]]


def candidates(wanted: ScopedName, registry: Mapping[str, Any]) -> list[str]:
    """The ConfigMaps (names in the registry's ``targetNamespace``) that ``wanted`` may name, to
    be read by name (ConfigMaps are never listed): the one its name is written as (recorded or
    not: :func:`choose` says when a sync has not recorded it yet), and those the status records
    with that name or that file stem. At most :data:`MAX_CANDIDATES`."""
    exact = profile_config_map_name(wanted.registry, slug(wanted.name))
    entries = _entries(registry)
    named = [str(e.get("name")) for e in entries if e.get("item") == wanted.name]
    stems = [str(e.get("name")) for e in entries if _stem(str(e.get("item") or "")) == wanted.name]
    return list(dict.fromkeys([exact, *named, *stems]))[:MAX_CANDIDATES]


def _profile_name(obj: Mapping[str, Any]) -> str:
    return str(
        ((obj.get("metadata") or {}).get("annotations") or {}).get(keys.ANNOTATION_BENCHMARK_PROFILE_NAME)
        or ""
    )


def _stem(name: str) -> str:
    last = name.rsplit("/", 1)[-1]
    for ext in (".yaml", ".yml"):
        if last.endswith(ext):
            return last[: -len(ext)]
    return last


def _matching(config_maps: Sequence[Mapping[str, Any]], name: str) -> list[Mapping[str, Any]]:
    """The profiles named ``name`` exactly, else those whose file stem is ``name``."""
    exact = [cm for cm in config_maps if _profile_name(cm) == name]
    return exact or [cm for cm in config_maps if _stem(_profile_name(cm)) == name]


def choose(
    wanted: ScopedName,
    registry: Mapping[str, Any] | None,
    config_maps: Sequence[Mapping[str, Any]],
    framework: str | None,
    *,
    listed: Sequence[str] | None = None,
) -> RegistryProfile:
    """The profile ``wanted`` names among the registry's ConfigMaps, read and checked.

    ``registry`` is the RecipeRegistry object (``None``: there is none); ``config_maps`` the
    ConfigMaps read as that registry's profiles (:func:`candidates`; the ones it does not own, or
    that its ``status.configMaps`` does not list, are skipped); ``framework`` the benchmark's
    (``None``: the profile's own is taken, as sparkrun does); ``listed``: the registry's profile
    names for the message when none matches (``None``: those of ``config_maps``). A chosen
    ConfigMap whose data is not what the registry wrote (its recorded digest) is refused
    (``ProfileEdited``). Raises :class:`ProfileError` naming what is wrong and what exists."""
    if registry is None:
        raise ProfileError(
            "ProfileNotFound", f"benchmark profile {wanted}: no RecipeRegistry {wanted.registry!r}"
        )
    if (registry.get("spec") or {}).get("enabled") is False:
        raise ProfileError(
            "ProfileNotFound", f"benchmark profile {wanted}: RecipeRegistry {wanted.registry} is disabled"
        )
    recorded = _recorded(registry)
    claimed = [cm for cm in config_maps if _owned_by(cm, registry) and _profile_name(cm)]
    owned = [cm for cm in claimed if str((cm.get("metadata") or {}).get("name")) in recorded]
    matches = _matching(owned, wanted.name)
    if not matches:
        known = sorted(listed if listed is not None else (_profile_name(cm) for cm in owned))[:20]
        listed = ", ".join(known) if known else "none"
        unlisted = (
            "; a ConfigMap of that name is not in the registry's status.configMaps (not synced yet?)"
            if _matching(claimed, wanted.name)
            else ""
        )
        raise ProfileError(
            "ProfileNotFound",
            clip(
                f"benchmark profile {wanted} not found in registry {wanted.registry} (its profiles: {listed})"
                f"{unlisted}"
            ),
        )
    if len(matches) > 1:
        labels = sorted(f"@{wanted.registry}/{_profile_name(cm)}" for cm in matches)[:20]
        raise ProfileError(
            "ProfileAmbiguous",
            clip(f"benchmark profile {wanted} is ambiguous: name one of {', '.join(labels)}"),
        )
    chosen = matches[0]
    meta = chosen.get("metadata") or {}
    intact = config_map_intact(chosen, registry)
    if not intact.trusted:
        raise ProfileError(
            "ProfileEdited",
            f"benchmark profile {wanted}: ConfigMap {meta.get('namespace', '')}/{meta.get('name', '')}"
            f": {intact.reason}; the next sync restores it",
        )
    text = (chosen.get("data") or {}).get(PROFILE_KEY)
    if not isinstance(text, str):
        raise ProfileError(
            "ProfileInvalid", f"benchmark profile {wanted}: ConfigMap {meta.get('name')} has no {PROFILE_KEY}"
        )
    profile = parse_document(text, str(wanted))
    if framework is not None and profile.framework != framework:
        raise ProfileError(
            "ProfileFrameworkMismatch",
            f"benchmark profile {wanted} is for {clip(profile.framework, 64)}, not {framework}",
        )
    return RegistryProfile(
        reference=str(wanted),
        framework=profile.framework,
        args=profile.args,
        timeout=profile.timeout,
        source=f"{meta.get('namespace', '')}/{meta.get('name', '')}",
    )
