"""The naming rule: what a workload serves and which names it answers to. Pure: no I/O.

One function decides it, from the workload and its recipe resolved (``recipe/resolve.py``): the
**served name is the name the engine is started with** (``--served-model-name``), which is part
of the serving revision (ADR 0010):

1. ``spec.model.servedName``, else
2. the recipe's ``defaults.served_model_name``, else
3. the model the engine loads (``spec.model.name``, else the recipe's ``model``).

Aliases are ``spec.model.aliases`` (minus the served name and repeats). Capabilities are
``spec.routing.capabilities`` when declared, else derived from the *effective* engine arguments
(the recipe's included), the last of each flag winning as in the engine: ``--task
embed``/``embedding``, ``--runner pooling`` or ``--convert embed`` mean embedding, anything else
text generation.

The operator writes the result to ``status.model`` (:func:`to_status`); the gateway, the
operator's name index, the daemon API and ``kubectl get iw`` read it (:func:`of_workload`) for
a recipe-based workload, whose Recipe only the operator reads (none until it has). A workload
without a recipe is named by the rule applied to its spec, never by its status: nothing in the
status is needed for it, and a status is not the operator's alone to write (docs/security.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from sparkrun_operator.api import servedname
from sparkrun_operator.recipe.resolve import EffectiveSpec

__all__ = [
    "EMBEDDING",
    "TEXT_GENERATION",
    "Served",
    "capabilities_of",
    "distinct_aliases",
    "of_workload",
    "served",
    "to_status",
]

TEXT_GENERATION: Final = "text-generation"
EMBEDDING: Final = "embedding"
_CAPABILITIES: Final = (TEXT_GENERATION, EMBEDDING)
_POOLING_FLAGS: Final = frozenset({"--runner", "--task", "--convert"})
_EMBEDDING_TASKS: Final = frozenset({"embed", "embedding"})


@dataclass(frozen=True, kw_only=True)
class Served:
    """The model a workload's engine loads and the names and capabilities it is routed by."""

    model: str
    served_name: str
    aliases: tuple[str, ...] = ()
    capabilities: tuple[str, ...] = (TEXT_GENERATION,)

    @property
    def names(self) -> tuple[str, ...]:
        return (self.served_name, *self.aliases)


def capabilities_of(declared: Iterable[Any], engine_args: Iterable[Any]) -> tuple[str, ...]:
    """Declared capabilities (known ones, in a fixed order), else derived from the arguments as
    the engine reads them: the last ``--runner``/``--task``/``--convert`` wins (a workload's
    ``--task generate`` after a recipe's ``--task embed`` serves text)."""
    wanted = {str(c) for c in declared}
    known = tuple(c for c in _CAPABILITIES if c in wanted)
    if known:
        return known
    last = _last_values(str(a) for a in engine_args)
    pooling = (
        last.get("--runner") == "pooling"
        or last.get("--task") in _EMBEDDING_TASKS
        or last.get("--convert") == "embed"
    )
    return (EMBEDDING,) if pooling else (TEXT_GENERATION,)


def _last_values(args: Iterable[str]) -> dict[str, str]:
    """The last value of each flag in :data:`_POOLING_FLAGS` (``--flag v`` or ``--flag=v``;
    ``_`` spelled ``-``, as vLLM's parser accepts)."""
    out: dict[str, str] = {}
    pending: str | None = None
    for arg in args:
        if pending is not None:
            out[pending] = arg
            pending = None
            continue
        name, eq, value = arg.partition("=")
        if name.startswith("--"):
            name = "--" + name[2:].replace("_", "-")
        if name in _POOLING_FLAGS:
            if eq:
                out[name] = value
            else:
                pending = name
    return out


def distinct_aliases(served_name: str, aliases: Iterable[Any]) -> tuple[str, ...]:
    """``aliases`` as text, in order, without blanks, repeats or the served name itself."""
    out: list[str] = []
    for alias in aliases:
        text = str(alias)
        if text and text != served_name and text not in out:
            out.append(text)
    return tuple(out)


def served(spec: Mapping[str, Any], effective: EffectiveSpec) -> Served:
    """The rule, for a workload's raw ``spec`` and its resolved :class:`EffectiveSpec`."""
    routing = spec.get("routing") or {}
    return Served(
        model=effective.model,
        served_name=effective.served_name,
        aliases=distinct_aliases(effective.served_name, effective.aliases),
        capabilities=capabilities_of(routing.get("capabilities") or (), effective.engine_args),
    )


def to_status(value: Served) -> dict[str, Any]:
    """``status.model`` (wire form)."""
    return {
        "name": value.model,
        "servedName": value.served_name,
        "aliases": list(value.aliases),
        "capabilities": list(value.capabilities),
    }


def of_workload(obj: Mapping[str, Any]) -> Served | None:
    """The served model of a raw InferenceWorkload, or ``None`` (no names).

    A workload **without a recipe**: the rule applied to its spec, whatever its status says
    (the rule needs nothing else; ``status.model`` is writable by whoever holds
    ``inferenceworkloads/status``, and a name from there would be routed over the spec's).
    ``None`` when a name in its spec is not a served name (``api/servedname.py``: a workload
    stored before admission checked them; the operator refuses to resolve it too).

    A workload **with a recipe**: its ``status.model``, written by the operator, the only
    reader of its Recipe; ``None`` until the operator resolved it.
    """
    spec = obj.get("spec") or {}
    if not isinstance(spec, Mapping):
        return None
    if spec.get("recipe"):
        return _recorded(obj.get("status"))
    model = spec.get("model") or {}
    if not isinstance(model, Mapping) or not model.get("name"):
        return None
    name = str(model.get("servedName") or model["name"])
    aliases = [str(a) for a in model.get("aliases") or ()]
    if any(servedname.problem(n) is not None for n in (str(model["name"]), name, *aliases)):
        return None
    engine = spec.get("engine") or {}
    return Served(
        model=str(model["name"]),
        served_name=name,
        aliases=distinct_aliases(name, aliases),
        capabilities=capabilities_of(
            (spec.get("routing") or {}).get("capabilities") or (), engine.get("args") or ()
        ),
    )


def _recorded(status: Any) -> Served | None:
    """``status.model`` as the operator wrote it (``None`` without a served name)."""
    recorded = status.get("model") if isinstance(status, Mapping) else None
    if not isinstance(recorded, Mapping) or not recorded.get("servedName"):
        return None
    name = str(recorded["servedName"])
    return Served(
        model=str(recorded.get("name") or name),
        served_name=name,
        aliases=distinct_aliases(name, recorded.get("aliases") or ()),
        capabilities=capabilities_of(recorded.get("capabilities") or (), ()),
    )
