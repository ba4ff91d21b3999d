// What a chart shows, in words, for those who do not see it: the latest value, the range, and the
// trend over the newer half against the older half.

export type Trend = "rising" | "falling" | "flat";

export interface SeriesSummary {
  points: number;
  latest: number | null;
  latestX: number | null;
  min: number | null;
  max: number | null;
  trend: Trend | null;
}

/** `flatWithin`: a relative change of the halves' means below this is "flat". */
export function summarize(
  x: readonly (number | null)[],
  y: readonly (number | null)[],
  flatWithin = 0.02,
): SeriesSummary {
  const known: { x: number; y: number }[] = [];
  for (let i = 0; i < y.length; i++) {
    const value = y[i];
    const at = x[i];
    if (value !== null && value !== undefined && Number.isFinite(value) && at !== null && at !== undefined)
      known.push({ x: at, y: value });
  }
  if (known.length === 0) return { points: 0, latest: null, latestX: null, min: null, max: null, trend: null };
  const ys = known.map((p) => p.y);
  const last = known[known.length - 1];
  let trend: Trend | null = null;
  if (known.length >= 4) {
    const half = Math.floor(known.length / 2);
    const mean = (values: number[]) => values.reduce((a, b) => a + b, 0) / values.length;
    const older = mean(ys.slice(0, half));
    const newer = mean(ys.slice(known.length - half));
    const scale = Math.max(Math.abs(older), Math.abs(newer), Number.EPSILON);
    const change = (newer - older) / scale;
    trend = Math.abs(change) < flatWithin ? "flat" : change > 0 ? "rising" : "falling";
  }
  return {
    points: known.length,
    latest: last.y,
    latestX: last.x,
    min: Math.min(...ys),
    max: Math.max(...ys),
    trend,
  };
}

/** "loss: latest 2.31 at step 240, min 2.30, max 9.12, falling (120 points)." */
export function describeSummary(
  label: string,
  summary: SeriesSummary,
  format: (value: number) => string,
  formatX: (x: number) => string,
): string {
  if (summary.points === 0 || summary.latest === null || summary.latestX === null) return `${label}: no data yet.`;
  const parts = [
    `latest ${format(summary.latest)} at ${formatX(summary.latestX)}`,
    `min ${format(summary.min as number)}`,
    `max ${format(summary.max as number)}`,
  ];
  if (summary.trend !== null) parts.push(summary.trend);
  return `${label}: ${parts.join(", ")} (${summary.points} point${summary.points === 1 ? "" : "s"}).`;
}
