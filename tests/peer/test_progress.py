"""The participant's terminal lines as functions of numbers: durations, bars, step N/TOTAL and ETA."""

from __future__ import annotations

import io

import pytest

from peer.console import Console
from peer.progress import (
    StepClock,
    StepMark,
    eta_seconds,
    eta_text,
    format_duration,
    format_size,
    progress_bar,
    step_line,
    step_text,
    transfer_rate,
)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (44.6, "45s"), (185, "3m05s"), (7620, "2h07m"), (3 * 86_400 + 4 * 3600, "3d04h"), (-3, "0s")],
)
def test_durations_read_like_a_clock(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_sizes_are_decimal() -> None:
    assert [format_size(n) for n in (999, 1000, 2_500_000, 3_100_000_000)] == [
        "999 B",
        "1.0 kB",
        "2.5 MB",
        "3.1 GB",
    ]


def test_a_bar_fills_with_the_share_done() -> None:
    assert progress_bar(0, 1000, width=10) == "[..........]   0%  0 B / 1.0 kB"
    assert progress_bar(500, 1000, width=10) == "[#####.....]  50%  500 B / 1.0 kB"
    assert progress_bar(1000, 1000, width=10) == "[##########] 100%  1.0 kB / 1.0 kB"
    # More than announced (a shard that then fails its check) never overflows the bar.
    assert progress_bar(1500, 1000, width=10).startswith("[##########] 100%")
    assert progress_bar(1500, None) == "1.5 kB so far"


def test_a_bar_shows_the_rate_once_there_is_one() -> None:
    assert transfer_rate(3_000_000, 2.0) == 1_500_000
    assert transfer_rate(3_000_000, 0.0) is None  # no time has passed: no rate yet
    assert transfer_rate(0, 2.0) is None  # only the first batch so far
    assert progress_bar(500, 1000, width=10, rate=1_500_000) == "[#####.....]  50%  500 B / 1.0 kB  1.5 MB/s"
    assert progress_bar(1500, None, rate=250.0) == "1.5 kB so far  250 B/s"


def test_steps_are_counted_from_one_out_of_the_total() -> None:
    assert step_text(0, 100) == "step 1/100"
    assert step_text(99, 100) == "step 100/100"
    assert step_text(4, None) == "step 5/∞"


def test_eta_is_the_remaining_steps_at_the_measured_pace() -> None:
    # Steps 2..6 took 8 s: 2 s a step; after step 6 (the 7th) of 10, 3 remain.
    assert eta_seconds(StepMark(2, 100.0), StepMark(6, 108.0), 10) == pytest.approx(6.0)
    assert eta_seconds(StepMark(9, 100.0), StepMark(9, 100.0), 10) is None  # no pace yet
    assert eta_seconds(StepMark(2, 100.0), StepMark(6, 108.0), None) is None  # no last step
    assert eta_seconds(StepMark(0, 0.0), StepMark(12, 24.0), 10) == 0  # past the end: nothing left
    assert eta_text(6.0, 10) == "ETA 6s"
    assert eta_text(None, 10) == "ETA measuring…"
    assert eta_text(None, None).startswith("ETA none")


def test_the_clock_restarts_after_a_pause() -> None:
    clock = StepClock()
    assert clock.committed(0, 10.0, 100) is None
    assert clock.committed(1, 12.0, 100) == pytest.approx(98 * 2.0)
    clock.restart()  # an hour paused must not count as one slow step
    assert clock.committed(2, 3612.0, 100) is None
    assert clock.committed(3, 3613.0, 100) == pytest.approx(96 * 1.0)


def test_a_step_line_carries_step_total_eta_loss_and_part() -> None:
    line = step_line(
        step=6,
        max_steps=10,
        eta=6.0,
        loss=5.12345,
        stage=1,
        stage_rate=42.25,
        samples_done=96,
        retries=2,
        in_flight=4,
        kept_backwards="80%",
    )
    assert line.startswith("step 7/10  loss 5.1235  ETA 6s  stage 1 at 42.2 samples/s  trained 96 samples")
    assert "retries 2" in line and "in flight 4" in line and "kept backwards 80%" in line
    trainer_only = step_line(
        step=0,
        max_steps=None,
        eta=None,
        loss=None,
        stage=None,
        stage_rate=0.0,
        samples_done=0,
        retries=0,
        in_flight=1,
        kept_backwards="-",
    )
    assert trainer_only.startswith("step 1/∞  loss -  ETA none") and "training only" in trainer_only


def test_a_download_off_a_terminal_prints_each_quarter_once() -> None:
    out = io.StringIO()
    console = Console("lab-gpu", stream=out)
    bar = console.download("downloading dataset x", 100)
    for _ in range(10):
        bar.advance(10)
    bar.finish()
    lines = out.getvalue().splitlines()
    assert all(line.startswith("[lab-gpu] downloading dataset x [") for line in lines)
    assert [line.split("]")[2].split("%")[0].strip() for line in lines] == ["10", "30", "50", "80", "100"]
