"""A stage's state moving in and out of this peer: loaded on assignment, uploaded as a checkpoint.

On a `StageAssignment` the state comes from the first offered live peer of the stage that answers,
else from the stage checkpoint named, else from the seeded initialization (which every peer of the
stage builds identically); a trusted referee checks a copy against a second source's. The peer then
reports `StageReady` with where the state came from.
"""

from __future__ import annotations

import logging
from typing import Literal

import httpx
import torch
from torch import Tensor

from swarmhub.presets import get_preset
from swarmhub.wire import (
    CheckpointRequest,
    PeerEndpoint,
    PeerUnreachable,
    StageAssignment,
    StageLoadFailed,
    StageReady,
)

from .averaging import Averager
from .checkpoint_client import CheckpointError, download_stage_checkpoint, upload_stage_checkpoint
from .frame_headers import FetchState
from .joined import JoinedPeer
from .model import build_stage
from .progress import format_size
from .stage_worker import StageWorker
from .state_copy import fetch_state
from .transport import TransportError, UnlistedAddress

log = logging.getLogger(__name__)

Origin = Literal["kept", "copied", "checkpoint", "initialized"]


class StageLoadError(Exception):
    """No source the coordinator offered gave the stage's state."""


async def load_stage(peer: JoinedPeer, assignment: StageAssignment, averager: Averager) -> None:
    """Serve the assigned stage at the assigned step, then tell the coordinator it is ready."""
    run = peer.run
    worker = peer.server.worker
    origin: Origin = "kept"
    if (
        assignment.apply is not None
        and worker is not None
        and worker.stage == assignment.stage
        and worker.step == assignment.step - 1
    ):
        # The coordinator recorded the step but went down before this peer applied it: apply it now
        # if the averaged gradient is still here, rather than copy what others hold.
        await averager.apply(assignment.apply)
    if not (worker is not None and worker.stage == assignment.stage and worker.step == assignment.step):

        def build() -> StageWorker:
            module = build_stage(get_preset(run.model_preset), assignment.stage, run.num_stages, run.seed)
            return StageWorker(module, run, assignment.step, peer.device, peer.server.kept)

        # On the compute thread: building a large stage (swarm-ref's head, 15 M parameters) on the
        # event loop held every peer's heartbeats past the timeout when eight of them started at once
        # on two cores, and the coordinator gave them all up.
        worker = await peer.server.compute(build)
        origin = "initialized"
        try:
            if assignment.state_sources:
                sources = ", ".join(str(source.peer_id) for source in assignment.state_sources)
                peer.say(
                    f"copying stage {assignment.stage}'s weights and optimizer state from peer(s) {sources}…"
                )
                await _copy_state(peer, worker, assignment)
                origin = "copied"
            elif assignment.checkpoint_step is not None:
                peer.say(
                    f"downloading stage {assignment.stage}'s checkpoint of step {assignment.checkpoint_step}"
                    " from the coordinator…"
                )
                await _restore_checkpoint(peer, worker, assignment, assignment.checkpoint_step)
                origin = "checkpoint"
        except StageLoadError as exc:
            # Never start the stage afresh while others hold its state: the coordinator assigns it again.
            peer.say(f"could not load stage {assignment.stage}: {exc}")
            await peer.control.send(
                StageLoadFailed(stage=assignment.stage, step=assignment.step, reason=str(exc)[:500])
            )
            return
        peer.server.worker = worker
        # Sums of another stage or step were never this worker's round's.
        averager.forget_sums()
        # Rates measured on another stage say nothing about this one.
        peer.server.seconds_per_sample.clear()
        # The heartbeats sent while copying carried the old stage's rate (or none): the coordinator
        # lists this peer at its new stage with the rate it last heard, so it hears this stage's
        # first. Listed at a cheaper stage's rate, a mover was sent calls it could not serve in time.
        await peer.control.send(peer.heartbeat())
    peer.say(f"serving stage {assignment.stage} from step {worker.step} ({assignment.reason})")
    await peer.control.send(StageReady(stage=assignment.stage, step=worker.step, origin=origin))


async def _copy_state(peer: JoinedPeer, worker: StageWorker, assignment: StageAssignment) -> None:
    """Copy the stage's parameters and optimizer state from the first offered peer that answers; asked
    to corroborate, also from the next one, and refuse the state unless both copies are identical."""
    request = FetchState(
        run_id=peer.run.run_id, sender=peer.peer_id, stage=assignment.stage, step=assignment.step
    )
    wanted = 2 if assignment.corroborate and len(assignment.state_sources) >= 2 else 1
    problems: list[str] = []
    copies: list[tuple[int, int, dict[str, Tensor]]] = []
    for source in assignment.state_sources:
        fetched = await _fetch_state(peer, source, request)
        if isinstance(fetched, str):
            problems.append(f"peer {source.peer_id}: {fetched}")
            continue
        copies.append((source.peer_id, *fetched))
        if len(copies) == wanted:
            break
    else:
        raise StageLoadError(f"no {wanted} offered peers gave their state: {'; '.join(problems)}")
    if wanted == 2 and not _same_state(copies[0], copies[1]):
        raise StageLoadError(
            f"the states of peers {copies[0][0]} and {copies[1][0]} differ: one of them holds wrong weights"
        )
    source, step, tensors = copies[0]
    size = sum(t.numel() * t.element_size() for t in tensors.values())
    peer.say(f"copied stage {assignment.stage}'s state ({format_size(size)}) from peer {source}")
    await peer.server.compute(lambda: worker.import_state(tensors, step))


async def _fetch_state(
    peer: JoinedPeer, source: PeerEndpoint, request: FetchState
) -> tuple[int, dict[str, Tensor]] | str:
    """`source`'s state (its step and tensors), or what went wrong."""
    try:
        return await fetch_state(
            peer.pool,
            source,
            request,
            signer=peer.signer,
            verifier=peer.server.verifier,
            limits=peer.frame_limits,
            console=peer.console,
        )
    except TransportError as exc:
        if not isinstance(exc, UnlistedAddress):
            await peer.control.send(PeerUnreachable(peer_id=source.peer_id, reason=str(exc)[:500]))
        return str(exc)


def _same_state(a: tuple[int, int, dict[str, Tensor]], b: tuple[int, int, dict[str, Tensor]]) -> bool:
    _, step_a, state_a = a
    _, step_b, state_b = b
    return (
        step_a == step_b
        and state_a.keys() == state_b.keys()
        and all(torch.equal(state_a[k], state_b[k]) for k in state_a)
    )


async def _restore_checkpoint(
    peer: JoinedPeer, worker: StageWorker, assignment: StageAssignment, checkpoint_step: int
) -> None:
    """Load the stage checkpoint into `worker`, or raise StageLoadError."""
    try:
        state, _ = await download_stage_checkpoint(
            peer.http,
            peer.coordinator_url,
            peer.run.run_id,
            checkpoint_step,
            assignment.stage,
            peer.peer_id,
            peer.registered.credential,
            console=peer.console,
        )
    except (CheckpointError, httpx.HTTPError) as exc:
        raise StageLoadError(f"the step {checkpoint_step} checkpoint could not be loaded: {exc}") from exc
    # The checkpoint's parameters, serving the step the run is on now.
    await peer.server.compute(lambda: worker.import_state(state, assignment.step))


async def upload_checkpoint(peer: JoinedPeer, request: CheckpointRequest) -> None:
    """Upload the stage's state, if this peer still serves that stage at that step."""
    worker = peer.server.worker
    if worker is None or worker.stage != request.stage or worker.step != request.step:
        log.warning(
            "checkpoint of stage %d step %d asked, but this peer is elsewhere", request.stage, request.step
        )
        return
    state = await peer.server.compute(worker.export_state)
    run = peer.run
    await upload_stage_checkpoint(
        peer.http,
        peer.coordinator_url,
        run.run_id,
        request.step,
        request.stage,
        peer.peer_id,
        peer.registered.credential,
        state,
        {"model_preset": run.model_preset, "num_stages": str(run.num_stages)},
    )
    peer.say(f"uploaded checkpoint of stage {request.stage} at step {request.step}")
