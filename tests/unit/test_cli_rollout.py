"""``sparkrun-k8s rollout``: shell completion, arguments and the text a person reads.

Tested: completion through argcomplete's own protocol (``_ARGCOMPLETE``, ``COMP_LINE``,
``COMP_POINT``, the answer written to ``_ARGCOMPLETE_STDOUT_FILENAME``) on the installed console
script: ``sparkrun-k8s rollout u<TAB>`` offers ``undo`` and ``unpin``; completion works with the
testbed package absent; the console script passes argcomplete's marker check (its shell hook
completes only scripts whose module says ``PYTHON_ARGCOMPLETE_OK``); a revision below 1 is a usage
error (exit 2); the history table marks the current revision and shows pins, drift and values that
look like markup as they are, control characters in values neutralised. Against a cluster:
tests/testbed/test_rollout_cli.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from sparkrun_operator.cli.rollout import history_text
from tests import completion
from tests.completion import complete


def test_completion_of_a_rollout_verb(tmp_path: Path) -> None:
    assert complete("sparkrun-k8s rollout u", tmp_path) == ["undo", "unpin"]
    assert complete("sparkrun-k8s ro", tmp_path) == ["rollout"]
    assert "--to-revision" in complete("sparkrun-k8s rollout undo w --to", tmp_path)


def test_completion_without_the_testbed(tmp_path: Path) -> None:
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    # NB: an import of sparkrun_testbed fails as when the distribution is not installed
    (shadow / "sparkrun_testbed.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'sparkrun_testbed'\", name='sparkrun_testbed')\n"
    )
    env = {"PYTHONPATH": str(shadow)}
    assert "testbed" in complete("sparkrun-k8s te", tmp_path, **env)
    assert complete("sparkrun-k8s testbed ", tmp_path, **env) == ["--help", "-h"]  # a name only
    assert complete("sparkrun-k8s rollout h", tmp_path, **env) == ["history"]


def test_the_console_script_is_marked_for_completion() -> None:
    done = subprocess.run(
        [sys.executable, "-W", "ignore", "-m", "argcomplete._check_console_script", completion.SPARKRUN_K8S],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_revision_below_one_is_a_usage_error() -> None:
    done = subprocess.run(
        [completion.SPARKRUN_K8S, "rollout", "undo", "w", "--to-revision", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "1 or more" in done.stderr


def test_history_text_marks_the_current_revision() -> None:
    change = {"field": "engine.image", "source": "workload", "before": '"[bold]a"', "after": '"b"'}
    text = history_text(
        {
            "workload": "w",
            "namespace": "ns",
            "apply": "OnRequest",
            "pinned": 1,
            "revisions": [
                {"number": 1, "hash": "0123456789", "cause": "Created", "current": False, "changes": []},
                {
                    "number": 2,
                    "hash": "abcdef0123",
                    "cause": "Rollback",
                    "rollback_of": 1,
                    "current": True,
                    "served_from": "2026-12-06T12:00:00Z",
                    "changes": [change] * 5,
                },
            ],
            "drift": {
                "reason": "RevisionPinned",
                "revision": "fedcba9876",
                "since": "2026-12-06T12:05:00Z",
                "changes": [change],
            },
        }
    )
    rows = {
        line.split()[1] if line.startswith("*") else line.split()[0]: line
        for line in text.splitlines()
        if line.strip()
    }
    assert rows["2"].startswith("*")
    assert "Rollback of 1" in rows["2"]
    assert "2026-12-06 12:00" in rows["2"]
    assert "+2 more" in text  # NB: the CHANGES column folds
    assert not rows["1"].startswith("*")
    assert "pinned to revision 1" in text
    assert "drift pending: fedcba9876 (RevisionPinned, since 2026-12-06 12:05)" in text
    assert '"[bold]a" -> "b"' in text


def test_text_output_neutralises_control_characters() -> None:
    from sparkrun_operator.cli.common import printable

    hostile = {"changes": [{"after": "\x1b]52;c;cGF3bmVk\x07x", "n": 1}], "name": "ok\x9b2J"}
    assert printable(hostile) == {"changes": [{"after": "?]52;c;cGF3bmVk?x", "n": 1}], "name": "ok?2J"}
