"""``spec.inferencePool`` (``api/inferencepool.py``, issue 30): the shapes admission accepts, as
the offline ``validate`` checks them against the generated CRD (refusals are in the corpus,
``tests/corpus.py``, which the testbed also runs against the real apiserver)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkrun_operator.api.admission import validate
from sparkrun_operator.api.inferencepool import DEFAULT_PICKER_PORT, EndpointPickerSpec, InferencePoolSpec
from sparkrun_operator.api.workload import InferenceWorkloadSpec, InferenceWorkloadStatus
from tests.corpus import load_examples

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def crds() -> dict[str, dict[str, Any]]:
    docs = [yaml.safe_load(p.read_text()) for p in sorted((ROOT / "crds").glob("*.yaml"))]
    return {d["spec"]["names"]["kind"]: d for d in docs}


@pytest.mark.parametrize(
    "pool",
    [
        {},
        {"enabled": False},
        {"endpointPicker": {"mode": "Managed", "failureMode": "FailOpen"}},
        {"endpointPicker": {"mode": "External", "service": "platform-epp"}},
        {"endpointPicker": {"mode": "External", "service": "e" * 63, "port": 65535}},
        {"endpointPicker": {"mode": "None"}},
    ],
)
def test_accepted_shapes(pool: dict[str, Any], crds: dict[str, dict[str, Any]]) -> None:
    manifest = copy.deepcopy(load_examples()["inferenceworkload"])
    manifest["spec"]["inferencePool"] = pool
    assert validate(manifest, crds=crds) == []
    spec = InferenceWorkloadSpec.model_validate(manifest["spec"])
    assert spec.inference_pool is not None


def test_defaults_and_the_effective_port() -> None:
    spec = InferencePoolSpec()
    assert spec.enabled
    assert (spec.endpoint_picker.mode, spec.endpoint_picker.failure_mode) == ("Managed", "FailClose")
    assert spec.endpoint_picker.effective_port == DEFAULT_PICKER_PORT
    assert EndpointPickerSpec(mode="External", service="x", port=9102).effective_port == 9102
    assert InferenceWorkloadSpec.model_validate({"model": {"name": "m"}}).inference_pool is None


def test_the_status_is_bounded_and_round_trips() -> None:
    status = InferenceWorkloadStatus.model_validate(
        {
            "inferencePool": {
                "name": "qwen",
                "endpointPicker": {"mode": "Managed", "service": "qwen-epp", "ready": True},
                "parents": [
                    {"parent": f"Gateway/infra/gw{i}", "accepted": "True", "resolvedRefs": "True"}
                    for i in range(8)
                ],
            }
        }
    )
    assert status.inference_pool is not None
    assert status.to_wire()["inferencePool"]["parents"][0] == {
        "parent": "Gateway/infra/gw0",
        "accepted": "True",
        "resolvedRefs": "True",
    }
    with pytest.raises(ValueError, match="at most 8"):
        InferenceWorkloadStatus.model_validate(
            {
                "inferencePool": {
                    "name": "qwen",
                    "parents": [{"parent": "g", "accepted": "True", "resolvedRefs": "True"}] * 9,
                }
            }
        )
