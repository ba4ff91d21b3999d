import { useEffect, useMemo, useRef, useState } from "react";
import uPlot from "uplot";
import { stackedColumns } from "../stepTime";
import { ChartSummary, downloadCsv, zoomedIn } from "./ChartTools";

export interface StackedChartProps {
  title: string;
  /** [x, part0, part1, ...] columns; the parts are stacked bottom (part0) to top. */
  data: (number | null)[][];
  /** Bumped whenever `data` changed in place. */
  version: number;
  label: string;
  parts: readonly { label: string; color: string }[];
  testId?: string;
  height?: number;
  format: (value: number | null) => string;
}

/** Per-step stacked bars of parts that add up to a whole (uPlot, like `Chart`). Each part is drawn as
 * its running total, tallest first: uPlot paints series in order, so each shorter bar covers the one
 * before it and what shows is the stack. */
export function StackedChart({ title, data, version, label, parts, testId, height = 240, format }: StackedChartProps) {
  const container = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);
  const raw = useRef(data);
  raw.current = data;
  const totals = useMemo(() => stackedColumns(data), [data, version]);
  const [zoomed, setZoomed] = useState(false);

  useEffect(() => {
    const element = container.current;
    if (!element) return;
    const bars = uPlot.paths.bars?.({ size: [0.9, 24] });
    const options: uPlot.Options = {
      width: Math.max(200, element.clientWidth),
      height,
      scales: {
        // Half a step either side, so the first and last bars are whole.
        x: { time: false, range: (_u, min, max) => [min - 0.5, max + 0.5] },
        y: { range: (_u, _min, max) => [0, max > 0 ? max : 1] },
      },
      // Drag across the plot to zoom into those steps; "Reset zoom" undoes it.
      cursor: { drag: { x: true, y: false } },
      hooks: {
        setScale: [
          (u: uPlot, key: string) => {
            // The bars' scale reaches half a step past the first and last.
            if (key === "x") setZoomed(zoomedIn(u, 0.5));
          },
        ],
      },
      axes: [{ label: "step" }, { label, size: 80, values: (_u, splits) => splits.map(format) }],
      series: [
        { label: "step" },
        ...parts
          .map((part, index) => ({ part, index }))
          .reverse()
          .map(({ part, index }) => ({
            label: part.label,
            stroke: part.color,
            fill: part.color,
            width: 0,
            paths: bars,
            points: { show: false },
            // The legend shows the part itself, not the running total it is drawn as.
            value: (_u: uPlot, _total: number, _series: number, idx: number | null) =>
              idx === null ? "—" : format(raw.current[index + 1]?.[idx] ?? null),
          })),
      ],
      legend: { show: true },
    };
    plot.current = new uPlot(options, totals as uPlot.AlignedData, element);
    const observer = new ResizeObserver(() => {
      plot.current?.setSize({ width: Math.max(200, element.clientWidth), height });
    });
    observer.observe(element);
    return () => {
      observer.disconnect();
      plot.current?.destroy();
      plot.current = null;
    };
    // Created once; data updates go through setData below.
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [label, height, format, parts]);

  useEffect(() => {
    plot.current?.setData(totals as uPlot.AlignedData, !zoomed);
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [totals]);

  const resetZoom = () => {
    const u = plot.current;
    if (u) u.setData(u.data, true);
    setZoomed(false);
  };
  const labels = parts.map((part) => part.label);
  const points = data[0]?.length ?? 0;
  return (
    <figure className="chart" data-testid={testId} data-points={points}>
      <figcaption>{title}</figcaption>
      <div className="chart-tools" role="group" aria-label={`${title} chart options`}>
        <button type="button" className="secondary small" disabled={!zoomed} onClick={resetZoom}>
          Reset zoom
        </button>
        <button
          type="button"
          className="secondary small"
          data-testid="csv-export"
          onClick={() => downloadCsv(title, ["step", ...labels], data)}
        >
          CSV
        </button>
      </div>
      <div ref={container} className="chart-canvas" />
      {points === 0 && <div className="chart-empty muted">No steps yet.</div>}
      <ChartSummary
        title={title}
        xLabel="step"
        data={data}
        labels={labels}
        format={(v) => format(v)}
        formatX={(x) => `step ${x}`}
      />
    </figure>
  );
}
