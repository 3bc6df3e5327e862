"""The private parts of libraries the product relies on still exist, and every one is listed here.

The product subclasses uvicorn's protocol classes, sets two of aiohttp's ``ClientSession`` slots,
calls huggingface_hub helpers from its private modules and builds its YAML loader on PyPI's
libyaml binding. pyproject.toml bounds those packages below the next release that may drop them
(ADR 0017); this test is what fails, naming the module and the attribute, when a version inside
the bounds has dropped one anyway, or when the bounds are raised without looking.

``PRIVATE`` is the one list: a scan of the product's sources fails on a private import or a
foreign underscore attribute that it does not hold, so a new use cannot slip in unlisted.
"""

from __future__ import annotations

import ast
import asyncio
import importlib
import importlib.metadata
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

PRODUCT = Path(__file__).resolve().parents[2] / "operator" / "sparkrun_operator"

#: ``module:object`` -> the attributes the product uses on it (for a class: on its instances too).
PRIVATE: dict[str, tuple[str, ...]] = {
    # runtime/download.py: the resumable Range download and its request headers
    "huggingface_hub.file_download:http_get": (),
    "huggingface_hub.utils._headers:build_hf_headers": (),
    "huggingface_hub.utils._paths:filter_repo_objects": (),
    "huggingface_hub.utils.tqdm:disable_progress_bars": (),
    # runtime/download.py sets these module constants, which the library reads at call time
    "huggingface_hub.constants:HF_HUB_DISABLE_XET": (),
    "huggingface_hub.constants:DOWNLOAD_CHUNK_SIZE": (),
    "huggingface_hub.constants:ENDPOINT": (),
    # gateway/server.py: HeaderDeadlineProtocol (request-head deadline and size limit)
    "uvicorn.protocols.http.httptools_impl:HttpToolsProtocol": (
        "data_received",
        "connection_made",
        "connection_lost",
        "on_message_begin",
        "on_headers_complete",
        "on_message_complete",
        "transport",
        "loop",
        "cycle",
        "scope",
    ),
    # shim/listener.py: GuardedProtocol (the same limits on h11)
    "uvicorn.protocols.http.h11_impl:H11Protocol": (
        "data_received",
        "connection_made",
        "connection_lost",
        "on_response_complete",
        "_unset_keepalive_if_required",
        "conn",
        "transport",
        "loop",
    ),
    # shim/server.py: _Server overrides capture_signals; serve() watches started/should_exit
    "uvicorn:Server": ("capture_signals", "started", "should_exit"),
    # k8s/connection.py: the proxy resolved once; per-request environment lookups off
    "aiohttp.helpers:get_env_proxy_for_url": (),
    "aiohttp:ClientSession": ("_default_proxy_auth", "_trust_env"),
    # safeload.py: libyaml's event parser under PyYAML's composer
    "yaml._yaml:CParser": (),
}

#: Packages whose submodules are not their documented surface: importing from one is private.
_INTERNAL_BELOW = {"uvicorn", "aiohttp", "huggingface_hub"}
#: Documented submodules of those.
_PUBLIC_SUBMODULES = {"huggingface_hub.errors", "huggingface_hub.constants"}
#: Underscore names of the standard library the product may use: documented API, or (argparse's
#: _SubParsersAction) a type that only annotations name.
_STDLIB_PUBLIC = {"_asdict", "_replace", "_fields", "_exit", "_getframe", "_SubParsersAction"}


def _version(module: str) -> str:
    top = module.split(".")[0]
    dist = {"yaml": "PyYAML", "huggingface_hub": "huggingface-hub"}.get(top, top)
    try:
        return f"{dist} {importlib.metadata.version(dist)}"
    except importlib.metadata.PackageNotFoundError:
        return f"{dist} (not installed)"


def _resolve(entry: str) -> Any:
    module_name, _, name = entry.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        pytest.fail(
            f"private API gone: module {module_name} cannot be imported ({_version(module_name)}): {exc}"
        )
    if not hasattr(module, name):
        pytest.fail(f"private API gone: {module_name}.{name} does not exist ({_version(module_name)})")
    return getattr(module, name)


def _uvicorn_protocol(cls: type[Any]) -> Any:
    import uvicorn
    from uvicorn.server import ServerState

    async def noop(scope: Any, receive: Any, send: Any) -> None:
        return None

    config = uvicorn.Config(noop, lifespan="off", log_config=None)
    config.load()
    loop = asyncio.new_event_loop()
    try:
        return cls(config=config, server_state=ServerState(), app_state={}, _loop=loop)
    finally:
        loop.close()


def _instance(entry: str, obj: Any) -> Any:
    """An instance of ``obj`` where its instance attributes matter (none for the others)."""
    if entry.startswith("uvicorn.protocols."):
        return _uvicorn_protocol(obj)
    if entry == "uvicorn:Server":
        import uvicorn

        return obj(uvicorn.Config(lambda *a: None, log_config=None))
    return None


@pytest.mark.parametrize("entry", sorted(PRIVATE))
def test_private_api_is_there(entry: str) -> None:
    obj = _resolve(entry)
    instance = _instance(entry, obj)
    where = entry.replace(":", ".")
    for attr in PRIVATE[entry]:
        if entry == "aiohttp:ClientSession":  # slots: __setattr__ warns on any name outside ATTRS
            present = attr in obj.ATTRS
        else:
            present = hasattr(obj, attr) or (instance is not None and hasattr(instance, attr))
        assert present, f"private API gone: {where}.{attr} does not exist ({_version(entry)})"


def _sources() -> Iterator[tuple[Path, ast.Module]]:
    for path in sorted(PRODUCT.rglob("*.py")):
        yield path, ast.parse(path.read_text(), str(path))


def _defined_names(trees: list[ast.Module]) -> set[str]:
    """Underscore names the product defines itself: functions, classes, its own attributes."""
    names: set[str] = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                    names.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
    return names


def _third_party(module: str) -> bool:
    return not module.startswith(("sparkrun_operator", ".")) and module.split(".")[0] not in {
        "__future__",
        *sys.stdlib_module_names,
    }


def _private_module(module: str) -> bool:
    parts = module.split(".")
    if any(p.startswith("_") for p in parts):
        return True
    return parts[0] in _INTERNAL_BELOW and len(parts) > 1 and module not in _PUBLIC_SUBMODULES


def _private_uses(path: Path, tree: ast.Module, defined: set[str]) -> Iterator[str]:
    listed_attrs = {a for attrs in PRIVATE.values() for a in attrs}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and _third_party(node.module):
            for alias in node.names:
                if _private_module(node.module) or alias.name.startswith("_"):
                    yield f"{node.module}:{alias.name}"
        elif isinstance(node, ast.Attribute):
            name = node.attr
            foreign = name.startswith("_") and not name.startswith("__") and name not in defined
            if foreign and name not in _STDLIB_PUBLIC and name not in listed_attrs:
                yield f"{path.relative_to(PRODUCT)}: attribute {name} (line {node.lineno})"
            module, _, attr = ast.unparse(node).rpartition(".")  # `aiohttp.helpers.x`: a submodule's x
            if module.split(".")[0] in _INTERNAL_BELOW and _private_module(module):
                yield f"{module}:{attr}"


def test_every_private_use_is_listed() -> None:
    sources = list(_sources())
    defined = _defined_names([tree for _, tree in sources])
    uses = {use for path, tree in sources for use in _private_uses(path, tree, defined)}
    unlisted = sorted(u for u in uses if u not in PRIVATE)
    assert not unlisted, (
        "private API used but not listed in tests/unit/test_private_api.py PRIVATE (add it there and "
        f"bound the package in pyproject.toml): {unlisted}"
    )


def test_the_scan_sees_the_known_uses() -> None:
    """The scan is not vacuous: it finds the uses this file lists."""
    sources = list(_sources())
    defined = _defined_names([tree for _, tree in sources])
    uses = {use for path, tree in sources for use in _private_uses(path, tree, defined)}
    for expected in (
        "huggingface_hub.utils._headers:build_hf_headers",
        "uvicorn.protocols.http.h11_impl:H11Protocol",
        "aiohttp.helpers:get_env_proxy_for_url",
        "yaml._yaml:CParser",
    ):
        assert expected in uses


def test_the_scan_catches_a_new_private_use() -> None:
    source = "from uvicorn.protocols.utils import get_path_with_query_string\nsession._connector_owner = 1\n"
    uses = set(_private_uses(PRODUCT / "new.py", ast.parse(source), set()))
    assert uses == {
        "uvicorn.protocols.utils:get_path_with_query_string",
        "new.py: attribute _connector_owner (line 2)",
    }
