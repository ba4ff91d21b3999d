"""How long a step waits for a peer still copying its stage.

A peer copying a stage holds the state of the step it was assigned at. If the step's averaging
starts before the copy ends, the copy is one update behind when it arrives, and the peer must copy
again at the next step. So a step's averaging waits a while (`JOIN_HOLD_S`) for copies under way:
a joiner whose copy takes a little longer than a step collects gets in.

A copy that arrived behind once is not waited for again. Its peer's copies take longer than a step
collects plus the wait (a 184 MB head stage over a 20 Mbit/s link takes over a minute; a swarm of
a hundred collects a step in half that), and waiting for each of them held every step, and every
rebalancing decision, for the whole wait, for as long as the peer kept copying. The simulator
showed both (`python -m sim run churn-100 --lifetime none`: a peer copying the head stage at every
step for four simulated hours, no decision made after its first copy, 13 samples/s where the
swarm's best placement does 2,285). Waiting longer for such a copy, doubling the wait each time it
arrived behind, was tried in the simulator and lost more than it won: it brought peers on slow
links into the heavy stages, whose all-to-all averaging then ran at their pace (a third of the
rate in a run of slow joiners on a heavy stage). The peer copies on at no cost to the others, and
gets in whenever a step collects for long enough.

The wait is the step's, not each copy's: once its batch is in, a step waits `JOIN_HOLD_S` at most
for the copies under way, however many begin meanwhile. A large swarm begins copies all the time
(10,000 spot peers living 4 hours on average replace one every 1.4 s), so some copy was always
younger than the hold: a wait per copy never ended, and the simulator's 10,000-peer swarm averaged
one step in two hours, its second step's batch complete and waiting for 95 minutes.

Rebalancing at a step boundary does not wait for copies either. It used to skip its decision while
any copy the step would wait for was under way, and the same 10,000-peer swarm never decided once
(nor did 1,000 peers, a copy every 14 s). It decides on the ready peers, as it always did once a
copy was older than the hold; a decision comes `REBALANCE_INTERVAL_S` after the last one, so the
copies of the last decision's moves are past the hold by then anyway. Only a stage left without a
ready peer still waits for copies under way, one of which may be filling it, and for a peer already
loading that very stage a while longer (`EMPTY_STAGE_WAIT_S`). Counting a fresh
copy at its stage instead, at the peer's claimed rate, was tried in the simulator and lost: 1,000
peers trained at 40 samples/s against 51 without counting, with 4x the retries (the claims of
joiners on slow links were taken at full compute).
"""

from __future__ import annotations

JOIN_HOLD_S = 15.0
"""How long a step's averaging waits for copies under way."""
EMPTY_STAGE_WAIT_S = 120.0
"""How long a stage without a ready peer waits for a peer loading it before another is moved in.
A peer moved in would have to load the same stage, from the same sources, no sooner; only a loader
that is stuck is worth replacing. Eight swarm-ref peers started at once on two cores took longer
than `JOIN_HOLD_S` to build their stages, and the run's first decision moved a third peer into
stage 0 while its two peers were still building it (docs/benchmarks.md, issue 13)."""


def join_hold_s(arrived_behind: int) -> float:
    """Seconds a step waits for a copy of a peer whose last `arrived_behind` copies in a row
    arrived after the step they were for had moved on."""
    if arrived_behind < 0:
        raise ValueError(f"arrived_behind counts copies, got {arrived_behind}")
    return JOIN_HOLD_S if arrived_behind == 0 else 0.0


def holds_the_step(copying_for_s: float, arrived_behind: int) -> bool:
    """Whether a copy begun `copying_for_s` ago is still waited for."""
    return copying_for_s < join_hold_s(arrived_behind)


def barrier_waits(step_waited_s: float, copies_held: bool) -> bool:
    """Whether a step whose batch has been complete for `step_waited_s` still waits at its barrier,
    `copies_held` saying whether any copy under way holds it (`holds_the_step`)."""
    return copies_held and step_waited_s < JOIN_HOLD_S


def waits_for_loader(loading_for_s: float) -> bool:
    """Whether a stage without a ready peer still waits for a peer that began loading it
    `loading_for_s` ago, rather than have a peer moved in."""
    return loading_for_s < EMPTY_STAGE_WAIT_S
