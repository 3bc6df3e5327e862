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
    found = []
    rel = path.relative_to(PACKAGE).as_posix()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
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


def test_the_scan_sees_a_spelled_key(tmp_path: Path) -> None:
    sample = PACKAGE / "gateway" / "kube.py"
    text = sample.read_text() + '\nEXTRA = "sparkrun.dev/extra"\nFSTR = f"sparkrun.dev/{EXTRA}"\n'
    probe = tmp_path / "probe.py"
    probe.write_text(text)
    tree = ast.parse(probe.read_text())
    constants = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    assert "sparkrun.dev/extra" in constants
    assert "sparkrun.dev/" in constants  # the literal head of the f-string


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
