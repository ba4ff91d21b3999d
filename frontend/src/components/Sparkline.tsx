// A run's loss as a tiny line in the runs list (GET /api/runs/{id}/loss-curve), with its first and
// last values in words for screen readers.
import { useEffect, useState } from "react";
import { call, client } from "../api";
import type { LossPoint } from "../generated/api";
import { formatNumber } from "../format";
import { sparklinePath } from "../overlay";

const WIDTH = 80;
const HEIGHT = 20;
const POINTS = 32;

export function LossSparkline({ runId, step }: { runId: number; step: number }) {
  const [curve, setCurve] = useState<LossPoint[] | null>(null);
  useEffect(() => {
    let stopped = false;
    call(client.GET("/api/runs/{run_id}/loss-curve", { params: { path: { run_id: runId }, query: { points: POINTS } } }))
      .then((points) => {
        if (!stopped) setCurve(points);
      })
      .catch(() => undefined); // the list still shows without it
    return () => {
      stopped = true;
    };
  }, [runId, step]);
  if (curve === null || curve.length < 2) return <span className="muted">—</span>;
  const first = curve[0];
  const last = curve[curve.length - 1];
  const label = `loss from ${formatNumber(first.loss)} at step ${first.step} to ${formatNumber(last.loss)} at step ${last.step}`;
  return (
    <svg
      className="sparkline"
      width={WIDTH}
      height={HEIGHT}
      viewBox={`0 0 ${WIDTH} ${HEIGHT}`}
      role="img"
      aria-label={label}
      data-testid="loss-sparkline"
    >
      <title>{label}</title>
      <path d={sparklinePath(curve.map((p) => p.loss), WIDTH, HEIGHT)} fill="none" stroke="#2563eb" strokeWidth="1.5" />
    </svg>
  );
}
