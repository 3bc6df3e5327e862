"""``/docs``: Swagger UI served from the installed ``swagger-ui-bundle`` package (no CDN).

The page loads ``/openapi.json`` and offers bearer authorization (the ``BearerAuth`` scheme).
Assets are served from ``/docs/static/``; only files of the bundle directory are served (no path
traversal), with a long cache lifetime since the bundle is versioned with the package.
"""

from __future__ import annotations

import functools
import mimetypes
from pathlib import Path

from starlette.responses import Response

from sparkrun_operator.ops.errors import NotFound

__all__ = ["STATIC_PREFIX", "asset", "index"]

STATIC_PREFIX = "/docs/static/"
_ASSETS = ("swagger-ui.css", "swagger-ui-bundle.js", "swagger-ui-standalone-preset.js", "favicon-32x32.png")

_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>sparkrun daemon API</title>
<link rel="stylesheet" href="{prefix}swagger-ui.css">
<link rel="icon" type="image/png" href="{prefix}favicon-32x32.png">
</head>
<body>
<div id="swagger-ui"></div>
<script src="{prefix}swagger-ui-bundle.js"></script>
<script src="{prefix}swagger-ui-standalone-preset.js"></script>
<script>
window.ui = SwaggerUIBundle({{
  url: "/openapi.json",
  dom_id: "#swagger-ui",
  deepLinking: true,
  persistAuthorization: true,
  presets: [SwaggerUIBundle.presets.apis, SwaggerUIStandalonePreset],
  layout: "BaseLayout"
}});
</script>
</body>
</html>
"""


@functools.cache
def _bundle_dir() -> Path:
    import swagger_ui_bundle  # type: ignore[import-untyped]

    return Path(swagger_ui_bundle.swagger_ui_path)


def index() -> Response:
    """The Swagger UI page."""
    return Response(_PAGE.format(prefix=STATIC_PREFIX), media_type="text/html")


@functools.cache
def _read(name: str) -> bytes:
    return (_bundle_dir() / name).read_bytes()


def asset(name: str) -> Response:
    """One file of the bundle; 404 for anything else."""
    if name not in _ASSETS:
        raise NotFound("Not Found")
    kind = mimetypes.guess_type(name)[0] or "application/octet-stream"
    return Response(_read(name), media_type=kind, headers={"cache-control": "public, max-age=86400"})
