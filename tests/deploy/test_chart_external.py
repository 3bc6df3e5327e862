"""The shim's external hostnames (`shim.external`): certificate names, the TLS-passthrough routes.

Rendered with the real `helm` (and refused by the chart's values schema or its `fail`s where the
values make no sense); on the testbed, installed and upgraded for real: the apiserver accepts the
Ingress and the Gateway API TLSRoute (its standard CRD of Gateway API 1.5.1, from
``hack/epp-bin.sh``'s share directory; the testbed runs no ingress controller or Gateway, so the
routes are validated, not exercised), and a change of the names makes a new certificate that
carries them while an upgrade with the same names keeps the CA. A TLS connection under such a
name is made in tests/shim/test_reference_client_external.py.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509

from sparkrun_operator.render import keys
from sparkrun_testbed import epp, plane
from tests.deploy.chart import CHART, NAMESPACE, Rendered, helm, render
from tests.deploy.test_helm_install import BASE
from tests.gobinary import go_binary

HOSTS = ["shim.example.test", "daemon.example.org"]
SERVICE_NAMES = [
    "sparkrun-shim",
    f"sparkrun-shim.{NAMESPACE}",
    f"sparkrun-shim.{NAMESPACE}.svc",
    f"sparkrun-shim.{NAMESPACE}.svc.cluster.local",
]
PARENT = {"name": "edge", "namespace": "gateways", "sectionName": "daemon-tls"}
ROUTES = {
    "shim": {
        "external": {
            "hostnames": HOSTS,
            "ingress": {"enabled": True, "className": "nginx"},
            "gatewayRoute": {"enabled": True, "parentRefs": [PARENT]},
        }
    }
}


def _sans(secret: dict[str, Any]) -> list[str]:
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    names: list[str] = cert.extensions.get_extension_for_class(
        x509.SubjectAlternativeName
    ).value.get_values_for_type(x509.DNSName)
    return names


def test_by_default_no_route_and_only_the_service_names(default: Rendered) -> None:
    assert default.of("Ingress") == []
    assert default.of("TLSRoute") == []
    secret = default.get("Secret", "sparkrun-shim-tls", NAMESPACE)
    assert _sans(secret) == SERVICE_NAMES
    assert secret["metadata"]["annotations"][keys.ANNOTATION_SHIM_TLS_NAMES] == ",".join(SERVICE_NAMES)


def test_hostnames_join_the_generated_and_the_cert_manager_certificate(helm_bin: str, tmp_path: Path) -> None:
    generated = render(helm_bin, tmp_path, {"shim": {"external": {"hostnames": HOSTS}}})
    secret = generated.get("Secret", "sparkrun-shim-tls", NAMESPACE)
    assert _sans(secret) == SERVICE_NAMES + HOSTS
    names = secret["metadata"]["annotations"][keys.ANNOTATION_SHIM_TLS_NAMES]
    assert names == ",".join(SERVICE_NAMES + HOSTS)
    assert generated.of("Ingress") == [], "names alone make no route"

    managed = render(
        helm_bin, tmp_path, {"certManager": {"enabled": True}, "shim": {"external": {"hostnames": HOSTS}}}
    )
    assert managed.get("Certificate", "sparkrun-shim")["spec"]["dnsNames"] == SERVICE_NAMES + HOSTS


def test_the_routes_pass_tls_through_to_the_daemon_port(helm_bin: str, tmp_path: Path) -> None:
    out = render(helm_bin, tmp_path, ROUTES)
    ingress = out.get("Ingress", "sparkrun-shim-external", NAMESPACE)
    assert ingress["metadata"]["annotations"] == {
        "nginx.ingress.kubernetes.io/ssl-passthrough": "true",
        "nginx.ingress.kubernetes.io/backend-protocol": "HTTPS",
    }
    spec = ingress["spec"]
    assert "tls" not in spec, "passthrough: the controller never holds the shim's key"
    assert spec["ingressClassName"] == "nginx"
    assert [rule["host"] for rule in spec["rules"]] == HOSTS
    backend = spec["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert backend == {"name": "sparkrun-shim", "port": {"name": "daemon-api"}}
    service = out.get("Service", "sparkrun-shim", NAMESPACE)
    assert {"name": "daemon-api", "port": 8443, "targetPort": "daemon-api", "protocol": "TCP"} in service[
        "spec"
    ]["ports"]

    route = out.get("TLSRoute", "sparkrun-shim-external", NAMESPACE)
    assert route["apiVersion"] == "gateway.networking.k8s.io/v1"
    assert route["spec"] == {
        "parentRefs": [PARENT],
        "hostnames": HOSTS,
        "rules": [{"backendRefs": [{"name": "sparkrun-shim", "port": 8443}]}],
    }
    assert route["metadata"]["labels"]["app.kubernetes.io/component"] == "shim"

    dropped = render(
        helm_bin,
        tmp_path,
        {
            "shim": {
                "external": {
                    "hostnames": HOSTS[:1],
                    "ingress": {
                        "enabled": True,
                        "annotations": {
                            "nginx.ingress.kubernetes.io/ssl-passthrough": None,
                            "nginx.ingress.kubernetes.io/backend-protocol": None,
                            "haproxy.org/ssl-passthrough": "true",
                        },
                    },
                }
            }
        },
    )
    other = dropped.get("Ingress", "sparkrun-shim-external", NAMESPACE)
    assert other["metadata"]["annotations"] == {"haproxy.org/ssl-passthrough": "true"}
    assert "ingressClassName" not in other["spec"]
    assert dropped.of("TLSRoute") == []

    values = tmp_path / "routes.yaml"
    values.write_text(yaml.safe_dump(ROUTES))
    lint = helm(helm_bin, "lint", "--strict", str(CHART), "--values", str(values), check=False)
    assert lint.returncode == 0, lint.stdout + lint.stderr


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        (["--set", "shim.external.hostnames={Shim.Example.test}"], "at '/shim/external/hostnames/0'"),
        (["--set", "shim.external.hostnames={*.example.test}"], "at '/shim/external/hostnames/0'"),
        (["--set", "shim.external.hostnames={shim}"], "at '/shim/external/hostnames/0'"),
        (["--set", "shim.external.hostnames={https://shim.example.test}"], "at '/shim/external/hostnames/0'"),
        (["--set", "shim.external.hostnames={a.test,a.test}"], "at '/shim/external/hostnames'"),
        (
            ["--set", "shim.external.hostnames={" + ",".join(f"h{i}.example.test" for i in range(17)) + "}"],
            "at '/shim/external/hostnames'",
        ),
        (["--set", f"shim.external.hostnames={{{'a' * 64}.test}}"], "at '/shim/external/hostnames/0'"),
        (["--set", "shim.external.ingres.enabled=true"], "'ingres' not allowed"),
        (["--set", "shim.external.ingress.enabled=true"], "need shim.external.hostnames"),
        (
            ["--set", "shim.external.hostnames={a.test}", "--set", "shim.external.gatewayRoute.enabled=true"],
            "needs shim.external.gatewayRoute.parentRefs",
        ),
    ],
)
def test_nonsense_is_refused(helm_bin: str, setting: list[str], named: str) -> None:
    done = helm(helm_bin, "template", "sparkrun", str(CHART), "-n", NAMESPACE, *setting, check=False)
    assert done.returncode != 0, f"{setting} was accepted"
    assert named in done.stderr, done.stderr


# -- on the testbed's apiserver ---------------------------------------------------------------

RELEASE = "chart-ext"


def _tlsroute_crd(testbed: plane.Testbed) -> None:
    binary = go_binary(epp.locate, epp.build, "hack/epp-bin.sh")  # its share dir has the CRDs
    path = epp.share_dir(binary) / "gateway-api" / "gateway.networking.k8s.io_tlsroutes.yaml"
    assert path.is_file(), f"{path} is missing: run hack/epp-bin.sh (it copies Gateway API's TLSRoute CRD)"
    assert testbed.apply_crds([yaml.safe_load(path.read_text())]) == ["tlsroutes.gateway.networking.k8s.io"]


@pytest.mark.testbed
@pytest.mark.usefixtures("crds")
def test_installed_routes_are_accepted_and_new_names_make_a_new_certificate(
    helm_bin: str, testbed: plane.Testbed, kubectl: Any, namespace: str, tmp_path: Path
) -> None:
    _tlsroute_crd(testbed)
    values = tmp_path / "routes.yaml"
    values.write_text(yaml.safe_dump(ROUTES))

    def secret() -> dict[str, Any]:
        found: dict[str, Any] = kubectl.json("get", "secret", f"{RELEASE}-shim-tls", "-n", namespace)
        return found

    install = ["install", RELEASE, str(CHART), "-n", namespace, *BASE, "--values", str(values)]
    done = helm(helm_bin, *install, check=False)
    assert done.returncode == 0, done.stderr
    try:
        ingress = kubectl.json("get", "ingress", f"{RELEASE}-shim-external", "-n", namespace)
        assert [rule["host"] for rule in ingress["spec"]["rules"]] == HOSTS
        route = kubectl.json(
            "get", "tlsroutes.gateway.networking.k8s.io", f"{RELEASE}-shim-external", "-n", namespace
        )
        assert route["spec"]["hostnames"] == HOSTS
        backend = route["spec"]["rules"][0]["backendRefs"][0]
        assert (backend["kind"], backend["name"], backend["port"]) == ("Service", f"{RELEASE}-shim", 8443)
        first = secret()
        assert _sans(first)[-2:] == HOSTS

        upgrade = ["upgrade", RELEASE, str(CHART), "-n", namespace, "--reuse-values"]
        done = helm(helm_bin, *upgrade, "--set", "gateway.replicas=1", check=False)
        assert done.returncode == 0, done.stderr
        assert secret()["data"] == first["data"], "the same names keep the certificate and its CA"

        more = json.dumps([*HOSTS, "third.example.test"])
        done = helm(helm_bin, *upgrade, "--set-json", f"shim.external.hostnames={more}", check=False)
        assert done.returncode == 0, done.stderr
        renewed = secret()
        assert _sans(renewed)[-3:] == [*HOSTS, "third.example.test"]
        assert renewed["data"]["ca.crt"] != first["data"]["ca.crt"], "a new name: a new certificate"
        route = kubectl.json(
            "get", "tlsroutes.gateway.networking.k8s.io", f"{RELEASE}-shim-external", "-n", namespace
        )
        assert route["spec"]["hostnames"] == [*HOSTS, "third.example.test"]
    finally:
        gone = helm(helm_bin, "uninstall", RELEASE, "-n", namespace, "--wait", check=False)
    assert gone.returncode == 0, gone.stderr
