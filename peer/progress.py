"""What the participant's terminal shows, as plain functions of numbers: step lines with their ETA,
durations and download bars. No clocks or printing here (`peer/console.py` does that)."""

from __future__ import annotations

from dataclasses import dataclass

BAR_WIDTH = 24


def format_duration(seconds: float) -> str:
    """A duration as a person reads it: '45s', '3m05s', '2h07m', '3d04h'."""
    total = max(0, round(seconds))
    days, rest = divmod(total, 86_400)
    hours, rest = divmod(rest, 3_600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def format_size(n: float) -> str:
    """Bytes in the units a download is read in (decimal, as network speeds are)."""
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000:
            return f"{int(n)} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def transfer_rate(done: int, seconds: float) -> float | None:
    """Bytes per second of `done` bytes moved in `seconds`; None before any have (nothing to show)."""
    return done / seconds if done > 0 and seconds > 0 else None


def progress_bar(done: int, total: int | None, width: int = BAR_WIDTH, *, rate: float | None = None) -> str:
    """'[##########..............]  42%  1.2 MB / 2.9 MB  3.4 MB/s'; without a known total, only the bytes
    so far; the rate (bytes per second) where one is given."""
    speed = "" if rate is None else f"  {format_size(rate)}/s"
    if not total:
        return f"{format_size(done)} so far{speed}"
    share = min(1.0, max(0.0, done / total))
    filled = int(share * width)
    return (
        f"[{'#' * filled}{'.' * (width - filled)}] {100 * share:3.0f}%  "
        f"{format_size(done)} / {format_size(total)}{speed}"
    )


@dataclass(frozen=True)
class StepMark:
    """A committed step (0-based, as on the wire) and when this peer heard of it (monotonic seconds)."""

    step: int
    at: float


def eta_seconds(first: StepMark, latest: StepMark, max_steps: int | None) -> float | None:
    """Seconds until the run's last step at the pace of the steps seen between `first` and `latest`;
    None while there is no pace yet (fewer than two marks) or when the run has no last step."""
    if max_steps is None or latest.step <= first.step or latest.at <= first.at:
        return None
    per_step = (latest.at - first.at) / (latest.step - first.step)
    return max(0, max_steps - (latest.step + 1)) * per_step


def eta_text(eta: float | None, max_steps: int | None) -> str:
    if max_steps is None:
        return "ETA none (the run trains until its owner stops it)"
    if eta is None:
        return "ETA measuring…"
    return f"ETA {format_duration(eta)}"


def step_text(step: int, max_steps: int | None) -> str:
    """'step 3/100' for the 0-based committed `step` 2 of a 100-step run; '3/∞' without a last step."""
    return f"step {step + 1}/{'∞' if max_steps is None else max_steps}"


def step_line(
    *,
    step: int,
    max_steps: int | None,
    eta: float | None,
    loss: float | None,
    stage: int | None,
    stage_rate: float,
    samples_done: int,
    retries: int,
    in_flight: int,
    kept_backwards: str,
) -> str:
    """One terminal line per committed step: where the run is, when it ends, and this peer's part."""
    loss_text = "-" if loss is None else f"{loss:.4f}"
    part = "training only" if stage is None else f"stage {stage} at {stage_rate:.1f} samples/s"
    return (
        f"{step_text(step, max_steps)}  loss {loss_text}  {eta_text(eta, max_steps)}  "
        f"{part}  trained {samples_done} samples  retries {retries}  in flight {in_flight}  "
        f"kept backwards {kept_backwards}"
    )


class StepClock:
    """The pace of committed steps as this peer hears of them; restarted after a pause so that the time
    a run stood still does not slow its ETA."""

    def __init__(self) -> None:
        self._first: StepMark | None = None

    def committed(self, step: int, now: float, max_steps: int | None) -> float | None:
        """Record step `step` committed at `now`; the ETA of the run's end (None: not known yet)."""
        latest = StepMark(step, now)
        if self._first is None or step <= self._first.step:
            self._first = latest
        return eta_seconds(self._first, latest, max_steps)

    def restart(self) -> None:
        self._first = None
