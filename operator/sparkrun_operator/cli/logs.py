"""``sparkrun-k8s logs NAME``: the engine logs of every pod of a workload, each line prefixed by
its replica and role: ``[r0/leader]``, ``[r0/worker-1]`` (worker-N is node rank N of the replica).

Without -f it prints each pod's log in turn (replica, then rank). With -f it follows every pod at
once, lines merged as they arrive, and follows pods that appear later too (a group restarted, a
new replica, a restarted container); it ends when the workload is deleted, or on Ctrl-C. When no
pod exists yet it says so (with -f it waits for them).

The prefixes are coloured on a terminal (not with NO_COLOR set, nor into a pipe). Lines longer
than 16 KiB come in pieces; control characters are shown as '?'.

examples:
  sparkrun-k8s logs chat
  sparkrun-k8s logs chat -f --since 10m
  sparkrun-k8s logs chat --replica 1 --role worker --tail 100
  sparkrun-k8s logs chat --previous          # the containers that ran before a restart

exit codes:
  0    done (-f: the workload was deleted)
  3    the cluster cannot be reached, or the credentials are refused
  4    no such workload
  130  interrupted (Ctrl-C; how -f usually ends)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TextIO

from sparkrun_operator.cli import common, complete
from sparkrun_operator.k8s import errors
from sparkrun_operator.k8s.client import Kube
from sparkrun_operator.k8s.resources import PODS
from sparkrun_operator.ops.kube import WORKLOADS
from sparkrun_operator.render import keys

#: The kubelet's Indexed-Job pod label (and annotation): a worker pod's index; node rank = index + 1.
COMPLETION_INDEX: Final = "batch.kubernetes.io/job-completion-index"
#: A line longer than this comes in pieces.
LINE_MAX: Final = 16 * 1024
#: The most of one pod's log read without -f (the kubelet's limitBytes).
LOG_BYTES_MAX: Final = 32 * 1024 * 1024
#: Seconds between two lists of the workload's pods with -f.
POD_POLL_SECONDS: Final = 2.0
#: The most pods followed at once.
PODS_MAX: Final = 256
_SINCE: Final = re.compile(r"([0-9]{1,7})([smhd])")
_UNITS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400}
#: ANSI colours of the prefixes, by the pod's place in the workload.
_COLOURS: Final = (36, 33, 35, 32, 34, 91, 96, 93)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "logs",
        help="a workload's logs, every rank, prefixed by replica and role",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    name = parser.add_argument("name", metavar="NAME", help="the InferenceWorkload")
    name.completer = complete.workload_names
    parser.add_argument("-f", "--follow", action="store_true", help="follow: print new lines as they come")
    parser.add_argument(
        "--since", type=since_seconds, default=None, metavar="DURATION", help="e.g. 30s, 10m, 2h"
    )
    parser.add_argument("--previous", action="store_true", help="the previous container of each pod")
    parser.add_argument("--replica", type=int, default=None, metavar="N", help="only replica N")
    parser.add_argument(
        "--role", choices=(keys.ROLE_LEADER, keys.ROLE_WORKER), default=None, help="only this role"
    )
    parser.add_argument("--tail", type=int, default=None, metavar="N", help="the last N lines of each pod")
    common.add_cluster_options(parser)
    common.add_output_option(parser)
    parser.set_defaults(func=run)


def since_seconds(value: str) -> int:
    """``30s``, ``10m``, ``2h``, ``1d`` (or bare seconds) as seconds."""
    text = value.strip()
    if text.isdigit() and len(text) <= 9:
        return int(text)
    match = _SINCE.fullmatch(text)
    if match is None:
        raise argparse.ArgumentTypeError("a duration: 30s, 10m, 2h or 1d")
    return int(match.group(1)) * _UNITS[match.group(2)]


@dataclass(frozen=True, order=True)
class Source:
    """One pod of the workload, in display order (replica, then rank)."""

    replica: int
    rank: int
    name: str
    uid: str
    role: str

    @property
    def prefix(self) -> str:
        return (
            f"[r{self.replica}/{self.role}]"
            if self.rank == 0
            else f"[r{self.replica}/{self.role}-{self.rank}]"
        )


def _small_int(value: Any) -> int | None:
    text = str(value) if value is not None else ""
    return int(text) if text.isdigit() and len(text) <= 6 else None


def source_of(pod: Mapping[str, Any]) -> Source | None:
    """The pod as a :class:`Source`; ``None`` for a pod that is not an engine pod (no role, no
    replica label the operator would write)."""
    metadata = pod.get("metadata") or {}
    labels, annotations = metadata.get("labels") or {}, metadata.get("annotations") or {}
    role, replica = labels.get(keys.LABEL_ROLE), _small_int(labels.get(keys.LABEL_REPLICA))
    if role not in (keys.ROLE_LEADER, keys.ROLE_WORKER) or replica is None:
        return None
    rank = 0
    if role == keys.ROLE_WORKER:
        index = _small_int(labels.get(COMPLETION_INDEX, annotations.get(COMPLETION_INDEX)))
        rank = (index or 0) + 1
    return Source(replica, rank, str(metadata.get("name", "")), str(metadata.get("uid", "")), role)


def container_id(pod: Mapping[str, Any]) -> str | None:
    """The engine container's id once it started (a restart gives a new one)."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == keys.CONTAINER_ENGINE:
            found = status.get("containerID")
            return str(found) if found else None
    return None


def selector(name: str, *, replica: int | None, role: str | None) -> str:
    parts = [f"{keys.LABEL_WORKLOAD}={name}", keys.LABEL_ROLE]
    if role is not None:
        parts[1] = f"{keys.LABEL_ROLE}={role}"
    if replica is not None:
        parts.append(f"{keys.LABEL_REPLICA}={replica}")
    return ",".join(parts)


def colour_wanted(stream: TextIO, environ: Mapping[str, str]) -> bool:
    return "NO_COLOR" not in environ and environ.get("TERM") != "dumb" and stream.isatty()


def painter(colour: bool) -> Callable[[Source, int], str]:
    """The prefix of a source (``index``: its place, for the colour)."""

    def paint(source: Source, index: int) -> str:
        if not colour:
            return source.prefix
        return f"\x1b[{_COLOURS[index % len(_COLOURS)]}m{source.prefix}\x1b[0m"

    return paint


def line_text(prefix: str, raw: bytes) -> str:
    """One printed line: the prefix, the log bytes decoded, control characters replaced."""
    text = raw.decode(errors="replace").rstrip("\r\n")
    return f"{prefix} {common.printable(text)}\n"


def record_text(source: Source, raw: bytes, output: str) -> str:
    """One line for scripts: a JSON object per line (``-o json``) or a YAML document (``-o yaml``)
    with the pod, replica, role, rank and the line (JSON escapes control characters)."""
    record = {
        "pod": source.name,
        "replica": source.replica,
        "role": source.role,
        "rank": source.rank,
        "line": raw.decode(errors="replace").rstrip("\r\n"),
    }
    if output == "yaml":
        import yaml

        return "---\n" + yaml.safe_dump(record, sort_keys=True)
    return json.dumps(record, sort_keys=True) + "\n"


def formatter(output: str, paint: Callable[[Source, int], str]) -> Callable[[Source, int, bytes], str]:
    """How a line of ``source`` (at ``place``) is printed for ``output``."""
    if output in ("json", "yaml"):
        return lambda source, _place, raw: record_text(source, raw, output)
    return lambda source, place, raw: line_text(paint(source, place), raw)


def log_query(args: argparse.Namespace, *, follow: bool) -> dict[str, Any]:
    query: dict[str, Any] = {"container": keys.CONTAINER_ENGINE}
    if follow:
        query["follow"] = "true"
    else:
        query["limitBytes"] = LOG_BYTES_MAX
    if args.since is not None:
        query["sinceSeconds"] = args.since
    if args.tail is not None:
        query["tailLines"] = max(0, args.tail)
    if args.previous:
        query["previous"] = "true"
    return query


def run(args: argparse.Namespace) -> int:
    return common.run_with_kube(args, lambda kube, namespace: _run(args, kube, namespace))


async def _run(args: argparse.Namespace, kube: Kube, namespace: str) -> int:
    if await kube.get(WORKLOADS, args.name, namespace) is None:
        raise common.CliError(f"no InferenceWorkload {args.name} in {namespace}", common.EXIT_NOT_FOUND)
    fmt = formatter(args.output, painter(colour_wanted(sys.stdout, os.environ)))
    if args.follow:
        return await Follower(kube, args, namespace, fmt).run()
    return await _print_all(kube, args, namespace, fmt)


async def _sources(
    kube: Kube, args: argparse.Namespace, namespace: str
) -> list[tuple[Source, dict[str, Any]]]:
    pods = await kube.list(
        PODS,
        namespace,
        label_selector=selector(args.name, replica=args.replica, role=args.role),
        limit=PODS_MAX,
    )
    found = [(source, pod) for pod in pods[:PODS_MAX] if (source := source_of(pod)) is not None]
    return sorted(found, key=lambda pair: pair[0])


Format = Callable[[Source, int, bytes], str]


async def _print_all(kube: Kube, args: argparse.Namespace, namespace: str, fmt: Format) -> int:
    sources = await _sources(kube, args, namespace)
    if not sources:
        sys.stderr.write(f"no pods of {args.name} in {namespace} yet (sparkrun-k8s run/status shows why)\n")
        return common.EXIT_OK
    for index, (source, pod) in enumerate(sources):
        if container_id(pod) is None and not args.previous:
            sys.stderr.write(f"{source.prefix} {source.name}: the engine has not started yet\n")
            continue
        path = PODS.path(namespace, source.name, "log")
        try:
            async for raw in kube.stream_lines(path, query=log_query(args, follow=False), max_line=LINE_MAX):
                sys.stdout.write(fmt(source, index, raw))
        except errors.KubeBadRequest as error:  # e.g. --previous with no previous container
            sys.stderr.write(f"{source.prefix} {source.name}: {common.printable(str(error))}\n")
        except errors.KubeNotFound:
            sys.stderr.write(f"{source.prefix} {source.name}: gone\n")
    sys.stdout.flush()
    return common.EXIT_OK


class Follower:
    """-f: one task per (pod, container) streaming its log; a poll of the pods starts new ones."""

    def __init__(self, kube: Kube, args: argparse.Namespace, namespace: str, fmt: Format) -> None:
        self.kube = kube
        self.args = args
        self.namespace = namespace
        self.fmt = fmt
        self.streams: dict[tuple[str, str], asyncio.Task[None]] = {}
        self.places: dict[str, int] = {}
        self.first = True

    async def run(self) -> int:
        waiting_said = False
        try:
            while True:
                if await self.kube.get(WORKLOADS, self.args.name, self.namespace) is None:
                    sys.stderr.write(f"InferenceWorkload {self.args.name} was deleted\n")
                    return common.EXIT_OK
                sources = await _sources(self.kube, self.args, self.namespace)
                if not sources and not self.streams and not waiting_said:
                    sys.stderr.write(f"no pods of {self.args.name} yet; waiting for them (Ctrl-C to stop)\n")
                    waiting_said = True
                for source, pod in sources:
                    self._start(source, pod)
                self.first = False
                await asyncio.sleep(POD_POLL_SECONDS)
        finally:
            for task in self.streams.values():
                task.cancel()
            await asyncio.gather(*self.streams.values(), return_exceptions=True)

    def _start(self, source: Source, pod: dict[str, Any]) -> None:
        started = container_id(pod)
        if started is None or (source.uid, started) in self.streams or len(self.streams) >= PODS_MAX * 4:
            return
        place = self.places.setdefault(source.uid, len(self.places))
        # NB: a pod or container that appeared while following is read from its start; the first
        # ones honour --since and --tail
        query = log_query(self.args, follow=True)
        if not self.first:
            query.pop("sinceSeconds", None)
            query.pop("tailLines", None)
            query.pop("previous", None)
        self.streams[(source.uid, started)] = asyncio.create_task(self._stream(source, place, query))

    async def _stream(self, source: Source, place: int, query: dict[str, Any]) -> None:
        path = PODS.path(self.namespace, source.name, "log")
        try:
            async for raw in self.kube.stream_lines(path, query=query, max_line=LINE_MAX):
                sys.stdout.write(self.fmt(source, place, raw))
                sys.stdout.flush()
        except errors.KubeError as error:
            if not isinstance(error, errors.KubeNotFound):
                sys.stderr.write(f"{source.prefix} {source.name}: {common.printable(str(error))[:300]}\n")
