// Where a step's time goes: compute, network, waiting on peers, averaging and the coordinator,
// stacked per step, with the same split as a sentence and a table over the newest steps for those
// who do not read the chart.
import { useMemo } from "react";
import { formatSeconds } from "../format";
import { StepTimes, TIME_PARTS } from "../stepTime";
import { StackedChart } from "./StackedChart";

function percent(share: number): string {
  return `${Math.round(share * 100)}%`;
}

export function StepTimePanel(props: { times: StepTimes; version: number }) {
  const { times, version } = props;
  const data = useMemo(() => times.series.columns(TIME_PARTS.length), [times, version]);
  const shares = times.shares();
  const span =
    shares === null
      ? ""
      : shares.steps === 1
        ? `step ${shares.firstStep}`
        : `the last ${shares.steps} steps (${shares.firstStep}–${shares.lastStep})`;

  return (
    <div data-testid="step-time">
      <h2>Where a step's time goes</h2>
      <p className="muted">
        Each step, from the previous step's averaging to its own: compute is the serving peers' mean busy
        time while the step collected its samples, network the mean time their calls spent in transit,
        waiting the rest of that (queueing, idle slots, failed microbatches), averaging runs until every
        stage's round is done, and the coordinator's part is recording, applying and opening the step.
      </p>
      <p data-testid="step-time-summary">
        {shares === null
          ? "No step has a time split yet."
          : `Over ${span} a step took ${formatSeconds(shares.stepSeconds)}: ` +
            shares.parts.map((p) => `${percent(p.share)} ${p.label}`).join(", ") +
            "."}
      </p>
      <StackedChart
        title="Time per step"
        label="time"
        data={data}
        version={version}
        parts={TIME_PARTS}
        format={formatSeconds}
        testId="step-time-chart"
      />
      {shares !== null && (
        <table className="table compact" data-testid="step-time-table">
          <caption className="muted">Mean per step over {span}</caption>
          <thead>
            <tr>
              <th scope="col">Part</th>
              <th scope="col">Time</th>
              <th scope="col">Share</th>
            </tr>
          </thead>
          <tbody>
            {shares.parts.map((p) => (
              <tr key={p.label}>
                <th scope="row">
                  <span className="swatch" style={{ background: p.color }} aria-hidden="true" /> {p.label}
                </th>
                <td>{formatSeconds(p.seconds)}</td>
                <td>{percent(p.share)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </div>
  );
}
