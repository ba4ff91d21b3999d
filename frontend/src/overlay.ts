// Several runs' loss curves on one chart: uPlot wants one shared x column, so each curve is laid on
// the union of all their steps, null where a run has no point there (drawn across with spanGaps).

export interface CurvePoint {
  step: number;
  loss: number;
}

export function overlayColumns(curves: readonly (readonly CurvePoint[])[]): (number | null)[][] {
  const steps = [...new Set(curves.flatMap((curve) => curve.map((p) => p.step)))].sort((a, b) => a - b);
  const index = new Map(steps.map((step, i) => [step, i]));
  const columns: (number | null)[][] = [steps];
  for (const curve of curves) {
    const column: (number | null)[] = steps.map(() => null);
    for (const point of curve) column[index.get(point.step) as number] = point.loss;
    columns.push(column);
  }
  return columns;
}

/** An SVG path through `values` in a `width` x `height` box (y grows downward), skipping nulls;
 * empty when fewer than two values are known. */
export function sparklinePath(values: readonly (number | null)[], width: number, height: number): string {
  const known = values.map((v, i) => ({ v, i })).filter((p): p is { v: number; i: number } => p.v !== null);
  if (known.length < 2) return "";
  const min = Math.min(...known.map((p) => p.v));
  const max = Math.max(...known.map((p) => p.v));
  const span = max - min || 1;
  const last = values.length - 1 || 1;
  return known
    .map((p, k) => {
      const x = (p.i / last) * width;
      const y = height - ((p.v - min) / span) * height;
      return `${k === 0 ? "M" : "L"}${x.toFixed(1)},${y.toFixed(1)}`;
    })
    .join(" ");
}
