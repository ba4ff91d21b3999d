// Throughput per stage as observed, not as claimed. A peer's `throughput` is its own benchmark
// claim; adding the claims of a stage's peers gives what the stage could serve, often several
// times what the run actually did. What a stage served is what its steps counted: each step's
// samples_counted[stage] over the step's duration, which can never exceed the run's own samples/s.
// The bottleneck is the stage working nearest its capacity (served / claimed), or one with no peers.
import type { StepOut } from "./generated/feed";

/** Samples per second each stage served in this step, capped by the step's own rate. */
export function stepStageRates(step: StepOut, numStages: number): (number | null)[] {
  if (!(step.duration_s > 0)) return Array.from({ length: numStages }, () => null);
  const whole = Math.max(0, step.samples_sent - step.samples_lost);
  return Array.from({ length: numStages }, (_, stage) => {
    const counted = step.samples_counted[stage];
    return counted === undefined ? null : Math.min(counted, whole) / step.duration_s;
  });
}

export interface StageRate {
  stage: number;
  /** Observed samples/s over the recent steps; null before any step. */
  served: number | null;
  /** The sum of its live peers' claimed rates. */
  claimed: number;
  /** served / claimed: how close to its capacity it works; null when unknown. */
  utilisation: number | null;
}

/** Each stage's served rate over `steps` (total samples counted over total time), with the claims of
 * the live peers serving it (stage -> summed claims). */
export function stageRates(steps: readonly StepOut[], numStages: number, claims: ReadonlyMap<number, number>): StageRate[] {
  const time = steps.reduce((sum, s) => sum + (s.duration_s > 0 ? s.duration_s : 0), 0);
  return Array.from({ length: numStages }, (_, stage) => {
    let counted = 0;
    for (const step of steps) {
      if (step.duration_s > 0)
        counted += Math.min(step.samples_counted[stage] ?? 0, Math.max(0, step.samples_sent - step.samples_lost));
    }
    const served = time > 0 ? counted / time : null;
    const claimed = claims.get(stage) ?? 0;
    const utilisation = served === null ? null : claimed > 0 ? served / claimed : Number.POSITIVE_INFINITY;
    return { stage, served, claimed, utilisation };
  });
}

/** The stage nearest its capacity (a stage with no live peer first); null before any step. */
export function bottleneckStage(rates: readonly StageRate[]): number | null {
  let best: StageRate | null = null;
  for (const rate of rates) {
    if (rate.utilisation === null) continue;
    if (best === null || rate.utilisation > (best.utilisation as number)) best = rate;
  }
  return best === null ? null : best.stage;
}
