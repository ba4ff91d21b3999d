"""TLS for the data plane: each peer's own self-signed certificate, and clients that pin it.

Peers need no certificate authority: a peer generates a key pair at start, serves its data plane
with a self-signed certificate, and registers the certificate's SHA-256 fingerprint; the coordinator
hands that fingerprint out with every endpoint, and whoever dials the peer (trainers, stage peers
copying state or pushing gradients, the coordinator's reachability probe) accepts the connection only
if the certificate it is shown has exactly that fingerprint. Host names are not checked: peers are
dialled by address, and the pin already names the one key that may answer.

Shared by both ends and free of torch. Generating a certificate needs the `cryptography` package
(the peer extra); pinning needs only the standard library, so the coordinator can probe without it.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import os
import ssl
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

CERTIFICATE_DAYS = 365


class PinMismatch(ConnectionError):
    """The server's certificate is not the one its endpoint was registered with."""


class HasExtraInfo(Protocol):
    def get_extra_info(self, name: str, default: object = None) -> object: ...


@dataclass(frozen=True)
class DataPlaneCertificate:
    """A peer's data-plane key pair and self-signed certificate, in PEM."""

    certificate_pem: bytes
    key_pem: bytes = field(repr=False)
    fingerprint: str
    """SHA-256 of the certificate's DER bytes, hex: what the peer registers and others pin."""

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        # load_cert_chain reads only files: write the pair where no other user can read it, briefly.
        with tempfile.TemporaryDirectory(prefix="swarmhub-tls-") as directory:
            cert_path = Path(directory, "cert.pem")
            key_path = Path(directory, "key.pem")
            cert_path.write_bytes(self.certificate_pem)
            descriptor = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "wb") as key_file:
                key_file.write(self.key_pem)
            context.load_cert_chain(cert_path, key_path)
        return context


def fingerprint_of(der: bytes) -> str:
    return hashlib.sha256(der).hexdigest()


def generate_certificate(common_name: str = "swarmhub-peer") -> DataPlaneCertificate:
    """A fresh P-256 key pair and a self-signed certificate for it."""
    # Imported here: only peers generate certificates, and the coordinator installs without it.
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        # An hour of slack for clocks that disagree between hosts.
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=CERTIFICATE_DAYS))
        .sign(key, hashes.SHA256())
    )
    return DataPlaneCertificate(
        certificate_pem=certificate.public_bytes(serialization.Encoding.PEM),
        key_pem=key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
        fingerprint=fingerprint_of(certificate.public_bytes(serialization.Encoding.DER)),
    )


def pinned_client_context() -> ssl.SSLContext:
    """A client context that completes the handshake with any certificate; `check_pin` then decides.

    No CA can vouch for a peer's self-signed certificate, so chain verification is off and the pin,
    checked right after the handshake and before any frame is sent, is the whole authentication."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def check_pin(transport: HasExtraInfo, expected: str, *, address: str) -> None:
    """Raise PinMismatch unless the TLS peer behind `transport` showed the certificate `expected` pins."""
    ssl_object = transport.get_extra_info("ssl_object")
    der = ssl_object.getpeercert(binary_form=True) if isinstance(ssl_object, ssl.SSLObject) else None
    if der is None:
        raise PinMismatch(f"peer at {address} did not present a TLS certificate")
    actual = fingerprint_of(der)
    if not hmac.compare_digest(actual, expected.lower()):
        raise PinMismatch(
            f"peer at {address} presented certificate {actual[:16]}..., "
            f"not the registered {expected[:16]}...: refusing the connection"
        )


def coordinator_context(coordinator_url: str, ca_file: Path | None) -> ssl.SSLContext | None:
    """How a peer verifies an https coordinator: the system's trust store, or only `ca_file` (a
    self-signed deployment). None for a plain http coordinator."""
    if not coordinator_url.startswith("https://"):
        return None
    return ssl.create_default_context(cafile=ca_file)


def data_plane_tls(coordinator_url: str, requested: bool) -> bool:
    """Whether a peer serves its data plane over TLS: asked for, or implied by an https coordinator."""
    return requested or coordinator_url.startswith("https://")
