"""Dashboard feed frames built from rows, ready for `FeedHub.publish(run_id, frame)`."""

from __future__ import annotations

from typing import Any

from server.models import Event, Peer, Run, Step
from server.schemas import EventFrame, EventOut, PeerFrame, PeerOut, RunFrame, RunOut, StepFrame, StepOut


def event_frame(event: Event) -> dict[str, Any]:
    return EventFrame(event=EventOut.model_validate(event)).model_dump(mode="json")


def peer_frame(peer: Peer) -> dict[str, Any]:
    return PeerFrame(peer=PeerOut.model_validate(peer)).model_dump(mode="json")


def step_frame(step: Step) -> dict[str, Any]:
    return StepFrame(step=StepOut.model_validate(step)).model_dump(mode="json")


def run_frame(run: Run) -> dict[str, Any]:
    return RunFrame(run=RunOut.model_validate(run)).model_dump(mode="json")
