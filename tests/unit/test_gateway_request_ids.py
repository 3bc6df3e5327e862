"""The gateway's own request ids (``gateway/app.py``): 32 hex digits, never repeated within a
process, and another process (another ``--workers`` worker, another key) draws other ids.
Unpredictability: ``tests/gateway/test_auth_identity.py``."""

from __future__ import annotations

import re

from sparkrun_operator.gateway.app import _RequestIds


def test_ids_are_hex_unique_and_differ_per_process() -> None:
    ids = _RequestIds()
    drawn = [ids() for _ in range(10_000)]
    assert all(re.fullmatch(r"[0-9a-f]{32}", rid) for rid in drawn)
    assert len(set(drawn)) == len(drawn)
    other = _RequestIds()  # as a worker process would start with
    assert other()[:16] != drawn[0][:16]
