"""The Gateway API Inference Extension's endpoint picker (``cmd/epp``, v1.5.0) and its CRDs.

``hack/epp-bin.sh`` builds the picker from the pinned wrapper module ``hack/epp/`` into
``<cache>/epp-<key>/bin/epp`` and copies beside it, into ``<cache>/epp-<key>/share/``, the
InferencePool CRD of the same module (``inferencepool/``) and Gateway API's standard CRDs for
GatewayClass, Gateway and HTTPRoute (``gateway-api/``; the testbed runs no Gateway
implementation, the CRDs are there so that examples can be applied and linted). The binary comes
from env ``SPARKRUN_EPP_BIN`` (a path to the executable) when set, else from
``hack/epp-bin.sh --print``; the share directory is always the bin directory's sibling.

The process runtime runs the picker's image (:data:`IMAGE`, any tag) as this binary
(:mod:`.process_images`), so a picker Deployment's pod really runs on a process node.
"""

from __future__ import annotations

from pathlib import Path

from .binaries import BinariesMissing, GoTool

BIN_ENV = "SPARKRUN_EPP_BIN"
NAME = "epp"
VERSION = "v1.5.0"
IMAGE = "registry.k8s.io/gateway-api-inference-extension/epp"
#: The picker's ports (its defaults): ext-proc gRPC, gRPC health, Prometheus metrics.
GRPC_PORT = 9002
HEALTH_PORT = 9003
METRICS_PORT = 9090
#: The gRPC health service name its readiness answers for (``grpc.health.v1``).
HEALTH_SERVICE = "inference-extension"
_SCRIPT = Path("hack") / "epp-bin.sh"
_POOL_CRD = Path("inferencepool") / "inference.networking.k8s.io_inferencepools.yaml"
_GATEWAY_CRDS = tuple(
    Path("gateway-api") / f"gateway.networking.k8s.io_{kind}.yaml"
    for kind in ("gatewayclasses", "gateways", "httproutes")
)
_TOOL = GoTool(NAME, BIN_ENV, _SCRIPT)


def locate(repo: Path | None = None) -> Path:
    """The configured binary's path (it may not be built yet: check ``os.access(path, X_OK)``)."""
    return _TOOL.locate(repo)


def build(repo: Path | None = None) -> Path:
    """Run ``hack/epp-bin.sh`` (a cold build takes many minutes); its log goes to stderr."""
    return _TOOL.build(repo)


def share_dir(binary: Path) -> Path:
    """``<cache>/epp-<key>/share`` for the binary at ``<cache>/epp-<key>/bin/epp``."""
    return binary.parent.parent / "share"


def inferencepool_crd(binary: Path) -> Path:
    """The ``inferencepools.inference.networking.k8s.io`` CRD (v1) of the picker's module."""
    return _existing(share_dir(binary) / _POOL_CRD)


def gateway_api_crds(binary: Path) -> tuple[Path, ...]:
    """Gateway API's standard GatewayClass, Gateway and HTTPRoute CRDs."""
    return tuple(_existing(share_dir(binary) / p) for p in _GATEWAY_CRDS)


def _existing(path: Path) -> Path:
    if not path.is_file():
        raise BinariesMissing(f"{path} is missing: run {_SCRIPT}")
    return path
