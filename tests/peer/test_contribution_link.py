"""The link a peer prints for its participant's own page (`peer/registration.py`)."""

from __future__ import annotations

from peer.registration import contribution_url
from swarmhub.wire import PeerRegistered, RunSpec


def registered(token: str) -> PeerRegistered:
    run = RunSpec(run_id=3, name="r", model_preset="tiny", dataset="python-stdlib")
    return PeerRegistered(peer_id=7, credential="c", run=run, address="h:1", contribution_token=token)


def test_the_link_is_the_coordinators_dashboard_page_for_the_token() -> None:
    token = "t0k-en_" * 6
    assert contribution_url("https://swarm.example.org/", registered(token)) == (
        f"https://swarm.example.org/#/contribution/{token}"
    )
    assert contribution_url("http://10.0.0.2:8000", registered(token)) == (
        f"http://10.0.0.2:8000/#/contribution/{token}"
    )


def test_a_coordinator_without_a_ledger_gives_no_link() -> None:
    assert contribution_url("http://10.0.0.2:8000", registered("")) is None
