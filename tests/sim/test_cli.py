"""`python -m sim run`: the command-line options reach the scenario it simulates."""

from __future__ import annotations

import json

import pytest

from sim.cli import main


def _run(capsys: pytest.CaptureFixture[str], *options: str) -> dict:
    assert main(["run", "small-homogeneous", "--duration", "60", "--full", *options]) == 0
    (report,) = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    return report


def test_bundle_sets_the_microbatches_one_simulated_call_carries(capsys: pytest.CaptureFixture[str]) -> None:
    single = _run(capsys, "--bundle", "1")
    bundled = _run(capsys, "--bundle", "4")
    # Four microbatches a call: about a quarter of the calls, so far fewer events, the same work.
    assert bundled["events"] < single["events"] / 2
    assert bundled["samples_completed"] > 0 and single["samples_completed"] > 0
