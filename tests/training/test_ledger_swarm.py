"""The contribution ledger of a real training run (`swarmhub serve` and `swarmhub-peer join`
processes), on SQLite and PostgreSQL, across a coordinator restart: what the peers are credited adds
up to the samples the run counted, the CSV export says the same, and each peer's printed link opens
its participant's own view."""

from __future__ import annotations

import csv
import io
import re

import httpx
import pytest

from launch.local_swarm import LocalSwarm
from tests.training.swarm_helpers import DEMO_RUN, WAIT_S, assert_books_balance, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

STEPS = 6
RESTART_AFTER = 3
LINK = re.compile(r"what this peer contributes, live: (\S+)/#/contribution/([A-Za-z0-9_-]+)")


def test_the_ledger_adds_up_to_the_runs_counted_samples_across_a_restart(database_url: str) -> None:
    with LocalSwarm(database_url=database_url) as swarm:
        run = swarm.create_run(name="ledger", max_steps=STEPS, rebalance=False, **DEMO_RUN)
        run_id = run["id"]
        second = swarm.issue_token(run_id, label="second participant")["token"]
        swarm.start_peer("--stage", "0")
        swarm.start_peer("--stage", "1", token=second)
        try:
            swarm.wait_for_steps(run_id, RESTART_AFTER, timeout_s=WAIT_S)
            # The totals live in the database: a restarted coordinator adds to them.
            swarm.stop_coordinator()
            swarm.start_coordinator()
            wait_until(
                "the run to finish",
                lambda: swarm.run_detail(run_id)["status"] == "finished",
                WAIT_S,
            )
        except (TimeoutError, RuntimeError) as exc:
            raise AssertionError(f"{exc}\n{swarm.logs()}") from None
        steps = swarm.steps(run_id)
        events = swarm.events(run_id)
        ledger = swarm.client.get(f"/api/runs/{run_id}/ledger").json()
        exported = swarm.client.get(f"/api/runs/{run_id}/ledger.csv").text
        links = [LINK.search(p.log()) for p in swarm.peers]
        assert all(links), swarm.logs()
        own = [httpx.get(f"{swarm.url}/api/contributions/{link[2]}").json() for link in links if link]

    assert len(steps) == STEPS
    assert_books_balance(steps, events, DEMO_RUN["num_stages"])
    counted = sum(min(s["samples_counted"]) for s in steps)
    assert counted == STEPS * DEMO_RUN["target_batch_size"]

    # Every sample the run counted is credited to the trainer that drove it, once.
    peers = ledger["peers"]
    assert ledger["samples_counted"] == counted
    assert sum(p["samples_trained"] for p in peers) == counted
    assert len(peers) == 2
    for p in peers:
        # Both peers trained; each stage call is credited at most once per microbatch and pass.
        assert p["samples_trained"] > 0, p
        assert p["samples_served"] <= 2 * counted, p
        assert p["bytes_moved"] > 0 and p["uptime_s"] > 0 and p["steps"] >= 1, p
    # Each serving peer's claims (its running totals, sent ahead of each averaging report) meet the
    # trainers' receipts before the step is recorded, so serving is credited step by step, the last
    # step included; only a step in flight at the restart may go uncredited. Each peer served its
    # stage's forward and backward for every counted sample (2 x counted).
    for p in peers:
        assert p["calls_served"] > 0 and p["compute_s"] > 0, p
        assert p["samples_served"] >= counted, (p, counted)
    assert {p["participant"] for p in peers} == {"local", "second participant"}
    for participant in ledger["participants"]:
        mine = [p for p in peers if p["participant_id"] == participant["participant_id"]]
        assert participant["samples_trained"] == sum(p["samples_trained"] for p in mine)

    rows = list(csv.DictReader(io.StringIO(exported)))
    assert sorted(int(r["peer_id"]) for r in rows) == sorted(p["peer_id"] for p in peers)
    assert sum(int(r["samples_trained"]) for r in rows) == counted

    # The link each peer printed names the coordinator and opens that peer's own figures.
    assert {link[1] for link in links if link} == {swarm.url}
    assert sorted(o["peer"]["peer_id"] for o in own) == sorted(p["peer_id"] for p in peers)
    assert all(o["run_samples_counted"] == counted and o["participants"] == 2 for o in own)
