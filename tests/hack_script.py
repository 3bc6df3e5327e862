"""The Python scripts of ``hack/`` as modules for the tests: their names have dashes, so they are
loaded by path."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

HACK = Path(__file__).resolve().parents[1] / "hack"


def load(script: str, name: str) -> ModuleType:
    """``hack/<script>`` executed afresh as module ``name`` (registered in ``sys.modules``:
    dataclasses look their module up)."""
    spec = importlib.util.spec_from_file_location(name, HACK / script)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
