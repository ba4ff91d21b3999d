"""The simulator against cases with known answers, and against the real policies it drives."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from bench.ideal import fixed_pipeline_samples
from server.policies.averaging import AveragingRound
from server.policies.silence import suspect_after_s
from server.policies.view_sample import PEERS_PER_STAGE
from server.swarm.membership import REBALANCE_INTERVAL_S
from sim.averaging import RoundOutcome
from sim.devices import DeviceMix, PeerKind, stage_rate
from sim.fixed import pipeline_rate, restart_s, simulate_fixed
from sim.results import RunReport
from sim.scenario import HEARTBEAT_INTERVAL_S, HEARTBEAT_TIMEOUT_S, HOMOGENEOUS, SCENARIOS, Scenario
from sim.stages import StageModel
from sim.swarm import AVERAGING, TICK_S, SwarmSim, _Microbatch, _SentCall
from swarmhub.presets import get_preset
from swarmhub.probe import PROBE_TIMEOUT_S

T4 = PeerKind(device="t4", link="datacenter")

BASE = Scenario(
    name="test",
    preset=get_preset("swarm-ref"),
    num_stages=4,
    seq_len=256,
    microbatch_size=32,
    target_batch_size=32_768,
    compression="int8",
    peers=12,
    mix=HOMOGENEOUS,
    duration_s=400.0,
    averaging="butterfly",
    record_s=0.0,
    apply_s=0.0,
    sample_every_s=50.0,
)


def test_homogeneous_swarm_without_failures_reaches_the_bottleneck_rate() -> None:
    sim = SwarmSim(BASE)
    report = sim.run()
    # Rebalancing found the best placement of whole peers (`bench.ideal`)...
    assert sim.placement_rate() == report.series[-1].ideal_rate
    # ...and once there the pipeline runs at its bottleneck, step boundaries included.
    settled = [row.fraction_of_ideal for row in report.series[2:]]
    assert min(settled) > 0.95
    assert max(settled) <= 1.0 + 1e-9
    assert report.samples_lost == 0 and report.microbatches_failed == 0 and report.retries == 0


def test_the_time_split_accounts_for_the_whole_run_and_shows_a_longer_round() -> None:
    # Nine T4s on the head stage, whose 14 MB sums each member pushes 8 times all-to-all and about
    # twice in a butterfly: the same collection, a longer averaging phase.
    scenario = dataclasses.replace(BASE, mode="static", kinds=(T4,) * 12, stages=(0, 1, 2) + (3,) * 9)
    butterfly = SwarmSim(scenario).run()
    all_to_all = SwarmSim(dataclasses.replace(scenario, averaging="all-to-all")).run()
    for report in (butterfly, all_to_all):
        split = report.time_split()
        assert sum(split["phase_share"].values()) == pytest.approx(1.0, abs=0.005)
        assert all(report.calls_taken) and split["call_served_s"] > 0 and split["call_queued_s"] >= 0
        assert len(split["stage_call_queued_s"]) == len(split["stage_call_served_s"]) == scenario.num_stages
        per_stage = split["stage_call_served_s"]
        assert min(per_stage) <= split["call_served_s"] <= max(per_stage)
        assert report.steps > 0
        assert sum(report.call_served_s) <= scenario.peers * scenario.duration_s, "served past the end"
    shares = [r.time_split()["phase_share"]["averaging"] for r in (butterfly, all_to_all)]
    assert shares[1] > 3 * shares[0] > 0, shares


def test_a_dead_peers_calls_are_retried_elsewhere_and_no_microbatch_is_lost() -> None:
    # Peer 11 serves a stage but trains nothing; it dies mid-step with calls waiting on it.
    scenario = dataclasses.replace(BASE, non_trainers=(11,), deaths=((150.0, 11),))
    report = SwarmSim(scenario).run()
    assert report.retries > 0
    assert report.microbatches_failed == 0
    # The books balance: every granted sample was counted on every stage or recorded lost there
    # (the gradients the dead peer held when it died).
    assert report.samples_committed + report.samples_lost == report.steps * scenario.target_batch_size
    assert report.samples_committed > 0


def test_a_silent_death_is_found_by_the_coordinators_probe_before_the_heartbeat_timeout() -> None:
    # Its last heartbeat was at most an interval before it died; three intervals and two ticks (one
    # to notice, one the tick's own gap) later it is probed, and a dead host's probe runs out its
    # timeout.
    died = 150.0
    found_by = died + suspect_after_s(HEARTBEAT_INTERVAL_S) + 2 * TICK_S + PROBE_TIMEOUT_S
    assert found_by < died - HEARTBEAT_INTERVAL_S + HEARTBEAT_TIMEOUT_S
    scenario = dataclasses.replace(BASE, non_trainers=(11,), deaths=((died, 11),), duration_s=found_by + 1e-6)
    sim = SwarmSim(scenario)
    sim.run()
    (dead,) = [p for p, peer in enumerate(sim.peers) if not peer.alive]
    assert not sim.peers[dead].member
    assert dead not in sim.view[sim.peers[dead].stage]


def test_a_dead_peer_the_coordinator_never_forgets_stays_banned_at_the_cap() -> None:
    # Peer 11 dies silently and is never probed nor timed out: every trainer keeps routing to it
    # after each ban (a short call timeout makes the failures pile up fast). Its 1,025th failure in
    # a row overflowed the router's ban backoff. One router for all trainers piles them up fastest.
    scenario = dataclasses.replace(
        BASE,
        routers=1,
        non_trainers=(11,),
        deaths=((150.0, 11),),
        heartbeat_interval_s=1e8,
        heartbeat_timeout_s=1e9,
        call_timeout_s=0.05,
        duration_s=1200.0,
    )
    sim = SwarmSim(scenario)
    sim.run()
    (dead,) = [p for p, peer in enumerate(sim.peers) if not peer.alive]
    assert sim.routers[0][sim.peers[dead].stage].failures(dead) > 1025


def test_fixed_pipeline_matches_the_closed_form_under_a_known_death_schedule() -> None:
    scenario = dataclasses.replace(
        BASE,
        mode="fixed",
        peers=4,
        kinds=(T4,) * 4,
        duration_s=7200.0,
        checkpoint_every_s=600.0,
        replacement_s=60.0,
        deaths=((1000.0, 0), (1030.0, 2), (4000.0, 3)),
    )
    model = StageModel.of(scenario.preset, scenario.num_stages, scenario.seq_len, scenario.compression)
    expected = fixed_pipeline_samples(
        rate=pipeline_rate(scenario.kinds, model),
        duration_s=scenario.duration_s,
        deaths_s=[when for when, _ in scenario.deaths],
        restart_s=restart_s(scenario, scenario.kinds, model),
        checkpoint_every_s=scenario.checkpoint_every_s,
    )
    report = simulate_fixed(scenario)
    assert report.restarts == 3
    assert report.samples_committed == round(expected)


def test_rebalancing_moves_peers_into_the_under_served_stage() -> None:
    # Link-bound middle stages: joiners are placed by compute claims (`choose_stage`), which send most
    # of them to the compute-heavy last stage; only rebalancing (link-aware) fixes the placement.
    mix = DeviceMix(devices={"t4": 1.0}, links={"broadband": 1.0})
    swarm = SwarmSim(dataclasses.replace(BASE, mix=mix, target_batch_size=4096))
    swarm_report = swarm.run()
    static = SwarmSim(dataclasses.replace(BASE, mix=mix, target_batch_size=4096, mode="static"))
    static_report = static.run()
    assert static_report.moves == []
    assert swarm_report.moves
    middle = {1, 2}
    assert all(move.to_stage in middle for move in swarm_report.moves if not move.fills_empty)
    assert swarm.placement_rate() > static.placement_rate()
    assert swarm_report.samples_committed > static_report.samples_committed


def twelve_t4s_and_joiners(
    *, stages: tuple[int, ...], link: str, joins_every_s: float, duration_s: float, batch: int
) -> Scenario:
    """Twelve T4s on datacenter links placed on `stages`, joined by T4s on `link` links, all-to-all."""
    return dataclasses.replace(
        BASE,
        averaging="all-to-all",
        kinds=(T4,) * 12,
        stages=stages,
        mix=DeviceMix(devices={"t4": 1.0}, links={link: 1.0}),
        join_rate_per_s=1 / joins_every_s,
        duration_s=duration_s,
        target_batch_size=batch,
    )


def test_rebalancing_goes_on_while_joiners_on_slow_links_chase_the_run() -> None:
    # Joiners on 20 Mbit/s links are placed on the heavy last stage, whose 184 MB state they copy for
    # over a minute while a step collects in seconds: each copy arrives behind, and they copy again.
    # Waiting for their copies held every step and stopped rebalancing for good (no move after the
    # first minute at the code before `server/policies/join_hold.py`; 55 steps instead of 81).
    scenario = twelve_t4s_and_joiners(
        stages=(0, 0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 3),
        link="slow",
        joins_every_s=100,
        duration_s=900,
        batch=1024,
    )
    sim = SwarmSim(scenario)
    report = sim.run()
    chasing = [p for p in sim.peers if p.copies_behind > 0 and not p.ready]
    assert chasing, "the scenario no longer has a peer chasing the run"
    # Decisions went on all run long: at most one per interval, at a step boundary, and at least
    # one per two intervals (whether a move paid is another matter: since routing charges a
    # first-stage call its activations, the run is balanced early and moves stop).
    assert sim.tally.decisions["choose_moves"] >= scenario.duration_s / REBALANCE_INTERVAL_S / 2
    assert report.samples_committed > 0


def test_steps_and_decisions_go_on_while_copies_begin_every_few_seconds() -> None:
    # A peer joins every 2 s and copies its stage for longer than that over 100 Mbit/s: some copy is
    # always under way and younger than the join hold. Each one held the barrier and stopped
    # rebalancing, so a large swarm never averaged nor decided (at the code before this test: 2 steps
    # and 2 decisions in 5 minutes, both before the joins took over; the 10,000-peer scale run
    # averaged one step in 2 hours).
    scenario = twelve_t4s_and_joiners(
        stages=(0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3),
        link="broadband",
        joins_every_s=2,
        duration_s=300,
        batch=2048,
    )
    sim = SwarmSim(scenario)
    report = sim.run()
    assert report.steps >= 6
    assert sim.tally.decisions["choose_moves"] >= 6
    assert report.samples_committed == report.steps * scenario.target_batch_size - report.samples_lost


def test_slow_uplinks_leave_the_heavy_stage_whose_averaging_they_paced() -> None:
    # Three T4s on 20 Mbit/s links start among the twelve members of the head stage, whose 14 MB
    # sums they push at 2.5 MB/s: its all-to-all round took ~60 s against a few seconds of
    # collecting, and rates alone never moved them (their compute is a T4's like the others').
    # At the code before `server/policies/averaging_pace.py` two of them were still there at the end
    # and the run committed 104,448 samples; 391,168 with it.
    slow = PeerKind(device="t4", link="slow")
    scenario = dataclasses.replace(
        BASE,
        averaging="all-to-all",
        peers=15,
        kinds=(T4,) * 12 + (slow,) * 3,
        stages=(0, 1, 2) + (3,) * 12,
        target_batch_size=2048,
        duration_s=1800.0,
    )
    sim = SwarmSim(scenario)
    report = sim.run()
    heavy = {0, 3}  # the embeddings' and the head's sums are 14 MB; the middle stages' 1.3 MB
    assert all(p.stage not in heavy for p in sim.peers if p.kind.link == "slow")
    static = SwarmSim(dataclasses.replace(scenario, mode="static")).run()
    assert report.samples_committed > 2 * static.samples_committed


HOUR_WITHOUT_DEATHS = dataclasses.replace(SCENARIOS["churn-100"], mean_lifetime_s=None, duration_s=3600.0)
HEAD = HOUR_WITHOUT_DEATHS.num_stages - 1


def head_members(sim: SwarmSim) -> int:
    return sum(1 for p in sim.peers if p.alive and p.stage == HEAD)


@pytest.fixture(scope="module")
def all_to_all_hour() -> tuple[SwarmSim, RunReport]:
    """The churn-100 hour without deaths, every round all-to-all: both head-stage tests read it."""
    sim = SwarmSim(dataclasses.replace(HOUR_WITHOUT_DEATHS, averaging="all-to-all"))
    return sim, sim.run()


@pytest.mark.slow
def test_a_head_stage_whose_round_is_long_because_it_is_large_sheds_members(
    all_to_all_hour: tuple[SwarmSim, RunReport],
) -> None:
    # churn-100 without deaths: the rate plan fills the head stage (the heaviest compute) with 26
    # broadband members, none an upload outlier, whose all-to-all round of 14 MB sums takes 28 s
    # after 2 s of collecting. Moving only outliers kept all 26 there for good, and the first
    # simulated hour committed 286,720 samples. Moving members as fast as the rest off the one
    # stage with the longest round, 368,640: the embeddings' stage's round was then as long, and
    # neither shrank alone. Off whichever is longest as the moves go, 532,480 (880,640 since).
    sim, report = all_to_all_hour
    assert head_members(sim) < 26
    assert report.samples_committed > 1.5 * 286_720
    movers = {m.peer_id for m in report.moves if m.from_stage == HEAD}
    assert not [m for m in report.moves if m.peer_id in movers and m.to_stage == HEAD], "none comes back"


@pytest.mark.slow
def test_a_large_head_stage_averaging_in_a_butterfly_is_not_shed_and_the_hour_commits_more(
    all_to_all_hour: tuple[SwarmSim, RunReport],
) -> None:
    # The same hour with rounds in a butterfly: each member pushes 2/N of the 14 MB sums instead of
    # all of them, so the head stage's round is no longer the longest and moves need not shed it.
    # At 6bc2e0d (butterfly from 9 members, or from 3 where all-to-all would take over a second
    # longer) the head stage ended with 20 members against 7 all-to-all, and the hour committed
    # 1,617,920 samples against 880,640.
    assert HOUR_WITHOUT_DEATHS.averaging == "peers"
    butterfly = SwarmSim(HOUR_WITHOUT_DEATHS)
    report = butterfly.run()
    all_to_all, all_to_all_report = all_to_all_hour
    assert head_members(butterfly) >= 2 * head_members(all_to_all)
    assert report.samples_committed > 1.5 * all_to_all_report.samples_committed


def test_a_first_stage_peer_on_a_slow_link_gets_the_calls_its_link_carries() -> None:
    # An A100 on 100 Mbit/s beside a T4 on the first stage: its calls carry token ids only, but it
    # returns activations and takes their gradient. Routers charged each call and a reply its size,
    # so the A100 looked 7.5x the T4 and took half the calls, which its link serves at a tenth of
    # the T4's rate: 180,224 samples committed in 15 minutes, against 610,304 with each pick charged
    # the sample's whole traffic at the stage (`Trainer._call`).
    fast_on_slow_link = PeerKind(device="a100", link="broadband")
    scenario = dataclasses.replace(
        BASE,
        mode="static",
        kinds=(fast_on_slow_link,) + (T4,) * 11,
        stages=(0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 3),
        target_batch_size=4096,
        duration_s=900.0,
    )
    sim = SwarmSim(scenario)
    report = sim.run()
    model = sim.model
    first = [p for p in sim.peers if p.stage == 0]
    capacity = {id(p): stage_rate(p.kind, model.flops[0], model.bytes_per_sample[0]) for p in first}
    served = sum(p.served for p in first)
    (a100,) = [p for p in first if p.kind == fast_on_slow_link]
    capacity_share = capacity[id(a100)] / sum(capacity.values())
    assert a100.served / served < 2 * capacity_share
    assert report.samples_committed > 2 * 180_224


def test_a_seed_replays_exactly_when_peers_die_with_calls_waiting_on_them() -> None:
    # Deaths fail the calls waiting on the dead peer and reschedule them at the same instant, in the
    # order they were sent: in set order (by object address) two runs of one seed went apart.
    scenario = dataclasses.replace(BASE, mean_lifetime_s=120.0, seed=3)
    first, second = SwarmSim(scenario).run(), SwarmSim(scenario).run()
    assert first.retries > 0
    assert (first.steps, first.samples_committed, first.samples_lost, first.retries) == (
        second.steps,
        second.samples_committed,
        second.samples_lost,
        second.retries,
    )
    assert [row.samples_per_s for row in first.series] == [row.samples_per_s for row in second.series]


@pytest.mark.parametrize(
    ("stage_size", "largest_window"),
    [
        (20, 20),  # listed whole, to every router
        (100, PEERS_PER_STAGE),  # 13 view groups, fewer than the 32 routers: a window each
        (3000, 10 * PEERS_PER_STAGE),  # 320 view groups: a router takes the windows of 10
    ],
)
def test_routers_route_among_the_windows_the_swarm_view_lists_and_every_peer_is_in_one(
    stage_size: int, largest_window: int
) -> None:
    sim = SwarmSim(BASE)
    sim.view[1] = set(range(stage_size))
    sim._send_view()
    windows = [sim._window(group, 1) for group in range(len(sim.routers))]
    assert max(len(w) for w in windows) <= largest_window
    assert all(len(set(w)) == len(w) for w in windows)
    assert set().union(*windows) == sim.view[1]
    if stage_size <= PEERS_PER_STAGE:
        assert all(sorted(w) == list(range(stage_size)) for w in windows)


def test_a_router_takes_in_a_new_view_when_it_next_routes_and_drops_a_departed_peer_at_once() -> None:
    sim = SwarmSim(BASE)
    for p in range(4):
        sim._join(T4, p)
    for p in range(4):
        sim.peers[p].ready = True
        sim.view[sim.peers[p].stage].add(p)
    sim._send_view()
    stage = sim.peers[0].stage
    mb = _Microbatch([], trainer=0, num_stages=BASE.num_stages)
    mb.stage = stage
    assert sim._router(mb).peers() == sorted(sim.view[stage])
    sim._leave_stage(0)
    assert 0 not in sim._router(mb).peers()


def _one_stage_served_by(peers: int) -> SwarmSim:
    """A swarm whose stage 1 alone has ready peers, so no work is granted: calls are sent by hand."""
    scenario = dataclasses.replace(
        BASE,
        mode="static",
        peers=peers,
        kinds=(T4,) * peers,
        stages=(1,) * peers,
        non_trainers=tuple(range(peers)),
    )
    sim = SwarmSim(scenario)
    for p in range(peers):
        sim._join(T4, p)
        sim.peers[p].ready = True
        sim.view[1].add(p)
    sim._send_view()
    return sim


def _call(sim: SwarmSim, *, backward: bool, trainer: int) -> _Microbatch:
    mb = _Microbatch([], trainer=trainer, num_stages=sim.S)
    mb.samples, mb.stage, mb.backward, mb.whole = 32, 1, backward, backward
    return mb


def test_a_busy_peer_starts_the_backward_before_forwards_sent_earlier() -> None:
    # The real peer's compute thread serves by `stage_call_priority`: a backward, with fewer calls of
    # its microbatch to come, before forwards that were queued first.
    sim = _one_stage_served_by(2)
    started: list[_Microbatch] = []
    start = sim._start

    def recording_start(p: int, call: _SentCall, *args: Any, **kwargs: Any) -> None:
        started.append(call.mb)
        start(p, call, *args, **kwargs)

    sim._start = recording_start  # type: ignore[method-assign]
    sim.peers[0].free_at = 5.0
    first, second = _call(sim, backward=False, trainer=1), _call(sim, backward=False, trainer=1)
    backward = _call(sim, backward=True, trainer=1)
    for mb in (first, second, backward):
        sim._send(mb, 0)
    assert sim._queued(0) == 1, "sent calls count once they reach the peer"
    sim.events.run_until(0.5)
    assert sim._queued(0) == 4
    sim.events.run_until(30.0)
    assert started == [backward, first, second]
    assert sim.calls_refused == 0


def test_a_backward_that_waited_past_its_accept_window_is_refused_and_retried_elsewhere_at_once() -> None:
    # As `peer.accept_window`: a call that accumulates gradients and starts after waiting past
    # `ACCEPT_FRACTION` of its timeout is refused; its caller hears so and retries on another peer
    # before its timeout. A forward that waited as long, still within its timeout, is computed.
    sim = _one_stage_served_by(2)
    timeout = sim.sc.call_timeout_s
    sim.peers[0].free_at = 0.9 * timeout
    backward, forward = _call(sim, backward=True, trainer=1), _call(sim, backward=False, trainer=1)
    sim._send(backward, 0)
    sim._send(forward, 0)
    sim.events.run_until(0.9 * timeout + 1.0)
    assert sim.calls_refused == 1 and sim.retries == 1
    assert sim.tally.received["PeerUnreachable"] == 0, "a refusal is an answer, not an unreachable peer"
    assert backward.peer == 1 and sim.peers[1].served == 32, "answered by peer 1 within a second"
    assert (forward.stage, sim.peers[0].served) == (2, 32), "computed on peer 0 and gone on"
    assert sim.calls_taken[1] == 2


def test_a_call_its_caller_gave_up_on_is_served_as_the_call_it_was_sent_as() -> None:
    # The peer computes a stale call as what it was sent as. Its microbatch may have moved on to
    # another stage and direction meanwhile; that is no reason to refuse it or to tally it elsewhere.
    sim = _one_stage_served_by(2)
    timeout = sim.sc.call_timeout_s
    sim.peers[0].free_at = 0.9 * timeout
    forward = _call(sim, backward=False, trainer=1)
    sim._send(forward, 0)
    forward.token += 1
    forward.stage, forward.backward = 0, True
    sim.events.run_until(0.9 * timeout + 1.0)
    assert sim.calls_refused == 0, "a forward within its timeout is computed"
    assert (sim.calls_taken[0], sim.calls_taken[1]) == (0, 1)


def test_a_forward_that_waited_past_its_callers_timeout_is_refused_and_holds_the_peer_no_longer() -> None:
    # As `peer.accept_window`: past its whole timeout a forward's caller has given up and retried
    # elsewhere. Computing it anyway held the peer from a call that came later and is still waited on.
    sim = _one_stage_served_by(2)
    timeout = sim.sc.call_timeout_s
    started: list[tuple[_Microbatch, float]] = []
    start = sim._start

    def recording_start(p: int, call: _SentCall, at: float, *args: Any, **kwargs: Any) -> None:
        started.append((call.mb, at))
        start(p, call, at, *args, **kwargs)

    sim._start = recording_start  # type: ignore[method-assign]
    sim.peers[0].free_at = 1.1 * timeout
    stale = _call(sim, backward=False, trainer=1)
    sim._send(stale, 0)
    sim.events.run_until(1.05 * timeout)
    assert stale.peer == 1, "its caller gave up on peer 0 and retried on peer 1"
    waited_on = _call(sim, backward=False, trainer=1)
    sim._send(waited_on, 0)
    sim.events.run_until(1.1 * timeout + 1.0)
    assert sim.calls_refused == 1
    at_peer_0 = [(mb, at) for mb, at in started if at >= 1.1 * timeout]
    assert at_peer_0 == [(stale, 1.1 * timeout), (waited_on, 1.1 * timeout)]
    assert waited_on.stage == 2, "computed on peer 0 and gone on"


def test_no_microbatch_is_granted_without_a_cap_once_every_stage_is_served() -> None:
    # As `StepCycle._view_changed`: the ready that serves the last unserved stage sets the cap at
    # once. Set only at the next reading, the grants between were unbounded.
    sim = SwarmSim(dataclasses.replace(BASE, duration_s=60.0))
    granted_uncapped: list[int] = []
    pump = sim._pump

    def watched_pump() -> bool:
        before = len(sim.book.outstanding)
        refused = pump()
        if sim.grant_cap is None and len(sim.book.outstanding) > before:
            granted_uncapped.append(len(sim.book.outstanding) - before)
        return refused

    sim._pump = watched_pump  # type: ignore[method-assign]
    report = sim.run()
    assert report.samples_completed > 0
    assert granted_uncapped == []


def test_a_deadline_left_over_from_an_earlier_step_does_not_end_this_steps_round() -> None:
    # Attempts are numbered per step. At 10,000 peers a restarted attempt's 719 s deadline fell in
    # the next step's averaging, and its old outcome (nobody reported, every member missed someone)
    # emptied the new round of the same number: a whole step's samples lost at one stage.
    sim = SwarmSim(BASE)
    for p in range(4):
        sim._join(T4, p)
        sim.peers[p].ready = True
        sim.view[sim.peers[p].stage].add(p)
    stage = sim.peers[0].stage
    group = frozenset(sim.view[stage])
    sim.book = sim.book.next_book()
    sim._enter(AVERAGING)
    # The other stages' rounds are under way, so no step is recorded here.
    sim.rounds = {
        s: AveragingRound(stage=s, attempt=0, group=frozenset({-1 - s})) for s in range(BASE.num_stages)
    }
    sim.rounds[stage] = AveragingRound(stage=stage, attempt=1, group=group)
    nobody = RoundOutcome(
        group=group, reported=frozenset(), missed={p: group - {p} for p in group}, ends_s=0.0
    )

    sim._expired(stage, ((sim.book.step - 1, 1), nobody))
    assert sim.rounds[stage].group == group and sim.rounds[stage].attempt == 1

    sim._expired(stage, ((sim.book.step, 1), nobody))
    assert sim.rounds[stage].group != group
