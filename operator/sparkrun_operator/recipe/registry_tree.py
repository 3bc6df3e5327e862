"""What a recipe registry's files hold, read as sparkrun 0.4.2 reads a registry checkout (pure).

Input: the files of one commit (path relative to the repository root -> bytes, as
``gitfetch.fetch_tree`` returns them) and the registry's ``subpath``. Output
(:class:`RegistryContents`):

- **layout**: ``.sparkrun/registry.yaml`` (``registries: [{name, recipes|subpath, mods|
  mods_subpath, benchmarks|benchmark_subpath, tuning|tuning_subpath}]``): the entry whose
  recipes subpath is the registry's gives the mods, benchmarks and tuning subpaths; without one,
  the registry has recipes only (sparkrun: an omitted subpath serves nothing of that kind).
  Subpaths from the manifest (a remote document) are checked like sparkrun's
  ``assert_safe_registry_subpath``: relative, no ``.``/``..``, no backslash.
- **recipes**: every ``*.yaml``/``*.yml`` under the recipes subpath, recursively, none under a
  dot-directory; a ``.yaml`` and a ``.yml`` of one stem in one directory are one recipe (the
  ``.yaml``). Catalog name: the stem; where two files share a stem, each is named by its path
  relative to the recipes subpath without the extension (``qwen3.6/vllm/qwen3.6-27b``), as
  0.4.2's ``recipe_catalog_names``. Each is parsed and admitted by ``recipe_yaml`` (the same
  translation as ``catalog.import``) and validated by ``validate_recipe`` (the same validation
  as ``recipes.validate``).
- **mods**: every directory under the mods subpath that holds a ``run.sh`` (named
  ``mods/<relative dir>``, as recipes write it), with all the files below it.
- **benchmark_profiles**: ``*.yaml``/``*.yml`` under the benchmarks subpath, named as recipes
  are; each must be a YAML mapping (``safeload.BENCH_PLAN``).
- **tuning**: the names of the ``*.json`` files under the tuning subpath.

``slug``: a DNS-1123 subdomain of at most 63 characters (so it is a valid label value too) made
from a name; when it is not the name itself it ends in 8 hex digits of the name's SHA-256. A
file may be named as another's slug (``foo-<hash>.yaml`` beside ``Foo.yaml``): within a kind the
second item of a slug is a problem, never a second object of one name.

Bounds (a hostile commit never fails a sync): a recipe, mod, profile or tuning config whose path
passes :data:`PATH_MAX` characters or whose name passes :data:`NAME_MAX` (the status's bounds)
is a problem, not an item; a mod whose file paths are not plain relative paths (an empty
segment, a control character) is a mod with a problem. The registry's own subpath (admitted by
the CRD, which allows ``@`` and ``+`` where sparkrun's manifests do not) is read as it is; one
that is not a relative path inside the repository reads nothing.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from sparkrun_operator import safeload
from sparkrun_operator.api.recipe import RecipeIssue
from sparkrun_operator.recipe import recipe_yaml
from sparkrun_operator.recipe.resolve import validate_recipe

MANIFEST_PATH: Final = ".sparkrun/registry.yaml"
MANIFEST_BOUNDS: Final = safeload.Bounds("registry manifest", 64 * 1024, 8)
#: Recipes read from one registry at most (the RecipeRegistry status lists this many).
MAX_RECIPES: Final = 2048
MAX_MODS: Final = 256
MAX_PROFILES: Final = 256
MAX_TUNING: Final = 1024
#: A mod's files in all, at most (a ConfigMap holds 1 MiB with its keys and manifest).
MOD_MAX_BYTES: Final = 900 * 1024
SLUG_MAX: Final = 63
#: The longest path and name an item may have (``RecipeRegistry`` status: path 1024, names 512).
PATH_MAX: Final = 1024
NAME_MAX: Final = 512
#: The longest path of a file inside a mod (``plan/workload/hooksource.py`` reads no longer one).
MOD_PATH_MAX: Final = 255
_YAML: Final = (".yaml", ".yml")
_SAFE_SEGMENT: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,254}")
_SUBDOMAIN: Final = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*")
_KEYS: Final = {
    "recipes": ("subpath", "recipes"),
    "mods": ("mods_subpath", "mods"),
    "benchmarks": ("benchmark_subpath", "benchmarks"),
    "tuning": ("tuning_subpath", "tuning"),
}


@dataclass(frozen=True)
class Layout:
    """Where a registry's assets are, relative to the repository root (``None``: none)."""

    recipes: str
    mods: str | None = None
    benchmarks: str | None = None
    tuning: str | None = None
    name: str | None = None


@dataclass(frozen=True)
class RegistryRecipe:
    """One recipe file: ``spec`` (the Recipe's wire spec) is ``None`` when it cannot become a
    Recipe (``issues`` say why); otherwise ``issues`` are its validation findings."""

    catalog_name: str
    path: str
    slug: str
    spec: dict[str, Any] | None
    issues: list[RecipeIssue] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return self.spec is not None


@dataclass(frozen=True)
class RegistryMod:
    """A mod: its name as recipes write it (``mods/<dir>``), its files by path relative to its
    directory, their git modes, and why it cannot be used (``None``: it can)."""

    name: str
    slug: str
    files: dict[str, bytes]
    modes: dict[str, int] = field(default_factory=dict)
    problem: str | None = None


@dataclass(frozen=True)
class RegistryProfile:
    name: str
    path: str
    slug: str
    document: dict[str, Any] | None
    problem: str | None = None


@dataclass(frozen=True)
class RegistryProblem:
    path: str
    message: str


@dataclass
class RegistryContents:
    layout: Layout
    recipes: list[RegistryRecipe] = field(default_factory=list)
    mods: list[RegistryMod] = field(default_factory=list)
    benchmark_profiles: list[RegistryProfile] = field(default_factory=list)
    tuning: list[str] = field(default_factory=list)
    problems: list[RegistryProblem] = field(default_factory=list)


def slug(name: str) -> str:
    """A DNS-1123 subdomain (<= 63 characters) for ``name``; see the module's docstring."""
    if len(name) <= SLUG_MAX and _SUBDOMAIN.fullmatch(name):
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    base = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[: SLUG_MAX - 9].strip("-")
    return f"{base}-{digest}" if base else digest


def _safe_subpath(value: object) -> str | None:
    """A manifest's subpath, normalized (``""``: the repository root), or ``None`` if unsafe."""
    if not isinstance(value, str) or len(value) > 1024:
        return None
    if value in ("", "/"):
        return ""
    if value.startswith("/") or "\\" in value:
        return None
    segments = [s for s in value.split("/") if s]
    if not segments or not all(_SAFE_SEGMENT.fullmatch(s) for s in segments):
        return None
    return "/".join(segments)


def _own_subpath(value: str) -> str | None:
    """The registry's own (admitted) subpath, normalized, or ``None`` when it leaves the repository."""
    if value in ("", "/"):
        return ""
    segments = [s for s in value.split("/") if s]
    if (
        len(value) > PATH_MAX
        or value.startswith("/")
        or "\\" in value
        or not segments
        or any(s in (".", "..") or not s.isprintable() for s in segments)
    ):
        return None
    return "/".join(segments)


def _too_long(path: str, name: str) -> str | None:
    """Why an item of ``path`` named ``name`` is not read (``None``: it is)."""
    if len(path) > PATH_MAX:
        return f"path too long ({len(path)} characters, at most {PATH_MAX}): not read"
    if len(name) > NAME_MAX:
        return f"name too long ({len(name)} characters, at most {NAME_MAX}): not read"
    return None


class _Slugs:
    """The slugs given out within one kind: a second item of one slug is a problem."""

    def __init__(self, out: RegistryContents) -> None:
        self.taken: dict[str, str] = {}
        self.out = out

    def claim(self, name: str, path: str) -> str | None:
        value = slug(name)
        first = self.taken.setdefault(value, name)
        if first != name:
            message = f"{name!r} would be named {value}, as {first!r} is: not read"
            self.out.problems.append(RegistryProblem(path[:PATH_MAX], message))
            return None
        return value


def _entries(manifest: bytes) -> list[dict[str, Any]]:
    document = safeload.load_yaml(manifest, MANIFEST_BOUNDS)
    entries = document.get("registries") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise ValueError("the manifest has no `registries` list")
    return [e for e in entries if isinstance(e, dict)]


def _field(entry: Mapping[str, Any], kind: str) -> object:
    canonical, short = _KEYS[kind]
    return entry.get(canonical, entry.get(short, "recipes" if kind == "recipes" else ""))


def manifest_subpaths(manifest: bytes) -> list[str]:
    """Every safe subpath a manifest declares (what a fetch returns files under besides the
    registry's own); ``[]`` for a manifest that cannot be read."""
    try:
        entries = _entries(manifest)
    except ValueError:
        return []
    found = {_safe_subpath(_field(e, kind)) for e in entries[:64] for kind in _KEYS}
    return sorted(s for s in found if s)  # NB: "" (root or none) adds nothing: never the whole repo


def layout_of(files: Mapping[str, bytes], subpath: str) -> tuple[Layout, list[RegistryProblem]]:
    """The registry's layout: its manifest entry for ``subpath``, else recipes only."""
    recipes = _own_subpath(subpath) or ""
    manifest = files.get(MANIFEST_PATH)
    if manifest is None:
        return Layout(recipes), []
    try:
        entries = _entries(manifest)
    except ValueError as error:
        return Layout(recipes), [RegistryProblem(MANIFEST_PATH, str(error))]
    for entry in entries:
        if _safe_subpath(_field(entry, "recipes")) != recipes:
            continue
        paths = {kind: _safe_subpath(_field(entry, kind)) for kind in ("mods", "benchmarks", "tuning")}
        problems = [
            RegistryProblem(
                MANIFEST_PATH, f"{kind} subpath {str(_field(entry, kind))[:80]!r} is not a safe relative path"
            )
            for kind, value in paths.items()
            if value is None
        ]
        name = entry.get("name")
        return Layout(
            recipes,
            mods=paths["mods"] or None,
            benchmarks=paths["benchmarks"] or None,
            tuning=paths["tuning"] or None,
            name=name if isinstance(name, str) else None,
        ), problems
    return Layout(recipes), []


def _under(files: Mapping[str, bytes], base: str) -> list[str]:
    """Paths under ``base`` (relative to it), none inside a dot-directory below ``base``."""
    prefix = f"{base}/" if base else ""
    out = []
    for path in files:
        if not path.startswith(prefix):
            continue
        rel = path[len(prefix) :]
        if any(part.startswith(".") for part in rel.split("/")[:-1]):
            continue
        out.append(rel)
    return sorted(out)


def asset_names(rels: list[str]) -> dict[str, str]:
    """Relative YAML paths -> catalog names (0.4.2: one per stem per directory, ``.yaml`` over
    ``.yml``; the stem, or the path without extension where stems collide)."""
    chosen: dict[tuple[str, str], str] = {}
    for ext in _YAML:
        for rel in rels:
            if rel.endswith(ext):
                directory, base = posixpath.split(rel)
                chosen.setdefault((directory, base[: -len(ext)]), rel)
    counts = Counter(stem for _, stem in chosen)
    named = {}
    for (directory, stem), rel in chosen.items():
        named[rel] = posixpath.join(directory, stem) if counts[stem] > 1 else stem
    return dict(sorted(named.items()))


def read_recipe(catalog_name: str, path: str, content: bytes) -> RegistryRecipe:
    """One recipe file, parsed, admitted and validated as ``catalog.import`` and
    ``recipes.validate`` do."""
    name = slug(catalog_name)
    try:
        text = content.decode("utf-8")
        _raw, spec = recipe_yaml.load_spec(text)
        recipe_yaml.admit(recipe_yaml.recipe_object(name, spec, "default", {}))
    except UnicodeDecodeError:
        return RegistryRecipe(
            catalog_name, path, name, None, [RecipeIssue(severity="error", message="not UTF-8 text")]
        )
    except ValueError as error:
        return RegistryRecipe(
            catalog_name, path, name, None, [RecipeIssue(severity="error", message=str(error))]
        )
    return RegistryRecipe(catalog_name, path, name, spec.to_wire(), list(validate_recipe(spec)))


def _recipes(files: Mapping[str, bytes], layout: Layout, out: RegistryContents) -> None:
    names = asset_names(_under(files, layout.recipes))
    slugs = _Slugs(out)
    for index, (rel, catalog_name) in enumerate(names.items()):
        path = posixpath.join(layout.recipes, rel)
        if index >= MAX_RECIPES:
            out.problems.append(
                RegistryProblem(path[:PATH_MAX], f"more than {MAX_RECIPES} recipes: the rest are not read")
            )
            break
        too_long = _too_long(path, catalog_name)
        if too_long:
            out.problems.append(RegistryProblem(path[:PATH_MAX], f"recipe: {too_long}"))
            continue
        if slugs.claim(catalog_name, path) is None:
            continue
        out.recipes.append(read_recipe(catalog_name, path, files[path]))


def _mod_path_problem(paths: list[str]) -> str | None:
    for path in paths:
        parts = path.split("/")
        if len(path) > MOD_PATH_MAX or any(p in ("", ".", "..") or not p.isprintable() for p in parts):
            shown = path[:80].encode("unicode_escape").decode()
            return f"file {shown!r} is not a relative path of at most {MOD_PATH_MAX} characters"
    return None


def _mods(files: Mapping[str, bytes], modes: Mapping[str, int], base: str, out: RegistryContents) -> None:
    rels = _under(files, base)
    dirs = sorted(
        {posixpath.dirname(r) for r in rels if posixpath.basename(r) == "run.sh" and posixpath.dirname(r)}
    )
    slugs = _Slugs(out)
    for directory in dirs[:MAX_MODS]:
        name, where = f"mods/{directory}", posixpath.join(base, directory)
        too_long = _too_long(where, name)
        if too_long:
            out.problems.append(RegistryProblem(where[:PATH_MAX], f"mod: {too_long}"))
            continue
        mod_slug = slugs.claim(directory, where)
        if mod_slug is None:
            continue
        inside = {r[len(directory) + 1 :]: r for r in rels if r.startswith(directory + "/")}
        contents = {k: files[posixpath.join(base, r)] for k, r in inside.items()}
        total = sum(len(v) for v in contents.values())
        problem = f"its files hold {total} bytes (at most {MOD_MAX_BYTES})" if total > MOD_MAX_BYTES else None
        problem = _mod_path_problem(sorted(contents)) or problem
        out.mods.append(
            RegistryMod(
                name=name,
                slug=mod_slug,
                files=contents,
                modes={k: modes.get(posixpath.join(base, r), 0o100644) for k, r in inside.items()},
                problem=problem,
            )
        )
    if len(dirs) > MAX_MODS:
        out.problems.append(RegistryProblem(base, f"more than {MAX_MODS} mods: the rest are not read"))


def _profiles(files: Mapping[str, bytes], base: str, out: RegistryContents) -> None:
    slugs = _Slugs(out)
    for index, (rel, name) in enumerate(asset_names(_under(files, base)).items()):
        path = posixpath.join(base, rel)
        if index >= MAX_PROFILES:
            out.problems.append(
                RegistryProblem(
                    path[:PATH_MAX], f"more than {MAX_PROFILES} benchmark profiles: the rest are not read"
                )
            )
            break
        too_long = _too_long(path, name)
        if too_long:
            out.problems.append(RegistryProblem(path[:PATH_MAX], f"benchmark profile: {too_long}"))
            continue
        if slugs.claim(name, path) is None:
            continue
        try:
            document = safeload.load_yaml(files[path], safeload.BENCH_PLAN)
        except (ValueError, UnicodeDecodeError) as error:
            out.benchmark_profiles.append(RegistryProfile(name, path, slug(name), None, str(error)[:512]))
            continue
        if not isinstance(document, dict):
            out.benchmark_profiles.append(RegistryProfile(name, path, slug(name), None, "not a YAML mapping"))
            continue
        out.benchmark_profiles.append(RegistryProfile(name, path, slug(name), document))


def read_registry(
    files: Mapping[str, bytes], subpath: str, modes: Mapping[str, int] | None = None
) -> RegistryContents:
    """Everything a registry's commit offers (see the module's docstring)."""
    if _own_subpath(subpath) is None:
        message = "the registry's subpath is not a relative path inside the repository: nothing read"
        return RegistryContents(layout=Layout(""), problems=[RegistryProblem(subpath[:PATH_MAX], message)])
    layout, problems = layout_of(files, subpath)
    out = RegistryContents(layout=layout, problems=problems)
    _recipes(files, layout, out)
    if layout.mods is not None:
        _mods(files, modes or {}, layout.mods, out)
    if layout.benchmarks is not None:
        _profiles(files, layout.benchmarks, out)
    if layout.tuning is not None:
        for rel in (r for r in _under(files, layout.tuning) if r.endswith(".json")):
            where = posixpath.join(layout.tuning, rel)
            too_long = _too_long(where, rel[: -len(".json")])
            if too_long:
                out.problems.append(RegistryProblem(where[:PATH_MAX], f"tuning config: {too_long}"))
            elif len(out.tuning) < MAX_TUNING:
                out.tuning.append(rel[: -len(".json")])
    return out
