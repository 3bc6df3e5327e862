"""The product has one error tree: one root, one class per name (issue 25, item 2).

An AST scan of ``sparkrun_operator`` (no module is imported, so a class defined in a function or
behind an optional import counts too) finds every exception class, resolving each base through
the module's own classes, its imports of product modules (``from sparkrun_operator.x import Y``,
``from sparkrun_operator import x``, relative imports) and the builtins. It fails when

(a) two exception classes anywhere in the product share a name: a name means one thing, and an
    ``except NotFound`` must not depend on which module it was imported from. The exception is
    the public Python client, ``client.py``: it is a library for the daemon API's callers, raised
    from HTTP answers, whose ``DaemonError`` and ``JobFailed`` keep the names its users catch
    (documented in ``docs/architecture.md``, "Errors");
(b) an exception class of a server package (``k8s``, ``ops``, ``shim``, ``gateway``,
    ``controllers``) does not descend from ``sparkrun_operator.errors.SparkrunError``: each
    layer's errors are a branch of the one tree, so ``except SparkrunError`` sees every error the
    server raises on purpose.
"""

from __future__ import annotations

import ast
import builtins
import importlib
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import sparkrun_operator

PACKAGE = Path(sparkrun_operator.__file__).resolve().parent
ROOT = ("sparkrun_operator.errors", "SparkrunError")
SERVER_PACKAGES = ("k8s", "ops", "shim", "gateway", "controllers")
#: The public client keeps its own names: a library for callers (see the module doc).
CLIENT_MODULE = "sparkrun_operator.client"


@dataclass(frozen=True)
class Found:
    """One class definition: where, and its bases as written."""

    module: str
    name: str
    line: int
    bases: tuple[ast.expr, ...]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _absolute(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


class Product:
    """Every module of the package, parsed: its classes and what its names are imported from."""

    def __init__(self) -> None:
        self.classes: dict[str, dict[str, Found]] = {}
        self.all_classes: list[Found] = []
        #: module -> local name -> (source module, name in it); name "" when a module is imported.
        self.imports: dict[str, dict[str, tuple[str, str]]] = {}
        for path in sorted(PACKAGE.rglob("*.py")):
            module = _module_name(path)
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            local: dict[str, Found] = {}
            names: dict[str, tuple[str, str]] = {}
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef):
                    found = Found(module, node.name, node.lineno, tuple(node.bases))
                    self.all_classes.append(found)
                    local.setdefault(node.name, found)
                elif isinstance(node, ast.ImportFrom):
                    source = _absolute(module, path.name == "__init__.py", node)
                    for alias in node.names:
                        names[alias.asname or alias.name] = (source, alias.name)
                elif isinstance(node, ast.Import):
                    for alias in node.names:
                        if alias.asname:
                            names[alias.asname] = (alias.name, "")
                        else:
                            names[alias.name.split(".")[0]] = (alias.name.split(".")[0], "")
            self.classes[module] = local
            self.imports[module] = names

    def _lookup(
        self, module: str, name: str, seen: frozenset[tuple[str, str]] = frozenset()
    ) -> tuple[str, str]:
        """Where ``name`` as seen from ``module`` is defined: a product class, a product module
        (name ""), a builtin (module "builtins") or something outside (its dotted origin)."""
        if (module, name) in seen:
            return ("?", name)
        seen = seen | {(module, name)}
        if name in self.classes.get(module, {}):
            return (module, name)
        if name in self.imports.get(module, {}):
            source, attr = self.imports[module][name]
            if not attr:
                return (source, "")
            if f"{source}.{attr}" in self.classes:  # ``from package import module``
                return (f"{source}.{attr}", "")
            if source in self.classes:
                return self._lookup(source, attr, seen)
            return (source, attr)
        if hasattr(builtins, name):
            return ("builtins", name)
        return ("?", name)

    def resolve(self, module: str, base: ast.expr) -> tuple[str, str]:
        """The class a base expression names (see :meth:`_lookup`)."""
        if isinstance(base, ast.Name):
            return self._lookup(module, base.id)
        if isinstance(base, ast.Attribute):
            owner = self.resolve(module, base.value)
            if owner[1] == "" and owner[0] in self.classes:
                return self._lookup(owner[0], base.attr)
            if owner[1] == "":
                return (owner[0], base.attr)
            return ("?", ast.unparse(base))
        if isinstance(base, ast.Subscript):  # ``Generic[T]``
            return self.resolve(module, base.value)
        return ("?", ast.unparse(base))

    def ancestors(self, found: Found) -> set[tuple[str, str]]:
        """Every class ``found`` descends from (outside the product: the named class only)."""
        out: set[tuple[str, str]] = set()
        todo = [(found.module, b) for b in found.bases]
        while todo:
            module, base = todo.pop()
            key = self.resolve(module, base)
            if key in out:
                continue
            out.add(key)
            parent = self.classes.get(key[0], {}).get(key[1])
            if parent is not None:
                todo.extend((parent.module, b) for b in parent.bases)
        return out

    def is_exception(self, found: Found) -> bool:
        return any(_exception_class(module, name) for module, name in self.ancestors(found))


def _exception_class(module: str, name: str) -> bool:
    """Whether ``module.name`` outside the product (a builtin, a library's) is an exception class."""
    if module == "?" or module.startswith("sparkrun_operator"):
        return False
    try:
        value = getattr(importlib.import_module(module), name, None)
    except ImportError:
        return False
    return isinstance(value, type) and issubclass(value, BaseException)


def _product() -> Product:
    return Product()


def _server(module: str) -> bool:
    parts = module.split(".")
    return len(parts) > 1 and parts[1] in SERVER_PACKAGES


def test_no_two_exception_classes_share_a_name() -> None:
    product = _product()
    by_name: dict[str, list[Found]] = defaultdict(list)
    for found in product.all_classes:
        if found.module != CLIENT_MODULE and product.is_exception(found):
            by_name[found.name].append(found)
    twice = {
        name: [f"{f.module}:{f.line}" for f in where] for name, where in by_name.items() if len(where) > 1
    }
    assert not twice, f"exception classes defined more than once (one name, one class): {twice}"


def test_every_server_exception_descends_from_the_root() -> None:
    product = _product()
    exceptions = [f for f in product.all_classes if _server(f.module) and product.is_exception(f)]
    assert len(exceptions) > 20, "the scan found too few exception classes: it is broken"
    outside = sorted(f"{f.module}.{f.name}" for f in exceptions if ROOT not in product.ancestors(f))
    assert not outside, f"exception classes of the server packages outside SparkrunError's tree: {outside}"


def test_the_scan_resolves_bases_through_imports() -> None:
    """The scan itself: a base imported by a module alias or re-exported resolves to the root."""
    product = _product()
    daemon_error = product.classes["sparkrun_operator.ops.errors"]["DaemonError"]
    not_found = product.classes["sparkrun_operator.ops.errors"]["NotFound"]
    kube_not_found = product.classes["sparkrun_operator.k8s.errors"]["KubeNotFound"]
    assert product.is_exception(kube_not_found)
    assert ROOT in product.ancestors(kube_not_found)
    assert ("sparkrun_operator.ops.errors", "DaemonError") in product.ancestors(not_found)
    assert ("builtins", "Exception") in product.ancestors(daemon_error)
    plain = [f for f in product.all_classes if f.module == "sparkrun_operator.ops.catalog"]
    assert plain
    assert not any(product.is_exception(f) for f in plain)
