"""TLS on both planes, with real processes.

`swarmhub serve --tls-cert/--tls-key` with a self-signed certificate made here; peers join with the
join command the run page shows (an https URL) plus `--coordinator-ca`, which implies a TLS data
plane: each peer generates its key pair, the coordinator hands out the fingerprints, and stage calls,
state copies and gradient pushes are pinned. A client pinning the wrong key is refused by the real
peers it dials.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import shlex
import sqlite3
from pathlib import Path

import pytest

from launch.local_swarm import LocalSwarm
from peer.frame_headers import ErrorReply
from peer.frames import decode_frame
from peer.transport import FramePool, TransportError, UploadPacer
from swarmhub.wire import PeerEndpoint
from tests.training.swarm_helpers import DEMO_RUN, WAIT_S

pytestmark = pytest.mark.slow

STEPS = 3
"""Steps to train before the wrong-key check; the run itself goes on (its peers must be serving)."""


def self_signed_coordinator_certificate(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and localhost, as an operator would make with openssl."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "swarmhub test coordinator")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "coordinator.pem", directory / "coordinator.key"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_path, key_path


def _registered(database: Path) -> dict[int, tuple[str, str]]:
    """Peer id -> (address, fingerprint) as the coordinator recorded them."""
    with sqlite3.connect(database) as connection:
        rows = connection.execute("select id, address, tls_fingerprint from peers").fetchall()
    return {peer_id: (address, fingerprint) for peer_id, address, fingerprint in rows}


async def _dial(address: str, fingerprint: str) -> bytes:
    pool = FramePool(max_bytes=1 << 20, pacer=UploadPacer(None))
    try:
        pool.learn([PeerEndpoint(peer_id=1, address=address, stage=0, fingerprint=fingerprint)])
        # Not a valid frame: a peer that accepted the connection answers with an error frame.
        return await pool.request(address, b"SWH1 not a frame", timeout=20)
    finally:
        await pool.close()


@pytest.mark.timeout(420)
def test_https_coordinator_and_pinned_tls_data_plane_train_and_refuse_a_wrong_key(tmp_path: Path) -> None:
    cert, key = self_signed_coordinator_certificate(tmp_path)
    swarm = LocalSwarm(workdir=tmp_path, tls_cert=cert, tls_key=key)
    try:
        swarm.start()
        assert swarm.url.startswith("https://")
        run = swarm.create_run(name="tls", max_steps=100 * STEPS, rebalance=False, **DEMO_RUN)
        words = shlex.split(swarm.join_command)
        url = next(word for word in words if word.startswith("http"))
        assert url == swarm.url, swarm.join_command
        assert swarm.token in words
        for stage in (0, 0, 1, 1):
            swarm.start_peer("--coordinator-ca", str(cert), "--stage", str(stage))
        try:
            steps = swarm.wait_for_steps(run["id"], STEPS, timeout_s=WAIT_S)
        except (TimeoutError, RuntimeError) as exc:
            raise AssertionError(f"{exc}\n{swarm.logs()}") from None
        assert all(s["samples_counted"] == [s["samples_sent"]] * 2 for s in steps), steps

        registered = _registered(tmp_path / "swarmhub.sqlite")
        assert len(registered) == 4
        fingerprints = [fingerprint for _, fingerprint in registered.values()]
        assert all(len(f) == 64 for f in fingerprints) and len(set(fingerprints)) == 4

        # The run goes on: dial one peer with its own key, then with another peer's.
        peer_ids = sorted(registered)
        address, fingerprint = registered[peer_ids[0]]
        other_fingerprint = registered[peer_ids[1]][1]
        header, _ = decode_frame(asyncio.run(_dial(address, fingerprint)), max_bytes=1 << 20)
        assert isinstance(header, ErrorReply)
        with pytest.raises(TransportError, match="not the registered"):
            asyncio.run(_dial(address, other_fingerprint))
        # Plain ws to a TLS data plane gets nowhere either.
        with pytest.raises(TransportError):
            asyncio.run(_dial(address, ""))
    finally:
        swarm.stop()
