"""Live swarm state held by the coordinator: open peer channels and the step in progress of each run.

The database stays the source of truth for everything a restart must keep (runs, their step and
data cursor, peers, steps, events); this module holds what can be rebuilt: who is connected right
now and which microbatches of the current step are in flight. Each run has one lock, so a run's
protocol messages are handled one at a time and in order.

A global step goes: collecting (microbatches granted and reported done) -> averaging (each
stage's peers average gradients among themselves) -> applying (every stage steps its optimizer)
-> committed (recorded in the database; the next step opens). Peers that are lost on the way are
routed around: their in-flight microbatches count as failed, an averaging round restarts without
them, and the samples whose gradients they held are recorded as lost.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from server.errors import NotFound
from server.feed import FeedHub
from server.frames import peer_frame, run_frame, step_frame
from server.metrics import Metrics
from server.models import Peer, Run, StageAssignment, utcnow
from server.policies.averaging import AveragingRound
from server.policies.rebalance import PeerLoad, choose_move
from server.policies.stage_choice import choose_stage
from server.policies.step_book import StepBook
from server.publish import commit_and_publish
from server.services import checkpoints
from server.services.events import record_event
from server.services.peers import authenticate_peer
from server.services.runs import run_spec
from server.services.steps import record_metric, record_step
from swarmhub.schedule import clip_scale, learning_rate
from swarmhub.settings import ServerSettings
from swarmhub.wire import (
    ApplyStep,
    AveragingDone,
    CheckpointRequest,
    Goodbye,
    Heartbeat,
    Hello,
    Kicked,
    Message,
    MicrobatchDone,
    MicrobatchFailed,
    NoWork,
    PeerEndpoint,
    PeerUnreachable,
    RunSpec,
    RunStatusChanged,
    StageReady,
    StepApplied,
    StepBarrier,
    StepCommitted,
    SwarmView,
    Welcome,
    WorkGrant,
    WorkRequest,
)
from swarmhub.wire import StageAssignment as StageAssignmentMessage

log = logging.getLogger(__name__)
T = TypeVar("T")

WATCHDOG_INTERVAL_S = 0.5
SWARM_VIEW_REFRESH_S = 10.0
"""Swarm views carry throughputs for routing; between membership changes a refresh this often
keeps them current without sending every peer the whole swarm every sync (N x N entries)."""
SYNC_INTERVAL_S = 2.0
"""How often heartbeat figures are written to the database, swarm views re-sent and the
rebalancing policy consulted."""
UNREACHABLE_CLOSE_CODE = 4000
UNREACHABLE_WINDOW_S = 30.0
UNREACHABLE_REPORTERS = 2
"""Distinct trainers that must fail to reach a peer within the window before it is marked lost
(one trainer's bad link is not the peer's fault); fewer if the run has fewer other peers."""
REBALANCE_PEER_COOLDOWN_S = 30.0
"""A peer that moved stays put this long: its first rates on a new stage are noisy, and moving it
back on them made peers bounce between stages under churn."""
STATE_SOURCES = 3
"""Peers offered to copy a stage's state from, tried in turn (the first may be slow or gone)."""
JOIN_HOLD_S = 15.0
"""How long a step's averaging waits for peers still copying a stage's state. Without the wait a
joiner could chase the run forever when steps are quicker than copying a stage."""
REBALANCE_MIN_INTERVAL_S = 6.0
"""After a move, wait this long so the moved peer's rate on its new stage has been measured
(a few heartbeats) before the next decision; an empty stage does not wait."""


class PeerRejected(Exception):
    """The control channel is refused; the message is the close reason."""


@dataclass(eq=False, kw_only=True)
class PeerLink:
    """One connected peer's control channel."""

    peer_id: int
    run_id: int
    name: str
    address: str
    send: Callable[[str], None]
    close: Callable[[int, str], None]
    stage: int | None = None
    ready: bool = False
    throughput: float = 0.0
    queue_length: int = 0
    samples_done: int = 0
    last_seen: float = field(default_factory=time.monotonic)
    last_heartbeat: datetime | None = None
    assigned_at: float = 0.0
    moved_at: float = 0.0
    synced: tuple[float, int, int] | None = None
    """Heartbeat figures as last written to the database."""

    def figures(self) -> tuple[float, int, int]:
        return (self.throughput, self.queue_length, self.samples_done)

    def push(self, message: Message) -> None:
        self.send(message.model_dump_json())

    def endpoint(self) -> PeerEndpoint:
        return PeerEndpoint(
            peer_id=self.peer_id,
            address=self.address,
            stage=self.stage,
            throughput=self.throughput,
            queue_length=self.queue_length,
        )


@dataclass(kw_only=True)
class RunLive:
    spec: RunSpec
    status: str
    data_key: str
    book: StepBook
    phase: str = "collecting"
    rounds: dict[int, AveragingRound] = field(default_factory=dict)
    pending_apply: set[int] = field(default_factory=set)
    step_started: float = field(default_factory=time.monotonic)
    rebalance: bool = True
    last_move: float = 0.0
    view_sent: float = 0.0
    unreachable: dict[int, dict[int, float]] = field(default_factory=dict)
    """Peer id -> {reporting trainer: when} of recent failed calls without any answer."""
    checkpoint_wanted: bool = False
    """An owner asked for a checkpoint; it is taken at the next step boundary."""
    links: dict[int, PeerLink] = field(default_factory=dict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def ready_links(self, stage: int | None = None) -> list[PeerLink]:
        return [link for link in self.links.values() if link.ready and (stage is None or link.stage == stage)]

    def broadcast(self, message: Message) -> None:
        for link in self.links.values():
            link.push(message)

    def swarm_view(self) -> SwarmView:
        self.view_sent = time.monotonic()
        return SwarmView(step=self.book.step, peers=[link.endpoint() for link in self.ready_links()])


def _new_book(run: Run) -> StepBook:
    return StepBook(
        step=run.current_step,
        target_batch_size=run.target_batch_size,
        microbatch_size=run.microbatch_size,
        next_sample=run.next_sample,
        # A restarted coordinator opens a fresh book for the same step: ids must not repeat old ones.
        nonce=secrets.token_hex(3),
    )


class LiveSwarm:
    def __init__(
        self,
        *,
        session_factory: sessionmaker[Session],
        settings: ServerSettings,
        feed: FeedHub,
        metrics: Metrics,
    ) -> None:
        self._session_factory = session_factory
        self._settings = settings
        self._feed = feed
        self._metrics = metrics
        self._runs: dict[int, RunLive] = {}
        self._tasks: list[asyncio.Task[None]] = []

    # ---- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        await self._db(self._mark_stale_peers_lost)
        self._tasks = [asyncio.create_task(self._watchdog()), asyncio.create_task(self._sync_forever())]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for run in self._runs.values():
            for link in list(run.links.values()):
                link.close(1012, "coordinator restarting")
        await self._sync()

    def connected_peer_count(self) -> int:
        return sum(len(run.links) for run in self._runs.values())

    async def _db(self, fn: Callable[[Session], T]) -> T:
        def work() -> T:
            with self._session_factory() as session:
                return fn(session)

        return await asyncio.to_thread(work)

    def _mark_stale_peers_lost(self, session: Session) -> None:
        """Peers the database thinks are connected lost their channel when the coordinator went down."""
        session.execute(sa.update(Peer).where(Peer.state.in_(("joining", "active"))).values(state="lost"))
        session.commit()

    # ---- channel attach / detach --------------------------------------------------------------

    async def attach(
        self, hello: Hello, send: Callable[[str], None], close: Callable[[int, str], None]
    ) -> PeerLink:
        """Admit a peer's channel, or raise PeerRejected."""

        def admit(session: Session) -> tuple[Peer, Run]:
            peer = authenticate_peer(session, hello.peer_id, hello.credential)
            if peer is None:
                raise PeerRejected("unknown peer or bad credential")
            run = session.get_one(Run, peer.run_id)
            if run.status not in ("active", "paused"):
                raise PeerRejected(f"run {run.id} is {run.status}")
            if hello.corpus_fingerprint:
                if run.corpus_fingerprint is None:
                    run.corpus_fingerprint = hello.corpus_fingerprint
                elif run.corpus_fingerprint != hello.corpus_fingerprint:
                    # A close reason holds 123 bytes: the fingerprints are 16 hex digits each.
                    raise PeerRejected(
                        f"dataset differs from the run's ({hello.corpus_fingerprint[:16]} vs "
                        f"{run.corpus_fingerprint[:16]}): use the other peers' Python version"
                    )
            rejoining = peer.state != "joining"
            peer.state = "active"
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
            commit_and_publish(session, self._feed, (run.id, peer_frame(peer)))
            session.refresh(peer)
            session.refresh(run)
            session.expunge_all()
            return peer, run

        peer, run_row = await self._db(admit)
        run = self._runs.get(run_row.id)
        if run is None:
            run = RunLive(
                spec=run_spec(run_row),
                status=run_row.status,
                data_key=run_row.data_key,
                book=_new_book(run_row),
                rebalance=run_row.rebalance,
            )
            self._runs[run_row.id] = run
        async with run.lock:
            old = run.links.get(peer.id)
            if old is not None:
                old.close(1008, "replaced by a newer channel of the same peer")
                await self._forget_link(run, old)
            link = PeerLink(
                peer_id=peer.id,
                run_id=run.spec.run_id,
                name=peer.name,
                address=peer.address,
                send=send,
                close=close,
                throughput=peer.throughput,
            )
            run.links[peer.id] = link
            self._metrics.peers_connected.set(self.connected_peer_count())
            link.push(Welcome(peer_id=peer.id, run=run.spec, step=run.book.step, data_key=run.data_key))
            link.push(RunStatusChanged(status=run.status))
            stage = peer.stage if peer.stage is not None else self._choose_stage(run, peer)
            await self._assign(run, link, stage, "joined" if peer.stage is None else "rejoined its stage")
        return link

    def _choose_stage(self, run: RunLive, peer: Peer) -> int:
        stages = range(run.spec.num_stages)
        members = [link for link in run.links.values() if link.stage is not None]
        return choose_stage(
            [sum(link.throughput for link in members if link.stage == s) for s in stages],
            [sum(1 for link in members if link.stage == s) for s in stages],
            peer.requested_stage,
        )

    async def _assign(self, run: RunLive, link: PeerLink, stage: int, reason: str) -> None:
        """Give `link` a stage; it becomes ready (routable) once it reports StageReady."""
        link.stage = stage
        link.ready = False
        link.assigned_at = time.monotonic()
        sources = sorted(run.ready_links(stage), key=lambda other: -other.throughput)
        step = run.book.step
        checkpoint_step = (
            None
            if sources or step == 0
            else await self._db(lambda session: self._latest_checkpoint(session, run.spec.run_id))
        )

        def store(session: Session) -> None:
            peer = session.get_one(Peer, link.peer_id)
            peer.stage = stage
            session.add(
                StageAssignment(
                    run_id=run.spec.run_id, peer_id=peer.id, stage=stage, step=step, reason=reason
                )
            )
            record_event(
                session,
                run_id=run.spec.run_id,
                peer_id=peer.id,
                kind="stage_assigned",
                message=f"{peer.name} serves stage {stage} ({reason})",
                data={"stage": stage, "step": step},
            )
            commit_and_publish(session, self._feed, (run.spec.run_id, peer_frame(peer)))

        await self._db(store)
        link.push(
            StageAssignmentMessage(
                stage=stage,
                step=step,
                reason=reason,
                state_sources=[source.endpoint() for source in sources[:STATE_SOURCES]] if step > 0 else [],
                checkpoint_step=checkpoint_step,
            )
        )

    async def detach(self, link: PeerLink, *, state: str, reason: str) -> None:
        """The channel closed. `state`: 'left' (said goodbye), 'lost' (vanished) or 'kicked'/'banned'."""
        run = self._runs.get(link.run_id)
        if run is None:
            return
        async with run.lock:
            if run.links.get(link.peer_id) is not link:
                return
            await self._forget_link(run, link)

        await self._db(lambda session: self._store_departure(session, link, state, reason))

    def _store_departure(self, session: Session, link: PeerLink, state: str, reason: str) -> None:
        peer = session.get_one(Peer, link.peer_id)
        if peer.state in ("kicked", "banned"):
            return
        peer.state = state
        peer.left_at = utcnow()
        record_event(
            session,
            run_id=link.run_id,
            peer_id=peer.id,
            kind=f"peer_{state}",
            message=f"{peer.name} {'left' if state == 'left' else 'was lost'}: {reason}",
            data={"stage": link.stage},
        )
        commit_and_publish(session, self._feed, (link.run_id, peer_frame(peer)))

    async def _forget_link(self, run: RunLive, link: PeerLink) -> None:
        """Route around a departed peer at once: its work failed, its averaging share is gone."""
        del run.links[link.peer_id]
        self._metrics.peers_connected.set(self.connected_peer_count())
        run.book.fail_trainer(link.peer_id)
        if run.phase == "averaging":
            for stage, round_ in list(run.rounds.items()):
                if link.peer_id in round_.group:
                    run.rounds[stage] = round_.without(link.peer_id)
                    self._send_barrier(run, stage)
            await self._maybe_apply(run)
        elif run.phase == "applying":
            run.pending_apply.discard(link.peer_id)
            await self._maybe_commit(run)
        else:
            await self._maybe_barrier(run)
            await self._maybe_rebalance(run)
        run.broadcast(run.swarm_view())

    # ---- protocol -----------------------------------------------------------------------------

    async def handle(self, link: PeerLink, message: Message) -> None:
        run = self._runs[link.run_id]
        link.last_seen = time.monotonic()
        if isinstance(message, Heartbeat):
            if run.links.get(link.peer_id) is not link:
                return  # a channel that was replaced or removed meanwhile
            link.throughput = message.throughput
            link.queue_length = message.queue_length
            link.samples_done = message.samples_done
            link.last_heartbeat = utcnow()
            self._metrics.heartbeats.inc()
            return
        async with run.lock:
            if run.links.get(link.peer_id) is not link:
                return
            match message:
                case WorkRequest():
                    link.push(self._grant(run, link))
                case MicrobatchDone():
                    if message.step == run.book.step and run.book.complete(
                        message.microbatch_id,
                        message.loss,
                        wire_bytes=message.bytes_sent,
                        retries=message.retries,
                    ):
                        await self._maybe_barrier(run)
                case MicrobatchFailed():
                    if message.step == run.book.step and run.book.fail(message.microbatch_id):
                        await self._maybe_barrier(run)
                case StageReady():
                    await self._stage_ready(run, link, message)
                case AveragingDone():
                    round_ = run.rounds.get(message.stage)
                    if run.phase == "averaging" and message.step == run.book.step and round_ is not None:
                        round_.report(
                            link.peer_id,
                            message.attempt,
                            message.contributors,
                            message.counted,
                            message.grad_sum_norm_sq,
                        )
                        await self._maybe_apply(run)
                case StepApplied():
                    if run.phase == "applying" and message.step == run.book.step:
                        run.pending_apply.discard(link.peer_id)
                        await self._maybe_commit(run)
                case PeerUnreachable():
                    await self._unreachable(run, link, message)
                case Goodbye():
                    pass  # the channel handler detaches it as 'left'

    async def _unreachable(self, run: RunLive, reporter: PeerLink, message: PeerUnreachable) -> None:
        target = run.links.get(message.peer_id)
        if target is None or target is reporter:
            return
        now = time.monotonic()
        reports = run.unreachable.setdefault(target.peer_id, {})
        reports[reporter.peer_id] = now
        for peer_id, when in list(reports.items()):
            if now - when > UNREACHABLE_WINDOW_S:
                del reports[peer_id]
        needed = min(UNREACHABLE_REPORTERS, len(run.links) - 1)
        round_ = (
            run.rounds.get(target.stage) if run.phase == "averaging" and target.stage is not None else None
        )
        if round_ is not None and {target.peer_id, reporter.peer_id} <= round_.group:
            # Within an averaging group every other member waits on it: all of them may report.
            needed = min(needed, len(round_.group) - 1)
        if len(reports) < needed:
            return
        del run.unreachable[target.peer_id]
        # Its channel is closed so it reconnects and rejoins; the detach marks it lost meanwhile.
        target.close(UNREACHABLE_CLOSE_CODE, "other peers cannot reach your data plane")
        await self._forget_link(run, target)
        await self._db(
            lambda session: self._store_departure(
                session, target, "lost", f"{len(reports)} trainer(s) could not reach it: {message.reason}"
            )
        )

    def _grant(self, run: RunLive, link: PeerLink) -> WorkGrant | NoWork:
        step = run.book.step
        if run.status != "active":
            return NoWork(step=step, reason=f"run is {run.status}")
        if run.phase != "collecting":
            return NoWork(step=step, reason=f"step {step} is {run.phase}")
        empty = [s for s in range(run.spec.num_stages) if not run.ready_links(s)]
        if empty:
            return NoWork(step=step, reason=f"stage {empty[0]} has no ready peer")
        grant = run.book.grant(link.peer_id)
        if grant is None:
            return NoWork(step=step, reason=f"step {step} has all its microbatches")
        return WorkGrant(
            step=step,
            microbatch_id=grant.microbatch_id,
            first_sample=grant.first_sample,
            samples=grant.samples,
        )

    async def _stage_ready(self, run: RunLive, link: PeerLink, message: StageReady) -> None:
        if message.stage != link.stage:
            return
        if message.step == run.book.step and run.phase == "collecting":
            link.ready = True
            await self._maybe_barrier(run)
            if message.origin == "checkpoint":
                await self._db(
                    lambda session: self._record(
                        session,
                        run,
                        kind="stage_restored",
                        peer_id=link.peer_id,
                        message=f"{link.name} restored stage {message.stage} from the latest checkpoint",
                        data={"stage": message.stage, "step": message.step},
                    )
                )
            elif message.origin == "initialized" and message.step > 0:
                await self._db(
                    lambda session: self._record(
                        session,
                        run,
                        kind="stage_reinitialized",
                        peer_id=link.peer_id,
                        message=f"stage {message.stage} had no live peer or checkpoint to copy from at step "
                        f"{message.step}; {link.name} starts it from a fresh initialization",
                        data={"stage": message.stage, "step": message.step},
                    )
                )
            run.broadcast(run.swarm_view())
            await self._maybe_rebalance(run)
        else:
            # It loaded state from before the step now being taken; it must copy again.
            await self._assign(run, link, message.stage, "state was behind; copying again")

    async def _maybe_barrier(self, run: RunLive) -> None:
        if run.phase != "collecting" or not run.book.ready_for_barrier():
            return
        now = time.monotonic()
        if any(
            link.stage is not None and not link.ready and now - link.assigned_at < JOIN_HOLD_S
            for link in run.links.values()
        ):
            return  # re-checked when the joiner is ready, and by the periodic sync
        run.phase = "averaging"
        run.rounds = {
            stage: AveragingRound(
                stage=stage, attempt=0, group=frozenset(link.peer_id for link in run.ready_links(stage))
            )
            for stage in range(run.spec.num_stages)
        }
        for stage in run.rounds:
            self._send_barrier(run, stage)
        await self._maybe_apply(run)

    def _send_barrier(self, run: RunLive, stage: int) -> None:
        round_ = run.rounds[stage]
        group = [run.links[p].endpoint() for p in sorted(round_.group) if p in run.links]
        barrier = StepBarrier(step=run.book.step, attempt=round_.attempt, stage=stage, group=group)
        for endpoint in group:
            run.links[endpoint.peer_id].push(barrier)

    async def _maybe_apply(self, run: RunLive) -> None:
        if run.phase != "averaging" or not all(r.complete() for r in run.rounds.values()):
            return
        run.phase = "applying"
        spec = run.spec
        rate = learning_rate(
            run.book.step, peak=spec.learning_rate, warmup_steps=spec.warmup_steps, max_steps=spec.max_steps
        )
        samples = {stage: run.book.samples_of(round_.counted()) for stage, round_ in run.rounds.items()}
        scale = clip_scale(
            [r.grad_sum_norm_sq() / samples[s] ** 2 for s, r in run.rounds.items() if samples[s]]
        )
        run.pending_apply = set()
        for stage, round_ in run.rounds.items():
            message = ApplyStep(
                step=run.book.step, stage=stage, learning_rate=rate, samples=samples[stage], grad_scale=scale
            )
            for peer_id in round_.group:
                run.links[peer_id].push(message)
                run.pending_apply.add(peer_id)
        await self._maybe_commit(run)

    async def _maybe_commit(self, run: RunLive) -> None:
        if run.phase != "applying" or run.pending_apply:
            return
        book = run.book
        summary = book.summarize([run.rounds[s].counted() for s in range(run.spec.num_stages)])
        duration = time.monotonic() - run.step_started
        finished = run.spec.max_steps is not None and book.step + 1 >= run.spec.max_steps

        def store(session: Session) -> dict[str, Any]:
            row = session.get_one(Run, run.spec.run_id)
            row.current_step = book.step + 1
            row.next_sample = book.next_sample
            if finished:
                row.status = "finished"
            step_row = record_step(
                session,
                run_id=row.id,
                step=book.step,
                loss=summary.loss,
                samples_sent=summary.samples_sent,
                samples_lost=summary.samples_lost,
                samples_counted=[t.counted for t in summary.stage_tallies],
                duration_s=duration,
            )
            record_metric(
                session,
                run_id=row.id,
                step=book.step,
                name="samples_per_s",
                value=summary.samples_done / max(duration, 1e-9),
            )
            record_metric(session, run_id=row.id, step=book.step, name="wire_bytes", value=book.wire_bytes)
            record_metric(session, run_id=row.id, step=book.step, name="retries", value=book.retries)
            lost = {s: t.lost for s, t in enumerate(summary.stage_tallies) if t.lost}
            if lost:
                record_event(
                    session,
                    run_id=row.id,
                    kind="samples_lost",
                    message=f"step {book.step}: samples lost per stage {lost} of {summary.samples_sent} sent",
                    data={"step": book.step, "lost": lost, "sent": summary.samples_sent},
                )
            if finished:
                record_event(
                    session, run_id=row.id, kind="run_finished", message=f"reached max_steps={row.max_steps}"
                )
            frames = [(row.id, step_frame(step_row))]
            if finished:
                frames.append((row.id, run_frame(row)))
            commit_and_publish(session, self._feed, *frames)
            return {}

        await self._db(store)
        run.book = book.next_book()
        run.phase = "collecting"
        run.rounds = {}
        run.step_started = time.monotonic()
        run.broadcast(StepCommitted(step=book.step, loss=summary.loss, next_step=run.book.step))
        if finished or run.checkpoint_wanted or run.book.step % self._settings.checkpoint_every_steps == 0:
            self._request_checkpoint(run)
        if finished:
            run.status = "finished"
            run.broadcast(RunStatusChanged(status="finished"))
        else:
            await self._maybe_rebalance(run)

    @staticmethod
    def _latest_checkpoint(session: Session, run_id: int) -> int | None:
        try:
            return checkpoints.latest_complete(session, session.get_one(Run, run_id)).step
        except NotFound:
            return None

    def _record(
        self,
        session: Session,
        run: RunLive,
        *,
        kind: str,
        message: str,
        peer_id: int | None,
        data: dict[str, Any],
    ) -> None:
        record_event(session, run_id=run.spec.run_id, peer_id=peer_id, kind=kind, message=message, data=data)
        commit_and_publish(session, self._feed)

    async def _maybe_rebalance(self, run: RunLive) -> None:
        """Move one peer toward the bottleneck stage if the policy finds a move worth making.

        Only while microbatches are collected (a moved peer must not be in an averaging group),
        and not while a peer is still loading a stage (a move in progress).
        """
        if not run.rebalance or run.status != "active" or run.phase != "collecting":
            return
        if any(link.stage is not None and not link.ready for link in run.links.values()):
            return
        ready = run.ready_links()
        stage_empty = any(not any(link.stage == s for link in ready) for s in range(run.spec.num_stages))
        if not stage_empty and time.monotonic() - run.last_move < REBALANCE_MIN_INTERVAL_S:
            return
        move = choose_move(
            [
                PeerLoad(
                    peer_id=link.peer_id,
                    stage=link.stage,
                    throughput=link.throughput,
                    queue_length=link.queue_length,
                )
                for link in ready
                if link.stage is not None
            ],
            run.spec.num_stages,
            pinned=frozenset(
                link.peer_id for link in ready if time.monotonic() - link.moved_at < REBALANCE_PEER_COOLDOWN_S
            ),
        )
        if move is None:
            return
        run.last_move = time.monotonic()
        link = run.links[move.peer_id]
        link.moved_at = time.monotonic()

        await self._db(
            lambda session: self._record(
                session,
                run,
                kind="rebalance",
                peer_id=move.peer_id,
                message=f"{link.name}: stage {move.from_stage} -> {move.to_stage}; {move.reason}",
                data={
                    "from_stage": move.from_stage,
                    "to_stage": move.to_stage,
                    "rate_before": move.rate_before,
                    "rate_after_estimated": move.rate_after,
                    "step": run.book.step,
                },
            )
        )
        await self._assign(run, link, move.to_stage, "rebalanced")
        run.broadcast(run.swarm_view())

    def _request_checkpoint(self, run: RunLive) -> None:
        """Ask the fastest ready peer of each stage to upload its state as of the step just opened."""
        run.checkpoint_wanted = False
        for stage in range(run.spec.num_stages):
            holders = sorted(run.ready_links(stage), key=lambda link: -link.throughput)
            if holders:
                holders[0].push(CheckpointRequest(step=run.book.step, stage=stage))

    # ---- outside requests ---------------------------------------------------------------------

    async def kick_peer(self, peer_id: int, reason: str) -> None:
        """Tell a connected peer to stop and close its channel; the caller has updated the database."""
        for run in self._runs.values():
            link = run.links.get(peer_id)
            if link is not None:
                link.push(Kicked(reason=reason))
                link.close(1008, f"removed: {reason}")
                async with run.lock:
                    if run.links.get(peer_id) is link:
                        await self._forget_link(run, link)

    async def request_checkpoint(self, run_id: int) -> None:
        """An owner asked for a checkpoint: taken at the next step boundary, or now if between steps."""
        run = self._runs.get(run_id)
        if run is None:
            return
        async with run.lock:
            if run.status != "active":
                self._request_checkpoint(run)
            else:
                run.checkpoint_wanted = True

    async def run_status_changed(self, run_id: int, status: str) -> None:
        """A run was paused, resumed or archived; tell its peers."""
        run = self._runs.get(run_id)
        if run is None:
            return
        async with run.lock:
            run.status = status
            run.broadcast(RunStatusChanged(status=status))

    # ---- background ---------------------------------------------------------------------------

    async def _watchdog(self) -> None:
        """Close the channel of any peer silent for longer than the heartbeat timeout."""
        while True:
            await asyncio.sleep(WATCHDOG_INTERVAL_S)
            deadline = time.monotonic() - self._settings.heartbeat_timeout_s
            for run in list(self._runs.values()):
                for link in list(run.links.values()):
                    if link.last_seen < deadline:
                        link.close(1001, "heartbeat timeout")
                        await self.detach(
                            link,
                            state="lost",
                            reason=f"no heartbeat for {self._settings.heartbeat_timeout_s:g}s",
                        )

    async def _sync_forever(self) -> None:
        while True:
            await asyncio.sleep(SYNC_INTERVAL_S)
            try:
                await self._sync()
            except Exception:
                # A database hiccup must not end the loop that keeps dashboards current.
                log.exception("syncing heartbeat figures failed")

    async def _sync(self) -> None:
        """Write changed heartbeat figures to the database in one statement, update dashboards,
        refresh swarm views now and then (membership changes are sent at once elsewhere)."""
        changed = [
            link
            for run in self._runs.values()
            for link in run.links.values()
            if link.last_heartbeat is not None and link.figures() != link.synced
        ]
        if changed:
            await self._db(lambda session: self._store_figures(session, changed))
        now = time.monotonic()
        for run in list(self._runs.values()):
            if now - run.view_sent >= SWARM_VIEW_REFRESH_S:
                run.broadcast(run.swarm_view())
            async with run.lock:
                await self._maybe_barrier(run)
                await self._maybe_rebalance(run)

    def _store_figures(self, session: Session, links: list[PeerLink]) -> None:
        session.execute(
            sa.update(Peer),
            [
                {
                    "id": link.peer_id,
                    "throughput": link.throughput,
                    "queue_length": link.queue_length,
                    "samples_done": link.samples_done,
                    "last_heartbeat": link.last_heartbeat,
                }
                for link in links
            ],
        )
        rows = session.scalars(sa.select(Peer).where(Peer.id.in_([link.peer_id for link in links])))
        frames = [(peer.run_id, peer_frame(peer)) for peer in rows if peer.state == "active"]
        commit_and_publish(session, self._feed, *frames)
        for link in links:
            link.synced = link.figures()
