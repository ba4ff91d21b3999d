"""The rows the live swarm writes: admissions, departures, assignments, committed steps, heartbeat figures.

Each function works in the caller's session and only flushes; the caller (`server.live`) commits and
then publishes the dashboard frames these functions return.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from server.checkpoints import service as checkpoints
from server.errors import NotFound
from server.frames import peer_frame, run_frame, step_frame
from server.ledger.service import add_credits, count_failure
from server.models import Peer, Run, StageAssignment, Step, utcnow
from server.services.events import record_event
from server.services.peers import authenticate_peer
from server.services.steps import record_metric, record_step
from server.swarm.decisions import RecordEvent, RecordStep
from swarmhub.status import PeerState, RunStatus
from swarmhub.units import per_stage
from swarmhub.wire import ApplyStep, Hello

Frame = tuple[int, dict[str, Any]]
CONNECTED_STATES = (PeerState.JOINING, PeerState.ACTIVE)
DEPARTED = {PeerState.LEFT: "left", PeerState.KICKED: "was removed by the coordinator"}


class PeerRejected(Exception):
    """The control channel is refused; the message is the close reason."""


def admit_peer(session: Session, hello: Hello) -> tuple[Peer, Run, list[Frame]]:
    """Check a Hello and mark its peer active; raises PeerRejected."""
    peer = authenticate_peer(session, hello.peer_id, hello.credential)
    if peer is None:
        raise PeerRejected("unknown peer or bad credential")
    run = session.get_one(Run, peer.run_id)
    if run.status not in (RunStatus.ACTIVE, RunStatus.PAUSED):
        raise PeerRejected(f"run {run.id} is {run.status}")
    rejoining = peer.state != PeerState.JOINING
    peer.state = PeerState.ACTIVE
    peer.last_heartbeat = utcnow()
    if hello.throughput > 0:
        peer.throughput = hello.throughput
    record_event(
        session,
        run_id=run.id,
        peer_id=peer.id,
        kind="peer_rejoined" if rejoining else "peer_joined",
        message=f"{peer.name} {'came back' if rejoining else 'joined'} ({peer.device})",
    )
    session.flush()
    return peer, run, [(run.id, peer_frame(peer))]


def record_departure(
    session: Session, peer_id: int, state: str, reason: str, stage: int | None
) -> list[Frame]:
    peer = session.get_one(Peer, peer_id)
    if peer.state in (PeerState.KICKED, PeerState.BANNED):
        return []  # the route that removed it wrote its departure
    peer.state = state
    peer.left_at = utcnow()
    if state == PeerState.LOST:
        count_failure(session, peer)
    record_event(
        session,
        run_id=peer.run_id,
        peer_id=peer.id,
        kind=f"peer_{state}",
        message=f"{peer.name} {DEPARTED.get(state, 'was lost')}: {reason}",
        data={"stage": stage},
    )
    session.flush()
    return [(peer.run_id, peer_frame(peer))]


def record_swarm_event(session: Session, run_id: int, event: RecordEvent) -> list[Frame]:
    """An event the run's machine decided on (its frame is published with the commit)."""
    record_event(
        session, run_id=run_id, peer_id=event.peer_id, kind=event.kind, message=event.message, data=event.data
    )
    return []


def record_assignment(session: Session, peer_id: int, stage: int, step: int, reason: str) -> list[Frame]:
    peer = session.get_one(Peer, peer_id)
    peer.stage = stage
    session.add(StageAssignment(run_id=peer.run_id, peer_id=peer.id, stage=stage, step=step, reason=reason))
    record_event(
        session,
        run_id=peer.run_id,
        peer_id=peer.id,
        kind="stage_assigned",
        message=f"{peer.name} serves stage {stage} ({reason})",
        data={"stage": stage, "step": step},
    )
    session.flush()
    return [(peer.run_id, peer_frame(peer))]


def record_reachability(session: Session, peer_id: int, reachable: bool, detail: str) -> list[Frame]:
    """What the coordinator's probe found; a peer it cannot reach trains only and holds no stage."""
    peer = session.get_one(Peer, peer_id)
    peer.reachable = reachable
    if not reachable:
        peer.stage = None
        record_event(
            session,
            run_id=peer.run_id,
            peer_id=peer.id,
            kind="peer_trainer_only",
            message=f"{peer.name}: {detail}",
        )
    session.flush()
    return [(peer.run_id, peer_frame(peer))]


def latest_checkpoint_step(session: Session, run_id: int) -> int | None:
    try:
        return checkpoints.latest_complete(session, session.get_one(Run, run_id)).step
    except NotFound:
        return None


def record_committed_step(session: Session, run_id: int, record: RecordStep) -> list[Frame]:
    """Write a step as committed: its row with each stage's update, metrics, the run's cursor.

    Idempotent: a retried write of a step already recorded changes nothing.
    """
    row = session.get_one(Run, run_id)
    if row.current_step > record.step:
        return []
    row.current_step = record.step + 1
    row.next_sample = record.next_sample
    if record.finished:
        row.status = RunStatus.FINISHED
    step_row = record_step(
        session,
        run_id=run_id,
        step=record.step,
        loss=record.loss,
        samples_sent=record.samples_sent,
        samples_lost=record.samples_lost,
        samples_counted=list(record.samples_counted),
        duration_s=record.duration_s,
    )
    step_row.learning_rate = record.learning_rate
    step_row.grad_scale = record.grad_scale
    step_row.attempts = list(record.attempts)
    add_credits(session, run_id, record.credits)
    rate = record.samples_done / max(record.duration_s, 1e-9)
    for name, value in (
        ("samples_per_s", rate),
        ("wire_bytes", record.wire_bytes),
        ("retries", record.retries),
        ("spot_check_calls", record.check_calls),
        ("spot_check_bytes", record.check_bytes),
        ("spot_check_seconds", record.check_seconds),
        ("spot_check_largest_agreeing", record.check_largest_agreeing),
        ("time_compute_s", record.time_compute_s),
        ("time_network_s", record.time_network_s),
        ("time_waiting_s", record.time_waiting_s),
        ("time_averaging_s", record.time_averaging_s),
        ("time_coordinator_s", record.time_coordinator_s),
        ("activation_cache_hits", record.cache_hits),
        ("activation_cache_misses", record.cache_misses),
    ):
        record_metric(session, run_id=run_id, step=record.step, name=name, value=value)
    busy = record.stage_busy
    if busy is not None:
        for name, value in (
            ("busiest_stage", busy.stage),
            ("busiest_stage_busy_share", busy.mean_share),
            ("busiest_stage_least_busy_share", busy.least_share),
            ("busiest_stage_most_busy_share", busy.most_share),
        ):
            record_metric(session, run_id=run_id, step=record.step, name=name, value=value)
    lost = {
        s: record.samples_sent - c for s, c in enumerate(record.samples_counted) if c < record.samples_sent
    }
    if lost:
        record_event(
            session,
            run_id=run_id,
            kind="samples_lost",
            message=f"step {record.step}: samples lost ({per_stage(lost)}) of {record.samples_sent} sent",
            data={"step": record.step, "lost": lost, "sent": record.samples_sent},
        )
    frames = [(run_id, step_frame(step_row))]
    if record.finished:
        record_event(
            session, run_id=run_id, kind="run_finished", message=f"reached max_steps={row.max_steps}"
        )
        frames.append((run_id, run_frame(row)))
    session.flush()
    return frames


def last_step_updates(session: Session, run: Run) -> dict[int, ApplyStep]:
    """Each stage's update of the run's last recorded step (empty before the first, or before 0004)."""
    last = session.scalar(sa.select(Step).where(Step.run_id == run.id, Step.step == run.current_step - 1))
    if last is None or last.learning_rate is None or last.grad_scale is None or last.attempts is None:
        return {}
    return {
        stage: ApplyStep(
            step=last.step,
            stage=stage,
            attempt=last.attempts[stage],
            learning_rate=last.learning_rate,
            samples=samples,
            grad_scale=last.grad_scale,
        )
        for stage, samples in enumerate(last.samples_counted)
    }


@dataclass(frozen=True, kw_only=True)
class PeerFigures:
    peer_id: int
    throughput: float
    queue_length: int
    samples_done: int
    link_rates: dict[int, float]
    """Peer id -> bytes/s this peer measured to it (its last heartbeat)."""
    last_heartbeat: datetime


def store_figures(session: Session, figures: list[PeerFigures], watched_runs: set[int]) -> list[Frame]:
    """Write heartbeat figures of many peers in one statement; frames for the peers of the runs a
    dashboard watches (`watched_runs`).

    A Core UPDATE by primary key: the ORM's bulk path and a SELECT of every changed peer to frame it
    ran on a thread that holds the GIL the event loop needs (at 5,000 peers the sync held it a third
    of the time, and every channel's answers waited; docs/benchmarks.md)."""
    table = Peer.__table__
    session.execute(
        table.update().where(table.c.id == sa.bindparam("peer_id")),
        [
            {
                "peer_id": f.peer_id,
                "throughput": f.throughput,
                "queue_length": f.queue_length,
                "samples_done": f.samples_done,
                "link_rates": {str(peer_id): rate for peer_id, rate in f.link_rates.items()},
                "last_heartbeat": f.last_heartbeat,
            }
            for f in figures
        ],
    )
    if not watched_runs:
        return []
    rows = session.scalars(
        sa.select(Peer).where(
            Peer.id.in_([f.peer_id for f in figures]),
            Peer.run_id.in_(watched_runs),
            Peer.state == PeerState.ACTIVE,
        )
    )
    return [(peer.run_id, peer_frame(peer)) for peer in rows]


def mark_connected_peers_lost(session: Session) -> list[Frame]:
    """Peers the database thinks are connected lost their channel when the coordinator went down."""
    session.execute(sa.update(Peer).where(Peer.state.in_(CONNECTED_STATES)).values(state=PeerState.LOST))
    return []
