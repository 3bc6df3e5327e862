"""Bounds on the strings, lists, maps and free-form values of every CRD spec, in one place.

The figures are the ones ``docs/reliability.md`` ("Bounds of the CRD specs") lists and the tests
read. Every string under ``spec`` has a ``maxLength`` (or an ``enum``), every list a
``maxItems``, every map a ``maxProperties`` (``tests/unit/test_spec_bounds.py`` walks the
generated schemas), so no tenant string or list reaches the operator, the shim or an engine
unbounded.

Two kinds of bound:

- **enforced** (``Field(max_length=...)``): checked by the pydantic models and the CRD alike;
  the bounds v1alpha1 had from the start.
- **schema-only** (this module's ``Annotated`` types and ``json_schema_extra`` helpers): only
  the CRD schema carries them, so only the apiserver and the offline ``sparkrun-k8s validate``
  (which reads the generated schema) enforce them. They came later (issue 23); an object
  stored before them stays served by CRD validation ratcheting, and the operator, whose models
  leave them out, keeps reconciling it (ADR 0016).

Free-form values (``x-kubernetes-preserve-unknown-fields``): the apiserver's CEL cannot see
inside them (their CEL type has no fields) and has no function that measures an encoded size,
so their bound is structural: :func:`json_value` gives a schema that bounds every level's
keys and items, every string, and the nesting depth (JSON Schema's ``maxLength``,
``maxItems`` and ``maxProperties`` apply to a schema without a ``type`` only when the value
is of their kind). Their encoded size is bounded only by the apiserver's request limit (3 MiB)
and etcd's object limit (1.5 MiB by default). Map keys have no schema of their own in a CRD
(no ``propertyNames``): :func:`map_keys` bounds them with a CEL rule where the values are typed.
"""

from __future__ import annotations

from typing import Annotated, Any, Final

from pydantic import Field

from sparkrun_operator.api import cel

#: One item of ``engine.args``: an inline ``--chat-template`` of several KiB must fit.
ARG_MAX_LENGTH: Final = 32768
#: The literal value of an environment variable (engine env, Recipe env).
ENV_VALUE_MAX_LENGTH: Final = 32768
#: An environment variable's name (engine env; Recipe env keys).
ENV_NAME_MAX_LENGTH: Final = 256
#: Entries of a Recipe's ``env`` (as many as ``engine.env`` holds).
RECIPE_ENV_MAX_ENTRIES: Final = 128
#: A label (or taint) key: a DNS subdomain prefix (253), ``/`` and a name (63).
LABEL_KEY_MAX_LENGTH: Final = 317
#: A label (or taint) value.
LABEL_VALUE_MAX_LENGTH: Final = 63
#: Entries of a node selector or a label selector's ``matchLabels``.
SELECTOR_MAX_ENTRIES: Final = 64
#: ``matchExpressions`` of a label selector, and the values of one.
SELECTOR_MAX_EXPRESSIONS: Final = 32
SELECTOR_MAX_VALUES: Final = 64
#: A Node name (a DNS subdomain).
NODE_NAME_MAX_LENGTH: Final = 253
#: One allow or ignore glob of a ModelCache.
PATTERN_MAX_LENGTH: Final = 1024
#: A resource quantity such as ``500Gi``.
QUANTITY_MAX_LENGTH: Final = 64
#: The principal of a DaemonJob: its uid, each group, and how many groups.
PRINCIPAL_UID_MAX_LENGTH: Final = 1024
GROUP_MAX_LENGTH: Final = 1024
GROUPS_MAX_ITEMS: Final = 1024
#: Top-level keys of a DaemonJob's ``arguments`` (the largest request schema has 35).
ARGUMENTS_MAX_PROPERTIES: Final = 64
#: A DaemonJob's ``arguments``: nesting depth (``arguments`` is level 1; a recipe override of
#: ``defaults`` at the Recipe's own bound, or a ``model_cache.import`` manifest, fits), each
#: string (``catalog.import`` content: 262,144 characters), the keys and items of each nested level
#: (the daemon's implicit limit: 2,048 items). The shim checks the same figures before it creates a
#: job (``ops/jobs.py`` ``check_arguments``), so a request over them is its 422, not the apiserver's.
ARGUMENTS_DEPTH: Final = 8
ARGUMENT_STRING_MAX_LENGTH: Final = 262144
ARGUMENTS_MAX_ENTRIES: Final = 2048
#: Hooks of each Recipe hook list (``preExec``, ``postExec``, ``postCommands``).
HOOKS_MAX_ITEMS: Final = 64
#: ``spec.pod`` of an InferenceWorkload: extra labels and annotations of the engine pods (each
#: map), an annotation's value, capabilities added or dropped (a name, and how many), the
#: supplemental groups, a Localhost seccomp profile's path.
POD_METADATA_MAX_ENTRIES: Final = 64
ANNOTATION_VALUE_MAX_LENGTH: Final = 4096
CAPABILITY_MAX_LENGTH: Final = 64
CAPABILITIES_MAX_ITEMS: Final = 64
SUPPLEMENTAL_GROUPS_MAX_ITEMS: Final = 32
PROFILE_MAX_LENGTH: Final = 4096

#: Free-form values: keys of each object and items of each list, at every level.
FREE_FORM_MAX_ENTRIES: Final = 256
#: Free-form values: each string in them (a chat template in recipe defaults must fit).
FREE_FORM_STRING_MAX_LENGTH: Final = 32768
#: Free-form values: nesting depth, counting the field itself as 1. The values of the deepest
#: level are scalars (or empty). Python's own recursion limit (1000) breaks on far less than the
#: apiserver's 10,000 levels (a deep copy of ~500 levels already fails).
RECIPE_DEFAULTS_DEPTH: Final = 6
RECIPE_METADATA_DEPTH: Final = 5
RECIPE_RUNTIME_CONFIG_DEPTH: Final = 6
RECIPE_HOOK_DEPTH: Final = 3
BENCH_ARGS_DEPTH: Final = 3
ENV_VALUE_FROM_DEPTH: Final = 3


def _max_length(limit: int) -> Any:
    return Field(json_schema_extra={"maxLength": limit})


#: Schema-only bounded strings, named by purpose.
EngineArg = Annotated[str, _max_length(ARG_MAX_LENGTH)]
EnvValue = Annotated[str, _max_length(ENV_VALUE_MAX_LENGTH)]
LabelKey = Annotated[str, _max_length(LABEL_KEY_MAX_LENGTH)]
LabelValue = Annotated[str, _max_length(LABEL_VALUE_MAX_LENGTH)]
AnnotationValue = Annotated[str, _max_length(ANNOTATION_VALUE_MAX_LENGTH)]
NodeName = Annotated[str, _max_length(NODE_NAME_MAX_LENGTH)]
FilePattern = Annotated[str, _max_length(PATTERN_MAX_LENGTH)]
GroupName = Annotated[str, _max_length(GROUP_MAX_LENGTH)]


def schema_only(**limits: int) -> dict[str, Any]:
    """``json_schema_extra`` with these bounds (``maxLength=...``, ``maxItems=...``) in the CRD only."""
    return dict(limits)


def map_keys(max_length: int, *, max_entries: int) -> dict[str, Any]:
    """``json_schema_extra`` of a ``dict[str, <typed value>]``: at most ``max_entries`` keys, each
    at most ``max_length`` characters (a CEL rule: a CRD schema cannot constrain keys)."""
    return {
        "maxProperties": max_entries,
        **cel.rules(
            cel.rule(
                f"self.all(k, k.size() <= {max_length})",
                f"keys may not be longer than {max_length} characters",
            )
        ),
    }


def _json_node(level: int, depth: int, *, strings: int, entries: int) -> dict[str, Any]:
    """Any JSON value at nesting ``level``: below ``depth`` a bounded container or scalar, at
    ``depth + 1`` a scalar (or an empty container). ``null`` included: without ``nullable`` the
    apiserver drops a null map value once a schema covers it (``{"name": null}`` would be stored
    as ``{}``), which a free-form value without nested schemas kept. NB: the schema doubles with
    every level (``items`` and ``additionalProperties`` each hold the next; a CRD has no
    references)."""
    node: dict[str, Any] = {"x-kubernetes-preserve-unknown-fields": True, "nullable": True}
    node["maxLength"] = strings
    if level > depth:
        return {**node, "maxItems": 0, "maxProperties": 0}
    child = _json_node(level + 1, depth, strings=strings, entries=entries)
    bounded = {"maxItems": entries, "maxProperties": entries}
    return {**node, **bounded, "items": child, "additionalProperties": child}


def json_value(
    depth: int,
    *,
    max_properties: int = FREE_FORM_MAX_ENTRIES,
    strings: int = FREE_FORM_STRING_MAX_LENGTH,
    entries: int = FREE_FORM_MAX_ENTRIES,
) -> dict[str, Any]:
    """``json_schema_extra`` of a free-form object field (``dict[str, Any]``): at most
    ``max_properties`` keys, nested at most ``depth`` levels deep (the field is level 1), every
    nested level at most ``entries`` keys and items, every string at most ``strings`` characters."""
    child = _json_node(2, depth, strings=strings, entries=entries)
    return {"type": "object", "maxProperties": max_properties, "additionalProperties": child}


def json_items(depth: int, *, max_items: int) -> dict[str, Any]:
    """``json_schema_extra`` of a free-form list field (``list[Any]``): at most ``max_items``
    items, nested at most ``depth`` levels deep (the list is level 1)."""
    child = _json_node(2, depth, strings=FREE_FORM_STRING_MAX_LENGTH, entries=FREE_FORM_MAX_ENTRIES)
    return {"maxItems": max_items, "items": child}
