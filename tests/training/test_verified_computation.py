"""Verified computation with real processes: peers faulty on purpose (`--fault`) are caught by spot
checks or the contribution check and banned, honest peers never are, and training goes on as if the
faulty peer had never been there.

Each swarm pins its peers to stages (`--stage`, rebalancing off) so that the faulty peer's stage has
three peers: a mismatch there has a referee.
"""

from __future__ import annotations

import statistics
from typing import Any

import pytest

from launch.local_swarm import LocalSwarm
from peer.spot_checks import tolerance
from tests.training.swarm_helpers import DEMO_RUN, WAIT_S, assert_books_balance

pytestmark = pytest.mark.slow

STEPS = 60
INT8 = {**DEMO_RUN, "target_batch_size": 64, "compression": "int8"}
TAIL = 15
"""Steps at the end whose mean loss is compared between runs."""


def _train(
    name: str, settings: dict[str, Any], placement: list[tuple[int, tuple[str, ...]]], steps: int
) -> dict[str, Any]:
    """Train `steps` steps with one peer per (stage, extra options) and return what the run recorded."""
    swarm = LocalSwarm(heartbeat_timeout_s=5)
    try:
        swarm.start()
        run = swarm.create_run(name=name, max_steps=steps, rebalance=False, **settings)
        run_id = run["id"]
        for stage, options in placement:
            swarm.start_peer("--stage", str(stage), *options)
        try:
            recorded = swarm.wait_for_steps(run_id, steps, timeout_s=WAIT_S)
        except (TimeoutError, RuntimeError) as exc:
            raise AssertionError(f"{exc}\n{swarm.logs()}") from None
        return {
            "steps": recorded,
            "events": swarm.events(run_id),
            "peers": swarm.peer_rows(run_id),
            "checks": swarm.metrics(run_id, "spot_check_calls"),
            "largest_agreeing": swarm.metrics(run_id, "spot_check_largest_agreeing"),
            "logs": swarm.logs(),
        }
    finally:
        swarm.stop()


def _faulty_events(result: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in result["events"] if e["kind"] == "peer_faulty"]


def _assert_no_false_positive(result: dict[str, Any]) -> float:
    """No mismatch, no ban; returns the largest discrepancy seen between two honest results."""
    kinds = {e["kind"] for e in result["events"]}
    assert not kinds & {"spot_check_mismatch", "peer_faulty", "peer_banned"}, result["logs"]
    assert sum(m["value"] for m in result["checks"]) > 0, "no spot check was made"
    largest = max(m["value"] for m in result["largest_agreeing"])
    assert largest < tolerance("int8")
    return largest


# Some peers compute with two threads: their float sums run in another order, so honest results
# differ in their last bits, as they would between machines, and the tolerance must absorb that.
TWO_THREADS = ("--threads", "2")
HONEST = [(0, ()), (0, TWO_THREADS), (0, ()), (1, TWO_THREADS), (1, ())]


@pytest.fixture(scope="module")
def honest() -> dict[str, Any]:
    """An honest run with every call checked: the strictest test of false positives, and, as checks
    never change what is trained (a check accumulates nothing), the loss baseline of a faulty run."""
    return _train("honest", {**INT8, "spot_check_fraction": 1.0}, HONEST, STEPS)


@pytest.mark.timeout(900)
def test_a_peer_corrupting_5_percent_of_its_outputs_is_caught_and_the_run_trains_as_an_honest_one(
    honest: dict[str, Any],
) -> None:
    largest = _assert_no_false_positive(honest)

    # Every call checked here too, so detection is quick enough to leave a tail of clean steps to
    # compare (bench/verification.py measures detection at the default's 1-5%).
    faulty_placement = [(0, ("--fault", "noise:0.05")), *HONEST[1:], (0, ())]
    faulty = _train("one faulty peer", {**INT8, "spot_check_fraction": 1.0}, faulty_placement, STEPS)
    banned = _faulty_events(faulty)
    assert len(banned) == 1, (banned, faulty["logs"])
    culprit = next(p for p in faulty["peers"] if p["id"] == banned[0]["peer_id"])
    assert culprit["name"] == "local-0" and culprit["state"] == "banned", culprit
    assert all(p["state"] != "banned" for p in faulty["peers"] if p["name"] != "local-0")
    assert banned[0]["data"]["finding"] in ("checked_faulty", "checker_faulty")
    caught_at = banned[0]["data"]["step"]
    print(f"caught at step {caught_at}; largest honest discrepancy {largest:.3g} of {tolerance('int8'):.3g}")
    assert caught_at < STEPS - TAIL, caught_at
    assert_books_balance(faulty["steps"], faulty["events"], DEMO_RUN["num_stages"])

    honest_tail = statistics.mean(s["loss"] for s in honest["steps"][-TAIL:])
    faulty_tail = statistics.mean(s["loss"] for s in faulty["steps"][-TAIL:])
    # Within noise: routing and int8 rounding differ between runs; a run still poisoned by the noise
    # would sit far above (the noise is as large as the activations themselves).
    assert abs(faulty_tail - honest_tail) < 0.1 * honest_tail, (faulty_tail, honest_tail)


@pytest.mark.timeout(600)
def test_no_honest_peer_is_banned_across_repeated_int8_runs(honest: dict[str, Any]) -> None:
    # The baseline run above and a second one: routing, thread counts' summing order and int8
    # rounding differ from run to run.
    again = _train("honest again", {**INT8, "spot_check_fraction": 1.0}, HONEST, 25)
    largest = [_assert_no_false_positive(run) for run in (honest, again)]
    print(f"largest honest discrepancies {largest} (tolerance {tolerance('int8'):.3g})")


@pytest.mark.timeout(600)
def test_stale_weights_and_a_scaled_gradient_are_caught() -> None:
    placement = [
        (0, ("--fault", "stale")),
        (0, ()),
        (0, ()),
        (1, ("--fault", "scale:50")),
        (1, ()),
        (1, ()),
    ]
    result = _train("stale and scaled", {**INT8, "spot_check_fraction": 0.5}, placement, 40)
    banned = {e["peer_id"]: e for e in _faulty_events(result)}
    names = {p["id"]: p["name"] for p in result["peers"]}
    findings = {names[peer_id]: event["data"]["finding"] for peer_id, event in banned.items()}
    assert findings.keys() == {"local-0", "local-3"}, (findings, result["logs"])
    assert findings["local-0"] in ("checked_faulty", "checker_faulty")
    assert findings["local-3"] == "out_of_proportion"
    assert_books_balance(result["steps"], result["events"], DEMO_RUN["num_stages"])


@pytest.mark.timeout(600)
def test_a_stage_of_two_is_settled_once_the_owners_trusted_verifier_peer_is_brought_to_it() -> None:
    """Stage 0 has only the faulty peer and one honest one: no third peer to referee. The owner's
    verifier peer (its own token) serves stage 1 and is brought to stage 0, copying the stage from
    both parties (their weights agree: the noise is in the outputs), and the faulty peer is banned.
    The verdict that bans it is the verifier's own (the first mismatch), or comes from a later
    mismatch between the faulty peer and the verifier, refereed by the honest party: either way only
    with the verifier on the stage."""
    swarm = LocalSwarm(heartbeat_timeout_s=5)
    try:
        swarm.start()
        run = swarm.create_run(
            name="two on a stage", max_steps=50, rebalance=False, **{**INT8, "spot_check_fraction": 1.0}
        )
        run_id = run["id"]
        verifier_token = swarm.issue_token(run_id, label="my own machine", verifier=True)["token"]
        swarm.start_peer("--stage", "0", "--fault", "noise:0.05")
        swarm.start_peer("--stage", "0")
        swarm.start_peer("--stage", "1")
        swarm.start_peer("--stage", "1")
        swarm.start_peer("--stage", "1", token=verifier_token)
        try:
            steps = swarm.wait_for_steps(run_id, 50, timeout_s=WAIT_S)
        except (TimeoutError, RuntimeError) as exc:
            raise AssertionError(f"{exc}\n{swarm.logs()}") from None
        events = swarm.events(run_id)
        peers = {p["name"]: p for p in swarm.peer_rows(run_id)}
        logs = swarm.logs()
    finally:
        swarm.stop()
    assert peers["local-4"]["trusted"] and not peers["local-0"]["trusted"]
    recruited = [e for e in events if e["kind"] == "spot_check_referee"]
    banned = [e for e in events if e["kind"] == "peer_faulty"]
    assert recruited and recruited[0]["peer_id"] == peers["local-4"]["id"], (recruited, logs)
    assert len(banned) == 1 and banned[0]["peer_id"] == peers["local-0"]["id"], (banned, logs)
    verdict = banned[0]["data"]
    assert peers["local-4"]["id"] in (verdict["referee"], verdict["checked"], verdict["checker"]), verdict
    assert peers["local-0"]["id"] in (verdict["checked"], verdict["checker"]), verdict
    assert recruited[0]["id"] < banned[0]["id"]
    assert peers["local-4"]["stage"] == 0 and peers["local-4"]["state"] != "banned"
    assert_books_balance(steps, events, DEMO_RUN["num_stages"])


@pytest.mark.timeout(600)
def test_a_peer_sending_a_wrong_sum_of_its_butterfly_part_is_banned_by_the_part_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Stage 0's three peers average in a butterfly (the threshold lowered to 3); one of them sends
    everyone three times the sum of its part (`--fault part:3`). The members agree on what they
    hold, so only the part check tells: it is banned, and no honest peer is."""
    monkeypatch.setenv("SWARMHUB_BUTTERFLY_FROM_MEMBERS", "3")
    placement = [(0, ("--fault", "part:3")), (0, ()), (0, ()), (1, ()), (1, ())]
    result = _train("wrong part", {**INT8, "spot_check_fraction": 0.0}, placement, 10)
    banned = {e["peer_id"]: e for e in _faulty_events(result)}
    names = {p["id"]: p["name"] for p in result["peers"]}
    findings = {names[peer_id]: event["data"]["finding"] for peer_id, event in banned.items()}
    assert findings == {"local-0": "part_sum"}, (findings, result["logs"])
    assert_books_balance(result["steps"], result["events"], DEMO_RUN["num_stages"])
