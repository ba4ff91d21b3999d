// What every chart on the run page offers besides the plot: a CSV download of exactly the data
// drawn, a reset for a drag-zoom, and a summary in words (visually hidden) for screen readers.
import { useMemo } from "react";
import type uPlot from "uplot";
import { describeSummary, summarize } from "../chartSummary";
import { csvFileName, toCsv } from "../csv";

/** Whether the x scale shows less than all of the data: a drag zoomed in. `pad`: how far the
 * unzoomed scale reaches past the first and last x (a bar chart's half bar). */
export function zoomedIn(u: uPlot, pad = 0): boolean {
  const xs = u.data[0];
  const { min, max } = u.scales.x;
  return (
    xs.length > 1 && min !== undefined && max !== undefined && (min > xs[0] - pad || max < xs[xs.length - 1] + pad)
  );
}

export function downloadCsv(title: string, headers: string[], columns: (number | null)[][]): void {
  const blob = new Blob([toCsv(headers, columns)], { type: "text/csv" });
  const url = URL.createObjectURL(blob);
  const link = document.createElement("a");
  link.href = url;
  link.download = csvFileName(title);
  document.body.appendChild(link);
  link.click();
  link.remove();
  URL.revokeObjectURL(url);
}

export interface SummaryProps {
  title: string;
  xLabel: string;
  /** [x, y0, y1, ...] */
  data: (number | null)[][];
  labels: string[];
  format: (value: number) => string;
  formatX: (x: number) => string;
}

/** Each series' latest value, range and trend as a sentence and a table only screen readers see. */
export function ChartSummary({ title, xLabel, data, labels, format, formatX }: SummaryProps) {
  const summaries = useMemo(
    () => labels.map((label, i) => ({ label, summary: summarize(data[0] ?? [], data[i + 1] ?? []) })),
    [data, labels],
  );
  return (
    <div className="visually-hidden" data-testid="chart-summary">
      <p>{summaries.map(({ label, summary }) => describeSummary(label, summary, format, formatX)).join(" ")}</p>
      <table>
        <caption>
          {title}: summary by series over {xLabel}
        </caption>
        <thead>
          <tr>
            <th scope="col">Series</th>
            <th scope="col">Latest</th>
            <th scope="col">Min</th>
            <th scope="col">Max</th>
            <th scope="col">Trend</th>
          </tr>
        </thead>
        <tbody>
          {summaries.map(({ label, summary }) => (
            <tr key={label}>
              <th scope="row">{label}</th>
              <td>{summary.latest === null ? "—" : format(summary.latest)}</td>
              <td>{summary.min === null ? "—" : format(summary.min)}</td>
              <td>{summary.max === null ? "—" : format(summary.max)}</td>
              <td>{summary.trend ?? "—"}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}
