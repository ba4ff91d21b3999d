"""fitting_bundle: the bundled calls of the simulator's large scenarios fit within the call timeout."""

from __future__ import annotations

import dataclasses

from sim.devices import LINKS, DeviceMix
from sim.scenario import SCENARIOS, fitting_bundle

SCALE = SCENARIOS["scale-10k"]


def test_the_scale_scenario_bundles_what_a_broadband_link_carries_in_half_the_timeout() -> None:
    model = SCALE.stage_model()
    # The heaviest call: a middle stage's bytes per sample over broadband, the slowest link in the mix.
    per_microbatch = SCALE.microbatch_size * max(model.bytes_per_sample) / LINKS["broadband"].bandwidth
    half = SCALE.call_timeout_s / 2
    assert SCALE.bundle == fitting_bundle(SCALE) == 4
    assert SCALE.bundle * per_microbatch < half < (SCALE.bundle + 1) * per_microbatch


def test_faster_links_or_a_longer_timeout_bundle_more_up_to_the_cap() -> None:
    datacenter = dataclasses.replace(SCALE, mix=DeviceMix(devices={"t4": 1.0}, links={"datacenter": 1.0}))
    assert SCALE.bundle < fitting_bundle(datacenter) <= 16
    assert (
        fitting_bundle(dataclasses.replace(SCALE, call_timeout_s=2 * SCALE.call_timeout_s))
        >= 2 * SCALE.bundle
    )
    assert fitting_bundle(datacenter, most=6) == 6


def test_a_link_that_cannot_carry_one_microbatch_in_time_still_sends_one() -> None:
    slow = dataclasses.replace(SCALE, mix=DeviceMix(devices={"cpu": 1.0}, links={"slow": 1.0}))
    assert fitting_bundle(slow) == 1
