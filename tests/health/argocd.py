"""Runs the Argo CD health scripts with Debian's ``lua5.1`` as Argo CD runs them: ``obj`` a
global table, the script's return value the health (``harness.lua``). The object is handed
over as a Lua table literal written here (no third-party Lua library)."""

from __future__ import annotations

import math
import subprocess
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SCRIPTS = REPO / "integrations" / "argocd" / "health"
HARNESS = HERE / "harness.lua"


def lua_string(text: str) -> str:
    """A Lua 5.1 string literal of ``text`` (UTF-8 bytes; every byte that is not printable
    ASCII, and the quote and backslash, as a decimal escape)."""
    out = ['"']
    for byte in text.encode():
        if 32 <= byte < 127 and byte not in (34, 92):
            out.append(chr(byte))
        else:
            out.append(f"\\{byte:03d}")
    out.append('"')
    return "".join(out)


def lua_value(value: Any) -> str:
    if value is None:
        return "nil"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else "0"
    if isinstance(value, str):
        return lua_string(value)
    if isinstance(value, list):
        return "{" + ",".join(lua_value(item) for item in value) + "}"
    if isinstance(value, dict):
        return "{" + ",".join(f"[{lua_string(str(k))}]={lua_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"not a JSON value: {type(value).__name__}")


def health(lua: str, kind: str, obj: Any, tmp: Path) -> tuple[str, str]:
    """``(status, message)`` of ``kind``'s script on ``obj``; AssertionError on a Lua error."""
    chunk = tmp / "object.lua"
    chunk.write_text("return " + lua_value(obj) + "\n")
    result = subprocess.run(
        [lua, str(HARNESS), str(SCRIPTS / f"{kind}.lua"), str(chunk)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if result.returncode != 0:
        raise AssertionError(f"{kind}.lua failed: {result.stdout}{result.stderr}")
    status, _, message = result.stdout.rstrip("\n").partition("\t")
    return status, message
