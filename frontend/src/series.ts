// Bounded point buffers for the charts: a run can go for days, so a page left open must not
// grow without bound. The newest `recentLimit` points are kept as they are; older ones move to a
// second buffer that is halved (neighbouring pairs averaged) whenever it fills up, so the whole
// history stays visible at a coarser resolution and memory stays below recent + older limits.

export interface Point {
  step: number;
  /** One value per series (e.g. loss, samples/s); null where unknown. */
  values: (number | null)[];
}

function mean(a: number | null, b: number | null): number | null {
  if (a === null) return b;
  if (b === null) return a;
  return (a + b) / 2;
}

export class BoundedSeries {
  private recent: Point[] = [];
  private older: Point[] = [];
  readonly recentLimit: number;
  readonly olderLimit: number;

  constructor(recentLimit = 1000, olderLimit = 1000) {
    if (recentLimit < 1 || olderLimit < 2) throw new Error("limits too small");
    this.recentLimit = recentLimit;
    this.olderLimit = olderLimit;
  }

  get size(): number {
    return this.recent.length + this.older.length;
  }

  get lastStep(): number | null {
    const last = this.recent[this.recent.length - 1] ?? this.older[this.older.length - 1];
    return last ? last.step : null;
  }

  clear(): void {
    this.recent = [];
    this.older = [];
  }

  /** Append a point; one at or before the last step is ignored (a replayed frame). */
  push(point: Point): boolean {
    const last = this.lastStep;
    if (last !== null && point.step <= last) return false;
    this.recent.push(point);
    if (this.recent.length > this.recentLimit) {
      this.older.push(this.recent.shift() as Point);
      if (this.older.length > this.olderLimit) this.older = halve(this.older);
    }
    return true;
  }

  get firstStep(): number | null {
    const first = this.older[0] ?? this.recent[0];
    return first ? first.step : null;
  }

  /** Put older history (e.g. loaded after the snapshot) in front of what is already here. */
  prepend(points: Point[]): void {
    const first = this.firstStep;
    const history = points.filter((p) => first === null || p.step < first).sort((a, b) => a.step - b.step);
    if (history.length === 0) return;
    const existing = this.older.concat(this.recent);
    this.clear();
    for (const point of history) this.push(point);
    for (const point of existing) this.push(point);
  }

  /** Columns for uPlot: [steps, series0, series1, ...]. */
  columns(seriesCount: number): (number | null)[][] {
    const points = this.older.concat(this.recent);
    const columns: (number | null)[][] = [points.map((p) => p.step)];
    for (let i = 0; i < seriesCount; i++) columns.push(points.map((p) => p.values[i] ?? null));
    return columns;
  }
}

function halve(points: Point[]): Point[] {
  const out: Point[] = [];
  for (let i = 0; i + 1 < points.length; i += 2) {
    const a = points[i];
    const b = points[i + 1];
    out.push({
      step: a.step, // a merged point sits where its span starts, so the chart still begins at step 0
      values: a.values.map((v, k) => mean(v, b.values[k] ?? null)),
    });
  }
  if (points.length % 2 === 1) out.push(points[points.length - 1]);
  return out;
}

/** Steps per second over the last `window` committed steps, from their commit times. */
export class StepRate {
  private samples: { step: number; t: number }[] = [];
  private readonly window: number;

  constructor(window = 20) {
    this.window = window;
  }

  clear(): void {
    this.samples = [];
  }

  add(step: number, timeMs: number): void {
    const last = this.samples[this.samples.length - 1];
    if (last && step <= last.step) return;
    this.samples.push({ step, t: timeMs });
    if (this.samples.length > this.window) this.samples.shift();
  }

  /** Steps per second, or null with fewer than two steps. */
  rate(): number | null {
    if (this.samples.length < 2) return null;
    const first = this.samples[0];
    const last = this.samples[this.samples.length - 1];
    const dt = (last.t - first.t) / 1000;
    return dt > 0 ? (last.step - first.step) / dt : null;
  }
}

export function formatDuration(seconds: number): string {
  if (!Number.isFinite(seconds) || seconds < 0) return "—";
  const s = Math.round(seconds);
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${s % 60}s`;
  const h = Math.floor(m / 60);
  if (h < 48) return `${h}h ${m % 60}m`;
  return `${Math.floor(h / 24)}d ${h % 24}h`;
}
