"""DaemonJob ``spec.operation`` names (ADR 0048): the reference's dotted names, or a plugin's
``plugins.<plugin-id>.<local name>``; a hyphen is only ever part of a plugin id, so no name the
reference would refuse is stored."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from sparkrun_operator.api.daemonjob import DaemonJobSpec


def _spec(operation: str) -> DaemonJobSpec:
    return DaemonJobSpec.model_validate(
        {"operation": operation, "principal": {"username": "alice"}, "requestDigest": "0" * 64}
    )


@pytest.mark.parametrize(
    "name",
    ["workloads.run", "plugins.k8s.configure_service_account", "plugins.sparkrun-k8s.workloads.rollback"],
)
def test_reference_and_plugin_names_are_taken(name: str) -> None:
    assert _spec(name).operation == name


@pytest.mark.parametrize(
    "name",
    [
        "workloads.run-x",
        "work-loads.run",
        "plugins.-bad.workloads.history",
        "plugins.bad-.workloads.history",
        "plugins.sparkrun-k8s.workloads-x.history",
        "plugins.sparkrun-k8s",
        "workloads",
        "Workloads.run",
    ],
)
def test_a_hyphen_outside_a_plugin_id_is_refused(name: str) -> None:
    with pytest.raises(ValidationError) as error:
        _spec(name)
    assert [e["loc"] for e in error.value.errors()] == [("operation",)]
