"""``workloads.plan`` and ``workloads.materialize``: what a launch would create, nothing created."""

from __future__ import annotations

from typing import Any

from sparkrun_operator.ops.executors.workloads import placement
from sparkrun_operator.ops.executors.workloads.request import plan_request
from sparkrun_operator.ops.invocation import OperationContext


async def plan(ctx: OperationContext, args: dict[str, Any]) -> Any:
    planned = await plan_request(ctx, args)
    effective = planned["effective"]
    placed, assessment = await placement.assess(ctx, effective, planned["hosts"], planned["cluster"])
    return {
        "candidate_hosts": planned["hosts"],
        "host_list": planned["hosts"][: effective.topology.nodes],
        "is_solo": effective.topology.nodes == 1,
        "placement": placed,
        "notes": [
            f"InferenceWorkload {planned['name']} in namespace {ctx.namespace}; the scheduler picks "
            f"{effective.topology.nodes} node(s) with {effective.topology.gpus_per_node} GPU(s) each",
            "The final workload id's placement token derives from the object's uid, known after creation",
            placement.NOTE,
            *planned["issues"],
        ],
        "scheduler_selector": planned["cluster"],
        "scheduler_defaulted": planned["cluster"] is None,
        "intent_id": planned["intent"],
        "placement_token": planned["token"],
        "workload_id": planned["workload_id"],
        "host_hardware": {},
        "override_resolution": dict(args.get("overrides") or {}),
        "offline": None,
        "hardware_assessment": assessment,
        "hardware_reported": False,
        "recipe_fingerprint": effective.recipe_revision or "",
        "recipe": args["recipe"],
        "runtime": "vllm",
        "cluster": planned["cluster"],
    }


async def materialize(ctx: OperationContext, args: dict[str, Any]) -> Any:
    from sparkrun_operator.render.workload import ServingInputs, render_jobset

    planned = await plan_request(ctx, args)
    effective = planned["effective"]
    inputs = ServingInputs(spec=effective)
    jobset = render_jobset(
        namespace=ctx.namespace, workload=planned["name"], inputs=inputs, replica=0, suspend=False
    )
    units: list[dict[str, Any]] = []
    workers: list[dict[str, Any]] = []
    for rjob in jobset["spec"]["replicatedJobs"]:
        template = rjob["template"]["spec"]["template"]["spec"]
        container = next(c for c in template["containers"] if c["name"] == "vllm")
        count = int(rjob["template"]["spec"].get("completions") or 1) * int(rjob.get("replicas", 1))
        for index in range(count):
            unit_id = f"{rjob['name']}-{index}"
            units.append(
                {
                    "id": unit_id,
                    "index": len(units),
                    "host": "",
                    "devices": [f"nvidia.com/gpu:{effective.topology.gpus_per_node}"],
                    "image": container["image"],
                    "image_digest": "",
                    "command": [*container.get("command", []), *container.get("args", [])],
                    "mounts": [
                        {
                            "source": v.get("name", ""),
                            "target": v.get("mountPath", ""),
                            "read_only": bool(v.get("readOnly")),
                        }
                        for v in container.get("volumeMounts", [])
                    ],
                }
            )
            workers.append(
                {
                    "id": unit_id,
                    "unit": unit_id,
                    "service": planned["name"],
                    "process_slot": 0,
                    "device_slots": list(range(effective.topology.gpus_per_node)),
                }
            )
    return {
        "format": 1,
        "kind": "kubernetes.jobset",
        "workload_id": planned["workload_id"],
        "engine": "vllm",
        "model": effective.model,
        "model_revision": effective.model_revision or "",
        "world_size": effective.topology.tensor_parallel * effective.topology.pipeline_parallel,
        "tensor_parallel": effective.topology.tensor_parallel,
        "node_count": effective.topology.nodes,
        "cache_dir": "",
        "units": units,
        "execution": {
            "workers": workers,
            "groups": [
                {
                    "id": jobset["metadata"]["name"],
                    "kind": "jobset",
                    "service": planned["name"],
                    "members": [u["id"] for u in units],
                }
            ],
            "services": [{"id": planned["name"], "role": "leader", "workers": [w["id"] for w in workers]}],
            "adapter": {"schema": "jobset.x-k8s.io/v1alpha2", "digest": "", "payload": jobset},
        },
    }
