"""The model's shape from a real download: the downloader CLI (real ``huggingface_hub``) fetches a
revision from the local Hub on loopback, reads its ``config.json`` from the cache and prints the
facts on its ``result`` line; the ModelCache planner reads that line from the log as the operator
does and stores ``status.modelShape``. A hostile ``config.json`` gives unknown facts, and the
download still succeeds."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkrun_operator.api.modelcache import ModelCacheSpec, ModelCacheStatus
from sparkrun_operator.plan.modelcache import (
    CacheObservation,
    ObservedClaim,
    ObservedDownloadPod,
    ObservedJob,
    job_name,
    parse_log_tail,
    plan,
)
from sparkrun_testbed.hfhub import Hub, Repo, generated

MiB = 1024 * 1024
DOWNLOAD = (sys.executable, "-m", "sparkrun_operator.runtime.download", "download")
QWEN = "sparkrun-test/qwen-like"
VLM = "sparkrun-test/vlm-like"
HOSTILE = "sparkrun-test/hostile-config"
QWEN_CONFIG = {
    "architectures": ["Qwen3ForCausalLM"],
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "hidden_size": 4096,
    "torch_dtype": "bfloat16",
    "max_position_embeddings": 40960,
}
VLM_CONFIG = {
    "torch_dtype": "bfloat16",
    "vision_config": {"num_hidden_layers": 27},
    "text_config": {
        "num_hidden_layers": 34,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "max_position_embeddings": 131072,
    },
}
#: Deeper than the bound, and a number no model has.
HOSTILE_CONFIG = b'{"num_hidden_layers": 100000000000000000000, "x": ' + b"[" * 200 + b"]" * 200 + b"}"


@pytest.fixture(scope="module")
def hub() -> Iterator[Hub]:
    repos = [
        Repo(
            QWEN,
            {
                "config.json": json.dumps(QWEN_CONFIG).encode(),
                "model-00001-of-00002.safetensors": generated(MiB, "q1"),
                "model-00002-of-00002.safetensors": generated(MiB // 2, "q2"),
                "tokenizer.json": b'{"version": "1.0"}',
            },
        ),
        Repo(VLM, {"config.json": json.dumps(VLM_CONFIG).encode(), "model.safetensors": generated(MiB, "v")}),
        Repo(HOSTILE, {"config.json": HOSTILE_CONFIG, "pytorch_model.bin": generated(MiB, "h")}),
    ]
    with Hub(repos) as served:
        yield served


def _download(hub: Hub, root: Path, repo: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*DOWNLOAD, "--root", str(root), "--repo", repo, "--endpoint", hub.url],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
        check=False,
    )


def _status_from_log(log: str) -> ModelCacheStatus:
    """The ModelCache status the planner derives from the download pod's log, Job succeeded."""
    spec = ModelCacheSpec.model_validate(
        {"source": {"huggingFace": {"repo": QWEN}}, "storage": {"claimName": "models"}}
    )
    base: dict[str, Any] = {
        "name": "m",
        "namespace": "ns",
        "uid": "u",
        "generation": 1,
        "spec": spec,
        "status": ModelCacheStatus(),
        "now": dt.datetime(2026, 12, 6, tzinfo=dt.UTC),
        "has_finalizer": True,
        "claim": ObservedClaim(name="models", phase="Bound", access_modes=("ReadWriteMany",)),
    }
    name = job_name(CacheObservation(**base))
    event = parse_log_tail(log)
    pod = ObservedDownloadPod(name="p", phase="Succeeded", exit_code=0, last_event=event)
    job = ObservedJob(name=name, uid="j", succeeded=True)
    return plan(CacheObservation(**base, jobs=(job,), pods=(pod,))).status


@pytest.mark.parametrize(
    ("repo", "shape"),
    [
        (
            QWEN,
            {
                "numHiddenLayers": 36,
                "numKeyValueHeads": 8,
                "headDim": 128,
                "dtype": "bfloat16",
                "dtypeBytes": 2,
                "maxPositionEmbeddings": 40960,
                "weightsBytes": MiB + MiB // 2,  # the two shards, not the tokenizer
            },
        ),
        (
            VLM,
            {
                "numHiddenLayers": 34,
                "numKeyValueHeads": 4,
                "headDim": 256,
                "dtype": "bfloat16",
                "dtypeBytes": 2,
                "maxPositionEmbeddings": 131072,
                "weightsBytes": MiB,
            },
        ),
        (HOSTILE, {"weightsBytes": MiB}),  # config.json too deep: every fact unknown
    ],
)
def test_the_download_reports_the_shape_and_the_planner_stores_it(
    hub: Hub, tmp_path: Path, repo: str, shape: dict[str, Any]
) -> None:
    done = _download(hub, tmp_path / "cache", repo)
    assert done.returncode == 0, done.stderr
    last = [line for line in done.stdout.splitlines() if line.startswith('{"event":')][-1]
    assert json.loads(last)["event"] == "result"
    status = _status_from_log(done.stdout)
    assert status.phase == "Ready"
    assert status.model_shape is not None
    assert status.model_shape.to_wire() == shape
