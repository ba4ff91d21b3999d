import { useEffect, useRef } from "react";
import uPlot from "uplot";

export interface ChartProps {
  title: string;
  /** [x, y] columns; y may hold nulls (gaps). */
  data: (number | null)[][];
  /** Bumped whenever `data` changed in place. */
  version: number;
  label: string;
  color: string;
  testId?: string;
  height?: number;
  /** How the axis and the legend write a value (e.g. bytes in KiB/MiB); plain numbers without it. */
  format?: (value: number | null) => string;
}

/** A single-series line chart over steps (uPlot: small, fast, canvas-based). */
export function Chart({ title, data, version, label, color, testId, height = 220, format }: ChartProps) {
  const container = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);

  useEffect(() => {
    const element = container.current;
    if (!element) return;
    const options: uPlot.Options = {
      width: Math.max(200, element.clientWidth),
      height,
      scales: { x: { time: false } },
      axes: [
        { label: "step" },
        format ? { label, size: 80, values: (_u, splits) => splits.map(format) } : { label, size: 60 },
      ],
      series: [
        { label: "step" },
        {
          label,
          stroke: color,
          width: 2,
          spanGaps: true,
          points: { size: 4 },
          // uPlot passes null where the legend has no point under the cursor.
          ...(format ? { value: (_u: uPlot, value: number | null) => format(value) } : {}),
        },
      ],
      legend: { show: true },
    };
    plot.current = new uPlot(options, data as uPlot.AlignedData, element);
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
  }, [label, color, height, format]);

  useEffect(() => {
    plot.current?.setData(data as uPlot.AlignedData);
  }, [data, version]);

  const points = data[0]?.length ?? 0;
  return (
    <figure className="chart" data-testid={testId} data-points={points}>
      <figcaption>{title}</figcaption>
      <div ref={container} className="chart-canvas" />
      {points === 0 && <div className="chart-empty muted">No steps yet.</div>}
    </figure>
  );
}
