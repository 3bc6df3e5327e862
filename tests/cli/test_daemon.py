"""``sparkrun-k8s daemon ...`` as a user runs it (the console script, a subprocess) against the
daemon API on the testbed (tests/cli/aggregated.py: the shim registered as the aggregated API,
its operator executing jobs):

- through kube-apiserver with (a) the testbed's admin kubeconfig (a client certificate) and (b) a
  kubeconfig whose user is an exec plugin (an ExecCredential with a ServiceAccount's token, as
  cloud logins give): info, ops, a query, a job followed to its end with an Idempotency-Key (the
  same key answers the same job), a job that fails (exit 1, its typed error), jobs, job, events;
- (c) the shim's own listener with ``--url`` and ``--token-file`` (and ``$SPARKRUN_DAEMON_TOKEN``);
- refusals: a principal without a daemon role gets exit 5 with the daemon's refusal, one without
  the transport permission exit 5 with kube-apiserver's, an unknown operation exit 4, a job id
  that does not exist exit 4, no token for --url exit 2; ``--token`` does not exist (exit 2);
- a token is never in the process's argv (``/proc/PID/cmdline``, what ``ps`` shows) nor in output.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sparkrun_testbed.kubeapi import KubeApi
from sparkrun_testbed.plane import Testbed
from tests.cli.aggregated import Aggregated, aggregated_daemon, private_file
from tests.cli.conftest import SPARKRUN_K8S

pytestmark = pytest.mark.testbed

Run = Callable[..., subprocess.CompletedProcess[str]]
API = "sparkrun.dev/v1alpha1"


@pytest.fixture(scope="module")
def agg(
    testbed: Testbed, crds: list[str], kube: KubeApi, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Aggregated]:
    with aggregated_daemon(testbed, kube, tmp_path_factory.mktemp("daemon-cli")) as running:
        yield running


def _no_secret(agg: Aggregated, *results: subprocess.CompletedProcess[str]) -> None:
    tokens = agg.daemon.env.tokens.values()
    for result in results:
        for token in tokens:
            assert token not in result.stdout
            assert token not in result.stderr


def test_through_the_apiserver_with_a_client_certificate(agg: Aggregated, sparkrun_k8s: Run) -> None:
    info = sparkrun_k8s("daemon", "info")
    assert info.returncode == 0, info.stderr
    assert "protocol:" in info.stdout
    assert "you:" in info.stdout
    assert f"namespace:        {agg.namespace}" in info.stdout
    as_json = json.loads(sparkrun_k8s("daemon", "status", "-o", "json").stdout)
    assert as_json["runtime"]["identity"] == "front-proxy"
    assert as_json["protocol"] == 1

    ops = sparkrun_k8s("daemon", "ops")
    assert ops.returncode == 0, ops.stderr
    assert ops.stdout.startswith("NAME")
    assert "workloads.wake" in ops.stdout

    listed = sparkrun_k8s("daemon", "call", "workloads.list", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == []

    # a job, with an Idempotency-Key, followed to its end; its effect in the cluster
    name = "cli-" + secrets.token_hex(3)
    created = sparkrun_k8s(
        "daemon", "call", "cluster.create", f"name={name}", 'hosts=["gpu-0"]', "description=from the CLI",
        "--key", "k-" + name, "-o", "json", timeout=180,
    )  # fmt: skip
    try:
        assert created.returncode == 0, created.stderr
        assert json.loads(created.stdout)["name"] == name
        cluster = agg.daemon.kube.get(API, "InferenceCluster", name)
        assert cluster is not None
        assert cluster["spec"]["description"] == "from the CLI"
        again = sparkrun_k8s(
            "daemon", "call", "cluster.create", "--arg",
            json.dumps({"name": name, "hosts": ["gpu-0"], "description": "from the CLI"}),
            "--idempotency-key", "k-" + name, "-o", "json",
        )  # fmt: skip
        assert again.returncode == 0, again.stderr
        assert json.loads(again.stdout) == json.loads(created.stdout)
    finally:
        agg.daemon.kube.delete(API, "InferenceCluster", name)

    jobs = sparkrun_k8s("daemon", "jobs", "-o", "json")
    assert jobs.returncode == 0, jobs.stderr
    job_id = next(j["id"] for j in json.loads(jobs.stdout) if j["operation"] == "cluster.create")
    table = sparkrun_k8s("daemon", "jobs", "--state", "succeeded")
    assert table.stdout.startswith("ID")
    assert job_id in table.stdout
    shown = sparkrun_k8s("daemon", "job", job_id)
    assert shown.returncode == 0, shown.stderr
    assert "state:      succeeded" in shown.stdout
    assert "operation:  cluster.create" in shown.stdout
    events = sparkrun_k8s("daemon", "events", job_id)
    assert events.returncode == 0, events.stderr
    assert " state     queued" in events.stdout
    assert " state     succeeded" in events.stdout
    followed = sparkrun_k8s("daemon", "events", "-f", job_id, "-o", "json")
    assert followed.returncode == 0, followed.stderr
    assert json.loads(followed.stdout.splitlines()[-1])["type"] in ("result", "state")

    # a job that fails: exit 1 and its typed error
    failed = sparkrun_k8s("daemon", "call", "plugins.k8s.stop_jobset", "name=no-such-jobset", timeout=120)
    assert failed.returncode == 1, (failed.stdout, failed.stderr)
    assert "failed: LookupError:" in failed.stderr
    assert "no-such-jobset" in failed.stderr

    # not found: an operation, a job
    unknown = sparkrun_k8s("daemon", "call", "no.such.op")
    assert unknown.returncode == 4, (unknown.stdout, unknown.stderr)
    assert sparkrun_k8s("daemon", "job", "no-such-job").returncode == 4
    # a bad argument the daemon refuses (422): exit 5, in the daemon's words
    bad = sparkrun_k8s("daemon", "call", "workloads.list", "limit=-1")
    assert bad.returncode == 5, (bad.stdout, bad.stderr)
    assert bad.stderr.startswith("error: ValueError:") or "limit" in bad.stderr


def test_through_the_apiserver_with_an_exec_plugin(agg: Aggregated, sparkrun_k8s: Run) -> None:
    config = str(agg.exec_kubeconfig("operator"))
    env = {"KUBECONFIG": config}
    info = sparkrun_k8s("daemon", "info", "-o", "json", env=env)
    assert info.returncode == 0, info.stderr
    assert (
        json.loads(info.stdout)["runtime"]["principal"] == f"system:serviceaccount:{agg.namespace}:operator"
    )
    listed = sparkrun_k8s("daemon", "call", "workloads.list", "-o", "json", env=env)
    assert listed.returncode == 0, listed.stderr
    jobs = sparkrun_k8s("daemon", "jobs", env=env)
    assert jobs.returncode == 0, jobs.stderr

    # a principal whose ServiceAccount has no daemon role: the daemon refuses it (403, exit 5)
    nobody = sparkrun_k8s(
        "daemon", "call", "workloads.list", env={"KUBECONFIG": str(agg.exec_kubeconfig("nobody"))}
    )
    assert nobody.returncode == 5, (nobody.stdout, nobody.stderr)
    assert nobody.stderr.startswith("error: ")
    assert nobody.stderr[-1] == "\n"
    assert nobody.stderr.count("\n") == 1
    # one without even the transport permission: kube-apiserver refuses it (403, exit 5)
    config_secret = agg.exec_kubeconfig("secret-only")
    refused = sparkrun_k8s("daemon", "info", env={"KUBECONFIG": str(config_secret)})
    assert refused.returncode == 5, (refused.stdout, refused.stderr)
    assert "forbidden" in refused.stderr.lower()
    _no_secret(agg, info, listed, jobs, nobody, refused)


def test_the_shims_own_listener_with_a_token_file(agg: Aggregated, sparkrun_k8s: Run, tmp_path: Path) -> None:
    url = ["--url", agg.daemon.url, "--ca-cert", agg.daemon.runner.ca_file]
    reader = ["--token-file", str(agg.token_file("reader"))]
    ops = sparkrun_k8s("daemon", "ops", "-o", "json", *url, *reader)
    assert ops.returncode == 0, ops.stderr
    assert {op["scope"] for op in json.loads(ops.stdout)} == {"read"}
    listed = sparkrun_k8s("daemon", "call", "workloads.list", *url, *reader)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.strip() == "[]"
    # the token from the environment instead
    by_env = sparkrun_k8s("daemon", "info", *url, env={"SPARKRUN_DAEMON_TOKEN": agg.daemon.token("reader")})
    assert by_env.returncode == 0, by_env.stderr
    assert f"system:serviceaccount:{agg.namespace}:reader" in by_env.stdout
    # the reader may not operate: 403, exit 5
    denied = sparkrun_k8s("daemon", "call", "cluster.create", "name=x", 'hosts=["gpu-0"]', *url, *reader)
    assert denied.returncode == 5, (denied.stdout, denied.stderr)
    # a forbidden user (no role at all): exit 5 with the daemon's refusal
    nobody = sparkrun_k8s("daemon", "info", *url, "--token-file", str(agg.token_file("nobody")))
    assert nobody.returncode == 5, (nobody.stdout, nobody.stderr)
    # a token that is not one: 401, exit 3
    bad = private_file(tmp_path / "bad-token", "not-a-token\n")
    unauthenticated = sparkrun_k8s("daemon", "info", *url, "--token-file", str(bad))
    assert unauthenticated.returncode == 3, (unauthenticated.stdout, unauthenticated.stderr)
    # no token at all: exit 2 before any request; no --token option exists
    none = sparkrun_k8s("daemon", "info", *url, env={"SPARKRUN_DAEMON_TOKEN": ""})
    assert none.returncode == 2
    assert "--token-file" in none.stderr
    no_option = sparkrun_k8s("daemon", "info", *url, "--token", agg.daemon.token("reader"))
    assert no_option.returncode == 2
    assert sparkrun_k8s("shim", "call", "workloads.list", *url, "--token", "x").returncode == 2
    # plain http to a routable address would carry the token in clear text: refused
    clear = sparkrun_k8s("daemon", "info", "--url", "http://192.0.2.1:8080", *reader)
    assert clear.returncode == 2
    assert "https" in clear.stderr
    _no_secret(agg, ops, listed, by_env, denied, nobody, unauthenticated, none)


def test_a_token_is_never_in_argv(agg: Aggregated, testbed: Testbed) -> None:
    token = agg.daemon.token("reader")
    env = {**os.environ, "KUBECONFIG": str(testbed.kubeconfig), "NO_COLOR": "1"}
    for extra, more_env in (
        (["--token-file", str(agg.token_file("reader"))], {}),
        ([], {"SPARKRUN_DAEMON_TOKEN": token}),
    ):
        command = [
            SPARKRUN_K8S,
            "daemon",
            "info",
            "--url",
            agg.daemon.url,
            "--ca-cert",
            agg.daemon.runner.ca_file,
        ]
        process = subprocess.Popen(
            [*command, *extra],
            env={**env, **more_env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        seen: list[str] = []
        deadline = time.monotonic() + 30
        while process.poll() is None and time.monotonic() < deadline:
            try:
                seen.append(Path(f"/proc/{process.pid}/cmdline").read_bytes().decode(errors="replace"))
            except OSError:
                break
            time.sleep(0.05)
        out, err = process.communicate(timeout=60)
        assert process.returncode == 0, err
        assert seen, "the command ended before its argv could be read"
        assert all(token not in argv for argv in seen)
        assert token not in out
        assert token not in err
