"""Registering with the coordinator (`POST /api/peers/register`), retried while it cannot be reached.

A participant may start its peer before the coordinator is up, or while it restarts: like the
control channel, registration then keeps trying with capped backoff. A refusal (bad or revoked
token, run not accepting peers) is final and raised at once.
"""

from __future__ import annotations

import asyncio
import logging

import httpx

from swarmhub.wire import PeerRegistered, PeerRegistration

from .retry import backoff_delays, worth_retrying

log = logging.getLogger(__name__)


class RegistrationRefused(RuntimeError):
    """The coordinator answered and will not register this peer; retrying would not change that."""


def contribution_url(coordinator_url: str, registered: PeerRegistered) -> str | None:
    """The dashboard page where this peer's participant sees what it contributed (no login: the link is
    the key); None from a coordinator that issues none."""
    if not registered.contribution_token:
        return None
    return f"{coordinator_url.rstrip('/')}/#/contribution/{registered.contribution_token}"


def _detail(response: httpx.Response) -> str:
    try:
        return str(response.json().get("detail", response.text))
    except ValueError:
        return response.text or response.reason_phrase


async def register(
    http: httpx.AsyncClient, coordinator_url: str, registration: PeerRegistration
) -> PeerRegistered:
    """The registered peer, once the coordinator accepts it; waits out an unreachable coordinator."""
    delays = backoff_delays()
    while True:
        try:
            response = await http.post(
                f"{coordinator_url}/api/peers/register",
                content=registration.model_dump_json(),
                headers={"content-type": "application/json"},
            )
        except httpx.TransportError as exc:
            problem = f"cannot reach the coordinator at {coordinator_url}: {exc or type(exc).__name__}"
        else:
            if response.is_success:
                return PeerRegistered.model_validate_json(response.content)
            if not worth_retrying(response.status_code):
                raise RegistrationRefused(
                    f"the coordinator refused to register this peer: {_detail(response)}"
                )
            problem = f"the coordinator answered HTTP {response.status_code}: {_detail(response)[:200]}"
        delay = next(delays)
        log.warning("%s; retrying in %.1fs", problem, delay)
        await asyncio.sleep(delay)
