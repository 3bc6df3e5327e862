"""The hooks wrapper against hostile text (review R1 of issue 32): the script really runs under
/bin/sh, and no name or placeholder value a recipe's registry or a workload's tenant writes
becomes a shell command of its own."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from sparkrun_operator.render import hooks


def _run(script: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["/bin/sh", "-c", script, "sparkrun-hooks", "true"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def _mod(tmp_path: Path, name: str) -> hooks.HookPlan:
    (tmp_path / "src/0").mkdir(parents=True)
    (tmp_path / "src/0/run.sh").write_text('echo ran > "$WORKSPACE_DIR/ran"\n')
    mod = hooks.ModSource(
        name=name,
        config_map="reg-mod-x",
        digest="d",
        files=(hooks.ModFile(key="f0", path="run.sh", mode=0o755),),
    )
    return hooks.HookPlan(mods=(mod,), source_root=str(tmp_path / "src"), mods_root=str(tmp_path / "mods"))


def test_a_line_break_in_a_mod_name_is_not_a_command(tmp_path: Path) -> None:
    plan = _mod(tmp_path, "mods/x\ntouch injected\n#")
    done = _run(hooks.script(plan, head=False), tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "ran").exists()
    assert not (tmp_path / "injected").exists()


@pytest.mark.parametrize("name", ["mods/..", "mods/.", "..", "mods/"])
def test_a_mod_is_copied_into_a_directory_of_its_own(tmp_path: Path, name: str) -> None:
    plan = _mod(tmp_path, name)
    done = _run(hooks.script(plan, head=False), tmp_path)
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "run.sh").exists()
    copies = list((tmp_path / "mods").glob("*/run.sh"))
    assert len(copies) == 1


HOSTILE = [
    "x; touch injected",
    "$(touch injected)",
    "`touch injected`",
    "a' ; touch injected; echo '",
    'a" ; touch injected; echo "',
    "a\ntouch injected",
    "a && touch injected",
    "a | touch injected",
    '\\"$(touch injected)',
]


@pytest.mark.parametrize("value", HOSTILE)
@pytest.mark.parametrize(
    "command",
    [
        "echo {served_model_name} > out",
        'echo "{served_model_name}" > out',
        "echo '{served_model_name}' > out",
        "echo `echo {served_model_name}` > out",
        "echo \"$(echo '{served_model_name}')\" > out",
    ],
)
def test_a_placeholder_value_is_never_shell_code(tmp_path: Path, value: str, command: str) -> None:
    """A workload's tenant sets ``servedName``; a trusted recipe's hook writes ``{served_model_name}``
    (sparkrun fills it in as text). Whatever the value and wherever the hook puts it, the value
    never runs as a command."""
    steps, problems = hooks.steps([command], context={"served_model_name": value})
    assert problems == []
    plan = hooks.HookPlan(pre_exec=tuple(steps))
    _run(hooks.script(plan, head=False), tmp_path)
    assert not (tmp_path / "injected").exists()


@pytest.mark.parametrize(
    "value", ["org/model-a", "Qwen/Qwen3.5-27B-FP8", "http://svc.ns:8000/v1", "8", "a_b@c+d=e,f%g"]
)
def test_a_plain_value_is_filled_in_as_written(tmp_path: Path, value: str) -> None:
    steps, _ = hooks.steps(["echo {model} > out", "echo '{model}' >> out"], context={"model": value})
    assert [s.command for s in steps] == [f"echo {value} > out", f"echo '{value}' >> out"]
    done = _run(hooks.script(hooks.HookPlan(pre_exec=tuple(steps)), head=False), tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out").read_text() == f"{value}\n{value}\n"


@pytest.mark.parametrize("value", ["my model", "a;b", "it's", "$HOME"])
def test_a_value_with_shell_characters_arrives_whole_where_the_hook_quotes_it(
    tmp_path: Path, value: str
) -> None:
    steps, _ = hooks.steps(['echo "{m}" > out', "echo {m} >> out"], context={"m": value})
    done = _run(hooks.script(hooks.HookPlan(pre_exec=tuple(steps)), head=False), tmp_path)
    assert done.returncode == 0, done.stderr
    first, second = (tmp_path / "out").read_text().splitlines()
    assert first == value
    assert second == " ".join(value.split())  # unquoted: split into words, as any shell value
