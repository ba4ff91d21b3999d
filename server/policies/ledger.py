"""What each peer is credited with for one committed step: the contribution ledger's arithmetic.

Pure: the run's machine gathers a step's figures and `credit_step` returns each peer's credit,
which the shell adds to that peer's running totals in the step's own transaction (a step recorded
twice is written once, so nothing is credited twice).

What is credited, and on whose word:
- samples trained: a trainer is credited the samples of each microbatch it drove that every stage
  counted, by the coordinator's own books (the averaging reports), never by what the trainer says.
  Over a run the peers' samples add up to the samples every stage counted.
- calls served, samples served, compute time: a serving peer's own claims (running totals in its
  heartbeats) capped by what trainers report having received from it (each finished microbatch
  lists its stage calls: who served them, how long the trainer waited, the compute the reply
  named). A serving peer sends its totals as a heartbeat ahead of each averaging report, so a step's
  claims are in before it is recorded; whatever is still unmatched (a receipt whose claim comes in a
  later heartbeat) is kept, and over a run a peer is credited the lesser of all it claimed and all
  trainers received from it (while the coordinator runs; a restarted one starts matching afresh and
  never credits more).
- bytes moved: the data-plane bytes a trainer reported for its finished microbatches.
- uptime: seconds the peer was connected within the step's window.
- failures: microbatches granted to a trainer that it did not finish (a peer lost is added where its
  departure is recorded).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from swarmhub.wire import ServedCall


@dataclass(frozen=True, kw_only=True)
class Tally:
    """Serving figures: stage calls, their samples, compute seconds."""

    calls: int = 0
    samples: int = 0
    compute_s: float = 0.0

    def __add__(self, other: Tally) -> Tally:
        return Tally(
            calls=self.calls + other.calls,
            samples=self.samples + other.samples,
            compute_s=self.compute_s + other.compute_s,
        )

    def __sub__(self, other: Tally) -> Tally:
        return Tally(
            calls=self.calls - other.calls,
            samples=self.samples - other.samples,
            compute_s=self.compute_s - other.compute_s,
        )


@dataclass(frozen=True, kw_only=True)
class Pending:
    """A serving peer's figures not matched yet: what it claimed, what trainers received from it."""

    claimed: Tally = Tally()
    """From its heartbeats (which count no calls: `calls` stays 0)."""
    received: Tally = Tally()

    def claim(self, more: Tally) -> Pending:
        return Pending(claimed=self.claimed + more, received=self.received)


@dataclass(frozen=True, kw_only=True)
class FinishedMicrobatch:
    microbatch_id: str
    trainer_id: int
    samples: int
    bytes_moved: int
    served: tuple[ServedCall, ...] = ()


@dataclass(frozen=True, kw_only=True)
class PeerCredit:
    peer_id: int
    samples_trained: int = 0
    calls_served: int = 0
    samples_served: int = 0
    compute_s: float = 0.0
    bytes_moved: int = 0
    uptime_s: float = 0.0
    failures: int = 0


@dataclass(frozen=True, kw_only=True)
class StepCredits:
    credits: tuple[PeerCredit, ...]
    """One per peer with anything to its name this step, by peer id."""
    pending: dict[int, Pending] = field(default_factory=dict)
    """Each serving peer's figures left unmatched, carried into the next step."""


def counted_everywhere(microbatch_id: str, counted_per_stage: Sequence[Collection[str]]) -> bool:
    return bool(counted_per_stage) and all(microbatch_id in ids for ids in counted_per_stage)


def match(pending: Pending) -> tuple[Tally, Pending]:
    """What is credited of a peer's pending figures (the lesser side of each), and what stays pending.
    Calls, which only receipts count, in the proportion of their samples that is credited."""
    claimed, received = pending.claimed, pending.received
    samples = min(claimed.samples, received.samples)
    calls = received.calls * samples // received.samples if received.samples else 0
    credit = Tally(calls=calls, samples=samples, compute_s=min(claimed.compute_s, received.compute_s))
    left = Pending(
        claimed=Tally(samples=claimed.samples - samples, compute_s=claimed.compute_s - credit.compute_s),
        received=received - credit,
    )
    return credit, left


def credit_step(
    *,
    finished: Sequence[FinishedMicrobatch],
    counted_per_stage: Sequence[Collection[str]],
    failed_by_trainer: Mapping[int, int],
    pending: Mapping[int, Pending],
    uptime_s: Mapping[int, float],
) -> StepCredits:
    """Each peer's credit for one step.

    `counted_per_stage[s]`: the microbatch ids stage s averaged; `pending`: each serving peer's
    unmatched figures, this step's heartbeat claims included (this step's receipts are added here);
    `uptime_s`: seconds each peer was connected within the step's window."""
    trained: dict[int, int] = {}
    moved: dict[int, int] = {}
    pools = dict(pending)
    for mb in finished:
        moved[mb.trainer_id] = moved.get(mb.trainer_id, 0) + mb.bytes_moved
        if counted_everywhere(mb.microbatch_id, counted_per_stage):
            trained[mb.trainer_id] = trained.get(mb.trainer_id, 0) + mb.samples
        for call in mb.served:
            pool = pools.get(call.peer_id, Pending())
            # The reply names the compute; the trainer's wait for it bounds it.
            got = Tally(calls=1, samples=call.samples, compute_s=min(call.compute_seconds, call.seconds))
            pools[call.peer_id] = Pending(claimed=pool.claimed, received=pool.received + got)

    served: dict[int, Tally] = {}
    left: dict[int, Pending] = {}
    for peer_id in sorted(pools):
        served[peer_id], left[peer_id] = match(pools[peer_id])

    credits = []
    for peer_id in sorted(set(trained) | set(moved) | set(failed_by_trainer) | set(uptime_s) | set(served)):
        tally = served.get(peer_id, Tally())
        credit = PeerCredit(
            peer_id=peer_id,
            samples_trained=trained.get(peer_id, 0),
            calls_served=tally.calls,
            samples_served=tally.samples,
            compute_s=tally.compute_s,
            bytes_moved=moved.get(peer_id, 0),
            uptime_s=max(0.0, uptime_s.get(peer_id, 0.0)),
            failures=failed_by_trainer.get(peer_id, 0),
        )
        if credit != PeerCredit(peer_id=peer_id):
            credits.append(credit)
    return StepCredits(credits=tuple(credits), pending=left)


def claim_since(before: Tally | None, samples_total: int, compute_total_s: float) -> tuple[Tally, Tally]:
    """A heartbeat's new claim over the peer's previous running totals, and the totals to remember.

    Totals that went down mean the peer process started again: its totals began afresh."""
    now = Tally(samples=samples_total, compute_s=compute_total_s)
    if before is None or samples_total < before.samples or compute_total_s < before.compute_s:
        before = Tally()
    return now - before, now
