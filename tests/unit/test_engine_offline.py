"""The engine stand-in's offline check: with HF_HUB_OFFLINE=1 it starts only from a cached snapshot."""

from __future__ import annotations

from pathlib import Path

from sparkrun_testbed.engine._offline import check

SHA = "b" * 40


def _cache(root: Path) -> None:
    repo = root / "hub" / "models--org--m"
    (repo / "snapshots" / SHA).mkdir(parents=True)
    (repo / "snapshots" / SHA / "config.json").write_text("{}")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(SHA)


def test_online_needs_nothing(tmp_path: Path) -> None:
    assert check("org/m", None, {}) is None


def test_offline_from_the_cache(tmp_path: Path) -> None:
    _cache(tmp_path)
    env = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path)}
    assert check("org/m", SHA, env) is None
    assert check("org/m", None, env) is None  # main, through refs/main
    assert check("org/m", "c" * 40, env) is not None
    assert "not in the cache" in (check("org/other", SHA, env) or "")
    assert check("org/m", "dev", env) is not None
    assert (
        check("org/m", SHA, {"HF_HUB_OFFLINE": "1"})
        == "HF_HUB_OFFLINE=1 but neither HF_HOME nor HF_HUB_CACHE is set"
    )
    assert check("org/m", SHA, {"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "hub")}) is None
