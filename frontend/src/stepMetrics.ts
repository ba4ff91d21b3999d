// Per-step metrics charted as they are (retries, wire bytes), read from GET /api/runs/{id}/metrics:
// one point per step that has every one of the named metrics, with the time it was recorded.
import type { MetricOut } from "./generated/api";
import { BoundedSeries } from "./series";

export class MetricSeries {
  /** Per step: one value per name, then the time recorded (seconds since the epoch). */
  readonly series: BoundedSeries;
  readonly names: readonly string[];

  constructor(names: readonly string[], recentLimit = 1000, olderLimit = 1000) {
    this.names = names;
    this.series = new BoundedSeries(recentLimit, olderLimit);
  }

  /** Add whole steps' metrics, oldest first; steps missing one of the names, or added already, are skipped. */
  add(metrics: readonly MetricOut[]): void {
    const steps = new Map<number, { values: Map<string, number>; time: number }>();
    for (const metric of metrics) {
      if (metric.step === null || !this.names.includes(metric.name)) continue;
      const entry = steps.get(metric.step) ?? { values: new Map<string, number>(), time: Date.parse(metric.created_at) / 1000 };
      entry.values.set(metric.name, metric.value);
      steps.set(metric.step, entry);
    }
    for (const [step, entry] of [...steps].sort(([a], [b]) => a - b)) {
      if (entry.values.size < this.names.length) continue;
      this.series.push({ step, values: [...this.names.map((name) => entry.values.get(name) as number), entry.time] });
    }
  }

  /** [steps, name0, name1, ...] and each step's time. */
  columns(): { data: (number | null)[][]; times: (number | null)[] } {
    const columns = this.series.columns(this.names.length + 1);
    return { data: columns.slice(0, this.names.length + 1), times: columns[this.names.length + 1] };
  }
}
