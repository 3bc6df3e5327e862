"""Opt-in: these tests need the real `vllm` package (several GiB), so they are collected only
when ``SPARKRUN_VLLM_PYTHON`` names a Python that has it (``make test-vllm-args`` installs
vllm into ~/.cache/sparkrun-tools/vllm-<version> and sets it). Not collected otherwise, rather
than skipped: CI runs them only through that target."""

from __future__ import annotations

import os

collect_ignore_glob = [] if os.environ.get("SPARKRUN_VLLM_PYTHON") else ["test_*.py"]
