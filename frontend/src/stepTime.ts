// Where a run's steps spend their time, from their per-step metrics (GET /api/runs/{id}/metrics):
// five parts that add up to one whole step, from the previous step's averaging to this one's.
// Compute is the serving peers' mean busy time while the step collected its samples, network the
// mean time their calls spent in transit; waiting is the rest of that (queueing, idle slots,
// failures); averaging runs from the barrier to every stage's round complete; the coordinator's
// part is recording, applying and opening the step.
import type { MetricOut } from "./generated/api";
import { BoundedSeries } from "./series";

export const TIME_PARTS = [
  { name: "time_compute_s", label: "compute", color: "#2563eb" },
  { name: "time_network_s", label: "network", color: "#9333ea" },
  { name: "time_waiting_s", label: "waiting on peers", color: "#f59e0b" },
  { name: "time_averaging_s", label: "averaging", color: "#16a34a" },
  { name: "time_coordinator_s", label: "coordinator", color: "#9ca3af" },
] as const;

const NAMES: readonly string[] = TIME_PARTS.map((part) => part.name);
/** Steps recorded before the network part was split out have none: their network is in waiting. */
const OPTIONAL: readonly string[] = ["time_network_s"];

export interface PartShare {
  label: string;
  color: string;
  /** Mean seconds per step. */
  seconds: number;
  /** Of the steps' whole time, 0..1. */
  share: number;
}

export interface TimeShares {
  steps: number;
  firstStep: number;
  lastStep: number;
  /** Mean seconds of a whole step. */
  stepSeconds: number;
  parts: PartShare[];
}

export class StepTimes {
  /** Per step: the parts' seconds, in TIME_PARTS order. */
  readonly series: BoundedSeries;
  private recent: { step: number; parts: number[] }[] = [];
  /** How many of the newest steps the shares are taken over. */
  readonly window: number;

  constructor(window = 50, recentLimit = 1000, olderLimit = 1000) {
    this.window = window;
    this.series = new BoundedSeries(recentLimit, olderLimit);
  }

  /** Add whole steps' metrics, oldest first; steps without the parts (recorded by a coordinator that
   * did not split them) and steps already added are skipped; a step without only the optional ones
   * has them at 0. */
  add(metrics: MetricOut[]): void {
    const steps = new Map<number, Map<string, number>>();
    for (const metric of metrics) {
      if (metric.step === null || !NAMES.includes(metric.name)) continue;
      const values = steps.get(metric.step) ?? new Map<string, number>();
      values.set(metric.name, metric.value);
      steps.set(metric.step, values);
    }
    for (const [step, values] of [...steps].sort(([a], [b]) => a - b)) {
      if (NAMES.some((name) => !values.has(name) && !OPTIONAL.includes(name))) continue;
      const parts = NAMES.map((name) => values.get(name) ?? 0);
      if (!this.series.push({ step, values: parts })) continue;
      this.recent.push({ step, parts });
      if (this.recent.length > this.window) this.recent.shift();
    }
  }

  /** Each part's mean and share over the newest `window` steps; null before any step. */
  shares(): TimeShares | null {
    const steps = this.recent.length;
    if (steps === 0) return null;
    const sums = TIME_PARTS.map((_, i) => this.recent.reduce((sum, s) => sum + s.parts[i], 0));
    const total = sums.reduce((a, b) => a + b, 0);
    return {
      steps,
      firstStep: this.recent[0].step,
      lastStep: this.recent[steps - 1].step,
      stepSeconds: total / steps,
      parts: TIME_PARTS.map((part, i) => ({
        label: part.label,
        color: part.color,
        seconds: sums[i] / steps,
        share: total > 0 ? sums[i] / total : 0,
      })),
    };
  }
}

/** [x, part0, part1, ...] as [x, total of all parts, total without the top part, ..., part0]: the
 * running totals a stacked chart draws, tallest first. */
export function stackedColumns(data: (number | null)[][]): (number | null)[][] {
  const [x = [], ...parts] = data;
  const totals = parts.map((_, top) =>
    x.map((_, i) => parts.slice(0, parts.length - top).reduce<number>((sum, part) => sum + (part[i] ?? 0), 0)),
  );
  return [x, ...totals];
}
