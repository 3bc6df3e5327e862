"""The model's shape from a cached revision: ``config.json`` and the weight files' size, bounded.

Run by the download Job after the revision is in place (``runtime/download.py``): the facts go
onto the ``result`` line as ``shape`` (:func:`~sparkrun_operator.api.modelshape.shape_event`),
which the ModelCache planner stores as ``status.modelShape``. No network: only the cache volume
is read. ``config.json`` is the repository owner's file: it is read up to
:data:`~sparkrun_operator.safeload.MODEL_CONFIG`'s size and depth, and anything it cannot say
within those bounds is an unknown fact, never a failure of the download.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final

from sparkrun_operator import safeload
from sparkrun_operator.api.modelshape import ModelShape, shape_event, shape_from_config

CONFIG: Final = "config.json"
#: The weight files vLLM loads by default, most specific first: the first group with a file is
#: the one counted (Mistral-style repositories hold both ``model-*.safetensors`` and a
#: ``consolidated.safetensors`` copy; PyTorch checkpoints only ``*.bin``). Top level only
#: (``original/`` folders hold other formats).
WEIGHT_GROUPS: Final = (
    re.compile(r"model[^/]*\.safetensors"),
    re.compile(r"[^/]+\.safetensors"),
    re.compile(r"[^/]+\.(bin|pt|pth)"),
)


def weights_bytes(files: Iterable[tuple[str, int]]) -> int | None:
    """Bytes of the weight files among ``(path, size)``; ``None`` when none is recognised."""
    listed = list(files)
    for group in WEIGHT_GROUPS:
        sizes = [size for path, size in listed if group.fullmatch(path)]
        if sizes:
            return sum(sizes)
    return None


def read_config(snapshot: Path) -> Any:
    """The parsed ``config.json`` of a snapshot folder, or ``None`` (absent, unreadable, too
    large, too deep, not JSON)."""
    try:
        with (snapshot / CONFIG).open("rb") as handle:
            data = handle.read(safeload.MODEL_CONFIG.max_bytes + 1)
        return safeload.load_json(data, safeload.MODEL_CONFIG)
    except (OSError, safeload.DocumentError):
        return None


def shape_of(snapshot: Path, files: Iterable[tuple[str, int]]) -> dict[str, Any]:
    """``{"shape": {...}}`` for a result line: the facts of the snapshot's ``config.json`` and
    the weight files' size (unknown facts left out)."""
    shape: ModelShape = shape_from_config(read_config(snapshot), weights_bytes=weights_bytes(files))
    return {"shape": shape_event(shape)}
