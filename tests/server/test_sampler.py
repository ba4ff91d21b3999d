"""The coordinator's sampler: one subprocess at a time, results read from the file it leaves."""

from __future__ import annotations

from peer.sampling import generate
from server.checkpoints.sampler import Sampler
from server.checkpoints.store import CheckpointStore
from tests.stored_model import perturbed_model, write_stored_checkpoint


def test_one_sampler_runs_at_a_time_and_the_other_starts_when_asked_again(tmp_path):
    model = perturbed_model("tiny", num_stages=1, seed=2)
    for step in (30, 31):
        write_stored_checkpoint(tmp_path, 7, step, model, "tiny")
    sampler = Sampler(CheckpointStore(tmp_path))

    assert sampler.samples(7, 30).status == "generating"
    assert sampler.samples(7, 31).status == "generating"
    assert list(sampler._running) == [(7, 30)]  # step 31 waits for step 30's sampler
    sampler.wait()
    assert sampler.samples(7, 30).status == "ready"
    assert sampler.samples(7, 31).status == "generating"
    sampler.wait()
    ready = sampler.samples(7, 31)
    assert ready.status == "ready" and ready.samples is not None and ready.samples.step == 31
    first = ready.samples.samples[0]
    assert first.text == generate(model, first.prompt.encode()).decode(errors="replace")
    # A new sampler (a restarted coordinator) serves the stored file without starting a process.
    again = Sampler(CheckpointStore(tmp_path))
    assert again.samples(7, 31) == ready and not again._running
