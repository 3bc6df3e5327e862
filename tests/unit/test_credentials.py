"""Where the operator's credentials may go (ADR 0040): origin parsing and matching, the allowlist,
and the tool Jobs of ``model_cache.*`` that carry the Hub token only where it may be sent."""

from __future__ import annotations

from typing import Any, cast

import pytest

from sparkrun_operator.api.credentials import HUGGING_FACE, CredentialEndpoints, Origin, origin_of
from sparkrun_operator.cli.main import build_parser
from sparkrun_operator.k8s.client import Kube
from sparkrun_operator.ops.errors import Invalid
from sparkrun_operator.ops.executors import ARGUMENT_CHECKS
from sparkrun_operator.ops.executors.modelcache import steps
from sparkrun_operator.ops.invocation import OperationContext
from sparkrun_operator.ops.settings import Settings
from sparkrun_operator.render import keys
from sparkrun_operator.render.cachetool import ToolOptions, render_tool_job
from sparkrun_operator.runtime.downloadcli import allowed_token

HUB = "https://huggingface.co"


@pytest.mark.parametrize(
    ("url", "origin"),
    [
        ("https://huggingface.co", Origin("https", "huggingface.co", 443)),
        ("HTTPS://HuggingFace.CO:443/", Origin("https", "huggingface.co", 443)),
        ("https://huggingface.co/some/path", Origin("https", "huggingface.co", 443)),
        ("http://127.0.0.1:8080", Origin("http", "127.0.0.1", 8080)),
        ("http://hub.internal:80", Origin("http", "hub.internal", 80)),
        ("http://[::1]:9000", Origin("http", "::1", 9000)),
        ("https://huggingface.co:", Origin("https", "huggingface.co", 443)),
        ("HTTP://HF-Mirror.Internal.:8080/hf", Origin("http", "hf-mirror.internal.", 8080)),
    ],
)
def test_origins_are_normalized(url: str, origin: Origin) -> None:
    assert origin_of(url) == origin


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("https://huggingface.co@evil.example", "user information"),
        ("https://user:pass@huggingface.co", "user information"),
        ("https://evil.example\\@huggingface.co", "backslashes"),
        ("https://evil.example\\huggingface.co", "backslashes"),
        ("https://huggingface.co\t.evil.example", "whitespace"),
        ("https://hugging\nface.co", "whitespace"),
        (" https://huggingface.co", "whitespace"),
        ("https://huggingface.co?x=1", "no query or fragment"),
        ("https://huggingface.co#@evil.example", "no query or fragment"),
        ("https://evil.example?@huggingface.co", "no query or fragment"),
        ("https://hugging%66ace.co", "invalid host"),
        ("https://huggingface.co..", "invalid host"),
        ("http://.", "invalid host"),
        ("https://huggingface..co", "invalid host"),
        ("https://", "invalid host"),
        ("https:///huggingface.co", "invalid host"),
        ("https://[not-ipv6]", "invalid host"),
        ("https://huggingface.co:99999", "invalid port"),
        ("https://huggingface.co:443x", "invalid port"),
        ("https://hüggingface.co", "non-ASCII"),
        ("ftp://huggingface.co", "http(s) URL"),
        ("https:huggingface.co", "http(s) URL"),
        ("//huggingface.co", "http(s) URL"),
        ("", "http(s) URL"),
    ],
)
def test_what_a_client_could_read_differently_is_refused(url: str, why: str) -> None:
    with pytest.raises(ValueError, match=why.replace("(", r"\(").replace(")", r"\)")):
        origin_of(url)


def test_matching_is_by_exact_origin() -> None:
    allowed = CredentialEndpoints.parse({HUGGING_FACE: [HUB, "http://mirror.internal:8080"]})
    for url in (HUB, "https://HUGGINGFACE.CO:443/api", "http://mirror.internal:8080/hf"):
        assert allowed.permits(HUGGING_FACE, url), url
    for url in (
        "http://huggingface.co",  # another scheme
        "https://huggingface.co:8443",  # another port
        "https://huggingface.co.evil.example",
        "https://evil.example/huggingface.co",
        "https://huggingface.co@evil.example",  # refused outright
        "http://mirror.internal",
        "https://hf.co",
        "not a url",
    ):
        assert not allowed.permits(HUGGING_FACE, url), url
    assert not CredentialEndpoints.parse({HUGGING_FACE: []}).permits(HUGGING_FACE, HUB)
    assert not CredentialEndpoints().permits(HUGGING_FACE, HUB)  # not listed: nowhere
    assert CredentialEndpoints.default().origins(HUGGING_FACE) == [HUB]


def test_a_trailing_dot_is_another_origin() -> None:
    """``a.b.`` is resolved as is; ``a.b`` may first go through the pod's DNS search path (a
    Service ``a`` in a namespace ``b`` answers ``a.b.svc.cluster.local``). Neither stands in for
    the other, in either direction."""
    fqdn = "http://hf-mirror.internal.:8080"
    allowed = CredentialEndpoints.parse({HUGGING_FACE: [fqdn]})
    assert allowed.origins(HUGGING_FACE) == [fqdn]  # what the downloader gets back, dot kept
    assert allowed.permits(HUGGING_FACE, fqdn + "/api/models")
    assert not allowed.permits(HUGGING_FACE, "http://hf-mirror.internal:8080")
    assert not allowed.permits(HUGGING_FACE, "http://hf-mirror.internal..:8080")
    short = CredentialEndpoints.parse({HUGGING_FACE: ["http://hf-mirror.internal:8080"]})
    assert not short.permits(HUGGING_FACE, fqdn)
    assert not CredentialEndpoints.default().permits(HUGGING_FACE, "https://huggingface.co./api")
    assert allowed_token("t", fqdn, ",".join(allowed.origins(HUGGING_FACE))) == ("t", None)
    assert allowed_token("t", "http://hf-mirror.internal:8080", fqdn)[0] is None
    ctx = _ctx(hub_token_secret=("hf", "token"), credential_endpoints=allowed)
    run = steps.tool(ctx, None, "resolve", ["resolve"], token=True, endpoint=fqdn)
    assert _token_args(run)[-2:] == ["--token-origins", fqdn]
    bare = steps.tool(
        ctx, None, "resolve", ["resolve"], token=True, endpoint="http://hf-mirror.internal:8080"
    )
    assert bare.token_secret is None


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ({"registry": [HUB]}, "unknown credential 'registry'"),
        ({HUGGING_FACE: HUB}, "a list of endpoints"),
        ({HUGGING_FACE: ["https://huggingface.co/models"]}, "no path"),
        ({HUGGING_FACE: ["https://*.huggingface.co"]}, "invalid host"),
        ([HUB], "an object such as"),
    ],
)
def test_an_allowlist_names_known_credentials_and_origins(raw: Any, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        CredentialEndpoints.parse(raw)


def test_the_command_line_flag() -> None:
    base = ["operator", "run"]
    assert build_parser().parse_args(base).credential_endpoints == CredentialEndpoints.default()
    mirror = '{"huggingFace": ["http://hub.internal:8080"]}'
    parsed = build_parser().parse_args([*base, "--credential-endpoints", mirror]).credential_endpoints
    assert parsed.to_wire() == {HUGGING_FACE: ["http://hub.internal:8080"]}
    for bad in ("[]", "{", '{"huggingFace": ["https://a@b"]}'):
        with pytest.raises(SystemExit):
            build_parser().parse_args([*base, "--credential-endpoints", bad])


def test_the_downloader_keeps_the_token_from_other_origins() -> None:
    assert allowed_token("t", "http://hub:8080", "http://hub:8080") == ("t", None)
    assert allowed_token("t", "https://huggingface.co", "http://x,https://huggingface.co") == ("t", None)
    assert allowed_token("t", "http://anywhere", None) == ("t", None)  # no flag: no restriction
    assert allowed_token(None, "http://anywhere", "") == (None, None)
    for origins in ("", "https://huggingface.co", "https://a@b", "http://hub:8081"):
        token, notice = allowed_token("t", "http://hub:8080", origins)
        assert token is None
        assert notice is not None
        assert "is not sent to http://hub:8080" in notice
        assert "operator.credentials.allowedEndpoints.huggingFace" in notice


def _ctx(**settings: Any) -> OperationContext:
    return OperationContext(
        rest=cast(Kube, None), settings=Settings(namespace="ns", **settings), principal="p", job_id="j"
    )


def _token_args(run: Any) -> list[str]:
    args: list[str] = render_tool_job(run, ToolOptions())["spec"]["template"]["spec"]["containers"][0]["args"]
    return args[args.index("--token-file") :] if "--token-file" in args else []


def test_a_tool_job_carries_the_token_only_where_it_may_go() -> None:
    secret = ("hf", "token")
    ctx = _ctx(hub_token_secret=secret)
    run = steps.tool(ctx, None, "resolve", ["resolve"], token=True)
    assert run.token_secret == secret
    assert _token_args(run) == [
        "--token-file",
        f"{keys.HF_TOKEN_DIR}/token",
        "--token-origins",
        HUB,
    ]
    assert (
        steps.tool(ctx, None, "resolve", ["resolve"], token=True, endpoint=HUB + "/").token_secret == secret
    )
    for endpoint in ("http://caller.example", "http://huggingface.co", "https://huggingface.co@x"):
        off = steps.tool(ctx, None, "resolve", ["resolve"], token=True, endpoint=endpoint)
        assert (off.token_secret, _token_args(off)) == (None, []), endpoint
    nowhere = _ctx(
        hub_token_secret=secret, credential_endpoints=CredentialEndpoints.parse({HUGGING_FACE: []})
    )
    assert steps.tool(nowhere, None, "resolve", ["resolve"], token=True).token_secret is None
    assert steps.tool(_ctx(), None, "resolve", ["resolve"], token=True).token_secret is None
    assert steps.tool(ctx, None, "scan", ["scan"]).token_secret is None


@pytest.mark.parametrize("op", ["model_cache.resolve", "model_cache.repair", "model_cache.inspect"])
def test_an_ambiguous_endpoint_is_refused_at_submission(op: str) -> None:
    args = {"model": "o/m", "cache_dir": "c", "endpoint": "https://huggingface.co@caller.example"}
    with pytest.raises(Invalid, match="user information") as caught:
        ARGUMENT_CHECKS[op](args, Settings())
    assert caught.value.status == 422
