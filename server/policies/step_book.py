"""Batch accounting for one global step: which microbatches were sent, finished, failed, counted.

The coordinator grants microbatches (a range of global sample indices each) until the step has
enough finished samples for the run's target batch size. Nothing here does I/O; the coordinator
feeds events in and acts on what comes back.

The books balance per stage: for every step, samples counted on a stage (gradients that stage's
peers actually accumulated and averaged) plus samples lost on that stage equal samples sent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from swarmhub.wire import ServedCall


@dataclass(frozen=True, kw_only=True)
class Grant:
    microbatch_id: str
    trainer_id: int
    first_sample: int
    samples: int


@dataclass(frozen=True, kw_only=True)
class StageTally:
    counted: int
    lost: int


@dataclass(frozen=True, kw_only=True)
class StepSummary:
    step: int
    loss: float | None
    samples_sent: int
    samples_done: int
    stage_tallies: list[StageTally]

    @property
    def samples_lost(self) -> int:
        return max((t.lost for t in self.stage_tallies), default=0)


TAPER_FROM_MICROBATCHES = 4
"""Steps of at least this many full microbatches start and end with smaller ones; shorter steps would
pay more in extra calls than the fill and drain cost them."""


def grant_size(missing: int, microbatch_size: int, target_batch_size: int, *, first: bool = False) -> int:
    """Samples in the next microbatch when `missing` are still to be granted this step (`first`: the
    step has granted nothing yet).

    A step opens with a quarter-size microbatch, goes on with full ones, and ends halving (4, 2, 1, 1).
    Every stage but the first waits at a step's start until the first microbatch has come through
    the stages before it (the fill), and every stage but the last waits at its end while the last
    microbatch goes through the rest (the drain), so both last as long as those microbatches are
    big. Smaller ones shorten them (the same samples, the same step) at the cost of a few more
    calls. The last one is cut short so the step holds exactly the target.
    """
    if missing <= 0 or microbatch_size <= 0:
        raise ValueError("a grant needs samples missing and a positive microbatch size")
    if target_batch_size < TAPER_FROM_MICROBATCHES * microbatch_size:
        return min(missing, microbatch_size)
    if first:
        return min(missing, max(1, microbatch_size // 4))
    if missing > microbatch_size:
        return microbatch_size
    return (missing + 1) // 2


@dataclass(kw_only=True)
class StepBook:
    """One step's microbatches. `next_sample` is the run's data cursor and carries to the next step."""

    step: int
    target_batch_size: int
    microbatch_size: int
    next_sample: int
    nonce: str = ""
    """Part of every microbatch id, so a book reopened for the same step never reuses an id."""
    outstanding: dict[str, Grant] = field(default_factory=dict, init=False)
    done: dict[str, Grant] = field(default_factory=dict, init=False)
    failed: dict[str, Grant] = field(default_factory=dict, init=False)
    """The step's microbatches by state; changed only through `grant`, `complete` and `fail`, which
    keep the running totals below with them."""
    losses: dict[str, float] = field(default_factory=dict)
    wire_bytes: int = 0
    """Data-plane bytes reported with finished microbatches."""
    retries: int = 0
    """Stage calls retried on another peer, over the finished microbatches."""
    check_calls: int = 0
    check_bytes: int = 0
    check_seconds: float = 0.0
    """Spot checks trainers made while this step was open: second calls, their bytes and wall time."""
    check_largest_agreeing: float = 0.0
    """The largest discrepancy any trainer has seen between two results that agreed (so far)."""
    served_compute: dict[int, float] = field(default_factory=dict)
    """Serving peer id -> seconds it spent computing the finished microbatches' stage calls."""
    served_network: dict[int, float] = field(default_factory=dict)
    """Serving peer id -> seconds its finished microbatches' stage calls spent on the network (the
    trainers' waits less the time inside the serving peer)."""
    reports: dict[str, tuple[int, tuple[ServedCall, ...]]] = field(default_factory=dict)
    """Finished microbatch id -> the bytes its trainer moved for it and the stage calls it lists
    (what the contribution ledger credits, `server/policies/ledger.py`)."""
    cache_hits: int = 0
    cache_misses: int = 0
    """Backward calls served from a kept forward activation, and those that found it gone."""
    _sequence: int = 0
    # Running totals and each trainer's outstanding ids: a step of M microbatches asks for the
    # samples missing at every grant and completion, and summing the dicts each time made a step
    # cost O(M^2) (10,000 trainers, thousands of microbatches a step).
    _done_samples: int = field(default=0, init=False, repr=False)
    _outstanding_samples: int = field(default=0, init=False, repr=False)
    _failed_samples: int = field(default=0, init=False, repr=False)
    _by_trainer: dict[int, dict[str, None]] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.target_batch_size < 1 or self.microbatch_size < 1:
            raise ValueError("target batch size and microbatch size must be positive")

    @property
    def samples_done(self) -> int:
        return self._done_samples

    @property
    def samples_outstanding(self) -> int:
        return self._outstanding_samples

    @property
    def samples_sent(self) -> int:
        return self._done_samples + self._outstanding_samples + self._failed_samples

    def grant(self, trainer_id: int) -> Grant | None:
        """A new microbatch for `trainer_id`, or None when what is done or in flight already fills the step.

        The step's last microbatches are smaller (`grant_size`), so the step holds exactly the target.
        """
        missing = self.target_batch_size - self._done_samples - self._outstanding_samples
        if missing <= 0:
            return None
        samples = grant_size(missing, self.microbatch_size, self.target_batch_size, first=self._sequence == 0)
        grant = Grant(
            microbatch_id=f"s{self.step}-{self.nonce}m{self._sequence}",
            trainer_id=trainer_id,
            first_sample=self.next_sample,
            samples=samples,
        )
        self._sequence += 1
        self.next_sample += samples
        self.outstanding[grant.microbatch_id] = grant
        self._outstanding_samples += samples
        self._by_trainer.setdefault(trainer_id, {})[grant.microbatch_id] = None
        return grant

    def _close(self, microbatch_id: str) -> Grant | None:
        """Take `microbatch_id` out of the outstanding ones (None if it is not one of them)."""
        grant = self.outstanding.pop(microbatch_id, None)
        if grant is not None:
            self._outstanding_samples -= grant.samples
            ids = self._by_trainer[grant.trainer_id]
            del ids[microbatch_id]
            if not ids:
                del self._by_trainer[grant.trainer_id]
        return grant

    def complete(
        self,
        microbatch_id: str,
        loss: float,
        *,
        wire_bytes: int = 0,
        retries: int = 0,
        served: Sequence[ServedCall] = (),
    ) -> bool:
        """Record a finished microbatch; False if it is not outstanding (unknown, late or repeated)."""
        grant = self._close(microbatch_id)
        if grant is None:
            return False
        self.done[microbatch_id] = grant
        self._done_samples += grant.samples
        self.losses[microbatch_id] = loss
        self.wire_bytes += wire_bytes
        self.retries += retries
        self.reports[microbatch_id] = (wire_bytes, tuple(served))
        for call in served:
            self.served_compute[call.peer_id] = (
                self.served_compute.get(call.peer_id, 0.0) + call.compute_seconds
            )
            self.served_network[call.peer_id] = (
                self.served_network.get(call.peer_id, 0.0) + call.network_seconds
            )
        return True

    def add_checks(self, calls: int, nbytes: int, seconds: float, largest_agreeing: float) -> None:
        self.check_calls += calls
        self.check_bytes += nbytes
        self.check_seconds += seconds
        self.check_largest_agreeing = max(self.check_largest_agreeing, largest_agreeing)

    def add_cache(self, hits: int, misses: int) -> None:
        self.cache_hits += hits
        self.cache_misses += misses

    def fail(self, microbatch_id: str) -> Grant | None:
        """Record a microbatch its trainer gave up on. Its samples are not granted again this step:
        some stages may already hold their gradients, and seeing them twice would double-count."""
        grant = self._close(microbatch_id)
        if grant is not None:
            self.failed[microbatch_id] = grant
            self._failed_samples += grant.samples
        return grant

    def fail_trainer(self, trainer_id: int) -> list[Grant]:
        """A trainer vanished: everything it had in flight has failed."""
        ids = list(self._by_trainer.get(trainer_id, ()))
        return [g for g in (self.fail(mb) for mb in ids) if g is not None]

    def holds_outstanding(self, trainer_id: int) -> bool:
        """Whether `trainer_id` has a microbatch in flight (granted, neither finished nor failed)."""
        return trainer_id in self._by_trainer

    def ready_for_barrier(self) -> bool:
        return not self.outstanding and self._done_samples >= self.target_batch_size

    def samples_of(self, microbatch_ids: list[str]) -> int:
        """Samples of the granted microbatches among `microbatch_ids` (each counted once)."""
        total = 0
        for mb in set(microbatch_ids):
            grant = self.done.get(mb) or self.failed.get(mb) or self.outstanding.get(mb)
            if grant is not None:
                total += grant.samples
        return total

    def summarize(self, counted_per_stage: list[list[str]]) -> StepSummary:
        """Close the books: `counted_per_stage[s]` lists the microbatch ids stage s averaged."""
        sent = self.samples_sent
        tallies = []
        for ids in counted_per_stage:
            counted = self.samples_of(ids)
            tallies.append(StageTally(counted=counted, lost=sent - counted))
        total = self.samples_done
        loss = sum(self.losses[mb] * self.done[mb].samples for mb in self.done) / total if total else None
        return StepSummary(
            step=self.step, loss=loss, samples_sent=sent, samples_done=total, stage_tallies=tallies
        )

    def next_book(self) -> StepBook:
        return StepBook(
            step=self.step + 1,
            target_batch_size=self.target_batch_size,
            microbatch_size=self.microbatch_size,
            next_sample=self.next_sample,
            nonce=self.nonce,
            check_largest_agreeing=self.check_largest_agreeing,
        )
