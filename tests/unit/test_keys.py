"""Every label, annotation, field manager and shared object name is spelled once: render/keys.py.

The product's modules are parsed (not grepped, so docstrings that mention a key are fine) and
any string constant that starts with ``sparkrun.dev/`` outside the keys module fails the test,
as does a second spelling of a shared object name or a field manager.
"""

from __future__ import annotations

import ast
from pathlib import Path

from sparkrun_operator.render import keys

PACKAGE = Path(keys.__file__).resolve().parents[1]
KEYS_MODULE = Path(keys.__file__).resolve()
#: Names that must only come from the keys module (values that are not prefixed keys).
SHARED_NAMES = {
    keys.GATEWAY_ALIASES_CONFIG_MAP,
    keys.GATEWAY_MANAGER,
    keys.DAEMON_API_MANAGER,
    keys.MANAGED_BY_SHIM,
}
#: Where one of SHARED_NAMES is legitimately something else (a process's display name).
NOT_A_KEY = {
    ("cli/demo.py", "sparkrun-gateway"),
    ("cli/demo.py", "sparkrun-shim"),
    ("shim/state.py", "sparkrun-shim"),  # the default controller id /v1/info reports (ShimConfig)
}


def _spelled_keys(path: Path) -> list[tuple[int, str]]:
    return _spelled_in(path.read_text(), path.relative_to(PACKAGE).as_posix())


def _spelled_in(text: str, rel: str) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(text, filename=rel)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            value = node.value
            if value.startswith(f"{keys.PREFIX}/") or (
                value in SHARED_NAMES and (rel, value) not in NOT_A_KEY
            ):
                found.append((node.lineno, value))
    return found


def test_keys_are_spelled_only_in_the_keys_module() -> None:
    offenders = {
        f"{path.relative_to(PACKAGE)}:{line}": value
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.resolve() != KEYS_MODULE
        for line, value in _spelled_keys(path)
    }
    assert offenders == {}


def test_the_scan_sees_a_spelled_key() -> None:
    """The scanner itself finds a literal key, the literal head of an f-string, and a second
    spelling of a shared name, and keeps a docstring that only mentions a key."""
    sample = (PACKAGE / "gateway" / "kube.py").read_text()
    planted = sample + (
        '\nEXTRA = "sparkrun.dev/extra"\nFSTR = f"sparkrun.dev/{EXTRA}"\n'
        f'ALIASES = "{keys.GATEWAY_ALIASES_CONFIG_MAP}"\n'
    )
    values = [value for _, value in _spelled_in(planted, "gateway/kube.py")]
    assert sorted(values) == sorted(["sparkrun.dev/extra", "sparkrun.dev/", keys.GATEWAY_ALIASES_CONFIG_MAP])
    assert _spelled_in(sample, "gateway/kube.py") == []


def test_keys_are_unique_and_within_the_name_limit() -> None:
    own = {
        name: value
        for name, value in vars(keys).items()
        if name.startswith(("LABEL_", "ANNOTATION_")) and isinstance(value, str)
        if value.startswith(f"{keys.PREFIX}/")
    }
    values = list(own.values())
    assert sorted(v for v in set(values) if values.count(v) > 1) == []
    assert [v for v in values if len(v.split("/", 1)[1]) > 63] == []
