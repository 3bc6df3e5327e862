"""``sparkrun-k8s bench run|show|compare``: InferenceBenchmarks, load tests of a served model whose
results live in their status (docs/benchmarks.md).

  run       benchmark an InferenceWorkload of the namespace: creates an InferenceBenchmark
            whose spec is made by the same code as the daemon API's benchmarks.run
            (framework, profile, depth x concurrency scenarios named d<depth>-c<concurrency>,
            bench arguments), with your own kubeconfig rights. It prints the name; --wait
            follows it (scenario by scenario) and prints the results. Ctrl-C while waiting
            leaves the benchmark running and says how to cancel it.
  show      one benchmark: what it ran against (workload revision, model, engine, GPUs),
            each scenario's requests, errors, TTFT / ITL / end-to-end percentiles, output
            tokens/s and requests/s, and the operator's comparison with the previous run.
  compare   two or more benchmarks side by side, per scenario and figure: each one's value,
            its change in % against the first named (better, worse, or same within 0.5%),
            the best marked *. Differences in model, framework, GPU or engine are noted.

Unlike benchmarks.run, `bench run` launches no workload: name one that is serving (or will
be: the benchmark waits up to --target-ready-seconds for it).

Examples:
  sparkrun-k8s bench run qwen3 --profile quick --wait
  sparkrun-k8s bench run qwen3 --concurrency 1,8 --arg tg=64 --name qwen3-c1-c8
  sparkrun-k8s bench show qwen3-c1-c8
  sparkrun-k8s bench compare qwen3-before qwen3-after -o json

Exit codes: 0 done (run --wait: the benchmark Succeeded); 1 run --wait: it Failed; 2 usage (an
unknown framework or profile, a bench argument the runner owns); 3 the cluster cannot be
reached; 4 no such workload or benchmark; 5 refused (forbidden, invalid); 130 Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from sparkrun_operator.api.meta import API_VERSION
from sparkrun_operator.api.resources import INFERENCE_BENCHMARK
from sparkrun_operator.cli import benchview, common, complete
from sparkrun_operator.k8s.client import Kube
from sparkrun_operator.k8s.resources import resource_of
from sparkrun_operator.ops import rollout
from sparkrun_operator.ops.executors.benchmarks import spec_for
from sparkrun_operator.ops.settings import Settings

BENCHMARKS = resource_of(INFERENCE_BENCHMARK)
POLL_SECONDS = 1.0
_BENCHMARK_NAMES = complete.names_of(INFERENCE_BENCHMARK)
FINAL = frozenset({"Succeeded", "Failed"})
#: Bound of one ``--arg`` value (JSON or text).
MAX_ARG_CHARS = 4096


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "bench",
        help="benchmarks: run, show, compare",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    run = _verb(verbs, "run", "benchmark a workload (creates an InferenceBenchmark)", _run_bench)
    _named(run, "workload", "WORKLOAD", "the InferenceWorkload to measure", complete.workload_names)
    run.add_argument("--name", default=None, help="the benchmark's name (default: WORKLOAD-bench-<random>)")
    run.add_argument("--framework", choices=("llama-benchy", "tool-eval-bench"), default=None)
    run.add_argument("--category", choices=("performance", "tools"), default=None, help="picks the framework")
    run.add_argument(
        "--profile", default=None, help="quick, standard, long-context, tools-short, tools-full, @REG/NAME"
    )
    run.add_argument(
        "--concurrency", default=None, metavar="N[,N...]", help="llama-benchy: one scenario each"
    )
    run.add_argument("--depth", default=None, metavar="N[,N...]", help="llama-benchy: context depths")
    run.add_argument(
        "--arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        type=_bench_arg,
        help="a framework argument (its flag, _ for -); VALUE as JSON when it parses (64, [1,2], true)",
    )
    run.add_argument(
        "--tokenizer", default=None, help="llama-benchy's tokenizer: a Hub repo or a path in the cache"
    )
    run.add_argument(
        "--via", choices=("Service", "Endpoint", "Gateway"), default="Service", help="how to reach it"
    )
    run.add_argument("--hf-endpoint", default=None, metavar="URL", help="the Hub the tokenizer comes from")
    run.add_argument("--timeout", type=int, default=None, metavar="SECONDS", help="give up after this long")
    run.add_argument("--target-ready-seconds", type=int, default=None, metavar="SECONDS")
    run.add_argument(
        "--runner-node-selector", action="append", default=[], metavar="KEY=VALUE", help="where its pods run"
    )
    run.add_argument(
        "--runner-toleration",
        action="append",
        default=[],
        metavar="KEY[=VALUE]:EFFECT",
        help="a toleration of its pods (kubectl taint syntax)",
    )
    run.add_argument("--wait", action="store_true", help="follow it until it ends, then show the results")
    run.add_argument("--dry-run", action="store_true", help="print the InferenceBenchmark, create nothing")

    show = _verb(verbs, "show", "one benchmark's results and what it ran against", _show)
    _named(show, "name", "NAME", "the InferenceBenchmark", _BENCHMARK_NAMES)
    compare = _verb(verbs, "compare", "benchmarks side by side (changes against the first)", _compare)
    _named(compare, "names", "NAME", "two or more InferenceBenchmarks", _BENCHMARK_NAMES, nargs="+")


def _verb(verbs: Any, name: str, helptext: str, func: Any) -> argparse.ArgumentParser:
    sub: argparse.ArgumentParser = verbs.add_parser(name, help=helptext, description=helptext)
    common.add_cluster_options(sub)
    common.add_output_option(sub)
    sub.set_defaults(func=func)
    return sub


def _named(
    parser: argparse.ArgumentParser,
    dest: str,
    metavar: str,
    helptext: str,
    completer: complete.Completer,
    **kw: Any,
) -> None:
    argument = parser.add_argument(dest, metavar=metavar, help=helptext, **kw)
    argument.completer = completer  # type: ignore[attr-defined]


def _bench_arg(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text[:80]!r}")
    if len(raw) > MAX_ARG_CHARS:
        raise argparse.ArgumentTypeError(f"the value of {key[:80]} is longer than {MAX_ARG_CHARS} characters")
    try:
        value: Any = json.loads(raw)
    except ValueError:
        value = raw
    return key.strip(), value


def _pairs(items: list[str], what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise common.CliError(f"{what}: expected KEY=VALUE, got {item[:80]!r}", common.EXIT_USAGE)
        out[key] = value
    return out


def toleration(text: str) -> dict[str, str]:
    """``KEY[=VALUE]:EFFECT`` (kubectl taint syntax) as a toleration."""
    head, sep, effect = text.rpartition(":")
    if not sep or effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
        raise common.CliError(
            f"--runner-toleration {text[:80]!r}: expected KEY[=VALUE]:NoSchedule|PreferNoSchedule|NoExecute",
            common.EXIT_USAGE,
        )
    key, eq, value = head.partition("=")
    if eq:
        return {"key": key, "operator": "Equal", "value": value, "effect": effect}
    return {"key": key, "operator": "Exists", "effect": effect}


def benchmark_object(args: argparse.Namespace, namespace: str) -> dict[str, Any]:
    """The InferenceBenchmark ``bench run`` creates (``spec_for``: benchmarks.run's own code)."""
    bench_args: dict[str, Any] = dict(args.arg)
    for key in ("concurrency", "depth"):
        if getattr(args, key):
            bench_args[key] = getattr(args, key)
    if args.tokenizer:
        bench_args["tokenizer"] = args.tokenizer
    runner: dict[str, Any] = {}
    if args.runner_node_selector:
        runner["nodeSelector"] = _pairs(args.runner_node_selector, "--runner-node-selector")
    if args.runner_toleration:
        runner["tolerations"] = [toleration(t) for t in args.runner_toleration]
    settings = Settings(
        namespace=namespace,
        benchmark_via=args.via,
        benchmark_scheduling=runner,
        benchmark_hf_endpoint=args.hf_endpoint,
    )
    request: dict[str, Any] = {"bench_args": bench_args}
    for key in ("framework", "category", "profile", "timeout"):
        if getattr(args, key) is not None:
            request[key] = getattr(args, key)
    spec = spec_for(request, args.workload, settings)
    if args.target_ready_seconds:
        spec["targetReadySeconds"] = args.target_ready_seconds
    metadata: dict[str, Any] = {"namespace": namespace}
    if args.name:
        metadata["name"] = args.name
    else:
        metadata["generateName"] = f"{args.workload[:40].rstrip('-')}-bench-"
    return {"apiVersion": API_VERSION, "kind": INFERENCE_BENCHMARK.kind, "metadata": metadata, "spec": spec}


async def _get(rest: Kube, namespace: str, name: str) -> dict[str, Any]:
    bench = await rest.get(BENCHMARKS, name, namespace)
    if bench is None:
        raise common.CliError(
            f"InferenceBenchmark {name} not found in namespace {namespace}", common.EXIT_NOT_FOUND
        )
    return bench


def _run_bench(args: argparse.Namespace) -> int:
    if args.dry_run:  # NB: no cluster needed: the object as it would be created

        async def plan() -> int:
            obj = benchmark_object(args, common.namespace_of(args))
            common.emit(obj, "yaml" if args.output == "text" else args.output, str)
            return common.EXIT_OK

        return common.run_async(common.guard(plan))

    async def act(rest: Kube, namespace: str) -> int:
        obj = benchmark_object(args, namespace)
        await rollout.find_workload(rest, namespace, args.workload)
        created = await rest.create(BENCHMARKS, obj, namespace)
        name = str(created["metadata"]["name"])
        if not args.wait:
            data = benchview.show_data(created)
            common.emit(data, args.output, lambda d: _created_text(d))
            return common.EXIT_OK
        sys.stderr.write(
            f"InferenceBenchmark {namespace}/{name} created; waiting for it (Ctrl-C leaves it running)\n"
        )
        final = await _follow(rest, namespace, name, args.output)
        data = benchview.show_data(final)
        common.emit(data, args.output, benchview.show_text)
        return common.EXIT_OK if data["phase"] == "Succeeded" else common.EXIT_NO

    return common.run_with_kube(args, act)


def _created_text(data: dict[str, Any]) -> str:
    name = common.printable(data["name"])
    return (
        f"InferenceBenchmark {common.printable(data['namespace'])}/{name} created "
        f"(scenarios: {', '.join(str(common.printable(s)) for s in data['scenarios'])})\n"
        f"follow it: sparkrun-k8s bench show {name}\n"
    )


async def _follow(rest: Kube, namespace: str, name: str, output: str) -> dict[str, Any]:
    """Poll the benchmark until it ends, a line on stderr per change; Ctrl-C says it runs on."""
    last = ""
    try:
        while True:
            bench = await _get(rest, namespace, name)
            data = benchview.show_data(bench)
            line = benchview.progress_text(data)
            if line != last:
                sys.stderr.write(line + "\n")
                sys.stderr.flush()
                last = line
            if data["phase"] in FINAL:
                return bench
            await asyncio.sleep(POLL_SECONDS)
    except asyncio.CancelledError:
        sys.stderr.write(
            f"InferenceBenchmark {namespace}/{name} keeps running\n"
            f"  read it:   sparkrun-k8s bench show {name} -n {namespace}\n"
            f"  cancel it: kubectl -n {namespace} delete inferencebenchmark {name}\n"
        )
        raise


def _show(args: argparse.Namespace) -> int:
    async def act(rest: Kube, namespace: str) -> int:
        data = benchview.show_data(await _get(rest, namespace, args.name))
        common.emit(data, args.output, benchview.show_text)
        return common.EXIT_OK

    return common.run_with_kube(args, act)


def _compare(args: argparse.Namespace) -> int:
    if len(args.names) < 2:
        sys.stderr.write("error: compare needs two or more benchmarks\n")
        return common.EXIT_USAGE

    async def act(rest: Kube, namespace: str) -> int:
        benches = [await _get(rest, namespace, n) for n in args.names]
        common.emit(benchview.compare_data(benches), args.output, benchview.compare_text)
        return common.EXIT_OK

    return common.run_with_kube(args, act)
