"""GET /api/presets/{name}/estimate: the memory a run's stages ask of their peers, from the same
formulas a joining peer checks its free memory with (swarmhub/resources.py)."""

from __future__ import annotations

from swarmhub.presets import PRESETS
from swarmhub.resources import estimate_memory, stage_parameters

SHAPE = {"num_stages": 4, "microbatch_size": 8, "seq_len": 128, "optimizer": "adamw"}


def test_each_stage_is_estimated_and_any_stage_is_what_a_peer_checks(client):
    response = client.get("/api/presets/swarm-ref/estimate", params=SHAPE)  # no credentials
    assert response.status_code == 200, response.text
    body = response.json()
    preset = PRESETS["swarm-ref"]
    stages = body["stages"]
    assert [s["stage"] for s in stages] == [0, 1, 2, 3]
    assert [s["parameter_count"] for s in stages] == [stage_parameters(preset, 4, s) for s in range(4)]
    assert sum(s["parameter_count"] for s in stages) == preset.parameter_count
    for stage in stages:
        memory = stage["memory"]
        assert memory["total"] == sum(
            memory[k] for k in ("parameters", "optimizer", "gradients", "activations")
        )
    # The vocabulary head and its logits make the last stage the heaviest (the reason for the preset).
    totals = [s["memory"]["total"] for s in stages]
    assert totals[3] == max(totals) and totals[3] > 2 * totals[1]
    expected = estimate_memory(preset, num_stages=4, microbatch_size=8, seq_len=128, optimizer="adamw")
    assert body["any_stage"]["total"] == expected.total >= max(totals)


def test_sgd_keeps_one_moment_and_a_longer_sequence_more_activations(client):
    adamw = client.get("/api/presets/tiny/estimate", params=SHAPE | {"num_stages": 2}).json()
    sgd = client.get(
        "/api/presets/tiny/estimate", params=SHAPE | {"num_stages": 2, "optimizer": "sgd"}
    ).json()
    assert sgd["stages"][0]["memory"]["optimizer"] * 2 == adamw["stages"][0]["memory"]["optimizer"]
    longer = client.get("/api/presets/tiny/estimate", params=SHAPE | {"num_stages": 2, "seq_len": 256}).json()
    assert longer["stages"][0]["memory"]["activations"] > adamw["stages"][0]["memory"]["activations"]


def test_shapes_the_run_could_not_have_are_refused_in_the_forms_words(client):
    too_many = client.get("/api/presets/tiny/estimate", params=SHAPE | {"num_stages": 5})
    assert too_many.status_code == 422
    assert too_many.json()["detail"] == "Must be at most 4: preset 'tiny' has 4 blocks."
    too_long = client.get("/api/presets/tiny/estimate", params=SHAPE | {"seq_len": 512})
    assert too_long.json()["detail"] == "Must be at most 256 for preset 'tiny'."
    unknown = client.get("/api/presets/gigantic/estimate", params=SHAPE)
    assert unknown.status_code == 404 and unknown.json()["detail"].startswith("Unknown preset 'gigantic'")
    assert client.get("/api/presets/tiny/estimate", params=SHAPE | {"num_stages": 0}).status_code == 422
