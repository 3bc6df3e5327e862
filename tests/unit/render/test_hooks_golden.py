"""Golden file of a trusted recipe's hooks and mods in a two-node JobSet and its post_commands Job
(``render/hooks.py``, ``render/hookjob.py``). ``UPDATE_GOLDEN=1`` rewrites it after an intended
change; review the diff: it is exactly what changes in users' engine pods."""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from sparkrun_operator.api.workload import InferenceWorkloadSpec
from sparkrun_operator.recipe.resolve import resolve
from sparkrun_operator.render import hookjob, hooks
from sparkrun_operator.render.workload import Owner, ServingInputs, render_jobset

GOLDEN = Path(__file__).resolve().parent / "golden_hooks" / "two-nodes-hooks.yaml"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"
PLAN = hooks.HookPlan(
    mods=(
        hooks.ModSource(
            name="mods/fix-chat-template",
            config_map="official-mod-fix-chat-template",
            digest="0123456789abcdef",
            files=(
                hooks.ModFile(key="f0", path="run.sh", mode=0o755),
                hooks.ModFile(key="f1", path="templates/chat.jinja"),
            ),
        ),
    ),
    pre_exec=(
        hooks.HookStep(command="pip list | grep -i vllm"),
        hooks.HookStep(command="nvidia-smi", timeout_s=60),
    ),
    post_exec=(hooks.HookStep(command="curl -sf http://127.0.0.1:8000/v1/models"),),
    env=(("SPARKRUN_MODEL", "Qwen/Qwen3-0.6B"), ("SPARKRUN_NUM_NODES", "2")),
)


def test_two_nodes_with_hooks_and_mods() -> None:
    spec = InferenceWorkloadSpec.model_validate(
        {
            "model": {"name": "Qwen/Qwen3-0.6B"},
            "topology": {"nodes": 2, "gpusPerNode": 1, "tensorParallel": 1, "pipelineParallel": 2},
        }
    )
    effective = resolve(workload=spec, recipe=None).spec
    assert effective is not None
    owner = Owner(name="chat", uid="6f0c2a3e-0000-4000-8000-000000000001")
    inputs = ServingInputs(spec=effective, scheduling=spec.scheduling, hooks=PLAN)
    docs = [
        render_jobset(
            namespace="serving", workload="chat", inputs=inputs, replica=0, suspend=False, owner=owner
        ),
        hookjob.render_post_commands_job(
            namespace="serving",
            workload="chat",
            revision=inputs.revision(),
            commands=[
                hooks.HookStep(
                    command="curl -sf {base_url}/models".replace(
                        "{base_url}", "http://chat.serving.svc:8000/v1"
                    )
                )
            ],
            env=PLAN.env,
            image="ghcr.io/sparkrun/sparkrun-tools:0.0.0",
            owner=owner,
        ),
    ]
    text = yaml.safe_dump_all(docs, sort_keys=False, width=1000)
    if UPDATE:
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()
