"""How webhook deliveries are signed, and how a receiver checks them (stdlib only, so a receiver can
copy this file). The scheme is documented in docs/operations.md.

The coordinator sends `X-SwarmHub-Timestamp: <unix seconds>` and
`X-SwarmHub-Signature: v1=<hex HMAC-SHA256 of "<timestamp>." + raw body, keyed with the secret>`.
The timestamp is signed with the body so a captured request cannot be replayed later with a fresh
timestamp; a receiver refuses timestamps far from its own clock.
"""

from __future__ import annotations

import hashlib
import hmac
import time

TIMESTAMP_HEADER = "X-SwarmHub-Timestamp"
SIGNATURE_HEADER = "X-SwarmHub-Signature"
DELIVERY_HEADER = "X-SwarmHub-Delivery"
EVENT_HEADER = "X-SwarmHub-Event"
SCHEME = "v1"
DEFAULT_TOLERANCE_S = 300.0


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """The signature header's value for this body sent at this time."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"{SCHEME}={mac.hexdigest()}"


def signed_headers(secret: str, timestamp: int, body: bytes) -> dict[str, str]:
    return {TIMESTAMP_HEADER: str(timestamp), SIGNATURE_HEADER: signature(secret, timestamp, body)}


def verify(
    secret: str,
    body: bytes,
    timestamp: str | None,
    signature_header: str | None,
    *,
    now: float | None = None,
    tolerance_s: float = DEFAULT_TOLERANCE_S,
) -> bool:
    """True when the headers sign exactly this raw body with this secret, at most `tolerance_s` from
    `now` (default: this machine's clock). Verify the bytes received, before parsing the JSON."""
    if timestamp is None or signature_header is None or not timestamp.isdigit():
        return False
    sent_at = int(timestamp)
    if abs((time.time() if now is None else now) - sent_at) > tolerance_s:
        return False
    return hmac.compare_digest(signature(secret, sent_at, body).encode(), signature_header.encode())
