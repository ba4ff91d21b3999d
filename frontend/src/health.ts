// A run's health as the coordinator reports it (RunDetail.health, `health` feed frames): what the
// run page's banner, the runs list's badge and the stage view's colours show. Rates and ETAs mean
// something only while the run trains; otherwise they show "—" and the banner says why.
import type { RunHealthOut, StageHealthOut } from "./generated/feed";
import { formatDuration } from "./series";

export type HealthState = RunHealthOut["state"];

const LABELS: Record<HealthState, string> = {
  training: "training",
  paused: "paused",
  stalled: "stalled",
  waiting: "waiting for peers",
  finished: "finished",
  archived: "archived",
};

export function healthLabel(state: HealthState): string {
  return LABELS[state] ?? state;
}

export function isTraining(health: RunHealthOut | null | undefined): boolean {
  return health?.state === "training";
}

/** The samples/s shown: the last step's rate while training, else nothing. */
export function shownRate(health: RunHealthOut | null | undefined, lastRate: number | null): number | null {
  return isTraining(health) ? lastRate : null;
}

/** Time left to max_steps at the recent step rate, only while training. */
export function etaText(
  health: RunHealthOut | null | undefined,
  remaining: number | null,
  stepsPerSecond: number | null,
): string {
  if (!isTraining(health)) return "—";
  if (remaining === null) return "no step limit";
  if (remaining === 0 || !stepsPerSecond) return "—";
  return formatDuration(remaining / stepsPerSecond);
}

/** The banner's sentence, or null while the run trains (no banner then). */
export function bannerText(
  health: RunHealthOut | null | undefined,
  clock: (iso: string) => string,
): string | null {
  if (!health || health.state === "training") return null;
  const since = health.since ? ` since ${clock(health.since)}` : "";
  return `${healthLabel(health.state)}: ${health.reason}${since}`;
}

export function stageHealth(health: RunHealthOut | null | undefined, stage: number): StageHealthOut | null {
  return health?.stages.find((s) => s.stage === stage) ?? null;
}
