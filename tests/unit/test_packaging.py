"""The product and the testbed are two distributions: the product's wheel (what the operator image
installs) holds no testbed and needs none of its dependencies, and the product runs without the
testbed installed, its ``demo`` and ``testbed`` commands saying what to install.

"Without the testbed" is a real interpreter whose import system refuses ``sparkrun_testbed``
exactly as Python does for an absent package (``ModuleNotFoundError`` naming it).
"""

from __future__ import annotations

import ast
import email.parser
import importlib.metadata
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "runtime-images" / "operator" / "Dockerfile"

BLOCK_TESTBED = """
import sys


class NoTestbed:
    def find_spec(self, name, path=None, target=None):
        if name == "sparkrun_testbed" or name.startswith("sparkrun_testbed."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, NoTestbed())
"""


def _without_testbed(code: str, *, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", BLOCK_TESTBED + code],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"},
        check=False,
    )


def _cli_without_testbed(*argv: str) -> subprocess.CompletedProcess[str]:
    return _without_testbed(f"from sparkrun_operator.cli.main import main\nsys.exit(main({list(argv)!r}))\n")


@pytest.mark.parametrize("argv", [("testbed", "up"), ("testbed", "--help"), ("demo", "--down")], ids=" ".join)
def test_testbed_commands_say_what_to_install(argv: tuple[str, ...]) -> None:
    result = _cli_without_testbed(*argv)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith(f"sparkrun-k8s {argv[0]}: the testbed is not installed"), result.stderr
    assert "pip install -e ./testbed" in result.stderr
    assert "make venv" in result.stderr


def test_product_runs_without_the_testbed() -> None:
    """Every product module imports (the demo command, its cache and chart steps and ``__main__``
    aside) and a command works."""
    code = """
import importlib
import pkgutil

import sparkrun_operator

names = [m.name for m in pkgutil.walk_packages(sparkrun_operator.__path__, "sparkrun_operator.")]
demo = ("sparkrun_operator.cli.demo", "sparkrun_operator.cli.demo_cache", "sparkrun_operator.cli.demo_chart")
for name in names:
    if name not in demo and not name.endswith(".__main__"):
        importlib.import_module(name)
assert "sparkrun_testbed" not in sys.modules
from sparkrun_operator.cli.main import main

print(len(names), "modules")
sys.exit(main(["validate", "examples/inferenceworkload.yaml"]))
"""
    result = _without_testbed(code, timeout=240)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "valid" in result.stdout
    modules = int(result.stdout.split(" modules")[0].split()[-1])
    assert modules > 50  # the walk found the package's modules, not just an empty path


def test_help_lists_the_testbed_commands_without_the_testbed() -> None:
    result = _cli_without_testbed("--help")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "demo" in result.stdout
    assert "testbed" in result.stdout


def _copy_build_context(dest: Path) -> None:
    """Copy what the Dockerfile's build stage COPYs from the repository (``COPY SRC... DST``)."""
    for line in DOCKERFILE.read_text().splitlines():
        words = line.split()
        if not words or words[0] != "COPY" or any(w.startswith("--from") for w in words):
            continue
        *sources, target = words[1:]
        for source in sources:
            to = dest / target / Path(source).name if target.endswith("/") else dest / target
            if (ROOT / source).is_dir():
                shutil.copytree(ROOT / source, to, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
            else:
                to.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / source, to)


def test_the_image_installs_only_the_product() -> None:
    instructions = [ln for ln in DOCKERFILE.read_text().splitlines() if ln.strip() and ln[0] != "#"]
    assert any("pip install" in ln for ln in instructions)
    copies = [ln for ln in instructions if ln.split()[0] in ("COPY", "ADD")]
    assert copies
    assert not [ln for ln in copies if "testbed" in ln]
    assert not [ln for ln in instructions if "pip install" in ln and "testbed" in ln]
    # The image's own check that neither the testbed nor dev tools are importable in it.
    assert any("find_spec" in ln and "sparkrun_testbed" in ln for ln in instructions)


def _build_wheel(source: Path, dist: Path) -> tuple[list[str], list[str]]:
    """Build ``source``'s wheel offline: its file names and its requirements (markers dropped)."""
    build = ["wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(dist), str(source)]
    subprocess.run([sys.executable, "-m", "pip", *build], check=True, capture_output=True, timeout=300)
    (wheel,) = dist.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (metadata_name,) = (n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = email.parser.Parser().parsestr(archive.read(metadata_name).decode())
    return names, [r.split(";")[0].strip() for r in metadata.get_all("Requires-Dist") or []]


def test_product_wheel_holds_no_testbed(tmp_path: Path) -> None:
    """Build the wheel from the image's build context, as the image does, but offline."""
    context = tmp_path / "src"
    _copy_build_context(context)
    assert (context / "pyproject.toml").is_file()
    assert not (context / "testbed").exists()
    names, requires = _build_wheel(context, tmp_path / "dist")
    assert "sparkrun_operator/cli/main.py" in names
    assert "sparkrun_operator/py.typed" in names
    assert [n for n in names if "testbed" in n] == []
    assert "kopf>=1.38" in requires
    # The testbed's own dependencies are its business; only the testbed's pki uses cryptography.
    testbed_only = ("cryptography", "sparkrun-testbed", "sparkrun_testbed")
    assert [r for r in requires if r.startswith(testbed_only)] == []


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_testbed_wheel_declares_what_it_imports(tmp_path: Path) -> None:
    """The testbed's wheel: its package (typed), no product, and a requirement per import."""
    source = tmp_path / "testbed"
    shutil.copytree(ROOT / "testbed", source, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    names, requires = _build_wheel(source, tmp_path / "dist")
    assert "sparkrun_testbed/py.typed" in names
    assert "sparkrun_testbed/engine/__main__.py" in names
    assert [n for n in names if n.startswith("sparkrun_operator")] == []
    imported: set[str] = set()
    for path in (ROOT / "testbed" / "sparkrun_testbed").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
    third_party = imported - set(sys.stdlib_module_names) - {"sparkrun_testbed", "__future__"}
    assert {"cryptography", "aiohttp", "yaml"} <= third_party
    distributions = importlib.metadata.packages_distributions()
    declared = {_canonical(re.split(r"[<>=!~ \[]", r)[0]) for r in requires}
    undeclared = {m for m in third_party if not {_canonical(d) for d in distributions[m]} & declared}
    assert undeclared == set(), f"testbed/pyproject.toml lacks the distributions of {sorted(undeclared)}"
