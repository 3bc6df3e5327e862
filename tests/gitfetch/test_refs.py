"""``resolve_commit``: the ref's commit from the remote's refs alone (the cheap no-change check
of a registry resync), against a real ``git http-backend`` and ``git daemon``."""

from __future__ import annotations

import pytest

from sparkrun_operator.gitfetch import GitFetchError, GitSource, fetch_tree, resolve_commit
from tests.gitserver import GitServer

SECRET = "s3cret-token-value"


async def _fails(source: GitSource) -> GitFetchError:
    with pytest.raises(GitFetchError) as caught:
        await resolve_commit(source)
    assert SECRET not in caught.value.message
    return caught.value


@pytest.mark.parametrize("scheme", ["http", "git"])
async def test_branch_tag_head_and_sha_resolve_to_what_a_fetch_gives(
    git_server: GitServer, scheme: str
) -> None:
    repo = git_server.create_repo(f"resolve-{scheme}")
    repo.write("recipes/a.yaml", "model: org/a\n")
    first = repo.commit("first")
    repo.tag("v1")
    repo.tag("light", annotated=False)
    repo.write("recipes/a.yaml", "model: org/a2\n")
    second = repo.commit("second", branch="next")
    url = repo.url_http if scheme == "http" else repo.url_git
    cases = (
        (None, first),
        ("main", first),
        ("v1", first),
        ("light", first),
        ("next", second),
        (first, first),
    )
    for ref, commit in cases:
        resolved = await resolve_commit(GitSource(url, ref, "recipes"))
        assert resolved == commit, ref
        assert resolved == (await fetch_tree(GitSource(url, ref, "recipes"))).commit, ref
    repo.write("recipes/a.yaml", "model: org/a3\n")
    third = repo.commit("third")
    assert await resolve_commit(GitSource(url, "main")) == third


async def test_a_missing_ref_or_repository_is_not_found(git_server: GitServer) -> None:
    repo = git_server.create_repo("resolve-missing")
    repo.write("recipes/a.yaml", "model: org/a\n")
    repo.commit("first")
    assert (await _fails(GitSource(repo.url_http, "nope"))).kind == "not_found"
    repo.delete_repo()
    for url in (repo.url_http, repo.url_git):
        assert (await _fails(GitSource(url, "main"))).kind == "not_found"
        assert (await _fails(GitSource(url, "0" * 40))).kind == "not_found"


async def test_credentials_are_needed_and_checked() -> None:
    with GitServer(auth=("reader", SECRET)) as private:
        repo = private.create_repo("resolve-private")
        repo.write("recipes/a.yaml", "model: org/a\n")
        commit = repo.commit("first")
        assert await resolve_commit(GitSource(repo.url_http, None, "", "reader", SECRET)) == commit
        assert (await _fails(GitSource(repo.url_http))).kind == "auth"
        refused = await _fails(GitSource(repo.url_http, "main", "", "reader", "not-" + SECRET))
        assert refused.kind == "auth"
        # a full sha still asks the remote: refused credentials fail as a fetch would
        assert (await _fails(GitSource(repo.url_http, commit, "", "reader", "x"))).kind == "auth"
