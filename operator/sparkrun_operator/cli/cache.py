"""``sparkrun-k8s cache ls|pin|prune|inspect``: ModelCaches, the model revisions kept on shared
storage (docs/model-cache.md), and their downloads.

  ls        every ModelCache of the namespace (-A: of all): model, revision, phase, size,
            progress, pinned, the workloads using it. --watch shows a progress bar per
            cache, refreshed every second, until Ctrl-C.
  inspect   one ModelCache: source, storage, manifest, shape, workloads using it, conditions
            and events. --watch follows its download with a progress bar until it is Ready
            (exit 0) or Failed (exit 1). --files lists every file of its revision with size
            and digest; --verify checks the files on the volume (sha256) and lists the bad
            ones; both through the daemon API (see below).
  pin       set spec.pinned of a ModelCache (--unpin clears it): a pinned cache is never
            evicted. The same merge patch as the daemon API's model_cache.pin, made with your
            own kubeconfig rights.
  prune     remove cached revisions no one protects (unpinned, unused, older than
            --min-age-days), least recently used first until --max-bytes / --min-free-bytes
            hold; --dry-run lists what it would remove. It is the daemon API's
            model_cache.prune: the files live on a claim only a tool Job can reach, which the
            daemon runs. Without --cache-dir, every location of the namespace's ModelCaches.

Rates and ETAs appear only after 2 s of watching and 256 KiB transferred (the project's one
rate meter): a short download shows none rather than a meaningless one.

Daemon API calls (prune, inspect --files/--verify) go through the aggregated API path with your
kubeconfig's credentials, or to the shim's own listener with --url (token from --token-file or
$SPARKRUN_DAEMON_TOKEN); -n must then be the daemon API's namespace.

Examples:
  sparkrun-k8s cache ls -A
  sparkrun-k8s cache ls --watch
  sparkrun-k8s cache inspect qwen3-cache --watch
  sparkrun-k8s cache pin qwen3-cache
  sparkrun-k8s cache prune --dry-run --min-age-days 0
  sparkrun-k8s cache prune --cache-dir models --max-bytes 200000000000 -o json

Exit codes: 0 done; 1 inspect --watch saw the download fail; 2 usage; 3 the cluster cannot be
reached; 4 no such ModelCache; 5 refused (forbidden, conflict, the daemon's refusal); 130 Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import time
from collections.abc import Mapping
from typing import Any

from sparkrun_operator.api.resources import MODEL_CACHE
from sparkrun_operator.cli import cacheview, common, complete
from sparkrun_operator.k8s.client import Kube
from sparkrun_operator.k8s.resources import EVENTS, resource_of
from sparkrun_operator.ops import ifmatch
from sparkrun_operator.rate import RateMeter

CACHES = resource_of(MODEL_CACHE)
#: Seconds between two reads of a watched cache.
POLL_SECONDS = 1.0
#: Events shown by ``inspect`` (the newest).
SHOWN_EVENTS = 10
FINAL = frozenset({"Ready", "Failed"})


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "cache",
        help="model caches: ls, pin, prune, inspect",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    ls = _verb(verbs, "ls", "list the ModelCaches (--watch: progress bars until Ctrl-C)", _ls)
    ls.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace")
    ls.add_argument("-w", "--watch", action="store_true", help="show progress bars, refreshed every second")

    inspect = _verb(
        verbs, "inspect", "one ModelCache in full (--watch: follow its download)", _inspect, daemon=True
    )
    _name(inspect)
    inspect.add_argument(
        "-w", "--watch", action="store_true", help="follow the download until Ready or Failed"
    )
    inspect.add_argument(
        "--files",
        action="store_true",
        help="every file with size and digest (the daemon's model_cache.resolve)",
    )
    inspect.add_argument(
        "--verify", action="store_true", help="check the files on the volume, sha256 (model_cache.inspect)"
    )

    pin = _verb(verbs, "pin", "pin a ModelCache: never evicted (--unpin: evictable again)", _pin)
    _name(pin)
    pin.add_argument("--unpin", action="store_true", help="clear the pin")

    prune = _verb(
        verbs,
        "prune",
        "remove unprotected cached revisions (the daemon's model_cache.prune)",
        _prune,
        daemon=True,
    )
    prune.add_argument("--dry-run", action="store_true", help="list what would be removed, remove nothing")
    prune.add_argument(
        "--cache-dir",
        action="append",
        default=None,
        metavar="CLAIM[:/DIR]",
        help="the location (repeatable; default: every location of the namespace's ModelCaches)",
    )
    prune.add_argument(
        "--min-age-days",
        type=_non_negative(float),
        default=None,
        metavar="DAYS",
        help="keep revisions used more recently (default: the daemon's, 7)",
    )
    prune.add_argument(
        "--max-bytes",
        type=_non_negative(int),
        default=None,
        metavar="N",
        help="stop once the kept revisions take at most N bytes",
    )
    prune.add_argument(
        "--min-free-bytes",
        type=_non_negative(int),
        default=None,
        metavar="N",
        help="stop once the volume has N bytes free",
    )


def _verb(
    verbs: Any, name: str, helptext: str, func: Any, *, daemon: bool = False
) -> argparse.ArgumentParser:
    sub: argparse.ArgumentParser = verbs.add_parser(name, help=helptext, description=helptext)
    if daemon:
        from sparkrun_operator.cli import daemonapi

        daemonapi.add_daemon_options(sub)  # NB: --kubeconfig and --context with the transport's options
        sub.add_argument(
            "-n", "--namespace", default=None, help="namespace (default: the context's, else 'default')"
        )
    else:
        common.add_cluster_options(sub)
    common.add_output_option(sub)
    sub.set_defaults(func=func)
    return sub


def _name(parser: argparse.ArgumentParser) -> None:
    argument = parser.add_argument("name", metavar="NAME", help="the ModelCache")
    argument.completer = complete.cache_names  # type: ignore[attr-defined]


def _non_negative(kind: type[int] | type[float]) -> Any:
    def parse(value: str) -> int | float:
        try:
            number = kind(value)
        except ValueError as error:
            raise argparse.ArgumentTypeError(f"not a number: {value!r}") from error
        if not math.isfinite(number) or number < 0:
            raise argparse.ArgumentTypeError("must be a finite number, 0 or more")
        return number

    return parse


async def _get(rest: Kube, namespace: str, name: str) -> dict[str, Any]:
    cache = await rest.get(CACHES, name, namespace)
    if cache is None:
        raise common.CliError(f"ModelCache {name} not found in namespace {namespace}", common.EXIT_NOT_FOUND)
    return cache


async def _list(rest: Kube, namespace: str | None) -> list[dict[str, Any]]:
    items = await rest.list(CACHES, namespace)
    return sorted(items, key=lambda c: cacheview.name_of(c))


def _ls(args: argparse.Namespace) -> int:
    async def act(rest: Kube, namespace: str) -> int:
        where = None if args.all_namespaces else namespace
        if args.watch:
            await _watch(args, lambda: _list(rest, where), wide=args.all_namespaces)
            return common.EXIT_OK
        rows = [cacheview.cache_row(c) for c in await _list(rest, where)]
        data = {"namespace": namespace, "all_namespaces": args.all_namespaces, "caches": rows}
        common.emit(data, args.output, cacheview.ls_text)
        return common.EXIT_OK

    return common.run_with_kube(args, act)


async def _watch(args: argparse.Namespace, read: Any, *, wide: bool, until_final: bool = False) -> str | None:
    """Show the caches ``read()`` returns, every :data:`POLL_SECONDS`: a live screen of progress
    bars on a terminal, else a line per change (JSON lines with ``-o json``/``yaml``). With
    ``until_final``, returns the phase once every cache is Ready or Failed."""
    meters: dict[str, RateMeter] = {}
    live = None
    if args.output == "text" and sys.stdout.isatty():
        from rich.console import Console
        from rich.live import Live
        from rich.text import Text

        console = Console(markup=False, highlight=False)
        live = Live(Text(""), console=console, auto_refresh=False, transient=False)
        live.start()
    last: dict[str, Any] = {}
    try:
        while True:
            rows = [cacheview.cache_row(c) for c in await read()]
            now = time.monotonic()
            for row in rows:
                meters.setdefault(cacheview.key_of(row), RateMeter()).update(row["bytes_done"], now)
            if live is not None:
                from rich.text import Text

                lines = "\n".join(cacheview.watch_lines(rows, meters, wide=wide))
                # NB: a line wider than the terminal is cut, not wrapped (the bar stays one line)
                live.update(Text(lines, no_wrap=True, overflow="ellipsis"), refresh=True)
            else:
                _print_changes(args.output, rows, last, meters, wide=wide)
            if until_final and rows and all(r["phase"] in FINAL for r in rows):
                return str(rows[0]["phase"])
            await asyncio.sleep(POLL_SECONDS)
    finally:
        if live is not None:
            live.stop()


def _print_changes(
    output: str,
    rows: list[dict[str, Any]],
    last: dict[str, Any],
    meters: dict[str, RateMeter],
    *,
    wide: bool,
) -> None:
    for row in rows:
        key = cacheview.key_of(row)
        state = (row["phase"], row["bytes_done"], row["files_done"], row["pinned"], tuple(row["used_by"]))
        if last.get(key) == state:
            continue
        last[key] = state
        if output == "text":
            sys.stdout.write(cacheview.watch_lines([row], meters, wide=wide)[0] + "\n")
        else:
            sys.stdout.write(json.dumps(row, sort_keys=True, default=str) + "\n")
        sys.stdout.flush()


async def _events(rest: Kube, namespace: str, name: str) -> list[dict[str, Any]]:
    selector = f"involvedObject.kind={MODEL_CACHE.kind},involvedObject.name={name}"
    events = await rest.list(EVENTS, namespace, field_selector=selector, limit=100)
    events.sort(key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))
    return events[-SHOWN_EVENTS:]


def _location(cache: Mapping[str, Any]) -> str:
    spec, status = cache.get("spec") or {}, cache.get("status") or {}
    storage = spec.get("storage") or {}
    claim = status.get("claimName") or storage.get("claimName") or cache["metadata"]["name"]
    path = str(storage.get("path") or "/")
    return str(claim) if path.strip("/") == "" else f"{claim}:{path}"


def _inspect(args: argparse.Namespace) -> int:
    async def act(rest: Kube, namespace: str) -> int:
        cache = await _get(rest, namespace, args.name)
        code = common.EXIT_OK
        if args.watch:
            phase = await _watch(args, lambda: _one(rest, namespace, args.name), wide=False, until_final=True)
            code = common.EXIT_NO if phase == "Failed" else common.EXIT_OK
            cache = await _get(rest, namespace, args.name)
        files = await _daemon_files(args, cache) if args.files or args.verify else None
        data = cacheview.inspect_data(cache, await _events(rest, namespace, args.name), files)
        common.emit(data, args.output, cacheview.inspect_text)
        return code

    return common.run_with_kube(args, act)


async def _one(rest: Kube, namespace: str, name: str) -> list[dict[str, Any]]:
    return [await _get(rest, namespace, name)]


async def _daemon_files(args: argparse.Namespace, cache: Mapping[str, Any]) -> dict[str, Any]:
    """``--files`` (model_cache.resolve of the resolved commit) and ``--verify``
    (model_cache.inspect with checksums) through the daemon API."""
    from sparkrun_operator.cli import daemonapi

    source = ((cache.get("spec") or {}).get("source") or {}).get("huggingFace") or {}
    revision = (cache.get("status") or {}).get("resolvedRevision") or source.get("revision")
    base: dict[str, Any] = {"cache_dir": _location(cache), "model": source.get("repo"), "revision": revision}
    if source.get("endpoint"):
        base["endpoint"] = source["endpoint"]
    out: dict[str, Any] = {}
    async with daemonapi.daemon_transport(args) as api:
        if args.files:
            manifest = await api.call("model_cache.resolve", {**base, "file_selection": "all"})
            out["files"] = list((manifest or {}).get("files") or [])
        if args.verify:
            report = await api.call(
                "model_cache.inspect", {**base, "checksums": True, "file_selection": "all"}
            )
            out["verify"] = report[0] if isinstance(report, list) and report else report
    return out


def _pin(args: argparse.Namespace) -> int:
    async def act(rest: Kube, namespace: str) -> int:
        cache = await _get(rest, namespace, args.name)
        wanted = not args.unpin
        changed = bool((cache.get("spec") or {}).get("pinned")) != wanted
        if changed:
            patch = {"spec": {"pinned": wanted}}
            await ifmatch.merge_patch(rest, CACHES, args.name, namespace, patch, None)
        data = {"namespace": namespace, "name": args.name, "pinned": wanted, "changed": changed}
        common.emit(data, args.output, cacheview.pin_text)
        return common.EXIT_OK

    return common.run_with_kube(args, act)


def _prune(args: argparse.Namespace) -> int:
    async def act(rest: Kube, namespace: str) -> int:
        from sparkrun_operator.cli import daemonapi

        locations = list(
            dict.fromkeys(args.cache_dir or [_location(c) for c in await _list(rest, namespace)])
        )
        if not locations:
            raise common.CliError(
                f"no ModelCaches in namespace {namespace}: name a location with --cache-dir",
                common.EXIT_USAGE,
            )
        arguments: dict[str, Any] = {"dry_run": bool(args.dry_run)}
        for key in ("min_age_days", "max_bytes", "min_free_bytes"):
            if getattr(args, key) is not None:
                arguments[key] = getattr(args, key)
        reports: list[dict[str, Any]] = []
        async with daemonapi.daemon_transport(args) as api:
            for location in locations:
                result = await api.call("model_cache.prune", {**arguments, "cache_dir": location})
                reports.extend(result if isinstance(result, list) else [result])
        common.emit(
            {"reports": reports},
            args.output,
            lambda d: "".join(cacheview.prune_text(r) for r in d["reports"]),
        )
        return common.EXIT_OK

    return common.run_with_kube(args, act)
