"""`python -m sim run`: the command-line options reach the scenario it simulates."""

from __future__ import annotations

import json

import pytest

from sim.cli import main
from sim.scenario import SCENARIOS


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


def test_a_run_row_says_which_bundle_it_simulated(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "small-homogeneous", "--duration", "60", "--bundle", "3"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    (row,) = json.loads(out[-1])
    assert row["bundle"] == 3
    assert "bundle" in out[0].split()


def test_the_list_names_each_scenarios_bundle(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list"]) == 0
    lines = {line.split(":")[0]: line for line in capsys.readouterr().out.strip().splitlines()}
    assert lines["scale-10k"].endswith(f"calls of {SCENARIOS['scale-10k'].bundle} microbatch(es)")
    assert lines["churn-100"].endswith("calls of 1 microbatch(es)")
