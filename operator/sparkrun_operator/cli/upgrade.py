"""``sparkrun-k8s upgrade --check --chart PATH``: would the new chart's CRDs reject what is stored?

Reads the sparkrun.dev CRDs of the chart at PATH (a chart directory: ``templates/crds/`` and
``crds/``; or a directory or file of rendered CRD YAML, as the pre-upgrade hook mounts them),
lists every stored object of the seven kinds in every namespace through the one client (pages of
:data:`PAGE`, at most :data:`MAX_OBJECTS` a kind) and evaluates each offline
(``api/upgradecheck.py``: schema and CEL with ``validate``'s evaluator, transition rules as an
update of the object onto itself). Exit 0 when every object passes, 1 when any is rejected or
stored at a version the new CRDs no longer serve; 3 or 5 when a kind could not be listed (and
nothing was rejected; a kind whose CRD is not installed has nothing stored). The chart's
pre-upgrade hook Job runs this with the new image.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from sparkrun_operator.api.resources import KINDS, Kind
from sparkrun_operator.api.upgradecheck import CRD_FILES, Finding, check, crds_of
from sparkrun_operator.cli import common
from sparkrun_operator.k8s import errors
from sparkrun_operator.k8s.client import Kube
from sparkrun_operator.k8s.resources import resource_of

#: Objects a page: a stored object may be as large as etcd keeps (1.5 MiB), and its decoded
#: form up to about 20 times that (small containers): a page of these fits the hook pod's memory
#: limit (``upgradeCheck.resources``, 512 MiB) with room for the evaluator (about 140 MiB for
#: four: ``tests/unit/test_upgrade_cli_bounds.py``). Each page is one more LIST: 15,000 objects
#: take about 3,750, seconds in all.
PAGE: Final = 4
#: Objects checked a kind at most (a kind with more is reported unreadable: the check is incomplete).
MAX_OBJECTS: Final = 100_000
#: Findings listed at most (the rest are counted).
MAX_FINDINGS: Final = 500


EPILOG = """\
examples:
  sparkrun-k8s upgrade --check --chart ./sparkrun-operator-0.9.0.tgz
  sparkrun-k8s upgrade --check --chart helm/sparkrun-operator -o json

exit codes:
  0  every stored object is accepted by the new chart's CRDs
  1  some are not (each finding is listed)
  2  usage (the chart cannot be read)
  3  the cluster cannot be reached
  5  objects could not be read (forbidden)
"""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "upgrade",
        help="check that a new chart's CRDs accept every stored object",
        description=__doc__,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--check", action="store_true", help="evaluate the stored objects against the new CRDs"
    )
    parser.add_argument(
        "--chart", required=True, help="the new chart's directory, or a directory or file of its CRDs"
    )
    common.add_cluster_options(parser, namespaced=False)
    common.add_output_option(parser)
    parser.set_defaults(func=run)


def chart_files(path: Path) -> list[tuple[str, str]]:
    """(name, text) of each CRD file of the chart at ``path`` (``OSError``, ``ValueError``)."""
    if path.is_file():
        candidates = [path]
    else:
        dirs = [path / "templates" / "crds", path / "crds"]
        chosen = [d for d in dirs if d.is_dir()] or [path]
        candidates = sorted(p for d in chosen for p in d.iterdir() if p.suffix in (".yaml", ".yml"))
    out = []
    for file in candidates:
        with file.open(encoding="utf-8") as stream:
            text = stream.read(CRD_FILES.max_bytes + 1)
        if len(text) > CRD_FILES.max_bytes:
            raise ValueError(f"{file}: larger than {CRD_FILES.max_bytes} bytes")
        out.append((str(file), text))
    return out


@dataclass
class Report:
    """What the check found: objects counted per kind, findings (bounded), read errors."""

    chart: str
    checked: dict[str, int] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    omitted: int = 0
    #: the exit code of each kind that could not be listed (3 or 5)
    read_errors: list[int] = field(default_factory=list)
    #: an object was rejected, stored at a version gone, or unreadable
    rejected_any: bool = False

    def add(self, finding: Finding) -> None:
        if len(self.findings) < MAX_FINDINGS:
            self.findings.append(finding)
        else:
            self.omitted += 1
        whole_kind = finding.problem == "unreadable" and not finding.name
        self.rejected_any = self.rejected_any or (finding.blocking and not whole_kind)

    def exit_code(self) -> int:
        if self.rejected_any:
            return common.EXIT_NO
        return max(self.read_errors, default=common.EXIT_OK)

    def to_json(self) -> dict[str, Any]:
        return {
            "chart": self.chart,
            "checked": self.checked,
            "passed": self.exit_code() == common.EXIT_OK,
            "findings": [f.to_json() for f in self.findings],
            "omitted": self.omitted,
        }


async def _check_kind(kube: Kube, kind: Kind, crds: dict[str, dict[str, Any]], report: Report) -> None:
    """List ``kind`` in every namespace page by page and check each object as it comes."""
    resource = resource_of(kind)
    token: str | None = None
    count = 0
    report.checked[kind.kind] = 0
    try:
        while True:
            page = await kube.request("GET", resource.path(None), query={"limit": PAGE, "continue": token})
            items = list((page or {}).get("items") or [])
            for item in items:
                if isinstance(item, dict):
                    item.setdefault("apiVersion", resource.api_version)
                    item.setdefault("kind", kind.kind)
            # NB: schema and CEL evaluation is CPU work: off the event loop, a page at a time.
            for finding in await asyncio.to_thread(check, crds, items):
                report.add(finding)
            count += len(items)
            report.checked[kind.kind] = count
            token = ((page or {}).get("metadata") or {}).get("continue") or None
            if token is None:
                return
            if count >= MAX_OBJECTS:
                raise ValueError(f"more than {MAX_OBJECTS} objects: the rest were not checked")
    except errors.KubeNotFound:
        return  # the kind is not installed: nothing stored
    except RecursionError:  # NB: the JSON decoder's, on an object stored before the depth bounds
        report.read_errors.append(common.EXIT_REFUSED)
        message = (
            f"cannot read {resource.plural}: an object after the first {count} is nested too deeply to be "
            "decoded (stored before the depth bounds of free-form fields)"
        )
        report.add(Finding(kind.kind, "", "", "unreadable", "", "read", message))
    except errors.KubeError as error:
        report.read_errors.append(common.exit_code_of(error))
        message = f"cannot list {resource.plural}: {error}"
        report.add(Finding(kind.kind, "", "", "unreadable", "", "read", message))
    except ValueError as error:
        report.read_errors.append(common.EXIT_REFUSED)
        report.add(Finding(kind.kind, "", "", "unreadable", "", "read", str(error)))


async def check_cluster(args: argparse.Namespace, crds: dict[str, dict[str, Any]]) -> Report:
    """The report for every stored object of the seven kinds."""
    report = Report(chart=str(args.chart))
    kube = await common.connect(args)
    try:
        for kind in KINDS:
            await _check_kind(kube, kind, crds, report)
    finally:
        await kube.close()
    return report


def text(data: dict[str, Any]) -> str:
    """One line a finding (``warning:`` for pruned fields), then the verdict."""
    lines = []
    for f in data["findings"]:
        lead = "warning: " if not f["blocking"] else ""
        where = f" {f['path']}:" if f["path"] else ""
        rule = f"  [rule: {f['rule']}]" if f["rule"] not in ("schema", "read", "versions") else ""
        lines.append(f"{lead}{f['object']}:{where} {f['message']}{rule}")
    if data["omitted"]:
        lines.append(f"... and {data['omitted']} more findings")
    total = sum(data["checked"].values())
    counts = ", ".join(f"{n} {kind}" for kind, n in sorted(data["checked"].items()))
    blocking = sum(1 for f in data["findings"] if f["blocking"])
    verdict = (
        "passed"
        if data["passed"]
        else f"FAILED ({_count(blocking, 'finding')} that {'stops' if blocking == 1 else 'stop'} the upgrade)"
    )
    lines.append(f"upgrade check against {data['chart']}: {_count(total, 'object')} ({counts}): {verdict}")
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    if not args.check:
        return _usage("upgrade: pass --check (helm upgrade does the upgrade itself)")
    try:
        crds = crds_of(chart_files(Path(args.chart)))
    except (OSError, ValueError) as error:
        return _usage(f"{args.chart}: {error}")
    if not crds:
        return _usage(f"{args.chart}: no sparkrun.dev CustomResourceDefinitions found")

    async def work() -> int:
        report = await check_cluster(args, crds)
        common.emit(report.to_json(), args.output, text)
        return report.exit_code()

    return common.run_async(work)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _usage(message: str) -> int:
    sys.stderr.write(f"error: {message}\n")
    return common.EXIT_USAGE
