"""Failures of a workload's groups (ADR 0046): the record ``status.firstFailure`` and
``status.lastFailure`` hold, and how long the first one is kept (``spec.failures``)."""

from __future__ import annotations

import datetime as dt
from typing import Annotated

from pydantic import Field

from sparkrun_operator.api.history import FAILURE_LOG_LINE_CHARS, FAILURE_LOG_LINES
from sparkrun_operator.api.meta import KubeModel

#: Nodes of one replica at most (``spec.topology.nodes``).
MAX_RANKS = 64


class FailureSpec(KubeModel):
    """How long a group's first failure is kept."""

    reset_after_ready_seconds: int = Field(
        default=600,
        description="status.firstFailure is cleared once the workload has been Ready this long without a new "
        "failure.",
        ge=0,
        le=30 * 86_400,
    )


class FailureRecord(KubeModel):
    """A failure seen in the workload's pods or JobSets (the first of a group, or the most recent)."""

    reason: str = Field(description="Reason, e.g. OOMKilled, Error, FailedScheduling, BackoffLimitExceeded.")
    message: str = Field(default="", description="Details from the pod or JobSet.")
    time: dt.datetime = Field(description="When the failure was observed.")
    object: str | None = Field(default=None, description="The pod or JobSet it came from (kind/name).")
    exit_code: int | None = Field(default=None, description="Container exit code, when there is one.")
    replica: int | None = Field(default=None, description="The replica (group) it happened in.", ge=0)
    rank: int | None = Field(
        default=None, description="The node rank in the group (0 is the leader).", ge=0, le=MAX_RANKS
    )
    role: str | None = Field(default=None, description="leader or worker.", max_length=32)
    revision: str | None = Field(
        default=None, description="The serving revision of the failed pod.", max_length=16
    )
    log: list[Annotated[str, Field(max_length=FAILURE_LOG_LINE_CHARS)]] = Field(
        default_factory=list,
        description="The container's last log lines (its termination message), secrets redacted; at most "
        "20 lines and 2048 bytes.",
        max_length=FAILURE_LOG_LINES,
    )
