"""Measured data-plane link rates to other peers: bytes moved per second of transfer, smoothed.

Every request a peer makes through its `FramePool` is one sample: the bytes it sent and received
over the time the exchange took, less the time the other peer says it held the call (a stage
reply's `server_s`: queueing and compute), so a slow or busy GPU does not read as a slow link.
Samples are smoothed per remote peer with an exponential moving average. The meter keeps the most
recently measured peers only, bounded, so a heartbeat can carry all of them.
"""

from __future__ import annotations

from dataclasses import dataclass

LINK_SMOOTHING = 0.3
"""Weight of a new sample in the moving average: a few requests follow a link that changed."""
MAX_LINKS = 256
"""At most this many peers are remembered (the heartbeat's bound); the least recently measured go."""
LINK_REPORT_MAX_AGE_S = 60.0
"""Heartbeats report links measured this recently: an old figure may describe a path since changed."""
MIN_TRANSFER_SHARE = 0.1
"""A request whose serving peer says it held it about as long as it took (or longer: its reply's
figure is not trusted further) still spent this share of it on the link."""


@dataclass(kw_only=True)
class _Link:
    bytes_per_s: float
    measured_at: float


class LinkMeter:
    def __init__(self, *, capacity: int = MAX_LINKS, smoothing: float = LINK_SMOOTHING) -> None:
        self._capacity = capacity
        self._smoothing = smoothing
        self._links: dict[int, _Link] = {}

    def observe(self, peer_id: int, nbytes: int, seconds: float, now: float, held_s: float = 0.0) -> None:
        """One exchange with `peer_id`: `nbytes` both ways in `seconds`, of which the other peer
        held the call for `held_s`."""
        if nbytes <= 0 or seconds <= 0:
            return
        transfer_s = max(seconds - held_s, MIN_TRANSFER_SHARE * seconds)
        rate = nbytes / transfer_s
        link = self._links.pop(peer_id, None)
        if link is None:
            link = _Link(bytes_per_s=rate, measured_at=now)
        else:
            link.bytes_per_s += self._smoothing * (rate - link.bytes_per_s)
            link.measured_at = now
        # Re-inserted last: the dict's order is the order of measurement, oldest first.
        self._links[peer_id] = link
        while len(self._links) > self._capacity:
            del self._links[next(iter(self._links))]

    def rate(self, peer_id: int) -> float | None:
        link = self._links.get(peer_id)
        return link.bytes_per_s if link is not None else None

    def rates(self, now: float | None = None, max_age_s: float | None = None) -> dict[int, float]:
        """Peer id -> bytes per second; with `max_age_s`, only links measured that recently."""
        return {
            peer_id: link.bytes_per_s
            for peer_id, link in self._links.items()
            if max_age_s is None or now is None or now - link.measured_at <= max_age_s
        }

    def forget(self, peer_id: int) -> None:
        self._links.pop(peer_id, None)
