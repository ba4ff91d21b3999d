"""A SWARM run simulated call by call, with the coordinator's and the trainers' real policies.

What is real: grants come from `StepBook` (`grant_size` tails included) as `RunMachine._grant` asks
for them; each stage call goes to the peer a `StageRouter` picks (bans and retries as
`peer/trainer.py` makes them: up to `MAX_ATTEMPTS_PER_CALL` attempts, a backward first to the peer
that kept the forward); averaging completes through `AveragingRound` (a member lost restarts the
round without it); joiners get `choose_stage`; `choose_moves` decides moves on `RateEstimate`
readings under the conditions of `Membership._maybe_rebalance`; the step's books close with
`StepBook.summarize`. Constants (timeouts, intervals, hold times) are the project's own.

What is modelled: a peer is a single server whose call occupies it for the longer of its
compute (FLOPs over its device's speed) and its transfer (the call's bytes over its link), with the
link's latency each way. It serves as the real peer's compute thread does (`sim.serving`): by
`stage_call_priority`, then by arrival, and it refuses a call that waited past its window
(`peer.accept_window`): one that accumulates gradients past `ACCEPT_FRACTION` of the caller's timeout
(its caller retries elsewhere at once), a forward past the timeout itself. A copy of a
stage's state takes its bytes over the slower of the two links.
Averaging is computed per round (`sim.averaging`), in the pattern the coordinator gives the round
(`averaging_pattern`): all-to-all, each member pushes its sum to the K-1 others through its upload,
one after another, and takes theirs through its download; a butterfly, two sums' worth with equal
parts, less for a member owning a small part (`server.policies.butterfly_parts`); members give
up at the barrier's push allowance (`push_allowance_s`) and the round goes on without whoever held
it up at the coordinator's deadline (`round_limit_s`, `AveragingRound.going_on_without`), their
samples lost, as `StepCycle._expire_rounds` does. A peer dies silently: its calls
time out, and the coordinator forgets it when its probe after a few missed heartbeats goes
unanswered (`server/policies/silence.py`), or at the heartbeat timeout.

The swarm view is real too: refreshed as `StepCycle` sends it (at most every `VIEW_GAP_S` while
peers come and go, every `SWARM_VIEW_REFRESH_S` regardless, at once after a rebalancing decision), it
lists a stage of more than `PEERS_PER_STAGE` peers to each group of trainers as a window of the
stage's order (`server/policies/view_sample.py`), and a router routes among its window's peers only.

Simplifications, for speed: trainers share `Scenario.routers` routers per stage round robin (each
real trainer routes alone, on its own stale view of the peers' queues; at thousands of trainers
their routers are grouped); a router takes in a view that changed its window when it next routes,
and its peers' rates at each periodic refresh (`SwarmSim._router`); heartbeat readings are taken
every `READING_S` rather than every second; verification (spot checks, blame, arbitration) is left
out; a trainer slot refused while grants are paced is granted as soon as a microbatch finishes (a
real one asks again within `NO_WORK_POLL_S`).
"""

from __future__ import annotations

import itertools
import math
import random
import time
from collections import deque
from dataclasses import dataclass, field
from typing import NamedTuple

from peer.accept_window import computes
from peer.compute_queue import CallKind, stage_call_priority
from peer.concurrency import chain_seconds, microbatches_in_flight
from peer.routing import StageRouter
from peer.trainer import MAX_ATTEMPTS_PER_CALL, NO_PEER_PATIENCE_S, NO_PEER_WAIT_S
from peer.transport import transfer_timeout_s
from server.policies.averaging import (
    AveragingRound,
    averaging_pattern,
    own_push_sums,
    push_allowance_s,
    pushing_rate,
    round_limit_s,
)
from server.policies.averaging_pace import RoundBudget, StepAveraging, round_s, slower_upload, step_s
from server.policies.butterfly_parts import part_weights
from server.policies.grant_pacing import outstanding_cap, served_rate
from server.policies.join_hold import barrier_waits, holds_the_step, waits_for_loader
from server.policies.rate_estimate import RateEstimate
from server.policies.rebalance import PeerLoad, choose_moves
from server.policies.round_timing import RoundTimes
from server.policies.silence import Silence, silence, suspect_after_s
from server.policies.stage_choice import choose_stage
from server.policies.step_book import Grant, StepBook
from server.policies.view_sample import PEERS_PER_STAGE, VIEW_GROUPS, deal_stage, view_groups, view_sample
from server.swarm.machine import SWARM_VIEW_REFRESH_S
from server.swarm.membership import REBALANCE_INTERVAL_S, STAGE_LOAD_REFRESH_S, STATE_SOURCES
from server.swarm.step_cycle import VIEW_GAP_S
from sim.averaging import Pusher, RoundOutcome, all_to_all_round, butterfly_round
from sim.devices import PeerKind, stage_rate
from sim.events import EventQueue
from sim.ideal import ideal_rate
from sim.results import Move, RunReport, SeriesRow
from sim.scenario import Scenario
from sim.serving import ServingQueue
from sim.tally import CoordinatorTally
from swarmhub.probe import PROBE_TIMEOUT_S
from swarmhub.stage_cost import stage_parameters, stage_push_bytes

READING_S = 5.0
"""How often the simulated coordinator takes a rate reading of each serving peer (the real one reads
every heartbeat, each second): often enough to settle a new peer before the next decision."""
TICK_S = 1.0
"""The coordinator's clock in the simulation (the live shell ticks every 0.5 s)."""
NO_WORK_POLL_S = 2.0
"""A trainer slot told there is no work asks again after this long (`Trainer._slot`)."""
CHECKPOINT_STORE_RATE = 125e6
"""Bytes/s a stage is restored at from the coordinator's checkpoint store."""
FORWARD_BYTES_SHARE = 0.4
"""Share of a stage's bytes per sample moved by its forward call (input and output activations of
five activation-sized transfers); the backward moves the rest."""

COLLECTING, AVERAGING, RECORDING, APPLYING = "collecting", "averaging", "recording", "applying"


class _Microbatch:
    """What travels through the pipeline: one granted microbatch, or `Scenario.bundle` of them that
    one trainer drives together (one call per stage for all of them)."""

    __slots__ = (
        "attempts",
        "backward",
        "deadline",
        "finish",
        "grants",
        "ids",
        "kept",
        "live",
        "peer",
        "samples",
        "stage",
        "token",
        "trainer",
        "tried",
        "waited_since",
        "whole",
    )

    def __init__(self, grants: list[Grant], trainer: int, num_stages: int) -> None:
        self.grants = grants
        self.ids = [g.microbatch_id for g in grants]
        self.samples = sum(g.samples for g in grants)
        self.live = True
        self.trainer = trainer
        self.stage = 0
        self.backward = False
        self.whole = False
        """This backward carries its input again: the peer recomputes the forward."""
        self.kept = [-1] * num_stages
        self.peer = -1
        self.finish = 0.0
        self.deadline = 0.0
        self.token = 0
        self.attempts = 0
        self.tried: set[int] = set()
        self.waited_since: float | None = None


class _SentCall(NamedTuple):
    """A call as its caller sent it. Its stage and kind are fixed when it is sent: by the time it
    starts, a caller that gave up on it may have moved its microbatch on."""

    mb: _Microbatch
    token: int
    stage: int
    accumulates: bool
    """A backward, or the last stage's forward-backward: the peer's accept window applies."""
    service_s: float


@dataclass(kw_only=True)
class _Peer:
    kind: PeerKind
    alive: bool = True
    died_at: float = math.inf
    member: bool = False
    """The coordinator counts it as connected (until the heartbeat timeout after its death)."""
    stage: int = -1
    ready: bool = False
    waiting: bool = False
    load_step: int = -1
    load_token: int = 0
    copies_behind: int = 0
    """`Member.copies_behind`."""
    assigned_at: float = 0.0
    free_at: float = 0.0
    """When the call on its compute thread ends."""
    serving: ServingQueue[_SentCall] = field(default_factory=ServingQueue)
    """Calls waiting for its compute thread."""
    serve_due: bool = False
    """A `SwarmSim._serve` of its next call is scheduled."""
    served: int = 0
    read_served: int = 0
    rate: RateEstimate = field(default_factory=RateEstimate)
    claim: float = 0.0
    counted: float = 0.0
    """Its share of `SwarmSim.stage_claims` while ready (`SwarmSim._serves`)."""
    linked: bool = False
    link_reading: tuple[int, float] | None = None
    """(stage, `SwarmSim._link_reading` there): the same on a stage until it moves."""
    rounds_held_up: int = 0
    """`Member.rounds_held_up`: averaging rounds in which others gave up waiting for its contribution."""
    trainer: bool = True
    """Also drives microbatches (`--trainer`, on by default)."""
    slots: int = 0
    accumulated: list[str] | None = None
    calls: dict[_Microbatch, None] | None = None
    """Microbatches whose call waits on it, in the order they were sent: trainers abandon them when
    it leaves the swarm view. A set ordered them by address, which made runs of one seed differ."""


class SwarmSim:
    def __init__(self, scenario: Scenario) -> None:
        sc = scenario
        if sc.mode == "fixed":
            raise ValueError("a fixed pipeline is simulated by sim.fixed, not SwarmSim")
        self.sc = sc
        self.model = sc.stage_model()
        self._wire_gradient_bytes = stage_push_bytes(
            stage_parameters(sc.preset, sc.num_stages), sc.compression
        )
        """Each stage's gradient sum as members push it, in the run's codec."""
        self.rng = random.Random(sc.seed)
        self.events = EventQueue()
        self.tally = CoordinatorTally()
        self.peers: list[_Peer] = []
        self.S = sc.num_stages
        self.routers = [
            [StageRouter(rng=random.Random((sc.seed * 1000 + s) * 1000 + g)) for s in range(self.S)]
            for g in range(sc.routers)
        ]
        """Router group -> stage -> that group's router (`_router`)."""
        self.view: list[set[int]] = [set() for _ in range(self.S)]
        """Ready peers per stage: what the coordinator's SwarmView lists, and trainers route to."""
        self.views_sent = 0
        self.view_sent = -math.inf
        self.view_due = False
        self.view_groups = 1
        """`view_sample.view_groups` of the latest refresh."""
        self.view_changes = [0] * self.S
        """Per stage, changes to its ready peers so far."""
        self.decks: list[tuple[int, ...]] = [() for _ in range(self.S)]
        """Each stage's deck as the latest refresh dealt it (`view_sample.deal_stage`)."""
        self.dealt: list[tuple[int, int] | None] = [None] * self.S
        """Each stage's (`view_changes`, turn) its deck was dealt at: dealt again only when either
        changed."""
        self.view_epoch = 0
        """Periodic refreshes so far: routers read their peers' rates again at each."""
        self.router_views: list[list[object]] = [[None] * self.S for _ in range(sc.routers)]
        """Router group -> stage -> the deal, view groups and epoch its router last took its peers at
        (None: never, or one of them left since)."""
        self.placed_count = [0] * self.S
        self.stage_claims = [0.0] * self.S
        """Sum of the ready peers' rates per stage, claims capped by their links (`_serves`), what
        `choose_stage` weighs."""
        self.loading: set[int] = set()
        self.join_rounds: tuple[float, RoundBudget] | None = None
        """`StageLoad.rounds` as `Membership` keeps it: built again after `STAGE_LOAD_REFRESH_S`,
        each joiner added meanwhile."""
        self.waiting: set[int] = set()
        self.members = 0
        self.book = StepBook(
            step=0, target_batch_size=sc.target_batch_size, microbatch_size=sc.microbatch_size, next_sample=0
        )
        self.granted = 0
        self.grant_cap: int | None = None
        """`RunMachine.grant_cap`: most microbatches outstanding, as of the last reading."""
        self.phase = COLLECTING
        self.phase_began = 0.0
        self.phase_s = dict.fromkeys((COLLECTING, AVERAGING, RECORDING, APPLYING), 0.0)
        """Simulated seconds spent in each phase of the step cycle so far."""
        self.batch_in_at: tuple[int, float] | None = None
        """`StepCycle.batch_in_at`."""
        self.rounds: dict[int, AveragingRound] = {}
        self.round_sums: dict[int, tuple[float, RoundOutcome, frozenset[tuple[int, int]]]] = {}
        """Stage -> (when its round's latest attempt began, that attempt's outcome, the (sender,
        receiver) sums held before it): what a new attempt of the step need not push again."""
        self.round_modelled: dict[int, float] = {}
        self.round_times = RoundTimes(self.S)
        """`StepCycle.round_times`: first attempts' rounds timed against the readings' model."""
        self.pending_apply: set[int] = set()
        self.last_decision = -1e9
        self.flight: dict[str, _Microbatch] = {}
        self.idle: deque[int] = deque()
        self.concurrency = microbatches_in_flight(
            stage_rates=[],
            round_trip_s=None,
            microbatch_size=sc.microbatch_size,
            trainers=1,
            num_stages=self.S,
            serving_peers=0,
        )
        # What the report counts.
        self.samples_completed = 0
        self.samples_committed = 0
        self.samples_lost = 0
        self.steps = 0
        self.retries = 0
        self.calls_refused = 0
        """Calls refused for waiting past their window (`peer.accept_window`)."""
        self.calls_taken = [0] * sc.num_stages
        """Per stage, the calls its live peers took."""
        self.call_queued_s = [0.0] * sc.num_stages
        """Per stage, the seconds those calls waited in their peers' queues, summed."""
        self.call_served_s = [0.0] * sc.num_stages
        """Per stage, the seconds they held their peers (the longer of compute and transfer), summed."""
        self.microbatches_failed = 0
        self.moves: list[Move] = []
        self.step_times: list[float] = []
        self.step_samples: list[int] = []
        self.series: list[SeriesRow] = []
        self._interval_start = 0.0
        self._interval_samples = 0
        self._interval_moves = 0
        self._ideal_time = 0.0
        self._ideal_samples = 0.0

    # ---- the run --------------------------------------------------------------------------------

    def run(self) -> RunReport:
        sc, ev = self.sc, self.events
        started = time.perf_counter()
        for index in range(sc.peers):
            kind = sc.kinds[index] if sc.kinds else sc.mix.draw(self.rng)
            ev.at(self.rng.uniform(0.0, sc.join_spread_s), self._join, kind, index)
        if sc.joins_per_s > 0:
            ev.at(self.rng.expovariate(sc.joins_per_s), self._arrival)
        ev.at(TICK_S, self._tick)
        ev.run_until(sc.duration_s)
        self._close_interval(sc.duration_s)
        self.phase_s[self.phase] += sc.duration_s - self.phase_began
        ideal_mean = self._ideal_samples / self._ideal_time if self._ideal_time else 0.0
        return RunReport(
            scenario=sc.name,
            mode=sc.mode,
            duration_s=sc.duration_s,
            wall_s=time.perf_counter() - started,
            events=ev.handled,
            samples_completed=self.samples_completed,
            samples_committed=self.samples_committed,
            samples_lost=self.samples_lost,
            steps=self.steps,
            retries=self.retries,
            calls_refused=self.calls_refused,
            microbatches_failed=self.microbatches_failed,
            ideal_rate_mean=ideal_mean,
            moves=self.moves,
            step_times=self.step_times,
            step_samples=self.step_samples,
            series=self.series,
            coordinator=self.tally.summary(sc.duration_s),
            phase_s=dict(self.phase_s),
            calls_taken=self.calls_taken,
            call_queued_s=self.call_queued_s,
            call_served_s=self.call_served_s,
        )

    @property
    def now(self) -> float:
        return self.events.now

    # ---- peers arriving and dying ---------------------------------------------------------------

    def _arrival(self, _a: object, _b: object) -> None:
        self._join(self.sc.mix.draw(self.rng), -1)
        self.events.at(self.now + self.rng.expovariate(self.sc.joins_per_s), self._arrival)

    def _join(self, kind: PeerKind, initial_index: int) -> None:
        sc = self.sc
        p = len(self.peers)
        peer = _Peer(
            kind=kind, member=True, accumulated=[], calls={}, trainer=initial_index not in sc.non_trainers
        )
        self.peers.append(peer)
        self.members += 1
        self.tally.received["Hello"] += 1
        self.tally.sent["Welcome"] += 1
        self.tally.sent["RunStatusChanged"] += 1
        self.tally.sent["Reachability"] += 1
        if sc.mean_lifetime_s:
            self.events.at(self.now + self.rng.expovariate(1.0 / sc.mean_lifetime_s), self._die, p)
        for when, index in sc.deaths:
            if index == initial_index:
                self.events.at(when, self._die, p)
        if 0 <= initial_index < len(sc.stages):
            stage = sc.stages[initial_index]
        else:
            stage = self.tally.timed("choose_stage", self._join_stage)
        peer.claim = self._benchmark_claim(peer)
        self._assign(p, stage)
        peer.slots = self._slots_wanted(self.concurrency) if peer.trainer else 0
        for _ in range(peer.slots):
            self._request_work(p)

    def _join_stage(self) -> int:
        """`Membership._joined`'s choice: the weakest stage whose averaging round admits one member
        more at its stage's pace (a joiner's upload is not measured yet)."""
        if self.join_rounds is None or self.now - self.join_rounds[0] >= STAGE_LOAD_REFRESH_S:
            # Each stage's count and slowest upload, tallied in one pass as
            # `Membership._current_stage_load` tallies them.
            counts = [0] * self.S
            slowest: list[float | None] = [None] * self.S
            for p in itertools.chain(*self.view, self.loading):
                peer = self.peers[p]
                counts[peer.stage] += 1
                upload = pushing_rate(self._link_reading(p), peer.rounds_held_up)
                slowest[peer.stage] = slower_upload(slowest[peer.stage], upload)
            collect_s = step_s(self.sc.target_batch_size, min(self.stage_claims), 0.0)
            self.join_rounds = (
                self.now,
                RoundBudget(
                    counts,
                    slowest,
                    self._wire_gradient_bytes,
                    collect_s,
                    self.round_times.scales(),
                    self.sc.patterns,
                ),
            )
        rounds = self.join_rounds[1]
        stage = choose_stage(
            self.stage_claims, self.placed_count, None, admits=lambda s: rounds.admits(s, None)
        )
        rounds.join(stage, None)
        return stage

    def _die(self, p: int, _b: object) -> None:
        peer = self.peers[p]
        if not peer.alive:
            return
        peer.alive = False
        peer.died_at = self.now
        # Its last heartbeat came up to an interval before it died.
        last_heartbeat = self.now - self.rng.uniform(0.0, self.sc.heartbeat_interval_s)
        self.events.at(last_heartbeat + self.sc.heartbeat_timeout_s, self._forget, p)
        # The coordinator suspects it at the first tick whose silence, less the tick's own gap, passes
        # suspicion.
        suspect = last_heartbeat + suspect_after_s(self.sc.heartbeat_interval_s) + 2 * TICK_S
        self.events.at(suspect, self._suspect, p, last_heartbeat)

    def _suspect(self, p: int, last_heartbeat: float) -> None:
        """`RunMachine._tick` on a silent peer: probed, a dead host's data plane never answers, and
        the probe gives up after its timeout."""
        verdict = silence(
            silent_s=self.now - last_heartbeat,
            heartbeat_interval_s=self.sc.heartbeat_interval_s,
            heartbeat_timeout_s=self.sc.heartbeat_timeout_s,
            probed=False,
            reachable=True,
            coordinator_gap_s=TICK_S,
        )
        if verdict == Silence.PROBE:
            self.events.at(self.now + PROBE_TIMEOUT_S, self._forget, p)

    def _forget(self, p: int, _b: object) -> None:
        """The coordinator's `_forget` after a heartbeat timeout, or a silent peer's failed probe."""
        peer = self.peers[p]
        if not peer.member:
            return
        peer.member = False
        self.members -= 1
        self._leave_stage(p)
        if peer.stage >= 0:
            self.placed_count[peer.stage] -= 1
        self.loading.discard(p)
        self.waiting.discard(p)
        for grant in self.book.fail_trainer(p):
            mb = self.flight.pop(grant.microbatch_id, None)
            if mb is not None:
                mb.live = False
            self.microbatches_failed += 1
        if self.phase == AVERAGING:
            for stage, round_ in list(self.rounds.items()):
                if round_.restarts_without(p):
                    self._restart_round(stage, round_.without(p))
            self._maybe_record()
        elif self.phase == APPLYING:
            self.pending_apply.discard(p)
            self._maybe_open_next()
        else:
            self._maybe_barrier()
            self._maybe_rebalance()
        self._view_changed()

    # ---- stage assignment -----------------------------------------------------------------------

    def _benchmark_claim(self, peer: _Peer) -> float:
        """What a peer reports before it has measured its stage: its benchmark over an average stage."""
        mean_flops = sum(self.model.flops) / self.S
        return peer.kind.flops / mean_flops * self._noise()

    def _noise(self) -> float:
        return math.exp(self.rng.gauss(0.0, self.sc.rate_noise)) if self.sc.rate_noise > 0 else 1.0

    def _leave_stage(self, p: int) -> None:
        """Out of the swarm view: trainers drop their connections to it (`FramePool.abandon`), so the
        calls waiting on it fail at once and are retried elsewhere."""
        peer = self.peers[p]
        if peer.ready:
            peer.ready = False
            self.stage_claims[peer.stage] -= peer.counted
            self.view[peer.stage].discard(p)
            self.view_changes[peer.stage] += 1
            # Trainers drop a departed peer at once (its connections close), whatever view they hold.
            for views in self.router_views:
                views[peer.stage] = None
        peer.accumulated = []
        peer.serving.clear()
        for mb in peer.calls:
            mb.deadline = self.now
            mb.finish = math.inf
            mb.token += 1
            self.events.at(self.now, self._answered, mb, mb.token)
        peer.calls = {}

    def _assign(self, p: int, stage: int) -> None:
        """`Membership._assign`: the peer copies `stage` now, or at the step boundary."""
        peer = self.peers[p]
        self._leave_stage(p)
        if peer.stage >= 0:
            self.placed_count[peer.stage] -= 1
        peer.stage = stage
        self.placed_count[stage] += 1
        peer.rate = RateEstimate()
        peer.read_served = peer.served
        peer.load_token += 1
        if self.phase != COLLECTING:
            peer.waiting = True
            self.waiting.add(p)
            return
        peer.waiting = False
        self.waiting.discard(p)
        peer.assigned_at = self.now
        peer.load_step = self.book.step
        self.loading.add(p)
        self.tally.sent["AssignStage"] += 1
        self.events.at(self.now + self._copy_s(p, stage), self._loaded, p, peer.load_token)

    def _copy_s(self, p: int, stage: int) -> float:
        """Seconds to load `stage`: nothing to copy at step 0; else from the fastest ready peer of the
        stage (the first of the sources offered), or from the latest checkpoint."""
        kind = self.peers[p].kind
        if self.book.step == 0:
            return kind.latency_s
        sources = sorted(self.view[stage], key=lambda q: -self.peers[q].claim)[:STATE_SOURCES]
        source_rate = max((self.peers[q].kind.bandwidth for q in sources), default=CHECKPOINT_STORE_RATE)
        return self.model.state_bytes[stage] / min(kind.bandwidth, source_rate) + 2 * kind.latency_s

    def _loaded(self, p: int, token: int) -> None:
        """The peer's StageReady, as `Membership._stage_ready` takes it."""
        peer = self.peers[p]
        if not peer.alive or not peer.member or token != peer.load_token:
            return
        self.tally.received["StageReady"] += 1
        self.loading.discard(p)
        if self.phase != COLLECTING:
            peer.copies_behind += 1
            peer.waiting = True
            self.waiting.add(p)
            return
        if peer.load_step != self.book.step:
            peer.copies_behind += 1
            self._assign(p, peer.stage)
            return
        peer.ready = True
        peer.copies_behind = 0
        peer.claim = peer.kind.flops / self.model.flops[peer.stage] * self._noise()
        self.view[peer.stage].add(p)
        self.view_changes[peer.stage] += 1
        peer.counted = self._serves(p)
        self.stage_claims[peer.stage] += peer.counted
        if self.grant_cap is None:
            # As `StepCycle._view_changed`: set while a stage had no ready peer, the cap is set again
            # at once, before the next grant.
            self._set_grant_cap()
        self._view_changed()
        self._pump()
        self._maybe_barrier()
        self._maybe_rebalance()

    def _router(self, mb: _Microbatch) -> StageRouter:
        """The router of `mb`'s trainer at its stage, holding the peers its group's window of the
        latest view lists. A real trainer takes in every view as it arrives; the simulated one takes
        in a view that changed its window when it next routes, and its peers' rates again at each
        periodic refresh (`SWARM_VIEW_REFRESH_S`), not at every view of a swarm that comes and goes."""
        group, stage = mb.trainer % len(self.routers), mb.stage
        router = self.routers[group][stage]
        seen = (self.dealt[stage], self.view_groups, self.view_epoch)
        if self.router_views[group][stage] != seen:
            self.router_views[group][stage] = seen
            peers = self.peers
            listed = [q for q in self._window(group, stage) if q in self.view[stage]]
            # Queue lengths come from the peers' replies (`observe_queue`), as the trainer takes them.
            router.update_peers({q: peers[q].claim for q in listed})
            router.update_links({q: link for q in listed if (link := self._link_reading(q)) is not None})
        return router

    def _window(self, group: int, stage: int) -> list[int]:
        """The peers of `stage` the latest view lists to router `group`'s trainers: the stage whole
        up to `PEERS_PER_STAGE`, else a window of its deck (`view_sample`). With more view groups
        than routers, a router takes the windows of every group it stands for (g, g + routers, ...),
        so that every window, and so every peer, is routed to by someone, as in a real swarm."""
        deck, groups = self.decks[stage], self.view_groups
        taken = range(group % groups, groups, len(self.routers))
        return list(dict.fromkeys(q for g in taken for q in view_sample([deck], g, groups)))

    def _view_changed(self) -> None:
        """`StepCycle._view_changed`: a view now, or `VIEW_GAP_S` after the last."""
        if self.now - self.view_sent >= VIEW_GAP_S:
            self._send_view()
        elif not self.view_due:
            self.view_due = True
            self.events.at(self.view_sent + VIEW_GAP_S, self._send_due_view)

    def _send_due_view(self, _a: object, _b: object) -> None:
        if self.view_due:
            self._send_view()

    def _send_view(self) -> None:
        self.view_sent = self.now
        self.view_due = False
        self.views_sent += 1
        self.view_groups = view_groups(self.view)
        for stage, ready in enumerate(self.view):
            # Only a stage past what the view groups' windows cover is turned at each refresh.
            turn = self.views_sent if len(ready) > VIEW_GROUPS * PEERS_PER_STAGE else 0
            dealt = (self.view_changes[stage], turn)
            if self.dealt[stage] != dealt:
                self.dealt[stage] = dealt
                self.decks[stage] = deal_stage(sorted(ready), self.sc.seed, stage, turn)
        # Every member is listed each stage's ready peers whole up to `PEERS_PER_STAGE`, else a sample
        # of that many (`server/policies/view_sample.py`).
        listed = sum(min(len(v), PEERS_PER_STAGE) for v in self.view)
        self.tally.sent["SwarmView"] += self.members
        self.tally.view_endpoints += self.members * listed

    # ---- trainers and grants --------------------------------------------------------------------

    def _request_work(self, trainer: int) -> None:
        """A trainer slot asks for work; refused, it waits in line and asks again later."""
        self.idle.append(trainer)
        self.tally.received["WorkRequest"] += 1
        if not self._pump():
            self.tally.sent["NoWork"] += 1

    def _pump(self) -> bool:
        """Grant work to waiting trainer slots while `RunMachine._grant` would; False if it refused
        the last slot that asked."""
        if self.phase != COLLECTING or not all(self.view):
            return False
        while self.idle:
            trainer = self.idle[0]
            peer = self.peers[trainer]
            if not peer.member or not peer.alive:
                self.idle.popleft()
                continue
            grants = []
            cap = self.grant_cap if self.grant_cap is not None else math.inf
            for _ in range(self.sc.bundle):
                if len(self.book.outstanding) >= cap:
                    break
                grant = self.tally.timed("grant", self.book.grant, trainer)
                if grant is None:
                    break
                grants.append(grant)
            if not grants:
                return False
            self.tally.sent["WorkGrant"] += len(grants)
            self.tally.received["WorkRequest"] += len(grants) - 1
            self.idle.popleft()
            mb = _Microbatch(grants, trainer, self.S)
            self.granted += mb.samples
            for microbatch_id in mb.ids:
                self.flight[microbatch_id] = mb
            self._route(mb)
        return True

    def _slot_free(self, trainer: int) -> None:
        peer = self.peers[trainer]
        if not peer.alive or not peer.member:
            return
        if peer.slots > self._slots_wanted(self.concurrency):
            peer.slots -= 1
            return
        self._request_work(trainer)

    def _retarget(self) -> None:
        """`Trainer._retarget` for every trainer at once (they all see the same swarm view)."""
        peer_rates = [[self.peers[q].claim for q in v] for v in self.view]
        wanted = microbatches_in_flight(
            stage_rates=[sum(rates) for rates in peer_rates],
            round_trip_s=chain_seconds(peer_rates, self.sc.microbatch_size),
            microbatch_size=self.sc.microbatch_size,
            trainers=max(1, self.members),
            num_stages=self.S,
            serving_peers=sum(len(rates) for rates in peer_rates),
        )
        slots = self._slots_wanted(wanted)
        if slots > self._slots_wanted(self.concurrency):
            for trainer, peer in enumerate(self.peers):
                if peer.member and peer.alive and peer.trainer and peer.slots < slots:
                    self.idle.extend([trainer] * (slots - peer.slots))
                    peer.slots = slots
        self.concurrency = wanted
        self._pump()

    def _slots_wanted(self, concurrency: int) -> int:
        """Bundles a trainer keeps in flight for `concurrency` microbatches."""
        return max(1, math.ceil(concurrency / self.sc.bundle))

    # ---- stage calls ----------------------------------------------------------------------------

    def _route(self, mb: _Microbatch, token: int | None = None) -> None:
        if token is not None and token != mb.token:
            return
        if not mb.live or not self.peers[mb.trainer].alive:
            return
        s, now = mb.stage, self.now
        keeper = mb.kept[s] if mb.backward and not mb.whole else -1
        if keeper >= 0:
            if keeper in self.view[s]:
                self._send(mb, keeper)
                return
            mb.whole = True
        router = self._router(mb)
        exclude = frozenset(mb.tried) if mb.tried and len(mb.tried) < len(router.peers()) else frozenset()
        samples = mb.samples
        # As `Trainer._call`: the peer picked is charged the sample's whole traffic at the stage.
        p = router.choose(samples, now, exclude, nbytes=int(self.model.bytes_per_sample[s] * samples))
        if p is None or p not in self.view[s]:
            mb.waited_since = mb.waited_since if mb.waited_since is not None else now
            if now - mb.waited_since > NO_PEER_PATIENCE_S:
                self._fail(mb)
                return
            mb.token += 1
            self.events.at(now + NO_PEER_WAIT_S, self._route, mb, mb.token)
            return
        mb.waited_since = None
        self._send(mb, p)

    def _send(self, mb: _Microbatch, p: int) -> None:
        peer, model, s, now = self.peers[p], self.model, mb.stage, self.now
        kind = peer.kind
        samples = mb.samples
        mb.attempts += 1
        mb.token += 1
        mb.peer = p
        mb.deadline = now + self.sc.call_timeout_s
        peer.calls[mb] = None
        # Trainers measure a link from the frames they send over it, answered or not.
        peer.linked = True
        if not peer.alive:
            mb.finish = math.inf
            self.events.at(mb.deadline, self._answered, mb, mb.token)
            return
        last = s == self.S - 1
        if last:
            work, nbytes = 1.0, 1.0
        elif not mb.backward:
            work, nbytes = model.forward_share(s), FORWARD_BYTES_SHARE
        else:
            work = 1.0 if mb.whole else 1.0 - model.forward_share(s)
            nbytes = 1.0 - FORWARD_BYTES_SHARE
        compute = samples * work * model.flops[s] / kind.flops
        reply = model.reply_bytes[s][1 if mb.backward and not last else 0]
        transfer = samples * max(nbytes * model.bytes_per_sample[s] / kind.bandwidth, reply / kind.upload)
        service_s = max(compute, transfer)
        arrives_at = now + kind.latency_s
        call_kind = self._call_kind(mb)
        call = _SentCall(mb, mb.token, s, call_kind != "forward", service_s)
        if peer.free_at <= arrives_at and not peer.serving:
            self._start(p, call, arrives_at, arrives_at, timed=False)
            return
        mb.finish = math.inf
        # The caller's timeout, unless the call is answered (or refused) before it.
        self.events.at(mb.deadline, self._answered, mb, mb.token)
        peer.serving.put(arrives_at, self._priority(mb, call_kind), call)
        if not peer.serve_due:
            peer.serve_due = True
            self.events.at(peer.free_at, self._serve, p)

    def _call_kind(self, mb: _Microbatch) -> CallKind:
        """The kind of call `mb` makes at its stage now, as `peer.compute_queue` names it."""
        if mb.backward:
            return "backward"
        return "forward_backward" if mb.stage == self.S - 1 else "forward"

    def _priority(self, mb: _Microbatch, call_kind: CallKind) -> int:
        """`stage_call_priority` of `mb`'s call at its stage; a bundle is partial if any of its
        microbatches is."""
        partial = mb.samples < len(mb.grants) * self.sc.microbatch_size
        return stage_call_priority(call_kind, mb.stage, self.S, partial=partial)

    def _queued(self, p: int) -> int:
        """The calls a peer holds, as it reports them: waiting for its compute thread or on it."""
        peer, now = self.peers[p], self.now
        return peer.serving.waiting(now) + (peer.free_at > now)

    def _serve(self, p: int, _b: object) -> None:
        """The peer's compute thread is free: it starts on the next call."""
        peer = self.peers[p]
        peer.serve_due = False
        if not peer.alive:
            peer.serving.clear()
            return
        call = peer.serving.next_call(self.now)
        if call is None:
            return
        start, arrived_at, sent = call
        self._start(p, sent, start, arrived_at, timed=True)
        if peer.serving:
            peer.serve_due = True
            self.events.at(max(peer.free_at, self.now), self._serve, p)

    def _start(self, p: int, call: _SentCall, start: float, arrived_at: float, *, timed: bool) -> None:
        """`call` starts on the peer's compute thread at `start`; its caller may have given up on it
        meanwhile (the peer cannot tell, but it refuses a call that waited past its window).
        `timed`: the caller's timeout is already scheduled."""
        peer, mb, token, s, service_s = self.peers[p], call.mb, call.token, call.stage, call.service_s
        caller_waits = token == mb.token and mb.live
        latency = peer.kind.latency_s
        waited = start - arrived_at
        if not computes(accumulates=call.accumulates, waited_s=waited, timeout_s=self.sc.call_timeout_s):
            self.calls_refused += 1
            if caller_waits and start + latency < mb.deadline:
                self.events.at(start + latency, self._refused, mb, token)
            return
        finish = start + service_s
        peer.free_at = finish
        self.calls_taken[s] += 1
        self.call_queued_s[s] += waited
        self.call_served_s[s] += service_s
        if not caller_waits:
            return
        mb.finish = finish
        if finish + latency < mb.deadline:
            self.events.at(finish + latency, self._answered, mb, token)
        elif not timed:
            self.events.at(mb.deadline, self._answered, mb, token)

    def _refused(self, mb: _Microbatch, token: int) -> None:
        """The peer's error reply: the call waited past its window."""
        if token != mb.token or not mb.live or not self.peers[mb.trainer].alive:
            return
        self.peers[mb.peer].calls.pop(mb, None)
        self._retry(mb, unreachable=False)

    def _answered(self, mb: _Microbatch, token: int) -> None:
        if token != mb.token or not mb.live:
            return
        if not self.peers[mb.trainer].alive:
            return  # the trainer died: nobody goes on with this microbatch
        p, now = mb.peer, self.now
        peer = self.peers[p]
        router = self._router(mb)
        peer.calls.pop(mb, None)
        ok = peer.died_at > mb.finish and now < mb.deadline
        if not ok:
            if now < mb.deadline:
                mb.finish = math.inf
                self.events.at(mb.deadline, self._answered, mb, token)
                return
            self._retry(mb, unreachable=True)
            return
        router.report_success(p)
        router.observe_queue(p, self._queued(p), now)
        peer.served += mb.samples
        s = mb.stage
        mb.attempts, mb.tried = 0, set()
        if not mb.backward:
            mb.kept[s] = p
            if s < self.S - 1:
                mb.stage = s + 1
                self._route(mb)
                return
            peer.accumulated.extend(mb.ids)
            mb.backward = True
        else:
            peer.accumulated.extend(mb.ids)
        mb.whole = False
        if mb.stage == 0:
            self._done(mb)
            return
        mb.stage -= 1
        self._route(mb)

    def _retry(self, mb: _Microbatch, *, unreachable: bool) -> None:
        """`Trainer._call` after a failed attempt: the peer is reported (to the coordinator too if
        it never answered) and the call tried again elsewhere."""
        p, now = mb.peer, self.now
        if unreachable:
            self.tally.received["PeerUnreachable"] += 1
        self._router(mb).report_failure(p, now)
        self.retries += 1
        if mb.backward and not mb.whole:
            # The kept backward is tried once; then the full call, with attempts of its own.
            mb.whole = True
            mb.attempts = 0
        else:
            mb.tried.add(p)
            if mb.attempts >= MAX_ATTEMPTS_PER_CALL:
                self._fail(mb)
                return
        self._route(mb)

    def _done(self, mb: _Microbatch) -> None:
        mb.live = False
        for grant in mb.grants:
            del self.flight[grant.microbatch_id]
            self.tally.received["MicrobatchDone"] += 1
            if self.tally.timed("complete", self.book.complete, grant.microbatch_id, 0.0):
                self.samples_completed += grant.samples
                self._interval_samples += grant.samples
        self._slot_free(mb.trainer)
        self._maybe_barrier()

    def _fail(self, mb: _Microbatch) -> None:
        mb.live = False
        for microbatch_id in mb.ids:
            self.flight.pop(microbatch_id, None)
            self.tally.received["MicrobatchFailed"] += 1
            self.book.fail(microbatch_id)
            self.microbatches_failed += 1
        self._slot_free(mb.trainer)
        self._maybe_barrier()

    # ---- the step cycle -------------------------------------------------------------------------

    def _maybe_barrier(self) -> None:
        if self.phase != COLLECTING or not self.book.ready_for_barrier():
            return
        if self.batch_in_at is None or self.batch_in_at[0] != self.book.step:
            self.batch_in_at = (self.book.step, self.now)
        if barrier_waits(self.now - self.batch_in_at[1], self._copy_holds_step()):
            return
        self._enter(AVERAGING)
        self.round_sums = {}
        self.rounds = {
            s: AveragingRound(stage=s, attempt=0, group=frozenset(self.view[s])) for s in range(self.S)
        }
        for s, round_ in self.rounds.items():
            self._restart_round(s, round_)
        self._maybe_record()

    def _enter(self, phase: str) -> None:
        self.phase_s[self.phase] += self.now - self.phase_began
        self.phase, self.phase_began = phase, self.now

    def _copy_holds_step(self) -> bool:
        """`Member.holds_step` of any loading peer."""
        now, peers = self.now, self.peers
        return any(holds_the_step(now - peers[p].assigned_at, peers[p].copies_behind) for p in self.loading)

    def _an_empty_stage_loads(self) -> bool:
        """`StepCycle._an_empty_stage_loads`."""
        now, peers = self.now, self.peers
        return any(
            not self.view[peers[p].stage] and waits_for_loader(now - peers[p].assigned_at)
            for p in self.loading
        )

    def _restart_round(self, stage: int, round_: AveragingRound) -> None:
        """Send the round's barrier, and settle now, from its members' links, how it goes: complete
        when the last sum is in, or at the coordinator's deadline without whoever held it up."""
        self.rounds[stage] = round_
        self.tally.sent["StepBarrier"] += len(round_.group)
        held: frozenset[tuple[int, int]] = frozenset()
        if stage in self.round_sums:
            began, before, held_before = self.round_sums[stage]
            held = frozenset(
                (sender, receiver)
                for sender, receiver in held_before | before.held_by(self.now - began)
                if sender in round_.group and receiver in round_.group
            )
        outcome, limit = self._round_outcome(stage, round_, held)
        self.round_sums[stage] = (self.now, outcome, held)
        if outcome.complete:
            self.events.at(self.now + outcome.ends_s, self._averaged, stage, self._attempt_key(round_))
        else:
            self.events.at(self.now + limit, self._expired, stage, (self._attempt_key(round_), outcome))

    def _attempt_key(self, round_: AveragingRound) -> tuple[int, int]:
        """Which attempt a round's scheduled end belongs to: attempts are numbered per step, and a
        deadline of an earlier step's attempt falls in a later step's averaging (a 719 s limit, a
        step of ~700 s), where it had ended the attempt of the same number with the old outcome."""
        return (self.book.step, round_.attempt)

    def _current(self, stage: int, key: tuple[int, int]) -> AveragingRound | None:
        """The stage's round, if the attempt `key` names is the one under way."""
        round_ = self.rounds.get(stage)
        if self.phase != AVERAGING or round_ is None or self._attempt_key(round_) != key:
            return None
        return round_

    def _round_outcome(
        self, stage: int, round_: AveragingRound, held: frozenset[tuple[int, int]]
    ) -> tuple[RoundOutcome, float]:
        """The round's outcome and the coordinator's deadline for it (seconds from the barrier): the
        barrier's push allowance from the slowest link measured among the members
        (`StepCycle._send_barrier`, which also models a first attempt's round there), each member's
        timeout as `Averager.average` takes it; `held`: the sums delivered in earlier attempts of
        the step (all-to-all does not push them again)."""
        model, peers, group = self.model, self.peers, round_.group
        wire = self._wire_gradient_bytes[stage]
        # The coordinator sizes the allowance by an even stage's float32 sum (`_stage_gradient_bytes`).
        stage_bytes = sum(model.gradient_bytes) / self.S
        rates = [pushing_rate(self._link_reading(p), peers[p].rounds_held_up) for p in group]
        slowest = min((r for r in rates if r is not None), default=None)
        round_.pattern = averaging_pattern(len(group), wire, slowest, self.sc.patterns)
        allowance = push_allowance_s(stage_bytes, len(group), slowest, round_.pattern)
        if round_.attempt == 0:
            self.round_modelled[stage] = round_s(len(group), wire, slowest, self.sc.patterns)
        timeout = max(transfer_timeout_s(int(wire * own_push_sums(round_.pattern, len(group)))), allowance)
        members = [
            Pusher(
                peer_id=p,
                # Every call of the step was answered or given up on by the barrier: its upload is
                # free (what it still computes for calls given up on is not modelled). A dead member
                # (not forgotten yet) pushes nothing.
                ready_s=0.0 if peers[p].alive else math.inf,
                upload=peers[p].kind.upload,
                download=peers[p].kind.bandwidth,
                latency_s=peers[p].kind.latency_s,
            )
            for p in group
        ]
        limit = round_limit_s(self.sc.averaging_deadline_s, allowance)
        if round_.pattern == "butterfly":
            return butterfly_round(members, wire, timeout, part_weights(rates)), limit
        return all_to_all_round(members, wire, timeout, held), limit

    def _link_reading(self, p: int) -> float | None:
        """What trainers measure of a peer's link once they called it (`LinkMeter`: a call's bytes both
        ways over its time on the wire): its download carries the calls, its upload the replies."""
        peer = self.peers[p]
        if not peer.linked or peer.stage < 0:
            return None
        if peer.link_reading is not None and peer.link_reading[0] == peer.stage:
            return peer.link_reading[1]
        out = sum(self.model.reply_bytes[peer.stage])
        into = max(0.0, self.model.bytes_per_sample[peer.stage] - out)
        reading = (into + out) / (into / peer.kind.bandwidth + out / peer.kind.upload)
        peer.link_reading = (peer.stage, reading)
        return reading

    def _expired(self, stage: int, attempt_outcome: tuple[tuple[int, int], RoundOutcome]) -> None:
        """`StepCycle._expire_rounds` at the round's deadline: the members that had everything report,
        the others name whom they missed, and the round goes on without those holding it up (they copy
        their stage again; their samples are lost), or the stage takes an empty step."""
        key, outcome = attempt_outcome
        round_ = self._current(stage, key)
        if round_ is None:
            return
        attempt = round_.attempt
        contributors = sorted(round_.group)
        for p in sorted(outcome.reported):
            if self.peers[p].alive:
                self.tally.received["AveragingDone"] += 1
                round_.report(p, attempt, contributors, self.peers[p].accumulated)
        for reporter, targets in outcome.missed.items():
            self.tally.received["PeerUnreachable"] += len(targets)
            for target in targets:
                round_.missed(reporter, target)
        drop = round_.going_on_without(frozenset()) if not round_.complete() else frozenset()
        # As `Membership._unreachable` and `StepCycle._expire_rounds` count them: once a round.
        for p in round_.group:
            if round_.was_missed(p) or (p in drop and drop != round_.group):
                self.peers[p].rounds_held_up += 1
        if round_.complete():
            self._time_round(stage)
            self._maybe_record()
            return
        if drop and drop != round_.group:
            self._restart_round(stage, round_.without(*drop))
            for p in sorted(drop):
                self._assign(p, self.peers[p].stage)
        else:
            self.rounds[stage] = round_.without(*round_.group)
        self._maybe_record()

    def _averaged(self, stage: int, key: tuple[int, int]) -> None:
        round_ = self._current(stage, key)
        if round_ is None:
            return
        attempt = round_.attempt
        contributors = sorted(round_.group)
        for p in contributors:
            peer = self.peers[p]
            if peer.alive:
                self.tally.received["AveragingDone"] += 1
                round_.report(p, attempt, contributors, peer.accumulated)
        if round_.awaits_check():
            # The part check (`Verification._maybe_check_parts`): the coordinator's vector out to every
            # member and its projections back; honest members pass it.
            round_.check_seed = 0
            self.tally.sent["CheckParts"] += len(round_.group)
            round_trip = 2 * max(self.peers[p].kind.latency_s for p in contributors)
            self.events.at(self.now + round_trip, self._parts_checked, stage, key)
            return
        self._time_round(stage)
        self._maybe_record()

    def _parts_checked(self, stage: int, key: tuple[int, int]) -> None:
        round_ = self._current(stage, key)
        if round_ is None:
            return
        if not round_.awaits_check():
            return
        self.tally.received["PartsChecked"] += sum(self.peers[p].alive for p in round_.group)
        round_.checked = True
        self._time_round(stage)
        self._maybe_record()

    def _time_round(self, stage: int) -> None:
        """`StepCycle._round_completed`: a first attempt's round, timed from its barrier, once."""
        round_ = self.rounds[stage]
        if round_.attempt != 0 or not round_.complete() or stage not in self.round_modelled:
            return
        began = self.round_sums[stage][0]
        self.round_times.timed(stage, modelled_s=self.round_modelled.pop(stage), measured_s=self.now - began)

    def _maybe_record(self) -> None:
        if self.phase != AVERAGING or not all(r.complete() for r in self.rounds.values()):
            return
        self._enter(RECORDING)
        summary = self.tally.timed(
            "summarize", self.book.summarize, [self.rounds[s].counted() for s in range(self.S)]
        )
        self.samples_committed += min(t.counted for t in summary.stage_tallies)
        self.samples_lost += summary.samples_lost
        self.step_samples.append(summary.samples_sent - summary.samples_lost)
        self.steps += 1
        self.step_times.append(self.now)
        self.events.at(self.now + self.sc.record_s, self._recorded)

    def _recorded(self, _a: object, _b: object) -> None:
        self._enter(APPLYING)
        self.pending_apply = {p for r in self.rounds.values() for p in r.group if self.peers[p].member}
        self.tally.sent["ApplyStep"] += len(self.pending_apply)
        self.events.at(self.now + self.sc.apply_s, self._applied)

    def _applied(self, _a: object, _b: object) -> None:
        alive = {p for p in self.pending_apply if self.peers[p].alive}
        self.tally.received["StepApplied"] += len(alive)
        self.pending_apply -= alive
        self._maybe_open_next()

    def _maybe_open_next(self) -> None:
        if self.phase != APPLYING or self.pending_apply:
            return
        self.book = self.book.next_book()
        self.granted = 0
        self._enter(COLLECTING)
        self.rounds = {}
        self.tally.sent["StepCommitted"] += self.members
        for peer in self.peers:
            if peer.member:
                peer.accumulated = []
        for p in sorted(self.waiting):
            self._assign(p, self.peers[p].stage)
        self._maybe_rebalance()
        self._pump()

    def placement_rate(self) -> float:
        """Samples/s the ready peers' placement sustains now: its bottleneck stage, at true rates."""
        model = self.model
        return min(
            sum(
                stage_rate(self.peers[p].kind, model.flops[s], model.bytes_per_sample[s])
                for p in self.view[s]
            )
            for s in range(self.S)
        )

    # ---- rebalancing ----------------------------------------------------------------------------

    def _maybe_rebalance(self) -> None:
        """`Membership._maybe_rebalance`: at a step boundary (nothing granted yet) at most every
        `REBALANCE_INTERVAL_S` without waiting for copies under way, or at once for an empty stage
        unless a copy under way (or a peer loading that stage) may fill it."""
        if self.sc.mode != "swarm" or self.phase != COLLECTING:
            return
        stage_empty = not all(self.view)
        if not stage_empty and (self.granted or self.now - self.last_decision < REBALANCE_INTERVAL_S):
            return
        if stage_empty and (self._copy_holds_step() or self._an_empty_stage_loads()):
            return
        if self.members < self.S:
            return
        self.last_decision = self.now
        model = self.model
        loads = [
            PeerLoad.measured(
                peer_id=p,
                stage=peer.stage,
                rate=peer.rate if peer.rate.count else RateEstimate().observe(peer.claim),
                queue_length=self._queued(p),
                link_rate=peer.kind.bandwidth if peer.linked else None,
                upload=pushing_rate(self._link_reading(p), peer.rounds_held_up),
            )
            for s in range(self.S)
            for p in self.view[s]
            for peer in (self.peers[p],)
        ]
        plan = self.tally.timed(
            "choose_moves",
            choose_moves,
            loads,
            self.S,
            horizon_s=REBALANCE_INTERVAL_S,
            stage_costs=model.flops,
            state_bytes=model.state_bytes,
            bytes_per_sample=model.bytes_per_sample,
            averaging=StepAveraging(
                gradient_bytes=self._wire_gradient_bytes,
                batch_size=self.sc.target_batch_size,
                round_scale=self.round_times.scales(),
                round_measured_s=self.round_times.measured_s(),
                patterns=self.sc.patterns,
            ),
        )
        if plan is None:
            return
        # As `Membership._maybe_rebalance`: every mover leaves its stage before any is offered
        # sources, so peers trading places do not copy from each other.
        for move in plan.moves:
            self._leave_stage(move.peer_id)
        for move in plan.moves:
            self.moves.append(
                Move(
                    t=self.now,
                    peer_id=move.peer_id,
                    from_stage=move.from_stage,
                    to_stage=move.to_stage,
                    fills_empty=move.fills_empty,
                )
            )
            self._interval_moves += 1
            self._assign(move.peer_id, move.to_stage)
        self._send_view()

    # ---- the clock ------------------------------------------------------------------------------

    def _tick(self, _a: object, _b: object) -> None:
        now = self.now
        tally = self.tally
        tally.received["Heartbeat"] += round(self.members * TICK_S / self.sc.heartbeat_interval_s)
        # Slots left waiting were refused (the step is full, or paced): they ask again every poll.
        polls = round(len(self.idle) * TICK_S / NO_WORK_POLL_S)
        tally.received["WorkRequest"] += polls
        tally.sent["NoWork"] += polls
        step = round(now / TICK_S)
        if step % round(READING_S / TICK_S) == 0:
            self._take_readings()
            # The slots refused at the old cap ask again within a poll: the cap may have grown.
            self._pump()
        if step % round(SWARM_VIEW_REFRESH_S / TICK_S) == 0:
            self.view_epoch += 1
            self._send_view()
            self._retarget()
        if now - self._interval_start >= self.sc.sample_every_s - 1e-9:
            self._close_interval(now)
        self._maybe_barrier()
        self._maybe_rebalance()
        self.events.at(now + TICK_S, self._tick)

    def _take_readings(self) -> None:
        """`Member.take_reading` for each serving peer that served since its last reading; and the
        grant cap at the rates the peers serve (`RunMachine` recomputes it with every swarm view)."""
        model = self.model
        served = [0.0] * self.S
        for s in range(self.S):
            for p in self.view[s]:
                peer = self.peers[p]
                if peer.served > peer.read_served:
                    peer.claim = peer.kind.flops / model.flops[s] * self._noise()
                    peer.rate = peer.rate.observe(peer.claim)
                    peer.read_served = peer.served
                peer.counted = self._serves(p)
                served[s] += peer.counted
            self.stage_claims[s] = served[s]
        self._set_grant_cap()

    def _set_grant_cap(self) -> None:
        self.grant_cap = outstanding_cap(
            self.stage_claims, [len(v) for v in self.view], self.sc.microbatch_size
        )

    def _serves(self, p: int) -> float:
        """What the coordinator counts a ready peer at: its claim, capped by its link once measured."""
        peer = self.peers[p]
        link = peer.kind.bandwidth if peer.linked else None
        return served_rate(peer.claim, link, self.model.bytes_per_sample[peer.stage])

    def _close_interval(self, now: float) -> None:
        length = now - self._interval_start
        if length <= 0:
            return
        kinds: dict[PeerKind, int] = {}
        for peer in self.peers:
            if peer.alive:
                kinds[peer.kind] = kinds.get(peer.kind, 0) + 1
        ideal = ideal_rate(kinds, self.model.flops, self.model.bytes_per_sample)
        rate = self._interval_samples / length
        self.series.append(
            SeriesRow(
                t=now,
                samples_per_s=rate,
                ideal_rate=ideal,
                fraction_of_ideal=rate / ideal if ideal > 0 else 0.0,
                live_peers=sum(kinds.values()),
                moves=self._interval_moves,
                step=self.book.step,
            )
        )
        self._ideal_time += length
        self._ideal_samples += ideal * length
        self._interval_start = now
        self._interval_samples = 0
        self._interval_moves = 0
