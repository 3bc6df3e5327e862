"""What the installed ``sparkrun-k8s`` offers for a TAB, through argcomplete's own protocol: the
line in ``COMP_LINE``/``COMP_POINT``, ``_ARGCOMPLETE=1``, the candidates written to
``_ARGCOMPLETE_STDOUT_FILENAME`` (what the shell hook does)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

#: the console script as a user runs it
SPARKRUN_K8S = str(Path(sys.executable).with_name("sparkrun-k8s"))


def complete(line: str, tmp_path: Path, *, inherit: bool = True, **env: str) -> list[str]:
    """The candidates for a TAB at the end of ``line``, sorted. ``inherit=False``: only ``PATH``
    of this process's environment (no ``KUBECONFIG``, no proxy), plus ``env``."""
    answer = tmp_path / "completions"
    base = dict(os.environ) if inherit else {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    full = {
        **base,
        "_ARGCOMPLETE": "1",
        "_ARGCOMPLETE_IFS": "\n",
        "_ARGCOMPLETE_STDOUT_FILENAME": str(answer),
        "COMP_LINE": line,
        "COMP_POINT": str(len(line)),
        "COMP_TYPE": "9",
        **env,
    }
    done = subprocess.run([SPARKRUN_K8S], env=full, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return sorted(word.strip() for word in answer.read_text().split("\n") if word.strip())
