"""The objects a RecipeRegistry writes in its ``targetNamespace`` (pure): Recipes, mod
ConfigMaps and benchmark-profile ConfigMaps, each with a controller ownerReference to the
registry and the label ``sparkrun.dev/registry=<registry>``.

A mod ConfigMap holds each file of the mod under a key ``f<N>`` (``binaryData`` when it is not
UTF-8) and ``manifest.json`` = ``{"name": ..., "files": [{"key", "path", "mode"}]}``; a profile
ConfigMap holds ``profile.yaml``. Names longer than a ConfigMap name may be are cut with a hash.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import yaml

from sparkrun_operator.api.meta import API_VERSION
from sparkrun_operator.api.recipe import RecipeSpec
from sparkrun_operator.render import keys

#: The most bytes of a mod's files together (a ConfigMap holds at most 1 MiB with its keys).
MOD_MAX_BYTES: Final = 900 * 1024
#: The most bytes of a benchmark profile's ``profile.yaml``.
PROFILE_MAX_BYTES: Final = 900 * 1024
MANIFEST_KEY: Final = "manifest.json"
PROFILE_KEY: Final = "profile.yaml"
_NAME_MAX: Final = 253
#: The mode of a mod's file that git records as executable; other files 0644.
EXECUTABLE: Final = 0o755
REGULAR: Final = 0o644


@dataclass(frozen=True, kw_only=True)
class RegistryRef:
    """The RecipeRegistry whose objects are rendered."""

    name: str
    uid: str
    namespace: str

    def owner(self) -> dict[str, Any]:
        """The controller ownerReference (no blockOwnerDeletion: that would need the right to set
        finalizers on the registry)."""
        return {
            "apiVersion": API_VERSION,
            "kind": "RecipeRegistry",
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": False,
        }

    def metadata(
        self, name: str, *, labels: Mapping[str, str], annotations: Mapping[str, str]
    ) -> dict[str, Any]:
        return {
            "name": name,
            "namespace": self.namespace,
            "labels": {keys.LABEL_REGISTRY: self.name, keys.LABEL_MANAGED_BY: keys.MANAGED_BY, **labels},
            "annotations": dict(annotations),
            "ownerReferences": [self.owner()],
        }


def child_name(registry: str, infix: str, slug: str) -> str:
    """``<registry>-<infix>-<slug>``, cut to a valid name with a hash of the whole when longer."""
    name = f"{registry}-{infix}-{slug}"
    if len(name) <= _NAME_MAX:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:10]
    return f"{name[: _NAME_MAX - 11].rstrip('-.')}-{digest}"


def mod_config_map_name(registry: str, slug: str) -> str:
    """The name of the ConfigMap of the mod ``slug`` of ``registry``."""
    return child_name(registry, "mod", slug)


def profile_config_map_name(registry: str, slug: str) -> str:
    """The name of the ConfigMap of the benchmark profile ``slug`` of ``registry``."""
    return child_name(registry, "bench", slug)


def recipe_spec(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A recipe's spec as the apiserver stores it (the CRD's defaults applied, unset keys left
    out), so that comparing it with a stored Recipe's spec finds no difference that is not one."""
    return RecipeSpec.model_validate(dict(raw)).to_wire()


def recipe(
    ref: RegistryRef, *, name: str, spec: Mapping[str, Any], catalog_name: str, path: str, commit: str
) -> dict[str, Any]:
    """The Recipe of one registry recipe."""
    annotations = {
        keys.ANNOTATION_CATALOG_NAME: catalog_name,
        keys.ANNOTATION_REGISTRY_PATH: path,
        keys.ANNOTATION_REGISTRY_COMMIT: commit,
    }
    return {
        "apiVersion": API_VERSION,
        "kind": "Recipe",
        "metadata": ref.metadata(name, labels={}, annotations=annotations),
        "spec": dict(spec),
    }


def _mode(git_mode: int | None) -> int:
    """0755 for a file git records as executable (``0o100755``), else 0644."""
    return EXECUTABLE if git_mode is not None and git_mode & 0o111 else REGULAR


def mod_config_map(
    ref: RegistryRef,
    *,
    slug: str,
    mod_name: str,
    files: Mapping[str, bytes],
    modes: Mapping[str, int] | None = None,
) -> dict[str, Any] | None:
    """The ConfigMap of one mod; ``None`` when its files together pass :data:`MOD_MAX_BYTES`."""
    if sum(len(b) for b in files.values()) > MOD_MAX_BYTES:
        return None
    data: dict[str, str] = {}
    binary: dict[str, str] = {}
    listed = []
    for i, path in enumerate(sorted(files)):
        key = f"f{i}"
        content = files[path]
        try:
            data[key] = content.decode("utf-8")
        except UnicodeDecodeError:
            binary[key] = base64.b64encode(content).decode("ascii")
        listed.append({"key": key, "path": path, "mode": _mode((modes or {}).get(path))})
    data[MANIFEST_KEY] = json.dumps({"name": mod_name, "files": listed}, sort_keys=True)
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": ref.metadata(
            mod_config_map_name(ref.name, slug),
            labels={keys.LABEL_MOD: slug[:63].rstrip("-.")},
            annotations={keys.ANNOTATION_MOD_NAME: mod_name},
        ),
        "data": data,
    }
    if binary:
        body["binaryData"] = binary
    return body


def profile_config_map(
    ref: RegistryRef, *, slug: str, profile_name: str, document: Mapping[str, Any]
) -> dict[str, Any] | None:
    """The ConfigMap of one benchmark profile; ``None`` when its YAML passes :data:`PROFILE_MAX_BYTES`."""
    text = yaml.safe_dump(dict(document), sort_keys=True, allow_unicode=True)
    if len(text.encode()) > PROFILE_MAX_BYTES:
        return None
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": ref.metadata(
            profile_config_map_name(ref.name, slug),
            labels={keys.LABEL_BENCHMARK_PROFILE: slug[:63].rstrip("-.")},
            annotations={keys.ANNOTATION_BENCHMARK_PROFILE_NAME: profile_name},
        ),
        "data": {PROFILE_KEY: text},
    }
