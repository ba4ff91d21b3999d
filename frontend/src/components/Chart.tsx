import { useEffect, useMemo, useRef, useState } from "react";
import uPlot from "uplot";
import { smoothColumns } from "../smoothing";
import { ChartSummary, downloadCsv, zoomedIn } from "./ChartTools";

export interface SeriesStyle {
  label: string;
  color: string;
}

export interface ChartProps {
  title: string;
  /** [x, y0, y1, ...] columns over steps; y may hold nulls (gaps). */
  data: (number | null)[][];
  /** Bumped whenever `data` changed in place. */
  version: number;
  /** The axis label, and the series' label when `series` is not given. */
  label: string;
  color: string;
  /** One style per y column; a single series labelled `label` in `color` without it. */
  series?: SeriesStyle[];
  /** Seconds since the epoch of each x, for a wall-clock x axis; the step axis only without it. */
  times?: (number | null)[];
  testId?: string;
  height?: number;
  /** How the axis and the legend write a value (e.g. bytes in KiB/MiB); plain numbers without it. */
  format?: (value: number | null) => string;
  /** Offer the EMA smoothing toggle (noisy series such as loss). */
  smoothable?: boolean;
}

const EMA_ALPHA = 0.1;

function plainNumber(value: number | null): string {
  if (value === null || !Number.isFinite(value)) return "—";
  return Math.abs(value) >= 1000 || value === 0 ? String(Number(value.toPrecision(6))) : value.toPrecision(4);
}

/** Wall-clock columns: x replaced by each point's time, points without a time dropped. */
function onTimes(data: (number | null)[][], times: (number | null)[]): (number | null)[][] {
  const keep = times.map((t, i) => (t === null || data[0]?.[i] === undefined ? -1 : i)).filter((i) => i >= 0);
  return [keep.map((i) => times[i]), ...data.slice(1).map((column) => keep.map((i) => column[i] ?? null))];
}

/** Log scale cannot show zero or below: those become gaps. */
function positive(data: (number | null)[][]): (number | null)[][] {
  return [data[0], ...data.slice(1).map((column) => column.map((v) => (v !== null && v > 0 ? v : null)))];
}

/** A line chart (uPlot: small, fast, canvas-based) with smoothing, log scale, a wall-clock axis,
 * drag-to-zoom, CSV export and a text summary for screen readers. */
export function Chart(props: ChartProps) {
  const { title, data, version, label, color, times, testId, height = 220, smoothable = false } = props;
  const format = props.format;
  const styles = useMemo(() => props.series ?? [{ label, color }], [props.series, label, color]);
  const container = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);
  const [smooth, setSmooth] = useState(false);
  const [log, setLog] = useState(false);
  const [wallClock, setWallClock] = useState(false);
  const [zoomed, setZoomed] = useState(false);
  const clock = wallClock && times !== undefined;

  const shown = useMemo(() => {
    let columns = clock ? onTimes(data, times) : data;
    if (smooth) columns = smoothColumns(columns, EMA_ALPHA);
    return log ? positive(columns) : columns;
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [data, version, times, clock, smooth, log]);
  const latest = useRef(shown);
  latest.current = shown;

  useEffect(() => {
    const element = container.current;
    if (!element) return;
    const write = format ?? plainNumber;
    const options: uPlot.Options = {
      width: Math.max(200, element.clientWidth),
      height,
      scales: { x: { time: clock }, y: log ? { distr: 3 } : {} },
      // Drag across the plot to zoom into those steps; "Reset zoom" (or a double click) undoes it.
      cursor: { drag: { x: true, y: false } },
      axes: [
        { label: clock ? "time" : "step" },
        // A log axis leaves out some ticks as null.
        { label, size: format ? 80 : 60, values: (_u, splits) => splits.map((v) => (v === null ? "" : write(v))) },
      ],
      series: [
        { label: clock ? "time" : "step" },
        ...styles.map((style) => ({
          label: style.label,
          stroke: style.color,
          width: 2,
          spanGaps: true,
          points: { size: 4 },
          // uPlot passes null where the legend has no point under the cursor.
          value: (_u: uPlot, value: number | null) => write(value),
        })),
      ],
      hooks: {
        setScale: [
          (u: uPlot, key: string) => {
            if (key === "x") setZoomed(zoomedIn(u));
          },
        ],
      },
      legend: { show: true },
    };
    plot.current = new uPlot(options, latest.current as uPlot.AlignedData, element);
    setZoomed(false);
    const observer = new ResizeObserver(() => {
      plot.current?.setSize({ width: Math.max(200, element.clientWidth), height });
    });
    observer.observe(element);
    return () => {
      observer.disconnect();
      plot.current?.destroy();
      plot.current = null;
    };
  }, [label, styles, height, format, clock, log]);

  useEffect(() => {
    // A zoomed chart keeps its range as new steps arrive; an unzoomed one follows them.
    plot.current?.setData(shown as uPlot.AlignedData, !zoomed);
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [shown]);

  const resetZoom = () => {
    const u = plot.current;
    if (u) u.setData(u.data, true);
    setZoomed(false);
  };

  const xLabel = clock ? "time" : "step";
  const headers = [clock ? "time_unix_s" : "step", ...styles.map((s) => (smooth ? `${s.label} (EMA)` : s.label))];
  const formatValue = (value: number) => (format ?? plainNumber)(value);
  const formatX = (x: number) => (clock ? new Date(x * 1000).toLocaleTimeString() : `step ${x}`);
  const points = data[0]?.length ?? 0;
  return (
    <figure className="chart" data-testid={testId} data-points={points}>
      <figcaption>{title}</figcaption>
      <div className="chart-tools" role="group" aria-label={`${title} chart options`}>
        {smoothable && (
          <label className="inline">
            <input type="checkbox" checked={smooth} onChange={(e) => setSmooth(e.target.checked)} /> smooth (EMA)
          </label>
        )}
        <label className="inline">
          <input type="checkbox" checked={log} onChange={(e) => setLog(e.target.checked)} /> log scale
        </label>
        {times !== undefined && (
          <label className="inline">
            <input type="checkbox" checked={wallClock} onChange={(e) => setWallClock(e.target.checked)} /> wall clock
          </label>
        )}
        <button type="button" className="secondary small" disabled={!zoomed} onClick={resetZoom}>
          Reset zoom
        </button>
        <button
          type="button"
          className="secondary small"
          data-testid="csv-export"
          onClick={() => downloadCsv(title, headers, shown)}
        >
          CSV
        </button>
      </div>
      <div ref={container} className="chart-canvas" />
      {points === 0 && <div className="chart-empty muted">No steps yet.</div>}
      <ChartSummary
        title={title}
        xLabel={xLabel}
        data={shown}
        labels={styles.map((s) => s.label)}
        format={formatValue}
        formatX={formatX}
      />
    </figure>
  );
}
