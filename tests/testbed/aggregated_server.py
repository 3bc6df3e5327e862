"""A tiny aggregated API server for the aggregation tests (run as a script).

Serves, over TLS, the discovery document of ``/apis/<group>/<version>`` with one cluster-scoped
resource ``hellos`` and a list of one ``Hello`` that echoes the identity the aggregator
forwarded in ``X-Remote-User`` (proof that the request came through kube-apiserver).

    python aggregated_server.py HOST PORT CERT KEY GROUP VERSION
"""

from __future__ import annotations

import json
import ssl
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main(host: str, port: str, cert: str, key: str, group: str, version: str) -> None:
    base = f"/apis/{group}/{version}"
    discovery = {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}",
        "resources": [
            {
                "name": "hellos",
                "singularName": "hello",
                "namespaced": False,
                "kind": "Hello",
                "verbs": ["list"],
            }
        ],
    }

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == base:
                self._json(200, discovery)
            elif path == f"{base}/hellos":
                user = self.headers.get("X-Remote-User", "")
                item = {"apiVersion": f"{group}/{version}", "kind": "Hello", "metadata": {"name": "world"}}
                self._json(
                    200,
                    {
                        "apiVersion": f"{group}/{version}",
                        "kind": "HelloList",
                        "items": [{**item, "remoteUser": user}],
                    },
                )
            elif path in ("/healthz", "/readyz"):
                self._json(200, {"status": "ok"})
            else:
                self._json(
                    404,
                    {
                        "kind": "Status",
                        "apiVersion": "v1",
                        "status": "Failure",
                        "code": 404,
                        "reason": "NotFound",
                    },
                )

        def _json(self, status: int, body: object) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer((host, int(port)), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    print(f"serving {base} on https://{host}:{port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main(*sys.argv[1:])
