"""``sparkrun-k8s describe`` against the testbed with the real operator: a workload (named unlike
its model and served name) shows its spec, startup timeline, conditions, events and endpoints,
by name and by workload id; ``-o json`` is the object plus its Events; a secret-looking value in
the spec is never printed; a missing object exits 4, an unknown kind 2."""

from __future__ import annotations

import argparse
import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from sparkrun_operator.cli import describe
from sparkrun_testbed.kubeapi import KubeApi
from tests.operator.conftest import OperatorProcess, wait_condition, workload

pytestmark = pytest.mark.testbed

Run = Callable[..., subprocess.CompletedProcess[str]]
Factory = Callable[..., OperatorProcess]

MODEL = "Qwen/Qwen3-0.6B"
SERVED = "desc-chat-served"
TOKEN = "hf_notarealtoken0123456789abcdef"


def test_describe_workload(
    kube: KubeApi, namespace: str, operator_factory: Factory, sparkrun_k8s: Run, kubeconfig: Path
) -> None:
    operator_factory(namespace)
    manifest = workload(
        "desc-wl",
        namespace,
        model={"name": MODEL, "servedName": SERVED},
        engine={"env": [{"name": "HF_TOKEN", "value": TOKEN}]},
    )
    kube.apply(manifest)
    obj = wait_condition(kube, namespace, "desc-wl", "Ready", timeout=120)
    kube.wait(
        lambda: [
            e
            for e in kube.list_items("v1", "Event", namespace=namespace)
            if e["involvedObject"].get("uid") == obj["metadata"]["uid"]
        ],
        timeout=30,
        what="an Event about the workload",
    )

    shown = sparkrun_k8s("describe", "desc-wl", "-n", namespace)
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    assert out.startswith(f"InferenceWorkload {namespace}/desc-wl\n")
    assert f"gateway names: {SERVED}" in out
    assert MODEL in out
    assert TOKEN not in out
    assert "[redacted]" in out
    assert "HF_TOKEN" in out
    for section in ("Spec:", "Startup:", "Conditions:", "Endpoints:", "Events:"):
        assert section in out, section
    timeline = out.split("Startup:")[1].split("Conditions:")[0].splitlines()[2:]
    stages = [line.split()[0] for line in timeline if line.strip()]
    assert stages[:1] == ["accepted"]
    assert "ready" in stages
    conditions = out.split("Conditions:")[1].split("Endpoints:")[0]
    assert any(line.split()[:2] == ["Ready", "True"] for line in conditions.splitlines())

    # TAB completion, as argcomplete calls it: the workload's name, kinds, a kind's names
    args = argparse.Namespace(kubeconfig=str(kubeconfig), context=None, namespace=namespace)
    assert describe.complete("desc-", args) == ["desc-wl"]
    assert {"desc-wl", "iw/", "ic/"} <= set(describe.complete("", args))
    assert describe.complete("iw/desc", args) == ["iw/desc-wl"]

    by_id = sparkrun_k8s("describe", obj["status"]["workloadId"], "-n", namespace)
    assert by_id.returncode == 0, by_id.stderr
    assert by_id.stdout.startswith(f"InferenceWorkload {namespace}/desc-wl\n")

    as_json = sparkrun_k8s("describe", "iw/desc-wl", "-n", namespace, "-o", "json")
    assert as_json.returncode == 0, as_json.stderr
    data = json.loads(as_json.stdout)
    assert data["metadata"]["uid"] == obj["metadata"]["uid"]
    assert "managedFields" not in data["metadata"]
    assert data["spec"]["engine"]["env"] == [{"name": "HF_TOKEN", "value": "[redacted]"}]
    assert data["events"]
    assert all(e["involvedObject"]["uid"] == obj["metadata"]["uid"] for e in data["events"])
    assert TOKEN not in as_json.stdout


def test_describe_not_found_and_bad_kind(namespace: str, sparkrun_k8s: Run) -> None:
    missing = sparkrun_k8s("describe", "no-such-workload", "-n", namespace)
    assert missing.returncode == 4, (missing.stdout, missing.stderr)
    assert "not found" in missing.stderr
    for target in ("cache/no-such-cache", "ic/no-such-cluster", "ib/nothing", "dj/nothing"):
        gone = sparkrun_k8s("describe", target, "-n", namespace)
        assert gone.returncode == 4, (target, gone.stderr)
    bad = sparkrun_k8s("describe", "pizza/margherita", "-n", namespace)
    assert bad.returncode == 2
    assert "unknown kind" in bad.stderr
    invalid = sparkrun_k8s("describe", "cache/Bad_Name", "-n", namespace)
    assert invalid.returncode == 2, invalid.stderr
