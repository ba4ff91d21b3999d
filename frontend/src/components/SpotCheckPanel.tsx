// What checking peers' results costs this run: the spot-check calls' traffic and time, per step
// and in total, next to the share of stage calls the run checks.
import { useMemo } from "react";
import type { CheckCosts } from "../checks";
import { formatBytes, formatCount, formatSeconds, percentOf } from "../format";
import { Chart } from "./Chart";

export function SpotCheckPanel(props: { costs: CheckCosts; version: number; fraction: number }) {
  const { costs, version } = props;
  const columns = useMemo(() => costs.series.columns(2), [costs, version]);
  const bytesData = useMemo(() => [columns[0], columns[1]], [columns]);
  const secondsData = useMemo(() => [columns[0], columns[2]], [columns]);
  const totals = costs.totals();
  const extra = costs.extraTraffic();
  const steps =
    totals.firstStep === null
      ? "no steps yet"
      : totals.firstStep === totals.lastStep
        ? `step ${totals.firstStep}`
        : `steps ${totals.firstStep}–${totals.lastStep}`;

  return (
    <div data-testid="spot-checks">
      <h2>Spot checks</h2>
      <p className="muted" data-testid="spot-check-setting">
        {props.fraction > 0
          ? `${percentOf(props.fraction)}% of stage calls also go to a second peer of the stage; a mismatch is ` +
            "refereed by a third peer and the peer found wrong is banned."
          : "Off: no stage call is checked against a second peer."}
      </p>
      <div className="stats">
        <div className="stat">
          <span className="stat-label">Checked calls</span>
          <span className="stat-value" data-testid="spot-check-calls">
            {formatCount(totals.calls)}
          </span>
        </div>
        <div className="stat">
          <span className="stat-label">Check traffic</span>
          <span className="stat-value" data-testid="spot-check-bytes">
            {formatBytes(totals.bytes)}
            {extra !== null && (
              <span className="stat-note"> +{percentOf(Number(extra.toPrecision(2)))}% of pipeline</span>
            )}
          </span>
        </div>
        <div className="stat">
          <span className="stat-label">Check time</span>
          <span className="stat-value" data-testid="spot-check-seconds">
            {formatSeconds(totals.seconds)}
          </span>
        </div>
      </div>
      <p className="muted">Totals over {steps}; the pipeline's own traffic does not include the checks.</p>
      <div className="grid-2">
        <Chart
          title="Spot-check traffic per step"
          label="bytes"
          color="#d97706"
          data={bytesData}
          version={version}
          format={formatBytes}
          testId="spot-check-bytes-chart"
        />
        <Chart
          title="Spot-check time per step"
          label="time"
          color="#7c3aed"
          data={secondsData}
          version={version}
          format={formatSeconds}
          testId="spot-check-seconds-chart"
        />
      </div>
    </div>
  );
}
