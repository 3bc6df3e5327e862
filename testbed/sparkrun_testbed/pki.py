"""Keys and certificates for one testbed, made with ``cryptography``.

Two certificate authorities, as kubeadm lays them out:

- the cluster CA signs every serving certificate (kube-apiserver, controller-manager, scheduler,
  the JobSet webhook server, test servers) and admin client certificates; its PEM is the
  kubeconfig's ``certificate-authority-data`` and the webhooks' ``caBundle``;
- the front-proxy CA signs only the client certificate the aggregator presents to aggregated
  API servers (``--proxy-client-cert-file``); aggregated servers trust it through
  ``--requestheader-client-ca-file``.

Keys are ECDSA P-256: every component accepts them and they are generated in microseconds,
which keeps ``testbed up`` fast. Nothing here does network I/O.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = datetime.timedelta(days=365)
# NB: backdated so that a freshly issued certificate is valid for components whose clock reads
# a second earlier; Kubernetes does the same for its self-signed certificates.
_BACKDATE = datetime.timedelta(hours=1)


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    """The private key as unencrypted PKCS#8 PEM."""
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def public_key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key, both PEM."""

    cert_pem: bytes
    key_pem: bytes

    def write(self, cert_path: Path, key_path: Path) -> None:
        cert_path.write_bytes(self.cert_pem)
        key_path.write_bytes(self.key_pem)
        key_path.chmod(0o600)


class CertificateAuthority:
    """A self-signed CA that issues leaf certificates.

    ``issue`` returns server certificates (``serverAuth``) when given any SAN, client
    certificates (``clientAuth``) when ``client=True``; both usages may be combined.
    """

    def __init__(self, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate) -> None:
        self._key = key
        self._cert = cert

    @classmethod
    def create(cls, common_name: str) -> CertificateAuthority:
        """A new CA with a fresh key."""
        key = _new_key()
        now = datetime.datetime.now(datetime.UTC)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _BACKDATE)
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(_key_usage(cert_sign=True), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256())
        )
        return cls(key, cert)

    @classmethod
    def load(cls, cert_path: Path, key_path: Path) -> CertificateAuthority:
        """A CA from the PEM files :meth:`KeyPair.write` wrote."""
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError(f"{key_path}: expected an EC private key")
        return cls(key, cert)

    @property
    def cert_pem(self) -> bytes:
        return self._cert.public_bytes(serialization.Encoding.PEM)

    @property
    def key_pair(self) -> KeyPair:
        return KeyPair(self.cert_pem, key_pem(self._key))

    def issue(
        self,
        common_name: str,
        *,
        organizations: tuple[str, ...] = (),
        hosts: tuple[str, ...] = (),
        client: bool = False,
    ) -> KeyPair:
        """A leaf certificate signed by this CA.

        ``hosts`` are DNS names or IP literals (IPs become IP SANs); any host makes it a
        serving certificate. ``organizations`` become Kubernetes groups for client certs.
        """
        if not hosts and not client:
            raise ValueError("a certificate needs hosts (server) or client=True")
        key = _new_key()
        now = datetime.datetime.now(datetime.UTC)
        attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
        attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        usages = []
        if hosts:
            usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
        if client:
            usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attrs))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _BACKDATE)
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_key_usage(cert_sign=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()), critical=False
            )
        )
        if hosts:
            builder = builder.add_extension(x509.SubjectAlternativeName(_sans(hosts)), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        return KeyPair(cert.public_bytes(serialization.Encoding.PEM), key_pem(key))


def _key_usage(*, cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def _sans(hosts: tuple[str, ...]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


def new_signing_key() -> ec.EllipticCurvePrivateKey:
    """A fresh key, e.g. the service-account token signing key (ES256)."""
    return _new_key()
