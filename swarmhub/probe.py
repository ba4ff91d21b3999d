"""The data-plane reachability probe: can the coordinator (or anyone) reach a peer where it says it is?

The prober opens a websocket to the peer's announced address and sends a `Probe` text frame; the
peer's data-plane server answers a `ProbeReply` whose proof is an HMAC of the nonce keyed by the
digest of its credential, which only that peer and the coordinator (which stores the digest) know.
A reply from anything else at that address, or none in time, means the peer is not reachable there.
A peer that registered a certificate fingerprint is probed over wss and must present that certificate
(`swarmhub/tls.py`), as every other caller of its data plane requires.
Shared by both ends and free of torch: the coordinator probes, the peer answers.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from websockets.asyncio.client import connect
from websockets.exceptions import WebSocketException

from .tls import PinMismatch, check_pin, pinned_client_context

PROBE_TIMEOUT_S = 5.0


class Probe(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["probe"] = "probe"
    peer_id: int = Field(ge=1)
    nonce: str = Field(pattern=r"^[0-9a-f]{32}$")


class ProbeReply(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["probe_reply"] = "probe_reply"
    peer_id: int = Field(ge=1)
    nonce: str = Field(pattern=r"^[0-9a-f]{32}$")
    proof: str = Field(pattern=r"^[0-9a-f]{64}$")


def credential_digest(credential: str) -> str:
    """What the coordinator stores of a peer's credential (sha256, hex); the probe's key."""
    return hashlib.sha256(credential.encode()).hexdigest()


def probe_proof(digest: str, nonce: str) -> str:
    return hmac.new(digest.encode(), nonce.encode(), hashlib.sha256).hexdigest()


def answer(text: str, *, peer_id: int, digest: str) -> str | None:
    """The peer's side: the reply to a probe addressed to it, or None for anything else."""
    try:
        probe = Probe.model_validate_json(text)
    except ValidationError:
        return None
    if probe.peer_id != peer_id:
        return None
    return ProbeReply(
        peer_id=peer_id, nonce=probe.nonce, proof=probe_proof(digest, probe.nonce)
    ).model_dump_json()


async def probe(
    address: str,
    *,
    peer_id: int,
    digest: str,
    timeout_s: float = PROBE_TIMEOUT_S,
    fingerprint: str = "",
) -> str | None:
    """None if the peer answered at `address` as itself; otherwise what went wrong, in plain words.

    With `fingerprint` (the one the peer registered) the probe speaks TLS and accepts only that
    certificate."""
    nonce = secrets.token_hex(16)
    scheme = "wss" if fingerprint else "ws"
    try:
        async with asyncio.timeout(timeout_s):
            async with connect(
                f"{scheme}://{address}",
                ssl=pinned_client_context() if fingerprint else None,
                open_timeout=timeout_s,
            ) as connection:
                if fingerprint:
                    check_pin(connection.transport, fingerprint, address=address)
                await connection.send(Probe(peer_id=peer_id, nonce=nonce).model_dump_json())
                raw = await connection.recv()
    except TimeoutError:
        return f"no answer within {timeout_s:g}s"
    except PinMismatch as exc:
        return str(exc)
    except (OSError, WebSocketException) as exc:
        return f"{type(exc).__name__}: {exc}"[:200]
    try:
        reply = ProbeReply.model_validate_json(raw)
    except ValidationError:
        return "something else answers there (not this peer's data plane)"
    if (
        reply.peer_id != peer_id
        or reply.nonce != nonce
        or not hmac.compare_digest(reply.proof, probe_proof(digest, nonce))
    ):
        return "another peer answers there"
    return None
