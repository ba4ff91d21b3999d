"""The heartbeat interval is the coordinator's setting: peers are told it when they connect, and a
timeout too short for it is refused at start-up."""

from __future__ import annotations

import dataclasses

import pytest
from pydantic import ValidationError

from swarmhub.settings import ServerSettings
from swarmhub.wire import Welcome
from tests.server.test_run_machine import new_swarm, sent


def test_a_joining_peer_is_told_the_configured_interval() -> None:
    swarm = new_swarm()
    swarm.machine.settings = dataclasses.replace(swarm.machine.settings, heartbeat_interval_s=5.0)
    (welcome,) = sent(swarm.join(1), 1, Welcome)
    assert welcome.heartbeat_interval_s == 5.0


def test_the_default_is_one_second() -> None:
    (welcome,) = sent(new_swarm().join(1), 1, Welcome)
    assert welcome.heartbeat_interval_s == 1.0 == ServerSettings().heartbeat_interval_s


def test_a_timeout_under_three_intervals_is_refused() -> None:
    with pytest.raises(ValidationError, match="at least three heartbeat intervals"):
        ServerSettings(heartbeat_interval_s=10.0, heartbeat_timeout_s=15.0)
    assert ServerSettings(heartbeat_interval_s=5.0, heartbeat_timeout_s=15.0).heartbeat_interval_s == 5.0


def test_an_older_welcome_without_the_field_means_one_second() -> None:
    welcome = Welcome.model_validate(
        {"peer_id": 1, "run": new_swarm().machine.spec, "step": 0, "data_key": "k"}
    )
    assert welcome.heartbeat_interval_s == 1.0
