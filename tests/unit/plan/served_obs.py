"""The workload observation the served-name tests plan from (``test_served``, ``test_served_blocked``)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sparkrun_operator.api.workload import InferenceWorkloadSpec, InferenceWorkloadStatus
from sparkrun_operator.plan.workload import Observation

NOW = dt.datetime(2026, 12, 6, 12, 0, tzinfo=dt.UTC)


def observation(spec: InferenceWorkloadSpec, **kwargs: Any) -> Observation:
    """Workload ``a/wl-x`` created a minute before :data:`NOW`, with ``kwargs`` over that."""
    values: dict[str, Any] = {
        "name": "wl-x",
        "namespace": "a",
        "uid": "uid-x",
        "generation": 1,
        "spec": spec,
        "status": InferenceWorkloadStatus(),
        "now": NOW,
        "created": NOW - dt.timedelta(minutes=1),
    }
    values.update(kwargs)
    return Observation(**values)
