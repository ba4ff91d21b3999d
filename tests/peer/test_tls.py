"""Data-plane TLS: a pinned client accepts the certificate it was told of and refuses any other.

Two real frame servers on loopback, each with its own generated certificate; the pool and the
coordinator's reachability probe dial them over wss.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from peer.transport import FramePool, FrameServer, TransportError, UploadPacer
from swarmhub.probe import answer, credential_digest, probe
from swarmhub.tls import DataPlaneCertificate, coordinator_context, data_plane_tls, generate_certificate
from swarmhub.wire import PeerEndpoint

PEER_ID = 7
DIGEST = credential_digest("the credential")


@asynccontextmanager
async def serving(certificate: DataPlaneCertificate | None, reply: bytes) -> AsyncIterator[str]:
    """A frame server answering every frame with `reply`; yields its address."""

    async def handler(_frame: bytes) -> bytes:
        return reply

    listener = socket.create_server(("127.0.0.1", 0))
    server = FrameServer(
        handler,
        max_bytes=1 << 20,
        pacer=UploadPacer(None),
        answer_text=lambda text: answer(text, peer_id=PEER_ID, digest=DIGEST),
        ssl_context=None if certificate is None else certificate.server_context(),
    )
    await server.start(listener)
    try:
        yield f"127.0.0.1:{listener.getsockname()[1]}"
    finally:
        await server.stop()


def endpoint(address: str, fingerprint: str) -> PeerEndpoint:
    return PeerEndpoint(peer_id=PEER_ID, address=address, stage=0, fingerprint=fingerprint)


def test_generated_certificates_differ_and_fingerprint_is_sha256_hex() -> None:
    first, second = generate_certificate(), generate_certificate()
    assert first.fingerprint != second.fingerprint
    assert len(first.fingerprint) == 64 and int(first.fingerprint, 16) >= 0


def test_pool_accepts_the_pinned_certificate_and_refuses_another() -> None:
    mine, other = generate_certificate(), generate_certificate()

    async def scenario() -> None:
        async with serving(mine, b"from a") as a, serving(other, b"from b") as b:
            pool = FramePool(max_bytes=1 << 20, pacer=UploadPacer(None))
            try:
                # Both endpoints claim `mine`: only the server holding it may answer.
                pool.learn([endpoint(a, mine.fingerprint), endpoint(b, mine.fingerprint)])
                assert await pool.request(a, b"hello", timeout=10) == b"from a"
                with pytest.raises(TransportError, match=r"presented certificate .* not the registered"):
                    await pool.request(b, b"hello", timeout=10)
                # The coordinator lists b's real key: now it is accepted.
                pool.learn([endpoint(b, other.fingerprint)])
                assert await pool.request(b, b"hello", timeout=10) == b"from b"
            finally:
                await pool.close()

    asyncio.run(scenario())


def test_a_key_change_at_an_address_drops_the_connections_made_under_the_old_one() -> None:
    first, second = generate_certificate(), generate_certificate()

    async def scenario() -> None:
        async with serving(first, b"ok") as address:
            pool = FramePool(max_bytes=1 << 20, pacer=UploadPacer(None))
            try:
                pool.learn([endpoint(address, first.fingerprint)])
                assert await pool.request(address, b"x", timeout=10) == b"ok"
                # Same address, another key (as after a restart): the idle connection is not reused.
                pool.learn([endpoint(address, second.fingerprint)])
                with pytest.raises(TransportError, match="not the registered"):
                    await pool.request(address, b"x", timeout=10)
            finally:
                await pool.close()

    asyncio.run(scenario())


def test_tls_server_refuses_plain_ws_and_plain_endpoint_reaches_plain_server() -> None:
    certificate = generate_certificate()

    async def scenario() -> None:
        async with serving(certificate, b"tls") as secure, serving(None, b"plain") as plain:
            pool = FramePool(max_bytes=1 << 20, pacer=UploadPacer(None))
            try:
                pool.learn([endpoint(secure, ""), endpoint(plain, "")])
                assert await pool.request(plain, b"x", timeout=10) == b"plain"
                with pytest.raises(TransportError):
                    await pool.request(secure, b"x", timeout=10)
            finally:
                await pool.close()

    asyncio.run(scenario())


def test_probe_pins_the_registered_certificate() -> None:
    mine, other = generate_certificate(), generate_certificate()

    async def scenario() -> tuple[str | None, str | None, str | None]:
        async with serving(mine, b"") as a, serving(other, b"") as b:
            right = await probe(a, peer_id=PEER_ID, digest=DIGEST, fingerprint=mine.fingerprint)
            wrong = await probe(b, peer_id=PEER_ID, digest=DIGEST, fingerprint=mine.fingerprint)
            plain = await probe(a, peer_id=PEER_ID, digest=DIGEST, timeout_s=2)
            return right, wrong, plain

    right, wrong, plain = asyncio.run(scenario())
    assert right is None
    assert wrong is not None and "not the registered" in wrong
    assert plain is not None


def test_data_plane_tls_is_on_with_an_https_coordinator_or_when_asked() -> None:
    assert not data_plane_tls("http://127.0.0.1:8000", requested=False)
    assert data_plane_tls("http://127.0.0.1:8000", requested=True)
    assert data_plane_tls("https://swarm.example.org", requested=False)
    assert coordinator_context("http://127.0.0.1:8000", None) is None
    assert coordinator_context("https://swarm.example.org", None) is not None
