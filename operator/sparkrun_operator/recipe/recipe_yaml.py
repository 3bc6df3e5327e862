"""sparkrun recipe YAML -> a Recipe spec: the one translation ``catalog.import`` and the
registry sync both use (pure; CPU-bound on a large recipe: async callers use a worker thread).

The content is loaded within ``safeload.RECIPE`` (size, depth, no anchors or aliases); keys the
v2 spec does not know go to ``runtime_config``; the spec is validated by the pydantic model and
admitted as the apiserver would admit a Recipe (the CRD's bounds and CEL rules, offline). Every
refusal is a ``ValueError`` whose message says what is wrong.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any, Final

from pydantic import ValidationError

from sparkrun_operator import safeload
from sparkrun_operator.api import admission
from sparkrun_operator.api.meta import API_VERSION
from sparkrun_operator.api.recipe import RecipeSpec
from sparkrun_operator.api.resources import RECIPE

#: Admission errors named in a refusal at most (the first ones, by field path), and the length
#: of each message (the schema validator's messages quote the offending value).
_MAX_ERRORS: Final = 5
_MAX_MESSAGE: Final = 200


def load_spec(content: str) -> tuple[dict[str, Any], RecipeSpec]:
    """The recipe's raw mapping and its v2 spec (not yet admitted: see :func:`admit`)."""
    try:
        raw = safeload.load_yaml(content, safeload.RECIPE)
    except safeload.DocumentError as error:
        raise ValueError(str(error)) from None
    if not isinstance(raw, dict):
        raise ValueError("recipe content must be a YAML mapping")
    body = dict(raw)
    body.pop("name", None)
    known = set(RecipeSpec.model_fields) - {"runtime_config"}
    extra = {k: v for k, v in body.items() if k not in known}
    fields = {k: v for k, v in body.items() if k in known}
    if "recipe_version" in fields:
        fields["recipe_version"] = str(fields["recipe_version"])
    if extra:
        fields["runtime_config"] = {**(fields.get("runtime_config") or {}), **extra}
    try:
        spec = RecipeSpec.model_validate(fields)
    except ValidationError as error:
        raise ValueError(f"recipe content is not a valid v2 recipe: {error.errors()[0]['msg']}") from None
    return raw, spec


def import_name(raw: Mapping[str, Any], content: str) -> str:
    """The name ``catalog.import`` gives a recipe: its name (or model) slug and a content hash."""
    base = str(raw.get("name") or str(raw.get("model", "recipe")).rsplit("/", 1)[-1]).lower()
    slug = re.sub(r"[^a-z0-9-]+", "-", base).strip("-")[:40] or "recipe"
    return f"{slug}-{hashlib.sha256(content.encode()).hexdigest()[:8]}"


def recipe_object(name: str, spec: RecipeSpec, namespace: str, labels: Mapping[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": RECIPE.kind,
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "spec": spec.to_wire(),
    }


def _short(error: admission.FieldError) -> str:
    message = error.message if len(error.message) <= _MAX_MESSAGE else error.message[:_MAX_MESSAGE] + "..."
    return f"{error.path}: {message}"


def admit(body: Mapping[str, Any]) -> None:
    """Refuse (``ValueError``) a Recipe object the apiserver would refuse with a 422."""
    errors = admission.validate(dict(body))
    if errors:
        listed = "; ".join(_short(e) for e in errors[:_MAX_ERRORS])
        more = f" (and {len(errors) - _MAX_ERRORS} more)" if len(errors) > _MAX_ERRORS else ""
        raise ValueError(f"recipe content makes an invalid Recipe: {listed}{more}")
