"""The repository's own files, as git sees them (tracked, and untracked but not ignored): what a
clone holds, for the tests that scan the tree."""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def tree_files() -> list[str]:
    """Repository-relative paths of every file a clone of the working tree would hold."""
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        check=True,
        capture_output=True,
    ).stdout
    return [name for name in out.decode().split("\0") if name and (REPO / name).is_file()]
