"""The baseline SWARM is measured against: fixed pipelines, one peer per stage, that stop whenever a
member dies and restart from their last checkpoint once a replacement has loaded it.

The swarm's peers form `peers // num_stages` pipelines trained data-parallel, as SWARM's stages are:
each step every stage's replicas (one per pipeline) all-reduce their gradients before the update,
so the comparison is of the same training. Between all-reduces each pipeline trains at its slowest
member's rate on the stage it serves (members paired with stages fastest to heaviest), saves a
checkpoint after every `checkpoint_every_s` of training, and on a death loses what it trained since
then and resumes `restart_s` later: a replacement's arrival plus every member reloading its stage
from the checkpoint store. Still generous to the baseline: the step's batch is shared in proportion
to the pipelines' rates (none waits on a slower one's compute), a pipeline restarting is left out of
the all-reduce rather than stopping the others, and the all-reduce's cost is that of the pipelines
as they started. The books are those of `bench.ideal.fixed_pipeline_samples`, run member by member
so lifetimes and replacements can be drawn.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Sequence

from sim.averaging import ring_allreduce_s
from sim.devices import PeerKind, stage_rate
from sim.ideal import ideal_rate
from sim.results import RunReport, SeriesRow
from sim.scenario import Scenario
from sim.stages import StageModel
from sim.swarm import CHECKPOINT_STORE_RATE
from swarmhub.stage_cost import CODEC_BYTES_PER_ELEMENT


def placement(kinds: Sequence[PeerKind], model: StageModel) -> list[PeerKind]:
    """Each stage's member in one pipeline: the fastest member on the heaviest stage, and so on down."""
    members = sorted(kinds, key=lambda k: -k.flops)
    stages = sorted(range(model.num_stages), key=lambda s: -model.flops[s])
    by_stage = dict(zip(stages, members, strict=True))
    return [by_stage[s] for s in range(model.num_stages)]


def pipeline_rate(kinds: Sequence[PeerKind], model: StageModel) -> float:
    """Samples/s of one pipeline between all-reduces: its slowest member on the stage it serves."""
    return min(
        stage_rate(kind, model.flops[s], model.bytes_per_sample[s])
        for s, kind in enumerate(placement(kinds, model))
    )


def allreduce_s(pipelines: Sequence[Sequence[PeerKind]], model: StageModel, compression: str) -> float:
    """Seconds a step's averaging takes: every stage's replicas ring-all-reduce its gradients (in the
    run's codec, as SWARM's members exchange theirs), the stages at once, each member over its own
    upload, and the step waits for the slowest stage. A ring is what a data-parallel setup of fixed
    pipelines would use: each member moves 2(K-1)/K of the gradients, however many replicas."""
    if len(pipelines) < 2:
        return 0.0
    placed = [placement(kinds, model) for kinds in pipelines]
    return max(
        ring_allreduce_s(
            model.gradient_bytes[s] / 4 * CODEC_BYTES_PER_ELEMENT[compression],
            [members[s].upload for members in placed],
            max(members[s].latency_s for members in placed),
        )
        for s in range(model.num_stages)
    )


def averaged_share(pipelines: Sequence[Sequence[PeerKind]], model: StageModel, sc: Scenario) -> float:
    """The share of a step the pipelines train rather than all-reduce: a step of the target batch,
    shared among the pipelines in proportion to their rates, then its averaging."""
    train = sc.target_batch_size / sum(pipeline_rate(kinds, model) for kinds in pipelines)
    return train / (train + allreduce_s(pipelines, model, sc.compression))


def restart_s(sc: Scenario, kinds: Sequence[PeerKind], model: StageModel) -> float:
    """A replacement's arrival, then the slowest member's reload of its stage from the checkpoint."""
    members = sorted(kinds, key=lambda k: -k.flops)
    stages = sorted(range(model.num_stages), key=lambda s: -model.flops[s])
    load = max(
        model.state_bytes[s] / min(kind.bandwidth, CHECKPOINT_STORE_RATE)
        for kind, s in zip(members, stages, strict=True)
    )
    return sc.replacement_s + load


def simulate_fixed(sc: Scenario) -> RunReport:
    started = time.perf_counter()
    model = sc.stage_model()
    rng = random.Random(sc.seed)
    S = sc.num_stages
    initial = list(sc.kinds) if sc.kinds else [sc.mix.draw(rng) for _ in range(sc.peers)]
    pipelines = max(1, len(initial) // S)
    if len(initial) < S:
        raise ValueError(f"{len(initial)} peers cannot form a pipeline of {S} stages")
    credits: list[tuple[float, float]] = []
    """(time, samples) kept: at each checkpoint, and at the end of the run."""
    lost = 0.0
    restarts = 0
    share = averaged_share([initial[i * S : (i + 1) * S] for i in range(pipelines)], model, sc)
    for index in range(pipelines):
        kinds = initial[index * S : (index + 1) * S]
        deaths = [
            sc.duration_s + 1.0 if sc.mean_lifetime_s is None else rng.expovariate(1.0 / sc.mean_lifetime_s)
            for _ in kinds
        ]
        for when, peer in sc.deaths:
            if index * S <= peer < (index + 1) * S:
                deaths[peer - index * S] = min(deaths[peer - index * S], when)
        resume_at = 0.0
        while True:
            member = min(range(S), key=deaths.__getitem__)
            death = deaths[member]
            rate = share * pipeline_rate(kinds, model)
            end = min(death, sc.duration_s)
            trained = max(0.0, end - resume_at)
            checkpoints = math.floor(trained / sc.checkpoint_every_s) if death < sc.duration_s else 0
            for k in range(1, checkpoints + 1):
                credits.append((resume_at + k * sc.checkpoint_every_s, sc.checkpoint_every_s * rate))
            if death >= sc.duration_s:
                if trained > 0:
                    credits.append((sc.duration_s, trained * rate))
                break
            lost += (trained - checkpoints * sc.checkpoint_every_s) * rate
            restarts += 1
            kinds[member] = sc.mix.draw(rng)
            deaths[member] = (
                math.inf if sc.mean_lifetime_s is None else death + rng.expovariate(1.0 / sc.mean_lifetime_s)
            )
            resume_at = death + restart_s(sc, kinds, model)
    live: dict[PeerKind, int] = {}
    for kind in initial[: pipelines * S]:
        live[kind] = live.get(kind, 0) + 1
    ideal = ideal_rate(live, model.flops, model.bytes_per_sample)
    series: list[SeriesRow] = []
    t = 0.0
    while t < sc.duration_s - 1e-9:
        end = min(t + sc.sample_every_s, sc.duration_s)
        samples = sum(n for when, n in credits if t < when <= end or (t == 0.0 and when == 0.0))
        rate = samples / (end - t)
        series.append(
            SeriesRow(
                t=end,
                samples_per_s=rate,
                ideal_rate=ideal,
                fraction_of_ideal=rate / ideal if ideal else 0.0,
                live_peers=pipelines * S,
                moves=0,
                step=0,
            )
        )
        t = end
    kept = sum(n for _, n in credits)
    return RunReport(
        scenario=sc.name,
        mode="fixed",
        duration_s=sc.duration_s,
        wall_s=time.perf_counter() - started,
        events=restarts,
        restarts=restarts,
        samples_completed=round(kept + lost),
        samples_committed=round(kept),
        samples_lost=round(lost),
        steps=0,
        retries=0,
        microbatches_failed=0,
        ideal_rate_mean=ideal,
        series=series,
    )
