"""``sparkrun-k8s run MODEL|RECIPE``: serve a model (a Hugging Face id) or a Recipe, and watch it
start until it is Ready.

run creates an InferenceWorkload (as field manager sparkrun-k8s, with your kubeconfig's rights)
and follows its startup timeline: accepted, cacheReady, scheduled, running, ready (and a recipe's
hooks), the phase, the condition that says what it waits for, and the ModelCache download when
it waits for one. Once Ready it prints where the model answers and a request that works: through
the inference gateway when the chart's gateway is found (its external address, else the
apiserver's Service proxy), else the workload's own Service. The gateway is a Service with the
chart gateway's labels in the workload's namespace, in --gateway-namespace, or in the release
namespace (the one the daemon APIService names; only administrators create it): a look-alike in
any other namespace (any tenant can label a Service so) is never taken.

MODEL or RECIPE: a Recipe of that name in the namespace, or a catalog name (team-a/qwen,
@registry/team-a/qwen) of a RecipeRegistry's recipe, becomes spec.recipe; anything else is a
model id (spec.model.name). The workload is named after the model (Qwen/Qwen3-0.6B:
qwen3-0-6b) unless --name says otherwise; run never replaces an existing workload.

Ctrl-C while it starts deletes the workload this run created (only that one: the delete is
conditional on its UID) and says so; with --keep-on-interrupt it is kept and run says how to
follow or delete it. A second Ctrl-C during the clean-up stops it and says what was left.

examples:
  sparkrun-k8s run Qwen/Qwen3-0.6B
  sparkrun-k8s run Qwen/Qwen3-0.6B --name chat --served-name chat --gpus 2 -n team-a
  sparkrun-k8s run qwen3-recipe --replicas 2 --timeout 900
  sparkrun-k8s run Qwen/Qwen3-0.6B --set engine.maxModelLen=8192 --set engine.enableSleepMode=true
  sparkrun-k8s run Qwen/Qwen3-0.6B --detach -o json

exit codes:
  0    Ready (with --detach: created)
  1    it failed (phase Failed or Degraded: the failure is printed), or --timeout passed first
  2    bad arguments (a --set that is not PATH=VALUE)
  3    the cluster cannot be reached, or the credentials are refused
  4    the recipe named with @registry/ does not exist
  5    refused: a workload of that name exists, or the apiserver rejects the spec (its words)
  130  interrupted (Ctrl-C): what was deleted or kept is printed
"""

from __future__ import annotations

import argparse
import asyncio
import re
import time
from typing import Any, Final, TypeVar

from sparkrun_operator.api.meta import GROUP
from sparkrun_operator.api.resources import MODEL_CACHE
from sparkrun_operator.cli import common, complete, progress, view
from sparkrun_operator.cli.interrupts import Interrupts
from sparkrun_operator.k8s import errors
from sparkrun_operator.k8s.client import Kube
from sparkrun_operator.k8s.resources import SERVICES, Resource, resource_of
from sparkrun_operator.ops.errors import NotFound
from sparkrun_operator.ops.kube import WORKLOADS

T = TypeVar("T")

#: InferenceWorkload names (the CRD's metadata.name rule: 35 characters, a letter first).
NAME_MAX: Final = 35
#: Seconds between two reads of the workload (and its cache) while it starts.
POLL_SECONDS: Final = 1.0
#: Reads of the workload tried before run gives up on an apiserver that does not answer.
READ_TRIES: Final = 5
#: The longest --set (path and value) and the deepest path accepted.
SET_MAX: Final = 4096
SET_DEPTH: Final = 8
_SEGMENT: Final = re.compile(r"[A-Za-z][A-Za-z0-9]{0,62}")
#: Labels of the chart's gateway Service (helm/sparkrun-operator/templates/gateway).
GATEWAY_SELECTOR: Final = "app.kubernetes.io/part-of=sparkrun-operator,app.kubernetes.io/component=gateway"
MODEL_CACHES: Final = resource_of(MODEL_CACHE)
#: The chart's daemon APIService: cluster-scoped, created by administrators alone; its Service's
#: namespace is the release namespace, where the chart's gateway runs.
APISERVICES: Final = Resource("apiregistration.k8s.io", "v1", "apiservices", False, "APIService")
DAEMON_APISERVICE: Final = "v1alpha1.daemon.sparkrun.dev"
#: Seconds the clean-up after Ctrl-C waits for the workload to be gone.
CLEANUP_WAIT: Final = 15.0
KIND: Final = "inferenceworkload"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "run",
        help="serve a model or recipe and watch it start until Ready",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    target = parser.add_argument(
        "target", metavar="MODEL|RECIPE", help="a Hugging Face model id, or a Recipe"
    )
    target.completer = complete.recipe_names
    parser.add_argument("--name", default=None, help="the workload's name (default: from the model)")
    parser.add_argument("--served-name", default=None, help="the name clients send as 'model'")
    parser.add_argument("--replicas", type=_at_least(0), default=None, help="serving replicas (default 1)")
    parser.add_argument("--gpus", type=_at_least(1), default=None, help="GPUs per replica (tensor parallel)")
    parser.add_argument("--cluster", default=None, help="the InferenceCluster to serve on")
    parser.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="PATH=VALUE",
        help="any spec field, VALUE in YAML: engine.maxModelLen=8192, "
        "'scheduling.nodeSelector={gpu: h100}' (repeatable)",
    )
    parser.add_argument("--detach", action="store_true", help="create the workload and return at once")
    parser.add_argument(
        "--timeout", type=float, default=1800.0, metavar="S", help="give up waiting after S seconds (1800)"
    )
    parser.add_argument(
        "--keep-on-interrupt", action="store_true", help="on Ctrl-C keep the workload (default: delete it)"
    )
    parser.add_argument(
        "--gateway-namespace", default=None, help="where the chart's gateway runs (default: look it up)"
    )
    common.add_cluster_options(parser)
    common.add_output_option(parser)
    parser.set_defaults(func=run)


def _at_least(low: int) -> Any:
    def parse(value: str) -> int:
        number = int(value)
        if number < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}")
        return number

    return parse


# -- the spec (pure) ------------------------------------------------------------------------


def derive_name(model: str) -> str:
    """A workload name from a model id: its last path part, lowercased, every run of other
    characters a dash, a letter first, at most :data:`NAME_MAX` characters."""
    tail = model.rstrip("/").rsplit("/", 1)[-1][:256].lower()
    name = "-".join(part for part in re.split(r"[^a-z0-9]", tail) if part)
    if not name or not name[0].isalpha():
        name = f"m-{name}" if name else "workload"
    return name[:NAME_MAX].rstrip("-")


def apply_set(spec: dict[str, Any], assignment: str) -> None:
    """Set ``PATH=VALUE`` in ``spec``: PATH dotted camelCase field names (``spec.`` optional),
    VALUE parsed as YAML. ``CliError`` (exit 2) when it is not that."""
    import yaml

    path, sep, raw = assignment.partition("=")
    if not sep or len(assignment) > SET_MAX:
        raise common.CliError(f"--set {assignment[:80]!r}: expected PATH=VALUE", common.EXIT_USAGE)
    parts = path.strip().split(".")
    if parts[:1] == ["spec"]:
        parts = parts[1:]
    if not parts or len(parts) > SET_DEPTH or not all(_SEGMENT.fullmatch(p) for p in parts):
        raise common.CliError(f"--set {path[:80]!r}: a path is field names joined by dots", common.EXIT_USAGE)
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as error:
        raise common.CliError(f"--set {path}: the value is not YAML ({error})", common.EXIT_USAGE) from error
    node = spec
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[parts[-1]] = value


def build_spec(
    *,
    model: str | None,
    recipe: str | None,
    served_name: str | None = None,
    replicas: int | None = None,
    gpus: int | None = None,
    cluster: str | None = None,
    sets: list[str] | None = None,
) -> dict[str, Any]:
    """The InferenceWorkload spec ``run`` creates (the apiserver validates the rest)."""
    spec: dict[str, Any] = {}
    if recipe is not None:
        spec["recipe"] = {"name": recipe}
        if served_name is not None:
            raise common.CliError(
                "--served-name with a recipe: use --set model.servedName=... with --set model.name=...",
                common.EXIT_USAGE,
            )
    if model is not None:
        spec["model"] = {"name": model, **({"servedName": served_name} if served_name else {})}
    if replicas is not None:
        spec["replicas"] = replicas
    if gpus is not None:
        spec["topology"] = {"gpusPerNode": gpus, "tensorParallel": gpus}
    if cluster is not None:
        spec["cluster"] = cluster
    for assignment in sets or []:
        apply_set(spec, assignment)
    return spec


def manifest(name: str, namespace: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1alpha1",
        "kind": "InferenceWorkload",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


# -- the flow -------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    return common.run_with_kube(args, lambda kube, namespace: _serve(args, kube, namespace))


async def resolve(kube: Kube, namespace: str, target: str) -> tuple[str | None, str | None]:
    """``(model, None)`` or ``(None, recipe object name)`` for the MODEL|RECIPE argument."""
    from sparkrun_operator.ops.executors.recipe_lookup import find_recipe
    from sparkrun_operator.ops.invocation import OperationContext
    from sparkrun_operator.ops.settings import Settings

    ctx = OperationContext(rest=kube, settings=Settings(namespace=namespace), principal=common.FIELD_MANAGER)
    try:
        found = await find_recipe(ctx, target)
    except NotFound as error:
        if target.startswith("@"):
            raise common.CliError(error.detail, common.EXIT_NOT_FOUND) from error
        return target, None
    except errors.KubeForbidden:
        return target, None  # recipes you may not read are not yours to run
    return None, str(found["metadata"]["name"])


async def _serve(args: argparse.Namespace, kube: Kube, namespace: str) -> int:
    model, recipe = await resolve(kube, namespace, args.target)
    spec = build_spec(
        model=model,
        recipe=recipe,
        served_name=args.served_name,
        replicas=args.replicas,
        gpus=args.gpus,
        cluster=args.cluster,
        sets=args.sets,
    )
    name = args.name or derive_name(model or recipe or "")
    console = _console(args.output)
    interrupts = Interrupts()
    interrupts.install()
    try:
        created = await _create(kube, name, namespace, spec)
        uid = str(created["metadata"]["uid"])
        what = f"model {model}" if model else f"recipe {recipe}"
        say(console, f"created {KIND} {name} in {namespace} ({what})")
        if args.detach:
            _emit_result(args.output, created, None, console)
            return common.EXIT_OK
        if interrupts.count:
            return await _interrupted(args, kube, name, namespace, uid, console, interrupts)
        display = Display(console, tty=console.is_terminal and args.output == "text")
        watch = _follow(kube, name, namespace, uid, display, time.monotonic() + args.timeout)
        try:
            with display:
                outcome = await interrupts.guard(watch)
        except (errors.KubeError, WorkloadVanished) as error:
            if not isinstance(error, WorkloadVanished):
                say(console, f"{KIND} {name} in {namespace} is left as it is (it keeps starting)")
                say(console, f"  {_how(name, namespace)}")
            raise
        if outcome is None:
            return await _interrupted(args, kube, name, namespace, uid, console, interrupts)
        return await _finish(args, kube, outcome, console)
    finally:
        interrupts.uninstall()


async def _create(kube: Kube, name: str, namespace: str, spec: dict[str, Any]) -> dict[str, Any]:
    try:
        return await kube.create(WORKLOADS, manifest(name, namespace, spec), namespace)
    except errors.KubeAlreadyExists as error:
        raise common.CliError(
            f"{KIND} {name} already exists in {namespace}: run never replaces one; pick another --name "
            f"or delete it (kubectl delete {KIND} {name} -n {namespace})",
            common.EXIT_REFUSED,
        ) from error


class WorkloadVanished(common.CliError):
    """The workload this run created was deleted (by someone else) while it started."""


def _how(name: str, namespace: str) -> str:
    follow = f"sparkrun-k8s status -n {namespace}"
    return f"follow it: {follow}; delete it: kubectl delete {KIND} {name} -n {namespace}"


async def _read(kube: Kube, name: str, namespace: str) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The workload and the ModelCache it waits for; a failed read is tried again
    :data:`READ_TRIES` times, a second apart (an apiserver restarting, a 429)."""
    for attempt in range(READ_TRIES):
        try:
            obj = await kube.get(WORKLOADS, name, namespace)
            cache_name = progress.cache_name(obj) if obj else None
            return obj, await kube.get(MODEL_CACHES, cache_name, namespace) if cache_name else None
        except (errors.KubeUnavailable, errors.KubeTooManyRequests):
            if attempt + 1 == READ_TRIES:
                raise
            await asyncio.sleep(POLL_SECONDS)
    raise AssertionError("unreachable")


async def _follow(
    kube: Kube, name: str, namespace: str, uid: str, display: Display, deadline: float
) -> tuple[str, dict[str, Any]]:
    """Read the workload (and its cache) until it is Ready, failed, or ``deadline`` passes."""
    while True:
        obj, cache = await _read(kube, name, namespace)
        if obj is None or obj["metadata"].get("uid") != uid:
            raise WorkloadVanished(f"{KIND} {name} was deleted while it started", common.EXIT_NO)
        snap = progress.snapshot(obj, cache)
        display.update(snap)
        if snap.ready:
            return "ready", obj
        if snap.failed:
            return "failed", obj
        if time.monotonic() >= deadline:
            return "timeout", obj
        await asyncio.sleep(POLL_SECONDS)


async def _finish(
    args: argparse.Namespace, kube: Kube, outcome: tuple[str, dict[str, Any]], console: Any
) -> int:
    state, obj = outcome
    name, namespace = obj["metadata"]["name"], obj["metadata"]["namespace"]
    elapsed = progress.duration(_age(obj))
    if state == "failed":
        phase = progress.clip((obj.get("status") or {}).get("phase") or "Failed", 32)
        say(console, f"{KIND} {name} is {phase} after {elapsed}:")
        say(console, progress.failure_text(obj))
        say(console, f"more: sparkrun-k8s logs {name} -n {namespace}")
        _emit_result(args.output, obj, None, console)
        return common.EXIT_NO
    if state == "timeout":
        say(
            console,
            f"{KIND} {name} is still starting after {elapsed} (--timeout {args.timeout:g}); it keeps "
            f"starting. {_how(name, namespace)}",
        )
        _emit_result(args.output, obj, None, console)
        return common.EXIT_NO
    reach = await reach_of(kube, obj, args.gateway_namespace)
    say(console, f"{KIND} {name} is Ready after {elapsed}")
    for line in progress.reach_text(reach):
        say(console, line)
    _emit_result(args.output, obj, reach, console)
    return common.EXIT_OK


def _age(obj: dict[str, Any]) -> float:
    import datetime as dt

    created = view.parse_time(obj["metadata"].get("creationTimestamp"))
    return (dt.datetime.now(dt.UTC) - created).total_seconds() if created else 0.0


# -- where it answers -----------------------------------------------------------------------


async def release_namespace(kube: Kube) -> str | None:
    """The namespace of the daemon APIService's Service (the release namespace); ``None`` when
    there is none, or you may not read it."""
    try:
        found = await kube.get(APISERVICES, DAEMON_APISERVICE)
    except errors.KubeError:
        return None
    service = ((found or {}).get("spec") or {}).get("service") or {}
    namespace = service.get("namespace") if isinstance(service, dict) else None
    return namespace if isinstance(namespace, str) and 0 < len(namespace) <= 63 else None


async def find_gateway(kube: Kube, namespaces: list[str]) -> dict[str, Any] | None:
    """The chart's gateway Service (a port named http): in each of ``namespaces`` in turn (never
    every namespace: a tenant can label a Service of its own as the gateway); ``None`` when there
    is none you may read."""
    for namespace in namespaces:
        try:
            found = await kube.list(SERVICES, namespace, label_selector=GATEWAY_SELECTOR, limit=50)
        except (errors.KubeForbidden, errors.KubeNotFound):
            continue
        for service in sorted(found, key=lambda s: str(s["metadata"]["name"])):
            ports = (service.get("spec") or {}).get("ports") or []
            if any(p.get("name") == "http" for p in ports):
                return service
    return None


async def reach_of(kube: Kube, obj: dict[str, Any], gateway_namespace: str | None) -> dict[str, Any]:
    """Where the Ready workload answers: ``{"via", "url", "servedName", "try"}``."""
    status = obj.get("status") or {}
    served = str(((status.get("model") or {}).get("servedName")) or obj["spec"].get("model", {}).get("name"))
    namespace = obj["metadata"]["namespace"]
    if gateway_namespace:
        order = [gateway_namespace]
    else:
        release = await release_namespace(kube)
        order = [namespace, *([release] if release and release != namespace else [])]
    service = await find_gateway(kube, order)
    if service is not None:
        svc_ns, svc = service["metadata"]["namespace"], service["metadata"]["name"]
        port = next(p for p in service["spec"]["ports"] if p.get("name") == "http")
        ingress = ((service.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
        address = next(
            (i.get("hostname") or i.get("ip") for i in ingress if i.get("hostname") or i.get("ip")), None
        )
        if address:
            url = f"http://{address}:{port.get('port')}"
            return {
                "via": "the gateway",
                "url": url,
                "servedName": served,
                "try": progress.try_line(url, served),
            }
        path = f"/api/v1/namespaces/{svc_ns}/services/{svc}:http/proxy"
        url = kube.host.rstrip("/") + path
        return {
            "via": "the gateway, through the apiserver's Service proxy",
            "url": url,
            "servedName": served,
            "try": progress.try_line(url, served, proxy_path=path),
        }
    endpoints = [e for e in status.get("endpoints") or [] if e.get("ready")] or status.get("endpoints") or []
    url = str(endpoints[0]["url"]) if endpoints else ""
    return {
        "via": "the workload's Service: no gateway found; reachable inside the cluster",
        "url": url,
        "servedName": served,
        "try": progress.try_line(url, served),
    }


def _emit_result(output: str, obj: dict[str, Any], reach: dict[str, Any] | None, console: Any) -> None:
    if output == "text":
        return
    status = obj.get("status") or {}
    data = {
        "name": obj["metadata"]["name"],
        "namespace": obj["metadata"]["namespace"],
        "uid": obj["metadata"].get("uid"),
        "phase": status.get("phase"),
        "ready": progress.is_ready(obj),
        "spec": obj.get("spec"),
        **({"reach": reach} if reach else {}),
    }
    common.emit(data, output, lambda _d: "")


# -- Ctrl-C ---------------------------------------------------------------------------------


async def _interrupted(
    args: argparse.Namespace,
    kube: Kube,
    name: str,
    namespace: str,
    uid: str,
    console: Any,
    interrupts: Interrupts,
) -> int:
    """After a Ctrl-C: delete the workload this run created (unless --keep-on-interrupt) and say so."""
    follow = f"sparkrun-k8s status -n {namespace}; sparkrun-k8s logs {name} -n {namespace} -f"
    delete = f"kubectl delete {KIND} {name} -n {namespace}"
    if args.keep_on_interrupt:
        say(
            console,
            f"interrupted: kept {KIND} {name} in {namespace} (--keep-on-interrupt); it keeps starting.\n"
            f"  follow it: {follow}\n  delete it: {delete}",
        )
        return common.EXIT_INTERRUPTED
    say(console, f"interrupted: deleting {KIND} {name} (Ctrl-C again to stop)...")
    asked: list[bool] = []
    state = await interrupts.guard(_delete(kube, name, namespace, uid, asked))
    if state is None and asked:
        say(
            console,
            f"interrupted again: the deletion of {KIND} {name} in {namespace} was asked but not seen "
            f"through; check it: kubectl get {KIND} {name} -n {namespace}",
        )
    elif state is None:
        say(
            console,
            f"interrupted again: {KIND} {name} in {namespace} is left behind (not deleted); "
            f"delete it: {delete}",
        )
    elif state == "replaced":
        say(
            console,
            f"not deleted: {KIND} {name} in {namespace} is no longer the one this run created",
        )
    elif state == "pending":
        say(
            console,
            f"deletion of {KIND} {name} asked (interrupted before Ready); it is still finishing: "
            f"kubectl get {KIND} {name} -n {namespace}",
        )
    else:
        say(console, f"deleted workload {name} (interrupted before Ready)")
    return common.EXIT_INTERRUPTED


async def _delete(kube: Kube, name: str, namespace: str, uid: str, asked: list[bool]) -> str:
    """``gone``, ``pending`` (asked, not gone in :data:`CLEANUP_WAIT`) or ``replaced``; ``asked``
    gets an entry once the apiserver accepted the delete."""
    try:
        await kube.delete(WORKLOADS, name, namespace, propagation="Background", uid=uid)
    except errors.KubeConflict:
        return "replaced"
    asked.append(True)
    deadline = time.monotonic() + CLEANUP_WAIT
    while time.monotonic() < deadline:
        obj = await kube.get(WORKLOADS, name, namespace)
        if obj is None or obj["metadata"].get("uid") != uid:
            return "gone"
        await asyncio.sleep(0.5)
    return "pending"


# -- the display ----------------------------------------------------------------------------


def say(console: Any, text: str) -> None:
    """Print ``text`` as it is: no markup, no highlighting, no wrapping (lines stay copyable)."""
    console.print(text, highlight=False, markup=False, soft_wrap=True)


def _console(output: str) -> Any:
    from rich.console import Console

    # NB: with -o json/yaml standard output carries the result alone; people read standard error
    return Console(stderr=output != "text")


class Display:
    """A live block on a terminal (redrawn four times a second), else a line per change."""

    def __init__(self, console: Any, *, tty: bool) -> None:
        self.console = console
        self.tty = tty
        self.snap: progress.Snapshot | None = None
        self.started = time.monotonic()
        self.live: Any = None
        self.final = False

    def __enter__(self) -> Display:
        if self.tty:
            from rich.live import Live

            self.live = Live(self, console=self.console, refresh_per_second=4, transient=False)
            self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.final = True
            self.live.refresh()
            self.live.__exit__(None, None, None)
            self.live = None

    def __rich__(self) -> Any:
        from rich.text import Text

        if self.snap is None:
            return Text("waiting for the operator...")
        return Text(progress.block(self.snap, time.monotonic() - self.started, final=self.final))

    def update(self, snap: progress.Snapshot) -> None:
        before, self.snap = self.snap, snap
        if not self.tty:
            for line in progress.changes(before, snap):
                say(self.console, "  " + line)
        elif self.live is not None:
            self.live.refresh()
