"""The children of a ModelCache: the created claim and the download Job (``render/modelcache.py``)."""

from __future__ import annotations

import json
from typing import Any

from sparkrun_operator.api.modelcache import ModelCacheSpec
from sparkrun_operator.render import keys
from sparkrun_operator.render.modelcache import (
    DEFAULT_TOOLS_IMAGE,
    CacheOwner,
    DownloadOptions,
    job_name,
    render_claim,
    render_job,
)

OWNER = CacheOwner(name="qwen", namespace="models", uid="uid-1")


def _spec(**over: Any) -> ModelCacheSpec:
    doc: dict[str, Any] = {
        "source": {"huggingFace": {"repo": "Qwen/Qwen3-8B", "revision": "v1", "endpoint": "http://hub:1"}},
        "storage": {"create": {"size": "10Gi", "storageClassName": "fast"}},
    }
    doc.update(over)
    return ModelCacheSpec.model_validate(doc)


def test_the_claim_is_owned_and_sized() -> None:
    spec = _spec()
    assert spec.storage.create is not None
    claim = render_claim(OWNER, spec.storage.create)
    assert claim["metadata"]["name"] == "qwen"
    assert claim["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    assert claim["metadata"]["labels"][keys.LABEL_MODEL_CACHE] == "qwen"
    assert claim["spec"] == {
        "accessModes": ["ReadWriteMany"],
        "resources": {"requests": {"storage": "10Gi"}},
        "storageClassName": "fast",
    }


def test_the_download_job() -> None:
    job = render_job(OWNER, key="abcd1234", spec=_spec(verify="sha256"), options=DownloadOptions())
    assert job["metadata"]["name"] == "qwen-download-abcd1234"
    assert job["metadata"]["ownerReferences"][0]["kind"] == "ModelCache"
    spec = job["spec"]
    assert spec["backoffLimit"] == 3
    assert spec["activeDeadlineSeconds"] == 6 * 3600
    assert spec["podFailurePolicy"]["rules"][0]["onExitCodes"]["values"] == [2, 3, 4, 5, 6, 9, 10]
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    [container] = pod["containers"]
    assert container["image"] == DEFAULT_TOOLS_IMAGE
    assert DEFAULT_TOOLS_IMAGE.startswith("ghcr.io/sparkrun/sparkrun-tools:")
    assert container["command"] == ["python"]
    args = container["args"]
    assert args[:3] == ["-m", "sparkrun_operator.runtime.download", "download"]
    flags = dict(zip(args[3::2], args[4::2], strict=False))
    assert flags["--root"] == keys.CACHE_MOUNT_PATH
    assert flags["--repo"] == "Qwen/Qwen3-8B"
    assert flags["--revision"] == "v1"
    assert flags["--verify"] == "sha256"
    assert flags["--endpoint"] == "http://hub:1"
    assert "--token-file" not in args
    assert pod["volumes"] == [{"name": "model-cache", "persistentVolumeClaim": {"claimName": "qwen"}}]
    assert container["volumeMounts"] == [{"name": "model-cache", "mountPath": keys.CACHE_MOUNT_PATH}]


def test_the_token_is_a_mounted_file_never_env_or_args() -> None:
    spec = _spec(
        source={"huggingFace": {"repo": "org/gated", "tokenSecretRef": {"name": "hf", "key": "tok"}}},
        storage={"claimName": "shared", "path": "/models/org"},
    )
    job = render_job(OWNER, key="k", spec=spec, options=DownloadOptions(mount_path="/run/c", image="t:1"))
    pod = job["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert {
        "name": "hf-token",
        "secret": {"secretName": "hf", "items": [{"key": "tok", "path": "token"}], "defaultMode": 0o400},
    } in pod["volumes"]
    assert {"name": "hf-token", "mountPath": keys.HF_TOKEN_DIR, "readOnly": True} in container["volumeMounts"]
    assert {"name": "model-cache", "mountPath": "/run/c", "subPath": "models/org"} in container[
        "volumeMounts"
    ]
    assert container["args"][container["args"].index("--token-file") + 1] == f"{keys.HF_TOKEN_DIR}/token"
    assert "secretKeyRef" not in json.dumps(container.get("env"))
    assert pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == "shared"


def test_job_names_fit() -> None:
    assert len(job_name("x" * 63, "abcd1234")) <= 63
    assert job_name("x" * 63, "abcd1234").endswith("-download-abcd1234")
    assert job_name("x" * 63, "k") != job_name("x" * 62 + "y", "k")
