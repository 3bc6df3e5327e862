"""The pure parts of the process runtime's Services (testbed/sparkrun_testbed/process_services.py):
which endpoints a Service port relays to, and the Service names in the pods' hosts files. The
relay itself runs in tests/process/test_services.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sparkrun_testbed import process_dns
from sparkrun_testbed.process_services import SERVICE_NAME_LABEL, ready_endpoints


def _slice(
    service: str, endpoints: list[dict[str, Any]], ports: list[dict[str, Any]], **extra: Any
) -> dict[str, Any]:
    meta = {"namespace": "ns", "name": f"{service}-abc", "labels": {SERVICE_NAME_LABEL: service}}
    return {"metadata": meta, "addressType": "IPv4", "endpoints": endpoints, "ports": ports, **extra}


def test_only_ready_ipv4_endpoints_of_the_named_port_are_targets() -> None:
    endpoints = [
        {"addresses": ["172.30.1.5"], "conditions": {"ready": True}},
        {"addresses": ["172.30.1.6"], "conditions": {"ready": False}},
        {"addresses": ["172.30.1.7"]},  # no conditions: counts as ready, as kube-proxy reads it
    ]
    ports = [
        {"name": "http", "port": 8080, "protocol": "TCP"},
        {"name": "dns", "port": 53, "protocol": "UDP"},
    ]
    found = ready_endpoints(
        [
            _slice("web", endpoints, ports),
            _slice("web", [{"addresses": ["fd00::1"]}], ports, addressType="IPv6"),
            {
                "metadata": {"namespace": "ns", "name": "orphan"},
                "addressType": "IPv4",
                "endpoints": endpoints,
            },
        ]
    )
    assert found == {("ns", "web", "http"): [("172.30.1.5", 8080), ("172.30.1.7", 8080)]}


def test_service_names_resolve_in_every_pod_and_short_names_in_their_namespace(tmp_path: Path) -> None:
    registry = process_dns.Registry()
    mine, other = tmp_path / "mine", tmp_path / "other"
    registry.add("u1", process_dns.Record("ns1", "a", "", "172.30.1.1"), mine)
    registry.add("u2", process_dns.Record("ns2", "b", "", "172.30.1.2"), other)
    registry.set_services({("ns1", "web"): "10.96.0.10"})
    names = "web.ns1.svc.cluster.local web.ns1.svc web.ns1"
    assert f"10.96.0.10\t{names} web\n" in mine.read_text()
    assert f"10.96.0.10\t{names}\n" in other.read_text()
    registry.set_services({})
    assert "web" not in mine.read_text()
