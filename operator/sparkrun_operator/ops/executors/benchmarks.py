"""``benchmarks.run`` / ``benchmarks.resume``: daemon benchmarks are InferenceBenchmarks in the API
namespace (``docs/benchmarks.md``).

``benchmarks.run`` "launches or reuses inference": it creates (or adopts) the InferenceWorkload of
``recipe`` exactly as ``workloads.run`` does (``cluster``, ``hosts``, ``overrides``, ``solo``;
``skip_run``: only an existing one), waits for Ready, creates an ``InferenceBenchmark`` against
it and waits for it to finish; then it stops (deletes) the workload unless ``no_stop`` or the
workload was already there. The benchmark id is the InferenceBenchmark's name (``bench-<hex>``),
separate from the daemon job id; ``resume`` (or ``benchmarks.resume``) continues a Failed one at
its first unfinished scenario.

Arguments: ``framework`` (default from ``category``: performance -> llama-benchy, tools ->
tool-eval-bench), ``profile`` and ``bench_args`` map onto the spec; llama-benchy's ``depth`` x
``concurrency`` lists become one scenario each (``d<depth>-c<concurrency>``, sparkrun's task
list); ``bench_args.tokenizer`` becomes ``spec.tokenizer``; ``timeout`` becomes
``timeoutSeconds``. An unknown framework, category or profile, or a bench argument the runner
owns, is ``Invalid`` (422) naming the known ones. Host-only arguments (``output_file``,
``export_files``, ``api_key_env``, ``integrations``, docker/rootful/trust/sync_tuning, ...) are
ignored with a ``warning`` event, as ``workloads.run`` answers them. Cancelling the daemon job
deletes an unfinished benchmark (its Job and pod go with it).

Resumable (ADR 0025, ``ops/catalog.py`` RESUMABLE): the benchmark's name is derived from the
daemon job id and both the benchmark and a workload this job launched carry the job's id
(annotation ``sparkrun.dev/daemonjob``), so a new executor running the job again after the
operator stopped adopts what the first run made: a finished benchmark is answered without a new
launch, a running one is waited for, and the workload the first run launched is still stopped
at the end. An operator that stops (not a cancelled job) leaves both for the next executor.
Every delete carries the UID of the object read (a same-named replacement is never deleted).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections.abc import Mapping
from typing import Any, Final

from sparkrun_operator.api.benchmark import FRAMEWORKS, LLAMA_BENCHY, TOOL_EVAL_BENCH, InferenceBenchmarkSpec
from sparkrun_operator.api.meta import API_VERSION
from sparkrun_operator.api.resources import INFERENCE_BENCHMARK
from sparkrun_operator.k8s import errors as k8s_errors
from sparkrun_operator.k8s.daemonjobs import DAEMON_JOBS
from sparkrun_operator.k8s.resources import resource_of
from sparkrun_operator.ops import benchprofiles, kube
from sparkrun_operator.ops.errors import Conflict, DaemonError, Invalid, NotFound
from sparkrun_operator.ops.executors.diagnostics import collect_bundle
from sparkrun_operator.ops.executors.workloads.launch import _run_result, launch
from sparkrun_operator.ops.executors.workloads.lifecycle import wait_for
from sparkrun_operator.ops.executors.workloads.request import parse_overrides, warn_ignored, workload_name
from sparkrun_operator.ops.invocation import ArgumentCheck, Executor, OperationContext
from sparkrun_operator.ops.settings import Settings
from sparkrun_operator.plan import benchprofile
from sparkrun_operator.render import keys
from sparkrun_operator.runtime import benchframeworks

BENCHMARKS = resource_of(INFERENCE_BENCHMARK)
CATEGORIES: Final = {"performance": LLAMA_BENCHY, "tools": TOOL_EVAL_BENCH}
_HOST_ONLY: Final = (
    "output_file",
    "export_files",
    "api_key_env",
    "integrations",
    "rootful",
    "trust",
    "sync_tuning",
    "extra_docker_opts",
    "exit_on_first_fail",
)
_LISTS: Final = ("depth", "concurrency")


def _framework(args: Mapping[str, Any]) -> tuple[str, str]:
    category = args.get("category")
    if category is not None and category not in CATEGORIES:
        raise Invalid(f"unknown benchmark category {category!r}; known: {', '.join(CATEGORIES)}")
    framework = str(args.get("framework") or CATEGORIES.get(str(category or "performance")))
    if framework not in FRAMEWORKS:
        raise Invalid(f"unknown benchmark framework {framework!r}; known: {', '.join(FRAMEWORKS)}")
    return framework, str(category or ("tools" if framework == TOOL_EVAL_BENCH else "performance"))


def _as_list(value: Any) -> list[Any]:
    if isinstance(value, list):
        return value
    if isinstance(value, str) and "," in value:
        return [int(v) if v.strip().isdigit() else v.strip() for v in value.split(",")]
    return [value]


def spec_for(
    args: Mapping[str, Any], workload: str, settings: Any, profile_args: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The InferenceBenchmark spec (wire form) of a ``benchmarks.run`` request; ``profile_args``:
    a registry profile's arguments (``@<registry>/<name>``, read by :func:`_registry_profile`;
    unknown at submission, where only the request's own arguments are checked)."""
    framework, _ = _framework(args)
    bench_args = dict(args.get("bench_args") or {})
    profile = args.get("profile")
    builtin = None if benchprofile.scoped(profile) else profile
    layered = {**(profile_args or {}), **bench_args}
    try:
        base = benchframeworks.merged_args(framework, profile=builtin, bench_args=layered, scenario={})
    except benchframeworks.FrameworkError as error:
        raise Invalid(str(error)) from error
    tokenizer = bench_args.pop("tokenizer", None)
    scenarios: list[dict[str, Any]] = []
    if framework == LLAMA_BENCHY:
        depths = _as_list(bench_args.pop("depth", base.get("depth", [0])))
        concurrencies = _as_list(bench_args.pop("concurrency", base.get("concurrency", [1])))
        for d in depths:
            for c in concurrencies:
                scenarios.append(
                    {"name": f"d{int(d)}-c{int(c)}", "concurrency": int(c), "args": {"depth": [d]}}
                )
    else:
        scenarios.append({"name": "tools"})
    spec: dict[str, Any] = {
        "target": {"workloadRef": {"name": workload}, "via": settings.benchmark_via},
        "framework": framework,
        "benchArgs": bench_args,
        "scenarios": scenarios,
    }
    if profile:
        spec["profile"] = profile
    if tokenizer:
        spec["tokenizer"] = str(tokenizer)
    if settings.benchmark_hf_endpoint:
        spec["hfEndpoint"] = settings.benchmark_hf_endpoint
    if args.get("timeout"):
        spec["timeoutSeconds"] = int(args["timeout"])
    if settings.benchmark_scheduling:
        spec["runner"] = dict(settings.benchmark_scheduling)
    try:
        InferenceBenchmarkSpec.model_validate(spec)
    except ValueError as error:
        raise Invalid(f"the request does not make a valid InferenceBenchmark: {error}") from error
    return spec


def benchmark_id(ctx: OperationContext, workload: str) -> str:
    seed = f"{ctx.namespace}/{workload}/{ctx.job_id or time.time()}"
    return "bench-" + hashlib.sha256(seed.encode()).hexdigest()[:12]


async def _wait(ctx: OperationContext, name: str, limit: float, attempt: int = 0) -> dict[str, Any]:
    """Poll the benchmark until it finished (this attempt); report scenario progress."""
    deadline = time.monotonic() + limit
    seen: set[str] = set()
    while True:
        found = await ctx.rest.get(BENCHMARKS, name, ctx.namespace)
        if found is None:
            raise NotFound(f"InferenceBenchmark {name} disappeared")
        status = found.get("status") or {}
        for result in status.get("results") or ():
            if result["name"] not in seen:
                seen.add(result["name"])
                await ctx.feedback(
                    f"scenario {result['name']} measured", stage="benchmark", activity="result"
                )
        if int(status.get("attempt") or 0) >= attempt and status.get("phase") in ("Succeeded", "Failed"):
            return found
        if time.monotonic() > deadline:
            raise DaemonError(
                f"InferenceBenchmark {name} did not finish in {limit:.0f}s", type_name="TimeoutError"
            )
        await asyncio.sleep(ctx.settings.poll_interval)


def _result(
    ctx: OperationContext,
    bench: Mapping[str, Any],
    run_result: dict[str, Any] | None,
    *,
    resumed: bool,
    already: bool,
) -> dict[str, Any]:
    meta, spec, status = bench.get("metadata") or {}, bench.get("spec") or {}, bench.get("status") or {}
    framework = str(spec.get("framework") or LLAMA_BENCHY)
    results = {r["name"]: r for r in status.get("results") or ()}
    outputs = {
        name: f"configmap/{r['rawOutput']['configMap']}#{r['rawOutput']['key']}"
        for name, r in results.items()
        if r.get("rawOutput")
    }
    failed = next((c for c in status.get("conditions") or () if c.get("type") == "Failed"), None)
    prov = status.get("provenance") or {}
    return {
        "success": status.get("phase") == "Succeeded",
        "benchmark_id": str(meta.get("name")),
        "category": "tools" if framework == TOOL_EVAL_BENCH else "performance",
        "framework": framework,
        "profile": spec.get("profile"),
        "results": results,
        "outputs": outputs,
        "run_result": run_result,
        "workload_id": (run_result or {}).get("workload_id", ""),
        "host_list": (run_result or {}).get("host_list", []),
        "container_image": prov.get("engineImage") or "",
        "container_image_sha": None,
        "container_image_sha_pinned": False,
        "container_image_longterm_ref": None,
        "container_image_longterm_pinned": False,
        "metadata": {
            "namespace": meta.get("namespace", ctx.namespace),
            "name": meta.get("name"),
            "kind": INFERENCE_BENCHMARK.kind,
            "phase": status.get("phase"),
            "reason": failed.get("reason") if failed and failed.get("status") == "True" else None,
            "message": failed.get("message") if failed and failed.get("status") == "True" else None,
            "provenance": prov,
            "comparison": status.get("comparison"),
            "attempt": status.get("attempt", 0),
        },
        "state_dir": None,
        "measured_at": status.get("startedAt"),
        "completed_at": status.get("finishedAt"),
        "resumed": resumed,
        "already_complete": already,
        "integration_results": {},
        "integration_errors": {},
    }


async def _warn(ctx: OperationContext, args: Mapping[str, Any]) -> None:
    await warn_ignored(ctx, args)
    ignored = [key for key in _HOST_ONLY if args.get(key) not in (None, False, {}, [])]
    if ignored:
        await ctx.emit(
            "warning",
            {
                "message": "Ignored on Kubernetes (host benchmark settings): " + ", ".join(ignored),
                "ignored": ignored,
            },
        )


def _made_by_this_job(ctx: OperationContext, obj: Mapping[str, Any] | None) -> bool:
    """``obj`` was created by this daemon job (an earlier run of it, before the operator stopped)."""
    annotations = ((obj or {}).get("metadata") or {}).get("annotations") or {}
    return bool(ctx.job_id) and annotations.get(keys.LABEL_DAEMON_JOB) == ctx.job_id


def _finished(bench: Mapping[str, Any]) -> bool:
    return (bench.get("status") or {}).get("phase") in ("Succeeded", "Failed")


async def _ends_for_good(ctx: OperationContext) -> bool:
    """Whether a cancelled run ends for good (cleanup due): its job was cancelled or is gone, or
    it is no daemon job. ``False`` when the operator is stopping: the job runs again elsewhere."""
    if not ctx.job_id:
        return True
    try:
        job = await ctx.rest.get(DAEMON_JOBS, ctx.job_id, ctx.namespace)
    except Exception:  # NB: unknown (the connection may be closing): the next executor adopts
        return False
    return job is None or bool((job.get("spec") or {}).get("cancel"))


async def _delete(ctx: OperationContext, resource: Any, obj: Mapping[str, Any], what: str) -> bool:
    """Delete ``obj`` if it is still the object read (UID precondition); ``False`` when it was
    gone or replaced by a same-named object (left alone)."""
    meta = obj.get("metadata") or {}
    try:
        return await ctx.rest.delete(
            resource, meta["name"], ctx.namespace, uid=meta.get("uid"), propagation="Background"
        )
    except k8s_errors.KubeConflict:
        await ctx.emit(
            "warning", {"message": f"{what} {meta['name']} was replaced since it was read; left alone"}
        )
        return False


async def _measure(ctx: OperationContext, name: str, body: dict[str, Any], limit: float) -> dict[str, Any]:
    """Create (or adopt this job's) benchmark and wait; a cancelled job deletes an unfinished one."""
    try:
        created = await ctx.rest.create(BENCHMARKS, body, ctx.namespace)
        await ctx.feedback(f"Created InferenceBenchmark {name}", stage="benchmark", activity="create")
    except k8s_errors.KubeAlreadyExists:
        found = await ctx.rest.get(BENCHMARKS, name, ctx.namespace)
        if found is None or not _made_by_this_job(ctx, found):
            raise Conflict(f"InferenceBenchmark {name} exists and was not created by this job") from None
        created = found
        await ctx.feedback(f"InferenceBenchmark {name} exists (this job's); adopting it", stage="benchmark")
    try:
        return await _wait(ctx, name, limit)
    except BaseException as error:
        if not isinstance(error, asyncio.CancelledError) or await _ends_for_good(ctx):
            with contextlib.suppress(k8s_errors.KubeError):
                await _delete(ctx, BENCHMARKS, created, "InferenceBenchmark")
        raise


def _launch_args(args: Mapping[str, Any]) -> dict[str, Any]:
    return {k: args[k] for k in ("recipe", "cluster", "hosts", "overrides", "solo") if k in args}


def check_run(args: Mapping[str, Any], settings: Settings) -> None:
    """What ``benchmarks.run`` refuses before it launches anything: the framework, category,
    profile and bench arguments (the InferenceBenchmark they make), or the benchmark to resume."""
    if args.get("resume"):
        kube.check_name(str(args["resume"]), "resume")
        return
    parse_overrides(args)
    if benchprofile.scoped(args.get("profile")) and not (args.get("framework") or args.get("category")):
        return  # NB: the framework is the registry profile's, read when the job runs
    spec_for(args, workload_name(_launch_args(args)), settings)


def check_resume(args: Mapping[str, Any], _settings: Settings | None = None) -> None:
    kube.check_name(str(args.get("benchmark_id") or ""), "benchmark_id")


async def _registry_profile(
    ctx: OperationContext, args: dict[str, Any]
) -> tuple[dict[str, Any], Mapping[str, Any] | None]:
    """A registry profile (``@<registry>/<name>``) read from its ConfigMap: the request with the
    profile's framework (when it names none) and timeout (when it sets none), as sparkrun takes
    them, and the profile's arguments. ``Invalid`` naming what is wrong."""
    if benchprofile.scoped(args.get("profile")) is None:
        return args, None
    named = args.get("framework") or (CATEGORIES.get(str(args["category"])) if args.get("category") else None)
    try:
        found = await benchprofiles.resolve(ctx.rest, str(args["profile"]), named)
    except benchprofile.ProfileError as error:
        raise Invalid(str(error), attrs={"reason": error.reason}) from None
    out = dict(args)
    if not named:
        out["framework"] = found.framework
    if not out.get("timeout") and found.timeout:
        out["timeout"] = found.timeout
    await ctx.feedback(f"Benchmark profile {found.reference} from {found.source}", stage="benchmark")
    return out, found.args


async def run(ctx: OperationContext, args: dict[str, Any]) -> Any:
    await _warn(ctx, args)
    if args.get("resume"):
        return await resume(ctx, {"benchmark_id": args["resume"], "timeout": args.get("timeout")})
    args, profile_args = await _registry_profile(ctx, args)
    launch_args = _launch_args(args)
    target = workload_name(launch_args)
    spec = spec_for(args, target, ctx.settings, profile_args)
    name = benchmark_id(ctx, target)
    body: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": INFERENCE_BENCHMARK.kind,
        "metadata": {
            "name": name,
            "namespace": ctx.namespace,
            "annotations": {keys.LABEL_DAEMON_JOB: ctx.job_id or ""},
        },
        "spec": spec,
    }
    if args.get("dry_run"):
        preview = {"metadata": {"name": name, "namespace": ctx.namespace}, "spec": spec, "status": {}}
        return _result(ctx, preview, None, resumed=False, already=False)
    earlier = await ctx.rest.get(BENCHMARKS, name, ctx.namespace)
    if earlier is not None and _made_by_this_job(ctx, earlier) and _finished(earlier):
        # an earlier run of this job measured it before the operator stopped: answer it, and
        # stop the workload that run launched (when it is still there)
        await _stop_launched(ctx, target, args)
        return _answer(ctx, earlier, None)
    if args.get("skip_run"):
        workload = await ctx.rest.get(kube.WORKLOADS, target, ctx.namespace)
        if workload is None:
            raise NotFound(f"skip_run: no InferenceWorkload {target} serves recipe {args['recipe']}")
        already = True
    else:
        workload, recipe_obj, already, hosts = await launch(ctx, launch_args, confirm=False)
        # an earlier run of this job launched it: this run stops it as that one would have
        already = already and not _made_by_this_job(ctx, workload)
    target = workload["metadata"]["name"]
    body["spec"]["target"]["workloadRef"]["name"] = target
    timeout = float(args.get("timeout") or spec.get("timeoutSeconds") or 3600)
    try:
        ready = await wait_for(ctx, target, until="ready", limit=ctx.settings.ready_timeout)
        run_result = None
        if not args.get("skip_run"):
            run_result = _run_result(
                ready, recipe_obj=recipe_obj, hosts=hosts, dry_run=False, already=already, ctx=ctx
            )
        done = await _measure(ctx, name, body, timeout + ctx.settings.ready_timeout)
    except asyncio.CancelledError:
        if not already and not await _ends_for_good(ctx):
            already = True  # NB: the operator is stopping: the next executor adopts the workload
        raise
    finally:
        if args.get("collect_diagnostics"):
            await collect_bundle(ctx, {"workload_id": target})
        if not (already or args.get("no_stop")):
            with contextlib.suppress(k8s_errors.KubeError):
                if await _delete(ctx, kube.WORKLOADS, workload, "InferenceWorkload"):
                    await ctx.feedback(f"Stopped InferenceWorkload {target}", stage="stop", activity="delete")
    return _answer(ctx, done, run_result)


async def _stop_launched(ctx: OperationContext, target: str, args: Mapping[str, Any]) -> None:
    """Stop the workload an earlier run of this job launched, unless asked to keep it."""
    if args.get("no_stop") or args.get("skip_run"):
        return
    workload = await ctx.rest.get(kube.WORKLOADS, target, ctx.namespace)
    if workload is not None and _made_by_this_job(ctx, workload):
        with contextlib.suppress(k8s_errors.KubeError):
            if await _delete(ctx, kube.WORKLOADS, workload, "InferenceWorkload"):
                await ctx.feedback(f"Stopped InferenceWorkload {target}", stage="stop", activity="delete")


def _answer(ctx: OperationContext, done: Mapping[str, Any], run_result: dict[str, Any] | None) -> Any:
    out = _result(ctx, done, run_result, resumed=False, already=False)
    if not out["success"]:
        raise DaemonError(
            f"benchmark {out['benchmark_id']} failed: "
            f"{out['metadata']['reason']}: {out['metadata']['message']}",
            type_name="BenchmarkError",
        )
    return out


async def resume(ctx: OperationContext, args: dict[str, Any]) -> Any:
    await _warn(ctx, args)
    name = kube.check_name(str(args["benchmark_id"]), "benchmark_id")
    bench = await ctx.rest.get(BENCHMARKS, name, ctx.namespace)
    if bench is None:
        raise NotFound(f"no benchmark {name} (InferenceBenchmark) in {ctx.namespace}")
    status = bench.get("status") or {}
    if status.get("phase") == "Succeeded":
        return _result(ctx, bench, None, resumed=False, already=True)
    if args.get("dry_run"):
        return _result(ctx, bench, None, resumed=False, already=False)
    attempt = int(status.get("attempt") or 0)
    token = ctx.job_id or str(time.time())
    annotations = (bench.get("metadata") or {}).get("annotations") or {}
    asked = annotations.get(keys.ANNOTATION_BENCHMARK_RESUME) == token
    if asked and status.get("resumeToken") != token:
        # NB: a second run of this job (ADR 0025): the first asked, the controller has not acted yet
        attempt += 1
    elif status.get("phase") == "Failed" and not asked:
        await ctx.rest.merge_patch(
            BENCHMARKS,
            name,
            {"metadata": {"annotations": {keys.ANNOTATION_BENCHMARK_RESUME: token}}},
            ctx.namespace,
        )
        await ctx.feedback(f"Resuming InferenceBenchmark {name}", stage="benchmark", activity="resume")
        attempt += 1
    spec = bench.get("spec") or {}
    done = await _wait(ctx, name, float(args.get("timeout") or spec.get("timeoutSeconds") or 3600), attempt)
    out = _result(ctx, done, None, resumed=True, already=False)
    if not out["success"]:
        raise DaemonError(
            f"benchmark {name} failed: {out['metadata']['reason']}: {out['metadata']['message']}",
            type_name="BenchmarkError",
        )
    return out


EXECUTORS: dict[str, Executor] = {"benchmarks.run": run, "benchmarks.resume": resume}
CHECKS: dict[str, ArgumentCheck] = {"benchmarks.run": check_run, "benchmarks.resume": check_resume}
