"""A serving revision's hooks frozen (``render/frozen.py``'s ``hooks`` section, issue 32).

A kept revision renders its JobSets again later (a rollback, a group restart after the Recipe
moved on): its mods and hooks must come back as they were, so the revision keeps its hash. Read
as strictly as the rest of a frozen document: bounded strings and lists, unknown fields refused.
Pure.
"""

from __future__ import annotations

from typing import Annotated, Final

from pydantic import Field

from sparkrun_operator.api.meta import KubeModel
from sparkrun_operator.render.hooks import HookPlan, HookStep, ModFile, ModSource

#: A hook command's most characters (a recipe's whole object is far smaller in practice).
MAX_COMMAND: Final = 64 * 1024
MAX_STEPS: Final = 64
MAX_MODS: Final = 64
MAX_FILES: Final = 256

_Name = Annotated[str, Field(max_length=255)]


class _File(KubeModel):
    key: str = Field(max_length=253)
    path: str = Field(max_length=255)
    mode: int = Field(ge=0, le=0o777)


class _Mod(KubeModel):
    name: str = Field(max_length=512)
    config_map: str = Field(max_length=253)
    digest: str = Field(max_length=64)
    files: list[_File] = Field(max_length=MAX_FILES)


class _Step(KubeModel):
    command: str = Field(max_length=MAX_COMMAND)
    timeout_s: int = Field(ge=0, le=7 * 24 * 3600)


class FrozenHooks(KubeModel):
    """``ServingRevision.inputs.hooks``."""

    mods: list[_Mod] = Field(default_factory=list, max_length=MAX_MODS)
    pre_exec: list[_Step] = Field(default_factory=list, max_length=MAX_STEPS)
    post_exec: list[_Step] = Field(default_factory=list, max_length=MAX_STEPS)
    env: list[Annotated[list[_Name], Field(min_length=2, max_length=2)]] = Field(
        default_factory=list, max_length=32
    )
    health_wait_s: int = Field(default=3600, ge=1, le=7 * 24 * 3600)
    port: int = Field(default=8000, ge=1, le=65535)


def to_frozen(plan: HookPlan) -> FrozenHooks:
    return FrozenHooks(
        mods=[
            _Mod(
                name=m.name,
                config_map=m.config_map,
                digest=m.digest,
                files=[_File(key=f.key, path=f.path, mode=f.mode) for f in m.files],
            )
            for m in plan.mods
        ],
        pre_exec=[_Step(command=s.command, timeout_s=s.timeout_s) for s in plan.pre_exec],
        post_exec=[_Step(command=s.command, timeout_s=s.timeout_s) for s in plan.post_exec],
        env=[[k, v] for k, v in plan.env],
        health_wait_s=plan.health_wait_s,
        port=plan.port,
    )


def from_frozen(frozen: FrozenHooks) -> HookPlan:
    return HookPlan(
        mods=tuple(
            ModSource(
                name=m.name,
                config_map=m.config_map,
                digest=m.digest,
                files=tuple(ModFile(key=f.key, path=f.path, mode=f.mode) for f in m.files),
            )
            for m in frozen.mods
        ),
        pre_exec=tuple(HookStep(command=s.command, timeout_s=s.timeout_s) for s in frozen.pre_exec),
        post_exec=tuple(HookStep(command=s.command, timeout_s=s.timeout_s) for s in frozen.post_exec),
        env=tuple((pair[0], pair[1]) for pair in frozen.env),
        health_wait_s=frozen.health_wait_s,
        port=frozen.port,
    )
