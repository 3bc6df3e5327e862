"""``gitfetch.fetch_tree`` against a real git server on loopback (``tests/gitserver.py``): smart
HTTP (``git http-backend``) and ``git://`` (``git daemon``)."""

from __future__ import annotations

import os
import time

import pytest

from sparkrun_operator.gitfetch import FetchLimits, GitFetchError, GitSource, fetch_tree
from tests.gitserver import GitServer, RepoHandle, StallServer

SECRET = "s3cret-token-value"


def _registry(server: GitServer, name: str) -> tuple[RepoHandle, str]:
    repo = server.create_repo(name)
    repo.write("recipes/a.yaml", "model: org/a\nruntime: vllm\n")
    repo.write("recipes/.hidden/b.yaml", "model: org/b\n")
    repo.write(".sparkrun/registry.yaml", "registries:\n- name: r\n  recipes: recipes\n  mods: mods\n")
    repo.write("mods/fix/run.sh", "echo fixed\n", executable=True)
    repo.write("elsewhere/big.bin", b"x" * 10)
    return repo, repo.commit("first")


async def _fails(source: GitSource, limits: FetchLimits | None = None) -> GitFetchError:
    with pytest.raises(GitFetchError) as caught:
        await fetch_tree(source, limits or FetchLimits())
    assert SECRET not in caught.value.message
    return caught.value


@pytest.mark.parametrize("scheme", ["http", "git"])
async def test_every_kind_of_ref_gives_its_commit_and_the_registry_files(
    git_server: GitServer, scheme: str
) -> None:
    repo, first = _registry(git_server, f"refs-{scheme}")
    repo.tag("v1")
    repo.write("recipes/a.yaml", "model: org/a2\nruntime: vllm\n")
    second = repo.commit("second", branch="next")
    url = repo.url_http if scheme == "http" else repo.url_git
    for ref, commit in ((None, first), ("main", first), ("v1", first), ("next", second), (first, first)):
        tree = await fetch_tree(GitSource(url, ref, "recipes"))
        assert tree.commit == commit, ref
        assert set(tree.files) == {
            "recipes/a.yaml",
            "recipes/.hidden/b.yaml",
            ".sparkrun/registry.yaml",
            "mods/fix/run.sh",
        }
        assert tree.modes["mods/fix/run.sh"] == 0o100755
    assert b"org/a2" in (await fetch_tree(GitSource(url, "next", "recipes"))).files["recipes/a.yaml"]


async def test_a_force_pushed_branch_gives_the_new_commit(git_server: GitServer) -> None:
    repo, first = _registry(git_server, "forced")
    repo.write("recipes/a.yaml", "model: org/changed\n")
    second = repo.commit("second")
    assert (await fetch_tree(GitSource(repo.url_http, "main"))).commit == second
    repo.force_push_to("main", first)
    tree = await fetch_tree(GitSource(repo.url_git, "main", "recipes"))
    assert tree.commit == first
    assert b"org/a" in tree.files["recipes/a.yaml"]


async def test_missing_repository_ref_and_commit_are_not_found(git_server: GitServer) -> None:
    repo, _ = _registry(git_server, "vanishing")
    assert (await _fails(GitSource(repo.url_http, "nope"))).kind == "not_found"
    absent = await _fails(GitSource(repo.url_git, "0" * 40))
    assert absent.kind == "not_found"
    assert "by id" in absent.message
    repo.delete_repo()
    for url in (repo.url_http, repo.url_git):
        gone = await _fails(GitSource(url))
        assert gone.kind == "not_found", gone.message


async def test_credentials_go_only_where_they_belong() -> None:
    with GitServer(auth=("reader", SECRET)) as private, GitServer() as other:
        repo, commit = _registry(private, "private")
        assert (
            await fetch_tree(GitSource(repo.url_http, None, "recipes", "reader", SECRET))
        ).commit == commit
        assert (await _fails(GitSource(repo.url_http))).kind == "auth"
        refused = await _fails(GitSource(repo.url_http, None, "", "reader", "not-" + SECRET))
        assert refused.kind == "auth"
        assert "refused the credentials" in refused.message
        # a redirect to another origin is not followed, and the credential never reaches it
        _registry(other, "private")
        private.redirect("moved.git", f"{other.base_http}/private.git")
        moved = repo.url_http.replace("/private.git", "/moved.git")
        redirected = await _fails(GitSource(moved, None, "", "reader", SECRET))
        assert redirected.kind == "invalid"
        assert "redirected" in redirected.message
        assert other.seen == []


async def test_a_pack_over_the_limit_is_too_large(git_server: GitServer) -> None:
    repo = git_server.create_repo("large")
    for i in range(4):
        repo.write(f"recipes/blob{i}.bin", os.urandom(400 * 1024))
    repo.commit("large")
    limits = FetchLimits(max_pack_bytes=1024 * 1024)
    for url in (repo.url_http, repo.url_git):
        assert (await _fails(GitSource(url), limits)).kind == "too_large"


async def test_files_over_the_size_limit_and_links_are_skipped(git_server: GitServer) -> None:
    repo, first = _registry(git_server, "skips")
    repo.write("recipes/huge.yaml", b"a" * 4096)
    repo.symlink("recipes/link.yaml", "a.yaml")
    repo.gitlink("recipes/sub", first)
    repo.commit("skips")
    tree = await fetch_tree(GitSource(repo.url_http, None, "recipes"), FetchLimits(max_file_bytes=1024))
    assert "recipes/a.yaml" in tree.files
    assert set(tree.skipped) == {"recipes/huge.yaml", "recipes/link.yaml", "recipes/sub"}
    assert "larger than 1024" in tree.skipped["recipes/huge.yaml"]
    assert (
        await _fails(GitSource(repo.url_git, None, "recipes"), FetchLimits(max_files=2))
    ).kind == "too_large"


async def test_a_server_that_never_answers_times_out_within_the_deadline() -> None:
    with StallServer() as stall:
        for url in (stall.url_http, stall.url_git):
            started = time.monotonic()
            failed = await _fails(GitSource(url), FetchLimits(timeout_s=1.5))
            assert failed.kind == "timeout"
            assert time.monotonic() - started < 3


@pytest.mark.parametrize(
    "url",
    [
        "file:///etc",
        "ssh://git@example.com/repo.git",
        "ext::sh -c touch% /tmp/pwned",
        "git@example.com:repo.git",
        "https://user:pw@example.com/repo.git",
        "git://user@example.com/repo.git",
        "https://example.com",
    ],
)
async def test_urls_a_fetch_must_not_follow_are_refused(url: str) -> None:
    failed = await _fails(GitSource(url))
    assert failed.kind == "invalid"
    assert "pw" not in failed.message.replace("pwned", "")


async def test_an_unreachable_server_is_unreachable() -> None:
    with StallServer() as closed:
        port = closed.port
    failed = await _fails(GitSource(f"http://127.0.0.1:{port}/x.git"))
    assert failed.kind == "unreachable", failed.message
