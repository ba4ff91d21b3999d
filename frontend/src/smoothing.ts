// Exponential moving average for noisy chart series (loss jumps step to step). Gaps stay gaps: a
// null is not a zero, and the average carries over it to the next known value.

/** EMA with weight `alpha` (0..1] on each new value; alpha 1 returns the values unchanged. Bias is
 * corrected the way TensorBoard does, so the first points are not pulled towards zero. */
export function ema(values: readonly (number | null)[], alpha: number): (number | null)[] {
  if (!(alpha > 0 && alpha <= 1)) throw new Error(`alpha must be in (0, 1], got ${alpha}`);
  let average = 0;
  let weight = 0;
  return values.map((value) => {
    if (value === null || !Number.isFinite(value)) return null;
    average = average * (1 - alpha) + value * alpha;
    weight = weight * (1 - alpha) + alpha;
    return average / weight;
  });
}

/** Each series column of uPlot data ([x, y0, y1, ...]) smoothed; x is left alone. */
export function smoothColumns(data: readonly (number | null)[][], alpha: number): (number | null)[][] {
  const [x = [], ...series] = data;
  return [[...x], ...series.map((column) => ema(column, alpha))];
}
