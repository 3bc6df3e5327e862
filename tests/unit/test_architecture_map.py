"""The contributors' map is complete, and the code and user docs cite only documents in the repository.

**The module map.** ``docs/architecture.md``, section "Every module", names each product module
(every ``.py`` under ``operator/sparkrun_operator``) by its package-relative path on one line
that says what it holds: ``- `gateway/auth.py`: ...``. Two kinds of file hold nothing to look
up and are left out: an ``__init__.py`` whose body is only a docstring (a package marker), and a
``__main__.py`` that defines no function or class (a shim that calls an entry point). A module
missing from the map fails, so does a line naming a module that no longer exists, and so does a
product path in backticks anywhere on the page that names no module (a stale row).

**Outside documents.** The project was planned in documents that are not part of this
repository (the design "seeds", ``ARCHITECTURE``, ``VLLM_JOBSET``, the workplace's shared
folder). A reader of a clone cannot open them, so code comments, docstrings and user docs point
to ``docs/`` instead. Exempt: the ADRs (``docs/decisions/``), records that keep their words, and
the vendored data of ``spec/``, whose README names where it was copied from (provenance, not a
document to read). Any ``NAME.md`` spelled in capitals must be a file of the repository.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.repo_files import tree_files

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "operator" / "sparkrun_operator"
MAP = REPO / "docs" / "architecture.md"
SECTION = "## Every module"
#: One map line: a list item that starts with the module's path in backticks, then what it holds.
MAP_LINE = re.compile(r"^- `(?P<path>[\w/]+\.py)`: (?P<what>\S.*)$")
#: A product path in backticks anywhere on the page (``api/<kind>.py`` and the like are patterns).
BACKTICKED = re.compile(r"`(?P<path>[\w/]+\.py)\b")


def _is_marker(path: Path) -> bool:
    """An ``__init__.py`` with only a docstring, or a ``__main__.py`` that defines nothing."""
    tree = ast.parse(path.read_text(), filename=str(path))
    if path.name == "__main__.py":
        defines = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
        return not any(isinstance(node, defines) for node in ast.walk(tree))
    if path.name != "__init__.py":
        return False
    for node in tree.body:
        docstring = isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        future = isinstance(node, ast.ImportFrom) and node.module == "__future__"
        if not (docstring or future):
            return False
    return True


def product_modules() -> set[str]:
    """Every module the map must name, package-relative (``gateway/auth.py``)."""
    return {
        path.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.rglob("*.py")
        if "__pycache__" not in path.parts and not _is_marker(path)
    }


def map_lines(text: str) -> list[tuple[str, str]]:
    """The (path, what it holds) lines of the section "Every module"."""
    lines = text.splitlines()
    if SECTION not in lines:
        return []
    start = lines.index(SECTION) + 1
    found = []
    for line in lines[start:]:
        if line.startswith("## "):
            break
        match = MAP_LINE.match(line)
        if match:
            found.append((match["path"], match["what"]))
    return found


def test_the_rule_sees_markers_and_modules() -> None:
    modules = product_modules()
    assert "gateway/auth.py" in modules
    assert "plan/workload/__init__.py" in modules  # code: plan() lives there
    assert "api/__init__.py" not in modules  # a docstring only
    assert "gateway/__main__.py" not in modules  # a shim
    assert len(modules) > 150


def test_every_module_is_on_the_map() -> None:
    listed = [path for path, _ in map_lines(MAP.read_text())]
    missing = sorted(product_modules() - set(listed))
    assert missing == [], f"modules missing from {SECTION!r} of docs/architecture.md: {missing}"


def test_the_map_names_no_module_twice_or_gone() -> None:
    listed = [path for path, _ in map_lines(MAP.read_text())]
    twice = sorted({path for path in listed if listed.count(path) > 1})
    gone = sorted(set(listed) - product_modules())
    assert (twice, gone) == ([], []), f"named twice: {twice}; no such module (or a marker): {gone}"


def test_no_stale_product_path_on_the_page() -> None:
    packages = {path.name for path in PACKAGE.iterdir() if (path / "__init__.py").is_file()}
    stale = sorted(
        {
            match["path"]
            for match in BACKTICKED.finditer(MAP.read_text())
            if match["path"].split("/")[0] in packages and not (PACKAGE / match["path"]).is_file()
        }
    )
    assert stale == [], f"docs/architecture.md names modules that do not exist: {stale}"


def test_map_lines_parse() -> None:
    text = f"{SECTION}\n\n- `a/b.py`: holds b\n- `a/c.py`:\n- `d.py`: the d\n\n## Next\n- `e.py`: not in it\n"
    assert map_lines(text) == [("a/b.py", "holds b"), ("d.py", "the d")]
    assert map_lines("# no section\n- `a/b.py`: holds b\n") == []


# -- documents outside the repository -----------------------------------------------------------

#: Names of documents that are not in the repository (case-insensitive where the name is a phrase).
OUTSIDE = [
    re.compile(r"\bARCHITECTURE(?:\.md| section)"),
    re.compile(r"\bVLLM_JOBSET\b"),
    re.compile(r"\bseeds? ?\d{3}\b", re.IGNORECASE),
    re.compile(r"\bthe seed\b", re.IGNORECASE),
    re.compile(r"\bseeds/"),
    re.compile(r"(?:\.\./|\b)shared/(?:design|spec)\b|\.\./shared\b"),
    re.compile(r"\bspec/README\b"),
]
#: A document name in capitals (``TESTBED.md``): must be a file of the repository.
CAPITALS_MD = re.compile(r"\b(?P<name>[A-Z][A-Z0-9_]+\.md)\b")
#: Records and vendored data (see the module docstring).
EXEMPT = ("docs/decisions/", "spec/")
#: Text files that are scanned: code, tests, benchmarks, scripts, user docs, chart, examples.
SUFFIXES = {".py", ".md", ".sh", ".yaml", ".yml", ".toml", ".txt", ".tpl", ".go", ".cfg", ".ini", ""}


def outside_references(rel: str, text: str, in_repo: set[str]) -> list[str]:
    """``rel:line: text`` for each line of ``text`` that cites a document not in the repository."""
    hits = []
    for number, line in enumerate(text.splitlines(), 1):
        named = any(pattern.search(line) for pattern in OUTSIDE)
        capitals = [m["name"] for m in CAPITALS_MD.finditer(line) if m["name"] not in in_repo]
        if named or capitals:
            hits.append(f"{rel}:{number}: {line.strip()}")
    return hits


def test_outside_references_are_found() -> None:
    known = {"README.md"}
    lines = [
        "Rules (ARCHITECTURE section 5):",
        "the shape of VLLM_JOBSET section 7",
        "# Seed 004: an empty list returns 400",
        "every difference from the seed are listed",
        "see ``shared/design/RECIPES.md``",
        "generated from `" + "/".join(("..", "shared", "spec")) + "`",  # spelled so no scan finds it here
        "## Where reality differed from TESTBED.md",
    ]
    for line in lines:
        assert outside_references("x.py", line, known), line
    fine = ["see docs/architecture.md", "seed = knobs.seed ^ 1", "--seed 1", "its README.md", "docs/x.md"]
    assert outside_references("x.py", "\n".join(fine), known) == []


@pytest.mark.parametrize("exempt", EXEMPT)
def test_exemptions_are_folders_of_the_repository(exempt: str) -> None:
    assert (REPO / exempt).is_dir()


def test_code_and_user_docs_cite_only_the_repository() -> None:
    me = Path(__file__).resolve().relative_to(REPO).as_posix()
    files = [
        rel
        for rel in tree_files()
        if rel != me and not rel.startswith(EXEMPT) and Path(rel).suffix in SUFFIXES
    ]
    in_repo = {Path(rel).name for rel in tree_files()}
    hits = []
    for rel in files:
        text = (REPO / rel).read_text(errors="replace")
        hits += outside_references(rel, text, in_repo)
    assert hits == [], "cite the repository's docs/ instead:\n" + "\n".join(hits)
