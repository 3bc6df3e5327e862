"""A controller ``Memo`` whose client records the status patches it is sent (no apiserver), for
the unit tests of passes and lanes."""

from __future__ import annotations

from typing import Any

import httpx

from sparkrun_operator.controllers.config import OperatorConfig
from sparkrun_operator.controllers.memo import Memo
from sparkrun_operator.controllers.metrics import Metrics


class RecordingKube:
    """``merge_patch`` only: ``patches`` holds ``(name, patch)`` in the order sent."""

    def __init__(self) -> None:
        self.patches: list[tuple[str, dict[str, Any]]] = []

    async def merge_patch(self, resource: Any, name: str, patch: dict[str, Any], *_: Any, **__: Any) -> Any:
        self.patches.append((name, patch))
        return {}


def recording_memo() -> Memo:
    return Memo(
        config=OperatorConfig(),
        kube=RecordingKube(),  # type: ignore[arg-type]
        http=httpx.AsyncClient(),
        metrics=Metrics(),
    )


def patches_of(ctx: Memo) -> list[tuple[str, dict[str, Any]]]:
    kube = ctx.kube
    assert isinstance(kube, RecordingKube)
    return kube.patches
