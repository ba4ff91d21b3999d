// What spot checks cost a run, from its per-step metrics (GET /api/runs/{id}/metrics): the check
// calls' traffic and time per step for the charts, and their totals over the steps loaded, set
// against the pipeline's own traffic (wire_bytes counts the primary calls only, not the checks).
import type { MetricOut } from "./generated/api";
import { BoundedSeries } from "./series";

export interface CheckTotals {
  /** The first and last step loaded; null before any. */
  firstStep: number | null;
  lastStep: number | null;
  calls: number;
  bytes: number;
  seconds: number;
  /** Data-plane bytes of the same steps' primary (unchecked) calls. */
  wireBytes: number;
}

const NAMES = ["spot_check_bytes", "spot_check_seconds", "spot_check_calls", "wire_bytes"] as const;
type Name = (typeof NAMES)[number];

export class CheckCosts {
  /** Per step: [spot_check_bytes, spot_check_seconds]. */
  readonly series: BoundedSeries;
  private sums: CheckTotals = { firstStep: null, lastStep: null, calls: 0, bytes: 0, seconds: 0, wireBytes: 0 };

  constructor(recentLimit = 1000, olderLimit = 1000) {
    this.series = new BoundedSeries(recentLimit, olderLimit);
  }

  /** Add whole steps' metrics, oldest first; steps already added (a replayed page) are ignored. */
  add(metrics: MetricOut[]): void {
    const steps = new Map<number, Partial<Record<Name, number>>>();
    for (const metric of metrics) {
      if (metric.step === null || !(NAMES as readonly string[]).includes(metric.name)) continue;
      const values = steps.get(metric.step) ?? {};
      values[metric.name as Name] = metric.value;
      steps.set(metric.step, values);
    }
    for (const [step, values] of [...steps].sort(([a], [b]) => a - b)) {
      const bytes = values.spot_check_bytes ?? null;
      const seconds = values.spot_check_seconds ?? null;
      if (!this.series.push({ step, values: [bytes, seconds] })) continue;
      const sums = this.sums;
      sums.firstStep ??= step;
      sums.lastStep = step;
      sums.calls += values.spot_check_calls ?? 0;
      sums.bytes += bytes ?? 0;
      sums.seconds += seconds ?? 0;
      sums.wireBytes += values.wire_bytes ?? 0;
    }
  }

  totals(): CheckTotals {
    return { ...this.sums };
  }

  /** Check traffic as a share of the pipeline's own (0.02: 2% on top); null before any traffic. */
  extraTraffic(): number | null {
    return this.sums.wireBytes > 0 ? this.sums.bytes / this.sums.wireBytes : null;
  }
}

/**
 * A page of metrics (ordered by step) cut to whole steps: a full page may end partway through a
 * step, whose rest is on the next page, so that step is left for the next request (unless the
 * page holds nothing else). `after` is the last whole step kept, or null when none was.
 */
export function wholeSteps(
  rows: MetricOut[],
  limit: number,
): { rows: MetricOut[]; after: number | null; more: boolean } {
  const last = rows[rows.length - 1]?.step ?? null;
  if (rows.length < limit || last === null) return { rows, after: last, more: false };
  const kept = rows.filter((row) => row.step !== last);
  if (kept.length === 0) return { rows, after: last, more: true };
  return { rows: kept, after: kept[kept.length - 1].step, more: true };
}
