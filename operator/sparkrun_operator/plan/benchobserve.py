"""Raw objects -> the InferenceBenchmark planner's observed records (pure)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sparkrun_operator.api.benchmark import (
    BenchmarkTarget,
    InferenceBenchmarkSpec,
    InferenceBenchmarkStatus,
    Provenance,
)
from sparkrun_operator.api.modelcache import HuggingFaceSource
from sparkrun_operator.api.recipe import RecipeSpec
from sparkrun_operator.api.workload import InferenceWorkloadSpec
from sparkrun_operator.plan.benchcompare import PreviousRun
from sparkrun_operator.plan.benchmark import ObservedBenchJob, ObservedTarget
from sparkrun_operator.plan.logtail import last_event
from sparkrun_operator.plan.observe import cache_from, parse_time
from sparkrun_operator.recipe.resolve import EffectiveSpec, resolve
from sparkrun_operator.render import keys
from sparkrun_operator.render.benchmark import BenchCache
from sparkrun_operator.render.workload import endpoint_url

Obj = Mapping[str, Any]


def target_key(target: BenchmarkTarget) -> str:
    """What comparisons match on: ``workload/<name>`` or the URL."""
    if target.workload_ref is not None:
        return f"workload/{target.workload_ref.name}"
    return str(target.url)


def parse_log_tail(text: str) -> dict[str, Any] | None:
    """The runner's last ``result``/``error`` JSON line of a log tail."""
    return last_event(text, ("result", "error"))


def _ready(workload: Obj) -> tuple[bool, str, str]:
    for cond in (workload.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            ok = cond.get("status") == "True"
            return (
                ok,
                str(cond.get("reason") or ("Ready" if ok else "NotReady")),
                str(cond.get("message") or ""),
            )
    return False, "NotReady", "the workload reports no Ready condition yet"


def effective(workload: Obj, recipe: RecipeSpec | None) -> EffectiveSpec | None:
    """What the workload serves (its recipe resolved), or None when it does not resolve."""
    try:
        spec = InferenceWorkloadSpec.model_validate(workload.get("spec") or {})
    except ValueError:
        return None
    return resolve(workload=spec, recipe=recipe).spec


def provenance(workload: Obj, served: EffectiveSpec | None, gpu_product: str | None) -> Provenance:
    status = workload.get("status") or {}
    if served is None:
        return Provenance(workload_revision=status.get("revision"), gpu_product=gpu_product)
    return Provenance(
        workload_revision=status.get("revision"),
        engine_image=served.image,
        model=served.model,
        model_revision=served.model_revision,
        gpu_product=gpu_product,
        gpu_count=served.topology.nodes * served.topology.gpus_per_node,
    )


def _full_commit(value: str | None) -> bool:
    return value is not None and len(value) == 40 and all(c in "0123456789abcdef" for c in value)


def bench_cache(raw: Obj | None, name: str) -> BenchCache | None:
    """The ModelCache ``name`` the target serves from, when the runner can mount it: Ready, its
    revision resolved to a full commit, its repository a valid id, and its claim reachable from
    the runner's node (shareable, or pinned to a known node the runner is placed on; never a
    ReadWriteOncePod claim, which the engine's pod holds)."""
    if raw is None:
        return None
    cache = cache_from(raw, name=name)
    source = (((raw.get("spec") or {}).get("source") or {}).get("huggingFace")) or {}
    try:
        repo = HuggingFaceSource.model_validate(source).repo
    except ValueError:
        return None
    commit = cache.resolved_revision
    if not (cache.ready and cache.claim_name and _full_commit(commit)):
        return None
    if cache.single_node and cache.node_name is None:
        return None  # NB: a ReadWriteOnce claim on an unknown node: the runner could not attach it
    if "ReadWriteOncePod" in cache.access_modes:
        return None  # NB: the engine's pod holds it: a runner would wait, or keep the engine out
    assert commit is not None
    return BenchCache(
        name=name,
        repo=repo,
        claim_name=cache.claim_name,
        commit=commit,
        path=cache.path,
        node=cache.node_name,
    )


def cache_name(workload: Obj | None, recipe: RecipeSpec | None) -> str | None:
    """The ModelCache (of the workload's own namespace) the workload serves from, if any."""
    if workload is None:
        return None
    served = effective(workload, recipe)
    return served.cache_ref if served is not None else None


def target_from(
    spec: InferenceBenchmarkSpec,
    namespace: str,
    workload: Obj | None,
    *,
    gpu_product: str | None = None,
    gateway_url: str | None = None,
    recipe: RecipeSpec | None = None,
    cache: Obj | None = None,
) -> ObservedTarget:
    """The target: a URL is always ready; a workload is when its Ready condition is True."""
    target = spec.target
    key = target_key(target)
    if target.url is not None:
        return ObservedTarget(
            key=key,
            ready=True,
            base_url=target.url,
            model=target.model,
            model_id=target.model,
            provenance=Provenance(url=target.url, model=target.model),
        )
    name = target.workload_ref.name if target.workload_ref else ""
    if workload is None:
        return ObservedTarget(
            key=key,
            ready=False,
            reason="WorkloadNotFound",
            message=f"no InferenceWorkload {name} in {namespace}",
        )
    serving = effective(workload, recipe)
    served = target.model or (serving.served_name if serving else None)
    ok, reason, message = _ready(workload)
    url: str | None = None
    if target.via == "Service":
        url = endpoint_url(namespace=namespace, workload=name)
    elif target.via == "Endpoint":
        ready = [e for e in (workload.get("status") or {}).get("endpoints") or [] if e.get("ready")]
        url = str(ready[0]["url"]) if ready else None
        if ok and url is None:
            ok, reason, message = False, "NoReadyEndpoint", "status.endpoints has no Ready replica"
    elif gateway_url:
        url = gateway_url
    elif ok:
        ok, reason, message = False, "GatewayNotConfigured", "via: Gateway needs the operator's --gateway-url"
    prov = provenance(workload, serving, gpu_product)
    prov.url = url
    return ObservedTarget(
        key=key,
        ready=ok,
        reason=reason,
        message=message,
        base_url=url,
        model=served,
        model_id=serving.model if serving else None,
        provenance=prov,
        cache=bench_cache(cache, serving.cache_ref) if serving is not None and serving.cache_ref else None,
    )


def job_from(job: Obj, log_tail: str = "") -> ObservedBenchJob:
    meta = job.get("metadata") or {}
    labels = meta.get("labels") or {}
    status = job.get("status") or {}
    done = {str(c.get("type")): c for c in status.get("conditions") or [] if c.get("status") == "True"}
    failed = done.get("Failed")
    try:
        attempt = int(labels.get(keys.LABEL_BENCHMARK_ATTEMPT) or 0)
    except ValueError:
        attempt = -1
    return ObservedBenchJob(
        name=str(meta.get("name")),
        uid=str(meta.get("uid") or ""),
        scenario=str(labels.get(keys.LABEL_BENCHMARK_SCENARIO) or ""),
        attempt=attempt,
        succeeded="Complete" in done or int(status.get("succeeded") or 0) > 0,
        failed=failed is not None,
        reason=str(failed.get("reason") or "") if failed else "",
        message=str(failed.get("message") or "") if failed else "",
        last_event=parse_log_tail(log_tail) if log_tail else None,
    )


def previous_from(objs: Sequence[Obj]) -> tuple[PreviousRun, ...]:
    """The namespace's Succeeded benchmarks (the comparison's candidates)."""
    out = []
    for obj in objs:
        raw_status = obj.get("status") or {}
        if raw_status.get("phase") != "Succeeded":
            continue
        try:
            spec = InferenceBenchmarkSpec.model_validate(obj.get("spec") or {})
            status = InferenceBenchmarkStatus.model_validate(raw_status)
        except ValueError:
            continue
        out.append(
            PreviousRun(
                name=str((obj.get("metadata") or {}).get("name")),
                target=target_key(spec.target),
                framework=spec.framework,
                finished_at=status.finished_at or parse_time(raw_status.get("finishedAt")),
                results=tuple(status.results),
            )
        )
    return tuple(out)
