"""A stage's state copied from another peer over the data plane, with a bar while its bytes arrive.

A state is the largest thing a peer receives (a large stage's weights and optimizer moments run to
gigabytes), so a joining participant sees it coming in as a checkpoint download is seen: bytes,
share of the total, rate (`peer/console.py`). The total is what the reply frame itself declares in
its prefix and header, which arrive first.
"""

from __future__ import annotations

from torch import Tensor

from swarmhub.resources import FrameLimits
from swarmhub.wire import PeerEndpoint

from .console import Console, Download
from .frame_auth import AuthError, FrameSigner, SenderVerifier
from .frame_headers import ErrorReply, FetchState, StateReply
from .frames import FrameError, FrameLimit, assemble_call, declared_size, encode_payload, open_reply
from .transport import FramePool, transfer_timeout_s


class ArrivalBar:
    """A console bar of one frame arriving in fragments (`FramePool.request`'s `on_fragment`), shown
    once its header is in and more is to come: a frame that arrives whole has nothing to watch."""

    def __init__(self, console: Console, what: str, max_bytes: FrameLimit) -> None:
        self._console = console
        self._what = what
        self._max_bytes = max_bytes
        self._head = bytearray()
        self._bar: Download | None = None

    def received(self, fragment: bytes) -> None:
        if self._bar is not None:
            self._bar.advance(len(fragment))
            return
        # Only the prefix and header are kept (at most ~1 MiB: `read_prefix` refuses a longer one).
        self._head += fragment
        try:
            total = declared_size(self._head, max_bytes=self._max_bytes)
        except FrameError:
            # A malformed frame is refused when opened; until then its bytes are counted, total unknown.
            total = None
        else:
            if total is None or len(self._head) >= total:
                # Still within the header, or whole at once (a small state, a refusal): nothing to watch.
                return
        self._bar = self._console.download(self._what, total)
        self._bar.advance(len(self._head))
        self._head = bytearray()

    def finish(self) -> None:
        if self._bar is not None:
            self._bar.finish()


async def fetch_state(
    pool: FramePool,
    source: PeerEndpoint,
    request: FetchState,
    *,
    signer: FrameSigner,
    verifier: SenderVerifier,
    limits: FrameLimits,
    console: Console,
) -> tuple[int, dict[str, Tensor]] | str:
    """`source`'s state (its step and tensors), or what was wrong with its answer; raises
    TransportError when it could not be asked or did not answer."""
    frame, sent = assemble_call(request, encode_payload(None), signer, source.peer_id)
    bar = ArrivalBar(
        console, f"copying stage {request.stage}'s state from peer {source.peer_id}", limits.for_kind
    )
    try:
        reply = await pool.request(
            source.address, frame, transfer_timeout_s(limits.state), on_fragment=bar.received
        )
    finally:
        bar.finish()
    try:
        # Only the offered peer's signed answer to this request: a forged state would poison the stage.
        header, tensors = open_reply(reply, max_bytes=limits.for_kind, verifier=verifier, call=sent)
    except (FrameError, AuthError) as exc:
        return str(exc)
    if isinstance(header, StateReply):
        return header.step, tensors
    return header.error if isinstance(header, ErrorReply) else f"unexpected {header.kind} reply"
