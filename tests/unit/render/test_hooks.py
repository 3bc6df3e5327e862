"""Recipe hooks and mods (issue 32): the wrapper really runs under /bin/sh, the JobSet carries it
only for a trusted recipe, and the decision names what does not run."""

from __future__ import annotations

import http.server
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkrun_operator.api import conditions as c
from sparkrun_operator.api.recipe import RecipeSpec
from sparkrun_operator.api.workload import InferenceWorkloadSpec
from sparkrun_operator.plan.workload import hooks as decide_hooks
from sparkrun_operator.plan.workload import hooksource
from sparkrun_operator.recipe.resolve import resolve
from sparkrun_operator.recipe.trust import Trust
from sparkrun_operator.render import hookjob, hooks
from sparkrun_operator.render.workload import ServingInputs, render_jobset

MOD = hooks.ModSource(
    name="mods/fix-x",
    config_map="reg-mod-fix-x",
    digest="d1",
    files=(hooks.ModFile(key="f0", path="run.sh", mode=0o755), hooks.ModFile(key="f1", path="patches/p.txt")),
)


def _mod_source(root: Path) -> None:
    (root / "src/0/patches").mkdir(parents=True)
    (root / "src/0/run.sh").write_text(
        '#!/bin/sh\ncat patches/p.txt > "$WORKSPACE_DIR/mod.out"\necho "$PWD" >> "$WORKSPACE_DIR/mod.out"\n'
    )
    (root / "src/0/patches/p.txt").write_text("patched\n")


def _run(script: str, cwd: Path, *argv: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["/bin/sh", "-c", script, "sparkrun-hooks", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_mods_and_pre_exec_run_in_order_then_the_engine(tmp_path: Path) -> None:
    _mod_source(tmp_path)
    plan = hooks.HookPlan(
        mods=(MOD,),
        pre_exec=(hooks.HookStep(command='echo "pre $SPARKRUN_HOOK $SPARKRUN_MODEL" > pre.out'),),
        env=(("SPARKRUN_MODEL", "org/m"),),
        source_root=str(tmp_path / "src"),
        mods_root=str(tmp_path / "mods"),
    )
    done = _run(
        hooks.script(plan, head=False),
        tmp_path,
        "sh",
        "-c",
        'echo "engine $SPARKRUN_HOOK-unset"; cat pre.out',
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "mod.out").read_text() == f"patched\n{tmp_path}/mods/fix-x\n"
    assert (tmp_path / "mods/fix-x/run.sh").stat().st_mode & 0o777 == 0o755
    lines = done.stdout.splitlines()
    assert lines[0] == '{"event":"sparkrun.hook","stage":"mods","outcome":"ok"}'
    assert lines[1] == '{"event":"sparkrun.hook","stage":"preExec","outcome":"ok"}'
    # the hook's variables never reach the engine
    assert lines[2:] == ["engine -unset", "pre pre_exec org/m"]


def test_a_failing_pre_exec_fails_the_container_and_names_the_step(tmp_path: Path) -> None:
    plan = hooks.HookPlan(pre_exec=(hooks.HookStep(command="true"), hooks.HookStep(command="exit 7")))
    done = _run(hooks.script(plan, head=False), tmp_path, "touch", "engine-ran")
    assert done.returncode == 7
    assert done.stderr.strip().endswith("sparkrun hook failed: pre_exec[2] exited 7")
    assert '"stage":"preExec","outcome":"failed"' in done.stdout
    assert not (tmp_path / "engine-ran").exists()


def test_a_hook_over_its_timeout_is_killed(tmp_path: Path) -> None:
    plan = hooks.HookPlan(pre_exec=(hooks.HookStep(command="sleep 300", timeout_s=1),))
    # NB: _run's own limit (30 s) fails the test if the hook's timeout does not stop it
    done = _run(hooks.script(plan, head=False), tmp_path, "true")
    assert done.returncode == 124
    assert "pre_exec[1] exited 124" in done.stderr


@pytest.fixture
def health() -> Iterator[int]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_post_exec_runs_on_the_head_once_the_engine_answers(tmp_path: Path, health: int) -> None:
    plan = hooks.HookPlan(
        post_exec=(hooks.HookStep(command="echo post-$SPARKRUN_HOOK > post.out"),), port=health
    )
    # the "engine" waits for the post_exec step's file, as a server keeps running
    done = _run(
        hooks.script(plan, head=True),
        tmp_path,
        "sh",
        "-c",
        "for i in $(seq 100); do [ -s post.out ] && break; sleep 0.1; done; sleep 0.3; cat post.out",
    )
    assert done.returncode == 0, done.stderr
    assert "post-post_exec" in done.stdout
    assert '{"event":"sparkrun.hook","stage":"postExec","outcome":"ok"}' in done.stdout
    # a worker runs no post_exec
    assert "postExec" not in hooks.script(plan, head=False)


def test_a_failing_post_exec_stops_the_engine(tmp_path: Path, health: int) -> None:
    plan = hooks.HookPlan(post_exec=(hooks.HookStep(command="exit 5"),), port=health)
    # the "engine" would sleep 300 s: only the post_exec watcher's TERM ends it within _run's limit
    done = _run(hooks.script(plan, head=True), tmp_path, "sleep", "300", timeout=60)
    assert done.returncode == -15 or done.returncode == 143
    assert "sparkrun hook failed: post_exec[1] exited 5" in done.stderr


def test_placeholders_are_filled_and_shell_expansions_kept() -> None:
    out, bad = hooks.steps(
        [
            "echo {model} ${HOME} {unknown} '{\"a\": 1}'",
            {"command": "x {port}", "timeout": 0},
            {"copy": "a", "dest": "b"},
            3,
        ],
        context={"model": "org/m", "port": "8000"},
    )
    assert [s.command for s in out] == ["echo org/m ${HOME} {unknown} '{\"a\": 1}'", "x 8000"]
    assert [s.timeout_s for s in out] == [hooks.DEFAULT_TIMEOUT_S, 0]
    assert bad == [
        "3: a copy entry names a file on sparkrun's control machine",
        "4: not a command (a string, or a mapping with command and timeout)",
    ]


def _inputs(plan: hooks.HookPlan | None, nodes: int = 1) -> ServingInputs:
    spec = InferenceWorkloadSpec.model_validate(
        {"model": {"name": "org/m"}, "topology": {"nodes": nodes, "gpusPerNode": 1, "tensorParallel": 1}}
    )
    effective = resolve(workload=spec, recipe=None).spec
    assert effective is not None
    return ServingInputs(spec=effective, hooks=plan)


def test_the_jobset_wraps_every_engine_container_and_mounts_the_mods() -> None:
    plan = hooks.HookPlan(
        mods=(MOD,),
        pre_exec=(hooks.HookStep(command="echo hi"),),
        post_exec=(hooks.HookStep(command="echo up"),),
    )
    plain, hooked = _inputs(None, nodes=2), _inputs(plan, nodes=2)
    assert plain.revision() == _inputs(hooks.HookPlan(), nodes=2).revision()  # an empty plan changes nothing
    assert hooked.revision() != plain.revision()
    js = render_jobset(namespace="ns", workload="w", inputs=hooked, replica=0, suspend=False)
    leader, worker = (rj["template"]["spec"]["template"]["spec"] for rj in js["spec"]["replicatedJobs"])
    engine = leader["containers"][0]
    assert engine["command"] == ["/bin/sh", "-c"]
    assert engine["args"][1:4] == ["sparkrun-hooks", "vllm", "serve"]
    assert "post_exec" in engine["args"][0]
    assert "echo up" in engine["args"][0]
    assert worker["containers"][0]["args"][0].rstrip().splitlines()[-1].startswith("exec vllm serve")
    assert "echo up" not in worker["containers"][0]["args"][0]
    for pod in (leader, worker):
        assert {
            "name": "sparkrun-mod-0",
            "configMap": {
                "name": "reg-mod-fix-x",
                "items": [{"key": "f0", "path": "run.sh"}, {"key": "f1", "path": "patches/p.txt"}],
            },
        } in pod["volumes"]
        assert {"name": hooks.VOLUME_MODS, "emptyDir": {}} in pod["volumes"]


def _recipe(**extra: Any) -> RecipeSpec:
    return RecipeSpec.model_validate({"model": "org/m", "runtime": "vllm", **extra})


SOURCE = hooksource.HookSource(
    trust=Trust(True, "from trusted RecipeRegistry reg", "reg"),
    mods=(
        hooksource.observed_mod(
            "reg",
            "mods/fix-x",
            "reg-mod-fix-x",
            {
                "manifest.json": '{"name":"mods/fix-x","files":[{"key":"f0","path":"run.sh","mode":493}]}',
                "f0": "echo",
            },
            {},
        ),
    ),
)


def test_an_untrusted_recipe_runs_nothing_and_says_which() -> None:
    recipe = _recipe(pre_exec=["touch /tmp/x"], runtime_config={"mods": ["mods/fix-x"]})
    got = decide_hooks.decide(
        recipe,
        hooksource.HookSource(trust=Trust(False, "RecipeRegistry reg is not trusted", "reg")),
        context={},
    )
    assert got.plan is None
    assert got.post_commands == ()
    assert got.condition == (
        False,
        c.REASON_HOOKS_UNTRUSTED,
        "not run (mods mods/fix-x; pre_exec): RecipeRegistry reg is not trusted",
    )
    assert decide_hooks.decide(recipe, None, context={}).condition is not None
    assert decide_hooks.decide(_recipe(), None, context={}).condition is None


def test_a_trusted_recipe_gets_its_mods_and_names_the_unresolved() -> None:
    recipe = _recipe(
        post_commands=["curl {base_url}/models"],
        runtime_config={"mods": ["fix-x", "mods/missing", "@other/y"]},
    )
    got = decide_hooks.decide(recipe, SOURCE, context={"base_url": "http://w.ns.svc:8000/v1"})
    assert got.plan is not None
    assert [m.config_map for m in got.plan.mods] == ["reg-mod-fix-x"]
    assert [s.command for s in got.post_commands] == ["curl http://w.ns.svc:8000/v1/models"]
    assert got.condition is not None
    assert got.condition[:2] == (False, c.REASON_MODS_UNRESOLVED)
    assert "mods/missing (not found in RecipeRegistry reg or RecipeRegistry eugr)" in got.condition[2]
    assert "@other/y (not found in RecipeRegistry other)" in got.condition[2]


@pytest.mark.parametrize(
    "manifest",
    [
        '{"files":[{"key":"f0","path":"../run.sh"}]}',
        '{"files":[{"key":"f0","path":"/etc/run.sh"}]}',
        '{"files":[{"key":"f9","path":"run.sh"}]}',
        '{"files":[{"key":"f0","path":"other.sh"}]}',
        "[[[[[[[[[[]]]]]]]]]]",
        "not json",
    ],
)
def test_a_hostile_mod_manifest_is_refused(manifest: str) -> None:
    files, problem = hooksource.manifest_files({"manifest.json": manifest, "f0": "x"}, {})
    assert files == ()
    assert problem


def test_the_post_commands_job() -> None:
    job = hookjob.render_post_commands_job(
        namespace="ns",
        workload="w",
        revision="0123456789",
        commands=[hooks.HookStep(command="echo done", timeout_s=30)],
        env=(),
        image="tools:1",
    )
    assert job["metadata"]["name"] == "w-post-0123456789"
    assert job["spec"]["backoffLimit"] == 0
    assert job["spec"]["activeDeadlineSeconds"] == 90
    pod = job["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["automountServiceAccountToken"] is False
    done = subprocess.run(
        ["/bin/sh", "-c", pod["containers"][0]["args"][0]],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0
    assert done.stdout.splitlines() == [
        "done",
        '{"event":"sparkrun.hook","stage":"postCommands","outcome":"ok"}',
    ]
