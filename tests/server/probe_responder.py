"""A real data-plane endpoint for the server tests' fake peers: it answers the coordinator's
reachability probe (`swarmhub.probe`) for every peer it was told about, as a peer's FrameServer does."""

from __future__ import annotations

import threading

from websockets.exceptions import ConnectionClosed
from websockets.sync.server import Server, ServerConnection, serve

from swarmhub.probe import answer, credential_digest


class ProbeResponder:
    def __init__(self) -> None:
        self._digests: dict[int, str] = {}
        self._server: Server = serve(self._serve, "127.0.0.1", 0)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        host, port = self._server.socket.getsockname()[:2]
        return f"{host}:{port}"

    def know(self, peer_id: int, credential: str) -> None:
        self._digests[peer_id] = credential_digest(credential)

    def _serve(self, connection: ServerConnection) -> None:
        try:
            for message in connection:
                reply = None
                if isinstance(message, str):
                    for peer_id, digest in list(self._digests.items()):
                        reply = reply or answer(message, peer_id=peer_id, digest=digest)
                if reply is None:
                    connection.close(1003, "not a probe for a known peer")
                    return
                connection.send(reply)
        except ConnectionClosed:
            return

    def close(self) -> None:
        self._server.shutdown()
        self._thread.join(timeout=5)
