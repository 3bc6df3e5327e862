"""A ``model_cache.import`` manifest is one command-line argument of the tool Job, so its bound
(``safeload.MANIFEST``) stays under Linux's cap on one argument (issue 23, follow-up F3).

The processes here are real: the cap is the kernel's (``MAX_ARG_STRLEN``, 32 pages), checked by
``execve``, so a manifest over it would have been accepted at submission and then failed to
start the tool.
"""

from __future__ import annotations

import errno
import json
import subprocess
import sys
from typing import Any

import pytest

from sparkrun_operator import safeload
from sparkrun_operator.ops.errors import Invalid
from sparkrun_operator.ops.executors import ARGUMENT_CHECKS
from sparkrun_operator.ops.executors.modelcache import files
from sparkrun_operator.ops.settings import Settings

COMMIT = "a" * 40
#: Linux: one argument (or environment string) of execve, its NUL included.
MAX_ARG_STRLEN = 32 * 4096
CHILD = "import json, sys; print(len(json.loads(sys.argv[sys.argv.index('--manifest-json') + 1])['files']))"


def _manifest(size: int) -> dict[str, Any]:
    """A manifest in the daemon's shape whose compact JSON is exactly ``size`` bytes."""
    entry = {
        "path": "model-00000.safetensors",
        "size": 1,
        "checksum_algorithm": "sha256",
        "checksum": "b" * 64,
    }
    manifest: dict[str, Any] = {"repo": "org/model", "revision": COMMIT, "files": [entry], "note": ""}
    manifest["note"] = "n" * (size - len(json.dumps(manifest, separators=(",", ":"))))
    assert len(json.dumps(manifest, separators=(",", ":"))) == size
    return manifest


def _start(arguments: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", CHILD, *arguments], capture_output=True, text=True, check=True, timeout=60
    )


def test_linux_caps_one_argument_at_128_kib() -> None:
    subprocess.run([sys.executable, "-c", "pass", "x" * (MAX_ARG_STRLEN - 1)], check=True, timeout=60)
    with pytest.raises(OSError, match="Argument list too long") as refused:
        subprocess.run([sys.executable, "-c", "pass", "x" * MAX_ARG_STRLEN], check=True, timeout=60)
    assert refused.value.errno == errno.E2BIG


def test_a_manifest_at_the_bound_reaches_the_tool_and_one_byte_more_is_a_422() -> None:
    assert safeload.MANIFEST.max_bytes == files.MAX_MANIFEST_BYTES == 120 * 1024 < MAX_ARG_STRLEN
    check = ARGUMENT_CHECKS["model_cache.import"]
    args = {"cache_dir": "claim", "model": "org/model"}
    at_bound = _manifest(files.MAX_MANIFEST_BYTES)
    check({**args, "manifest": at_bound}, Settings(namespace="default"))
    started = _start(files.import_arguments(at_bound, "size"))
    assert started.stdout.strip() == "1"

    with pytest.raises(Invalid) as refused:
        check({**args, "manifest": _manifest(files.MAX_MANIFEST_BYTES + 1)}, Settings(namespace="default"))
    assert refused.value.detail == (
        "manifest is 122881 bytes of JSON; at most 122880 are allowed "
        "(the manifest is one argument of the tool's command)"
    )
