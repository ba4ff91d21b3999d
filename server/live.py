"""The live swarm: the async shell around each run's state machine (`server.swarm.machine`).

It admits peers' control channels, feeds the run's machine what peers say, what the clock says
and what owners do, and carries out the machine's decisions: messages to peers, closed channels,
and rows written through `server.services.swarm`. One lock per run keeps a run's inputs in order.

The database is the truth for everything a restart must keep (runs, their step and data cursor,
peers, steps with their updates, events); the machines hold what can be rebuilt (who is connected,
the step in flight).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy.orm import Session, sessionmaker

from server.checkpoints.service import record_requests
from server.fault_points import FaultPoint
from server.feed import FeedHub
from server.metrics import Metrics
from server.models import Peer, Run, utcnow
from server.policies.averaging import PatternRule
from server.policies.step_book import StepBook
from server.publish import commit_and_publish
from server.run_health import health_frame, health_out, status_health
from server.schemas import RunHealthOut
from server.services import swarm as rows
from server.services.runs import run_spec
from server.services.swarm import Frame, PeerFigures, PeerRejected
from server.swarm import decisions as do
from server.swarm import inputs as on
from server.swarm.machine import RunMachine
from server.swarm.step_cycle import MachineSettings
from server.tickets import TicketDesk
from swarmhub.probe import probe
from swarmhub.settings import ServerSettings
from swarmhub.status import PeerState, RunStatus
from swarmhub.tickets import run_ticket_public_key
from swarmhub.wire import (
    ApplyStep,
    CheckpointRequest,
    Heartbeat,
    Hello,
    PeerToCoordinatorMessage,
    StepCommitted,
)
from swarmhub.wire import StageAssignment as StageAssignmentMessage

__all__ = ["LiveSwarm", "PeerLink", "PeerRejected"]

log = logging.getLogger(__name__)
T = TypeVar("T")

TICK_INTERVAL_S = 0.5
SYNC_INTERVAL_S = 2.0
"""How often heartbeat figures are written to the database and dashboards updated."""


@dataclass(eq=False, kw_only=True)
class PeerLink:
    """One admitted control channel; a peer that reconnects gets a new link, and the old one is ignored."""

    peer_id: int
    run_id: int
    send: Callable[[str], None]
    close: Callable[[int, str], None]
    address: str
    digest: str
    """The digest of the peer's credential, which its answer to a reachability probe proves it knows."""
    fingerprint: str
    last_heartbeat: datetime | None = None


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
        self._machines: dict[int, RunMachine] = {}
        self._locks: dict[int, asyncio.Lock] = {}
        self._links: dict[int, PeerLink] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._probes: set[asyncio.Task[None]] = set()
        self._fault = FaultPoint(settings.fault_point)
        self._tickets = TicketDesk(self._links)
        self._health: dict[int, tuple[RunStatus, RunHealthOut]] = {}
        """Each watched run's health as its machine last decided it, with the run status it assumed."""
        self._unsynced: dict[int, PeerLink] = {}
        """Links heard from since their figures were last written (a heartbeat always changes one:
        its time), so a sync touches only those, never every channel of a large swarm."""
        self._shutting_down = False

    # ---- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        await self._write(rows.mark_connected_peers_lost)
        loops = (self._tick_forever(), self._sync_forever(), self._tickets.renew_forever())
        self._tasks = [asyncio.create_task(loop) for loop in loops]

    def begin_shutdown(self) -> None:
        """The coordinator is going down: from now on its machines decide nothing.

        The channels that close on the way out (uvicorn closes them before the app's shutdown runs)
        are the coordinator's going, not their peers' departures. Fed to a machine, they made a round
        that had lost its only members commit its step empty, the samples lost, with a restart
        coming that would have taken the step again with the same peers."""
        self._shutting_down = True

    async def stop(self) -> None:
        self.begin_shutdown()
        for task in [*self._tasks, *self._probes]:
            task.cancel()
        await asyncio.gather(*self._tasks, *self._probes, return_exceptions=True)
        for link in list(self._links.values()):
            link.close(1012, "coordinator restarting")
        await self._sync()

    def connected_peer_count(self) -> int:
        return len(self._links)

    def health(self, run_id: int, status: RunStatus) -> RunHealthOut:
        """The run's health now (routes call this from their threads: a dict read, no await).

        A run whose machine has not caught up with a status change, or that no peer has connected to
        since the coordinator started, has the health its status alone gives."""
        known = self._health.get(run_id)
        if known is not None and known[0] == status:
            return known[1]
        return status_health(status)

    # ---- channels -------------------------------------------------------------------------------

    async def attach(
        self, hello: Hello, send: Callable[[str], None], close: Callable[[int, str], None]
    ) -> PeerLink:
        """Admit a peer's channel, or raise PeerRejected."""

        def admit(session: Session) -> tuple[Peer, Run, dict[int, ApplyStep]]:
            peer, run, frames = rows.admit_peer(session, hello)
            updates = rows.last_step_updates(session, run)
            commit_and_publish(session, self._feed, *frames)
            session.refresh(peer)
            session.refresh(run)
            session.expunge_all()
            return peer, run, updates

        peer, run, updates = await self._db(admit)
        link = PeerLink(
            peer_id=peer.id,
            run_id=run.id,
            send=send,
            close=close,
            address=peer.address,
            digest=peer.credential_hash,
            fingerprint=peer.tls_fingerprint,
            last_heartbeat=utcnow(),
        )
        # Before anyone is routed to it: can the peer be reached where it says it is?
        joined = on.PeerJoined(
            now=time.monotonic(),
            peer_id=peer.id,
            name=peer.name,
            address=peer.address,
            throughput=peer.throughput,
            stage=peer.stage,
            requested_stage=peer.requested_stage,
            fingerprint=peer.tls_fingerprint,
            probe_problem=await self._probe(link),
            trusted=peer.trusted,
        )
        machine = self._machines.get(run.id) or self._new_machine(run, updates)
        async with self._locks[run.id]:
            old = self._links.get(link.peer_id)
            if old is not None:
                old.close(1008, "replaced by a newer channel of the same peer")
            self._links[link.peer_id] = link
            self._unsynced[link.peer_id] = link
            self._tickets.admit(link, hello.frame_key, run.data_key)
            self._metrics.peers_connected.set(len(self._links))
            await self._carry_out(machine, machine.handle(joined))
        return link

    def _new_machine(self, run: Run, updates: dict[int, ApplyStep]) -> RunMachine:
        machine = RunMachine(
            spec=run_spec(run),
            status=run.status,
            data_key=run_ticket_public_key(run.data_key),
            book=StepBook(
                step=run.current_step,
                target_batch_size=run.target_batch_size,
                microbatch_size=run.microbatch_size,
                next_sample=run.next_sample,
                # A restarted coordinator opens a fresh book for the same step: ids must not repeat old ones.
                nonce=secrets.token_hex(3),
            ),
            rebalance=run.rebalance,
            settings=MachineSettings(
                heartbeat_timeout_s=self._settings.heartbeat_timeout_s,
                heartbeat_interval_s=self._settings.heartbeat_interval_s,
                checkpoint_every_steps=self._settings.checkpoint_every_steps,
                averaging_deadline_s=self._settings.averaging_deadline_s,
                patterns=PatternRule(
                    butterfly_from=self._settings.butterfly_from_members,
                    most_extra_s=self._settings.all_to_all_most_extra_s,
                ),
            ),
            last_apply=updates,
            now=time.monotonic(),
        )
        self._machines[run.id] = machine
        self._locks[run.id] = asyncio.Lock()
        return machine

    async def detach(self, link: PeerLink, *, state: PeerState, reason: str) -> None:
        """The channel closed: 'left' (said goodbye) or 'lost' (vanished)."""
        if self._links.get(link.peer_id) is not link:
            return  # replaced by a newer channel of the same peer
        del self._links[link.peer_id]
        self._metrics.peers_connected.set(len(self._links))
        await self._feed_run(
            link.run_id, on.PeerLeft(now=time.monotonic(), peer_id=link.peer_id, state=state, reason=reason)
        )

    async def handle(self, link: PeerLink, message: PeerToCoordinatorMessage) -> None:
        if self._links.get(link.peer_id) is not link:
            return  # a channel that was replaced or removed meanwhile
        said = on.PeerSaid(now=time.monotonic(), peer_id=link.peer_id, message=message)
        machine = self._machines[link.run_id]
        if isinstance(message, Heartbeat):
            # Decides nothing, so it needs no turn in the run's queue.
            machine.handle(said)
            link.last_heartbeat = utcnow()
            self._unsynced[link.peer_id] = link
            self._metrics.heartbeats.inc()
            return
        await self._feed_run(link.run_id, said)

    # ---- owners and admins ----------------------------------------------------------------------

    async def kick_peer(self, peer_id: int, reason: str) -> None:
        """Tell a connected peer to stop and close its channel; the caller has updated the database."""
        self._tickets.revoke(peer_id)
        link = self._links.get(peer_id)
        if link is not None:
            await self._feed_run(
                link.run_id, on.PeerRemoved(now=time.monotonic(), peer_id=peer_id, reason=reason)
            )

    async def request_checkpoint(self, run_id: int) -> None:
        """An owner asked for a checkpoint: taken at the next step boundary, or now if between steps."""
        await self._feed_run(run_id, on.CheckpointWanted(now=time.monotonic()))

    async def run_status_changed(self, run_id: int, status: RunStatus) -> None:
        """A run was paused, resumed or archived; tell its peers."""
        if run_id not in self._machines:
            # Nobody to tell; dashboards still learn what the status means for the run's health.
            self._feed.publish(run_id, health_frame(status_health(status)))
        await self._feed_run(run_id, on.StatusSet(now=time.monotonic(), status=status))

    # ---- feeding the machines and carrying out their decisions ----------------------------------

    async def _feed_run(self, run_id: int, event: on.Input) -> None:
        machine = self._machines.get(run_id)
        if machine is None or self._shutting_down:
            return
        async with self._locks[run_id]:
            await self._carry_out(machine, machine.handle(event))

    async def _carry_out(self, machine: RunMachine, decisions: list[do.Decision]) -> None:
        run_id = machine.spec.run_id
        for decision in decisions:
            match decision:
                case do.Send():
                    if isinstance(asked := decision.message, CheckpointRequest):  # recorded before it is sent
                        await self._write(
                            lambda s, d=decision, a=asked: record_requests(s, run_id, d.peer_ids, a)
                        )
                    text = decision.message.model_dump_json()
                    for peer_id in decision.peer_ids:
                        link = self._links.get(peer_id)
                        if link is not None:
                            link.send(text)
                    if isinstance(decision.message, StepCommitted):
                        self._fault.reached("opened", decision.message.step)
                case do.Close():
                    # Forgotten at once: whatever the channel still says is ignored.
                    link = self._links.pop(decision.peer_id, None)
                    if link is not None:
                        link.close(decision.code, decision.reason)
                        self._metrics.peers_connected.set(len(self._links))
                case do.AssignStage():
                    await self._assign(run_id, decision)
                case do.RecordEvent():
                    await self._write(lambda s, d=decision: rows.record_swarm_event(s, run_id, d))
                case do.RecordDeparture():
                    await self._write(
                        lambda s, d=decision: rows.record_departure(s, d.peer_id, d.state, d.reason, d.stage)
                    )
                case do.RecordReachability():
                    await self._write(
                        lambda s, d=decision: rows.record_reachability(s, d.peer_id, d.reachable, d.detail)
                    )
                case do.ProbePeer():
                    link = self._links.get(decision.peer_id)
                    if link is not None:
                        # Off the run's queue: a probe may take seconds.
                        self._spawn(self._probe_reported(link))
                case do.RecordStep():
                    await self._record_step(machine, decision)
                case do.HealthChanged():
                    health = health_out(decision.health, now=decision.now, wall_now=utcnow())
                    self._health[run_id] = (machine.status, health)
                    self._feed.publish(run_id, health_frame(health))

    async def _assign(self, run_id: int, decision: do.AssignStage) -> None:
        checkpoint_step = None
        if not decision.state_sources and decision.step > 0:
            checkpoint_step = await self._db(lambda s: rows.latest_checkpoint_step(s, run_id))
        await self._write(
            lambda s: rows.record_assignment(
                s, decision.peer_id, decision.stage, decision.step, decision.reason
            )
        )
        link = self._links.get(decision.peer_id)
        if link is not None:
            message = StageAssignmentMessage(
                stage=decision.stage,
                step=decision.step,
                reason=decision.reason,
                state_sources=list(decision.state_sources),
                checkpoint_step=checkpoint_step,
                apply=decision.apply,
                corroborate=decision.corroborate,
            )
            link.send(message.model_dump_json())

    async def _record_step(self, machine: RunMachine, record: do.RecordStep) -> None:
        """Write the step; only once that holds may its update be applied (the machine is told)."""
        self._fault.reached("averaged", record.step)
        run_id = machine.spec.run_id
        try:
            await self._write(lambda s: rows.record_committed_step(s, run_id, record))
        except Exception:
            # The machine asks again on a later tick; nothing was applied meanwhile.
            log.exception("recording step %d of run %d failed", record.step, run_id)
            return
        self._fault.reached("recorded", record.step)
        await self._carry_out(
            machine, machine.handle(on.StepRecorded(now=time.monotonic(), step=record.step))
        )
        self._fault.reached("applying", record.step)

    async def _probe(self, link: PeerLink) -> str | None:
        return await probe(
            link.address, peer_id=link.peer_id, digest=link.digest, fingerprint=link.fingerprint
        )

    async def _probe_reported(self, link: PeerLink) -> None:
        problem = await self._probe(link)
        if self._links.get(link.peer_id) is link:
            await self._feed_run(
                link.run_id, on.ProbeResult(now=time.monotonic(), peer_id=link.peer_id, problem=problem)
            )

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coroutine)
        self._probes.add(task)
        task.add_done_callback(self._probes.discard)

    async def _db(self, fn: Callable[[Session], T]) -> T:
        def work() -> T:
            with self._session_factory() as session:
                return fn(session)

        return await asyncio.to_thread(work)

    async def _write(self, fn: Callable[[Session], list[Frame]]) -> None:
        """Run a service function, commit, then publish the dashboard frames it returned."""

        def work(session: Session) -> None:
            commit_and_publish(session, self._feed, *fn(session))

        await self._db(work)

    # ---- background -----------------------------------------------------------------------------

    async def _tick_forever(self) -> None:
        while True:
            await asyncio.sleep(TICK_INTERVAL_S)
            for run_id in list(self._machines):
                try:
                    await self._feed_run(run_id, on.Tick(now=time.monotonic()))
                except Exception:
                    # A database hiccup in one run must not stop the clock of every run.
                    log.exception("tick of run %d failed", run_id)

    async def _sync_forever(self) -> None:
        while True:
            await asyncio.sleep(SYNC_INTERVAL_S)
            try:
                await self._sync()
            except Exception:
                # A database hiccup must not end the loop that keeps dashboards current.
                log.exception("syncing heartbeat figures failed")

    async def _sync(self) -> None:
        """Write the heartbeat figures of the links heard from since the last sync, in one statement;
        dashboards follow."""
        heard, self._unsynced = self._unsynced, {}
        changed: list[tuple[PeerLink, PeerFigures]] = []
        for link in heard.values():
            machine = self._machines.get(link.run_id)
            member = machine.members.get(link.peer_id) if machine is not None else None
            if member is None or link.last_heartbeat is None or self._links.get(link.peer_id) is not link:
                continue
            figures = PeerFigures(
                peer_id=link.peer_id,
                throughput=member.throughput,
                queue_length=member.queue_length,
                samples_done=member.samples_done,
                link_rates=dict(member.links),
                last_heartbeat=link.last_heartbeat,
            )
            changed.append((link, figures))
        if not changed:
            return
        watched = {
            run_id for run_id in {link.run_id for link, _ in changed} if self._feed.subscriber_count(run_id)
        }
        try:
            await self._write(lambda s: rows.store_figures(s, [figures for _, figures in changed], watched))
        except BaseException:
            # Written at the next sync, unless a newer heartbeat has put the link back meanwhile.
            for link, _ in changed:
                self._unsynced.setdefault(link.peer_id, link)
            raise
