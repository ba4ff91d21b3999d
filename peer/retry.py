"""How a peer retries the coordinator: capped exponential backoff, and which answers are worth it."""

from __future__ import annotations

from collections.abc import Iterator

BACKOFF_START_S = 0.5
BACKOFF_MAX_S = 10.0


def backoff_delays(start_s: float = BACKOFF_START_S, max_s: float = BACKOFF_MAX_S) -> Iterator[float]:
    """Seconds to wait before each next attempt: doubling from `start_s`, never above `max_s`."""
    delay = min(start_s, max_s)
    while True:
        yield delay
        delay = min(max_s, delay * 2)


def worth_retrying(status_code: int) -> bool:
    """A coordinator that is restarting or overloaded answers 5xx, 408 or 429 and may answer later;
    any other 4xx (a revoked token, a full run) says the same thing on every attempt."""
    return status_code >= 500 or status_code in (408, 429)
