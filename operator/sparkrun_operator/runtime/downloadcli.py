"""The command line of ``python -m sparkrun_operator.runtime.download``: its arguments, and the
daemon-shaped manifest ``--print-manifest`` adds to ``inspect``/``repair`` output."""

from __future__ import annotations

from typing import Any

from sparkrun_operator.api.credentials import HUGGING_FACE, CredentialEndpoints, withheld
from sparkrun_operator.runtime.hfcache import CacheLayout, select_files


def parser() -> Any:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m sparkrun_operator.runtime.download",
        description="Download, inspect or repair a Hugging Face repository revision in a cache volume.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("download", "inspect", "repair", "resolve"):
        p = sub.add_parser(name)
        p.add_argument("--root", required=True, help="cache root: the engine's HF_HOME (hub/ is inside)")
        p.add_argument("--repo", required=True, help="repository id, e.g. Qwen/Qwen3-8B")
        p.add_argument("--revision", default="main", help="branch, tag or commit (default main)")
        p.add_argument(
            "--commit", default=None, help="inspect/repair: this commit (default: refs/<revision>)"
        )
        p.add_argument("--repo-type", default="model", choices=["model", "dataset"])
        p.add_argument("--endpoint", default=None, help="hub URL (default HF_ENDPOINT or huggingface.co)")
        p.add_argument("--token-file", default=None, help="file holding the token (else HF_TOKEN)")
        p.add_argument(
            "--token-origins",
            default=None,
            metavar="URL[,URL...]",
            help="send the token only to these origins (scheme://host[:port]); elsewhere go anonymous "
            "(default: no restriction; the operator passes its allowlist, ADR 0040)",
        )
        p.add_argument("--allow", action="append", default=[], help="glob of files to include (repeatable)")
        p.add_argument("--ignore", action="append", default=[], help="glob of files to skip (repeatable)")
        default_verify = "size" if name == "download" else "sha256"
        p.add_argument("--verify", default=default_verify, choices=["none", "size", "sha256"])
        p.add_argument("--workers", type=int, default=8)
        p.add_argument("--status-file", default=None, help="keep the latest progress event in this file")
        p.add_argument("--progress-interval", type=float, default=2.0, help="seconds between progress events")
        p.add_argument("--quiet", action="store_true", help="no progress lines on stdout (result only)")
        p.add_argument(
            "--selection",
            default="all",
            choices=["auto", "all", "safetensors"],
            help="inspect/repair/resolve: which files (safetensors: no weights of other formats)",
        )
        p.add_argument(
            "--print-manifest",
            action="store_true",
            help="inspect/repair: add the revision's manifest in the daemon's shape (manifest_daemon)",
        )
    return parser


def daemon_manifest(layout: CacheLayout, commit: str, args: Any) -> dict[str, Any]:
    if not args.print_manifest:
        return {}
    manifest = layout.load_manifest(commit)
    if manifest is None:
        return {}
    kept = set(select_files([f.path for f in manifest.files], args.selection))
    manifest.files = [f for f in manifest.files if f.path in kept]
    return {"manifest_daemon": manifest.to_daemon(args.selection, provenance="cache")}


def allowed_token(token: str | None, endpoint: str, origins: str | None) -> tuple[str | None, str | None]:
    """``(token, notice)``: the token unless ``origins`` is given and ``endpoint`` is not one of
    them (then ``None`` and the notice saying so). An origin that does not parse allows nothing."""
    if token is None or origins is None:
        return token, None
    listed = [o for o in origins.split(",") if o]
    try:
        permits = CredentialEndpoints.parse({HUGGING_FACE: listed}).permits(HUGGING_FACE, endpoint)
    except ValueError:
        permits = False
    return (token, None) if permits else (None, withheld(HUGGING_FACE, endpoint, listed))
