"""The validation's bookkeeping: how a real run becomes its simulated twin, which steps are timed, and
how moves are read from the real run's events."""

from __future__ import annotations

import pytest

from bench import sim_validation
from bench.baselines import TrainConfig
from bench.efficiency import Scenario
from bench.sim_validation import (
    MBIT,
    as_run,
    main,
    real_moves,
    settled_rate,
    sim_scenario,
    validation_scenarios,
)
from sim.scenario import Scenario as SimScenario
from sim.swarm import SwarmSim

CFG = TrainConfig(preset="tiny", num_stages=3, batch_size=48, microbatch_size=4, seq_len=32)


def _real(seconds: list[float]) -> dict:
    return {
        "served_stage_seconds_per_sample": seconds,
        "stage_seconds_per_sample": [1.0, 1.0, 1.0],
        "step_time_split_s": {"time_coordinator_s": 0.02, "time_averaging_s": 0.1},
    }


def test_the_twin_has_the_real_runs_peers_stages_and_measured_costs() -> None:
    scenario = Scenario(
        name="twin",
        cfg=CFG,
        slowdowns=[10.0, 10.0, 40.0, 10.0],
        upload_mbps={1: 8.0},
        servers_only=frozenset({1}),
        rebalance=False,
    )
    twin = sim_scenario(scenario, _real([0.01, 0.02, 0.03]), duration_s=100.0)
    assert twin.stages == (0, 1, 2, 0)
    assert twin.stage_flops == (0.01, 0.02, 0.03)
    assert [k.flops for k in twin.kinds] == [0.1, 0.1, 0.025, 0.1]
    assert twin.kinds[1].upload == 8.0 * MBIT
    assert twin.kinds[0].upload == twin.kinds[0].bandwidth
    assert twin.non_trainers == (1,)
    assert twin.mode == "static"
    # Its paced upload's pushes are the simulator's own to model, not the measured averaging time.
    assert (twin.record_s, twin.apply_s) == (0.02, SimScenario.apply_s)
    # A call costs the twin what it cost the real peer: seconds per sample times the slowdown.
    model = twin.stage_model()
    assert model.flops[2] / twin.kinds[2].flops == pytest.approx(0.03 * 40.0)


def test_without_paced_uploads_the_measured_averaging_time_is_the_twins_apply() -> None:
    twin = sim_scenario(
        Scenario(name="twin", cfg=CFG, slowdowns=[10.0] * 3), _real([1.0] * 3), duration_s=10.0
    )
    assert (twin.record_s, twin.apply_s) == (0.02, 0.1)


def test_a_kept_run_is_simulated_at_the_upload_pace_it_had() -> None:
    scenario = Scenario(name="twin", cfg=CFG, slowdowns=[10.0] * 3, upload_mbps={1: 5.8})
    assert as_run(scenario, {"config": {"upload_mbps": {"1": 4.8}}}).upload_mbps == {1: 4.8}
    assert as_run(scenario, {"config": {"upload_mbps": {}}}).upload_mbps == {1: 5.8}


def test_a_pinned_upload_paces_the_held_back_server_without_timing_a_stage(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def timed(*_args: object, **_kwargs: object) -> list[float]:
        raise AssertionError("a pinned upload must not time a stage")

    monkeypatch.setattr(sim_validation, "calibrate_stage_seconds", timed)
    held = [s for s in validation_scenarios(CFG, 4, 2.0, held_upload_mbps=6.1) if s.upload_mbps]
    assert [(s.upload_mbps, s.servers_only) for s in held] == [({1: 6.1}, frozenset({1}))]


@pytest.mark.parametrize("mbps", ["0", "-3"])
def test_a_pinned_upload_must_be_positive(mbps: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--held-upload-mbps", mbps])
    assert "--held-upload-mbps must be positive" in capsys.readouterr().err


def test_without_served_readings_the_calibration_is_used() -> None:
    scenario = Scenario(name="twin", cfg=CFG, slowdowns=[10.0] * 3)
    assert sim_scenario(scenario, _real([]), duration_s=10.0).stage_flops == (1.0, 1.0, 1.0)


def test_the_twin_runs_at_the_rate_its_costs_give() -> None:
    # Three peers, one per stage, each 0.05 s per sample: the pipeline's bottleneck is 20 samples/s,
    # less the fill and drain of each step and its measured coordinator and averaging time.
    scenario = Scenario(name="twin", cfg=CFG, slowdowns=[1.0] * 3)
    twin = sim_scenario(scenario, _real([0.05, 0.05, 0.05]), duration_s=120.0)
    report = SwarmSim(twin).run()
    rate = settled_rate(report.step_times, report.step_samples, [], steps=8, warmup=2)
    assert 0.5 * 20.0 < rate < 20.0


def test_settled_rate_times_from_two_steps_after_the_last_move() -> None:
    step_times = [10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0]
    kept = [100] * 7
    # No move: from the step after the warm-up.
    assert settled_rate(step_times, kept, [], steps=7, warmup=2) == pytest.approx(500 / 50)
    # A move during step 3 (between 30 and 40): timed from step index 5.
    assert settled_rate(step_times, kept, [35.0], steps=7, warmup=2) == pytest.approx(200 / 20)
    with pytest.raises(ValueError):
        settled_rate([1.0, 2.0], [1, 1], [], steps=7, warmup=1)


def test_settled_rate_counts_only_the_samples_a_step_kept() -> None:
    # A real run's rate counts samples sent less those lost; the twin's is counted alike.
    step_times = [10.0, 20.0, 30.0, 40.0]
    assert settled_rate(step_times, [100, 100, 40, 70], [], steps=4, warmup=2) == pytest.approx(110 / 20)


def test_real_moves_are_read_from_rebalance_events() -> None:
    events = [
        "stage_assigned: local-6 serves stage 0 (joined)",
        "rebalance: local-6: stage 0 -> 2; stage 2 was a bottleneck: pipeline rate 7.1 -> 9.8",
        "rebalance: local-1: stage 1 -> 0; fills an empty stage",
    ]
    assert real_moves(events) == [(0, 2), (1, 0)]
