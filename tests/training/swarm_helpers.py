"""Helpers for the multi-process training tests: a real coordinator and real peers over loopback."""

from __future__ import annotations

import time
from typing import Any

# The demo's defaults (`swarmhub demo`): tiny preset, 2 stages, batch 32 in microbatches of 8, seq 64.
DEMO_RUN: dict[str, Any] = {
    "model_preset": "tiny",
    "num_stages": 2,
    "target_batch_size": 32,
    "microbatch_size": 8,
    "seq_len": 64,
}
# Generous: these are upper bounds for a stuck swarm on a loaded machine, never asserted as speed.
WAIT_S = 240.0


def wait_until(what: str, predicate: Any, timeout_s: float = 60.0, interval_s: float = 0.3) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up waiting for {what}")
        time.sleep(interval_s)


def assert_books_balance(steps: list[dict[str, Any]], events: list[dict[str, Any]], num_stages: int) -> None:
    """For every step and every stage: samples counted + samples recorded lost == samples sent.

    The step row keeps each stage's count and the largest per-stage loss; a 'samples_lost' event
    keeps the loss of every stage, so both are checked against each other."""
    lost_events: dict[int, dict[str, int]] = {}
    for event in events:
        if event["kind"] == "samples_lost":
            step = event["data"]["step"]
            assert step not in lost_events, f"two samples_lost events for step {step}"
            lost_events[step] = event["data"]["lost"]
            assert event["data"]["sent"] == next(s["samples_sent"] for s in steps if s["step"] == step)
    assert [s["step"] for s in steps] == list(range(len(steps))), "steps must commit in order, none skipped"
    for row in steps:
        sent, counted = row["samples_sent"], row["samples_counted"]
        assert len(counted) == num_stages, row
        assert sent >= DEMO_RUN["target_batch_size"], row
        lost = {int(k): v for k, v in lost_events.get(row["step"], {}).items()}
        assert set(lost) <= set(range(num_stages)), row
        for stage in range(num_stages):
            assert 0 <= counted[stage] <= sent, row
            assert counted[stage] + lost.get(stage, 0) == sent, (row, lost)
        assert row["samples_lost"] == max(lost.values(), default=0), (row, lost)
