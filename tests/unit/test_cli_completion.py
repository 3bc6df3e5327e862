"""``sparkrun-k8s``'s help and shell completion, without a cluster.

Completion runs the real console script the way argcomplete's shell hook does (``COMP_LINE``
in the environment, the candidates written to ``_ARGCOMPLETE_STDOUT_FILENAME``). The object
name completers (cli/complete.py) are held to their bound against a real loopback server that
accepts and never answers, and complete nothing without a cluster. The terminal test with a
real bash is tests/cli/test_completion.py.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from sparkrun_operator.api.resources import INFERENCE_BENCHMARK, INFERENCE_CLUSTER
from sparkrun_operator.cli import complete, main
from tests import completion

SPARKRUN_K8S = completion.SPARKRUN_K8S

#: a TAB in a clean environment (no KUBECONFIG of this machine's)
complete_line = functools.partial(completion.complete, inherit=False)


def _help(verb: str) -> str:
    stream = io.StringIO()
    with contextlib.redirect_stdout(stream), pytest.raises(SystemExit):
        main.main([verb, "--help"])
    return stream.getvalue()


def test_the_overview_lists_every_command_once_in_a_group() -> None:
    grouped = [name for _title, names in main.GROUPS for name in names]
    assert sorted(grouped) == sorted(main.COMMANDS)
    stream = io.StringIO()
    with contextlib.redirect_stdout(stream), pytest.raises(SystemExit):
        main.build_parser(only="").parse_args(["--help"])
    text = stream.getvalue()
    for title, names in main.GROUPS:
        assert f"{title}:" in text
        for name in names:
            assert f"\n  {name} " in text, name
    assert "register-python-argcomplete" in text
    assert "exit codes" in text


@pytest.mark.parametrize("verb", list(main.COMMANDS))
def test_every_verb_has_a_description_examples_and_exit_codes(verb: str) -> None:
    text = _help(verb)
    usage, _, rest = text.partition("\n\n")
    assert usage.startswith(f"usage: sparkrun-k8s {verb}"), usage
    description = rest.split("\n\n", 1)[0]
    assert len(description.strip()) > 40, f"{verb}: no description"
    assert "examples:" in text.lower(), f"{verb}: no examples"
    assert "exit codes" in text.lower() or "exit status" in text.lower(), f"{verb}: no exit codes"


def test_a_verb_completes_from_its_prefix(tmp_path: Path) -> None:
    assert complete_line("sparkrun-k8s lo", tmp_path) == ["logs"]
    assert complete_line("sparkrun-k8s s", tmp_path) == ["shim", "sleep", "status", "stop"]


@pytest.mark.parametrize("verb", list(main.COMMANDS))
def test_every_verbs_optionscomplete_line(verb: str, tmp_path: Path) -> None:
    """Only the verb on the line is imported; each one's own options come back."""
    words = complete_line(f"sparkrun-k8s {verb} --", tmp_path)
    assert "--help" in words, words


@contextlib.contextmanager
def _silent_server() -> Iterator[int]:
    """A loopback listener that accepts connections and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield listener.getsockname()[1]


def _kubeconfig(tmp_path: Path, server: str) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: '{server}', insecure-skip-tls-verify: true}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u, namespace: team-a}}]\n"
    )
    return path


def test_names_complete_nothing_without_a_cluster(tmp_path: Path) -> None:
    args = argparse.Namespace(kubeconfig=str(tmp_path / "absent"), context=None, namespace=None)
    assert complete.workload_names("", args) == []
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    args.kubeconfig = str(_kubeconfig(tmp_path, f"https://127.0.0.1:{port}"))
    assert complete.workload_names("", args) == []


def test_a_hung_cluster_is_given_up_on_within_the_bound(tmp_path: Path) -> None:
    with _silent_server() as port:
        args = argparse.Namespace(
            kubeconfig=str(_kubeconfig(tmp_path, f"https://127.0.0.1:{port}")), context=None, namespace=None
        )
        started = time.monotonic()
        assert complete.cache_names("", args) == []
        assert time.monotonic() - started < complete.SECONDS + 1.0
        # and through the shell's path: a TAB after `rollout history` returns as fast
        started = time.monotonic()
        words = complete_line("sparkrun-k8s rollout history ", tmp_path, KUBECONFIG=args.kubeconfig)
        assert all(word.startswith("-") for word in words), words  # options only: no names
        assert time.monotonic() - started < complete.SECONDS + 10.0  # + the interpreter's start


class _Lister(ThreadingHTTPServer):
    """A loopback apiserver that answers any list with the same names, and records the paths."""

    paths: list[str]


class _ListHandler(BaseHTTPRequestHandler):
    server: _Lister

    def do_GET(self) -> None:
        self.server.paths.append(self.path.split("?", 1)[0])
        names = ["tiny-rcp", "tiny-cluster", "other", "bad;name", "Upper"]
        body = json.dumps({"items": [{"metadata": {"name": n}} for n in names]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_namespaced_and_cluster_scoped_kinds_list_where_they_live(tmp_path: Path) -> None:
    server = _Lister(("127.0.0.1", 0), _ListHandler)
    server.paths = []
    worker = threading.Thread(target=server.serve_forever, daemon=True)
    worker.start()
    try:
        config = _kubeconfig(tmp_path, f"http://127.0.0.1:{server.server_port}")
        args = argparse.Namespace(kubeconfig=str(config), context=None, namespace="team-b")
        # run's MODEL|RECIPE: the namespace's Recipes; names a shell must not see are dropped
        assert complete.recipe_names("tiny", args) == ["tiny-cluster", "tiny-rcp"]
        assert complete.names_of(INFERENCE_CLUSTER)("", args) == ["other", "tiny-cluster", "tiny-rcp"]
        assert complete.names_of(INFERENCE_BENCHMARK)("o", args) == ["other"]
    finally:
        server.shutdown()
        server.server_close()
    assert server.paths == [
        "/apis/sparkrun.dev/v1alpha1/namespaces/team-b/recipes",
        "/apis/sparkrun.dev/v1alpha1/inferenceclusters",
        "/apis/sparkrun.dev/v1alpha1/namespaces/team-b/inferencebenchmarks",
    ]
